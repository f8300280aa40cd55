"""PrivateBoundingSegment: a private segment holding most of the data (Cohen et al. 2021,
Proposition 2.9; ``spec/cohen_ktuple.md`` §7.3)."""

import math

import numpy as np

from skdpcluster.averaging._common import _check_finite_array, _check_generator, _check_grid
from skdpcluster.averaging.interior_point import _interior_point
from skdpcluster.mechanisms import PrivacyEvent
from skdpcluster.utils._validation import check_epsilon_delta, check_probability

# ---------------------------------------------------------------------------
# Bounding segment (spec §7.3)
# ---------------------------------------------------------------------------


def _segment_threshold(n_intervals, epsilon, beta):
    """t = ceil((4/eps_IP) log(|G|/beta_IP)) with eps_IP = eps/2, beta_IP = beta/2.

    ``math.inf`` where t overflows (an epsilon below about 1e-306): every value is then among
    the t extremes (review R11 L2: ``math.ceil`` raised OverflowError inside private steps).
    """
    threshold = (8.0 / epsilon) * math.log(2.0 * (n_intervals + 1) / beta)
    return math.ceil(threshold) if math.isfinite(threshold) else math.inf


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
