r"""PrivatekNoisyCenters (Cohen et al. 2021, Figure 4), with the review's private lambda step.

After a successful PrivateTestPartition at ``(eps/2, delta/4, beta/2)``, the
centres :math:`c_i` of the selected tuple get Gaussian noise whose scale is
proportional to a private estimate :math:`\lambda_i` of
:math:`D_i = \min_{j\ne i}\|c_i - c_j\|`.

Two ways to set :math:`\lambda_i` (``lambda_mechanism``):

* ``"log_laplace"`` (default; ``spec/cohen_ktuple_review.md``, finding 4):
  :math:`\log\lambda_i = \log(2D_i/(\Delta-2)) + \eta\,(Z_i + s)` with
  :math:`Z_i \sim \mathrm{Lap}(4k/\varepsilon)`,
  :math:`\eta = \log((\Delta+2)/(\Delta-2))` (the sensitivity of
  :math:`\log D_i` on admissible pairs, spec §2.1) and
  :math:`s = (4k/\varepsilon)\log(4k/\delta)`. No clamp: the release of
  :math:`\log\lambda_i` is a Laplace mechanism, exactly
  :math:`\varepsilon/(4k)`-DP per centre, and
  :math:`\lambda_i \ge 2D_i/(\Delta-2) \ge \|c_i - c'_i\|` fails with
  probability at most :math:`\delta/(8k)` per centre.
* ``"paper"`` (reproduction only): :math:`\gamma_i = (4/(\Delta-2))(Z_i + s + 1)`,
  :math:`\lambda_i = (2/\Delta)(1+\gamma_i)D_i`, with the spec's clamp
  :math:`\gamma_i \ge 4/(\Delta-2)`. Theorem 4.12 as printed is false (the
  review gives a counterexample); this mode warns.

Two Gaussian calibrations (``gaussian_calibration``):

* ``"analytic_joint"`` (default): given the :math:`\lambda_i`, the k releases
  :math:`c_i + \lambda_i\,N(0, c^2 I)` form one Gaussian mechanism of
  whitened L2 sensitivity :math:`\sqrt{k}`; ``c`` is the analytic calibration
  of Balle & Wang (2018) at :math:`(\varepsilon/4, \delta/8)`.
* ``"classical"``: :math:`\sigma_i = (4k\lambda_i/\varepsilon)\sqrt{2\log(10k/\delta)}`,
  the classical calibration at :math:`(\varepsilon/(4k), \delta/(8k))` per
  centre (needs :math:`\varepsilon/(4k) < 1`).

Accounting (default modes): Status costs :math:`\varepsilon/2`; A* costs
:math:`\varepsilon/4` (lambda) + :math:`(\varepsilon/4, \delta/8)` (Gaussian)
+ :math:`\delta/8` (coverage failure) :math:`= (\varepsilon/2, \delta/4)`;
Claim 4.6 adds :math:`3\delta/4` for conditioning on the test. Total
:math:`(\varepsilon, \delta)`.
"""

import math
from dataclasses import replace

import numpy as np

from skdpcluster.exceptions import UnprovenPrivacyWarning, UtilityWarning
from skdpcluster.utils._validation import check_epsilon_delta, check_probability
from skdpcluster.utils._warnings import warn_user
from skdpcluster.ktuple._framework import (
    FLOAT_MAX,
    KTupleResult,
    canonical_order,
    check_tuple_parameters,
    clamp_to_float_range,
    conditioning_event,
    nearest_gaps,
    run_partition_test,
)
from skdpcluster.mechanisms import (
    PrivacyEvent,
    gaussian_mechanism,
    gaussian_sigma,
    laplace_mechanism,
)
from skdpcluster.utils._errstate import quiet_floating_point

__all__ = [
    "GAUSSIAN_CALIBRATIONS",
    "LAMBDA_MECHANISMS",
    "default_separation",
    "noise_to_gap_ratio",
    "private_k_noisy_centers",
    "separation_for_noise_to_gap_ratio",
]

LAMBDA_MECHANISMS = ("log_laplace", "paper")
GAUSSIAN_CALIBRATIONS = ("analytic_joint", "classical")


