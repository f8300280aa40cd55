import math

import numpy as np
import pytest
from scipy import integrate, optimize, stats

from dp_stats import delta_lower_bound, epsilon_lower_bound, event_counts
from skdpcluster import mechanisms as M

N_SAMPLES = 400_000


def _exact_delta(sigma, sensitivity, epsilon):
    """Balle & Wang (2018) Theorem 8 in plain (non-log) arithmetic."""
    u, v = sensitivity / (2 * sigma), epsilon * sigma / sensitivity
    return stats.norm.cdf(u - v) - math.exp(epsilon) * stats.norm.cdf(-u - v)


@pytest.mark.parametrize(
    "sensitivity, epsilon, delta",
    [(1.0, 0.1, 1e-5), (1.0, 0.5, 1e-6), (2.5, 1.0, 1e-6), (1.0, 3.0, 1e-8), (0.3, 8.0, 1e-5)],
)
def test_analytic_sigma_matches_independent_root_find(sensitivity, epsilon, delta):
    sigma = M.analytic_gaussian_sigma(sensitivity, epsilon, delta)
    reference = optimize.brentq(
        lambda s: _exact_delta(s, sensitivity, epsilon) - delta, 1e-3 * sensitivity, 1e3 * sensitivity,
        xtol=1e-13,
    )
    assert sigma == pytest.approx(reference, rel=1e-8)
    assert sigma >= reference  # rounded up, never below the exact root
    assert _exact_delta(sigma, sensitivity, epsilon) <= delta * (1 + 1e-9)


def _mp_delta(sigma, sensitivity, epsilon, mp):
    """Balle & Wang (2018) Theorem 8 in mpmath's precision."""
    sigma, sensitivity, epsilon = mp.mpf(sigma), mp.mpf(sensitivity), mp.mpf(epsilon)
    u, v = sensitivity / (2 * sigma), epsilon * sigma / sensitivity
    return mp.ncdf(u - v) - mp.exp(epsilon) * mp.ncdf(-u - v)


_AUDIT_GRID = [(sensitivity, epsilon, delta) for epsilon in (1e-3, 1e-2, 0.1, 1.0, 5.0, 20.0, 50.0)
               for delta in (1e-12, 1e-9, 1e-6, 1e-3, 0.1, 0.5) for sensitivity in (1e-100, 1.0, 1e100)]
# A tiny epsilon with a tiny delta: the float evaluation of delta(sigma) is poor near the root
# (or fails: then the classical sigma is returned), so only the guarantee is checked.
_TINY_EPSILON = [(1.0, 1e-14, 1e-30), (1.0, 1e-14, 1e-300), (1.0, 1e-12, 1e-100), (1.0, 1e-12, 1e-300),
                 (1.0, 1e-10, 1e-300)]


def test_analytic_sigma_is_never_below_the_exact_root():
    """Regression (review RA-11): 7 of the audit's 126 settings returned sigma up to 3.25e-12 below
    the root (epsilon 50, delta 1e-6, sensitivity 1e-100: exact delta 1.00000000018 x the target),
    and at a tiny epsilon with a tiny delta the float root had up to e^620 x the target.
    Checked in 60-digit arithmetic: delta(sigma) <= delta, and on the audit's grid sigma is
    within 1e-9 of the root.
    """
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 60
    for sensitivity, epsilon, delta in _AUDIT_GRID + _TINY_EPSILON:
        sigma = M.analytic_gaussian_sigma(sensitivity, epsilon, delta)
        assert _mp_delta(sigma, sensitivity, epsilon, mp) <= delta, (sensitivity, epsilon, delta)
        if (sensitivity, epsilon, delta) in _TINY_EPSILON:
            assert sigma <= M.classical_gaussian_sigma(sensitivity, epsilon, delta)
        else:
            assert _mp_delta(sigma * (1 - 1e-9), sensitivity, epsilon, mp) > delta, (sensitivity, epsilon, delta)


@pytest.mark.parametrize("epsilon, delta", [(0.1, 1e-5), (0.5, 1e-9), (0.9, 6.9e-13)])
def test_analytic_sigma_is_below_classical(epsilon, delta):
    classical = M.classical_gaussian_sigma(1.0, epsilon, delta)
    assert classical == pytest.approx(math.sqrt(2 * math.log(1.25 / delta)) / epsilon)
    assert M.analytic_gaussian_sigma(1.0, epsilon, delta) < classical


