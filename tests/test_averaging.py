import inspect
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from dp_stats import epsilon_lower_bound
from skdpcluster import averaging as A
from skdpcluster import mechanisms as M
from skdpcluster.averaging._common import project_into_ball
from skdpcluster.cluster._federated_init import clip_rows
from skdpcluster.cluster._highdim import _SparseRows
from skdpcluster.cluster._highdim_candidates import _clip_in_place
from skdpcluster.cluster._stable import _ClippedData
from skdpcluster.mechanisms import analytic_gaussian_sigma, zcdp_rho_for_dp
from skdpcluster.ktuple import located
from skdpcluster.ktuple.averages import project_to_ball
from skdpcluster.local import CostRound, _ldp
from skdpcluster.mixture._gaussian_mixture import _clipped_offset_sum
from skdpcluster.utils._data import RowChunk


def _grid_index(z, data_radius, r_min):
    return np.rint((np.asarray(z) + data_radius) / r_min).astype(int)


def _brute_force_quality(values, data_radius, r_min):
    """q(i) = min(L(i), U(i)) straight from the definition of spec §7.2."""
    n_intervals = math.ceil(2 * data_radius / r_min)
    grid = np.arange(n_intervals + 1)[:, None]
    scaled = (np.clip(values, -data_radius, data_radius) + data_radius) / r_min
    lower = np.clip(np.floor(scaled), 0, n_intervals)[None, :]
    upper = np.clip(np.ceil(scaled), 0, n_intervals)[None, :]
    return np.minimum((lower <= grid).sum(axis=1), (upper >= grid).sum(axis=1))


def _interior_point_draws(values, n_draws, seed, *, data_radius=1.0, r_min=0.1, epsilon=1.0):
    rng = np.random.default_rng(seed)
    draws = [A.private_interior_point(values, data_radius=data_radius, r_min=r_min, epsilon=epsilon,
                                      rng=rng)[0] for _ in range(n_draws)]
    return np.asarray(draws)


def _segment_threshold(data_radius, r_min, epsilon_segment, beta_segment):
    """t of spec §7.3, computed independently of the module."""
    grid_size = math.ceil(2 * data_radius / r_min) + 1
    return math.ceil((4 / (epsilon_segment / 2)) * math.log(grid_size / (beta_segment / 2)))


def _average_1d_error_bound(values, *, data_radius, r_min, epsilon, delta, beta):
    """Spec §7.4: (2t/|S|)(w + 4 r_min) + sigma sqrt(2 log(4/beta)), sigma at the widest [a, b]."""
    width = values.max() - values.min() + 4 * r_min
    t = _segment_threshold(data_radius, r_min, epsilon / 2, beta / 2)
    sigma = analytic_gaussian_sigma(width / (2 * values.size), epsilon / 2, delta)
    return 2 * t / values.size * width + sigma * math.sqrt(2 * math.log(4 / beta))


# ---------------------------------------------------------------------------
# Interior point
# ---------------------------------------------------------------------------

MIXED_VALUES = np.array([-2.5, -0.73, -0.73, -0.1, 0.0, 0.3, 0.35, 0.9, 1.7])


@pytest.mark.parametrize("seed", range(5))
def test_quality_runs_match_brute_force(seed):
    rng = np.random.default_rng(seed)
    values = np.concatenate([rng.normal(0, 1.5, 40), rng.choice([-1.0, 0.2, 0.5], 10)])
    starts, lengths, quality = A._quality_runs(values, 2.0, 0.1, 40)
    assert starts[0] == 0 and lengths.sum() == 41
    assert np.array_equal(np.repeat(quality, lengths), _brute_force_quality(values, 2.0, 0.1))


def test_interior_point_sampler_matches_enumerated_distribution():
    epsilon, n_draws = 1.0, 20_000
    weights = np.exp(epsilon * _brute_force_quality(MIXED_VALUES, 1.0, 0.1) / 2)
    expected = weights / weights.sum() * n_draws
    draws = _interior_point_draws(MIXED_VALUES, n_draws, 0, epsilon=epsilon)
    indices = _grid_index(draws, 1.0, 0.1)
    assert np.allclose(draws, -1.0 + 0.1 * indices)  # every output is a grid point
    observed = np.bincount(indices, minlength=expected.size)
    assert stats.chisquare(observed, expected).pvalue > 1e-4
    # Power check: the same draws reject the law of a sampler that forgets the run lengths.
    _, lengths, quality = A._quality_runs(MIXED_VALUES, 1.0, 0.1, 20)
    run_weights = np.exp(epsilon * quality / 2) / np.exp(epsilon * quality / 2).sum()
    forgetful = np.repeat(run_weights / lengths, lengths) * n_draws
    assert stats.chisquare(observed, forgetful).pvalue < 1e-6


def test_interior_point_empty_input_is_a_uniform_grid_point():
    draws = _interior_point_draws(np.array([]), 4_000, 1)
    observed = np.bincount(_grid_index(draws, 1.0, 0.1), minlength=21)
    assert observed.size == 21
    assert stats.chisquare(observed).pvalue > 1e-4


def test_interior_point_has_no_overflow_at_a_million_identical_points():
    rng = np.random.default_rng(2)
    values = np.full(1_000_000, 0.3)  # epsilon * q / 2 = 1e7
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        z, event = A.private_interior_point(values, data_radius=1.0, r_min=0.01, epsilon=20.0,
                                            rng=rng)
    assert math.isfinite(z) and abs(z - 0.3) <= 0.01 + 1e-12
    assert (event.epsilon, event.delta, event.details["grid_size"]) == (20.0, 0.0, 201)


def test_interior_point_refuses_a_grid_finer_than_float_precision():
    with pytest.raises(ValueError, match="2\\*\\*52.*r_min"):
        A.private_interior_point([0.0], data_radius=1.0, r_min=1e-16, epsilon=1.0,
                                 rng=np.random.default_rng(0))


# The interior point claims epsilon-DP under replace-one and under add/remove (its docstring
# and event). Replace-one: S = {Lambda, Lambda} and S' = {Lambda, -Lambda} on a 17-point grid
# (review RD-4); moving a value from the top to the bottom of the grid raises q on the lower
# grid points and lowers it on the upper ones, the two directions that bring the loss near
# epsilon. Add/remove: adding a value raises every L(i) and U(i) by 0 or 1, so q only rises
# and the loss is at most epsilon / 2 (the monotone case, stated in the docstring); S =
# {Lambda} and S' = S + {-Lambda} reach 0.90 of epsilon / 2 = 1 at epsilon = 2. Against the
# bare epsilon that pair could not catch a halved sensitivity (review RD-4: 1.437 <= 2).
INTERIOR_PAIRS = {"replace_one": ((np.array([1.0, 1.0]), np.array([1.0, -1.0])), 1.0),
                  "add_remove": ((np.array([1.0]), np.array([1.0, -1.0])), 0.5)}
INTERIOR_RELATIONS = ["replace_one", pytest.param("add_remove", marks=pytest.mark.slow)]


def _halve_interior_point_sensitivity(monkeypatch):
    """The mutant: the interior point's exponential mechanism calibrated to half its sensitivity."""
    def under_noised(scores, *, sensitivity, **kwargs):
        return M.exponential_mechanism(scores, sensitivity=sensitivity / 2.0, **kwargs)
    monkeypatch.setattr(A.interior_point, "exponential_mechanism", under_noised)


@pytest.mark.parametrize("mutant", [False, True], ids=["real", "mutant-halved-sensitivity"])
@pytest.mark.parametrize("neighbouring", INTERIOR_RELATIONS)
def test_interior_point_empirical_privacy_loss(monkeypatch, neighbouring, mutant):
    if mutant:
        _halve_interior_point_sensitivity(monkeypatch)
    (first, second), claim_share = INTERIOR_PAIRS[neighbouring]
    epsilon, n_draws, settings = 2.0, 20_000, {"data_radius": 1.0, "r_min": 0.125}
    counts = []
    for seed, values in ((40, first), (41, second)):
        draws = _interior_point_draws(values, n_draws, seed, epsilon=epsilon, **settings)
        counts.append(np.bincount(_grid_index(draws, **settings), minlength=17))
    _, event = A.private_interior_point(first, epsilon=epsilon, rng=np.random.default_rng(0),
                                        **settings)
    assert neighbouring in (event.neighbouring, event.details["also_private_under"])
    claim = claim_share * event.epsilon
    bound = epsilon_lower_bound(counts[0], n_draws, counts[1], n_draws)
    assert (bound <= claim) is not mutant, (bound, claim)
    assert bound > 0.5 * claim, (bound, claim)  # the pair is near enough the worst case


# ---------------------------------------------------------------------------
# Bounding segment and 1-D average
# ---------------------------------------------------------------------------

