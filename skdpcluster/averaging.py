r"""Private primitives on arrays: interior point, averages, counts, 1-median, Gaussian.

These are the building blocks of the k-tuple framework (``PrivatekAverages``),
of the stable k-means / k-median estimators and of the Gaussian mixture. Every
function is pure: validated arrays, privacy parameters and a
:class:`numpy.random.Generator` go in; ``(result, event)`` comes out, where
``event`` is **one** composite :class:`~skdpcluster.mechanisms.PrivacyEvent`
stating the total privacy the call is proven to spend. Its ``details`` hold
only public internals (budget split, composition, grid size); nothing in an
event depends on the data. Every noise draw goes through
:mod:`skdpcluster.mechanisms`.

Contents, with the specification each function implements:

* :func:`private_interior_point`, :func:`private_bounding_segment`,
  :func:`private_average_1d`, :func:`private_average`: the private average of
  Proposition 2.9 of Cohen, Kaplan, Mansour, Stemmer & Tsfadia (ICML 2021),
  reconstructed in ``spec/cohen_ktuple.md`` §7.2-§7.5, with the correction of
  ``spec/cohen_ktuple_review.md`` (Finding 6): the centred clipped **sum** is
  divided by a public count ``n_public``, which makes the average private
  under add/remove of one point with sensitivity :math:`(b-a)/(2 n)`.
* :func:`private_count`: the noisy count of ``spec/cohen_ktuple.md`` §7.6.
* :func:`private_one_median`: the private 1-median by noisy projected gradient
  descent of ``spec/shechner_stable.md`` §9.7 (the thesis' tool, Bassily, Smith
  & Thakurta 2014, in §4.1 there); :func:`private_one_medians` runs it on
  disjoint cells at once.
* :func:`private_gaussian_estimate`: a CoinPress-style learner (Biswas, Dong,
  Kamath & Ullman, NeurIPS 2020) of one Gaussian under zCDP,
  ``spec/cohen_ktuple.md`` §9.6.

Data-dependent exceptions would leak, so none is raised after validation: an
empty input gives a data-independent random output. Non-finite values are
refused up front as a documented domain restriction; the estimators validate
their input before calling these functions.
"""

import math
from dataclasses import dataclass, replace
from numbers import Integral, Real

import numpy as np

from skdpcluster.mechanisms import (
    PrivacyEvent,
    analytic_gaussian_sigma,
    exponential_mechanism,
    gaussian_mechanism,
    laplace_mechanism,
    zcdp_gaussian_mechanism,
)
from skdpcluster.utils._validation import check_epsilon_delta, check_probability

__all__ = [
    "private_average",
    "private_average_1d",
    "private_bounding_segment",
    "private_count",
    "private_gaussian_estimate",
    "private_interior_point",
    "private_one_median",
    "private_one_medians",
]

# Grid indices are exact in float64 only up to 2**53; 2 * Lambda / r_min above
# 2**52 would lose the resolution of the grid (spec §7.2).
_MAX_GRID_INTERVALS = 2**52

# Add/remove changes a centred clipped sum by at most (b - a)/2, replace-one by
# b - a (review, Finding 6).
_SUM_SENSITIVITY_PER_WIDTH = {"add_remove": 0.5, "replace_one": 1.0}

# Noisy projected gradient descent for the 1-median (shechner_stable.md §9.3,
# §9.7): L2 sensitivity of one cell's gradient sum and count. The replace-one
# values are those of k disjoint cells released jointly, so one call per cell
# with the same parameters costs the same as one call in total.
_MEDIAN_SENSITIVITIES = {"add_remove": (1.0, 1.0), "replace_one": (2.0, math.sqrt(2.0))}
_MEDIAN_COUNT_SHARE = 0.1
# Values per block of rows in the 1-median's gradient sums (1 MiB of float64).
_MEDIAN_BLOCK_ELEMENTS = 2**17

# Confidence of each CoinPress step; it sets the clipping radii and the
# shrinking of the confidence sets, so it affects utility only, never privacy.
_COINPRESS_BETA = 0.01

# Weights tried when combining two lower bounds on the whitened covariance.
_LOWER_BOUND_WEIGHTS = np.linspace(0.0, 1.0, 101)

_COMPOSITIONS = ("advanced", "auto", "basic")


# ---------------------------------------------------------------------------
# Validation (every check runs before any randomness is drawn)
# ---------------------------------------------------------------------------


def _check_generator(rng):
    if not isinstance(rng, np.random.Generator):
        raise ValueError(
            f"rng must be a numpy.random.Generator, got rng={rng!r}; "
            "use skdpcluster.utils.check_random_state to build one."
        )
    return rng


def _check_real(value, name, *, low=0.0, low_inclusive=False):
    valid = isinstance(value, Real) and not isinstance(value, bool) and math.isfinite(value)
    if not (valid and (value >= low if low_inclusive else value > low)):
        relation = ">=" if low_inclusive else ">"
        raise ValueError(f"{name} must be a finite number {relation} {low}, got {name}={value!r}.")
    return float(value)


def _check_positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {name}={value!r}.")
    return int(value)


def _check_choice(value, name, choices):
    if value not in choices:
        raise ValueError(f"{name} must be one of {sorted(choices)}, got {name}={value!r}.")
    return value


def _check_finite_array(array, name, ndim):
    array = np.asarray(array, dtype=float)
    if array.ndim != ndim:
        raise ValueError(f"{name} must be a {ndim}-d array, got shape {array.shape}.")
    if not np.all(np.isfinite(array)):
        raise ValueError(f"{name} must contain only finite numbers (no NaN or inf).")
    return array


def _check_points(points, center=None):
    points = _check_finite_array(points, "points", 2)
    if points.shape[1] == 0:
        raise ValueError("points must have at least one column (feature).")
    if center is None:
        return points, None
    center = _check_finite_array(center, "center", 1)
    if center.shape != (points.shape[1],):
        raise ValueError(
            f"center must have shape ({points.shape[1]},) to match points, got {center.shape}."
        )
    return points, center


def _check_grid(data_radius, r_min):
    """Validate Lambda and r_min; return the number of grid intervals N = ceil(2 Lambda / r_min)."""
    data_radius = _check_real(data_radius, "data_radius")
    r_min = _check_real(r_min, "r_min")
    if 2.0 * data_radius / r_min > _MAX_GRID_INTERVALS:
        raise ValueError(
            f"2 * data_radius / r_min = {2.0 * data_radius / r_min:.4g} exceeds 2**52: the grid "
            f"would lose float64 precision; increase r_min (got data_radius={data_radius!r}, "
            f"r_min={r_min!r})."
        )
    return data_radius, r_min, math.ceil(2.0 * data_radius / r_min)


# ---------------------------------------------------------------------------
# Interior point (spec §7.2)
# ---------------------------------------------------------------------------


