r"""Differential-privacy mechanisms and calibrations.

Every noisy release of skdpcluster goes through a function of this module. The
functions are pure: they take the true value, the privacy parameters and a
:class:`numpy.random.Generator`, and return the noisy value together with a
:class:`PrivacyEvent` that records what was spent. They never touch an
accountant; estimators collect the events and commit them.

Calibrations that no library provides are written here by hand and cite the
exact result they implement:

* Laplace mechanism (Dwork, McSherry, Nissim, Smith 2006; Cohen et al. 2021,
  Theorem 2.6).
* Gaussian mechanism, classical calibration (Dwork & Roth 2014, Theorem A.1;
  Cohen et al. 2021, Theorem 2.8), valid for ``epsilon < 1`` only.
* Gaussian mechanism, analytic calibration (Balle & Wang 2018, Theorem 8),
  valid for every ``epsilon > 0``.
* Exponential mechanism (McSherry & Talwar 2007), sampled with the Gumbel-max
  trick in log space.
* AboveThreshold, the sparse vector technique (Dwork & Roth 2014,
  Algorithm 1 and Theorem 3.23).
* Generalized randomized response (Warner 1965; Kairouz, Oh & Viswanath 2014),
  the local randomizer of the frequency oracle of :mod:`skdpcluster.local`.
* zCDP conversions (Bun & Steinke 2016, Propositions 1.3 and 1.4).
* Amplification by subsampling without replacement under replace-one
  neighbours (Balle, Barthe & Gaboardi 2018, Theorem 10), and the bound of
  Beimel, Kasiviswanathan & Nissim 2010 used by Cohen et al. (Lemma 2.10).

A caveat shared by every floating-point implementation: textbook samplers of
continuous noise on doubles are vulnerable to the attacks of Mironov (2012).
The guarantees here are those of the idealised real-valued mechanisms.
"""

import functools
import math
from dataclasses import asdict, dataclass, field, replace
from fractions import Fraction
from numbers import Integral

import numpy as np
from scipy import optimize, special

from skdpcluster.utils._validation import check_epsilon_delta

__all__ = [
    "PrivacyEvent",
    "above_threshold",
    "analytic_gaussian_sigma",
    "classical_gaussian_sigma",
    "exponential_mechanism",
    "gaussian_mechanism",
    "gaussian_sigma",
    "laplace_mechanism",
    "laplace_scale",
    "laplace_zero_cells_above",
    "randomized_response",
    "subsampled_epsilon_delta",
    "subsampled_event",
    "zcdp_gaussian_mechanism",
    "zcdp_gaussian_sigma",
    "zcdp_rho_for_dp",
    "zcdp_to_dp",
]


