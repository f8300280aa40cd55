"""PrivatekNoisyCenters (spec §6, review finding 4)."""

import math
from fractions import Fraction

import numpy as np
import pytest

from skdpcluster import mechanisms as M
from skdpcluster.exceptions import InsufficientDataError, UnprovenPrivacyWarning, UtilityWarning
from skdpcluster.ktuple import min_tuples, noisy_centers
from skdpcluster.ktuple.noisy_centers import (
    default_separation,
    noise_to_gap_ratio,
    private_k_noisy_centers,
    separation_for_noise_to_gap_ratio,
)

DELTA_28 = math.exp(-28)


@pytest.mark.parametrize("k, separation", [(2, 1102.19), (4, 2460.6), (6, 3911.1), (8, 5421.1)])
def test_default_separation_matches_spec_table(k, separation):
    assert default_separation(k, 1.0, DELTA_28, 0.05) == pytest.approx(separation, rel=1e-4)


# Review, finding 4: sigma / D at a zero Laplace draw, experiments' Delta.
@pytest.mark.parametrize(
    "k, paper, log_laplace_classical, log_laplace_joint",
    [(2, 0.2147, 0.274, 0.164), (4, 0.1866, 0.231, 0.096), (6, 0.1737, 0.212, 0.072),
     (8, 0.1657, 0.200, 0.058)],
)
def test_noise_to_gap_ratio_matches_review_table(k, paper, log_laplace_classical, log_laplace_joint):
    separation = default_separation(k, 1.0, DELTA_28, 0.05)
    ratio = lambda lam, cal: noise_to_gap_ratio(k, 1.0, DELTA_28, separation, lam, cal)  # noqa: E731
    assert ratio("paper", "classical") == pytest.approx(paper, abs=5e-4)
    assert ratio("log_laplace", "classical") == pytest.approx(log_laplace_classical, rel=3e-3)
    assert ratio("log_laplace", "analytic_joint") == pytest.approx(log_laplace_joint, abs=5e-4)


def _separated_tuples(n, k, d, gap, spread, seed):
    rng = np.random.default_rng(seed)
    centers = np.zeros((k, d))
    centers[:, 0] = gap * np.arange(k)
    return centers, centers[None] + rng.normal(0, spread, size=(n, k, d))


@pytest.mark.parametrize("d", [1, 5, 50])
@pytest.mark.parametrize("calibration", ["analytic_joint", "classical"])
def test_ledger_never_exceeds_the_request(d, calibration):
    epsilon, delta, beta = 1.0, 1e-6, 0.05
    n = min_tuples(epsilon, delta, beta)
    _, tuples = _separated_tuples(n, 3, d, gap=1e5, spread=0.01, seed=d)
    result = private_k_noisy_centers(
        tuples, epsilon=epsilon, delta=delta, beta=beta, rng=np.random.default_rng(0),
        gaussian_calibration=calibration,
    )
    assert result.success
    spent = result.privacy_spent()
    assert spent[0] <= epsilon * (1 + 1e-12) and spent[1] <= delta * (1 + 1e-12)
    assert spent == pytest.approx((epsilon, delta))  # the whole budget is accounted for


def test_failure_is_priced_the_same_and_releases_nothing():
    n = min_tuples(1.0, 1e-6, 0.05)
    tuples = np.random.default_rng(0).normal(size=(n, 2, 2))  # no structure at all
    result = private_k_noisy_centers(tuples, epsilon=1.0, delta=1e-6, beta=0.05, rng=np.random.default_rng(1))
    assert not result.success and result.centers is None
    assert result.privacy_spent() == pytest.approx((1.0, 1e-6))


def test_centers_are_close_and_in_canonical_order():
    n = min_tuples(1.0, 1e-6, 0.05)
    true, tuples = _separated_tuples(n, 4, 3, gap=1e4, spread=0.05, seed=2)
    result = private_k_noisy_centers(tuples, epsilon=1.0, delta=1e-6, beta=0.05, rng=np.random.default_rng(3))
    assert result.success
    order = np.lexsort(result.centers.T[::-1])
    assert np.array_equal(order, np.arange(4))
    # Noise per coordinate has sd = ratio * D at the median draw; 6 sd bounds every coordinate here.
    sd = noise_to_gap_ratio(4, 1.0, 1e-6, default_separation(4, 1.0, 1e-6, 0.05)) * 1e4
    assert np.max(np.abs(result.centers - true)) < 6 * sd
    # Theorem 4.11: every released centre is nearest to its own true centre.
    nearest = np.argmin(np.linalg.norm(result.centers[:, None] - true[None], axis=-1), axis=1)
    assert np.array_equal(nearest, np.arange(4))


def test_output_invariant_to_point_order_inside_tuples():
    n = min_tuples(1.0, 1e-6, 0.05)
    _, tuples = _separated_tuples(n, 3, 2, gap=1e5, spread=0.01, seed=4)
    shuffled = np.stack([t[np.random.default_rng(i).permutation(3)] for i, t in enumerate(tuples)])
    a = private_k_noisy_centers(tuples, epsilon=1.0, delta=1e-6, beta=0.05, rng=np.random.default_rng(7))
    b = private_k_noisy_centers(shuffled, epsilon=1.0, delta=1e-6, beta=0.05, rng=np.random.default_rng(7))
    assert np.array_equal(a.centers, b.centers)