SEGMENT_SETTINGS = {"data_radius": 10.0, "r_min": 0.01, "epsilon": 1.0, "beta": 0.05}


@pytest.mark.parametrize("seed", range(5))
def test_bounding_segment_keeps_all_but_2t_values(seed):
    values = np.random.default_rng(seed).normal(3.0, 1.0, 20_000)
    (a, b), event = A.private_bounding_segment(values, rng=np.random.default_rng(100 + seed),
                                               **SEGMENT_SETTINGS)
    t = _segment_threshold(10.0, 0.01, 1.0, 0.05)
    assert a <= b
    assert np.sum((values < a) | (values > b)) <= 2 * t
    assert b - a <= values.max() - values.min() + 4 * 0.01
    assert event.epsilon == 1.0 and event.details["n_extreme_values"] == t


@pytest.mark.parametrize("n_values", [50, 500])  # below and above t = 91
def test_bounding_segment_is_two_interior_points_at_half_epsilon(n_values):
    values = np.random.default_rng(10).normal(0.0, 2.0, n_values)
    segment, _ = A.private_bounding_segment(values, rng=np.random.default_rng(11),
                                            **SEGMENT_SETTINGS)
    size = min(n_values, _segment_threshold(10.0, 0.01, 1.0, 0.05))
    rng, ordered = np.random.default_rng(11), np.sort(values)
    grid = {"data_radius": 10.0, "r_min": 0.01, "epsilon": 0.5}
    z_low, _ = A.private_interior_point(ordered[:size], rng=rng, **grid)
    z_high, _ = A.private_interior_point(ordered[-size:], rng=rng, **grid)
    assert segment == (min(z_low - 0.01, z_high + 0.01), max(z_low - 0.01, z_high + 0.01))


def test_bounding_segment_of_empty_input_is_a_random_segment():
    (a, b), _ = A.private_bounding_segment([], rng=np.random.default_rng(3), **SEGMENT_SETTINGS)
    assert a <= b and -10.1 <= a and b <= 10.1


AVERAGE_SETTINGS = {"data_radius": 10.0, "r_min": 0.01, "epsilon": 1.0, "delta": 1e-6, "beta": 0.05}


@pytest.mark.parametrize("seed", range(5))
def test_average_1d_error_within_spec_bound(seed):
    values = np.random.default_rng(seed).exponential(1.0, 20_000) + 2.0
    rng = np.random.default_rng(200 + seed)
    estimate, event = A.private_average_1d(values, n_public=values.size, rng=rng,
                                           **AVERAGE_SETTINGS)
    bound = _average_1d_error_bound(values, **AVERAGE_SETTINGS)
    assert abs(estimate - values.mean()) <= bound
    assert abs(estimate - values.mean()) <= 0.02  # far inside the (loose) bound in practice
    assert (event.epsilon, event.delta) == (1.0, 1e-6)


@pytest.mark.parametrize("neighbouring, share", [("add_remove", 0.5), ("replace_one", 1.0)])
def test_average_1d_is_a_segment_then_a_gaussian_on_the_centred_sum(neighbouring, share):
    values, n_public = np.random.default_rng(12).normal(1.0, 2.0, 300), 500
    estimate, _ = A.private_average_1d(values, n_public=n_public, rng=np.random.default_rng(13),
                                       neighbouring=neighbouring, **AVERAGE_SETTINGS)
    rng = np.random.default_rng(13)
    (a, b), _ = A.private_bounding_segment(values, data_radius=10.0, r_min=0.01, epsilon=0.5,
                                           beta=0.025, rng=rng)
    centre = (a + b) / 2
    expected, _ = M.gaussian_mechanism(np.sum(np.clip(values, a, b) - centre) / n_public,
                                       sensitivity=share * (b - a) / n_public, epsilon=0.5,
                                       delta=1e-6, rng=rng)
    assert estimate == pytest.approx(centre + expected, rel=1e-12)


def test_average_1d_noise_is_not_lost_in_the_rounding_of_the_segment_centre():
    """Review R5-2: the noise went on c + sum/n, rounded at the ulp of c; with a segment 2^-49
    wide at 0.75 the noise (sd about 4e-18) was below ulp(0.75)/2, so the release was a
    deterministic function of the data and these add/remove neighbours released 0.75 and
    0.75 + 2^-53 on every seed. Both releases must appear for both, in ratios within e^epsilon."""
    step = 2.0**-50  # a grid step the grid accepts (2 data_radius / r_min = 2^51)
    values = np.array([0.75] * 938 + [0.75 + step] * 62)
    releases = []
    for data in (values, np.append(values, 0.75 + step)):
        out = [A.private_average_1d(data, n_public=1000.0, data_radius=1.0, r_min=step,
                                    epsilon=1.0, delta=1e-6, beta=0.05,
                                    rng=np.random.default_rng(seed))[0] for seed in range(300)]
        releases.append({value: out.count(value) for value in (0.75, 0.75 + 2.0**-53)})
    for value in (0.75, 0.75 + 2.0**-53):
        counts = [release[value] for release in releases]
        assert min(counts) > 0 and max(counts) / min(counts) < 1.5 * math.e  # 300 draws' slack


def _mostly_zero_sample(n_points):
    """90% zeros and 10% tens: average 1, bounding-segment centre about 5."""
    return np.where(np.arange(n_points) % 10 == 0, 10.0, 0.0)


@pytest.mark.parametrize("n_features", [1, 2])
def test_average_divides_by_the_public_count(n_features):
    values = _mostly_zero_sample(20_000)
    points = np.repeat(values[:, None], n_features, axis=1)  # inside the ball: no projection
    settings = {**AVERAGE_SETTINGS, "data_radius": 20.0}
    for n_public, expected in ((values.size, 1.0), (2 * values.size, 3.0)):
        rng = np.random.default_rng(7)
        if n_features == 1:
            estimate, _ = A.private_average_1d(values, n_public=n_public, rng=rng, **settings)
        else:
            estimate, _ = A.private_average(points, n_public=n_public, rng=rng, **settings)
        # c + sum(x - c) / n_public with c = 5: the deviation from c is halved by 2 * n.
        assert np.allclose(estimate, expected, atol=0.05)


def test_replace_one_doubles_the_noise_of_add_remove():
    # Two point masses: the segment is [-1 - r_min, 1 + r_min] with overwhelming probability, so
    # nothing is clipped and the spread is the Gaussian noise alone.
    values = np.where(np.arange(400) % 2 == 0, -1.0, 1.0)
    settings = {**AVERAGE_SETTINGS, "data_radius": 2.0, "epsilon": 4.0}
    spreads = {}
    for neighbouring in ("add_remove", "replace_one"):
        rng = np.random.default_rng(8)
        draws = [A.private_average_1d(values, n_public=values.size, rng=rng,
                                      neighbouring=neighbouring, **settings)[0] for _ in range(400)]
        spreads[neighbouring] = np.std(draws)
    assert 1.7 < spreads["replace_one"] / spreads["add_remove"] < 2.3


# ---------------------------------------------------------------------------
# Average in R^d: composition, projection, error
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("n_features", [1, 5, 50])
@pytest.mark.parametrize("composition", ["basic", "advanced", "auto"])
@pytest.mark.parametrize("epsilon, delta", [(1.0, 1e-6), (0.3, 1e-9), (4.0, 1e-3)])
def test_average_event_never_exceeds_the_request(n_features, composition, epsilon, delta):
    points = np.random.default_rng(n_features).normal(0, 1, (50, n_features))
    estimate, event = A.private_average(
        points, n_public=50, data_radius=5.0, r_min=0.1, epsilon=epsilon, delta=delta, beta=0.05,
        rng=np.random.default_rng(0), composition=composition,
    )
    assert estimate.shape == (n_features,)
    assert event.epsilon <= epsilon and event.delta <= delta
    assert event.details["n_axes"] == n_features
    if composition != "auto":
        assert event.details["composition"] == composition
    if event.details["composition"] == "basic":
        assert event.details["epsilon_axis"] * n_features <= epsilon


# A naive split eps / d summed d times exceeds eps here (0.1 / 11 * 11 > 0.1 in floating point).
@pytest.mark.parametrize("epsilon, delta, n_features",
                         [(0.1, 1e-6, 11), (0.3, 1e-6, 37), (1.0, 1e-6, 33)])
def test_even_splits_stay_within_the_request_in_floating_point(epsilon, delta, n_features):
    _, event = A.private_average(np.zeros((5, n_features)), n_public=5, data_radius=1.0, r_min=0.1,
                                 epsilon=epsilon, delta=delta, beta=0.05,
                                 rng=np.random.default_rng(0), composition="basic")
    assert event.epsilon <= epsilon and event.delta <= delta


