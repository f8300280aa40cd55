"""The local-model building blocks: frequency oracle, LDP-AVG and selection reports.

Privacy is tested on one user's report alone (the local guarantee), on the
worst-case pair of inputs of that user, through the real randomizer. Each
test has an under-noised mutant (halved sensitivity, or doubled epsilon for
randomized response) that the same test must catch; claims are computed
from the test's own worst-case distances, never from the seam the mutant
changes.
"""

import decimal
import math
from fractions import Fraction

import numpy as np
import pytest

from dp_stats import epsilon_lower_bound, event_counts, mu_lower_bound
from row_blocks import in_blocks
from skdpcluster import mechanisms
from skdpcluster.cluster import _stable_init
from skdpcluster.cluster._stable_init import GridInitializer
from skdpcluster.local import (
    AverageRound,
    BallRegions,
    CostRound,
    GridRegions,
    frequency_error_bound,
    frequency_estimates,
    server_aggregate,
    user_randomizer,
)
from skdpcluster.local import _ldp
from skdpcluster.mechanisms import analytic_gaussian_sigma, randomized_response

REAL = pytest.param(1.0, True, id="real")
HALF = pytest.param(0.5, False, id="mutant-half-sensitivity")


def _ball_round(epsilon=2.0, delta=1e-5):
    regions = BallRegions(np.array([[-4.0], [4.0]]), np.array([2.0, 2.0]))
    return AverageRound("core", regions, epsilon, delta, np.zeros(1), 10.0)


def _reports(row, public_round, n_users, seed):
    """Reports of ``n_users`` users who all hold ``row`` (each randomizes independently)."""
    rows = np.repeat(np.asarray(row, dtype=float)[None, :], n_users, axis=0)
    return _ldp._randomize_rows(rows, public_round, np.random.default_rng(seed))[0]


# ---------------------------------------------------------------------------
# Randomized response / frequency oracle
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n_values", [2, 5, 65])
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 4.0])
def test_randomized_response_exact_privacy_loss(n_values, epsilon):
    """Every report has probability p or q with p/q = e^epsilon exactly, summing to 1."""
    p, q = _ldp._rr_probabilities(n_values, epsilon)
    assert p / q == pytest.approx(math.exp(epsilon), rel=1e-12)
    assert p + (n_values - 1) * q == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("factor, should_pass", [
    pytest.param(1.0, True, id="real"),
    pytest.param(2.0, False, id="mutant-double-epsilon"),
])
def test_region_index_report_is_ldp(monkeypatch, factor, should_pass):
    """The region-index part of a user's report is (epsilon/2)-DP (Clopper-Pearson bound).

    Worst case: the user is in region 0 or outside every region. The mutant
    randomizes with twice the claimed epsilon.
    """
    original = mechanisms._rr_replace_probability
    monkeypatch.setattr(mechanisms, "_rr_replace_probability",
                        lambda epsilon, n_values: original(factor * epsilon, n_values))
    public_round = _ball_round(epsilon=2.0)
    n_users = 200_000
    a = _reports([-4.0], public_round, n_users, seed=1)[:, -1].astype(int)
    b = _reports([0.0], public_round, n_users, seed=2)[:, -1].astype(int)
    counts_a, counts_b = np.bincount(a, minlength=3), np.bincount(b, minlength=3)
    bound = epsilon_lower_bound(counts_a, n_users, counts_b, n_users)
    claim = 0.5 * public_round.epsilon
    assert (bound <= claim) is should_pass, (bound, claim)
    if should_pass:
        assert bound >= 0.9 * claim  # the test has the power to see the whole loss


def _generator_whose_next_uniform_is_zero():
    """A real PCG64 generator set to the state whose next ``random()`` is exactly 0.0.

    PCG64 steps its 128-bit state (s -> s * MULT + inc) and outputs the
    rotated xor of the new state's halves: equal halves give 0.
    """
    multiplier, modulus, inc, half = 47026247687942121848144207491837523525, 2**128, 2**64 + 1, 12345
    state = ((half << 64 | half) - inc) * pow(multiplier, -1, modulus) % modulus
    bit_generator = np.random.PCG64()
    bit_generator.state = {"bit_generator": "PCG64", "state": {"state": state, "inc": inc},
                           "has_uint32": 0, "uinteger": 0}
    return np.random.Generator(bit_generator)