def test_paper_modes_warn_and_report_proven_delta():
    n = min_tuples(1.0, 1e-6, 0.05, accounting="paper")
    _, tuples = _separated_tuples(n, 2, 1, gap=1e5, spread=0.01, seed=5)
    with pytest.warns(UnprovenPrivacyWarning):
        result = private_k_noisy_centers(
            tuples, epsilon=1.0, delta=1e-6, beta=0.05, rng=np.random.default_rng(0),
            lambda_mechanism="paper", gaussian_calibration="classical", accounting="paper",
        )
    assert not result.proven
    epsilon, delta = result.privacy_spent()
    m, eps1 = result.public["m"], result.public["eps1"]
    # Review, finding 3: Claim 4.5 holds only at (1 + m e^eps1)/2 * delta_TP.
    assert delta == pytest.approx(1e-6 / 4 + 3 * (1 + m * math.exp(eps1)) / 2 * 1e-6 / 4)
    assert delta > 1e-6 and epsilon > 1.0


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(separation=6.0), ValueError, "separation"),
        (dict(epsilon=0.0), ValueError, "epsilon"),
        (dict(delta=1.0), ValueError, "delta"),
        (dict(beta=1.5), ValueError, "beta"),
        (dict(accounting="strict"), ValueError, "accounting"),
        (dict(lambda_mechanism="clamped"), ValueError, "lambda_mechanism"),
        (dict(epsilon=9.0, gaussian_calibration="classical"), ValueError, "analytic_joint"),
    ],
)
def test_invalid_parameters_raise_before_randomness(kwargs, error, match):
    _, tuples = _separated_tuples(2000, 2, 1, gap=1e5, spread=0.01, seed=0)
    params = dict(epsilon=1.0, delta=1e-6, beta=0.05) | kwargs
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(error, match=match):
        private_k_noisy_centers(tuples, rng=rng, **params)
    assert rng.bit_generator.state == state


def test_too_few_tuples_says_how_many_are_needed():
    _, tuples = _separated_tuples(500, 2, 1, gap=1e5, spread=0.01, seed=0)
    with pytest.raises(InsufficientDataError, match="at least 1963"):
        private_k_noisy_centers(tuples, epsilon=1.0, delta=1e-6, beta=0.05, rng=np.random.default_rng(0))