@pytest.mark.parametrize("n_features, delta, expected", [
    (50, 1e-2, "advanced"), (50, 1e-6, "basic"), (5, 1e-2, "basic"), (200, 1e-6, "advanced"),
])
def test_auto_composition_picks_the_larger_axis_epsilon(n_features, delta, expected):
    epsilon = 1.0
    basic_axis = epsilon / n_features
    advanced_axis = epsilon / (2 * math.sqrt(2 * n_features * math.log(2 / delta)))
    points = np.zeros((10, n_features))
    _, event = A.private_average(points, n_public=10, data_radius=1.0, r_min=0.1, epsilon=epsilon,
                                 delta=delta, beta=0.05, rng=np.random.default_rng(0))
    assert event.details["composition"] == expected
    assert event.details["epsilon_axis"] == pytest.approx(max(basic_axis, advanced_axis), rel=1e-12)


def test_advanced_composition_refused_where_it_does_not_fit():
    # eps_ax = 20 / (2 sqrt(2 log(2e6))) = 1.86: the proven total 10 + 1.86 (e^1.86 - 1) exceeds 20.
    kwargs = {"n_public": 3, "data_radius": 1.0, "r_min": 0.1, "epsilon": 20.0, "delta": 1e-6,
              "beta": 0.05}
    with pytest.raises(ValueError, match="composition='advanced'"):
        A.private_average(np.zeros((3, 1)), rng=np.random.default_rng(0), composition="advanced",
                          **kwargs)
    _, event = A.private_average(np.zeros((3, 1)), rng=np.random.default_rng(0), **kwargs)
    assert event.details["composition"] == "basic" and event.epsilon <= 20.0


@pytest.mark.parametrize("n_features, delta", [(3, 1e-6), (50, 1e-2)])  # basic, advanced
def test_average_is_the_1d_average_of_each_axis_at_the_axis_budget(n_features, delta):
    points = np.random.default_rng(14).uniform(-0.1, 0.1, (40, n_features))
    settings = {**AVERAGE_SETTINGS, "delta": delta}
    estimate, _ = A.private_average(points, n_public=40, rng=np.random.default_rng(15), **settings)
    basic = (1.0 / n_features, delta / n_features)
    spread = math.sqrt(2 * n_features * math.log(2 / delta))
    advanced = (1.0 / (2 * spread), delta / (2 * n_features))
    epsilon_axis, delta_axis = max(basic, advanced)
    rng = np.random.default_rng(15)
    expected = [A.private_average_1d(points[:, j], n_public=40, data_radius=10.0, r_min=0.01,
                                     epsilon=epsilon_axis, delta=delta_axis, beta=0.05 / n_features,
                                     rng=rng)[0] for j in range(n_features)]
    assert np.allclose(estimate, expected, rtol=1e-9, atol=0)


def test_points_outside_the_ball_are_projected_radially():
    points = np.tile([3.0, 4.0], (20_000, 1))  # norm 5: projected to (0.6, 0.8), not (1, 1)
    estimate, _ = A.private_average(points, n_public=20_000, data_radius=1.0, r_min=0.01,
                                    epsilon=2.0, delta=1e-6, beta=0.05,
                                    rng=np.random.default_rng(4))
    assert np.allclose(estimate, [0.6, 0.8], atol=0.01)


@pytest.mark.parametrize("seed", range(3))
def test_average_error_within_spec_bound_in_three_dimensions(seed):
    rng = np.random.default_rng(seed)
    points = rng.normal([1.0, -2.0, 0.5], 0.5, (20_000, 3))
    settings = {**AVERAGE_SETTINGS, "epsilon": 3.0}
    rng = np.random.default_rng(300 + seed)
    estimate, event = A.private_average(points, n_public=20_000, rng=rng, **settings)
    axis = {**settings, "epsilon": event.details["epsilon_axis"],
            "delta": event.details["delta_axis"], "beta": settings["beta"] / 3}
    axis_bound = max(_average_1d_error_bound(points[:, j], **axis) for j in range(3))
    assert np.linalg.norm(estimate - points.mean(axis=0)) <= math.sqrt(3) * axis_bound


def test_average_is_reproducible_with_a_seed():
    points = np.random.default_rng(5).normal(0, 1, (100, 4))
    runs = [A.private_average(points, n_public=100, rng=np.random.default_rng(9),
                              **AVERAGE_SETTINGS) for _ in range(2)]
    assert np.array_equal(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]


# ---------------------------------------------------------------------------
# Empirical sensitivity of the adaptive Gaussian releases
# ---------------------------------------------------------------------------


def _zcdp_releases(function, points, monkeypatch, replay=None, **kwargs):
    """Run ``function``, recording every zCDP Gaussian release as (value, sensitivity, rho, output).

    With ``replay`` (the releases of an earlier run), the recorded outputs are returned instead
    of fresh noise, so a neighbouring input follows the same trajectory and the change of each
    released value is exactly what the adaptive composition theorem must bound.
    """
    releases = []

    def mechanism(value, *, sensitivity, rho, rng, **options):
        noisy, event = M.zcdp_gaussian_mechanism(value, sensitivity=sensitivity, rho=rho, rng=rng,
                                                 **options)
        if replay is not None:
            noisy = replay[len(releases)][3]
        releases.append((np.asarray(value, dtype=float), sensitivity, rho, noisy))
        return noisy, event

    for module in (A.one_median, A.gaussian):  # the primitives that draw zCDP noise
        monkeypatch.setattr(module, "zcdp_gaussian_mechanism", mechanism)
    event = function(points, rng=np.random.default_rng(0), **kwargs)[-1]
    return releases, event


def _largest_sensitivity_ratio(function, points, neighbour, monkeypatch, **kwargs):
    releases, event = _zcdp_releases(function, points, monkeypatch, **kwargs)
    replayed, _ = _zcdp_releases(function, neighbour, monkeypatch, replay=releases, **kwargs)
    assert len(replayed) == len(releases)
    assert all(r[1:3] == s[1:3] for r, s in zip(replayed, releases))  # public calibration
    assert event.rho == pytest.approx(math.fsum(r[2] for r in releases), rel=1e-12)
    return max(np.linalg.norm(r[0] - s[0]) / r[1] for r, s in zip(releases, replayed)), event


@pytest.mark.parametrize("neighbour_of", [
    lambda x: x[1:],                                  # remove a point
    lambda x: np.vstack([x, [[40.0, -40.0, 40.0]]]),  # add a far outlier
])
def test_gaussian_estimate_releases_respect_their_sensitivity(neighbour_of, monkeypatch):
    points = np.random.default_rng(16).multivariate_normal(TRUE_MEAN, TRUE_COVARIANCE, 300)
    points[0] = [-30.0, 30.0, -30.0]
    ratio, event = _largest_sensitivity_ratio(
        A.private_gaussian_estimate, points, neighbour_of(points), monkeypatch, n_public=300,
        rho=0.5, **GAUSSIAN_BOUNDS,
    )
    assert 0.5 < ratio <= 1.0 + 1e-9  # the outlier hits the clipping radius
    assert event.rho <= 0.5


def test_gaussian_estimate_noises_offsets_not_positions(monkeypatch):
    """Review R5-3: the mean steps noised c_t + sum/n, c_t the previous release, rounded at the
    ulp of c_t (0.016 for a mean at 1e14): one row moved it by whole ulps, up to 243 times the
    sensitivity. Every noised value is now an average of n_public terms each within the step's
    reach, so its norm is at most n_public times its sensitivity."""
    points = 1e14 + np.random.default_rng(1).normal(0.0, 1.0, (2000, 1))
    releases, _ = _zcdp_releases(
        A.private_gaussian_estimate, points, monkeypatch, n_public=2000.0, center=[0.0],
        radius=1e15, sigma_min=0.5, sigma_max=1.0, rho=1.0, n_iter_mean=8, n_iter_cov=1)
    assert len(releases) == 9
    for value, sensitivity, _, _ in releases:
        assert np.linalg.norm(value) <= 2000.0 * sensitivity * (1 + 1e-9)


def _gdp_rho_bound(epsilon, delta):
    """mu^2 / 2 of the mu-GDP Gaussian that is (epsilon, delta)-DP, mu = 1 / sigma(1, eps, delta),
    rounded as the primitives round it (0.5 / sigma**2 can be one ulp below)."""
    mu = 1.0 / analytic_gaussian_sigma(1.0, epsilon, delta)
    return mu * mu / 2.0