def _quality_runs(values, data_radius, r_min, n_intervals):
    """Maximal runs of grid indices on which q(i) = min(L(i), U(i)) is constant.

    Returns the first index of each run, its length and its quality. L changes
    only at some lo(x), U only just after some hi(x), so these are the run
    starts; L and U there come from binary searches on the sorted roundings.
    """
    scaled = (np.clip(values, -data_radius, data_radius) + data_radius) / r_min
    lower = np.sort(np.clip(np.floor(scaled), 0, n_intervals).astype(np.int64))
    upper = np.sort(np.clip(np.ceil(scaled), 0, n_intervals).astype(np.int64))
    after_upper = upper[upper < n_intervals] + 1
    starts = np.unique(np.concatenate(([0], lower, after_upper)))
    lengths = np.diff(np.append(starts, n_intervals + 1))
    at_or_below = np.searchsorted(lower, starts, side="right")  # L(start)
    at_or_above = upper.size - np.searchsorted(upper, starts, side="left")  # U(start)
    return starts, lengths, np.minimum(at_or_below, at_or_above)


def _interior_point(values, data_radius, r_min, n_intervals, epsilon, rng):
    """Kernel of :func:`private_interior_point`; trusts its input."""
    starts, lengths, quality = _quality_runs(values, data_radius, r_min, n_intervals)
    # Choosing a run with weight len * exp(eps q / 2), then a point uniformly inside it, is
    # exactly the exponential mechanism over the N + 1 grid points; the caller prices it.
    run, _ = exponential_mechanism(
        quality, epsilon=epsilon, sensitivity=1.0, rng=rng, log_base_measure=np.log(lengths),
        neighbouring="add_remove",
    )
    index = starts[run] + rng.integers(lengths[run])
    return -data_radius + float(index) * r_min


def private_interior_point(values, *, data_radius, r_min, epsilon, rng):
    r"""Private interior point on the grid of step ``r_min`` (Cohen et al. 2021, App. A.1.2).

    Implements ``spec/cohen_ktuple.md`` §7.2. Values are clipped to
    :math:`[-\Lambda, \Lambda]` and rounded down and up to the grid
    :math:`z(i) = -\Lambda + i\,r_{\min}`, :math:`i = 0..N`,
    :math:`N = \lceil 2\Lambda / r_{\min}\rceil`. With
    :math:`L(i) = \#\{x : \mathrm{lo}(x) \le i\}` and
    :math:`U(i) = \#\{x : \mathrm{hi}(x) \ge i\}`, the exponential mechanism
    outputs :math:`z(i)` with probability proportional to

    .. math::

        \exp\left(\frac{\varepsilon}{2}\, q(i)\right), \qquad q(i) = \min(L(i), U(i)).

    It samples exactly in :math:`O(n \log n)`: :math:`q` is constant on at most
    :math:`2n + 1` runs of the grid, a run :math:`j` is chosen with log weight
    :math:`\log(\mathrm{len}_j) + \varepsilon q_j / 2` (Gumbel-max in log
    space, so :math:`\varepsilon q / 2 \approx 10^7` cannot overflow), then a
    point uniformly inside it.

    **Privacy.** Adding, removing or replacing one value moves every
    :math:`L(i)` and :math:`U(i)` by at most 1, so :math:`q` has sensitivity
    1 and the mechanism is :math:`\varepsilon`-DP under add/remove and under
    replace-one (McSherry & Talwar 2007). An empty input has :math:`q = 0`
    everywhere and gives a uniform grid point; no data-dependent exception is
    raised.

    **Utility.** If :math:`n \ge (4/\varepsilon)\log(|G|/\beta)`, then with
    probability :math:`1 - \beta` the output lies in
    :math:`[\min S - r_{\min}, \max S + r_{\min}]`.

    Parameters
    ----------
    values : array-like of shape (n_values,)
        Finite values; may be empty.
    data_radius : float
        The public bound :math:`\Lambda > 0`.
    r_min : float
        Grid step, > 0, with ``2 * data_radius / r_min <= 2**52``.
    epsilon : float
        Privacy parameter, > 0.
    rng : numpy.random.Generator

    Returns
    -------
    z : float
        A grid point.
    event : PrivacyEvent
        ``"private_interior_point"``, ``(epsilon, 0)``.

    Raises
    ------
    ValueError
        On invalid parameters, before any randomness is drawn.
    """
    values = _check_finite_array(values, "values", 1)
    data_radius, r_min, n_intervals = _check_grid(data_radius, r_min)
    epsilon, _ = check_epsilon_delta(epsilon, 0.0)
    rng = _check_generator(rng)
    z = _interior_point(values, data_radius, r_min, n_intervals, epsilon, rng)
    event = PrivacyEvent(
        "private_interior_point", epsilon, 0.0, sensitivity=1.0, scale=2.0 / epsilon,
        neighbouring="add_remove",
        details={"grid_size": n_intervals + 1, "grid_step": r_min,
                 "also_private_under": "replace_one"},
    )
    return z, event


# ---------------------------------------------------------------------------
# Bounding segment (spec §7.3)
# ---------------------------------------------------------------------------


def _segment_threshold(n_intervals, epsilon, beta):
    """t = ceil((4/eps_IP) log(|G|/beta_IP)) with eps_IP = eps/2, beta_IP = beta/2."""
    return math.ceil((8.0 / epsilon) * math.log(2.0 * (n_intervals + 1) / beta))


def _bounding_segment(values, data_radius, r_min, n_intervals, epsilon, beta, rng):
    """Kernel of :func:`private_bounding_segment`; trusts its input."""
    ordered = np.sort(values)
    size = min(_segment_threshold(n_intervals, epsilon, beta), ordered.size)
    grid = (data_radius, r_min, n_intervals, epsilon / 2.0)
    low = _interior_point(ordered[:size], *grid, rng) - r_min
    high = _interior_point(ordered[ordered.size - size:], *grid, rng) + r_min
    return min(low, high), max(low, high)


def private_bounding_segment(values, *, data_radius, r_min, epsilon, beta, rng):
    r"""Private segment containing all but about ``2t`` values (Cohen et al. 2021, App. A.1.3).

    Implements ``spec/cohen_ktuple.md`` §7.3: with
    :math:`\varepsilon_{IP} = \varepsilon/2`, :math:`\beta_{IP} = \beta/2` and

    .. math::

        t = \left\lceil \frac{4}{\varepsilon_{IP}} \log\frac{|G|}{\beta_{IP}} \right\rceil,

    run :func:`private_interior_point` on the :math:`\min(t, |S|)` smallest
    values (giving :math:`z_L`) and on the :math:`\min(t, |S|)` largest
    (:math:`z_R`), and return :math:`[z_L - r_{\min}, z_R + r_{\min}]`, the
    ends swapped if they are out of order. ``min(t, |S|)`` never branches on
    the data size.

    **Privacy.** Adding or removing one value changes the multiset of the
    :math:`t` smallest (or largest) by at most one swap, or one addition or
    removal; each interior point is :math:`\varepsilon/2`-DP under both, so the
    segment is :math:`\varepsilon`-DP (basic composition); the widening and the
    swap are post-processing.

    **Utility.** If :math:`|S| \ge t`, with probability :math:`1 - \beta` at
    most :math:`2t` values fall outside :math:`[a, b]` and
    :math:`b - a \le \max S - \min S + 4 r_{\min}`.

    Parameters
    ----------
    values : array-like of shape (n_values,)
    data_radius, r_min : float
        The grid of :func:`private_interior_point`.
    epsilon : float
        Total privacy parameter, > 0.
    beta : float
        Failure probability, in (0, 1).
    rng : numpy.random.Generator

    Returns
    -------
    segment : tuple of float
        ``(a, b)`` with ``a <= b``.
    event : PrivacyEvent
        ``"private_bounding_segment"``, ``(epsilon, 0)``.
    """
    values = _check_finite_array(values, "values", 1)
    data_radius, r_min, n_intervals = _check_grid(data_radius, r_min)
    epsilon, _ = check_epsilon_delta(epsilon, 0.0)
    beta = check_probability(beta, "beta")
    rng = _check_generator(rng)
    segment = _bounding_segment(values, data_radius, r_min, n_intervals, epsilon, beta, rng)
    details = {
        "composition": "basic",
        "epsilon_interior_point": epsilon / 2.0,
        "beta_interior_point": beta / 2.0,
        "n_extreme_values": _segment_threshold(n_intervals, epsilon, beta),
        "grid_size": n_intervals + 1,
    }
    event = PrivacyEvent("private_bounding_segment", epsilon, 0.0, neighbouring="add_remove",
                         details=details)
    return segment, event