@pytest.mark.parametrize("epsilon", [1.0, 38.0, 76.0, 400.0, 800.0])
def test_randomized_response_never_sends_the_value_in_the_clear(epsilon):
    """Review RB-06: the lowest uniform draw replaces the value, at every epsilon.

    The truth was kept when U < p: p rounds to 1.0 from epsilon of about 37
    (m = 3), and every report was the truth while the ledger said epsilon.
    The replacement probability must be at least (m - 1)/(e^epsilon + m - 1) > 0:
    the draw U = 0 (probability 2^-53) replaces.
    """
    rng = _generator_whose_next_uniform_is_zero()
    report, event = randomized_response(0, n_values=3, epsilon=epsilon, rng=rng)
    assert report != 0
    assert event.epsilon == epsilon


@pytest.mark.parametrize("n_values", [2, 3, 17, 65, 2**20])
@pytest.mark.parametrize("epsilon", [1e-12, 1e-3, 0.5, 1.0, 4.0, 30.0, 38.0, 300.0, 699.0, 701.0])
def test_replacement_probability_is_at_least_the_exact_one(n_values, epsilon):
    """The rounded-up replacement probability is >= the exact (m-1)/(e^eps + m - 1), within 2^-47."""
    decimal.getcontext().prec = 80
    growth = decimal.Decimal(epsilon).exp()
    exact = decimal.Decimal(n_values - 1) / (growth + n_values - 1)
    rounded = decimal.Decimal(mechanisms._rr_replace_probability(epsilon, n_values))
    assert rounded >= exact
    assert rounded <= exact * (1 + decimal.Decimal(2) ** -47) or rounded <= decimal.Decimal(2) ** -53


def test_randomized_response_refuses_an_epsilon_below_the_draws_resolution():
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="epsilon=1e-15 is too small for randomized response"):
        randomized_response(np.array([0]), n_values=3, epsilon=1e-15, rng=rng)
    assert rng.bit_generator.state == state


def test_frequency_oracle_is_unbiased_and_within_its_bound():
    """Mean of 400 estimates within 4 standard errors of the truth; the bound always holds."""
    truth = np.array([600, 300, 100, 0])
    values = np.repeat(np.arange(4), truth)
    rng = np.random.default_rng(0)
    epsilon, beta = 1.0, 0.05
    bound = frequency_error_bound(truth.sum(), n_values=4, epsilon=epsilon, beta=beta)
    estimates = []
    for _ in range(400):
        reports, _ = randomized_response(values, n_values=4, epsilon=epsilon, rng=rng)
        estimates.append(frequency_estimates(np.bincount(reports, minlength=4), truth.sum(),
                                             n_values=4, epsilon=epsilon))
    estimates = np.array(estimates)
    standard_error = estimates.std(axis=0) / math.sqrt(len(estimates))
    assert np.all(np.abs(estimates.mean(axis=0) - truth) <= 4 * standard_error)
    assert np.mean(np.max(np.abs(estimates - truth), axis=1) > bound) <= beta


def test_frequency_bound_beats_theorem_6_2_for_two_values():
    n, epsilon, beta = 10_000, 0.5, 0.05
    ours = frequency_error_bound(n, n_values=2, epsilon=epsilon, beta=beta)
    assert ours < 3.0 / epsilon * math.sqrt(n * math.log(4.0 / beta))


# ---------------------------------------------------------------------------
# LDP-AVG block vector and selection reports (Gaussian)
# ---------------------------------------------------------------------------