@pytest.mark.parametrize("neighbouring, neighbour_of", [
    ("add_remove", lambda x: x[1:]),
    ("add_remove", lambda x: np.vstack([x, [[9.0, 9.0]]])),
    ("replace_one", lambda x: np.vstack([[[-9.0, 9.0]], x[1:]])),
])
def test_one_median_releases_respect_their_sensitivity(neighbouring, neighbour_of, monkeypatch):
    points = np.random.default_rng(17).normal([1.0, 1.0], 0.2, (200, 2))
    ratio, event = _largest_sensitivity_ratio(
        A.private_one_median, points, neighbour_of(points), monkeypatch, center=np.ones(2),
        radius=0.5, epsilon=1.0, delta=1e-6, n_iter=20, neighbouring=neighbouring,
    )
    assert 0.5 < ratio <= 1.0 + 1e-9
    assert event.rho <= _gdp_rho_bound(1.0, 1e-6)


# ---------------------------------------------------------------------------
# Noisy count
# ---------------------------------------------------------------------------


def test_private_count_is_laplace_around_the_count():
    rng = np.random.default_rng(6)
    draws = np.array([A.private_count(40, epsilon=0.5, rng=rng)[0] for _ in range(4_000)])
    assert stats.kstest(draws, stats.laplace(loc=40, scale=2.0).cdf).pvalue > 1e-4
    value, event = A.private_count(np.int64(3), epsilon=0.5, rng=rng)
    assert isinstance(value, float)
    assert (event.mechanism, event.epsilon, event.sensitivity, event.scale, event.neighbouring) == (
        "private_count", 0.5, 1.0, 2.0, "add_remove")


# ---------------------------------------------------------------------------
# One-median
# ---------------------------------------------------------------------------


def _geometric_median(points, n_iter=500):
    """Weiszfeld's algorithm (non-private reference)."""
    median = points.mean(axis=0)
    for _ in range(n_iter):
        inverse = 1.0 / np.maximum(np.linalg.norm(points - median, axis=1), 1e-12)
        median = inverse @ points / inverse.sum()
    return median


def test_one_median_is_close_to_the_geometric_median():
    rng = np.random.default_rng(3)
    points = np.concatenate([rng.normal([1.0, 2.0, -1.0], 0.1, (4_000, 3)),
                             rng.uniform(-3, 3, (200, 3))])  # outliers pull the mean by ~0.1
    reference = _geometric_median(points)
    assert np.linalg.norm(points.mean(axis=0) - reference) > 0.05
    for seed in range(5):
        median, event = A.private_one_median(points, center=np.array([1.3, 1.8, -0.6]),
                                             radius=1.0, epsilon=1.0, delta=1e-6,
                                             rng=np.random.default_rng(seed))
        assert np.linalg.norm(median - reference) < 0.01
    assert (event.epsilon, event.delta) == (1.0, 1e-6)
    # The exact GDP calibration allows more than the (eps, delta) -> zCDP conversion, never less.
    assert zcdp_rho_for_dp(1.0, 1e-6) < event.rho <= _gdp_rho_bound(1.0, 1e-6)


def test_one_median_defaults_to_replace_one():
    # R6a F7: the 1-median primitives defaulted to add/remove (half the gradient noise of the
    # library's default relation); every estimator passes its own relation.
    points = np.random.default_rng(19).normal(size=(50, 2))
    _, event = A.private_one_median(points, center=np.zeros(2), radius=1.0, epsilon=1.0,
                                    delta=1e-6, rng=np.random.default_rng(0))
    _, joint = A.private_one_medians(points, np.zeros(50, dtype=int), centers=np.zeros((1, 2)),
                                     radii=[1.0], epsilon=1.0, delta=1e-6,
                                     rng=np.random.default_rng(0))
    for released in (event, joint):
        assert released.neighbouring == "replace_one"
        assert (released.details["count_sensitivity"],
                released.details["gradient_sensitivity"]) == (math.sqrt(2.0), 2.0)
    assert inspect.signature(A.private_one_medians_of_rows).parameters[
        "neighbouring"].default == "replace_one"


@pytest.mark.parametrize("n_points", [0, 3])
def test_one_median_stays_in_its_domain(n_points):
    points = np.full((n_points, 2), 50.0)
    center = np.array([1.0, -1.0])
    median, _ = A.private_one_median(points, center=center, radius=0.5, epsilon=0.1, delta=1e-6,
                                     rng=np.random.default_rng(0), neighbouring="replace_one")
    assert np.linalg.norm(median - center) <= 0.5 + 1e-12


# Review RD-6: the public 1-median functions first project every point into B(c_j, 2^20 R_j)
# of its cell. Far rows (50 of 200): one whose difference to the iterate overflows (the release
# was NaN), and one whose squared norm overflows (it added 0, not its unit vector).
FAR_ROWS = {"difference-overflows": [-np.finfo(float).max, -np.finfo(float).max],
            "squared-norm-overflows": [1e155, -1e200]}


def _far_rows_on_the_ray(far_row, center, radius, n_rows):
    """The far row put by hand inside B(center, 2^20 radius), on its ray from ``center``."""
    offset = np.array(far_row) / np.max(np.abs(far_row))  # the direction, without overflow
    inside = center + (1.0 - 1e-9) * 2.0**20 * radius * offset / np.linalg.norm(offset)
    return np.tile(inside, (n_rows, 1))


@pytest.mark.filterwarnings("error::RuntimeWarning")  # an overflow warning would tell the data
@pytest.mark.parametrize("far_row", FAR_ROWS)
@pytest.mark.parametrize("n_cells", [1, 2])
def test_one_median_far_rows_release_as_if_clipped_by_hand(far_row, n_cells):
    # The map turns a far row's direction by less than 1e-6 radians (R / 2^20 R): the release
    # is the one of the rows pre-clipped by hand up to about 1e-12 (the two clipped rows are
    # 1e-9 of the reach apart along one ray, seen from within R of the centre); before the map
    # it was NaN or added 0 for the far rows.
    centers = np.array([[1.0, -2.0], [40.0, 25.0]])[:n_cells]
    radii = np.array([1.0, 3.0])[:n_cells]
    cell = n_cells - 1  # the far rows' cell
    near = np.random.default_rng(30).normal(centers[cell], 0.3, (150, 2))
    far = np.tile(FAR_ROWS[far_row], (50, 1))
    by_hand = _far_rows_on_the_ray(FAR_ROWS[far_row], centers[cell], radii[cell], 50)
    other = np.random.default_rng(31).normal(centers[0], 0.3, (100 * cell, 2))
    labels = np.repeat([0, cell], [len(other), 200])
    releases = []
    for rows in (far, by_hand):
        points = np.vstack([other, near, rows])
        medians, _ = A.private_one_medians(points, labels, centers=centers, radii=radii,
                                           epsilon=1.0, delta=1e-6, rng=np.random.default_rng(3))
        releases.append(medians)
    assert np.all(np.isfinite(releases[0]))
    np.testing.assert_allclose(releases[0], releases[1], rtol=0, atol=1e-12)
    if n_cells == 1:  # and private_one_median is private_one_medians on one cell
        median, _ = A.private_one_median(np.vstack([near, far]), center=centers[0],
                                         radius=radii[0], epsilon=1.0, delta=1e-6,
                                         rng=np.random.default_rng(3))
        assert np.array_equal(median, releases[0][0])


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_one_median_review_rows_give_a_finite_release():
    # The review's input (rd_06): centre 1e306, radius 10, one row at -1.797e308; its release
    # was NaN. By hand the row goes to c - 2^19 R, which is c in float64 at this magnitude.
    near = np.random.default_rng(0).normal(size=(200, 1)) + 1e306
    releases = [A.private_one_median(np.vstack([near, [[row]]]), center=[1e306], radius=10.0,
                                     epsilon=1.0, delta=1e-6, rng=np.random.default_rng(1),
                                     n_iter=10)[0]
                for row in (-np.finfo(float).max, 1e306 - 2.0**19 * 10.0)]
    assert np.all(np.isfinite(releases[0])) and np.array_equal(releases[0], releases[1])


def test_one_median_far_rows_turn_the_release_towards_them():
    # Far rows add their unit vectors: 100 of 200 rows far along +x pull the release to the
    # side of the domain they lie on (with 0 added for them it stayed at the near rows' median).
    near = np.random.default_rng(32).normal(0.0, 0.3, (100, 2))
    far = np.tile([1e200, 0.0], (100, 1))
    median, _ = A.private_one_median(np.vstack([near, far]), center=np.zeros(2), radius=1.0,
                                     epsilon=10.0, delta=1e-6, rng=np.random.default_rng(4))
    assert median[0] > 0.5


CELL_POINTS = np.concatenate([np.random.default_rng(18).normal(c, 0.2, (150, 2))
                              for c in ([0.0, 0.0], [3.0, 0.0], [0.0, 3.0])])
CELL_LABELS = np.repeat([0, 1, 2], 150)
CELL_DOMAINS = {"centers": [[0.2, 0.0], [3.0, 0.2], [0.0, 2.8]], "radii": [1.0, 0.8, 1.2]}


