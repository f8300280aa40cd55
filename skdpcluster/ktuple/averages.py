r"""PrivatekAverages (Cohen et al. 2021, Figure 3; Theorems 4.8 and 4.9).

After a successful PrivateTestPartition at ``(eps/2, delta/4, beta/2)`` with
:math:`\Delta = 7`, every point of every tuple is assigned to the nearest
centre of the selected tuple, and the k clusters are averaged privately with
Proposition 2.9 (:func:`skdpcluster.averaging.private_average`) at

.. math::

    \hat\varepsilon = \frac{\varepsilon}{4k(\ell+1)},\qquad
    \hat\delta = \frac{\delta}{8k\,e^{\varepsilon/2}(\ell+1)},\qquad
    \hat\beta = \frac{\beta}{2k},

dividing by the public number of tuples n (spec §7.6; review, finding 6).

Privacy (spec §5.2): on admissible neighbours at most :math:`k(\ell+1)` points
change cluster, i.e. :math:`\sum_i |Q_i \oplus Q'_i| \le 2k(\ell+1)` point
insertions and deletions. Group privacy of the add/remove-private averages
then gives :math:`(\varepsilon/2, \delta/4)` for A*, and Claim 4.6 the total
:math:`(\varepsilon, \delta)`.
"""

import math

import numpy as np

from skdpcluster.averaging import private_average
from skdpcluster.averaging._common import _check_grid, project_into_ball
from skdpcluster.averaging.average import _axis_budget
from skdpcluster.averaging.average_1d import _average_1d_details
from skdpcluster.ktuple._framework import (
    KTupleResult,
    canonical_order,
    check_tuple_parameters,
    conditioning_event,
    run_partition_test,
)
from skdpcluster.ktuple.partition import _outer_ell
from skdpcluster.mechanisms import PrivacyEvent

__all__ = [
    "AVERAGES_SEPARATION",
    "cluster_points_needed",
    "per_cluster_budget",
    "private_k_averages",
    "project_to_ball",
]

#: Delta of the partition test in PrivatekAverages (Proposition 3.1.1 needs Delta > 6).
AVERAGES_SEPARATION = 7.0


def project_to_ball(points, radius):
    """Radially project every point onto the closed ball B(0, radius) (a per-record map, spec §7.8).

    Points of any shape (the last axis the coordinates); every projected
    point's exact norm is at most ``radius``
    (:func:`~skdpcluster.averaging._common.project_into_ball`).
    """
    points = np.asarray(points, dtype=float)
    projected = points.reshape(-1, points.shape[-1]).copy()
    project_into_ball(projected, radius)
    return projected.reshape(points.shape)


def _assign_to_nearest(points, centers):
    """Index of the nearest centre for every point; ties go to the lowest index."""
    distances = np.linalg.norm(points[:, None, :] - centers[None, :, :], axis=-1)
    return np.argmin(distances, axis=1)


def _check_averages_parameters(data_radius, r_min):
    if not (np.isfinite(data_radius) and data_radius > 0):
        raise ValueError(f"data_radius must be a finite number > 0, got {data_radius!r}.")
    if not (np.isfinite(r_min) and 0 < r_min <= data_radius):
        raise ValueError(
            f"r_min must satisfy 0 < r_min <= data_radius={data_radius}, got r_min={r_min!r}; "
            "it is the resolution of the private averages (spec §7.8)."
        )


def private_k_averages(
    tuples,
    *,
    epsilon,
    delta,
    beta,
    data_radius,
    r_min,
    rng,
    accounting="corrected",
):
    r"""PrivatekAverages (Cohen et al. 2021, Figure 3).

    Parameters
    ----------
    tuples : ndarray of shape (n, k, d)
        Points are projected onto ``B(0, data_radius)`` first.
    epsilon, delta, beta : float
    data_radius : float
        The public bound Lambda.
    r_min : float
        Resolution of the private averages, ``0 < r_min <= data_radius``.
    rng : numpy.random.Generator
    accounting : {"corrected", "paper"}, default="corrected"

    Returns
    -------
    KTupleResult
    """
    _check_averages_parameters(data_radius, r_min)
    check_tuple_parameters(tuples, epsilon, delta, beta, AVERAGES_SEPARATION, accounting)
    n, k, d = tuples.shape
    ell_value = _outer_ell(n, epsilon, delta, beta, accounting)  # public: depends on n only
    eps_hat, delta_hat = per_cluster_budget(epsilon, delta, k, ell_value)
    tuples = project_to_ball(tuples, data_radius)
    test, test_events, public = run_partition_test(
        tuples, epsilon=epsilon, delta=delta, beta=beta, separation=AVERAGES_SEPARATION,
        accounting=accounting, rng=rng,
    )
    public.update(eps_hat=eps_hat, delta_hat=delta_hat)
    centers = None
    if test.success:
        points = tuples.reshape(n * k, d)
        labels = _assign_to_nearest(points, test.centers)
        releases = [
            private_average(
                points[labels == i], n_public=n, data_radius=data_radius, r_min=r_min,
                epsilon=eps_hat, delta=delta_hat, beta=beta / (2 * k), rng=rng,
            )
            for i in range(k)
        ]
        centers = canonical_order(np.vstack([average for average, _ in releases]))
        inner_events = [event for _, event in releases]
    else:
        inner_events = []
    events = [
        *test_events,
        _group_privacy_event(epsilon, delta, k, ell_value, eps_hat, delta_hat, inner_events),
        conditioning_event(delta, public, accounting),
    ]
    return KTupleResult(centers, test.success, events, public)