def default_separation(k, epsilon, delta, beta):
    r"""The experiments' separation :math:`\Delta = (10/\varepsilon)\,k\log(k/\delta)\sqrt{\log(k/\beta)}`.

    Cohen et al. (2021), Section 5 (spec §10.1); 1102.19 at k=2, eps=1,
    delta=e^-28, beta=0.05. Never below 7 (Theorem 4.12 needs Delta > 6).
    """
    return max(7.0, (10.0 / epsilon) * k * math.log(k / delta) * math.sqrt(math.log(k / beta)))


def _lambda_shift(k, epsilon, delta):
    """s = (4k/eps) log(4k/delta): Pr[Lap(4k/eps) < -s] = delta/(8k)."""
    return (4 * k / epsilon) * math.log(4 * k / delta)


def _log_lambda_offset(separation, k, epsilon, delta):
    """log(lambda_i / D_i) at a zero Laplace draw, log-Laplace mechanism."""
    eta = _log_gap_eta(separation)
    return math.log(2 / (separation - 2)) + eta * _lambda_shift(k, epsilon, delta)


def _log_gaps_sensitivity(k, separation):
    r"""L1 sensitivity :math:`k(\eta + 2^{-41})` of the computed :math:`(\log D_1, \dots, \log D_k)`.

    Each exact :math:`\log D_i` moves by at most
    :math:`\eta = \log((\Delta+2)/(\Delta-2))` on admissible pairs (spec
    §2.1), and all k can move at once. Each computed log is within an ulp of
    the exact one (libm's error included): :math:`|\log D_i| < 745`, so two
    of them add at most :math:`2 \cdot 2^{-43} < 2^{-41}` (review R11 L1: at
    separation 4e12, gaps near 1e300, the computed logs moved by 1.023
    :math:`\eta`).
    """
    return k * (_log_gap_eta(separation) + 2.0**-41)


#: The smallest eta (sensitivity of one log gap) the log-lambda step takes: below it the
#: rounding of log D_i (an ulp of about 2^-52 |log D_i|, |log D_i| up to ~745) nears eta.
_MIN_LOG_GAP_ETA = 2.0**-40


def _log_gap_eta(separation):
    r""":math:`\eta = \log((\Delta+2)/(\Delta-2))`, as ``log1p(4/(Delta-2))``.

    The quotient form rounds to 0 above :math:`\Delta \approx 3.6\cdot10^{16}`
    (a Laplace of sensitivity 0: no noise) and loses its digits well before
    (review R10 L1); ``log1p`` keeps eta's relative precision.
    """
    return math.log1p(4.0 / (separation - 2.0))


def _check_log_gap_resolution(separation):
    """Refuse, before any randomness, a separation whose eta the float log gaps do not resolve."""
    if not _log_gap_eta(separation) >= _MIN_LOG_GAP_ETA:
        raise ValueError(
            f"separation={separation!r} is too large for method='noisy_centers': the sensitivity "
            f"of a log gap, about 4/separation, is below {_MIN_LOG_GAP_ETA:.3g}, where the "
            "rounding of the log gaps nears it; use a separation of at most about 1e12.")


def _joint_gaussian_sensitivity(k):
    r"""Whitened L2 sensitivity :math:`\sqrt k` of the k centres :math:`c_i/\lambda_i`.

    Each whitened centre moves by at most 1 when :math:`\lambda_i` covers
    :math:`\|c_i - c'_i\|`, and all k can move at once.
    """
    return math.sqrt(k)


def _lambda_log_laplace(gaps, separation, k, epsilon, delta, rng):
    """Review finding 4: log lambda_i = log(2 D_i/(Delta-2)) + eta (Z_i + s), no clamp."""
    # The k values of log D_i share the budget eps/4.
    noisy_log_gaps, event = laplace_mechanism(
        np.log(gaps), sensitivity=_log_gaps_sensitivity(k, separation), epsilon=epsilon / 4,
        rng=rng, label="noisy_centers/log_lambda",
    )
    log_lambda = noisy_log_gaps + _log_lambda_offset(separation, k, epsilon, delta)
    # A public cap on log lambda keeps exp finite; capping a released value is post-processing.
    return np.exp(np.minimum(log_lambda, 700.0)), event