@pytest.mark.parametrize("neighbouring, neighbour_of", [
    ("add_remove", lambda x, y: (x[1:], y[1:])),
    ("add_remove", lambda x, y: (np.vstack([x, [[-9.0, 9.0]]]), np.append(y, 1))),
    ("replace_one", lambda x, y: (np.vstack([[[-9.0, 9.0]], x[1:]]), np.append(2, y[1:]))),
])
@pytest.mark.parametrize("halved", [False, True])
def test_one_medians_releases_respect_their_sensitivity(neighbouring, neighbour_of, halved,
                                                         monkeypatch):
    # All cells' counts and all cells' gradient sums of a step are single releases; a point
    # moved between two cells (replace-one) changes two blocks of them. The under-noised
    # mutant (sensitivities halved) must show a ratio above 1.
    if halved:
        monkeypatch.setitem(A._MEDIAN_SENSITIVITIES, neighbouring,
                            tuple(v / 2 for v in A._MEDIAN_SENSITIVITIES[neighbouring]))
    points, labels = neighbour_of(CELL_POINTS, CELL_LABELS)
    releases, event = _zcdp_releases(
        A.private_one_medians, CELL_POINTS, monkeypatch, labels=CELL_LABELS, **CELL_DOMAINS,
        epsilon=1.0, delta=1e-6, n_iter=20, neighbouring=neighbouring)
    replayed, _ = _zcdp_releases(
        A.private_one_medians, points, monkeypatch, replay=releases, labels=labels,
        **CELL_DOMAINS, epsilon=1.0, delta=1e-6, n_iter=20, neighbouring=neighbouring)
    assert [r[0].shape for r in replayed] == [(3,)] + [(3, 2)] * 20  # joint releases
    ratio = max(np.linalg.norm(r[0] - s[0]) / r[1] for r, s in zip(releases, replayed))
    assert (ratio <= 1.0 + 1e-9) is not halved
    assert ratio > 0.5
    assert event.rho == pytest.approx(math.fsum(r[2] for r in releases), rel=1e-12)


def test_one_medians_run_one_median_on_every_cell():
    # With a vanishing noise every cell converges to its own private_one_median.
    medians, event = A.private_one_medians(
        CELL_POINTS, CELL_LABELS, **CELL_DOMAINS, epsilon=1e6, delta=1e-6,
        rng=np.random.default_rng(0))
    for j, (center, radius) in enumerate(zip(*CELL_DOMAINS.values())):
        alone, _ = A.private_one_median(CELL_POINTS[CELL_LABELS == j], center=np.array(center),
                                        radius=radius, epsilon=1e6, delta=1e-6,
                                        rng=np.random.default_rng(1))
        assert np.linalg.norm(medians[j] - alone) < 1e-3
        assert np.linalg.norm(medians[j] - _geometric_median(CELL_POINTS[CELL_LABELS == j])) < 0.05
    assert (event.epsilon, event.delta, event.details["cells"]) == (1e6, 1e-6, 3)


@pytest.mark.parametrize("options, name", [
    ({"labels": np.full(450, 3)}, "labels"),
    ({"labels": np.zeros(449, dtype=int)}, "labels"),
    ({"radii": [1.0, 0.0, 1.0]}, "radii"),
    ({"radii": [1.0, 1e101, 1.0]}, "radii"),  # beyond 1e100 the far-row map would overflow
    ({"centers": [[0.0, 0.0, 0.0]] * 3}, "centers"),
])
def test_one_medians_reject_bad_cells_before_any_randomness(options, name):
    rng = np.random.default_rng(0)
    kwargs = {"labels": CELL_LABELS, **CELL_DOMAINS, **options}
    with pytest.raises(ValueError, match=name):
        A.private_one_medians(CELL_POINTS, epsilon=1.0, delta=1e-6, rng=rng, **kwargs)
    assert rng.bit_generator.state == np.random.default_rng(0).bit_generator.state


# ---------------------------------------------------------------------------
# Gaussian estimate (CoinPress-style)
# ---------------------------------------------------------------------------

TRUE_MEAN = np.array([3.0, -2.0, 5.0])
TRUE_COVARIANCE = np.array([[2.0, 0.5, 0.0], [0.5, 1.0, 0.3], [0.0, 0.3, 0.5]])
GAUSSIAN_BOUNDS = {"center": np.zeros(3), "radius": 50.0, "sigma_min": 0.1, "sigma_max": 10.0}


@pytest.mark.parametrize("seed", range(3))
def test_gaussian_estimate_is_accurate_on_20k_samples(seed):
    points = np.random.default_rng(seed).multivariate_normal(TRUE_MEAN, TRUE_COVARIANCE, 20_000)
    mean, covariance, event = A.private_gaussian_estimate(
        points, n_public=20_000, rho=1.0, rng=np.random.default_rng(50 + seed), **GAUSSIAN_BOUNDS
    )
    # Sampling error alone is about 0.012 (mean) and 0.03 (spectral norm of the covariance).
    assert np.linalg.norm(mean - TRUE_MEAN) <= 0.05
    assert np.linalg.norm(covariance - TRUE_COVARIANCE, 2) <= 0.1
    whitening = np.linalg.inv(np.linalg.cholesky(TRUE_COVARIANCE))
    assert np.linalg.norm(whitening @ covariance @ whitening.T - np.eye(3), 2) <= 0.15
    assert event.rho <= 1.0 and (event.epsilon, event.delta) == (0.0, 0.0)


@pytest.mark.parametrize("n_points, rho", [(0, 1.0), (5, 1e-4), (50, 1e-3), (2_000, 0.1)])
def test_gaussian_covariance_is_always_symmetric_positive_definite(n_points, rho):
    points = np.random.default_rng(1).multivariate_normal(TRUE_MEAN, TRUE_COVARIANCE, n_points)
    mean, covariance, event = A.private_gaussian_estimate(
        points, n_public=max(n_points, 1), rho=rho, rng=np.random.default_rng(2), **GAUSSIAN_BOUNDS
    )
    assert np.array_equal(covariance, covariance.T)
    eigenvalues = np.linalg.eigvalsh(covariance)
    assert eigenvalues.min() >= 0.1**2 * (1 - 1e-9) and eigenvalues.max() <= 10.0**2 * (1 + 1e-9)
    assert np.linalg.norm(mean) <= 50.0 + 1e-9
    assert event.rho <= rho


def test_gaussian_covariance_stays_finite_with_a_row_whose_centring_overflows():
    # Review R9: x - mean overflowed to inf, and the whitening product made it NaN before the
    # clip: the covariance was NaN on 5 of 5 seeds with the row and 0 of 5 without it.
    rng = np.random.default_rng(0)
    center = np.array([-1e308, 0.0])
    X = np.vstack([center + rng.normal(size=(200, 2)), [[1e308, 0.0]]])
    for seed in range(3):
        _, covariance, _ = A.private_gaussian_estimate(
            X, n_public=len(X), center=center, radius=10.0, sigma_min=0.5, sigma_max=2.0,
            rho=1.0, rng=np.random.default_rng(seed))
        assert np.all(np.isfinite(covariance))


@pytest.mark.parametrize("unit", [1e-155, 1e150])
def test_gaussian_covariance_does_not_depend_on_the_unit_of_the_data(unit):
    # Review R10: the projection before whitening ran at radius clip / sigma_min(T), and
    # outside [2^-500, 2^500] project_into_ball proves no row inside: every whitened row went
    # to the sphere and the covariance came out as sigma_max^2 I.
    Z = np.random.default_rng(0).multivariate_normal([0.0, 0.0], [[1.3, 0.3], [0.3, 0.25]], 4000)

    def covariance(scale):
        return A.private_gaussian_estimate(
            Z * scale, n_public=4000.0, center=np.zeros(2), radius=5.0 * scale,
            sigma_min=0.1 * scale, sigma_max=10.0 * scale, rho=10.0,
            rng=np.random.default_rng(3))[1] / scale**2

    np.testing.assert_allclose(covariance(unit), covariance(1.0), rtol=1e-6)


@pytest.mark.parametrize("options", [
    {"rho": 1e-100},
    {"sigma_min": 1e-50, "sigma_max": 1e50, "rho": 1e-50},
    {"sigma_min": 1e150, "sigma_max": 1e150, "radius": 1e150},
    {"sigma_min": 1e100, "sigma_max": 1e100, "radius": 1e100, "rho": 1e-50},
])
def test_gaussian_estimate_is_finite_at_extreme_values_it_accepts(options):
    # Review R5-4: the refusal of overflowing noise scales leaves these (which ran) accepted.
    X = np.random.default_rng(0).normal(size=(50, 2))
    mean, covariance, _ = A.private_gaussian_estimate(
        X, rng=np.random.default_rng(0), **{**GAUSS, "n_public": 50.0, **options})
    assert np.all(np.isfinite(mean)) and np.all(np.isfinite(covariance))