def test_nan_and_k1_rejected():
    tuples = np.zeros((3000, 2, 1))
    tuples[5, 0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        private_k_noisy_centers(tuples, epsilon=1.0, delta=1e-6, beta=0.05, rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="k >= 2"):
        private_k_noisy_centers(np.zeros((3000, 1, 1)), epsilon=1.0, delta=1e-6, beta=0.05,
                                rng=np.random.default_rng(0))


def test_noise_to_gap_ratio_beyond_the_float_range_is_inf():
    """Audit RE-F2(c): the public planning aid computed exp of its log offset and raised
    OverflowError at a tiny epsilon near the smallest separation; it is computed in log space."""
    assert noise_to_gap_ratio(2, 0.01, 1e-6, 7.5) == math.inf
    assert noise_to_gap_ratio(2, 0.01, 1e-6, 7.5, "paper") < math.inf  # linear in the shift


@pytest.mark.parametrize("lambda_mechanism", ["log_laplace", "paper"])
def test_separation_for_a_noise_to_gap_ratio_is_the_smallest_that_reaches_it(lambda_mechanism):
    separation = separation_for_noise_to_gap_ratio(0.5, 2, 1.0, 1e-6, lambda_mechanism)
    ratio = lambda s: noise_to_gap_ratio(2, 1.0, 1e-6, s, lambda_mechanism)  # noqa: E731
    assert ratio(separation) <= 0.5 < ratio(separation * (1 - 1e-5))


@pytest.mark.parametrize("calibration", ["analytic_joint", "classical"])
def test_centres_whose_noise_overflows_are_clamped_to_the_float_range(calibration):
    """Audit RE-F2(b): at epsilon = 0.001 and separation 7.5 the public cap lambda = e^700 times
    the Gaussian noise overflowed, and the released centres were +-inf. The product of released
    values is clamped (post-processing): finite, at +-max float."""
    step = noisy_centers._GAUSSIAN_STEPS[calibration]
    lambdas = np.full(2, math.exp(700.0))
    noisy, _ = step(np.array([[0.0], [1.0]]), lambdas, 2, 0.001, 1e-6, np.random.default_rng(3))
    assert np.all(np.isfinite(noisy))
    assert np.any(np.abs(noisy) == np.finfo(float).max)  # seed 3 overflows in both calibrations


@pytest.mark.parametrize("calibration", ["analytic_joint", "classical"])
def test_the_gaussian_input_moves_by_at_most_its_sensitivity_far_from_zero(calibration,
                                                                           monkeypatch):
    """The whitened Gaussian's input used to be fl(c_i / lambda_i), rounded at its own ulp: with
    100 coordinates near 2^60 moved by one ulp each and lambda_i just covering the move
    (whitened move 0.9999 per centre), the rounded inputs moved by 1.05 and 1.12 per centre,
    1.53 jointly, beyond the sensitivities 1 and sqrt(2). The release is now c_i + lambda_i z_i
    with the whitened noise z_i drawn on zeros."""
    inputs = []

    def recording(value, **options):
        inputs.append(np.array(value, dtype=float))
        return M.gaussian_mechanism(value, **options)

    monkeypatch.setattr(noisy_centers, "gaussian_mechanism", recording)
    row = 2.0**60 + 256.0 * np.arange(100)  # floats 256 apart, ulp 256
    centres = np.vstack([row, row + 2.0**59])
    moved = centres + 256.0  # one ulp per coordinate
    lambdas = np.full(2, 1.0001 * np.linalg.norm(moved[0] - centres[0]))
    step = noisy_centers._GAUSSIAN_STEPS[calibration]
    for points in (centres, moved):
        step(points, lambdas, 2, 1.0, 1e-6, np.random.default_rng(0))
    shift = inputs[1] - inputs[0]
    if calibration == "classical":
        assert np.all(np.linalg.norm(shift, axis=1) <= 1.0)  # sensitivity 1 per centre
    else:
        assert np.linalg.norm(shift) <= math.sqrt(2)  # joint sensitivity sqrt(k)


@pytest.mark.slow
def test_a_clamped_release_warns_that_it_carries_no_information():
    """``re_14``'s fit (about 2e6 tuples, a few seconds): finite centres and a UtilityWarning."""
    n = min_tuples(0.001, 1e-6, 0.05)
    tuples = np.array([[0.0], [1.0]])[None] + 1e-6 * np.random.default_rng(0).standard_normal(
        (n, 2, 1))
    with pytest.warns(UtilityWarning, match="clamped"):
        result = private_k_noisy_centers(tuples, epsilon=0.001, delta=1e-6, beta=0.05,
                                         separation=7.5, rng=np.random.default_rng(0))
    assert result.success and np.all(np.isfinite(result.centers))


def test_log_gaps_hold_their_sensitivity_at_the_extremes():
    """Review R10 L1: the gaps were np.linalg.norm of the differences, whose squares are
    subnormal for gaps ~1.6e-162..1.5e-154 (two gaps 2e-9 apart in relative terms gave log
    gaps 0.347 = 48 eta apart); eta = log((Delta+2)/(Delta-2)) rounded to 0 above ~3.6e16 (a
    Laplace of sensitivity 0: no noise) and below the rounding of log D from ~1e15. Now the
    gaps are scaled before their norm, eta is log1p(4/(Delta-2)), and a separation whose eta
    is below 2**-40 is refused before any randomness, naming separation."""
    from skdpcluster.ktuple._framework import nearest_gaps
    boundary = math.sqrt(1.5) * 2.0**-537
    for gap in (boundary * (1 - 1e-9), boundary * (1 + 1e-9), 3e-162):
        computed = nearest_gaps(np.array([[0.0], [gap]]))
        assert abs(math.log(computed[0]) - math.log(gap)) < 1e-15
    assert noisy_centers._log_gap_eta(1e17) == pytest.approx(4e-17, rel=1e-15)
    n = min_tuples(1.0, 1e-6, 0.05)
    tuples = np.zeros((n, 2, 1))
    tuples[:, 1, 0] = 1.0
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="separation=10000000000000.0 is too large"):
        private_k_noisy_centers(tuples, epsilon=1.0, delta=1e-6, beta=0.05, separation=1e13,
                                rng=rng)
    assert rng.bit_generator.state == state


@pytest.mark.parametrize("separation", [4e12, 1e10, 1e6, 10.0])
def test_the_log_gaps_sensitivity_covers_the_rounding_of_the_logs(separation):
    """Review R11 L1: the sensitivity k eta held for the exact logs only; the computed logs of
    gaps near 1e+-300 moved by up to 1.023 eta at separation 4e12. For gaps whose exact ratio
    is at most e^eta, the computed logs now move by at most the per-gap sensitivity."""
    per_gap = noisy_centers._log_gaps_sensitivity(1, separation)
    ratio = 1 + Fraction(4) / (Fraction(separation) - 2)  # e^eta: the largest admissible ratio
    worst = 0.0
    for exponent in (-300, -150, -1, 0, 1, 150, 300):
        for gap in 10.0 ** exponent * (1 + np.random.default_rng(exponent + 400).random(200)):
            moved = float(Fraction(gap) * ratio)
            if Fraction(moved) > Fraction(gap) * ratio:  # rounded up: take the float below
                moved = math.nextafter(moved, 0.0)
            worst = max(worst, abs(math.log(moved) - math.log(gap)))
    assert worst <= per_gap