def _lambda_paper(gaps, separation, k, epsilon, delta, rng):
    """Figure 4 step 4(a)-(b) as printed, with the spec's clamp gamma_i >= 4/(Delta-2)."""
    a = 4 / (separation - 2)
    shift = _lambda_shift(k, epsilon, delta)
    noise, event = laplace_mechanism(
        np.zeros(k), sensitivity=k, epsilon=epsilon / 4, rng=rng, label="noisy_centers/gamma"
    )
    gamma = np.maximum(a * (noise + shift + 1), a)
    return (2 / separation) * (1 + gamma) * gaps, event


_LAMBDA_STEPS = {"log_laplace": _lambda_log_laplace, "paper": _lambda_paper}


def _gaussian_analytic_joint(centers, lambdas, k, epsilon, delta, rng):
    """One analytic Gaussian over the k whitened centres c_i / lambda_i (sensitivity sqrt(k))."""
    noise, event = gaussian_mechanism(
        np.zeros_like(centers), sensitivity=_joint_gaussian_sensitivity(k), epsilon=epsilon / 4,
        delta=delta / 8, rng=rng, calibration="analytic", label="noisy_centers/gaussian_joint",
    )
    return _noised(centers, noise, lambdas), event


def _gaussian_classical(centers, lambdas, k, epsilon, delta, rng):
    """Per centre, sigma_i = lambda_i * classical sigma at (eps/(4k), delta/(8k)); basic composition."""
    noise, event = gaussian_mechanism(  # each whitened centre has sensitivity <= 1
        np.zeros_like(centers), sensitivity=1.0, epsilon=epsilon / (4 * k),
        delta=delta / (8 * k), rng=rng, calibration="classical",
        label="noisy_centers/gaussian_per_center",
    )
    return _noised(centers, noise, lambdas), replace(event, count=k)


def _noised(centers, noise, lambdas):
    r"""The release :math:`c_i + \lambda_i z_i` of the whitened Gaussian :math:`c_i/\lambda_i + z_i`.

    The mechanism draws the whitened noise :math:`z_i` (on zeros, at the
    whitened sensitivity), and the centres are added here, unwhitened:
    exactly :math:`\lambda_i (c_i/\lambda_i + z_i)`, but without rounding
    :math:`c_i/\lambda_i` first. That quotient is rounded at its own ulp,
    a sizeable fraction of the whitened sensitivity 1 where
    :math:`|c_i|/\lambda_i` is large (centres a few ulps apart far from 0):
    with 100 coordinates, :math:`|c_i|/\lambda_i` about :math:`2^{49}`, the
    rounded quotients moved by 1.12 per centre and 1.53 jointly against
    sensitivities 1 and :math:`\sqrt 2`, so noising them would have noised
    values that neighbours move by more than the calibration assumes (as in
    review R5-2). The sum is
    clamped to the float range (post-processing): with the public cap
    ``lambda_i <= e^700`` the noise overflows only when it is astronomically
    larger than the data (a tiny epsilon with a separation near 6), and
    :func:`private_k_noisy_centers` warns when the clamp acted.
    """
    with np.errstate(over="ignore"):
        return clamp_to_float_range(centers + noise * lambdas[:, None])


_GAUSSIAN_STEPS = {"analytic_joint": _gaussian_analytic_joint, "classical": _gaussian_classical}