# ---------------------------------------------------------------------------
# One-dimensional average (spec §7.4 with the review's Finding 6)
# ---------------------------------------------------------------------------


def _average_1d(values, n_public, grid, epsilon, delta, beta, neighbouring, rng):
    """Kernel of :func:`private_average_1d`; ``grid`` is (data_radius, r_min, n_intervals)."""
    segment = _bounding_segment(values, *grid, epsilon / 2.0, beta / 2.0, rng)
    estimate, _ = _noisy_clipped_average(values, segment, n_public, epsilon / 2.0, delta,
                                         neighbouring, rng)
    return estimate


def _noisy_clipped_average(values, segment, n_public, epsilon, delta, neighbouring, rng):
    r"""The Gaussian step of :func:`private_average_1d` on a released segment :math:`[a, b]`.

    Releases :math:`c + \sum_x (\mathrm{clip}(x, a, b) - c)/n_{\mathrm{public}} + N(0, \sigma^2)`,
    :math:`c = (a + b)/2`, with :math:`\sigma` the analytic calibration at
    ``(epsilon, delta)`` for the sensitivity
    :math:`(b - a)/(2 n_{\mathrm{public}})` (add/remove) or
    :math:`(b - a)/n_{\mathrm{public}}` (replace-one). ``values`` of shape
    ``(..., n_values)`` give one independent release per leading index.

    Returns
    -------
    estimate : float or ndarray of shape values.shape[:-1]
    event : PrivacyEvent
        The Gaussian release, ``(epsilon, delta)`` under ``neighbouring``.
    """
    low, high = segment
    centre = (low + high) / 2.0
    centred_sum = np.sum(np.clip(values, low, high) - centre, axis=-1)
    sensitivity = _SUM_SENSITIVITY_PER_WIDTH[neighbouring] * (high - low) / n_public
    return gaussian_mechanism(
        centre + centred_sum / n_public, sensitivity=sensitivity, epsilon=epsilon,
        delta=delta, rng=rng, calibration="analytic", neighbouring=neighbouring,
    )


def _check_average_inputs(n_public, data_radius, r_min, epsilon, delta, beta, neighbouring, rng):
    n_public = _check_real(n_public, "n_public", low=1.0, low_inclusive=True)
    grid = _check_grid(data_radius, r_min)
    epsilon, delta = check_epsilon_delta(epsilon, delta, allow_zero_delta=False)
    beta = check_probability(beta, "beta")
    _check_choice(neighbouring, "neighbouring", _SUM_SENSITIVITY_PER_WIDTH)
    return n_public, grid, epsilon, delta, beta, _check_generator(rng)


def private_average_1d(
    values, *, n_public, data_radius, r_min, epsilon, delta, beta, rng, neighbouring="add_remove"
):
    r"""Private average of values in :math:`[-\Lambda, \Lambda]` (Cohen et al. 2021, Prop. 2.9).

    Implements ``spec/cohen_ktuple.md`` §7.4 with the correction of
    ``spec/cohen_ktuple_review.md`` (Finding 6). With
    :math:`[a, b]` = :func:`private_bounding_segment` at
    :math:`(\varepsilon/2, \beta/2)` and :math:`c = (a + b)/2`, release

    .. math::

        \hat a = c + \frac{1}{n_{\mathrm{public}}} \sum_{x \in S} (\mathrm{clip}(x, a, b) - c)
                 + N(0, \sigma^2),

    where :math:`\sigma` is the analytic Gaussian calibration (Balle & Wang
    2018, valid at any epsilon) at :math:`(\varepsilon/2, \delta)` for the
    sensitivity :math:`(b - a) / (2 n_{\mathrm{public}})` under add/remove, or
    :math:`(b - a) / n_{\mathrm{public}}` under replace-one. The sum is divided
    by the public count, never by ``len(values)``, so with
    ``n_public = len(values)`` this is the clipped average plus noise, and
    otherwise the deviation from :math:`c` is scaled by
    ``len(values) / n_public``.

    **Privacy.** :math:`(\varepsilon/2, 0)` for the segment plus
    :math:`(\varepsilon/2, \delta)` for the Gaussian, calibrated to the
    released segment: :math:`(\varepsilon, \delta)`-DP by basic adaptive
    composition under ``neighbouring``.

    **Utility.** If :math:`|S| = n_{\mathrm{public}} \ge t` (see
    :func:`private_bounding_segment`, at :math:`(\varepsilon/2, \beta/2)`),
    then with probability :math:`1 - \beta`

    .. math::

        |\hat a - \mathrm{Avg}(S)| \le \frac{2t}{|S|}(w + 4 r_{\min})
            + \sigma \sqrt{2 \log(4/\beta)}, \qquad w = \max S - \min S.

    Parameters
    ----------
    values : array-like of shape (n_values,)
    n_public : float
        Public (or already noisy) count, >= 1, used as the divisor.
    data_radius, r_min : float
        The grid of :func:`private_interior_point`.
    epsilon : float
        > 0.
    delta : float
        In (0, 1).
    beta : float
        In (0, 1).
    rng : numpy.random.Generator
    neighbouring : {"add_remove", "replace_one"}, default="add_remove"

    Returns
    -------
    estimate : float
    event : PrivacyEvent
        ``"private_average_1d"``, ``(epsilon, delta)``.
    """
    values = _check_finite_array(values, "values", 1)
    n_public, grid, epsilon, delta, beta, rng = _check_average_inputs(
        n_public, data_radius, r_min, epsilon, delta, beta, neighbouring, rng
    )
    estimate = _average_1d(values, n_public, grid, epsilon, delta, beta, neighbouring, rng)
    event = PrivacyEvent(
        "private_average_1d", epsilon, delta, neighbouring=neighbouring,
        details={**_average_1d_details(grid, epsilon, delta, beta), "n_public": n_public},
    )
    return estimate, event