def per_cluster_budget(epsilon, delta, k, ell_value):
    r"""Budget of each private average in Theorem 4.9, computed in log space.

    :math:`\hat\varepsilon = \varepsilon/(4k(\ell+1))` and
    :math:`\hat\delta = \delta/(8k\,e^{\varepsilon/2}(\ell+1))`.

    Raises
    ------
    ValueError
        When :math:`\hat\delta` underflows (the group-privacy factor
        :math:`e^{\varepsilon/2}` grows faster than any delta can absorb).
    """
    eps_hat = epsilon / (4 * k * (ell_value + 1))
    log_delta_hat = math.log(delta) - math.log(8 * k * (ell_value + 1)) - epsilon / 2
    if log_delta_hat < math.log(np.finfo(float).tiny):
        limit = 2 * (math.log(delta) - math.log(8 * k * (ell_value + 1)) - math.log(np.finfo(float).tiny))
        raise ValueError(
            f"epsilon={epsilon} is too large for method='averages': the per-cluster delta "
            f"delta / (8k e^(epsilon/2) (ell+1)) underflows (Theorem 4.9's group privacy). "
            f"Use epsilon <= {limit:.0f}, or method='noisy_centers'."
        )
    return eps_hat, math.exp(log_delta_hat)


def cluster_points_needed(n, k, d, epsilon, delta, beta, data_radius, r_min,
                          accounting="corrected"):
    r"""Points each cluster average of :func:`private_k_averages` needs for its utility bound.

    On success every tuple gives one point to each cluster, so a cluster holds
    about ``n`` points. Each axis of its private average
    (:func:`~skdpcluster.averaging.private_average` at
    :math:`(\hat\varepsilon, \hat\delta, \beta/(2k))`) bounds its segment with
    two interior points on the :math:`t` extreme values
    (:func:`~skdpcluster.averaging.private_bounding_segment`): Proposition
    2.9's error bound holds only when the cluster holds at least :math:`t`
    points. Below that the segment (hence the centre) can lie anywhere in
    :math:`[-\Lambda, \Lambda]` on each axis: an error of the order of the
    data radius. A function of public values only.

    Returns
    -------
    int
        :math:`t` at ``n`` tuples (it decreases slowly with ``n``, through
        :math:`\ell`).
    """
    ell_value = _outer_ell(n, epsilon, delta, beta, accounting)
    eps_hat, delta_hat = per_cluster_budget(epsilon, delta, k, ell_value)
    budget = _axis_budget(eps_hat, delta_hat, d, "auto")
    details = _average_1d_details(_check_grid(data_radius, r_min), budget.epsilon_axis,
                                  budget.delta_axis, beta / (2 * k) / d)
    return details["n_extreme_values"]


def _group_privacy_event(epsilon, delta, k, ell_value, eps_hat, delta_hat, inner_events):
    """A* of Theorem 4.9: k add/remove-private averages under group privacy of size 2k(ell+1).

    Priced in full whether or not the test succeeded; on success the k
    per-cluster events (each within ``(eps_hat, delta_hat)``) are kept in
    ``details`` for audit.
    """
    return PrivacyEvent(
        "ktuple_group_private_averages", epsilon / 2, delta / 4, label="averages/private_averages",
        neighbouring="replace_one",
        details={
            "per_cluster_epsilon": eps_hat,
            "per_cluster_delta": delta_hat,
            "group_size_bound": 2 * k * (ell_value + 1),
            "per_cluster_events": [event.to_dict() for event in inner_events],
            "theorem": "Cohen et al. 2021, Theorem 4.9 (spec §5.2)",
        },
    )
