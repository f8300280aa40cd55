r"""The opt-in private estimate of the clipped clustering cost of released centres (issue #14).

``estimate_cost=True`` on :class:`~skdpcluster.KTupleClusterer`,
:class:`~skdpcluster.PrivateStableKMeans` and
:class:`~skdpcluster.PrivateStableKMedian` spends :data:`COST_SHARE` of epsilon
(pure DP) on :func:`private_clipped_cost` of the released centres, after the fit
has run on the rest (:class:`CostEstimateMixin`); the result goes to
``quality_``.
"""

import numpy as np
from sklearn.base import clone

from skdpcluster.cluster._base import PrivateFitPlan
from skdpcluster.mechanisms import PrivacyEvent, laplace_mechanism
from skdpcluster.utils._data import as_rows

__all__ = ["COST_KEYS", "COST_SHARE", "CostEstimateMixin", "cost_clip", "max_cost_clip",
           "private_clipped_cost"]

#: Share of epsilon spent on the private cost estimate when ``estimate_cost=True``.
COST_SHARE = 0.05
#: The keys of ``quality_`` that the estimate fills (``None`` without it).
COST_KEYS = ("clipped_cost", "mean_clipped_cost", "cost_clip", "cost_noise_scale")


class CostEstimateMixin:
    r"""``estimate_cost=True`` for an estimator of :mod:`skdpcluster.cluster._base`.

    The estimator's ``_plan`` returns :meth:`_plan_with_cost_estimate` when
    ``estimate_cost`` is True, and its ``_fit_private`` calls
    :meth:`_fit_with_cost_estimate` on such a plan (``"cost_main"`` in its
    values). **Privacy.** The fit runs on :math:`(1 - s)\varepsilon` (and the
    whole delta), the estimate on :math:`s\varepsilon`; basic adaptive
    composition gives at most :math:`(\varepsilon, \delta)`, and the share
    is charged whether or not centres were released.
    """

    def _plan_with_cost_estimate(self, X):
        """The fit on ``1 - COST_SHARE`` of epsilon, then the cost on the rest (public plan)."""
        main = clone(self).set_params(estimate_cost=False,
                                      epsilon=(1.0 - COST_SHARE) * self.epsilon)
        main_plan = main._plan(X)
        epsilon_cost = COST_SHARE * self.epsilon
        values = {"cost_main": main, "cost_main_plan": main_plan, "cost_epsilon": epsilon_cost}
        cost = (main_plan.cost[0] + epsilon_cost, main_plan.cost[1])
        return PrivateFitPlan(cost, values, dict(main_plan.attributes), dict(main_plan.unproven))

    def _fit_with_cost_estimate(self, X, plan, rng):
        """Run the planned fit, then release the clipped cost of its centres into ``quality_``."""
        main_rng, cost_rng = rng.spawn(2)
        result = plan.values["cost_main"]._fit_private(X, plan.values["cost_main_plan"], main_rng)
        neighbouring = getattr(self, "neighbouring", "replace_one")  # k-tuple: replace-one
        estimate, event = private_clipped_cost(X, result.centers,
                                               epsilon=plan.values["cost_epsilon"],
                                               data_radius=plan.attributes.get("data_radius_"),
                                               rng=cost_rng, power=self._POWER,
                                               neighbouring=neighbouring)
        if "data_radius_" in plan.unproven:
            # data_radius="data": with one centre the clip is the exact bound, which the fit
            # hides (data_radius_ is nan); so are the clip and the noise scale derived from it.
            estimate = {**estimate, "cost_clip": None, "cost_noise_scale": None}
        result.events = list(result.events) + [
            event.with_label(f"{type(self).__name__}/{event.label}")]
        quality = {**plan.attributes.get("quality_", {}), **result.attributes.get("quality_", {})}
        result.attributes["quality_"] = {**quality, **estimate}
        return result


def _clipped_cost_sensitivity(clip):
    """Replace-one sensitivity of ``sum_x min(cost_x, clip)``: one term moves within [0, clip]."""
    return clip


def max_cost_clip(epsilon):
    r"""The largest clip of :func:`private_clipped_cost`: :math:`2^{-64}\min(1, \varepsilon)\,F`.

    :math:`F` is the largest float.

    A public function of ``epsilon``: with :math:`\tau` at most this, the sum
    of at most :math:`2^{53}` terms in :math:`[0, \tau]` and the Laplace noise
    of scale :math:`\tau/\varepsilon` (numpy's draws stay below 40 scales)
    stay far below the float range, so the release is finite on any input.
    It is reached only by centres more than about :math:`10^{144}` apart
    (for the k-means cost); ordinary fits never meet it.
    """
    return float(np.finfo(float).max) / 2.0**64 * min(1.0, float(epsilon))