@dataclass(frozen=True)
class PrivacyEvent:
    """One noisy release, as recorded in a ledger.

    An event prices **one** use of a mechanism; ``count`` says how many
    identical uses it stands for, and composition is applied by the generic
    code of :meth:`cost` and :class:`~skdpcluster.BudgetAccountant`, never by
    the mechanism.

    Parameters
    ----------
    mechanism : str
        ``"laplace"``, ``"gaussian"``, ``"exponential"``, ``"zcdp_gaussian"``,
        ``"subsampled"``, or an algorithm-level name (for example
        ``"ktuple_test_conditioning"``) for costs that come from a theorem
        rather than a single noise draw.
    epsilon, delta : float
        The (epsilon, delta) of one use under the stated ``neighbouring``
        relation.
    sensitivity : float or None
        The sensitivity the noise was calibrated to (L1 for Laplace, L2 for
        Gaussian, score sensitivity for the exponential mechanism).
    scale : float or None
        The noise scale: Laplace ``b``, Gaussian ``sigma``.
    count : int
        Number of identical uses this event stands for.
    rho : float or None
        zCDP parameter of one use, when the mechanism has one.
    label : str
        What the release was (for example ``"partition_test/ell_counts"``).
    neighbouring : str
        ``"replace_one"`` or ``"add_remove"``.
    details : dict
        Extra public metadata (for example the subsampling rate).
    """

    mechanism: str
    epsilon: float
    delta: float = 0.0
    sensitivity: float | None = None
    scale: float | None = None
    count: int = 1
    rho: float | None = None
    label: str = ""
    neighbouring: str = "replace_one"
    details: dict = field(default_factory=dict, compare=False)

    def __post_init__(self):
        if not (self.epsilon >= 0 and self.delta >= 0):
            raise ValueError(
                f"a privacy event needs epsilon >= 0 and delta >= 0, got "
                f"epsilon={self.epsilon!r}, delta={self.delta!r}."
            )
        if not isinstance(self.count, Integral) or self.count < 1:
            raise ValueError(f"count must be an integer >= 1, got count={self.count!r}.")

    def cost(self):
        """Return the basic-composition cost ``(count * epsilon, count * delta)``."""
        return self.count * self.epsilon, self.count * self.delta

    def with_label(self, label):
        """Return a copy with ``label`` set."""
        return replace(self, label=label)

    def to_dict(self):
        """Return a JSON-serialisable dict."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data):
        """Rebuild an event from :meth:`to_dict` output."""
        return cls(**data)


def _check_sensitivity(sensitivity):
    if not (np.isfinite(sensitivity) and sensitivity >= 0):
        raise ValueError(f"sensitivity must be finite and >= 0, got sensitivity={sensitivity!r}.")
    return float(sensitivity)


def _checked_scale(scale, sensitivity, budget, kind, covers):
    r"""``scale`` rounded up to the first float that ``covers`` exactly; ValueError where unusable.

    ``scale`` is the calibration's quotient rounded to nearest, within
    :math:`k` units of roundoff :math:`u = 2^{-53}` of the exact value
    (:math:`k` = 1 for the Laplace scale, 3 for the zCDP sigma: see the
    callers). For a normal ``scale`` in :math:`[2^e, 2^{e+1})` one float
    up adds :math:`2^{e-52} > u \cdot` ``scale`` and every later step at least
    as much, so at most :math:`k` steps reach the exact value; ``covers``
    (an exact rational comparison) stops at the first float at or above it,
    so an exact quotient is kept as it is. A positive sensitivity whose scale
    is below the smallest normal float (a subnormal has no relative
    precision: 5 ulps / 2 rounded to 2), 0 (the exact value would be
    released) or infinite is refused before any draw; this happens only at
    public values beyond what float64 calibrates.
    """
    if sensitivity == 0:
        return 0.0
    if scale >= _SMALLEST_NORMAL:  # within k roundoffs of the exact value: step up to it
        while math.isfinite(scale) and not covers(Fraction(scale)):
            scale = math.nextafter(scale, math.inf)
    if not (math.isfinite(scale) and scale >= _SMALLEST_NORMAL):
        raise ValueError(
            f"the {kind} noise scale at sensitivity={sensitivity!r}, {budget} is {scale!r}: "
            "beyond what float64 calibrates; rescale the data or choose a moderate budget.")
    return scale


#: The smallest positive normal float64: noise scales below it are refused (see _checked_scale).
_SMALLEST_NORMAL = float(np.finfo(float).tiny)


def laplace_scale(sensitivity, epsilon):
    r"""The Laplace mechanism's scale :math:`\Delta/\varepsilon`, rounded up.

    The quotient rounded to nearest is within a relative :math:`u = 2^{-53}`
    of the exact one, so at most one float up (:func:`_checked_scale`) is at
    or above it (review R10 L2: rounded to nearest, half of all scales were
    below the calibration, the true epsilon up to 0.49 ulp above the
    recorded one). ``ValueError``, before any draw, for invalid parameters
    or a scale that underflows below the smallest normal float or
    overflows.

    Returns
    -------
    float
    """
    epsilon, _ = check_epsilon_delta(epsilon, 0.0)
    sensitivity = _check_sensitivity(sensitivity)
    exact = Fraction(sensitivity) / Fraction(epsilon)
    return _checked_scale(sensitivity / epsilon, sensitivity, f"epsilon={epsilon!r}", "Laplace",
                          lambda scale: scale >= exact)


def zcdp_gaussian_sigma(sensitivity, rho):
    r"""The zCDP Gaussian noise scale :math:`\Delta/\sqrt{2\rho}`, rounded up.

    ``2 * rho`` is exact (or overflows, which gives a scale of 0, refused),
    the square root and the quotient each round by a relative :math:`u =
    2^{-53}` at most, so the computed :math:`q` satisfies
    :math:`\Delta/\sqrt{2\rho} \le q (1 + u)/(1 - u) < q (1 + 3u)`: at most
    three floats up (:func:`_checked_scale`, which stops at the first sigma
    with :math:`2\rho\sigma^2 \ge \Delta^2` exactly) are at or above the
    exact scale (review R10 L2: rounded to nearest, the true rho was up to
    1.81 ulp above the recorded one). ``ValueError``, before any draw, for
    an invalid ``rho`` or sensitivity, or a scale that underflows below the
    smallest normal float or overflows.

    Returns
    -------
    float
    """
    if not (rho > 0 and np.isfinite(rho)):
        raise ValueError(f"rho must be finite and > 0, got rho={rho!r}.")
    exact_rho = Fraction(int(rho)) if isinstance(rho, Integral) else Fraction(rho)
    return _zcdp_sigma(_check_sensitivity(sensitivity), exact_rho)


@functools.lru_cache(maxsize=256)
def _zcdp_sigma(sensitivity, rho):
    """:func:`zcdp_gaussian_sigma` of a validated float sensitivity and the exact ``rho``, memoised.

    The exact check costs about 15 microseconds, and a fit calibrates the
    same release many times (the 1-median's 50 gradient steps: issue #17).
    The key is the exact rational ``rho`` (an integer above 2^53 is not
    rounded to a float before the check; review R12 L1). A refusal raises
    and is not memoised.
    """
    squared, twice_rho = Fraction(sensitivity) ** 2, 2 * rho
    rho_float = float(rho)
    return _checked_scale(sensitivity / math.sqrt(2.0 * rho_float), sensitivity,
                          f"rho={rho_float!r}", "Gaussian",
                          lambda sigma: twice_rho * sigma * sigma >= squared)


# ---------------------------------------------------------------------------
# Laplace
# ---------------------------------------------------------------------------


def laplace_mechanism(value, *, sensitivity, epsilon, rng, label="", neighbouring="replace_one"):
    r"""Release ``value + Lap(sensitivity / epsilon)`` element-wise.

    Theorem 2.6 of Cohen et al. (2021): if :math:`\|f(S) - f(S')\|_1 \le
    \Delta` for all neighbours, then :math:`f(S) + \mathrm{Lap}(\Delta/\varepsilon)`
    (independent noise per coordinate) is :math:`\varepsilon`-DP. The
    scale is rounded up (:func:`laplace_scale`) and recorded in the event.

    Parameters
    ----------
    value : float or array-like
        The true value; for an array, ``sensitivity`` is the L1 sensitivity of
        the whole array.
    sensitivity : float
        L1 sensitivity of ``value``.
    epsilon : float
        Privacy parameter, > 0.
    rng : numpy.random.Generator
    label, neighbouring : str
        Copied into the event.

    Returns
    -------
    noisy : float or ndarray
    event : PrivacyEvent
    """
    epsilon, _ = check_epsilon_delta(epsilon, 0.0)
    sensitivity = _check_sensitivity(sensitivity)
    scale = laplace_scale(sensitivity, epsilon)
    value = np.asarray(value, dtype=float)
    noisy = value + rng.laplace(0.0, scale, size=value.shape) if scale > 0 else value.copy()
    event = PrivacyEvent(
        "laplace", epsilon, 0.0, sensitivity, scale, label=label, neighbouring=neighbouring
    )
    return (noisy.item() if noisy.ndim == 0 else noisy), event


#: Above this many cells (beyond NumPy's int64 binomial) the count of cells over the threshold is Poisson.
_POISSON_ABOVE = 2.0**62


def laplace_zero_cells_above(n_cells, *, scale, threshold, rng, max_released=None):
    r"""The Laplace mechanism on ``n_cells`` cells of true count 0, thresholded, sampled lazily.

    A histogram released as ``count + Lap(scale)`` and kept only where the
    noisy value exceeds ``threshold`` has, on its empty cells, exactly this
    law: the number of kept cells is :math:`\mathrm{Binomial}(N, f)` with
    :math:`f = \Pr[\mathrm{Lap}(b) > \gamma] = e^{-\gamma/b}/2` (for
    :math:`\gamma \ge 0`), and each kept value is
    :math:`\gamma + \mathrm{Exp}(b)` by the memorylessness of the Laplace
    tail. This samples that law without listing the (possibly :math:`2^{p}`
    many) empty cells. Two shortcuts change the law by a negligible total
    variation: 0 kept when :math:`N f < e^{-700}`, and a Poisson count of
    mean :math:`N f` above :math:`2^{62}` cells (error at most :math:`N f^2`).

    The noise is part of the caller's histogram release, which its
    :func:`laplace_mechanism` event on the occupied cells prices (the cells
    are disjoint, so one event covers the whole histogram); no event is
    returned here.

    Parameters
    ----------
    n_cells : float
        Number of empty cells N (may exceed 2**63).
    scale : float
        Laplace scale b > 0.
    threshold : float
        gamma >= 0.
    rng : numpy.random.Generator
    max_released : int, default=None
        Keep the values of at most this many cells (post-processing).

    Returns
    -------
    n_above : int
        Number of empty cells over the threshold.
    values : ndarray of shape (min(n_above, max_released),)
        Their noisy values.
    """
    if not (scale > 0 and threshold >= 0):
        raise ValueError(f"need scale > 0 and threshold >= 0, got scale={scale!r}, threshold={threshold!r}.")
    log_probability = math.log(0.5) - threshold / scale
    if n_cells <= 0 or math.log(n_cells) + log_probability < -700.0:
        n_above = 0
    elif n_cells > _POISSON_ABOVE:
        n_above = int(rng.poisson(math.exp(math.log(n_cells) + log_probability)))
    else:
        n_above = int(rng.binomial(int(n_cells), math.exp(log_probability)))
    n_values = n_above if max_released is None else min(n_above, max_released)
    return n_above, threshold + rng.exponential(scale, size=n_values)


# ---------------------------------------------------------------------------
# Gaussian
# ---------------------------------------------------------------------------


def classical_gaussian_sigma(sensitivity, epsilon, delta):
    r"""Classical Gaussian calibration :math:`\sigma = (\Delta/\varepsilon)\sqrt{2\log(1.25/\delta)}`.

    Dwork & Roth (2014), Theorem A.1; Cohen et al. (2021), Theorem 2.8. The
    proof needs :math:`\varepsilon < 1`; larger values raise ``ValueError``
    (use :func:`analytic_gaussian_sigma`, valid for every epsilon). Computed
    at sensitivity 1, then scaled and rounded up (:func:`_noise_scale`).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        For invalid parameters, ``epsilon >= 1``, or a sigma above the
        float64 maximum.
    """
    epsilon, delta = check_epsilon_delta(epsilon, delta, allow_zero_delta=False)
    sensitivity = _check_sensitivity(sensitivity)
    if epsilon >= 1:
        raise ValueError(
            f"the classical Gaussian calibration is proven only for epsilon < 1, got "
            f"epsilon={epsilon!r}; use calibration='analytic' (Balle & Wang 2018) instead."
        )
    if sensitivity == 0:
        return 0.0
    return _noise_scale(sensitivity * _classical_unit_sigma(epsilon, delta), sensitivity,
                        f"epsilon={epsilon!r}, delta={delta!r}")


def _classical_unit_sigma(epsilon, delta):
    """The classical calibration at sensitivity 1 (``inf`` where it overflows)."""
    return math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def _noise_scale(scale, sensitivity, budget):
    r"""``scale`` rounded up one float; ``ValueError`` where it is not finite.

    ``scale`` is the sensitivity times the noise scale at sensitivity 1
    rounded to nearest (a calibration depends on :math:`\Delta/\sigma`
    only): moved one float up it is never below the exact product of the
    two floats, even where it underflows (never 0 for a positive
    sensitivity). Calibrating at 1 and scaling keeps every intermediate
    value finite at any sensitivity (review R5-4: a bracket around
    :math:`\log\Delta` overflowed ``exp`` at 1e307 and divided by 0 at
    1e-323). A scale above the float64 maximum is refused before any draw;
    ``budget`` names the privacy parameters in the message.
    """
    scale = math.nextafter(scale, math.inf)
    if not math.isfinite(scale):
        raise ValueError(
            f"the Gaussian noise scale at sensitivity={sensitivity!r}, {budget} exceeds the "
            "float64 maximum; rescale the data (a smaller sensitivity) or spend more budget."
        )
    return scale


def _log_gaussian_delta(sigma, sensitivity, epsilon):
    r"""Log of the exact delta of the Gaussian mechanism at ``sigma``.

    Balle & Wang (2018), Theorem 8: the mechanism with noise
    :math:`N(0, \sigma^2)` and L2 sensitivity :math:`\Delta` is
    :math:`(\varepsilon, \delta)`-DP iff

    .. math::

        \delta \ge \Phi\left(\frac{\Delta}{2\sigma} - \frac{\varepsilon\sigma}{\Delta}\right)
          - e^{\varepsilon}\,\Phi\left(-\frac{\Delta}{2\sigma} - \frac{\varepsilon\sigma}{\Delta}\right).

    Evaluated in log space so that deltas down to about 1e-300 are exact and
    large epsilon loses nothing to cancellation: with :math:`u = \Delta/(2\sigma)`,
    :math:`v = \varepsilon\sigma/\Delta` and :math:`uv = \varepsilon/2`,

    .. math::

        \log\delta = \log\Phi(u - v) + \log\left(1 - e^{S(-u-v) - S(u-v)}\right),
        \qquad S(z) = \log\Phi(z) + z^2/2,

    where the :math:`\varepsilon` of :math:`e^{\varepsilon}` has cancelled
    exactly against the Gaussian exponents.
    """
    u = sensitivity / (2.0 * sigma)
    v = epsilon * sigma / sensitivity
    ratio = _log_ndtr_scaled(-u - v) - _log_ndtr_scaled(u - v)  # log(e^eps Phi(-u-v) / Phi(u-v))
    return special.log_ndtr(u - v) + np.log1p(-np.exp(ratio))


def _log_ndtr_scaled(z):
    """``log Phi(z) + z**2 / 2``, stable for large negative z (via the scaled erfc)."""
    if z < 0:
        return math.log(special.erfcx(-z / math.sqrt(2.0)) / 2.0)
    return float(special.log_ndtr(z)) + z * z / 2.0


#: Safety factor of :func:`_log_gaussian_delta_error`: against 80-digit mpmath over epsilon
#: 1e-14..1e6, delta 1e-300..0.999 and sensitivity 1e-100..1e100 (at the root, and 1e-6 and
#: 1e-3 off it), the float error of :func:`_log_gaussian_delta` never exceeded 2.2 times the
#: first-order bound.
_LOG_DELTA_ERROR_FACTOR = 16.0


def _log_gaussian_delta_error(sigma, sensitivity, epsilon):
    r"""A bound on the floating-point error of :func:`_log_gaussian_delta` at ``sigma``.

    First-order forward error analysis of its formula, with
    :math:`a = u - v`, :math:`b = -u - v`, :math:`r = S(b) - S(a)` and unit
    roundoff :math:`\epsilon_m = 2^{-52}`: rounding ``u`` and ``v`` moves
    :math:`a, b` by up to :math:`\epsilon_m (u + v)`, so :math:`S(a)`, :math:`S(b)`
    by that times :math:`|S'|` (:math:`S'(z) = z + \phi(z)/\Phi(z)`), on top of
    their own relative error; :math:`\log(1 - e^{r})` amplifies an error in
    :math:`r` by :math:`e^{r} / (1 - e^{r})`, which is large for small
    epsilon, where :math:`S(b) \approx S(a)` cancel; and
    :math:`\log\Phi(a)` moves by :math:`\epsilon_m (u + v)\,\phi(a)/\Phi(a)`.
    The sum is multiplied by ``_LOG_DELTA_ERROR_FACTOR`` (review RA-11).
    """
    u = sensitivity / (2.0 * sigma)
    v = epsilon * sigma / sensitivity
    a, b = u - v, -u - v
    log_phi_a = float(special.log_ndtr(a))
    mills_a = math.exp(-a * a / 2.0 - 0.5 * math.log(2.0 * math.pi) - log_phi_a)
    mills_b = math.exp(-b * b / 2.0 - 0.5 * math.log(2.0 * math.pi) - float(special.log_ndtr(b)))
    scaled_a, scaled_b = _log_ndtr_scaled(a), _log_ndtr_scaled(b)
    ratio = scaled_b - scaled_a
    if ratio >= 0.0:  # 1 - e^r rounds to 0 or below: delta is not resolved at all
        return math.inf
    slopes = abs(a + mills_a) + abs(b + mills_b)  # |S'(a)| + |S'(b)|
    ratio_error = abs(scaled_a) + abs(scaled_b) + (u + v) * slopes + 1.0
    amplification = math.exp(ratio) / -math.expm1(ratio)
    first_order = ratio_error * amplification + abs(log_phi_a) + (u + v) * mills_a + 1.0
    return _LOG_DELTA_ERROR_FACTOR * 2.0**-52 * first_order


def _verified_sigma(sigma, sensitivity, epsilon, log_delta):
    r"""The first sigma verified to meet the target, in steps of 1, 2, 4, ... ulps up from ``sigma``.

    Verified: the evaluated log delta plus its error bound is at most
    ``log_delta``. delta decreases in sigma, so every sigma at or above the
    returned one meets the target too. ``None`` when none up to 2 sigma
    does: at a tiny epsilon with a tiny delta, double precision cannot
    resolve :math:`\delta(\sigma)` near the root (its error bound is
    infinite or too large).
    """
    step, limit = math.ulp(sigma), 2.0 * sigma
    while sigma <= limit:
        error = _log_gaussian_delta_error(sigma, sensitivity, epsilon)
        if math.isfinite(error) and (
                _log_gaussian_delta(sigma, sensitivity, epsilon) + error <= log_delta):
            return sigma
        sigma += step
        step *= 2.0
    return None


def analytic_gaussian_sigma(sensitivity, epsilon, delta):
    r"""Smallest :math:`\sigma` making the Gaussian mechanism :math:`(\varepsilon, \delta)`-DP, rounded up.

    The analytic Gaussian mechanism of Balle & Wang (2018), Theorem 8 and
    Algorithm 1: solve :math:`\delta(\sigma) = \delta` exactly (see
    :func:`_log_gaussian_delta`) by Brent's method on :math:`\log\sigma`.
    Valid for every ``epsilon > 0`` and always at most the classical
    calibration.

    Brent's root is only within its tolerance of the exact one (about
    ``3e-12`` relative when :math:`|\log\sigma|` is about 230: review
    RA-11), so it is rounded up by ``1e-12`` and then checked: the returned
    sigma is the first of that value and steps of 1, 2, 4, ... ulps above it
    at which the evaluated :math:`\log\delta(\sigma)` plus a bound on its
    floating-point error (:func:`_log_gaussian_delta_error`) is at most
    :math:`\log\delta`. So :math:`\delta(\sigma) \le \delta` holds for the
    exact function, and sigma is never below the exact root; it exceeds it
    by a relative ``1e-12`` or so. For ``epsilon < 1`` the classical
    calibration (Dwork & Roth 2014, Theorem A.1) is proven too, and the
    smaller of the two is returned: it is the classical one only where
    double precision resolves :math:`\delta(\sigma)` near the root poorly
    or not at all (epsilon about 1e-12 or below with delta 1e-30 or below,
    where the float root had up to :math:`e^{620}` times the target delta).

    :math:`\delta(\sigma)` depends on :math:`\Delta/\sigma` only, so all of
    this runs at sensitivity 1 and the verified sigma is multiplied by
    ``sensitivity``, the product rounded up one float: never below the exact
    root at any sensitivity, tiny or huge (see :func:`_noise_scale`).

    Parameters
    ----------
    sensitivity : float
        L2 sensitivity.
    epsilon : float
        > 0.
    delta : float
        In (0, 1).

    Returns
    -------
    float

    Raises
    ------
    ValueError
        For invalid parameters (``epsilon`` above 1e17 too), where the root
        cannot be verified and epsilon >= 1 (not met over epsilon 1..1e6,
        delta 1e-300..0.999), or where sigma exceeds the float64 maximum.
    """
    epsilon, delta = check_epsilon_delta(epsilon, delta, allow_zero_delta=False)
    sensitivity = _check_sensitivity(sensitivity)
    if epsilon > _MAX_ANALYTIC_EPSILON:
        raise ValueError(
            f"epsilon must be at most {_MAX_ANALYTIC_EPSILON:g} for the analytic Gaussian "
            f"calibration, got epsilon={epsilon!r}: the float error bound of delta(sigma) "
            "overflows above about 3e18."
        )
    if sensitivity == 0:
        return 0.0
    unit_sigma = _analytic_unit_sigma(epsilon, delta)
    if epsilon < 1:  # the classical calibration is proven there: never return more
        classical = _classical_unit_sigma(epsilon, delta)
        unit_sigma = classical if unit_sigma is None else min(unit_sigma, classical)
    if unit_sigma is not None:
        return _noise_scale(sensitivity * unit_sigma, sensitivity,
                            f"epsilon={epsilon!r}, delta={delta!r}")
    raise ValueError(
        f"the analytic Gaussian calibration cannot be verified in double precision at "
        f"epsilon={epsilon!r}, delta={delta!r}; use calibration='classical' (epsilon < 1) or a "
        "larger delta.")


#: Largest epsilon of :func:`analytic_gaussian_sigma`: its float error bound
#: (:func:`_log_gaussian_delta_error`) overflows from about 3e18 (review R5-4); checked up to
#: 1e17 for delta 1e-300 to 0.999999.
_MAX_ANALYTIC_EPSILON = 1e17

#: Largest log sigma the bracket of :func:`_analytic_unit_sigma` evaluates: ``exp`` of it
#: and twice that (the search of :func:`_verified_sigma`) stay finite.
_MAX_LOG_UNIT_SIGMA = math.log(np.finfo(float).max / 4.0)


def _analytic_unit_sigma(epsilon, delta):
    """The verified analytic sigma at sensitivity 1 (see :func:`analytic_gaussian_sigma`).

    ``None`` where it cannot be verified; ``ValueError`` where it exceeds
    about 4e307 (epsilon below about 1e-306).
    """
    target = math.log(delta)

    def excess(log_sigma):
        with np.errstate(divide="ignore"):  # delta may round to 0 (log -inf) at a tiny epsilon
            return _log_gaussian_delta(math.exp(log_sigma), 1.0, epsilon) - target

    # delta(sigma) decreases from 1 (sigma -> 0) to 0 (sigma -> inf); bracket in log-space.
    # At sensitivity 1 the root is at least about 1/sqrt(2 epsilon) >= 5e-155: lo stays finite.
    lo = -10.0
    while excess(lo) < 0:
        lo -= 10.0
    hi = 1.0
    while excess(hi) > 0:
        hi += 2.0
        if hi > _MAX_LOG_UNIT_SIGMA:
            raise ValueError(
                f"the Gaussian noise scale at epsilon={epsilon!r}, delta={delta!r} exceeds "
                "the float64 maximum at sensitivity 1; use a larger epsilon or delta.")
    log_sigma = optimize.brentq(excess, lo, hi, xtol=1e-14, rtol=1e-13, maxiter=500)
    return _verified_sigma(math.exp(log_sigma) * (1.0 + 1e-12), 1.0, epsilon, target)


_GAUSSIAN_CALIBRATIONS = {
    "analytic": analytic_gaussian_sigma,
    "classical": classical_gaussian_sigma,
}


def gaussian_sigma(sensitivity, epsilon, delta, calibration="analytic"):
    """Noise scale of the Gaussian mechanism for ``calibration`` in {"analytic", "classical"}."""
    try:
        calibrate = _GAUSSIAN_CALIBRATIONS[calibration]
    except KeyError:
        raise ValueError(
            f"calibration must be one of {sorted(_GAUSSIAN_CALIBRATIONS)}, got {calibration!r}."
        ) from None
    return calibrate(sensitivity, epsilon, delta)


def gaussian_mechanism(
    value,
    *,
    sensitivity,
    epsilon,
    delta,
    rng,
    calibration="analytic",
    label="",
    neighbouring="replace_one",
):
    r"""Release ``value + N(0, sigma^2 I)`` with sigma calibrated to (epsilon, delta).

    Parameters
    ----------
    value : float or array-like
        The true value; ``sensitivity`` is the L2 sensitivity of the whole
        array.
    sensitivity : float
        L2 sensitivity.
    epsilon, delta : float
        Target privacy.
    rng : numpy.random.Generator
    calibration : {"analytic", "classical"}, default="analytic"
        Balle & Wang (2018) exact calibration (any epsilon), or the classical
        bound (epsilon < 1 only).

    Returns
    -------
    noisy : float or ndarray
    event : PrivacyEvent
    """
    sigma = gaussian_sigma(sensitivity, epsilon, delta, calibration)
    value = np.asarray(value, dtype=float)
    noisy = value + rng.normal(0.0, sigma, size=value.shape) if sigma > 0 else value.copy()
    event = PrivacyEvent(
        "gaussian",
        float(epsilon),
        float(delta),
        float(sensitivity),
        sigma,
        label=label,
        neighbouring=neighbouring,
        details={"calibration": calibration},
    )
    return (noisy.item() if noisy.ndim == 0 else noisy), event


# ---------------------------------------------------------------------------
# zCDP
# ---------------------------------------------------------------------------


def zcdp_to_dp(rho, delta):
    r"""Epsilon of :math:`(\varepsilon, \delta)`-DP implied by :math:`\rho`-zCDP.

    Bun & Steinke (2016), Proposition 1.3:
    :math:`\varepsilon = \rho + 2\sqrt{\rho \log(1/\delta)}`.
    """
    if not (rho >= 0 and np.isfinite(rho)):
        raise ValueError(f"rho must be finite and >= 0, got rho={rho!r}.")
    _, delta = check_epsilon_delta(1.0, delta, allow_zero_delta=False)
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def zcdp_rho_for_dp(epsilon, delta):
    r"""Largest :math:`\rho` whose zCDP guarantee implies :math:`(\varepsilon, \delta)`-DP.

    The inverse of :func:`zcdp_to_dp`:
    :math:`\rho = (\sqrt{\log(1/\delta) + \varepsilon} - \sqrt{\log(1/\delta)})^2`.
    """
    epsilon, delta = check_epsilon_delta(epsilon, delta, allow_zero_delta=False)
    log_inv = math.log(1.0 / delta)
    # Written as eps^2 / (sqrt(L + eps) + sqrt(L))^2 to avoid cancellation.
    return epsilon**2 / (math.sqrt(log_inv + epsilon) + math.sqrt(log_inv)) ** 2


def zcdp_gaussian_mechanism(value, *, sensitivity, rho, rng, label="", neighbouring="replace_one"):
    r"""Release ``value + N(0, sigma^2 I)`` with :math:`\sigma = \Delta/\sqrt{2\rho}`.

    Bun & Steinke (2016), Proposition 1.6: this is :math:`\rho`-zCDP;
    sigma is rounded up (:func:`zcdp_gaussian_sigma`) and recorded. The
    event records ``rho`` and ``epsilon = delta = 0``: its (epsilon, delta)
    cost is decided by the caller's zCDP composition and conversion.
    """
    sigma = zcdp_gaussian_sigma(sensitivity, rho)
    sensitivity = _check_sensitivity(sensitivity)
    value = np.asarray(value, dtype=float)
    noisy = value + rng.normal(0.0, sigma, size=value.shape) if sigma > 0 else value.copy()
    event = PrivacyEvent(
        "zcdp_gaussian", 0.0, 0.0, sensitivity, sigma, rho=float(rho), label=label,
        neighbouring=neighbouring,
    )
    return (noisy.item() if noisy.ndim == 0 else noisy), event


# ---------------------------------------------------------------------------
# Exponential mechanism
# ---------------------------------------------------------------------------


def _check_log_base_measure(log_base_measure, shape):
    """``log_base_measure`` as floats of ``shape``: finite or -inf, at least one finite (review RA-12)."""
    log_base_measure = np.asarray(log_base_measure, dtype=float)
    if log_base_measure.shape != shape:
        raise ValueError(f"log_base_measure must have the shape of scores, {shape}, got "
                         f"{log_base_measure.shape}.")
    if np.any(np.isnan(log_base_measure) | (log_base_measure == np.inf)):
        raise ValueError("log_base_measure must hold finite log weights, or -inf for a candidate of "
                         "weight 0; it holds NaN or +inf.")
    if not np.any(np.isfinite(log_base_measure)):
        raise ValueError("log_base_measure is -inf for every candidate: no candidate has a positive "
                         "weight; give at least one a finite log weight.")
    return log_base_measure


def exponential_mechanism(
    scores,
    *,
    epsilon,
    sensitivity,
    rng,
    log_base_measure=None,
    label="",
    neighbouring="replace_one",
):
    r"""Sample an index with probability proportional to ``exp(epsilon * score / (2 * sensitivity))``.

    McSherry & Talwar (2007); Cohen et al. (2021), Appendix A.1.1: the
    mechanism is :math:`\varepsilon`-DP when every score has sensitivity at
    most ``sensitivity``. Sampling uses the Gumbel-max trick,
    :math:`\arg\max_i (\log w_i + G_i)` with i.i.d. standard Gumbel
    :math:`G_i`, entirely in log space, so scores of 1e7 or more never
    overflow.

    **Floating point** (review RA-12; see also the module's caveat). The
    guarantee is epsilon-DP up to floating point:

    * NumPy draws :math:`G = -\log(-\log U)` with :math:`U \in [2^{-53},
      1 - 2^{-53}]`, so every draw lies in :math:`[-3.604, 36.737]`. A
      candidate whose log weight is more than 40.34 below the best one is
      never drawn, where the exact mechanism draws it with probability at
      most :math:`e^{-40.34} \approx 3 \times 10^{-18}`, and a neighbouring
      dataset can move a candidate across that gap. The pure
      :math:`\varepsilon`-DP bound therefore holds for events of probability
      above about :math:`10^{-17}` only (an additive delta of that order).
    * Log weights :math:`\varepsilon s / (2\Delta)` near :math:`4 \times
      10^{16}` (an ulp of 8) quantise the Gumbel noise, and ties go to the
      lowest index: two equal scores then give index 0 with probability
      0.98 instead of 0.5. The callers' log weights stay far below (at most
      about the number of rows).

    Parameters
    ----------
    scores : array-like of shape (n_candidates,)
    epsilon : float
    sensitivity : float
        Sensitivity of every score, > 0.
    rng : numpy.random.Generator
    log_base_measure : array-like of shape (n_candidates,), default=None
        Data-independent log weights added to every candidate (for example the
        log length of a run of grid points that share one score): finite, or
        ``-inf`` for a candidate of weight 0, and not all ``-inf``.

    Returns
    -------
    index : int
    event : PrivacyEvent

    Raises
    ------
    ValueError
        For invalid parameters, scores or ``log_base_measure``, before any
        randomness is drawn.
    """
    epsilon, _ = check_epsilon_delta(epsilon, 0.0)
    sensitivity = _check_sensitivity(sensitivity)
    if sensitivity == 0:
        raise ValueError("sensitivity of the exponential mechanism must be > 0.")
    scores = np.asarray(scores, dtype=float)
    if scores.ndim != 1 or scores.size == 0 or not np.all(np.isfinite(scores)):
        raise ValueError("scores must be a non-empty 1-d array of finite numbers.")
    base = (np.zeros(scores.shape) if log_base_measure is None
            else _check_log_base_measure(log_base_measure, scores.shape))
    # Shifted by the best eligible score and divided before the product, so that no log
    # weight is NaN or +inf at any scale (re-review V1: at sensitivity 1e-310 the product
    # epsilon / (2 sensitivity) overflowed and argmax picked the first inf: no randomness).
    eligible = np.isfinite(base)
    best = np.max(scores[eligible])
    with np.errstate(over="ignore", invalid="ignore"):
        log_weights = np.where(eligible, (epsilon / 2.0) * ((scores - best) / sensitivity) + base,
                               -np.inf)
    index = int(np.argmax(log_weights + rng.gumbel(size=scores.shape)))
    # No candidate count in the event: callers may pass data-dependent candidate sets
    # (runs of equal score), and the event must hold public values only.
    event = PrivacyEvent(
        "exponential", epsilon, 0.0, sensitivity, 2.0 * sensitivity / epsilon, label=label,
        neighbouring=neighbouring,
    )
    return index, event


# ---------------------------------------------------------------------------
# Sparse vector
# ---------------------------------------------------------------------------


def above_threshold(values, *, threshold, sensitivity, epsilon, rng, label="",
                    neighbouring="replace_one"):
    r"""AboveThreshold: the index of the first query whose noisy value reaches a noisy threshold.

    Dwork & Roth (2014), Algorithm 1 and Theorem 3.23: with
    :math:`\hat T = T + \mathrm{Lap}(2\Delta/\varepsilon)` drawn once and
    :math:`\nu_i \sim \mathrm{Lap}(4\Delta/\varepsilon)` per query, releasing
    the first :math:`i` with :math:`q_i + \nu_i \ge \hat T` (or "none") is
    :math:`\varepsilon`-DP when every query has sensitivity at most
    :math:`\Delta` under the stated neighbouring relation. The queries must be
    fixed in advance (or chosen from public values and earlier answers); the
    cost does not depend on how many are asked nor on the outcome.

    Parameters
    ----------
    values : iterable of float
        The true query values, consumed lazily in order: nothing after the
        first noisy pass is evaluated.
    threshold : float
        The public threshold T.
    sensitivity : float
        Sensitivity of every query, > 0.
    epsilon : float
        > 0.
    rng : numpy.random.Generator
    label, neighbouring : str
        Copied into the event.

    Returns
    -------
    index : int or None
        The first passing query, or ``None`` when none passes.
    event : PrivacyEvent
    """
    epsilon, _ = check_epsilon_delta(epsilon, 0.0)
    sensitivity = _check_sensitivity(sensitivity)
    if sensitivity == 0 or not np.isfinite(threshold):
        raise ValueError("above_threshold needs a sensitivity > 0 and a finite threshold.")
    event = PrivacyEvent(
        "above_threshold", epsilon, 0.0, sensitivity, 4.0 * sensitivity / epsilon, label=label,
        neighbouring=neighbouring,
        details={"threshold_scale": 2.0 * sensitivity / epsilon,
                 "theorem": "Dwork & Roth 2014, Theorem 3.23"},
    )
    noisy_threshold = threshold + rng.laplace(0.0, 2.0 * sensitivity / epsilon)
    for index, value in enumerate(values):
        if value + rng.laplace(0.0, 4.0 * sensitivity / epsilon) >= noisy_threshold:
            return index, event
    return None, event


# ---------------------------------------------------------------------------
# Randomized response (local model)
# ---------------------------------------------------------------------------


def _rr_keep_probability(epsilon, n_values):
    r"""Probability :math:`p = e^\varepsilon/(e^\varepsilon + m - 1)` of reporting the true value."""
    return 1.0 / (1.0 + (n_values - 1) * math.exp(-epsilon))


#: Above this epsilon, :math:`(m - 1)e^{-\varepsilon} < 2^{53} e^{-700} < 2^{-53}` for every
#: m < 2^53: the replacement probability is below the resolution of the uniform draws.
_RR_TINY_REPLACE_EPSILON = 700.0


def _rr_replace_probability(epsilon, n_values):
    r"""Probability of replacing the true value, rounded up: at least :math:`(m - 1)q`.

    With :math:`q = 1/(e^\varepsilon + m - 1)` (:func:`randomized_response`).
    Computed as :math:`\rho/(1 + \rho)` with :math:`\rho = (m - 1)e^{-\varepsilon}`:
    the exponential (within an ulp), the product, the sum and the
    quotient round by at most :math:`5u` in all (:math:`u = 2^{-53}`),
    and the factor :math:`1 + 2^{-48}` lifts the computed value above the
    exact one; it exceeds it by at most a relative :math:`2^{-47}`. Above
    ``_RR_TINY_REPLACE_EPSILON`` the exponential would be subnormal (its
    relative error unbounded); there the exact probability is below
    :math:`2^{-53}` and :math:`2^{-60}` is returned, which
    :func:`randomized_response`'s uniform draw turns into :math:`2^{-53}`.
    """
    if epsilon > _RR_TINY_REPLACE_EPSILON:
        return 2.0**-60
    ratio = (n_values - 1) * math.exp(-epsilon)
    return ratio / (1.0 + ratio) * (1.0 + 2.0**-48)


def _check_rr_resolution(epsilon, n_values):
    r"""Refuse an epsilon too small for :func:`randomized_response`'s 53-bit draws.

    The realized replacement probability :math:`r` is in :math:`[q, q(1 +
    2^{-47}) + 2^{-53}]` with :math:`q = (m-1)/(e^\varepsilon + m - 1)`;
    the report is :math:`\varepsilon`-DP when :math:`r \le b = (m -
    1)e^\varepsilon/(1 + (m - 1)e^\varepsilon)` (the other direction of
    the likelihood ratio), and :math:`b - q = (m-1)(e^{2\varepsilon} -
    1)/((1 + (m-1)e^\varepsilon)(e^\varepsilon + m - 1))`, computed
    divided through by :math:`e^{2\varepsilon}` (no overflow at any
    epsilon). That gap must hold the draw's excess with room for the
    rounding of this check (a factor 2).
    """
    decay = math.exp(-epsilon)  # the gap divided through by e^(2 epsilon): nothing overflows
    replace = (n_values - 1) * decay / (1.0 + (n_values - 1) * decay)
    gap = (n_values - 1) * -math.expm1(-2.0 * epsilon) / (
        (decay + n_values - 1) * (1.0 + (n_values - 1) * decay))
    if not gap >= 2.0 * (replace * 2.0**-47 + 2.0**-53):
        raise ValueError(
            f"epsilon={epsilon!r} is too small for randomized response over n_values="
            f"{n_values} with 53-bit uniform draws (the likelihood ratio could exceed "
            "e^epsilon); use a larger epsilon or fewer values.")


def randomized_response(values, *, n_values, epsilon, rng, label="", neighbouring="replace_one"):
    r"""Generalized randomized response: each value is reported truthfully or replaced at random.

    Every entry :math:`v \in \{0, \dots, m-1\}` (one user's value) is kept
    with probability :math:`p = e^\varepsilon/(e^\varepsilon + m - 1)` and
    otherwise replaced by a uniform draw among the :math:`m - 1` other values,
    so every report :math:`j` has probability :math:`p` or
    :math:`q = 1/(e^\varepsilon + m - 1)`. For two inputs :math:`v, v'` of one
    user the likelihood ratio of every report is in
    :math:`\{q/p, 1, p/q\} = \{e^{-\varepsilon}, 1, e^{\varepsilon}\}`:
    one report is :math:`\varepsilon`-LDP (Warner 1965; Kairouz, Oh &
    Viswanath 2014, "k-ary randomized response").

    **In floating point.** A uniform draw :math:`U` (a multiple of
    :math:`2^{-53}`) replaces the value when :math:`U < \hat r`, with
    :math:`\hat r \ge (m-1)q` the replacement probability rounded up
    (:func:`_rr_replace_probability`), so the realized replacement
    probability is :math:`r \ge (m - 1)q` and a truthful report has
    probability :math:`1 - r \le p`: the ratio :math:`(1 - r)(m - 1)/r`
    is at most :math:`e^\varepsilon` for every :math:`\varepsilon`, and
    the value is never sent in the clear (with :math:`U < p` instead, the
    realized loss exceeded :math:`\varepsilon` from about
    :math:`\varepsilon = 30`, and from :math:`\varepsilon \approx 37`
    (m = 3) :math:`p` rounded to 1: every report was the truth). The other
    direction needs :math:`r \le (m - 1)e^\varepsilon/(1 + (m -
    1)e^\varepsilon)`, which the draw's excess of at most a relative
    :math:`2^{-47}` plus :math:`2^{-53}` meets unless :math:`\varepsilon`
    is below about :math:`m\,2^{-47}`: such an epsilon is refused
    (:func:`_check_rr_resolution`) before any randomness.

    Parameters
    ----------
    values : int or array-like of int
        One value per user, each in ``[0, n_values)``; each entry is
        randomized independently (one report per user).
    n_values : int
        Domain size m, >= 2.
    epsilon : float
        Privacy parameter of one report, > 0.
    rng : numpy.random.Generator
    label, neighbouring : str
        Copied into the event.

    Returns
    -------
    reports : int or ndarray of int
    event : PrivacyEvent
        The cost of **one** user's report.
    """
    epsilon, _ = check_epsilon_delta(epsilon, 0.0)
    if not (isinstance(n_values, Integral) and 2 <= n_values <= 2**53):
        raise ValueError(f"n_values must be an integer in [2, 2**53], got n_values={n_values!r} "
                         "(the draws resolve no larger domain).")
    values = np.asarray(values)
    in_domain = np.issubdtype(values.dtype, np.integer) and np.all((values >= 0) & (values < n_values))
    if not in_domain:
        raise ValueError(f"values must be integers in [0, n_values={n_values}).")
    _check_rr_resolution(epsilon, n_values)
    keep_probability = _rr_keep_probability(epsilon, n_values)
    replace = rng.random(values.shape) < _rr_replace_probability(epsilon, n_values)
    other = rng.integers(n_values - 1, size=values.shape)
    other = other + (other >= values)  # uniform over the m - 1 values other than the truth
    reports = np.where(replace, other, values).astype(np.intp)
    event = PrivacyEvent(
        "randomized_response", epsilon, 0.0, scale=keep_probability, label=label,
        neighbouring=neighbouring, details={"n_values": int(n_values)},
    )
    return (reports.item() if reports.ndim == 0 else reports), event


# ---------------------------------------------------------------------------
# Amplification by subsampling
# ---------------------------------------------------------------------------


def _subsampled_balle2018(epsilon, delta, sample_size, population_size):
    rate = sample_size / population_size
    # log(1 + rate (e^eps - 1)) = log(rate e^eps + (1 - rate)), without overflow for large eps.
    if rate == 1:
        return epsilon, delta
    return float(np.logaddexp(math.log(rate) + epsilon, math.log1p(-rate))), rate * delta


def _subsampled_bkn10(epsilon, delta, sample_size, population_size):
    rate = sample_size / population_size
    amplified = rate * (3.0 + math.exp(epsilon))
    if amplified > 1:
        raise ValueError(
            "the BKN10 subsampling bound (Cohen et al. 2021, Lemma 2.10) holds only for a "
            f"target epsilon <= 1, but (m/n)(3 + e^eps) = {amplified:.4g}; use bound='balle2018'."
        )
    return amplified, 4.0 * rate * delta


_SUBSAMPLING_BOUNDS = {"balle2018": _subsampled_balle2018, "bkn10": _subsampled_bkn10}


def subsampled_epsilon_delta(epsilon, delta, sample_size, population_size, bound="balle2018"):
    r"""Privacy of running an (epsilon, delta)-DP algorithm on a uniform subsample.

    The subsample has ``sample_size`` = m rows drawn without replacement from
    ``population_size`` = n rows; neighbours replace one row (the same
    relation on both sides).

    * ``"balle2018"``: Balle, Barthe & Gaboardi (2018), Theorem 10,
      :math:`\varepsilon' = \log(1 + (m/n)(e^{\varepsilon} - 1))`,
      :math:`\delta' = (m/n)\delta`. Valid for every epsilon.
    * ``"bkn10"``: Beimel, Kasiviswanathan & Nissim (2010) as stated in Cohen
      et al. (2021), Lemma 2.10, :math:`\varepsilon' = (m/n)(3 + e^{\varepsilon})`,
      :math:`\delta' = (4m/n)\delta` (the paper prints the delta factor
      upside down; this is the standard form). Valid only when the result is
      at most 1. This is the bound behind Definition 4.1.

    Returns
    -------
    (float, float)
    """
    epsilon, delta = check_epsilon_delta(epsilon, delta)
    if not (isinstance(sample_size, Integral) and isinstance(population_size, Integral)):
        raise ValueError("sample_size and population_size must be integers.")
    if not 0 < sample_size <= population_size:
        raise ValueError(
            f"need 0 < sample_size <= population_size, got sample_size={sample_size}, "
            f"population_size={population_size}."
        )
    try:
        amplify = _SUBSAMPLING_BOUNDS[bound]
    except KeyError:
        raise ValueError(f"bound must be one of {sorted(_SUBSAMPLING_BOUNDS)}, got {bound!r}.") from None
    return amplify(epsilon, delta, int(sample_size), int(population_size))


def subsampled_event(event, sample_size, population_size, bound="balle2018"):
    """Return ``event`` re-priced for running on a uniform subsample (see :func:`subsampled_epsilon_delta`).

    The returned event has ``mechanism="subsampled"``; the inner mechanism,
    its (epsilon, delta) and the sampling rate are kept in ``details``.
    """
    epsilon, delta = subsampled_epsilon_delta(
        event.epsilon, event.delta, sample_size, population_size, bound=bound
    )
    details = {
        "inner_mechanism": event.mechanism,
        "inner_epsilon": event.epsilon,
        "inner_delta": event.delta,
        "sample_size": int(sample_size),
        "population_size": int(population_size),
        "bound": bound,
    }
    return replace(event, mechanism="subsampled", epsilon=epsilon, delta=delta, details=details)