def _own_block_noise_only(real):
    """Mutant of ``_ldp._randomize_rows``: the other blocks are sent as exact zeros (RB-08).

    The user's own block carries the calibrated noise, so every coordinate of
    that block is distributed as in the real report; the noise-free zeros of
    the other blocks reveal the region.
    """
    def randomize(X, public_round, rng):
        reports, events = real(X, public_round, rng)
        regions = public_round.regions
        index, _ = regions.locate(_ldp._clip_rows(X, public_round))
        own = np.zeros((len(X), regions.n_regions + 1, X.shape[1]), dtype=bool)
        own[np.arange(len(X)), index] = True
        own = own[:, :regions.n_regions].reshape(len(X), -1)
        reports[:, :-1] = np.where(own, reports[:, :-1], 0.0)
        return reports, events
    return randomize


def _block_entry_mu_bound(public_round, rows, column, seeds):
    """mu lower bound on one entry of the block vector, over half-lines and the event {= 0}."""
    n_users = 200_000
    edges = np.linspace(-3.0, 3.0, 61) * public_round.sigma
    a, b = (_reports(row, public_round, n_users, seed)[:, column]
            for row, seed in zip(rows, seeds))
    counts_a = np.r_[event_counts(a, edges), np.count_nonzero(a == 0.0)]
    counts_b = np.r_[event_counts(b, edges), np.count_nonzero(b == 0.0)]
    return mu_lower_bound(counts_a, n_users, counts_b, n_users)


@pytest.mark.parametrize("variant", ["real", "mutant-half-sensitivity",
                                     "mutant-own-block-noise"])
def test_block_vector_report_is_ldp(monkeypatch, variant):
    """A user's block vector is (epsilon/2, delta)-DP: mu of GDP on the worst-case pairs.

    Two pairs, each watched on one entry: at opposite ends of ball 0
    (z = +1 and z = -1, the noise-free reports differ by 2 in coordinate 0,
    the largest possible change), and in different blocks (z = -1 in ball 0
    and z = +1 in ball 1, watched on ball 1's entry, with the event "exactly
    0": a report that leaves another block noise-free reveals the region;
    audit RB-08). Claim for both: mu = 2 / sigma(2, epsilon/2, delta)
    (Balle & Wang 2018, exact for the Gaussian mechanism; the pairs are
    2 and sqrt(2) apart). The mutants halve the sensitivity, or noise only
    the user's own block; each is caught by one of the pairs.
    """
    if variant == "mutant-half-sensitivity":
        monkeypatch.setattr(_ldp, "BLOCK_SENSITIVITY", 0.5 * _ldp.BLOCK_SENSITIVITY)
    if variant == "mutant-own-block-noise":
        monkeypatch.setattr(_ldp, "_randomize_rows", _own_block_noise_only(_ldp._randomize_rows))
    public_round = _ball_round()
    claim = 2.0 / analytic_gaussian_sigma(2.0, 0.5 * public_round.epsilon, public_round.delta)
    same_block = _block_entry_mu_bound(public_round, ([-2.0], [-6.0]), 0, (3, 4))
    cross_block = _block_entry_mu_bound(public_round, ([-6.0], [6.0]), 1, (5, 6))
    assert (same_block <= claim) is (variant != "mutant-half-sensitivity"), (same_block, claim)
    assert (cross_block <= claim) is (variant != "mutant-own-block-noise"), (cross_block, claim)


@pytest.mark.parametrize("factor, should_pass", [REAL, HALF])
def test_selection_report_is_ldp(monkeypatch, factor, should_pass):
    """A selection report is (epsilon, delta)-DP: inputs with clipped gaps +tau and -tau."""
    monkeypatch.setattr(_ldp, "COST_SENSITIVITY_FACTOR", factor * _ldp.COST_SENSITIVITY_FACTOR)
    tau = 0.25
    public_round = CostRound("select", np.array([[0.0]]), np.array([[1.0]]), tau, 2.0, 1e-5,
                             np.zeros(1), 10.0)
    n_users = 200_000
    a = _reports([1.0], public_round, n_users, seed=5)[:, 0]
    b = _reports([0.0], public_round, n_users, seed=6)[:, 0]
    edges = np.linspace(-3.0, 3.0, 61) * public_round.sigma
    bound = mu_lower_bound(event_counts(a, edges), n_users, event_counts(b, edges), n_users)
    claim = 2 * tau / analytic_gaussian_sigma(2 * tau, public_round.epsilon, public_round.delta)
    assert (bound <= claim) is should_pass, (bound, claim)


