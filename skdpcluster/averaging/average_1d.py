"""PrivateAverage1D: the private average of bounded reals divided by a public count (Cohen et al.
2021, Proposition 2.9; ``spec/cohen_ktuple.md`` §7.4 with the review's Finding 6)."""


import math

import numpy as np

from skdpcluster.averaging._common import (
    _check_choice,
    _check_finite_array,
    _check_generator,
    _check_grid,
    _check_real,
)
from skdpcluster.averaging.bounding_segment import _bounding_segment, _segment_threshold
from skdpcluster.mechanisms import (
    PrivacyEvent,
    analytic_gaussian_sigma,
    gaussian_mechanism,
)
from skdpcluster.utils._validation import check_epsilon_delta, check_probability

# Add/remove changes a centred clipped sum by at most (b - a)/2, replace-one by
# b - a (review, Finding 6).
_SUM_SENSITIVITY_PER_WIDTH = {"add_remove": 0.5, "replace_one": 1.0}

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

    Releases :math:`\sum_x (\mathrm{clip}(x, a, b) - c)/n_{\mathrm{public}} + N(0, \sigma^2)`,
    :math:`c = (a + b)/2`, and returns it plus :math:`c` (post-processing),
    with :math:`\sigma` the analytic calibration at ``(epsilon, delta)`` for
    the sensitivity :math:`(b - a)/(2 n_{\mathrm{public}})` (add/remove) or
    :math:`(b - a)/n_{\mathrm{public}}` (replace-one). ``values`` of shape
    ``(..., n_values)`` give one independent release per leading index.

    **In floating point.** Rounding is monotone, so every computed term
    :math:`\mathrm{fl}(\mathrm{clip}(x, a, b) - c)` lies in
    :math:`[-\mathrm{fl}(c - a), \mathrm{fl}(b - c)]`: the width :math:`b - a`
    of the sensitivity is taken from these computed offsets (twice the
    larger one under add/remove, their sum rounded up under replace-one; they
    differ from :math:`(b - a)/2` when :math:`c` rounds), and the quotient by
    :math:`n_{\mathrm{public}}` is rounded up. The noise goes on the centred
    average, not on :math:`c` plus it: that sum is rounded at the ulp of
    :math:`c`, which one row can move by a whole ulp, far above the sensitivity
    and the noise when the segment is narrow and far from 0 (review R5-2:
    neighbours released 0.75 and 0.75 + 2^-52 on every seed). The sum of the
    terms rounds like any floating-point sum, which the sensitivity does not
    count (``doc/privacy.rst``).

    Returns
    -------
    estimate : float or ndarray of shape values.shape[:-1]
    event : PrivacyEvent
        The Gaussian release, ``(epsilon, delta)`` under ``neighbouring``.
    """
    low, high = segment
    centre = (low + high) / 2.0
    centred_sum = np.sum(np.clip(values, low, high) - centre, axis=-1)
    above, below = high - centre, centre - low
    width = (2.0 * max(above, below) if neighbouring == "add_remove"
             else math.nextafter(above + below, math.inf))
    quotient = _SUM_SENSITIVITY_PER_WIDTH[neighbouring] * width / n_public
    sensitivity = math.nextafter(quotient, math.inf) if width > 0 else 0.0  # 0 is exact
    noisy, event = gaussian_mechanism(
        centred_sum / n_public, sensitivity=sensitivity, epsilon=epsilon, delta=delta, rng=rng,
        calibration="analytic", neighbouring=neighbouring,
    )
    return centre + noisy, event


def _check_noise_scale(n_public, grid, epsilon, delta, neighbouring):
    r"""Refuse, before any randomness, a budget whose Gaussian step in _average_1d overflows.

    The step runs at ``(epsilon / 2, delta)`` with a sensitivity proportional
    to the released width, which is at most :math:`2\Lambda + 3 r_{\min}`
    (the interior points lie on the grid :math:`-\Lambda + i r_{\min}`,
    :math:`i \le N`); sigma grows with the sensitivity, so a calibration
    that holds at :math:`4(\Lambda + r_{\min})` (a margin for rounding)
    holds at every released width. Before, a sigma above the float64
    maximum raised after the segment was drawn, or not, depending on its
    width (review R5-4).
    """
    data_radius, r_min, _ = grid
    widest = _SUM_SENSITIVITY_PER_WIDTH[neighbouring] * 4.0 * (data_radius + r_min) / n_public
    try:
        analytic_gaussian_sigma(widest, epsilon / 2.0, delta)
    except ValueError as exc:
        raise ValueError(
            f"{exc} (the Gaussian step of the average at its widest segment, data_radius="
            f"{data_radius!r}, r_min={r_min!r}, n_public={n_public!r})"
        ) from None


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
    _check_noise_scale(n_public, grid, epsilon, delta, neighbouring)
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