def cost_clip(centers, data_radius=None, power=2):
    r"""The public clip :math:`\tau` of :func:`private_clipped_cost`, from released values only.

    :math:`\tau = (g/2)^p` with :math:`g` the median distance from a released
    centre to its nearest other centre (rows of well separated clusters lie
    within :math:`g/2` of their centre, so they are rarely clipped) and
    :math:`p` the ``power`` of the cost (2: k-means, 1: k-median); for one
    centre :math:`\tau = \Lambda^p` (``data_radius``, public or released).
    Computed in floating point without raising: centres near the float range
    give ``inf`` (:func:`private_clipped_cost` caps it at
    :func:`max_cost_clip`).
    """
    with np.errstate(over="ignore", invalid="ignore"):
        if len(centers) == 1:
            return float(np.float64(data_radius) ** power)
        gaps = np.linalg.norm(centers[:, None, :] - centers[None, :, :], axis=-1)
        np.fill_diagonal(gaps, np.inf)
        return float((np.median(gaps.min(axis=1)) / 2.0) ** power)


def private_clipped_cost(X, centers, *, epsilon, rng, data_radius=None, power=2,
                         neighbouring="replace_one"):
    r"""Private estimate of the clipped cost of released centres: Laplace, :math:`\varepsilon`-DP.

    Releases :math:`\tilde C = \sum_x \min(\min_j\|x - c_j\|^p, \tau) +
    \mathrm{Lap}(\tau/\varepsilon)` (:math:`p` = ``power``: 2 for the
    k-means cost, 1 for the k-median cost), the *truncated cost* of the selection
    step of Shechner (2021; ``spec/shechner_stable.md`` §9.5), with
    :math:`\tau` = :func:`cost_clip` of the released centres, capped at
    :func:`max_cost_clip` (so that the release is finite whatever the centres).
    **Privacy.** The centres and :math:`\tau` are released (or public)
    values (the cap is a function of the public ``epsilon``), so given them
    each row adds one term in :math:`[0, \tau]`:
    replacing one row moves the sum by at most :math:`\tau`, and the
    Laplace mechanism (Dwork & Roth 2014, Theorem 3.6) is
    :math:`\varepsilon`-DP under replace-one; it composes adaptively with
    the release of the centres. Under add/remove one added row adds one
    term in :math:`[0, \tau]`: the same sensitivity. ``n_samples`` is public
    under replace-one, so ``mean_clipped_cost`` (:math:`\tilde C / n`) is
    post-processing; under add/remove the count is private and
    ``mean_clipped_cost`` is ``None`` (dividing by the exact count would
    release it).
    Without centres nothing is computed and ``epsilon`` is charged unused,
    so the charge never depends on the outcome.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features), or rows of :mod:`skdpcluster.utils._data`
        A rows object (Dask input) is read in one map-reduce of per-chunk sums.
    centers : ndarray of shape (k, n_features) or None
    epsilon : float
    rng : numpy.random.Generator
    data_radius : float, default=None
        The bound, used for one centre only.
    power : {2, 1}, default=2
        Exponent of the distance in the cost.
    neighbouring : {"replace_one", "add_remove"}, default="replace_one"
        The fit's neighbouring relation, recorded in the event.

    Returns
    -------
    estimate : dict
        ``"clipped_cost"``, ``"mean_clipped_cost"``, ``"cost_clip"`` and
        ``"cost_noise_scale"`` (all ``None`` without centres).
    event : PrivacyEvent
    """
    if centers is None:
        return dict.fromkeys(COST_KEYS), PrivacyEvent(
            "unused_budget", float(epsilon), 0.0, label="cost_estimate_unused")
    clip = float(np.fmin(cost_clip(np.asarray(centers, dtype=float), data_radius, power),
                         max_cost_clip(epsilon)))
    cost = as_rows(X).map_reduce(_clipped_cost_sum, centers, clip, power)
    noisy, event = laplace_mechanism(
        float(cost), sensitivity=_clipped_cost_sensitivity(clip),
        epsilon=epsilon, rng=rng, label="clipped_cost", neighbouring=neighbouring)
    mean = float(noisy) / X.shape[0] if neighbouring == "replace_one" else None
    return {"clipped_cost": float(noisy), "mean_clipped_cost": mean,
            "cost_clip": clip, "cost_noise_scale": event.scale}, event


def _clipped_cost_sum(chunk, centers, clip, power):
    """``sum_x min(min_j ||x - c_j||^power, clip)`` over a chunk of rows (one map-reduce pass)."""
    nearest = np.full(chunk.X.shape[0], np.inf)
    with np.errstate(over="ignore"):  # an extreme row costs inf and is clipped to tau
        for center in centers:
            np.minimum(nearest, np.square(chunk.X - center).sum(axis=1), out=nearest)
    cost = nearest if power == 2 else np.sqrt(nearest)
    return float(np.minimum(cost, clip).sum())