def test_analytic_sigma_handles_tiny_delta():
    # delta = e^-28 / (8k) style values: the log-space evaluation must stay exact.
    sigma = M.analytic_gaussian_sigma(1.0, 0.25, 1e-14)
    log_delta = M._log_gaussian_delta(sigma, 1.0, 0.25)
    assert log_delta <= math.log(1e-14) + 1e-9
    assert log_delta == pytest.approx(math.log(1e-14), abs=1e-6)


@pytest.mark.parametrize("epsilon", [4e4, 1e5, 1e6])
def test_analytic_sigma_at_huge_epsilon(epsilon):
    """Regression: e^eps cancelled catastrophically against Phi(-u-v) for epsilon above ~4e4."""
    sigma = M.analytic_gaussian_sigma(1.0, epsilon, 0.1)
    assert math.isfinite(sigma) and sigma > 0
    assert math.exp(M._log_gaussian_delta(sigma, 1.0, epsilon)) == pytest.approx(0.1, rel=1e-6)
    assert M.analytic_gaussian_sigma(1.0, 2 * epsilon, 0.1) < sigma


@pytest.mark.parametrize("epsilon, delta", [(0.5, 1e-6), (1.0, 1e-30), (25.0, 1e-6), (1e4, 0.1)])
def test_analytic_sigma_is_the_unit_sigma_scaled_and_rounded_up(epsilon, delta):
    """Review R5-4: the bracket around log(sensitivity) underflowed or overflowed exp (a
    ZeroDivisionError at 9.88e-324, 'math domain error' at 3e306, OverflowError at 1e307). The
    calibration runs at sensitivity 1 and is scaled, rounded up one float: delta(sigma) <= delta
    at every scale, within 1e-9 of the root (60-digit arithmetic)."""
    mp = pytest.importorskip("mpmath")
    mp.mp.dps = 60
    unit = M._analytic_unit_sigma(epsilon, delta)
    if epsilon < 1:
        unit = min(unit, M._classical_unit_sigma(epsilon, delta))
    for sensitivity in (9.88e-324, 1e-310, 1e-300, 1e-150, 1e-10, 1.0, 3.7, 1e10, 1e150, 1e300,
                        3e306):
        sigma = M.analytic_gaussian_sigma(sensitivity, epsilon, delta)
        assert sigma == math.nextafter(sensitivity * unit, math.inf)
        assert _mp_delta(sigma, sensitivity, epsilon, mp) <= delta, sensitivity
        if sensitivity >= 1e-300:  # a subnormal sigma is coarser than 1e-9
            assert _mp_delta(sigma * (1 - 1e-9), sensitivity, epsilon, mp) > delta, sensitivity


@pytest.mark.parametrize("calibration, sensitivity, epsilon, match", [
    ("analytic", 1e307, 0.5, "sensitivity=1e\\+307, epsilon=0.5, delta=1e-30"),
    ("analytic", 1e300, 1e-10, "sensitivity=1e\\+300, epsilon=1e-10"),
    ("analytic", 1.0, 1e-310, "epsilon=1e-310, delta=1e-30"),
    ("classical", 1e300, 1e-10, "sensitivity=1e\\+300, epsilon=1e-10"),  # it returned inf
])
def test_a_noise_scale_above_the_float_maximum_is_refused_before_any_draw(
        calibration, sensitivity, epsilon, match):
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=match):
        M.gaussian_mechanism(0.0, sensitivity=sensitivity, epsilon=epsilon, delta=1e-30, rng=rng,
                             calibration=calibration)
    assert rng.bit_generator.state == np.random.default_rng(0).bit_generator.state


def test_classical_refuses_epsilon_at_least_one():
    with pytest.raises(ValueError, match="epsilon < 1.*analytic"):
        M.classical_gaussian_sigma(1.0, 1.0, 1e-6)


@pytest.mark.parametrize("epsilon, delta", [(0.1, 1e-6), (1.0, 1e-6), (2.0, 1e-10), (10.0, 1e-5)])
def test_zcdp_conversions_round_trip(epsilon, delta):
    rho = M.zcdp_rho_for_dp(epsilon, delta)
    assert M.zcdp_to_dp(rho, delta) == pytest.approx(epsilon, rel=1e-12)
    # rho = eps^2/2 for pure eps-DP is weaker than what (eps, delta) allows only for tiny eps;
    # the closed form must match the textbook expression.
    expected = (math.sqrt(math.log(1 / delta) + epsilon) - math.sqrt(math.log(1 / delta))) ** 2
    assert rho == pytest.approx(expected, rel=1e-9)