def noise_to_gap_ratio(
    k, epsilon, delta, separation, lambda_mechanism="log_laplace", gaussian_calibration="analytic_joint"
):
    r"""Per-coordinate noise of a released centre relative to its gap, :math:`\sigma_i / D_i`.

    Evaluated at a zero Laplace draw (the median of :math:`\lambda_i`), where
    :math:`D_i = \min_{j\ne i}\|c_i - c_j\|`. A planning aid: the centre is
    useful when this is well below 1/2. At the experiments' parameters
    (spec §6.3; review, finding 4) it is about 0.164 for k = 2 with the
    defaults and 0.2147 for the paper's mechanism. Computed in log space:
    ``inf`` when the ratio is beyond the float range (a tiny epsilon or a
    separation near 6).
    """
    _check_modes(lambda_mechanism, gaussian_calibration, k, epsilon)
    if lambda_mechanism == "log_laplace":
        log_lambda_ratio = _log_lambda_offset(separation, k, epsilon, delta)
    else:
        a = 4 / (separation - 2)
        shift = _lambda_shift(k, epsilon, delta)
        log_lambda_ratio = math.log((2 / separation) * (1 + a * (shift + 1)))
    if gaussian_calibration == "analytic_joint":
        unit_sigma = gaussian_sigma(math.sqrt(k), epsilon / 4, delta / 8, "analytic")
    else:
        unit_sigma = gaussian_sigma(1.0, epsilon / (4 * k), delta / (8 * k), "classical")
    log_ratio = log_lambda_ratio + math.log(unit_sigma)
    return math.exp(log_ratio) if log_ratio < math.log(FLOAT_MAX) else math.inf


def separation_for_noise_to_gap_ratio(
    ratio, k, epsilon, delta, lambda_mechanism="log_laplace", gaussian_calibration="analytic_joint"
):
    r"""The smallest separation :math:`\Delta > 6` where :func:`noise_to_gap_ratio` <= ``ratio``.

    A planning aid from public values: the ratio decreases in
    :math:`\Delta` (both :math:`\log(2/(\Delta-2))` and
    :math:`\eta = \log((\Delta+2)/(\Delta-2))` do), so bisection finds it
    (to a relative 1e-6, rounded up).
    """
    def ratio_at(separation):
        return noise_to_gap_ratio(k, epsilon, delta, separation, lambda_mechanism,
                                  gaussian_calibration)

    low, high = 6.0, 7.0
    while ratio_at(high) > ratio:
        low, high = high, 2 * high
    while high - low > 1e-6 * high:
        middle = (low + high) / 2
        if ratio_at(middle) > ratio:
            low = middle
        else:
            high = middle
    return high


def _check_modes(lambda_mechanism, gaussian_calibration, k, epsilon):
    if lambda_mechanism not in LAMBDA_MECHANISMS:
        raise ValueError(
            f"lambda_mechanism must be one of {LAMBDA_MECHANISMS}, got {lambda_mechanism!r}."
        )
    if gaussian_calibration not in GAUSSIAN_CALIBRATIONS:
        raise ValueError(
            f"gaussian_calibration must be one of {GAUSSIAN_CALIBRATIONS}, "
            f"got {gaussian_calibration!r}."
        )
    if gaussian_calibration == "classical" and epsilon / (4 * k) >= 1:
        raise ValueError(
            f"gaussian_calibration='classical' needs epsilon/(4k) < 1, got epsilon={epsilon} with "
            f"k={k}; use gaussian_calibration='analytic_joint' for epsilon >= {4 * k}."
        )