@pytest.mark.parametrize("rho", [1e-40, 1e-120, 1e-160, 1e-300])
@pytest.mark.parametrize("n_public, radius, sigma_min, sigma_max", [
    (1.0, 6e-6, 6e-7, 1.5e-5), (1e40, 1.0, 0.1, 1.0), (1.0, 1e90, 1e-10, 1.0),
    (5.0, 6e93, 6e92, 1.5e94), (1.0, 1.0, 1e140, 1e145),
])
def test_the_learners_test_without_an_exception_is_its_pre_draw_check(
        n_public, radius, sigma_min, sigma_max, rho):
    # Review R11 M2: PrivateGaussianMixture asks _learner_accepts, on its released bounds, whether
    # the learner would refuse them, and releases its refinement instead (no charged failure).
    from skdpcluster.averaging.gaussian import _learner_accepts

    rng = np.random.default_rng(0)
    accepted = _learner_accepts(2, n_public, radius, sigma_min, sigma_max, rho, 2, 4)
    try:
        with np.errstate(over="ignore"):  # an accepted huge noise on three rows (finite)
            A.private_gaussian_estimate(np.zeros((3, 2)), n_public=n_public, center=np.zeros(2),
                                        radius=radius, sigma_min=sigma_min, sigma_max=sigma_max,
                                        rho=rho, rng=rng, n_iter_mean=2, n_iter_cov=4)
    except ValueError as error:
        assert not accepted and "too small" in str(error)
        assert rng.bit_generator.state == np.random.default_rng(0).bit_generator.state
    else:
        assert accepted


def test_gaussian_estimate_refuses_a_sigma_ratio_whose_sensitivity_overflows():
    # Review R10: (1e-80, 1e80) raised OverflowError after the mean stage had drawn its noise.
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match="sigma_max / sigma_min must be at most"):
        A.private_gaussian_estimate(np.zeros((10, 2)), n_public=10.0, center=np.zeros(2),
                                    radius=1.0, sigma_min=1e-80, sigma_max=1e80, rho=1.0, rng=rng)
    assert rng.bit_generator.state == np.random.default_rng(0).bit_generator.state


def test_a_huge_row_whitens_to_the_same_term_alone_and_in_a_block():
    # Review R9: (1.7e308,)*3 times a non-diagonal whitening overflowed with signs that
    # depended on the block (gemv alone, gemm beside another row): its term w w^T moved by
    # 133 against the bound clip^2 = 100. Projected into the reach first, it never overflows.
    from skdpcluster.averaging.gaussian import _whitened_second_moment

    transform = np.array([[3.782, -1.969, 0.5], [-1.969, 3.738, 0.2], [0.1, 0.2, 3.0]])
    reach = 10.0 / np.linalg.svd(transform, compute_uv=False)[-1]
    row = np.full((1, 3), 1.7e308)
    alone = _whitened_second_moment(RowChunk(row), np.zeros(3), transform, 10.0, reach)
    paired = _whitened_second_moment(RowChunk(np.vstack([row, np.zeros((1, 3))])), np.zeros(3),
                                     transform, 10.0, reach)
    np.testing.assert_allclose(paired, alone, rtol=1e-12, atol=0)
    direction = transform @ np.ones(3)
    expected = 100.0 * np.outer(direction, direction) / (direction @ direction)
    np.testing.assert_allclose(alone, expected, rtol=1e-12)


@pytest.mark.parametrize("rho, n_iter", [(1 / 3, 7), (0.1, 1), (2.0, 5)])
def test_gaussian_event_rho_never_exceeds_the_request(rho, n_iter):
    points = np.random.default_rng(0).normal(0, 1, (30, 2))
    _, _, event = A.private_gaussian_estimate(
        points, n_public=30, center=np.zeros(2), radius=5.0, sigma_min=0.5, sigma_max=2.0, rho=rho,
        rng=np.random.default_rng(0), n_iter_mean=n_iter, n_iter_cov=n_iter + 1,
    )
    assert event.rho <= rho and event.rho == pytest.approx(rho, rel=1e-12)


# ---------------------------------------------------------------------------
# Invalid parameters: ValueError naming the parameter, before any randomness
# ---------------------------------------------------------------------------

GRID = {"data_radius": 1.0, "r_min": 0.1}
AVG = {"n_public": 10, **GRID, "epsilon": 1.0, "delta": 1e-6, "beta": 0.05}
MEDIAN = {"center": np.zeros(2), "radius": 1.0, "epsilon": 1.0, "delta": 1e-6}
GAUSS = {"n_public": 10, "center": np.zeros(2), "radius": 1.0, "sigma_min": 0.1, "sigma_max": 1.0,
         "rho": 1.0}
POINTS = np.zeros((4, 2))
HUGE_GRID = {"data_radius": 5e306, "r_min": 5e306 / 2**40}
EXTREMES = np.array([-5e306, 5e306] * 12)

INVALID_CALLS = [
    (A.private_interior_point, ([0.0, np.nan],), {**GRID, "epsilon": 1.0}, "values"),
    (A.private_interior_point, ([[0.0]],), {**GRID, "epsilon": 1.0}, "values"),
    (A.private_interior_point, ([0.0],), {**GRID, "epsilon": 0.0}, "epsilon"),
    (A.private_interior_point, ([0.0],), {**GRID, "r_min": 0.0, "epsilon": 1.0}, "r_min"),
    (A.private_interior_point, ([0.0],), {**GRID, "data_radius": -1.0, "epsilon": 1.0},
     "data_radius"),
    # Review R5-4: above 1e100 (the estimators' limit) the release could raise after the
    # segment was drawn, depending on its width: at 5e306 with half the values at each end.
    (A.private_interior_point, (EXTREMES,), {**HUGE_GRID, "epsilon": 1.0}, "data_radius"),
    (A.private_bounding_segment, (EXTREMES,), {**HUGE_GRID, "epsilon": 1.0, "beta": 0.05},
     "data_radius"),
    (A.private_average_1d, (EXTREMES,), {**AVG, **HUGE_GRID, "epsilon": 50.0}, "data_radius"),
    (A.private_average, (EXTREMES[:, None],), {**AVG, **HUGE_GRID, "epsilon": 50.0},
     "data_radius"),
    (A.private_average_1d, ([0.0],), {**AVG, "data_radius": 1.01e100, "r_min": 1e90},
     "data_radius"),
    (A.private_bounding_segment, ([0.0],), {**GRID, "epsilon": 1.0, "beta": 1.0}, "beta"),
    (A.private_average_1d, ([0.0],), {**AVG, "n_public": 0.5}, "n_public"),
    (A.private_average_1d, ([0.0],), {**AVG, "delta": 0.0}, "delta"),
    (A.private_average_1d, ([0.0],), {**AVG, "neighbouring": "swap"}, "neighbouring"),
    (A.private_average, (np.zeros(3),), AVG, "points"),
    (A.private_average, (np.zeros((3, 0)),), AVG, "points"),
    (A.private_average, (POINTS,), {**AVG, "composition": "optimal"}, "composition"),
    (A.private_average, (POINTS,), {**AVG, "n_public": float("inf")}, "n_public"),
    (A.private_count, (-1,), {"epsilon": 1.0}, "count"),
    (A.private_count, (2.5,), {"epsilon": 1.0}, "count"),
    (A.private_count, (3,), {"epsilon": -1.0}, "epsilon"),
    (A.private_one_median, (POINTS,), {**MEDIAN, "center": np.zeros(3)}, "center"),
    (A.private_one_median, (POINTS,), {**MEDIAN, "radius": 0.0}, "radius"),
    (A.private_one_median, (POINTS,), {**MEDIAN, "radius": 1e101}, "radius"),
    (A.private_one_median, (POINTS,), {**MEDIAN, "delta": 1.0}, "delta"),
    (A.private_one_median, (POINTS,), {**MEDIAN, "n_iter": 0}, "n_iter"),
    (A.private_one_median, (POINTS,), {**MEDIAN, "step_scale": -1.0}, "step_scale"),
    (A.private_one_median, (POINTS,), {**MEDIAN, "neighbouring": "swap"}, "neighbouring"),
    (A.private_gaussian_estimate, (POINTS,), {**GAUSS, "sigma_max": 0.05}, "sigma_max"),
    (A.private_gaussian_estimate, (POINTS,), {**GAUSS, "sigma_min": 0.0}, "sigma_min"),
    (A.private_gaussian_estimate, (POINTS,), {**GAUSS, "rho": 0.0}, "rho"),
    (A.private_gaussian_estimate, (POINTS,), {**GAUSS, "n_iter_cov": 1.5}, "n_iter_cov"),
    (A.private_gaussian_estimate, (POINTS,), {**GAUSS, "n_iter_mean": True}, "n_iter_mean"),
    (A.private_gaussian_estimate, (np.full((4, 2), np.inf),), GAUSS, "points"),
    # Review R5-4: the square of a mean step's noise scale overflowed once the noise was drawn
    # (OverflowError at rho=1e-300, or a radius of 1e300); sigma_max**2 at the end, likewise.
    (A.private_gaussian_estimate, (POINTS,), {**GAUSS, "rho": 1e-300}, "rho=1e-300 is too small"),
    (A.private_gaussian_estimate, (POINTS,), {**GAUSS, "radius": 1e300},
     "rho=1.0.*radius=1e\\+300"),
    (A.private_gaussian_estimate, (POINTS,), {**GAUSS, "sigma_min": 1e155, "sigma_max": 1e155},
     "sigma_max=1e\\+155"),
    (A.private_gaussian_estimate, (POINTS,), {**GAUSS, "rho": 5e-324}, "rho=5e-324 is too small"),
]