def test_subsampling_bounds():
    eps, delta = M.subsampled_epsilon_delta(2.0, 1e-6, 10, 1000)
    assert eps == pytest.approx(math.log(1 + 0.01 * (math.e**2 - 1)))
    assert delta == pytest.approx(1e-8)
    eps, delta = M.subsampled_epsilon_delta(math.log(68.6), 0.0, 15, 4296, bound="bkn10")
    assert eps == pytest.approx(15 / 4296 * (3 + 68.6))
    eps, _ = M.subsampled_epsilon_delta(2000.0, 0.0, 10, 1000)  # no overflow for huge epsilon
    assert eps == pytest.approx(2000.0 + math.log(0.01), rel=1e-12)
    with pytest.raises(ValueError, match="balle2018"):
        M.subsampled_epsilon_delta(5.0, 0.0, 100, 1000, bound="bkn10")


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda rng: M.laplace_mechanism(0.0, sensitivity=1, epsilon=0, rng=rng), "epsilon"),
        (lambda rng: M.laplace_mechanism(0.0, sensitivity=-1, epsilon=1, rng=rng), "sensitivity"),
        (lambda rng: M.gaussian_mechanism(0.0, sensitivity=1, epsilon=1, delta=0, rng=rng), "delta"),
        (lambda rng: M.gaussian_mechanism(0.0, sensitivity=1, epsilon=1, delta=1.5, rng=rng), "delta"),
        (lambda rng: M.gaussian_mechanism(0.0, sensitivity=1, epsilon=1, delta=1e-6, rng=rng,
                                          calibration="nope"), "calibration"),
        (lambda rng: M.exponential_mechanism([1.0, np.nan], epsilon=1, sensitivity=1, rng=rng), "finite"),
        (lambda rng: M.exponential_mechanism([1.0], epsilon=1, sensitivity=0, rng=rng), "sensitivity"),
        (lambda rng: M.zcdp_gaussian_mechanism(0.0, sensitivity=1, rho=0, rng=rng), "rho"),
        # Review R5-4: OverflowError in the float error bound of delta(sigma) from about 3e18.
        (lambda rng: M.gaussian_mechanism(0.0, sensitivity=1, epsilon=1e19, delta=1e-6, rng=rng),
         "epsilon must be at most 1e\\+17"),
    ],
)
def test_invalid_parameters_raise_value_error(call, match):
    with pytest.raises(ValueError, match=match):
        call(np.random.default_rng(0))


@pytest.mark.parametrize("log_base_measure, match", [
    ([0.0, np.nan], "NaN or \\+inf"),
    ([0.0, np.inf], "NaN or \\+inf"),
    ([-np.inf, -np.inf], "every candidate"),
    ([0.0, 0.0, 0.0], "shape of scores"),
], ids=["nan", "plus_inf", "all_minus_inf", "wrong_shape"])
def test_exponential_mechanism_refuses_a_bad_log_base_measure_before_drawing(log_base_measure, match):
    """Regression (review RA-12): [0, nan] picked the NaN index and all -inf picked index 0."""
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match=match):
        M.exponential_mechanism([0.0, 5.0], epsilon=1.0, sensitivity=1.0, rng=rng,
                                log_base_measure=log_base_measure)
    assert rng.bit_generator.state == state


def test_exponential_mechanism_never_picks_a_candidate_of_weight_zero():
    rng = np.random.default_rng(0)
    picks = {M.exponential_mechanism([0.0, 50.0, 0.0], epsilon=1.0, sensitivity=1.0, rng=rng,
                                     log_base_measure=[0.0, -np.inf, 0.0])[0] for _ in range(200)}
    assert picks == {0, 2}