def _average_1d_details(grid, epsilon, delta, beta):
    """Public internals of one 1-D average: its budget split and grid."""
    _, _, n_intervals = grid
    return {
        "composition": "basic",
        "epsilon_segment": epsilon / 2.0,
        "beta_segment": beta / 2.0,
        "epsilon_gaussian": epsilon / 2.0,
        "delta_gaussian": delta,
        "calibration": "analytic",
        "grid_size": n_intervals + 1,
        "n_extreme_values": _segment_threshold(n_intervals, epsilon / 2.0, beta / 2.0),
    }


# ---------------------------------------------------------------------------
# Average in R^d (spec §7.5)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _AxisBudget:
    """Per-axis budget of :func:`private_average` and the total it is proven to spend."""

    composition: str
    epsilon_axis: float
    delta_axis: float
    epsilon_total: float
    delta_total: float


def _split_evenly(total, parts):
    """Largest float share with ``parts * share <= total`` (summed exactly, then rounded)."""
    share = total / parts
    while math.fsum([share] * parts) > total:
        share = math.nextafter(share, 0.0)
    return share


def _basic_budget(epsilon, delta, n_axes):
    """Basic composition: eps_ax = eps/d, delta_ax = delta/d."""
    epsilon_axis = _split_evenly(epsilon, n_axes)
    delta_axis = _split_evenly(delta, n_axes)
    return _AxisBudget(
        "basic", epsilon_axis, delta_axis,
        math.fsum([epsilon_axis] * n_axes), math.fsum([delta_axis] * n_axes),
    )


def _advanced_budget(epsilon, delta, n_axes):
    r"""Advanced composition with slack delta/2 (Dwork & Roth 2014, Theorem 3.20).

    :math:`\varepsilon_{ax} = \varepsilon / (2\sqrt{2 d \log(2/\delta)})`,
    :math:`\delta_{ax} = \delta/(2d)`; the proven total is
    :math:`\sqrt{2 d \log(2/\delta)}\,\varepsilon_{ax}
    + d\,\varepsilon_{ax}(e^{\varepsilon_{ax}} - 1)` and
    :math:`d\,\delta_{ax} + \delta/2`.
    """
    slack = delta / 2.0
    spread = math.sqrt(2.0 * n_axes * math.log(1.0 / slack))
    epsilon_axis = epsilon / (2.0 * spread)
    delta_axis = _split_evenly(slack, n_axes)
    epsilon_total = spread * epsilon_axis + n_axes * epsilon_axis * math.expm1(epsilon_axis)
    return _AxisBudget(
        "advanced", epsilon_axis, delta_axis, epsilon_total,
        math.fsum([delta_axis] * n_axes + [slack]),
    )


def _axis_budget(epsilon, delta, n_axes, composition):
    """The per-axis budget for ``composition``; "auto" keeps the larger valid eps_ax."""
    basic = _basic_budget(epsilon, delta, n_axes)
    advanced = _advanced_budget(epsilon, delta, n_axes)
    advanced_valid = advanced.epsilon_total <= epsilon and advanced.delta_total <= delta
    if composition == "basic":
        return basic
    if composition == "advanced" and not advanced_valid:
        raise ValueError(
            f"composition='advanced' does not fit the budget at epsilon={epsilon!r}, "
            f"delta={delta!r}, d={n_axes} (proven total epsilon would be "
            f"{advanced.epsilon_total:.4g}); use composition='basic' or 'auto'."
        )
    if composition == "advanced" or (advanced_valid and advanced.epsilon_axis > basic.epsilon_axis):
        return advanced
    return basic


def _project_onto_ball(points, center, radius):
    """Radial projection of each row onto the closed ball B(center, radius)."""
    offsets = points - center
    norms = np.linalg.norm(offsets, axis=-1, keepdims=True)
    return center + offsets * (radius / np.maximum(norms, radius))


def private_average(
    points,
    *,
    n_public,
    data_radius,
    r_min,
    epsilon,
    delta,
    beta,
    rng,
    composition="auto",
    neighbouring="add_remove",
):
    r"""Private average of points in the ball :math:`B(0, \Lambda)` (Cohen et al. 2021, Prop. 2.9).

    Implements ``spec/cohen_ktuple.md`` §7.5: rows outside
    :math:`B(0, \Lambda)` are first projected radially onto it (silently: a
    per-record map keeps neighbours neighbours), then
    :func:`private_average_1d` runs on every axis at
    :math:`(\varepsilon_{ax}, \delta_{ax}, \beta/d)`, with

    * ``"basic"``: :math:`\varepsilon_{ax} = \varepsilon/d`,
      :math:`\delta_{ax} = \delta/d`;
    * ``"advanced"``: :math:`\varepsilon_{ax} = \varepsilon / (2\sqrt{2d\log(2/\delta)})`,
      :math:`\delta_{ax} = \delta/(2d)`, valid when the proven total
      :math:`\varepsilon/2 + d\,\varepsilon_{ax}(e^{\varepsilon_{ax}} - 1)`
      is at most :math:`\varepsilon` (Dwork & Roth 2014, Theorem 3.20 with
      slack :math:`\delta/2`);
    * ``"auto"``: whichever valid option gives the larger
      :math:`\varepsilon_{ax}` (basic on ties). This is the "O(kd) or
      O(k sqrt(d))" remark of CONF §5.

    **Privacy.** Each axis is :math:`(\varepsilon_{ax}, \delta_{ax})`-DP under
    ``neighbouring``; their adaptive composition is the event's
    ``(epsilon, delta)``, computed from the split actually used and never
    above the request.

    **Utility.** :math:`\|\hat a - \mathrm{Avg}\| \le \sqrt{d}\,\max_j
    |\mathrm{err}_j|`, each axis error bounded as in
    :func:`private_average_1d`.

    Parameters
    ----------
    points : array-like of shape (n_points, n_features)
    n_public : float
        Public (or already noisy) count, >= 1, the divisor of every axis.
    data_radius, r_min : float
        The ball radius :math:`\Lambda` and the grid step.
    epsilon : float
        > 0.
    delta : float
        In (0, 1).
    beta : float
        In (0, 1); split evenly over the axes.
    rng : numpy.random.Generator
    composition : {"auto", "basic", "advanced"}, default="auto"
        ``"advanced"`` raises ``ValueError`` where it does not fit the budget.
    neighbouring : {"add_remove", "replace_one"}, default="add_remove"

    Returns
    -------
    estimate : ndarray of shape (n_features,)
    event : PrivacyEvent
        ``"private_average"``, with the proven total ``(epsilon, delta)``.
    """
    points, _ = _check_points(points)
    n_public, grid, epsilon, delta, beta, rng = _check_average_inputs(
        n_public, data_radius, r_min, epsilon, delta, beta, neighbouring, rng
    )
    _check_choice(composition, "composition", _COMPOSITIONS)
    n_axes = points.shape[1]
    budget = _axis_budget(epsilon, delta, n_axes, composition)
    projected = _project_onto_ball(points, 0.0, grid[0])
    beta_axis = beta / n_axes
    axis_args = (n_public, grid, budget.epsilon_axis, budget.delta_axis, beta_axis, neighbouring)
    estimate = np.array([_average_1d(column, *axis_args, rng) for column in projected.T])
    event = PrivacyEvent(
        "private_average", budget.epsilon_total, budget.delta_total, neighbouring=neighbouring,
        details={
            "composition": budget.composition,
            "composition_requested": composition,
            "n_axes": n_axes,
            "epsilon_axis": budget.epsilon_axis,
            "delta_axis": budget.delta_axis,
            "beta_axis": beta_axis,
            "n_public": n_public,
            "axis": _average_1d_details(grid, budget.epsilon_axis, budget.delta_axis, beta_axis),
        },
    )
    return estimate, event