def test_report_events_compose_to_the_user_budget():
    _, events = _ldp._randomize_rows(np.zeros((3, 1)), _ball_round(epsilon=1.5, delta=1e-6),
                                     np.random.default_rng(0))
    assert math.fsum(e.epsilon for e in events) == pytest.approx(1.5)
    assert math.fsum(e.delta for e in events) == pytest.approx(1e-6)


# ---------------------------------------------------------------------------
# Server side
# ---------------------------------------------------------------------------


def test_server_recovers_region_averages_from_user_reports():
    """LDP-AVG (Claim 6.4): per-user reports, summed by the server, give the region means."""
    rng = np.random.default_rng(0)
    rows = np.r_[rng.normal(-4.0, 0.5, (20_000, 1)), rng.normal(4.5, 0.5, (30_000, 1))]
    public_round = _ball_round(epsilon=4.0, delta=1e-5)
    reports = np.array([user_randomizer(x, public_round, rng) for x in rows[::10]])
    reports = np.r_[reports, _ldp._randomize_rows(np.delete(rows, np.s_[::10], axis=0),
                                                  public_round, rng)[0]]
    estimate = server_aggregate(reports, public_round)
    inside = np.abs(rows - np.array([[-4.0, 4.0]])) <= 2.0
    true_counts = inside.sum(axis=0)
    assert np.all(np.abs(estimate.counts - true_counts) <= 4 * estimate.sigma_count)
    true_sums = np.array([((rows[inside[:, i], 0] - c) / 2.0).sum()
                          for i, c in enumerate([-4.0, 4.0])])
    assert np.all(np.abs(estimate.sums[:, 0] - true_sums) <= 4 * estimate.sigma_sum)
    assert estimate.n_reports == len(rows)


def test_grid_regions_locate_rows():
    regions = GridRegions(np.eye(2), 4, 8.0)  # rows inside B(0, Lambda), as the users clip them
    index, vectors = regions.locate(np.array([[-5.0, -5.0], [5.0, 5.0], [1.0, -7.0]]))
    assert list(index) == [0, 15, 2]
    assert np.array_equal(vectors, [[-5 / 8, -5 / 8], [5 / 8, 5 / 8], [1 / 8, -7 / 8]])


# Review R7, B: a user's region is a function of its own row, whatever block it is simulated in --


def _exact_sq_norms(rows):
    return [sum(Fraction(float(v)) ** 2 for v in row) for row in rows]


@pytest.mark.parametrize("variant", ["real", "mutant-margin-0"])
def test_ball_regions_do_not_depend_on_the_rows_block(monkeypatch, variant):
    # Before the fix 5236 of 20000 rows at a ball's radius changed region when located alone
    # rather than in a block of 2 or 3 (the matrix product's rounding decided "inside").
    if variant != "real":  # no fallback to the fixed-order distances: the block decides
        monkeypatch.setattr(_stable_init, "rounding_margin", lambda n_features: 0.0)
    rng = np.random.default_rng(2)
    centers = rng.standard_normal((3, 10)) * 20
    radii = np.array([4.0, 3.0, 0.0])
    directions = rng.standard_normal((3000, 10))
    directions /= np.linalg.norm(directions, axis=1)[:, None]
    owners = rng.integers(0, 2, 3000)  # rows at the radius of centre 0 or 1, up to a few ulps
    X = centers[owners] + directions * radii[owners, None] * (
        1 + rng.uniform(-1, 1, (3000, 1)) * 1e-15)
    regions = BallRegions(centers, radii)
    F = _stable_init.fixed_order_sq_distances(X, centers, owners)
    expected = np.where(F <= radii[owners] ** 2, owners, regions.n_regions)
    assert 0.2 < np.mean(expected == regions.n_regions) < 0.8  # both sides of the radii
    mismatches = sum(int(np.count_nonzero(in_blocks(lambda rows: regions.locate(rows)[0], X,
                                                    sizes) != expected))
                     for sizes in ([1], [3], [2, 7, 4096]))
    assert (mismatches == 0) is (variant == "real")
    index, vectors = regions.locate(X)
    assert np.all(vectors[index == regions.n_regions] == 0.0)
    assert max(_exact_sq_norms(vectors)) <= 1  # the block vector's sensitivity 2 needs it