def test_lazy_zero_cells_match_the_thresholded_laplace_histogram():
    """Binomial count and gamma + Exp(b) values equal the law of 0 + Lap(b) kept above gamma."""
    scale, threshold, n_cells = 2.0, 3.0, 5000
    rng = np.random.default_rng(4)
    direct = rng.laplace(0.0, scale, size=(200, n_cells))
    kept = direct[direct > threshold]
    lazy = [M.laplace_zero_cells_above(n_cells, scale=scale, threshold=threshold, rng=rng)
            for _ in range(200)]
    counts = np.array([n for n, _ in lazy])
    expected = n_cells * 0.5 * math.exp(-threshold / scale)
    assert abs(counts.mean() - expected) < 5 * math.sqrt(expected / 200)
    assert abs((direct > threshold).sum(axis=1).mean() - expected) < 5 * math.sqrt(expected / 200)
    _, p_value = stats.ks_2samp(np.concatenate([v for _, v in lazy]), kept)
    assert p_value > 1e-4
    with pytest.raises(ValueError, match="threshold"):
        M.laplace_zero_cells_above(10, scale=1.0, threshold=-1.0, rng=rng)


def test_events_record_the_calibration():
    rng = np.random.default_rng(0)
    _, event = M.laplace_mechanism(np.zeros(3), sensitivity=2.0, epsilon=0.5, rng=rng, label="x")
    assert (event.mechanism, event.scale, event.cost(), event.label) == ("laplace", 4.0, (0.5, 0.0), "x")
    _, event = M.gaussian_mechanism(1.0, sensitivity=1.0, epsilon=1.0, delta=1e-6, rng=rng)
    assert event.scale == pytest.approx(M.analytic_gaussian_sigma(1.0, 1.0, 1e-6))
    assert M.PrivacyEvent.from_dict(event.to_dict()) == event


def test_exponential_mechanism_has_no_overflow_and_matches_softmax():
    rng = np.random.default_rng(1)
    scores = np.array([1e7, 1e7 - 1.0, 1e7 - 2.0, 0.0])
    draws = np.array([
        M.exponential_mechanism(scores, epsilon=2.0, sensitivity=1.0, rng=rng)[0] for _ in range(20_000)
    ])
    expected = np.exp(scores - scores.max())
    expected /= expected.sum()
    observed = np.bincount(draws, minlength=4)
    assert observed[3] == 0
    _, p_value = stats.chisquare(observed[:3], expected[:3] * draws.size / expected[:3].sum())
    assert p_value > 1e-4


# ---------------------------------------------------------------------------
# Statistical privacy checks on neighbouring inputs
# ---------------------------------------------------------------------------

EDGES = np.linspace(-4.0, 5.0, 37)


def _laplace_samples(value, scale, seed):
    return value + np.random.default_rng(seed).laplace(0.0, scale, N_SAMPLES)


@pytest.mark.parametrize("epsilon", [0.5, 1.0])
def test_laplace_empirical_loss_within_epsilon(epsilon):
    rng_a, rng_b = np.random.default_rng(10), np.random.default_rng(11)
    # Every coordinate is an independent draw of the scalar sensitivity-1 mechanism.
    a = M.laplace_mechanism(np.zeros(N_SAMPLES), sensitivity=1.0, epsilon=epsilon, rng=rng_a)[0]
    b = M.laplace_mechanism(np.ones(N_SAMPLES), sensitivity=1.0, epsilon=epsilon, rng=rng_b)[0]
    bound = epsilon_lower_bound(event_counts(a, EDGES), N_SAMPLES, event_counts(b, EDGES), N_SAMPLES)
    assert bound <= epsilon
    assert bound > 0.7 * epsilon  # the check is sharp: it sees most of the true loss


def test_laplace_check_detects_under_noise():
    epsilon = 1.0
    a = _laplace_samples(0.0, 0.5 / epsilon, 12)  # half the required scale: true loss 2 epsilon
    b = _laplace_samples(1.0, 0.5 / epsilon, 13)
    bound = epsilon_lower_bound(event_counts(a, EDGES), N_SAMPLES, event_counts(b, EDGES), N_SAMPLES)
    assert bound > epsilon


@pytest.mark.parametrize("calibration, epsilon", [("analytic", 1.0), ("analytic", 3.0), ("classical", 0.5)])
def test_gaussian_empirical_delta_within_claim(calibration, epsilon):
    delta = 1e-3
    sigma = M.gaussian_sigma(1.0, epsilon, delta, calibration)
    a = np.random.default_rng(20).normal(0.0, sigma, N_SAMPLES)
    b = np.random.default_rng(21).normal(1.0, sigma, N_SAMPLES)
    edges = np.linspace(-4 * sigma, 4 * sigma + 1, 41)
    bound = delta_lower_bound(event_counts(a, edges), N_SAMPLES, event_counts(b, edges), N_SAMPLES,
                              epsilon=epsilon)
    assert bound <= delta


