"""PrivAvg in R^d: the private average of points in a ball, one axis at a time (Cohen et al. 2021,
Proposition 2.9; ``spec/cohen_ktuple.md`` §7.5)."""

import math
from dataclasses import dataclass

import numpy as np

from skdpcluster.averaging._common import (
    _check_choice,
    _check_grid,
    _check_points,
    _split_evenly,
    project_into_ball,
)
from skdpcluster.averaging.average_1d import (
    _average_1d,
    _average_1d_details,
    _check_average_inputs,
    _check_noise_scale,
)
from skdpcluster.mechanisms import PrivacyEvent

_COMPOSITIONS = ("advanced", "auto", "basic")

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


def _basic_budget(epsilon, delta, n_axes):
    """Basic composition: eps_ax = eps/d, delta_ax = delta/d."""
    epsilon_axis = _split_evenly(epsilon, n_axes)
    delta_axis = _split_evenly(delta, n_axes)
    return _AxisBudget(
        "basic", epsilon_axis, delta_axis,
        math.fsum([epsilon_axis] * n_axes), math.fsum([delta_axis] * n_axes),
    )


#: Largest argument of ``math.expm1`` that does not overflow a float.
_MAX_EXP_ARGUMENT = math.log(float.fromhex("0x1.fffffffffffffp+1023"))


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
    # e^{eps_ax} overflows above ~709: the total is then infinite and advanced composition invalid.
    growth = math.expm1(epsilon_axis) if epsilon_axis < _MAX_EXP_ARGUMENT else math.inf
    epsilon_total = spread * epsilon_axis + n_axes * epsilon_axis * growth
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


def _checked_axis_budget(n_public, grid, epsilon, delta, n_axes, composition, neighbouring):
    """The per-axis budget, refused (ValueError) where an axis' Gaussian step cannot calibrate."""
    budget = _axis_budget(epsilon, delta, n_axes, composition)
    _check_noise_scale(n_public, grid, budget.epsilon_axis, budget.delta_axis, neighbouring)
    return budget


def check_average_budget(*, n_public, data_radius, r_min, epsilon, delta, n_features,
                         neighbouring, composition="auto"):
    """Refuse, in a plan, the public values at which :func:`private_average` would raise.

    For callers that validate ``epsilon``, ``delta`` and ``neighbouring``
    themselves and run :func:`private_average` inside a private step (review
    R10 M1: its calibration refusals, an epsilon above 1e17 or a sigma above
    the float maximum, ended such fits as charged failures). ``n_public``
    is the smallest divisor the release can get (the noise grows as it
    shrinks). Raises ``ValueError`` as :func:`private_average` would.
    """
    grid = _check_grid(data_radius, r_min)
    _checked_axis_budget(n_public, grid, epsilon, delta, n_features, composition, neighbouring)


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
    budget = _checked_axis_budget(n_public, grid, epsilon, delta, n_axes, composition, neighbouring)
    projected = np.array(points, dtype=float)  # a copy: the caller's points are not changed
    project_into_ball(projected, grid[0])  # every row's exact norm <= the radius
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