@pytest.mark.parametrize("variant", ["real", "mutant-margin-0"])
def test_grid_regions_do_not_depend_on_the_rows_block(monkeypatch, variant):
    if variant != "real":  # no fallback to the fixed-order projection: the block decides
        monkeypatch.setattr(_stable_init, "_cell_margin", lambda *args: 0.0)
    rng = np.random.default_rng(3)
    radius, g = 3.0, 16
    projection = np.linalg.qr(rng.normal(size=(10, 3)))[0]
    width = 2.0 * radius / g
    # rows inside B(0, Lambda) whose first projected coordinate is a cell boundary up to a few ulps
    X = rng.normal(size=(3000, 10))
    X *= np.minimum(1.0, 0.5 * radius / np.linalg.norm(X, axis=1))[:, None]
    projected = X @ projection
    boundary = np.round((projected[:, 0] + radius) / width) * width - radius
    X += np.outer(boundary - projected[:, 0], projection[:, 0])
    regions = GridRegions(projection, g, radius)
    fixed_order = _stable_init.fixed_order_projection(X, projection)
    expected = GridInitializer._cell_index(fixed_order, g, radius)
    mismatches = sum(int(np.count_nonzero(in_blocks(lambda rows: regions.locate(rows)[0], X,
                                                    sizes) != expected))
                     for sizes in ([1], [3], [2, 7, 4096]))
    assert (mismatches == 0) is (variant == "real")


def test_grid_region_vectors_exact_norm_at_most_one():
    # x / Lambda of a row of exact norm <= Lambda a few ulps from the sphere rounds outside the
    # unit ball on 112 of these 2000 rows without the projection.
    rng = np.random.default_rng(4)
    radius = 3.3
    X = rng.standard_normal((2000, 10))
    X *= radius / np.linalg.norm(X, axis=1)[:, None]
    bound = Fraction(radius) ** 2
    for row in X:  # moved toward 0 until its exact norm is <= Lambda
        while _exact_sq_norms([row])[0] > bound:
            row[:] = np.nextafter(row, 0.0)
    vectors = GridRegions(np.eye(10)[:, :2], 4, radius).locate(X)[1]
    assert max(_exact_sq_norms(vectors)) <= 1


def test_user_randomizer_refuses_a_bad_row():
    public_round = _ball_round()
    with pytest.raises(ValueError, match="one finite row of 1 features"):
        user_randomizer([0.0, 1.0], public_round, np.random.default_rng(0))
    with pytest.raises(ValueError, match="one finite row"):
        user_randomizer([np.nan], public_round, np.random.default_rng(0))


@pytest.mark.parametrize("caps, match", [
    ({"max_epsilon": 1.0}, r"asks epsilon=60.0, above this device's max_epsilon=1.0"),
    ({"max_delta": 1e-7}, r"asks delta=1e-06, above this device's max_delta=1e-07"),
    ({"max_epsilon": float("nan")}, r"max_epsilon must be a number > 0"),
    ({"max_delta": 1.0}, r"max_delta must be a number in \[0, 1\)"),
])
def test_user_randomizer_refuses_a_round_above_the_devices_cap(caps, match):
    # Audit RB-07: a server that sends epsilon=60 got a truthful region index from every user.
    hostile = _ball_round(epsilon=60.0, delta=1e-6)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match=match):
        user_randomizer([-3.0], hostile, rng, **caps)
    assert rng.bit_generator.state == state


