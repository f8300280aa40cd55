r"""One cluster (``n_clusters=1``): a private mean or 1-median from :mod:`skdpcluster.averaging`.

With one cluster there is nothing to separate: the k-means centre is the
mean of the rows and the k-median centre their 1-median. The central
estimators answer ``n_clusters=1`` with these two primitives, on the whole
budget, instead of running their k-cluster machinery:

* k-means (:class:`~skdpcluster.KTupleClusterer`,
  :class:`~skdpcluster.PrivateStableKMeans`,
  :class:`~skdpcluster.SampleAggregateStableKMeans`,
  :class:`~skdpcluster.PrivateHighDimKMeans`):
  :func:`~skdpcluster.averaging.private_average` (Cohen et al. 2021,
  Proposition 2.9) of the rows projected onto the bound's ball;
* k-median (:class:`~skdpcluster.PrivateStableKMedian`,
  :class:`~skdpcluster.PrivateHighDimKMedian`): the private 1-median
  (:func:`~skdpcluster.averaging.private_one_medians`, one cell whose domain
  is the bound's ball; Shechner 2021, §5), in memory or pass by pass on Dask
  rows.

**Privacy.** Under replace-one the number of rows is public, so the mean
divides by ``n_samples`` and is :math:`(\varepsilon, \delta)`-DP (Proposition
2.9 with the review's Finding 6). Under add/remove (an estimator with
``neighbouring="add_remove"``) the divisor is a Laplace count
(:func:`~skdpcluster.averaging.private_count`) on :data:`COUNT_SHARE` of
epsilon, and the average runs on the rest: basic composition gives
:math:`(\varepsilon, \delta)`. The 1-median is :math:`(\varepsilon,
\delta)`-DP under both relations (its count is noisy). The projection onto
the ball is a per-row map, so neighbours stay neighbours. The charge is the
planned :math:`(\varepsilon, \delta)` whatever the data.
"""

import math

import numpy as np

from skdpcluster.averaging import private_average, private_count, private_one_medians
from skdpcluster.averaging.average import check_average_budget
from skdpcluster.averaging.one_median import check_one_median_budget, private_one_medians_of_rows
from skdpcluster.averaging._common import _MAX_GRID_INTERVALS
from skdpcluster.cluster._base import PrivateFit, PrivateFitPlan
from skdpcluster.mechanisms import laplace_scale
from skdpcluster.utils._warnings import warn_user

__all__ = ["fit_one_cluster", "plan_one_cluster"]

#: Resolution of the private average relative to the data radius when ``r_min`` is not given.
R_MIN_FRACTION = 1e-4
#: Share of epsilon spent on the noisy count of the mean under add/remove neighbours.
COUNT_SHARE = 0.1
#: Gradient steps and step factor of the 1-median (those of PrivateStableKMedian's defaults).
MEDIAN_ITERATIONS, MEDIAN_STEP_SCALE = 50, 0.5


def plan_one_cluster(estimator, X, statistic, attributes=None):
    """The public plan of a one-cluster fit: centre, bound and grid step (no randomness).

    Parameters
    ----------
    estimator : private clusterer
        Its ``epsilon``, ``delta``, ``data_center`` and ``data_radius`` are used
        (the bound through its ``_resolve_radius``: a public value, or, with
        ``data_radius="data"``, the exact one with its warning).
    X : ndarray or rows object
        The rows (Dask rows only for ``statistic="median"``).
    statistic : {"mean", "median"}
    attributes : dict, default=None
        The estimator's fitted attributes of this path (``labels_`` and
        ``data_radius_`` are set here).

    Returns
    -------
    PrivateFitPlan
    """
    if statistic == "mean" and hasattr(X, "map_reduce"):
        raise ValueError(
            f"{type(estimator).__name__}(n_clusters=1) computes a private mean that needs the rows "
            "in memory; this path should not have been planned for Dask input.")
    if estimator.delta == 0:
        raise ValueError(
            f"delta=0: {type(estimator).__name__}(n_clusters=1) releases a private "
            f"{statistic} (skdpcluster.averaging), which spends delta; pass delta > 0.")
    center = estimator._resolve_center(X.shape[1])
    radius, unproven = estimator._resolve_radius(X, center)
    r_min = resolved_r_min(estimator, getattr(estimator, "r_min", None), radius)
    values = {"one_cluster": statistic, "center": center, "data_radius": radius, "r_min": r_min}
    _check_calibrations(estimator, X.shape, values)
    attributes = {**(attributes or {}), "data_radius_": radius}
    return PrivateFitPlan((float(estimator.epsilon), float(estimator.delta)), values, attributes,
                          unproven)