@pytest.mark.parametrize("function, args, kwargs, match", INVALID_CALLS)
def test_invalid_parameters_raise_before_any_randomness(function, args, kwargs, match):
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match=match):
        function(*args, rng=rng, **kwargs)
    assert rng.bit_generator.state == state


@pytest.mark.parametrize("function", [A.private_average_1d, A.private_average])
def test_an_average_whose_gaussian_step_could_overflow_is_refused_before_any_randomness(function):
    # Review R5-4: the Gaussian step's sigma grows with the released width; where it overflows
    # at some widths only, 5 of these 18 releases raised after the segment was drawn.
    unit = analytic_gaussian_sigma(1.0, 0.5e-6, 3e-9)
    r_min = 1.797e308 / (1.25 * unit)  # widths 2 r_min fit, 3 r_min overflow
    for values in (np.zeros(24), np.ones(24), np.array([-1.0, r_min] * 12)):
        points = values if function is A.private_average_1d else values[:, None]
        for seed in range(6):
            rng = np.random.default_rng(seed)
            with pytest.raises(ValueError, match="epsilon=5e-07, delta=3e-09.*widest segment"):
                function(points, n_public=1.0, data_radius=1.0, r_min=r_min, epsilon=1e-6,
                         delta=3e-9, beta=0.05, rng=rng)
            assert rng.bit_generator.state == np.random.default_rng(seed).bit_generator.state


@pytest.mark.parametrize("function, args, kwargs", [
    (A.private_interior_point, ([0.0],), {**GRID, "epsilon": 1.0}),
    (A.private_count, (3,), {"epsilon": 1.0}),
    (A.private_gaussian_estimate, (POINTS,), GAUSS),
])
def test_a_legacy_random_state_is_refused(function, args, kwargs):
    with pytest.raises(ValueError, match="rng"):
        function(*args, rng=np.random.RandomState(0), **kwargs)


@pytest.mark.parametrize("n_features", [1, 4])
def test_huge_epsilon_uses_basic_composition_instead_of_overflowing(n_features):
    """At epsilon = 1e5 the advanced bound's e^{eps_ax} overflows a float (an OverflowError
    before the fix): it is infinite, so "auto" takes basic composition and spends the request."""
    points = np.random.default_rng(1).normal(0, 1, (40, n_features))
    estimate, event = A.private_average(
        points, n_public=40, data_radius=5.0, r_min=0.1, epsilon=1e5, delta=1e-6, beta=0.05,
        rng=np.random.default_rng(0))
    assert event.details["composition"] == "basic" and event.epsilon <= 1e5
    np.testing.assert_allclose(estimate, points.mean(axis=0), atol=1e-2)
    with pytest.raises(ValueError, match="composition='advanced'"):
        A.private_average(points, n_public=40, data_radius=5.0, r_min=0.1, epsilon=1e5,
                          delta=1e-6, beta=0.05, rng=np.random.default_rng(0),
                          composition="advanced")


@pytest.mark.parametrize("scale", [3.5e-162, 2.3e-162, 1e-150, 1.0, 1e150, 1e-320])
def test_one_median_unit_vectors_have_norm_at_most_one(scale):
    """Issue #17: every row adds a vector of norm <= 1 as computed, checked in exact arithmetic.

    The squared norms of tiny differences underflow (the old 1/N gave norms up to 1.25 at
    2.3e-162) and ordinary ones round (1 + 2e-16 at scale 1): the factor gamma/N of
    ``_block_unit_sums`` keeps every contribution within the sensitivity bound.
    """
    from fractions import Fraction

    rng = np.random.default_rng(0)
    n_features = 10
    differences = (rng.uniform(0.5, 1.5, (2000, n_features)) * rng.choice([-1, 1], (2000, 1))
                   * scale)
    differences = np.vstack([differences, scale * np.eye(n_features)])  # one coordinate: worst
    iterate = np.full((1, n_features), 3.0 * scale)
    points_t = np.ascontiguousarray((iterate - differences).T)
    blocks = [(0, row, row + 1) for row in range(len(differences))]
    contributions = [partial for _, partial in
                     A.one_median._block_unit_sums(iterate, points_t, blocks)]
    worst = max(sum(Fraction(float(v)) ** 2 for v in c) for c in contributions)
    assert worst <= 1
    if scale >= 1e-150:  # no underflow: the contributions are unit vectors to 1e-15
        assert float(worst) == pytest.approx(1.0, abs=1e-14)


