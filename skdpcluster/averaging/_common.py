"""Helpers shared by the private primitives: validation (before any randomness), the ball
projections (the radial one, and the clipping of rows with an exact norm bound), an even
budget split and the Gaussian-DP zCDP parameter."""

import math
from numbers import Integral, Real

import numpy as np

from skdpcluster.mechanisms import analytic_gaussian_sigma

# Grid indices are exact in float64 only up to 2**53; 2 * Lambda / r_min above
# 2**52 would lose the resolution of the grid (spec §7.2).
_MAX_GRID_INTERVALS = 2**52
#: Largest public radius of the primitives, the estimators' largest data_radius: above it
#: widths, squared norms and the noise scales calibrated to them can overflow after the
#: randomness is drawn (review R5-4: a 1-D average at data_radius=5e306 raised or not
#: depending on the released width).
_MAX_DOMAIN_RADIUS = 1e100

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
    return points, _check_center(center, points.shape[1])


def _check_center(center, n_features):
    """A finite centre of shape ``(n_features,)`` (the points' number of columns)."""
    center = _check_finite_array(center, "center", 1)
    if center.shape != (n_features,):
        raise ValueError(
            f"center must have shape ({n_features},) to match points, got {center.shape}."
        )
    return center


def _check_grid(data_radius, r_min):
    """Validate Lambda (at most 1e100) and r_min; the grid intervals N = ceil(2 Lambda / r_min)."""
    data_radius = _check_real(data_radius, "data_radius")
    if data_radius > _MAX_DOMAIN_RADIUS:
        raise ValueError(
            f"data_radius must be at most {_MAX_DOMAIN_RADIUS:g}, got data_radius={data_radius!r}: "
            "the widths and noise scales of the release could overflow; rescale the data "
            "(the releases are equivariant under scaling)."
        )
    r_min = _check_real(r_min, "r_min")
    if 2.0 * data_radius / r_min > _MAX_GRID_INTERVALS:
        raise ValueError(
            f"2 * data_radius / r_min = {2.0 * data_radius / r_min:.4g} exceeds 2**52: the grid "
            f"would lose float64 precision; increase r_min (got data_radius={data_radius!r}, "
            f"r_min={r_min!r})."
        )
    return data_radius, r_min, math.ceil(2.0 * data_radius / r_min)


def _project_onto_ball(points, center, radius):
    """Radial projection of each row onto the closed ball B(center, radius)."""
    offsets = points - center
    norms = np.linalg.norm(offsets, axis=-1, keepdims=True)
    return center + offsets * (radius / np.maximum(norms, radius))


#: Unit roundoff of float64 (round to nearest).
_UNIT_ROUNDOFF = 2.0**-53
#: Between these radii the square of the radius and every squared norm above it are normal
#: floats (an underflowed square's absolute error 2^-1075 is a negligible relative error).
_TESTED_RADII = (2.0**-500, 2.0**500)


def rows_outside_ball(rows, sq_norms, radius):
    r"""Indices of the rows not proven inside the closed ball :math:`B(0, \Lambda)`.

    ``sq_norms`` are the squared norms computed as
    ``np.einsum("ij,ij->i", rows, rows)``: a sum of :math:`d` squares, all
    :math:`\ge 0` (no cancellation, in any order of the additions, with or
    without fused multiply-adds), so with the unit roundoff :math:`u =
    2^{-53}` the computed :math:`s` satisfies :math:`s \ge \|x\|^2(1-u)^d -
    d\,2^{-1075}` (:math:`2^{-1075}` bounds an underflowed square's absolute
    error). A row counts as inside when :math:`s \le T =
    \mathrm{fl}(\mathrm{fl}(\Lambda^2)(1 - 4(d+2)u))` (the factor is exact).
    For :math:`\Lambda \ge 2^{-500}`, :math:`\Lambda^2 \ge 2^{-1000}` is a
    normal float and :math:`d\,2^{-1075} \le d\,2^{-75}\Lambda^2`, so such a
    row has :math:`\|x\|^2 \le \Lambda^2 [(1+u)^2(1 - 4(d+2)u) +
    d\,2^{-75}]/(1-u)^d < \Lambda^2`. (With :math:`s \le \Lambda^2` alone,
    rows a unit in the last place outside the ball passed as inside.) For a
    radius outside :math:`[2^{-500}, 2^{500}]` (the estimators refuse
    :math:`\Lambda > 10^{100}`; a tinier one is degenerate) only the zero
    rows are taken as inside. Rows inside are left to the caller, bit for bit.
    """
    if _TESTED_RADII[0] <= radius <= _TESTED_RADII[1]:
        margin = 1.0 - 4.0 * (rows.shape[1] + 2) * _UNIT_ROUNDOFF
        return np.flatnonzero(sq_norms > radius * radius * margin)
    return np.flatnonzero(np.any(rows != 0.0, axis=1))