def _check_calibrations(estimator, shape, values):
    """Refuse, in the plan, a budget at which the release's calibrations would raise.

    They raised inside the private step, which made a public setting a charged
    failure (review R10 M1: epsilon above 1e17, or a noise scale beyond the
    float range at a tiny epsilon and delta with a large radius). The mean is
    checked at the split :func:`_private_mean` uses and at its smallest
    divisor: ``n_samples`` under replace-one, 1 under add/remove (the divisor
    is ``max(noisy count, 1)``; the noise grows as it shrinks).
    """
    epsilon, delta = float(estimator.epsilon), float(estimator.delta)
    neighbouring = getattr(estimator, "neighbouring", "replace_one")
    if values["one_cluster"] == "median":
        check_one_median_budget(epsilon=epsilon, delta=delta, neighbouring=neighbouring,
                                n_iter=getattr(estimator, "gd_iterations", MEDIAN_ITERATIONS))
        return
    n_public = float(shape[0])
    if neighbouring == "add_remove":
        laplace_scale(1.0, COUNT_SHARE * epsilon)
        epsilon, n_public = epsilon - COUNT_SHARE * epsilon, 1.0
    check_average_budget(n_public=max(n_public, 1.0), data_radius=values["data_radius"],
                         r_min=values["r_min"], epsilon=epsilon, delta=delta,
                         n_features=shape[1], neighbouring=neighbouring)


def resolved_r_min(estimator, r_min, radius):
    r"""The grid step of the private averages, checked against the bound before any randomness.

    The averages (:func:`~skdpcluster.averaging.private_average`,
    :func:`~skdpcluster.ktuple.averages.private_k_averages`) need
    :math:`0 < r_{min} \le \Lambda` and :math:`2\Lambda/r_{min} \le 2^{52}`
    (a grid that float64 resolves). With a public ``data_radius`` a
    ``r_min`` outside that range is refused here, naming ``r_min``; with a
    released bound (``data_radius=None``, or ``"data"``) it is moved into
    the range, a function of the released value, with a warning. Before,
    both ended the fit inside the private step after the randomness was
    drawn (a charged ``status_="failure"``; review RD-2). ``None`` gives
    ``R_MIN_FRACTION`` times the bound.
    """
    if r_min is None:
        return R_MIN_FRACTION * radius
    finest = math.nextafter(2.0 * radius / _MAX_GRID_INTERVALS, math.inf)
    if finest <= r_min <= radius:
        return r_min
    name = type(estimator).__name__
    if estimator._radius_is_users():
        raise ValueError(
            f"{name}: r_min={r_min!r} must be in [2 * data_radius / 2**52, data_radius] = "
            f"[{finest:.4g}, {radius!r}] (the grid of the private averages, which float64 must "
            "resolve); pass an r_min in that range.")
    moved = min(max(r_min, finest), radius)
    if estimator._public_radius_given():  # the released bound of an inner fit: public
        warn_user(f"{name}: r_min={r_min!r} is outside [2 * data_radius_ / 2**52, "
                  f"data_radius_] for the released bound data_radius_={radius:.6g}; the "
                  f"private averages use r_min={moved:.6g}.", UserWarning)
    else:  # data_radius="data": neither the exact bound nor the moved r_min is shown
        warn_user(f"{name}: r_min={r_min!r} is outside [2 * data_radius / 2**52, data_radius] "
                  "for the data's exact bound; the private averages use the nearest end.",
                  UserWarning)
    return moved