def test_gaussian_check_detects_under_noise():
    epsilon, delta = 1.0, 1e-3
    sigma = M.analytic_gaussian_sigma(1.0, epsilon, delta) / 3.0
    a = np.random.default_rng(22).normal(0.0, sigma, N_SAMPLES)
    b = np.random.default_rng(23).normal(1.0, sigma, N_SAMPLES)
    edges = np.linspace(-4 * sigma, 4 * sigma + 1, 41)
    bound = delta_lower_bound(event_counts(a, edges), N_SAMPLES, event_counts(b, edges), N_SAMPLES,
                              epsilon=epsilon)
    assert bound > delta


def _exponential_counts(scores, epsilon, seed, n_draws=60_000, sensitivity_factor=1.0):
    rng = np.random.default_rng(seed)
    draws = [M.exponential_mechanism(scores, epsilon=epsilon, sensitivity=sensitivity_factor, rng=rng)[0]
             for _ in range(n_draws)]
    return np.bincount(draws, minlength=len(scores)), n_draws


@pytest.mark.parametrize("sensitivity_factor, should_pass", [(1.0, True), (0.5, False)],
                         ids=["exponential", "mutant_half_sensitivity"])
def test_exponential_empirical_loss(sensitivity_factor, should_pass):
    """Clopper-Pearson lower bound on the loss (epsilon = 1, sensitivity 1) on near worst-case neighbours.

    The low candidate moves down by the sensitivity while the three heavy ones move up, so the
    score and the normaliser both push the ratio of P[index 0] (review RA-8: the earlier
    neighbours left the honest loss at 0.44 epsilon and missed the halved sensitivity). With
    x = epsilon / (2 sensitivity), P_a(0) / P_b(0) = (1 + 3 e^{4x}) / (1 + 3 e^{2x}): a loss of
    0.929 for the mechanism and 1.96 for the mutant told half the sensitivity (epsilon x 2);
    the bounds at these seeds are 0.715 and 1.530.
    """
    epsilon = 1.0
    scores_a = np.array([0.0, 2.0, 2.0, 2.0])
    scores_b = scores_a + np.array([-1.0, 1.0, 1.0, 1.0])
    counts_a, n = _exponential_counts(scores_a, epsilon, 30, sensitivity_factor=sensitivity_factor)
    counts_b, _ = _exponential_counts(scores_b, epsilon, 31, sensitivity_factor=sensitivity_factor)
    bound = epsilon_lower_bound(counts_a, n, counts_b, n)
    assert (bound <= epsilon) is should_pass, bound


# ---------------------------------------------------------------------------
# AboveThreshold (sparse vector)
# ---------------------------------------------------------------------------


def _above_threshold_outcomes(values, *, sensitivity, epsilon, threshold, seed, n_draws):
    rng = np.random.default_rng(seed)
    outcomes = [M.above_threshold(values, threshold=threshold, sensitivity=sensitivity,
                                  epsilon=epsilon, rng=rng)[0] for _ in range(n_draws)]
    outcomes = [len(values) if index is None else index for index in outcomes]
    return np.bincount(outcomes, minlength=len(values) + 1)


def test_above_threshold_empirical_loss_within_epsilon():
    """Worst-ish neighbours (Dwork & Roth's proof pair): earlier queries one sensitivity lower, the
    last one higher. The realised loss of AboveThreshold stays near a third of epsilon on events of
    observable probability, so this check cannot see a halved sensitivity; the law test below does."""
    epsilon, n_draws = 6.0, 30_000
    a, b = [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]
    counts_a = _above_threshold_outcomes(a, sensitivity=1.0, epsilon=epsilon, threshold=1.5,
                                         seed=40, n_draws=n_draws)
    counts_b = _above_threshold_outcomes(b, sensitivity=1.0, epsilon=epsilon, threshold=1.5,
                                         seed=41, n_draws=n_draws)
    assert epsilon_lower_bound(counts_a, n_draws, counts_b, n_draws) <= epsilon