@pytest.mark.parametrize("n_features", [1, 3, 10])
def test_one_median_unit_sums_are_the_same_bits_on_any_number_of_threads(n_features,
                                                                        monkeypatch):
    """Issue #17: the blocks' partial sums are added in block order whatever the threads."""
    one_median = A.one_median
    monkeypatch.setattr(one_median, "_MEDIAN_THREAD_BLOCKS", 1)  # threads on a few blocks
    rng = np.random.default_rng(1)
    counts = np.array([3 * one_median._MEDIAN_BLOCK_ELEMENTS // n_features + 5, 0, 17, 2_000])
    points_t = rng.normal(scale=100.0, size=(n_features, counts.sum()))
    iterates = rng.normal(size=(len(counts), n_features))
    runs = one_median._cell_blocks(counts, n_features)
    alone = one_median._unit_sums(iterates, points_t, runs, 1)
    assert [len(run) for run in runs] == [6] and not alone[1].any()
    for n_threads in (2, 3, 8):
        runs = one_median._cell_blocks(counts, n_features, n_threads)
        assert len(runs) > 1
        assert [b for run in runs for b in run] == one_median._cell_blocks(counts, n_features)[0]
        assert np.array_equal(one_median._unit_sums(iterates, points_t, runs, n_threads), alone)


@pytest.mark.parametrize("n_threads", [1, 2, 3])
def test_points_sorted_by_cell_are_the_transposed_rows_on_any_number_of_threads(n_threads,
                                                                                monkeypatch):
    """Issue #17: the blocked gather gives ``points[order].T``, C-ordered, on any threads."""
    monkeypatch.setattr(A.one_median, "_GATHER_THREAD_BLOCKS", 1)  # threads on a few blocks
    rng = np.random.default_rng(2)
    points = rng.normal(size=(20_011, 7))
    order = rng.permutation(len(points))[:19_000].astype(np.int32)
    points_t = A.one_median.sorted_by_cell(points, order, n_threads)
    assert points_t.flags.c_contiguous
    assert np.array_equal(points_t, points[order].T)
    assert A.one_median.sorted_by_cell(points, order[:0], n_threads).shape == (7, 0)


# ---------------------------------------------------------------------------
# Clipping with an exact norm bound (review R6a, F5)
# ---------------------------------------------------------------------------

CLIP_RADII = (0.7, 1.0, 3.3e5, 1e90, 1e-200, 2.0**-1070)


def _old_clipping(X, radius):
    """Mutant: the scaling of ``_ClippedData.from_rows`` before R6a F5 (x * radius / sqrt(s))."""
    rows = X.copy()
    sq_norms = np.einsum("ij,ij->i", rows, rows)
    outside = np.flatnonzero(sq_norms > radius * radius)
    rows[outside] *= (radius / np.sqrt(sq_norms[outside]))[:, None]
    return rows


CLIPPINGS = {
    "from_rows": lambda X, radius: _ClippedData.from_rows(X, np.zeros(X.shape[1]), radius).X,
    "clip_rows": lambda X, radius: clip_rows(X, np.zeros(X.shape[1]), radius),
    "sparse_rows": lambda X, radius: _SparseRows(np.zeros(X.shape[1]), X.shape[1], np.inf,
                                                 radius)(X),
    "gaussian_clip_rows": lambda X, radius: A.gaussian._clip_rows(X, radius),
    "ktuple_averages": lambda X, radius: project_to_ball(X[:, None, :], radius)[:, 0, :],
    "local_clip_rows": lambda X, radius: _ldp._clip_rows(X, CostRound(
        "clip", X[:1], X[:1], 1.0, 1.0, 1e-5, np.zeros(X.shape[1]), radius)),
    "mixture_offsets": lambda X, radius: np.array([
        _clipped_offset_sum(RowChunk(row[None]), np.zeros(X.shape[1]), radius) for row in X]),
    "highdim_projected_rows": lambda X, radius: _clip_in_place(X.copy(), radius),
    "mutant-old-scaling": _old_clipping,
}


def _adversarial_rows(n_features, radius, rng):
    """Huge, tiny, subnormal and mixed coordinates, and rows on and next to the sphere."""
    rows = []
    for exponent in (-1074, -1060, -1000, -540, -300, -30, 0, 30, 300, 1000, 1021):
        scale = 2.0**exponent
        rows += list(rng.standard_normal((6, n_features)) * scale)
        rows += list(np.full((2, n_features), scale) * (1 + rng.integers(0, 2**20, (2, n_features))
                                                        * 2.0**-52))
        mixed = rng.standard_normal((2, n_features)) * scale
        mixed[:, 1:] *= 2.0**-600  # one big coordinate, the others' squares underflow
        rows += list(mixed)
    directions = rng.standard_normal((60, n_features))
    on_sphere = radius * (directions / np.linalg.norm(directions, axis=1, keepdims=True))
    rows += list(on_sphere)
    for steps in (1, 2, 3):  # a few units in the last place outside (or inside) the sphere
        rows += list(np.nextafter(on_sphere[:20], np.copysign(np.inf, on_sphere[:20])))
        on_sphere = np.nextafter(on_sphere, 0.0)
        rows += list(on_sphere[:20])
    rows.append(np.eye(n_features)[0] * radius)  # exactly at the radius
    rows.append(np.zeros(n_features))
    X = np.array(rows)
    return np.ascontiguousarray(X[np.all(np.isfinite(X), axis=1)])


def _exact_sq_norms(rows):
    return [sum(Fraction(float(v)) ** 2 for v in row) for row in rows]


@pytest.mark.parametrize("name", list(CLIPPINGS))
@pytest.mark.parametrize("n_features", [1, 2, 10, 100])
def test_clipped_rows_exact_norm_at_most_the_radius(name, n_features):
    # The sums of x (and x / Lambda) assume every row's norm <= Lambda: checked in exact
    # rational arithmetic on the floats the clipping returns. The old scaling exceeded it by
    # up to 6.7e-16 (relative) on a quarter of the projected rows, and left rows whose computed
    # norm rounded down to Lambda outside.
    rng = np.random.default_rng(n_features)
    violations = 0
    for radius in CLIP_RADII:
        X = _adversarial_rows(n_features, radius, rng)
        with np.errstate(all="ignore"):
            clipped = CLIPPINGS[name](X, radius)
        assert clipped.shape == X.shape and np.all(np.isfinite(clipped))
        bound = Fraction(radius) ** 2
        violations += sum(norm > bound for norm in _exact_sq_norms(clipped))
    assert (violations == 0) is (not name.startswith("mutant"))


@pytest.mark.parametrize("n_features", [1, 2, 10, 100])
def test_located_group_offsets_exact_norm_at_most_one(n_features):
    # Review R8, finding 2: private_group_means summed radially scaled offsets under the
    # sensitivity 2 sqrt(k) of unit vectors; half of the clipped ones exceeded norm 1.
    rng = np.random.default_rng(n_features)
    for radius in CLIP_RADII:
        X = _adversarial_rows(n_features, radius, rng)
        anchors = np.zeros((2, n_features))
        nearest = np.zeros((len(X), 2), dtype=np.intp)
        with np.errstate(all="ignore"):
            offsets = located.group_offsets(X[:, None, :], nearest, anchors,
                                            np.array([radius, radius / 3.0]))
        assert offsets.shape == (len(X), 2, n_features) and np.all(np.isfinite(offsets))
        assert max(_exact_sq_norms(offsets.reshape(-1, n_features))) <= 1


#: The centring clippings, from a public centre: ``(X, center, radius) -> rows``.
CENTRED_CLIPPINGS = {
    "from_rows": lambda X, c, radius: _ClippedData.from_rows(X, c, radius).X,
    "clip_rows": clip_rows,
    "sparse_rows": lambda X, c, radius: _SparseRows(c, X.shape[1], np.inf, radius)(X),
    "local_clip_rows": lambda X, c, radius: _ldp._clip_rows(X, CostRound(
        "clip", X[:1], X[:1], 1.0, 1.0, 1e-5, c, radius)),
    "mixture_offsets": lambda X, c, radius: np.array([
        _clipped_offset_sum(RowChunk(row[None]), c, radius) for row in X]),
    "located_offsets": lambda X, c, radius: radius * located.group_offsets(  # radius 2: exact
        X[:, None, :], np.zeros((len(X), 1), dtype=np.intp), c[None], np.array([radius]))[:, 0],
}


@pytest.mark.parametrize("name", list(CENTRED_CLIPPINGS))
def test_a_row_whose_centring_overflows_is_clipped_along_its_infinite_coordinates(name):
    # Review R8, finding 1: x - c of finite x and c overflows to inf, and the clipping made
    # that row NaN (inf * 0): a NaN release or a failed fit told the row apart.
    center = np.array([-1e308, 1e308, 0.0])
    X = np.array([[1e308, 1.0, 5.0],       # overflows in the first coordinate: (+1, 0, 0)
                  [1e308, -1e308, 2.0],    # in two: (+1, -1, 0) / sqrt 2
                  [-1e308, 1e308, 1.0]])   # the centre, up to its last coordinate
    with np.errstate(all="ignore"):
        rows = CENTRED_CLIPPINGS[name](X, center, 2.0)
    assert np.all(np.isfinite(rows))
    assert max(_exact_sq_norms(rows)) <= 4
    np.testing.assert_allclose(rows[0], [2.0, 0.0, 0.0], rtol=1e-14)
    np.testing.assert_allclose(rows[1], [math.sqrt(2.0), -math.sqrt(2.0), 0.0], rtol=1e-14)
    np.testing.assert_allclose(rows[2], [0.0, 0.0, 1.0], rtol=1e-14)


@pytest.mark.parametrize("n_features", [1, 2, 10, 100])
def test_clipping_keeps_rows_inside_and_projects_the_others_radially(n_features):
    rng = np.random.default_rng(7)
    radius = 3.0
    X = rng.standard_normal((500, n_features)) * 10 ** rng.uniform(-3, 3, (500, 1))
    norms = np.linalg.norm(X, axis=1)
    clipped = X.copy()
    with np.errstate(all="ignore"):
        sq_norms = project_into_ball(clipped, radius)
    inside = norms <= radius * (1 - 1e-12)
    assert np.array_equal(clipped[inside], X[inside])  # bit for bit
    outside = norms > radius
    expected = X[outside] * (radius / norms[outside])[:, None]
    np.testing.assert_allclose(clipped[outside], expected, rtol=1e-13, atol=0)
    np.testing.assert_allclose(sq_norms, np.einsum("ij,ij->i", clipped, clipped), rtol=0, atol=0)
    kept = X[inside]  # nothing to clip: the fit reads the rows themselves (no copy)
    assert _ClippedData.from_rows(kept, np.zeros(n_features), radius).X is kept


def test_one_median_refuses_a_step_scale_whose_steps_overflow_before_any_randomness():
    # step_scale=1e308 released NaN and 1e155 collapsed the iterates, after the noise was drawn.
    from skdpcluster import BudgetAccountant, PrivateStableKMedian
    from skdpcluster.averaging import private_one_median

    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="step_scale=1e.* is above 1e.06"):
        private_one_median(np.ones((50, 2)), center=np.zeros(2), radius=2.0,
                           epsilon=1.0, delta=1e-6, rng=rng, step_scale=1e155)
    assert rng.bit_generator.state == state
    accountant = BudgetAccountant()
    with pytest.raises(ValueError, match="gd_step_scale"):
        PrivateStableKMedian(gd_step_scale=1e155, accountant=accountant).fit(np.ones((20, 2)))
    assert accountant.ledger == []


def test_one_median_refuses_a_domain_whose_iterates_would_overflow_before_any_randomness():
    # Re-review V2: a centre at -1.5e308 (radius 1e100) released [-inf, -inf]: the suffix
    # average adds up 25 iterates near -1.5e308.
    from skdpcluster.averaging import private_one_median

    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="suffix iterates would overflow"):
        private_one_median(np.full((20, 2), -1.5e308), center=np.full(2, -1.5e308), radius=1e100,
                           epsilon=1.0, delta=1e-6, rng=rng)
    assert rng.bit_generator.state == state