# ---------------------------------------------------------------------------
# Noisy count (spec §7.6)
# ---------------------------------------------------------------------------


def private_count(count, *, epsilon, rng):
    r"""Noisy count :math:`|Q| + \mathrm{Lap}(1/\varepsilon)` (``spec/cohen_ktuple.md`` §7.6).

    The reductions spend a small budget on this count and divide by
    ``max(noisy count, 1)`` in place of the exact, data-dependent size.

    **Privacy.** A count has sensitivity 1 under add/remove, so the Laplace
    mechanism is :math:`\varepsilon`-DP (Cohen et al. 2021, Theorem 2.6).

    Parameters
    ----------
    count : int
        The exact count, >= 0.
    epsilon : float
        > 0.
    rng : numpy.random.Generator

    Returns
    -------
    noisy_count : float
    event : PrivacyEvent
        ``"private_count"``, ``(epsilon, 0)``, sensitivity 1, scale 1/epsilon.
    """
    if isinstance(count, bool) or not isinstance(count, Integral) or count < 0:
        raise ValueError(f"count must be an integer >= 0, got count={count!r}.")
    epsilon, _ = check_epsilon_delta(epsilon, 0.0)
    rng = _check_generator(rng)
    noisy, event = laplace_mechanism(
        float(count), sensitivity=1.0, epsilon=epsilon, rng=rng, neighbouring="add_remove"
    )
    return noisy, replace(event, mechanism="private_count")


# ---------------------------------------------------------------------------
# Private 1-median (shechner_stable.md §9.7)
# ---------------------------------------------------------------------------


def _gdp_rho(epsilon, delta):
    r"""zCDP parameter :math:`\mu^2/2` of the Gaussian composition that is exactly (eps, delta)-DP.

    :math:`\mu`-GDP equals the trade-off of the Gaussian mechanism with
    sensitivity/noise ratio :math:`\mu`, so :math:`\mu = 1/\sigma` with
    :math:`\sigma` the analytic calibration at sensitivity 1 (Balle & Wang
    2018, Theorem 8; Dong, Roth & Su 2022, Corollary 2.13).
    """
    mu = 1.0 / analytic_gaussian_sigma(1.0, epsilon, delta)
    return mu * mu / 2.0


def private_one_median(
    points,
    *,
    center,
    radius,
    epsilon,
    delta,
    rng,
    n_iter=50,
    step_scale=0.5,
    neighbouring="add_remove",
):
    r"""Private 1-median of one cell by noisy projected gradient descent (Shechner 2021, §5).

    Implements step 3 of ``spec/shechner_stable.md`` §9.7 for one cell, the
    practical form of the thesis' private convex ERM tool (Theorem 5.1,
    Bassily, Smith & Thakurta 2014; spec §4.1) for the loss
    :math:`\ell(w, x) = \|w - x\|` on the domain :math:`B(c, R)`:

    .. math::

        \tilde N = \max(|X| + N(0, \sigma_c^2), 1), \qquad
        g_t = \sum_{x \in X} u(w_t - x) + N(0, \sigma_g^2 I_d), \quad u(v) = v/\|v\|,

        w_{t+1} = \Pi_{B(c, R)}\left(w_t - \eta_t\, g_t / \tilde N\right), \qquad
        \eta_t = s\, R / \sqrt{t + 1},

    from :math:`w_0 = c`, for :math:`T` = ``n_iter`` steps, and return the
    average of the iterates of the second half (suffix averaging). The
    excess risk is about :math:`R(1/\sqrt{T} + \sqrt{d}\,\Delta_g/(\tilde N
    \sqrt{2\rho}))`, the form of Theorem 5.1.

    **Privacy.** Every :math:`u(\cdot)` has norm at most 1, so one point
    changes the gradient sum by at most :math:`\Delta_g` = 1 (add/remove) or
    2 (replace-one) and the count by :math:`\Delta_c` = 1 (add/remove) or
    :math:`\sqrt 2` (replace-one, the value for k disjoint cells released
    jointly; spec §9.3). The :math:`T + 1` releases are Gaussian mechanisms
    with :math:`\sigma_c = \Delta_c / \sqrt{2\rho_c}` and
    :math:`\sigma_g = \Delta_g / \sqrt{2\rho_g}`, :math:`\rho_c = 0.1\rho`,
    :math:`\rho_g = 0.9\rho/T` (spec §9.7). Their adaptive composition is
    :math:`\mu`-GDP with :math:`\mu^2 = 2\rho` (Dong, Roth & Su 2022,
    Corollary 3.3), and :math:`\rho` is chosen so that this is exactly
    :math:`(\varepsilon, \delta)`-DP (the analytic Gaussian calibration at
    sensitivity 1; Balle & Wang 2018, Theorem 8). It is also
    :math:`\rho`-zCDP (Bun & Steinke 2016). Calls on disjoint cells with the
    same parameters cost this once in total, as one Gaussian mechanism on
    the stacked vectors.

    Parameters
    ----------
    points : array-like of shape (n_points, n_features)
        The points of the cell; may be empty.
    center : array-like of shape (n_features,)
        Public centre :math:`c` of the domain (the initial centre
        :math:`b_i`), also the starting point.
    radius : float
        Public radius :math:`R > 0` of the domain (for example
        :math:`\hat D_i / 2`).
    epsilon : float
        > 0.
    delta : float
        In (0, 1).
    rng : numpy.random.Generator
    n_iter : int, default=50
        Number of gradient steps :math:`T`.
    step_scale : float, default=0.5
        The step factor :math:`s`.
    neighbouring : {"add_remove", "replace_one"}, default="add_remove"

    Returns
    -------
    median : ndarray of shape (n_features,)
        A point of :math:`B(c, R)`.
    event : PrivacyEvent
        ``"private_one_median"``, ``(epsilon, delta)``, with ``rho`` the zCDP
        of the same releases.
    """
    points, center = _check_points(points, center)
    radius = _check_real(radius, "radius")
    medians, event = private_one_medians(
        points, np.zeros(points.shape[0], dtype=np.intp), centers=center[None, :],
        radii=[radius], epsilon=epsilon, delta=delta, rng=rng, n_iter=n_iter,
        step_scale=step_scale, neighbouring=neighbouring,
    )
    return medians[0], event


def _check_cells(labels, centers, radii, n_points):
    """Validated cell labels, domain centres and radii of :func:`private_one_medians`."""
    centers = _check_finite_array(centers, "centers", 2)
    radii = np.asarray(radii, dtype=float)
    if radii.shape != (centers.shape[0],) or not np.all(np.isfinite(radii) & (radii > 0)):
        raise ValueError(
            f"radii must hold one finite radius > 0 per row of centers ({centers.shape[0]}), "
            f"got {radii!r}."
        )
    labels = np.asarray(labels)
    if (labels.shape != (n_points,) or not np.issubdtype(labels.dtype, np.integer)
            or (n_points and (labels.min() < 0 or labels.max() >= centers.shape[0]))):
        raise ValueError(
            f"labels must hold one cell index in [0, {centers.shape[0]}) per point; pass "
            "integers of shape (n_points,)."
        )
    return labels, centers, radii