def scale_into_ball(rows, radius):
    r"""Non-zero rows scaled along themselves to a norm of exactly at most ``radius``.

    The radial projection onto :math:`B(0, \Lambda)` of the rows that
    :func:`rows_outside_ball` returns, with every output row's exact norm
    at most :math:`\Lambda` (the sensitivities of the sums of :math:`x` and
    :math:`x/\Lambda` assume it). ``rows`` is not changed.

    **Overflowed rows.** A row handed here is often computed from a finite
    row, as :math:`x - c` or :math:`(x - c)/s`, and that value can overflow
    to :math:`\pm\infty` in some coordinates. Such a row is taken to the
    sphere along the signs of its infinite coordinates (its limit direction:
    the finite coordinates are 0 beside them), a function of the row alone
    like the rest. Without this, :math:`\infty \cdot 0` made the row NaN,
    and one such row turned a release into NaN or a fit into a failure
    (review R8, finding 1).

    **The bound in floating point** (:math:`u = 2^{-53}`, round to nearest).
    Each row :math:`x` is first scaled by :math:`2^{-e}`, with :math:`e` the
    binary exponent of :math:`\max_i |x_i|`: the largest coordinate of
    :math:`w = 2^{-e}x` is in :math:`[1/2, 1)` (exact; a coordinate that
    becomes subnormal is rounded, which changes :math:`w` but not the
    argument below, made on the computed :math:`w`), so no square overflows
    and :math:`\|w\| \ge 1/2`. Its computed squared norm :math:`t` satisfies
    :math:`t \ge \|w\|^2((1-u)^d - 4d\,2^{-1075})` (see
    :func:`rows_outside_ball`), :math:`N = \mathrm{fl}(\sqrt t) \ge \sqrt
    t\,(1-u)` and :math:`a = \mathrm{fl}(\gamma/N) \le (1+u)\gamma/N` with
    :math:`\gamma = 1 - 2(d+8)u` (exact), so :math:`a\|w\| \le
    \gamma(1 + (d/2 + 2)u + O(u^2)) < 1`. The products :math:`a w_i`, then
    their products with :math:`\Lambda`, are each rounded to nearest and
    then moved one float toward zero (``np.nextafter(., 0)``): a float
    rounded up by at most half a unit in the last place is then below the
    exact value, one rounded down stays below it, and an underflow gives 0
    or a subnormal below it. So every output coordinate is at most
    :math:`|w_i| a \Lambda` in magnitude, and the output's exact norm is at
    most :math:`a\|w\|\Lambda < \Lambda`, whatever the magnitudes (huge,
    tiny, subnormal coordinates or radius). The output norm is
    :math:`\Lambda(1 - O(du))`.
    ``test_clipped_rows_exact_norm_at_most_the_radius`` checks it in exact
    rational arithmetic.
    """
    n_features = rows.shape[1]
    gamma = 1.0 - 2.0 * (n_features + 8) * _UNIT_ROUNDOFF
    peaks = np.max(np.abs(rows), axis=1)
    overflowed = np.isinf(peaks)
    if np.any(overflowed):
        rows = np.array(rows, dtype=np.float64)
        rows[overflowed] = np.copysign(np.isinf(rows[overflowed]), rows[overflowed])
        peaks[overflowed] = 1.0
    _, exponents = np.frexp(peaks)
    unit = np.ldexp(rows, -exponents[:, None])
    unit *= (gamma / np.sqrt(np.einsum("ij,ij->i", unit, unit)))[:, None]
    np.nextafter(unit, 0.0, out=unit)
    unit *= radius
    return np.nextafter(unit, 0.0, out=unit)


def project_into_ball(rows, radius):
    """Project the rows of a float64 array onto B(0, radius) in place; their squared norms.

    Rows proven inside (:func:`rows_outside_ball`) are left bit for bit;
    the others are replaced by :func:`scale_into_ball`, of exact norm at most
    ``radius``. Returns the computed squared norms of the projected rows.
    """
    sq_norms = np.einsum("ij,ij->i", rows, rows)
    outside = rows_outside_ball(rows, sq_norms, radius)
    if len(outside):
        rows[outside] = scale_into_ball(rows[outside], radius)
        sq_norms[outside] = np.einsum("ij,ij->i", rows[outside], rows[outside])
    return sq_norms


def _split_evenly(total, parts):
    """Largest float share with ``parts * share <= total`` (summed exactly, then rounded)."""
    share = total / parts
    while math.fsum([share] * parts) > total:
        share = math.nextafter(share, 0.0)
    return share


def _gdp_rho(epsilon, delta):
    r"""zCDP parameter :math:`\mu^2/2` of the Gaussian composition that is exactly (eps, delta)-DP.

    :math:`\mu`-GDP equals the trade-off of the Gaussian mechanism with
    sensitivity/noise ratio :math:`\mu`, so :math:`\mu = 1/\sigma` with
    :math:`\sigma` the analytic calibration at sensitivity 1 (Balle & Wang
    2018, Theorem 8; Dong, Roth & Su 2022, Corollary 2.13).
    """
    mu = 1.0 / analytic_gaussian_sigma(1.0, epsilon, delta)
    return mu * mu / 2.0