def _single_query_pass_probability(gap, threshold_scale, query_scale):
    """Pr[Lap(query_scale) - Lap(threshold_scale) >= gap], by quadrature over the threshold noise."""
    def integrand(r):
        tail = gap + r
        survival = 0.5 * math.exp(-tail / query_scale) if tail >= 0 else 1 - 0.5 * math.exp(tail / query_scale)
        return survival * math.exp(-abs(r) / threshold_scale) / (2 * threshold_scale)
    return integrate.quad(integrand, -60 * threshold_scale, 60 * threshold_scale, points=[0.0, -gap],
                          limit=200)[0]


@pytest.mark.parametrize("sensitivity_factor, should_match", [(1.0, True), (0.5, False)])
def test_above_threshold_noise_law(sensitivity_factor, should_match):
    """One query: Pr[pass] must follow Lap(4 Delta/eps) query noise against Lap(2 Delta/eps) threshold noise.

    The mutant halves the sensitivity it is told (so both noises are halved); its pass
    frequencies leave the 1e-6 binomial band of the correct law.
    """
    sensitivity, epsilon, n_draws = 1.0, 1.0, 20_000
    inside = []
    for gap in (2.0, 6.0):
        counts = _above_threshold_outcomes([0.0], sensitivity=sensitivity * sensitivity_factor,
                                           epsilon=epsilon, threshold=gap, seed=int(gap), n_draws=n_draws)
        expected = _single_query_pass_probability(gap, 2 * sensitivity / epsilon, 4 * sensitivity / epsilon)
        low, high = stats.binom.interval(1 - 1e-6, n_draws, expected)
        inside.append(low <= counts[0] <= high)
    assert all(inside) is should_match


def test_above_threshold_costs_epsilon_pass_or_fail():
    rng = np.random.default_rng(0)
    passed, event = M.above_threshold(iter([0.0, 100.0]), threshold=50.0, sensitivity=1.0, epsilon=1.0, rng=rng)
    failed, event_failed = M.above_threshold([0.0, 1.0], threshold=1e6, sensitivity=1.0, epsilon=1.0, rng=rng)
    assert (passed, failed) == (1, None)
    assert event.cost() == event_failed.cost() == (1.0, 0.0)


def test_above_threshold_does_not_evaluate_queries_after_the_pass():
    evaluated = []

    def queries():
        for value in (1e9, 0.0, 0.0):
            evaluated.append(value)
            yield value

    index, _ = M.above_threshold(queries(), threshold=0.0, sensitivity=1.0, epsilon=1.0,
                                 rng=np.random.default_rng(0))
    assert index == 0 and evaluated == [1e9]


@pytest.mark.parametrize("kwargs", [{"sensitivity": 0.0}, {"threshold": np.inf}, {"epsilon": -1.0}])
def test_above_threshold_rejects_bad_parameters(kwargs):
    params = {"threshold": 0.0, "sensitivity": 1.0, "epsilon": 1.0, **kwargs}
    with pytest.raises(ValueError):
        M.above_threshold([0.0], rng=np.random.default_rng(0), **params)


@pytest.mark.parametrize("scores, sensitivity, base, expected", [
    pytest.param([1e308, 1e308, 0.0], 1.0, None, {0, 1}, id="weights-overflow-to-inf"),
    pytest.param([1.0, 0.0], 1e-310, None, {0}, id="subnormal-sensitivity"),
    pytest.param([1e308, 0.0], 1.0, [-np.inf, 0.0], {1}, id="weight-zero-with-overflowing-score"),
])
def test_exponential_mechanism_log_weights_never_overflow(scores, sensitivity, base, expected):
    """Re-review V1: finite scores whose product epsilon / (2 sensitivity) * score overflowed
    gave +inf or NaN log weights, and argmax picked the first one: no randomness (two tied
    +inf candidates: always index 0), and a weight-0 candidate chosen 400 of 400 times."""
    rng = np.random.default_rng(0)
    picks = {M.exponential_mechanism(scores, epsilon=10.0, sensitivity=sensitivity, rng=rng,
                                   log_base_measure=base)[0] for _ in range(200)}
    assert picks == expected


def test_exponential_mechanism_at_a_tiny_scale_matches_the_unit_scale():
    # Neighbouring scores one sensitivity apart at sensitivity 1e-310: the same choices as at 1.
    for scale in (1.0, 1e-310):
        picks = [M.exponential_mechanism(np.array([2.0, 0.0]) * scale, epsilon=1.0,
                                       sensitivity=scale, rng=np.random.default_rng(seed))[0]
                 for seed in range(50)]
        if scale == 1.0:
            reference = picks
    assert picks == reference