@quiet_floating_point
def private_k_noisy_centers(
    tuples,
    *,
    epsilon,
    delta,
    beta,
    rng,
    separation=None,
    accounting="corrected",
    lambda_mechanism="log_laplace",
    gaussian_calibration="analytic_joint",
):
    r"""PrivatekNoisyCenters (Cohen et al. 2021, Figure 4; Theorems 4.11 and 4.12).

    Parameters
    ----------
    tuples : ndarray of shape (n, k, d)
        Finite values; ``n`` must be at least :func:`~skdpcluster.ktuple.min_tuples`.
    epsilon, delta, beta : float
        Target privacy and failure probability.
    rng : numpy.random.Generator
    separation : float, default=None
        Delta > 6; ``None`` uses :func:`default_separation`.
    accounting : {"corrected", "paper"}, default="corrected"
        Which ell sets the admissible number of tuples (see
        :func:`~skdpcluster.ktuple.ell`).
    lambda_mechanism : {"log_laplace", "paper"}, default="log_laplace"
    gaussian_calibration : {"analytic_joint", "classical"}, default="analytic_joint"

    Returns
    -------
    KTupleResult
        ``centers`` of shape (k, d) in canonical (lexicographic) row order, or
        ``None`` when the private test failed; the events; and the proven
        ``(epsilon, delta)``.
    """
    n, k, _ = tuples.shape
    check_epsilon_delta(epsilon, delta, allow_zero_delta=False)
    check_probability(beta, "beta")
    if separation is None:
        separation = default_separation(k, epsilon, delta, beta)
    check_tuple_parameters(tuples, epsilon, delta, beta, separation, accounting)
    _check_log_gap_resolution(separation)
    _check_modes(lambda_mechanism, gaussian_calibration, k, epsilon)
    if lambda_mechanism == "paper":
        warn_user(
            "lambda_mechanism='paper' reproduces Figure 4 as printed; Theorem 4.12 is false for it "
            "(see the k-tuple review), so the reported privacy is nominal, not proven.",
            UnprovenPrivacyWarning,
        )
    test, test_events, public = run_partition_test(
        tuples, epsilon=epsilon, delta=delta, beta=beta, separation=separation,
        accounting=accounting, rng=rng,
    )
    events = list(test_events)
    centers = None
    if test.success:
        gaps = nearest_gaps(test.centers)
        lambdas, lambda_event = _LAMBDA_STEPS[lambda_mechanism](
            gaps, separation, k, epsilon, delta, rng
        )
        noisy, gaussian_event = _GAUSSIAN_STEPS[gaussian_calibration](
            test.centers, lambdas, k, epsilon, delta, rng
        )
        _warn_if_clamped(noisy)
        centers = canonical_order(noisy)
        events += [lambda_event, gaussian_event]
    else:
        events.append(_unreleased_event(epsilon, delta))
    # Priced whether or not the test succeeded, so the cost never depends on the data.
    events += [
        _coverage_event(lambda_mechanism, delta, test.success),
        conditioning_event(delta, public, accounting),
    ]
    proven = lambda_mechanism != "paper"
    if not proven:
        events = [_marked_unproven(event) for event in events]
    return KTupleResult(centers, test.success, events, public, proven=proven)


def _warn_if_clamped(centers):
    """A :class:`UtilityWarning` when :func:`_noised` clamped a centre (released values)."""
    if np.any(np.abs(centers) >= FLOAT_MAX):
        warn_user(
            "private_k_noisy_centers: the noise of the released centres exceeded the float range "
            "and they were clamped to +-1.8e308: they carry no information about the data. The "
            "noise grows like ((separation + 2) / (separation - 2))**(4k log(4k/delta) / epsilon): "
            "use a larger separation or epsilon (see noise_to_gap_ratio).",
            UtilityWarning,
        )


def _marked_unproven(event):
    """An event of A* in ``lambda_mechanism="paper"``: its cost is nominal, not proven.

    Review, finding 4: the measured loss of the printed lambda step exceeds its
    nominal epsilon, without a proven bound. The test's events stay proven.
    """
    if not event.label.startswith("noisy_centers/"):
        return event
    reason = "lambda_mechanism='paper': nominal cost, Theorem 4.12 is false as printed"
    return replace(event, details={**event.details, "proven": False, "reason": reason})


def _unreleased_event(epsilon, delta):
    """After a failed test the centres are not released, but A* is priced anyway.

    The charge of a fit must not depend on which outcome occurred: the
    guarantee of Claim 4.6 is for the algorithm as a whole.
    """
    return PrivacyEvent(
        "noisy_centers_unreleased", epsilon / 2, delta / 8, label="noisy_centers/not_released",
        details={"reason": "private test failed; lambda and Gaussian steps priced, not run"},
    )


def _coverage_event(lambda_mechanism, delta, success):
    """The delta/8 of the event that some lambda_i does not cover the centre shift."""
    return PrivacyEvent(
        "noisy_centers_coverage", 0.0, delta / 8, label="noisy_centers/lambda_coverage",
        details={"lambda_mechanism": lambda_mechanism, "test_success": bool(success)},
    )