def _unit_sums(iterates, sorted_points, cells):
    r"""Per cell :math:`\sum_x u(w_j - x)`; ``cells``: (cell, start, stop) of the sorted points.

    Each cell's points are contiguous and taken in blocks of about
    :data:`_MEDIAN_BLOCK_ELEMENTS` values (cache-sized: 4x faster than whole
    cells at n = 10^6, d = 10): their differences to the cell's iterate, the
    inverse norms (zero rows stay zero: :math:`u(0) = 0`) and one
    matrix-vector product give the block's sum.
    """
    sums = np.zeros_like(iterates)
    block = max(1, _MEDIAN_BLOCK_ELEMENTS // sorted_points.shape[1])
    for cell, start, stop in cells:
        for first in range(start, stop, block):
            rows = iterates[cell] - sorted_points[first:min(first + block, stop)]
            norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
            sums[cell] += np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0) @ rows
    return sums


def private_one_medians(
    points,
    labels,
    *,
    centers,
    radii,
    epsilon,
    delta,
    rng,
    n_iter=50,
    step_scale=0.5,
    neighbouring="add_remove",
):
    r"""Private 1-medians of disjoint cells: :func:`private_one_median` on all cells at once.

    Cell j holds the points with ``labels == j`` and runs the noisy projected
    gradient descent of :func:`private_one_median` on its domain
    :math:`B(c_j, R_j)` from :math:`w_0 = c_j`; the k cells advance
    together, one vectorised pass over all the points per step (spec §9.7
    step 3, Shechner 2021 §5).

    **Privacy.** The noisy counts of all cells are one Gaussian release of
    the count vector, and each step one Gaussian release of the stacked
    gradient sums, with the noise scales of :func:`private_one_median`. The
    cells are disjoint, so one point changes one cell's count and sum
    (add/remove: L2 sensitivities 1 and 1) or two of them (replace-one:
    :math:`\sqrt 2` and :math:`\sqrt 2 \le 2`), each sum by a vector of
    norm at most 1: the stacked releases have the sensitivities
    :math:`\Delta_c, \Delta_g` of one cell, and the whole is
    (``epsilon``, ``delta``)-DP and :math:`\rho`-zCDP once in total, as one
    cell is.

    Parameters
    ----------
    points : array-like of shape (n_points, n_features)
    labels : array-like of int of shape (n_points,)
        Cell of every point, in ``[0, n_cells)``.
    centers : array-like of shape (n_cells, n_features)
        Public domain centres :math:`c_j`, also the starting points.
    radii : array-like of shape (n_cells,)
        Public domain radii :math:`R_j > 0`.
    epsilon, delta, rng, n_iter, step_scale, neighbouring
        As in :func:`private_one_median`.

    Returns
    -------
    medians : ndarray of shape (n_cells, n_features)
        Row j is a point of :math:`B(c_j, R_j)`.
    event : PrivacyEvent
        ``"private_one_median"``, ``(epsilon, delta)``, with ``rho`` the zCDP
        of the same releases.
    """
    points = _check_points(points)[0]
    labels, centers, radii = _check_cells(labels, centers, radii, points.shape[0])
    if centers.shape[1] != points.shape[1]:
        raise ValueError(
            f"centers must have {points.shape[1]} columns to match points, got {centers.shape[1]}."
        )
    epsilon, delta = check_epsilon_delta(epsilon, delta, allow_zero_delta=False)
    n_iter = _check_positive_int(n_iter, "n_iter")
    step_scale = _check_real(step_scale, "step_scale")
    _check_choice(neighbouring, "neighbouring", _MEDIAN_SENSITIVITIES)
    rng = _check_generator(rng)
    sorted_points, counts, cells = _sorted_cells(points, labels, len(centers))
    return _median_descent(
        counts, lambda iterates: _unit_sums(iterates, sorted_points, cells), centers, radii,
        epsilon=epsilon, delta=delta, rng=rng, n_iter=n_iter, step_scale=step_scale,
        neighbouring=neighbouring)


def _sorted_cells(points, labels, n_cells):
    """Points sorted by cell, the cell counts and (cell, start, stop) of the non-empty cells."""
    sorted_points = points[np.argsort(labels, kind="stable")]
    counts = np.bincount(labels, minlength=n_cells)
    stops = np.cumsum(counts)
    return sorted_points, counts, [(j, stops[j] - counts[j], stops[j])
                                   for j in np.flatnonzero(counts)]


def _chunk_cell_counts(chunk, cell_labels, n_cells):
    """Points per cell of a chunk of rows; ``cell_labels(chunk)`` is ``n_cells`` for no cell."""
    return np.bincount(cell_labels(chunk), minlength=n_cells + 1)[:n_cells]


def _chunk_unit_sums(chunk, cell_labels, iterates):
    """:func:`_unit_sums` of the rows of one chunk (the rows labelled ``len(iterates)`` dropped)."""
    labels = cell_labels(chunk)
    keep = labels < len(iterates)
    sorted_points, _, cells = _sorted_cells(chunk.X[keep], labels[keep], len(iterates))
    return _unit_sums(iterates, sorted_points, cells)


def private_one_medians_of_rows(rows, cell_labels, *, centers, radii, epsilon, delta, rng,
                                n_iter=50, step_scale=0.5, neighbouring="add_remove"):
    """:func:`private_one_medians` on rows read chunk by chunk (:mod:`skdpcluster.utils._data`).

    ``cell_labels(chunk)`` gives the cell of every row of a chunk (``len(centers)``
    for rows in no cell; it must pickle). The counts are one pass and every
    gradient step one more pass of per-chunk sums; the releases, their noise
    and the privacy proof are those of :func:`private_one_medians` (the
    statistics are the same sums, added in another order). Parameters are
    trusted (the estimators validate them).
    """
    counts = rows.map_reduce(_chunk_cell_counts, cell_labels, len(centers))
    return _median_descent(
        counts, lambda iterates: rows.map_reduce(_chunk_unit_sums, cell_labels, iterates),
        np.asarray(centers, dtype=float), np.asarray(radii, dtype=float), epsilon=epsilon,
        delta=delta, rng=rng, n_iter=n_iter, step_scale=step_scale, neighbouring=neighbouring)