@pytest.mark.parametrize("radius", [1e-160, 1e200])
def test_select_privately_refuses_a_radius_its_costs_cannot_hold(radius):
    from skdpcluster.model_selection import select_privately

    X = np.random.default_rng(0).normal(size=(50, 2)) * radius
    candidate = type("Fitted", (), {"cluster_centers_": np.zeros((2, 2))})()
    from skdpcluster import BudgetAccountant

    accountant = BudgetAccountant()
    with pytest.raises(ValueError, match=r"data_radius must be a number in \[2\*\*-500, 1e100\]"):
        select_privately([candidate], X, data_radius=radius, epsilon=1.0, random_state=0,
                         accountant=accountant)
    assert accountant.ledger == []


@pytest.mark.parametrize("mechanism, budget", [
    (M.laplace_mechanism, {"sensitivity": 5e-324, "epsilon": 2.0}),
    (M.zcdp_gaussian_mechanism, {"sensitivity": 5e-324, "rho": 2.0}),
    (M.laplace_mechanism, {"sensitivity": 1e300, "epsilon": 1e-10}),
    (M.zcdp_gaussian_mechanism, {"sensitivity": 1e300, "rho": 1e-300}),
    # Subnormal scales (review R10 L2): 5 ulps / 2 rounded to 2 ulps (true epsilon 2.5).
    (M.laplace_mechanism, {"sensitivity": 5 * 2.0**-1074, "epsilon": 2.0}),
    (M.zcdp_gaussian_mechanism, {"sensitivity": 1e-300, "rho": 1e16}),
])
def test_a_noise_scale_that_underflows_or_overflows_is_refused_before_any_draw(mechanism, budget):
    """A positive sensitivity whose scale rounded to 0 released the exact value (no noise); one
    that overflowed released infinities. Both are refused, naming the budget, before any draw."""
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="noise scale at sensitivity"):
        mechanism(1.0, rng=rng, **budget)
    assert rng.bit_generator.state == state


def test_laplace_and_zcdp_scales_are_never_below_the_exact_calibration():
    """Review R10 L2: the scales were rounded to nearest, so about half were below
    sensitivity / epsilon (true epsilon up to 0.49 ulp above the recorded one) or
    sensitivity / sqrt(2 rho) (true rho up to 1.81 ulp above). Checked exactly in rationals;
    the event records the scale the noise used."""
    from fractions import Fraction

    rng = np.random.default_rng(0)
    for _ in range(3000):
        sensitivity = float(10 ** rng.uniform(-300, 300))
        epsilon, rho = float(10 ** rng.uniform(-3, 1)), float(10 ** rng.uniform(-6, 1))
        scale = M.laplace_scale(sensitivity, epsilon)
        _, event = M.laplace_mechanism(0.0, sensitivity=sensitivity, epsilon=epsilon, rng=rng)
        assert event.scale == scale
        assert Fraction(sensitivity) / Fraction(scale) <= Fraction(epsilon)
        sigma = M.zcdp_gaussian_sigma(sensitivity, rho)
        _, event = M.zcdp_gaussian_mechanism(0.0, sensitivity=sensitivity, rho=rho, rng=rng)
        assert event.scale == sigma
        assert Fraction(sensitivity) ** 2 / (2 * Fraction(sigma) ** 2) <= Fraction(rho)


def test_the_zcdp_sigma_is_calibrated_at_the_exact_rho_of_an_integer():
    """Review R12 L1: the memoised sigma was checked against float(rho), so an int rho above
    2^53 (rounded up as a float) got a sigma below its calibration; before the memo, a NumPy
    int64 rho overflowed in the exact check (7 gave 0.80178372655 at sensitivity 3)."""
    from fractions import Fraction

    for sensitivity, rho in ((1.0, 2**54 + 3), (3.0, np.int64(7)), (1.0, np.int64(2**60 + 1))):
        sigma = M.zcdp_gaussian_sigma(sensitivity, rho)
        assert 2 * Fraction(int(rho)) * Fraction(sigma) ** 2 >= Fraction(sensitivity) ** 2
        assert 2 * Fraction(int(rho)) * Fraction(np.nextafter(sigma, 0.0)) ** 2 < Fraction(
            sensitivity) ** 2
