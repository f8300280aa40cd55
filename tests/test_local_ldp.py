"""The local-model building blocks: frequency oracle, LDP-AVG and selection reports.

Privacy is tested on one user's report alone (the local guarantee), on the
worst-case pair of inputs of that user, through the real randomizer. Each
test has an under-noised mutant (halved sensitivity, or doubled epsilon for
randomized response) that the same test must catch; claims are computed
from the test's own worst-case distances, never from the seam the mutant
changes.
"""

import math

import numpy as np
import pytest

from dp_stats import epsilon_lower_bound, event_counts, mu_lower_bound
from skdpcluster import mechanisms
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
    original = mechanisms._rr_keep_probability
    monkeypatch.setattr(mechanisms, "_rr_keep_probability",
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


@pytest.mark.parametrize("factor, should_pass", [REAL, HALF])
def test_block_vector_report_is_ldp(monkeypatch, factor, should_pass):
    """A user's block vector is (epsilon/2, delta)-DP: mu of GDP on the worst-case pair.

    The two inputs are at opposite ends of ball 0 (z = +1 and z = -1): the
    noise-free reports differ by 2 in one coordinate, the largest possible
    change. Claim: mu = 2 / sigma(2, epsilon/2, delta) (Balle & Wang 2018,
    exact for the Gaussian mechanism).
    """
    monkeypatch.setattr(_ldp, "BLOCK_SENSITIVITY", factor * _ldp.BLOCK_SENSITIVITY)
    public_round = _ball_round()
    n_users = 200_000
    a = _reports([-2.0], public_round, n_users, seed=3)[:, 0]
    b = _reports([-6.0], public_round, n_users, seed=4)[:, 0]
    edges = np.linspace(-3.0, 3.0, 61) * public_round.sigma
    bound = mu_lower_bound(event_counts(a, edges), n_users, event_counts(b, edges), n_users)
    claim = 2.0 / analytic_gaussian_sigma(2.0, 0.5 * public_round.epsilon, public_round.delta)
    assert (bound <= claim) is should_pass, (bound, claim)


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
    regions = GridRegions(np.eye(2), 4, 8.0)
    index, vectors = regions.locate(np.array([[-7.0, -7.0], [7.0, 7.0], [1.0, -7.0]]))
    assert list(index) == [0, 15, 2]
    assert np.allclose(vectors[0], [-7 / 8, -7 / 8])


def test_user_randomizer_refuses_a_bad_row():
    public_round = _ball_round()
    with pytest.raises(ValueError, match="one finite row of 1 features"):
        user_randomizer([0.0, 1.0], public_round, np.random.default_rng(0))
    with pytest.raises(ValueError, match="one finite row"):
        user_randomizer([np.nan], public_round, np.random.default_rng(0))


def test_server_refuses_malformed_reports():
    with pytest.raises(ValueError, match="finite 2-d array"):
        server_aggregate(np.array([1.0, np.nan]), _ball_round())


def test_randomized_response_refuses_values_outside_the_domain():
    with pytest.raises(ValueError, match="n_values=3"):
        randomized_response(np.array([3]), n_values=3, epsilon=1.0, rng=np.random.default_rng(0))