def test_user_randomizer_answers_a_round_within_the_devices_cap():
    public_round = _ball_round(epsilon=2.0, delta=1e-5)
    capped = user_randomizer([-3.0], public_round, np.random.default_rng(0), max_epsilon=2.0,
                             max_delta=1e-5)
    assert np.array_equal(capped, user_randomizer([-3.0], public_round, np.random.default_rng(0)))


def test_server_refuses_malformed_reports():
    with pytest.raises(ValueError, match="finite 2-d array"):
        server_aggregate(np.array([1.0, np.nan]), _ball_round())


@pytest.mark.parametrize("index, match", [
    (-1.0, r"an integer in \[0, 2\], but 1 reports hold another value \(the first, row 3: -1.0\)"),
    (7.0, r"\(the first, row 3: 7.0\)"),
    (1.7, r"\(the first, row 3: 1.7\)"),
])
def test_server_refuses_a_region_index_outside_the_rounds_regions(index, match):
    # Audit RB-07: -1 raised NumPy's bincount error, T + 5 was counted nowhere, 1.7 counted as 1.
    public_round = _ball_round()
    reports = _reports([-3.0], public_round, 10, seed=0)
    server_aggregate(reports, public_round)  # well formed
    reports[3, -1] = index
    with pytest.raises(ValueError, match=match):
        server_aggregate(reports, public_round)


def test_server_refuses_reports_of_another_width():
    public_round = _ball_round()
    reports = _reports([-3.0], public_round, 10, seed=0)
    with pytest.raises(ValueError, match=r"must have shape \(n_reports, 3\) for the round 'core'"):
        server_aggregate(reports[:, 1:], public_round)
    cost_round = CostRound("select", np.array([[0.0]]), np.array([[1.0]]), 0.25, 2.0, 1e-5,
                           np.zeros(1), 10.0)
    with pytest.raises(ValueError, match=r"shape \(n_reports, 1\) for the round 'select'"):
        server_aggregate(reports, cost_round)


def test_randomized_response_refuses_values_outside_the_domain():
    with pytest.raises(ValueError, match="n_values=3"):
        randomized_response(np.array([3]), n_values=3, epsilon=1.0, rng=np.random.default_rng(0))


def _block_cost(X, centers):
    """Mutant of ``_ldp._own_cost``: the matrix product's squared distance (before review R8)."""
    return _stable_init.nearest_centers(X, centers)[1]


@pytest.mark.parametrize("cost", [_ldp._own_cost, _block_cost], ids=["own", "mutant-block"])
def test_a_users_cost_value_does_not_depend_on_the_rows_simulated_beside_it(cost):
    # The selection round's pre-noise value of a user must be a function of its own row, as
    # on its device: the product's value moved by up to 6.8e-16 tau with the block (R8).
    rng = np.random.default_rng(5)
    centers = rng.standard_normal((4, 10)) * 3.0
    X = rng.standard_normal((3000, 10)) * 3.0
    alone = in_blocks(lambda rows: cost(rows, centers), X, [1])
    blocked = [in_blocks(lambda rows: cost(rows, centers), X, sizes) for sizes in ([3], [7, 2048])]
    same = all(np.array_equal(alone, values) for values in blocked)
    assert same is (cost is _ldp._own_cost)


def test_the_device_refuses_a_round_below_the_resolution_before_any_noise():
    # Re-review V2: the device drew the block vector's noise, then refused the index report.
    public_round = _ball_round(epsilon=1e-15)
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="too small for randomized response"):
        user_randomizer(np.zeros(public_round.data_center.shape), public_round, rng)
    assert rng.bit_generator.state == state


def test_randomized_response_refuses_a_domain_its_draws_cannot_resolve():
    with pytest.raises(ValueError, match=r"n_values must be an integer in \[2, 2\*\*53\]"):
        randomized_response(0, n_values=2**53 + 1, epsilon=701.0, rng=np.random.default_rng(0))