def _median_descent(counts, unit_sums, centers, radii, *, epsilon, delta, rng, n_iter, step_scale,
                    neighbouring):
    """The releases of :func:`private_one_medians`: noisy counts, then ``n_iter`` noisy steps.

    ``unit_sums(iterates)`` returns the per-cell sums of unit vectors at the iterates.
    """
    gradient_sensitivity, count_sensitivity = _MEDIAN_SENSITIVITIES[neighbouring]
    rho = _gdp_rho(epsilon, delta)
    rho_count = _MEDIAN_COUNT_SHARE * rho
    rho_step = _split_evenly(rho - rho_count, n_iter)
    noisy_counts, _ = zcdp_gaussian_mechanism(
        counts.astype(float), sensitivity=count_sensitivity, rho=rho_count, rng=rng,
        neighbouring=neighbouring,
    )
    divisors = np.maximum(noisy_counts, 1.0)[:, None]
    radii = radii[:, None]
    iterates, suffix_sum = centers.copy(), np.zeros_like(centers)
    for step in range(n_iter):
        gradients, _ = zcdp_gaussian_mechanism(
            unit_sums(iterates),
            sensitivity=gradient_sensitivity, rho=rho_step, rng=rng, neighbouring=neighbouring,
        )
        step_sizes = step_scale * radii / math.sqrt(step + 1)
        iterates = _project_onto_ball(iterates - step_sizes * gradients / divisors, centers, radii)
        if step >= n_iter // 2:
            suffix_sum += iterates
    event = PrivacyEvent(
        "private_one_median", epsilon, delta, rho=math.fsum([rho_count] + [rho_step] * n_iter),
        neighbouring=neighbouring,
        details={"composition": "gaussian_dp", "n_iter": n_iter, "step_scale": step_scale,
                 "rho_count": rho_count, "rho_per_step": rho_step,
                 "gradient_sensitivity": gradient_sensitivity,
                 "count_sensitivity": count_sensitivity, "cells": len(centers)},
    )
    return suffix_sum / (n_iter - n_iter // 2), event


# ---------------------------------------------------------------------------
# Single Gaussian, CoinPress-style (cohen_ktuple.md §9.6)
# ---------------------------------------------------------------------------


def _chi_radius(n_dim, log_inverse_probability):
    r"""Radius exceeded by :math:`\|N(0, I_d)\|` with probability at most :math:`e^{-x}`.

    Laurent & Massart (2000), Lemma 1:
    :math:`\Pr[\chi^2_d \ge d + 2\sqrt{dx} + 2x] \le e^{-x}`.
    """
    x = log_inverse_probability
    return math.sqrt(n_dim + 2.0 * math.sqrt(n_dim * x) + 2.0 * x)


def _clip_rows(vectors, radius):
    """Rows projected onto the ball B(0, radius)."""
    return _project_onto_ball(vectors, 0.0, radius)


def _coinpress_mean(scaled, n_public, radius, rho_steps, rng):
    r"""CoinPress mean steps (MVM, iterated as MVMRec; Biswas et al. 2020), add/remove version.

    ``scaled`` has covariance at most the identity and mean in
    :math:`B(0, r)`. Each step clips to :math:`B(c_t, r_t + \gamma_1)`,
    releases :math:`c_t + \sum (\mathrm{clip}(y) - c_t)/n` with sensitivity
    :math:`(r_t + \gamma_1)/n`, then shrinks the ball to
    :math:`r_{t+1} = \gamma_2\sqrt{1/n + s_t^2}`, :math:`s_t` the noise sd.
    Radii depend only on public values.
    """
    n_dim = scaled.shape[1]
    clip_margin = _chi_radius(n_dim, math.log(n_public / _COINPRESS_BETA))
    shrink = _chi_radius(n_dim, math.log(1.0 / _COINPRESS_BETA))
    centre = np.zeros(n_dim)
    for rho_step in rho_steps:
        clip_radius = radius + clip_margin
        offsets = _clip_rows(scaled - centre, clip_radius)
        sensitivity = clip_radius / n_public
        centre, _ = zcdp_gaussian_mechanism(
            centre + offsets.sum(axis=0) / n_public, sensitivity=sensitivity, rho=rho_step,
            rng=rng, neighbouring="add_remove",
        )
        noise_sd = sensitivity / math.sqrt(2.0 * rho_step)
        radius = shrink * math.sqrt(1.0 / n_public + noise_sd**2)
    return centre


def _symmetric_from_upper(upper_values, n_dim):
    matrix = np.zeros((n_dim, n_dim))
    matrix[np.triu_indices(n_dim)] = upper_values
    return matrix + np.triu(matrix, 1).T


def _refine_whitening(estimate, transform, ratio, noise_norm, sampling):
    r"""CoinPress covariance update: a new whitening with a smaller condition bound.

    Invariant (with high probability): :math:`I \preceq K \preceq u I` for
    :math:`K = T\Sigma T^\top`. If :math:`\|E\| \le \psi` and the sampling
    error is multiplicative, :math:`(1-\delta)^2 K - \psi I \preceq Z \preceq
    (1+\delta)^2 K + \psi I`, then :math:`K \preceq U = (Z + \psi I)/(1-\delta)^2`
    (eigenvalues raised to at least 1) and both :math:`(Z - \psi I)/(1+\delta)^2`
    and :math:`I` are below :math:`K`. With :math:`T' = U^{-1/2} T`, every
    convex combination of the two lower bounds bounds :math:`T'\Sigma T'^\top`
    from below by :math:`l I`; rescaling by :math:`1/\sqrt{l}` restores the
    invariant with :math:`u' = 1/l`. The update is kept only if
    :math:`u' < u`. Post-processing only: it affects utility, not privacy.
    """
    if sampling >= 1.0:
        return transform, ratio
    eigenvalues, eigenvectors = np.linalg.eigh(estimate)
    upper = np.maximum((eigenvalues + noise_norm) / (1.0 - sampling) ** 2, 1.0)
    from_estimate = (eigenvalues - noise_norm) / ((1.0 + sampling) ** 2 * upper)
    from_invariant = 1.0 / upper
    weights = _LOWER_BOUND_WEIGHTS[:, None]
    lower = np.max(np.min(weights * from_estimate + (1.0 - weights) * from_invariant, axis=1))
    if not 1.0 / lower < ratio:
        return transform, ratio
    inverse_sqrt = (eigenvectors / np.sqrt(upper * lower)) @ eigenvectors.T
    return inverse_sqrt @ transform, 1.0 / lower


def _coinpress_covariance(centred, n_public, sigma_min, sigma_max, rho_steps, rng):
    r"""CoinPress covariance steps (MVC, iterated as MVCRec; Biswas et al. 2020), add/remove.

    Each step whitens with :math:`T`, clips to norm :math:`\sqrt{u}\gamma`,
    releases the upper triangle of :math:`\sum w w^\top / n` with L2
    sensitivity :math:`u\gamma^2/n` (one added point adds :math:`ww^\top/n`,
    whose upper triangle has norm at most :math:`\|w\|^2/n`), and refines
    :math:`T`. The symmetric noise has spectral norm at most
    :math:`2 s(\sqrt d + \sqrt{\log(2/\beta)})` with probability
    :math:`1-\beta` (Sudakov-Fernique comparison with :math:`2s\langle g, v\rangle`
    and Gaussian concentration). Returns the last estimate in the original
    coordinates, :math:`T^{-1} Z T^{-\top}`.
    """
    n_dim = centred.shape[1]
    clip_norm = _chi_radius(n_dim, math.log(n_public / _COINPRESS_BETA))
    log_two_over_beta = math.log(2.0 / _COINPRESS_BETA)
    sampling = math.sqrt(n_dim / n_public) + math.sqrt(2.0 * log_two_over_beta / n_public)
    spectral_factor = 2.0 * (math.sqrt(n_dim) + math.sqrt(log_two_over_beta))
    transform, ratio = np.eye(n_dim) / sigma_min, (sigma_max / sigma_min) ** 2
    for rho_step in rho_steps:
        whitened = _clip_rows(centred @ transform.T, math.sqrt(ratio) * clip_norm)
        sensitivity = ratio * clip_norm**2 / n_public
        noisy_upper, _ = zcdp_gaussian_mechanism(
            (whitened.T @ whitened / n_public)[np.triu_indices(n_dim)], sensitivity=sensitivity,
            rho=rho_step, rng=rng, neighbouring="add_remove",
        )
        estimate, used_transform = _symmetric_from_upper(noisy_upper, n_dim), transform
        noise_norm = spectral_factor * sensitivity / math.sqrt(2.0 * rho_step)
        transform, ratio = _refine_whitening(estimate, transform, ratio, noise_norm, sampling)
    unwhiten = np.linalg.inv(used_transform)
    return unwhiten @ estimate @ unwhiten.T


def _project_spectrum(matrix, low, high):
    """Symmetrise and clip the eigenvalues into [low, high]."""
    eigenvalues, eigenvectors = np.linalg.eigh((matrix + matrix.T) / 2.0)
    projected = (eigenvectors * np.clip(eigenvalues, low, high)) @ eigenvectors.T
    return (projected + projected.T) / 2.0


def private_gaussian_estimate(
    points,
    *,
    n_public,
    center,
    radius,
    sigma_min,
    sigma_max,
    rho,
    rng,
    n_iter_mean=3,
    n_iter_cov=3,
):
    r"""Private mean and covariance of one Gaussian, CoinPress-style (Biswas et al. 2020).

    The single-Gaussian learner G of ``spec/cohen_ktuple.md`` §9.6, private
    under add/remove of one point with a public or already noisy count
    (§11, item 34), for data from :math:`N(\mu, \Sigma)` with public bounds
    :math:`\|\mu - c\| \le R` and :math:`\sigma_{\min}^2 I \preceq \Sigma
    \preceq \sigma_{\max}^2 I` (§9.1). Two stages, each :math:`\rho/2`, split
    evenly over its steps:

    1. **Mean** (``n_iter_mean`` steps of CoinPress' MVM): in the coordinates
       :math:`y = (x - c)/\sigma_{\max}`, clip to the current ball widened by
       :math:`\gamma_1 = \sqrt{d + 2\sqrt{d\log(n/\beta)} + 2\log(n/\beta)}`,
       release the centred clipped sum divided by ``n_public`` plus Gaussian
       noise, and shrink the ball. The result is projected onto
       :math:`B(c, R)`.
    2. **Covariance** (``n_iter_cov`` steps of CoinPress' MVC) of
       :math:`x - \hat\mu`: whiten with the current :math:`T`
       (:math:`T_0 = I/\sigma_{\min}`, condition bound
       :math:`u_0 = \sigma_{\max}^2/\sigma_{\min}^2`), clip to norm
       :math:`\sqrt{u}\gamma_1`, release the upper triangle of the second
       moment divided by ``n_public`` with noise, and tighten :math:`T` and
       :math:`u`. Pairing differences, as in the paper, would not survive the
       removal of one point, hence the centring at the private mean.

    The released covariance is symmetrised and its eigenvalues are clipped
    to :math:`[\sigma_{\min}^2, \sigma_{\max}^2]`, so it is always symmetric
    positive definite, even when noise dominates (tiny ``n_public`` or
    ``rho``). Each step's confidence is :math:`\beta = 0.01`; it sets radii
    only.

    **Privacy.** Every release is a Gaussian mechanism whose sensitivity is a
    function of public values and of earlier releases (clipping radii
    :math:`(r_t + \gamma_1)/n` and :math:`u\gamma^2/n` under add/remove), with
    :math:`\sigma = \Delta/\sqrt{2\rho_t}`, so it is :math:`\rho_t`-zCDP (Bun
    & Steinke 2016, Proposition 1.6) and the whole call is
    :math:`\sum_t \rho_t \le \rho`-zCDP by adaptive composition; the
    projections are post-processing. Under replace-one it is
    :math:`4\rho`-zCDP (group privacy of size 2, Bun & Steinke 2016,
    Proposition 1.9). Convert with :func:`~skdpcluster.mechanisms.zcdp_to_dp`.

    Parameters
    ----------
    points : array-like of shape (n_points, n_features)
    n_public : float
        Public or noisy count, >= 1; every sum is divided by it.
    center : array-like of shape (n_features,)
        Public centre :math:`c` of the ball containing the mean.
    radius : float
        Public radius :math:`R > 0` of that ball.
    sigma_min, sigma_max : float
        Public bounds on the standard deviations,
        ``0 < sigma_min <= sigma_max``.
    rho : float
        Total zCDP budget, > 0.
    rng : numpy.random.Generator
    n_iter_mean, n_iter_cov : int, default=3
        Number of steps of each stage.

    Returns
    -------
    mean : ndarray of shape (n_features,)
    covariance : ndarray of shape (n_features, n_features)
        Symmetric, eigenvalues in ``[sigma_min**2, sigma_max**2]``.
    event : PrivacyEvent
        ``"private_gaussian_estimate"`` with ``rho`` the total spent and
        ``epsilon = delta = 0``.
    """
    points, center = _check_points(points, center)
    n_public = _check_real(n_public, "n_public", low=1.0, low_inclusive=True)
    radius = _check_real(radius, "radius")
    sigma_min = _check_real(sigma_min, "sigma_min")
    sigma_max = _check_real(sigma_max, "sigma_max", low=sigma_min, low_inclusive=True)
    rho = _check_real(rho, "rho")
    n_iter_mean = _check_positive_int(n_iter_mean, "n_iter_mean")
    n_iter_cov = _check_positive_int(n_iter_cov, "n_iter_cov")
    rng = _check_generator(rng)
    rho_mean = [_split_evenly(rho / 2.0, n_iter_mean)] * n_iter_mean
    rho_cov = [_split_evenly(rho / 2.0, n_iter_cov)] * n_iter_cov
    scaled_mean = _coinpress_mean(
        (points - center) / sigma_max, n_public, radius / sigma_max, rho_mean, rng
    )
    mean = _project_onto_ball(center + sigma_max * scaled_mean, center, radius)
    covariance = _coinpress_covariance(points - mean, n_public, sigma_min, sigma_max, rho_cov, rng)
    event = PrivacyEvent(
        "private_gaussian_estimate", 0.0, 0.0, rho=math.fsum(rho_mean + rho_cov),
        neighbouring="add_remove",
        details={"composition": "zcdp", "rho_mean_per_step": rho_mean[0],
                 "rho_cov_per_step": rho_cov[0], "n_iter_mean": n_iter_mean,
                 "n_iter_cov": n_iter_cov, "n_public": n_public, "beta_per_step": _COINPRESS_BETA},
    )
    return mean, _project_spectrum(covariance, sigma_min**2, sigma_max**2), event
