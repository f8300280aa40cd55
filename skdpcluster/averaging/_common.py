"""Helpers shared by the private primitives: validation (before any randomness), the ball
projection, an even budget split and the Gaussian-DP zCDP parameter."""

import math
from numbers import Integral, Real

import numpy as np

from skdpcluster.mechanisms import analytic_gaussian_sigma

# Grid indices are exact in float64 only up to 2**53; 2 * Lambda / r_min above
# 2**52 would lose the resolution of the grid (spec §7.2).
_MAX_GRID_INTERVALS = 2**52

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


def _project_onto_ball(points, center, radius):
    """Radial projection of each row onto the closed ball B(center, radius)."""
    offsets = points - center
    norms = np.linalg.norm(offsets, axis=-1, keepdims=True)
    return center + offsets * (radius / np.maximum(norms, radius))


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