def fit_one_cluster(estimator, X, plan, rng):
    """Release the planned one-cluster centre; the ledger names the averaging step.

    Returns
    -------
    PrivateFit
        One centre (original coordinates), ``labels_`` all 0 (lazy on Dask
        rows), and the primitive's events labelled
        ``"<Estimator>/private_average"`` or ``"<Estimator>/private_one_median"``;
        ``rho`` the 1-median's zCDP (``None`` for the mean).
    """
    owner = type(estimator).__name__
    neighbouring = getattr(estimator, "neighbouring", "replace_one")
    if plan.values["one_cluster"] == "mean":
        centre, events = _private_mean(X - plan.values["center"], plan.values, estimator,
                                       neighbouring, rng)
    else:
        centre, events = _private_median(X, plan.values, estimator, neighbouring, rng)
    events = [event.with_label(f"{owner}/{event.mechanism}") for event in events]
    # The 1-median's steps are Gaussian releases: their zCDP is known (the mean's is not).
    rho = events[-1].rho if plan.values["one_cluster"] == "median" else None
    return PrivateFit((centre + plan.values["center"])[None, :], True, events, rho=rho,
                      attributes={"labels_": _one_cluster_labels(X)})


def _private_mean(points, values, estimator, neighbouring, rng):
    """Proposition 2.9 on the whole budget; under add/remove, first a noisy count as divisor."""
    epsilon, delta = float(estimator.epsilon), float(estimator.delta)
    events, n_public = [], float(points.shape[0])
    count_rng, average_rng = rng.spawn(2)
    if neighbouring == "add_remove":
        noisy, count_event = private_count(points.shape[0], epsilon=COUNT_SHARE * epsilon,
                                           rng=count_rng)
        events, n_public = [count_event], max(float(noisy), 1.0)
        epsilon -= count_event.epsilon
    mean, event = private_average(
        points, n_public=n_public, data_radius=values["data_radius"], r_min=values["r_min"],
        epsilon=epsilon, delta=delta, beta=getattr(estimator, "beta", 0.05), rng=average_rng,
        neighbouring=neighbouring)
    return mean, events + [event]


def _private_median(X, values, estimator, neighbouring, rng):
    """The private 1-median of one cell, the bound's ball, from its centre (in memory or chunks)."""
    # Imported here: cluster._stable imports cluster._ktuple, which imports this module.
    from skdpcluster.cluster._stable import clipped_rows  # noqa: PLC0415

    radius = values["data_radius"]
    data = clipped_rows(X, values["center"], radius)
    parameters = dict(
        centers=np.zeros((1, X.shape[1])), radii=np.array([radius]),
        epsilon=float(estimator.epsilon), delta=float(estimator.delta), rng=rng,
        n_iter=getattr(estimator, "gd_iterations", MEDIAN_ITERATIONS),
        step_scale=getattr(estimator, "gd_step_scale", MEDIAN_STEP_SCALE),
        neighbouring=neighbouring)
    if hasattr(data, "X"):
        medians, event = private_one_medians(data.X, np.zeros(len(data.X), dtype=np.intp),
                                             **parameters)
    else:
        medians, event = private_one_medians_of_rows(data, _single_cell, **parameters)
    return medians[0], [event]


def _single_cell(chunk):
    """Every row of a chunk is in the one cell (picklable, for the Dask passes)."""
    return np.zeros(len(chunk.X), dtype=np.intp)


def _one_cluster_labels(X):
    """Label 0 for every training row (a lazy Dask array for Dask rows)."""
    if hasattr(X, "map_rows"):
        return X.map_rows(_zero_labels, dtype=np.intp)
    return np.zeros(X.shape[0], dtype=np.intp)


def _zero_labels(block):
    return np.zeros(len(block), dtype=np.intp)

