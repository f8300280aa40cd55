r"""Private recovery of the centres in the original space (Balcan et al. 2017, Algorithms 4-5).

Kernels of :class:`~skdpcluster.cluster._highdim.PrivateHighDimKMeans` and
:class:`~skdpcluster.cluster._highdim.PrivateHighDimKMedian`: given a
partition of the rows (public to these functions: it comes from private
centres), release one centre per cluster in :math:`\mathbb{R}^d`:

* :func:`noisy_cluster_means`: noisy counts and sums, with the
  :math:`\sqrt d` the paper's calibration misses (``spec/balcan_highdim.md``
  A5); also the SuLQ / DP-Lloyd step;
* :func:`sparse_cluster_means`: Algorithm 5 on coordinate sums (fix A6);
* :func:`one_median_clusters`: a private 1-median per cluster (k-median).

Every noisy release goes through :mod:`skdpcluster.mechanisms` (or
:mod:`skdpcluster.averaging`); each function returns a :class:`NoisyMeans`
with the events, which the caller charges.
"""

import math
from dataclasses import dataclass

import numpy as np

from skdpcluster.averaging import _project_onto_ball, private_one_medians
from skdpcluster.cluster._highdim_candidates import merge_repeats
from skdpcluster.cluster._stable_init import cell_sums
from skdpcluster.mechanisms import (
    exponential_mechanism,
    gaussian_mechanism,
    laplace_mechanism,
)

__all__ = [
    "NoisyMeans",
    "noisy_cluster_means",
    "noisy_means_of_sums",
    "one_median_clusters",
    "sparse_cluster_means",
    "sparse_means_of_sums",
    "sparsify_rows",
]

#: Disjoint cells: a replaced row leaves one cell and enters another (spec §5.6).
CELL_FACTOR = {"add_remove": 1.0, "replace_one": 2.0}
#: A refined centre is kept only if its expected noise displacement is at most this
#: fraction of the data radius (post-processing of the noisy count).
_ACCEPT_RELATIVE_ERROR = 0.5


@dataclass(frozen=True)
class NoisyMeans:
    """Noisy per-cluster centres, the noisy counts and the expected noise norm of each sum."""

    centers: np.ndarray
    counts: np.ndarray
    noise_norm: float
    events: list

    def shrunk(self, radius):
        r"""Centres shrunk towards the ball's centre: :math:`s_j = \Lambda^2/(\Lambda^2 + e_j^2)`.

        :math:`e_j` is the expected noise norm of centre j (noise norm over
        the noisy count). For a true mean of norm :math:`r \le \Lambda`, the
        factor :math:`r^2/(r^2 + e_j^2)` minimises the expected squared error
        of a linear shrinkage; :math:`r = \Lambda` never shrinks more than
        that. Post-processing; it matters where noise dominates (small
        clusters, large d).
        """
        error = self.noise_norm / np.maximum(self.counts, 1.0)
        return self.centers * (radius**2 / (radius**2 + error**2))[:, None]

    def accepted(self, radius):
        """Clusters whose expected noise displacement is at most half the radius ."""
        return (self.counts >= 1.0) & (
            self.noise_norm <= _ACCEPT_RELATIVE_ERROR * radius * np.maximum(self.counts, 1.0))


def noisy_cluster_means(X, labels, n_clusters, *, epsilon, delta, radius, mechanism,
                        neighbouring, rng, label):
    r"""Private recovery by noisy means (Algorithm 4, last step, with the spec's fix A5).

    For every cluster :math:`S_j` (disjoint), release the count with
    :math:`\mathrm{Lap}(\Delta_c/\varepsilon_c)` and the sum of its rows
    (:math:`\|x\| \le \Lambda`) with

    * ``"laplace"``: :math:`\mathrm{Lap}(\sqrt d\,\Delta\Lambda/\varepsilon_s)` per
      coordinate, since the L1 sensitivity of a sum of L2-bounded rows is
      :math:`\sqrt d\,\Lambda` (the paper's :math:`24T\Lambda/\varepsilon`
      misses the :math:`\sqrt d`); pure DP;
    * ``"gaussian"``: :math:`N(0, \sigma^2 I)` calibrated to L2 sensitivity
      :math:`\Delta\Lambda` and :math:`(\varepsilon_s, \delta)` (Balle & Wang 2018).

    :math:`\Delta = 1` under add/remove and 2 under replace-one (a replaced
    row leaves one cluster and enters another). The split
    :math:`\varepsilon_c = \varepsilon/(1 + \sqrt d)` (Laplace) or
    :math:`\varepsilon/(1 + d^{1/4})` (Gaussian) minimises the error of the
    ratio (spec A5). Centres are :math:`\tilde s_j/\max(\tilde n_j, 1)`
    projected onto :math:`B(0, \Lambda)`. Costs (epsilon, delta) in all
    (parallel composition over the clusters, Lemma 1).

    Returns
    -------
    NoisyMeans
    """
    return noisy_means_of_sums(*cell_sums(X, labels, n_clusters), epsilon=epsilon, delta=delta,
                               radius=radius, mechanism=mechanism, neighbouring=neighbouring,
                               rng=rng, label=label)


def noisy_means_of_sums(sums, counts, *, epsilon, delta, radius, mechanism, neighbouring, rng,
                        label):
    """:func:`noisy_cluster_means` from the exact per-cluster ``sums`` and ``counts``.

    The release of :func:`noisy_cluster_means`, for statistics reduced over
    chunks of rows (a Dask pass); ``sums`` has shape (n_clusters, n_features).
    """
    factor, n_features = CELL_FACTOR[neighbouring], sums.shape[1]
    share = 1.0 / (1.0 + (math.sqrt(n_features) if mechanism == "laplace" else n_features**0.25))
    noisy_counts, count_event = laplace_mechanism(
        counts, sensitivity=factor, epsilon=epsilon * share, rng=rng, label=f"{label}/counts",
        neighbouring=neighbouring)
    eps_sum = epsilon * (1.0 - share)
    if mechanism == "laplace":
        noisy_sums, sum_event = laplace_mechanism(
            sums, sensitivity=factor * math.sqrt(n_features) * radius, epsilon=eps_sum, rng=rng,
            label=f"{label}/sums", neighbouring=neighbouring)
        noise_norm = math.sqrt(2.0 * n_features) * sum_event.scale
    else:
        noisy_sums, sum_event = gaussian_mechanism(
            sums, sensitivity=factor * radius, epsilon=eps_sum, delta=delta, rng=rng,
            label=f"{label}/sums", neighbouring=neighbouring)
        noise_norm = math.sqrt(n_features) * sum_event.scale
    noisy_counts = np.reshape(noisy_counts, counts.shape)
    centers = np.reshape(noisy_sums, sums.shape) / np.maximum(noisy_counts, 1.0)[:, None]
    return NoisyMeans(_project_onto_ball(centers, 0.0, radius), noisy_counts, noise_norm,
                      [count_event, sum_event])


def _top_coordinates(scores, n_coords, *, epsilon, sensitivity, neighbouring, rng):
    """Algorithm 5's peeling: ``n_coords`` distinct indices, each by the exponential mechanism."""
    remaining, chosen, events = np.arange(len(scores)), [], []
    for _ in range(n_coords):
        index, event = exponential_mechanism(
            scores[remaining], epsilon=epsilon, sensitivity=sensitivity, rng=rng,
            label="highdim/sparse/select", neighbouring=neighbouring)
        chosen.append(remaining[index])
        remaining = np.delete(remaining, index)
        events.append(event)
    return np.array(chosen, dtype=np.intp), events


def sparse_cluster_means(X, labels, n_clusters, *, epsilon, coord_bound, sparsity, eta,
                         neighbouring, rng, label):
    r"""Private sparse recovery of every centre: Algorithm 5, in the spec's corrected form (A6).

    Rows have :math:`\|x\|_\infty \le \Lambda_\infty` and :math:`\|x\|_0 \le s`.
    Per cluster, on the coordinate **sums** :math:`S_j` (not the mean with
    the exact, leaking cluster size): :math:`m = \min(d, \lceil 2s/\eta\rceil)`
    coordinates are peeled by the exponential mechanism on :math:`|S_j[r]|`
    (sensitivity :math:`\Delta\Lambda_\infty`), each round with
    :math:`\varepsilon_{sel}/m`; their values get
    :math:`\mathrm{Lap}(\Delta s\Lambda_\infty/\varepsilon_{val})` (the L1 norm
    of a row is at most :math:`s\Lambda_\infty`), and the result is divided by
    a noisy count (:math:`\varepsilon_c = \varepsilon/(1 + \sqrt s)`) and
    clipped to the box. With :math:`\varepsilon' = \varepsilon - \varepsilon_c`,
    :math:`\varepsilon_{sel} = \varepsilon'/(1 + \eta/4)` and
    :math:`\varepsilon_{val} = \varepsilon' - \varepsilon_{sel}`: the paper's
    ratio, but the total is :math:`\varepsilon`, not
    :math:`\varepsilon(1 + \eta/4)`. :math:`\Delta` as in
    :func:`noisy_cluster_means`; the clusters compose in parallel.

    Returns
    -------
    NoisyMeans
    """
    return sparse_means_of_sums(*cell_sums(X, labels, n_clusters), epsilon=epsilon,
                                coord_bound=coord_bound, sparsity=sparsity, eta=eta,
                                neighbouring=neighbouring, rng=rng, label=label)


def sparse_means_of_sums(sums, counts, *, epsilon, coord_bound, sparsity, eta, neighbouring, rng,
                         label):
    """:func:`sparse_cluster_means` from the exact per-cluster ``sums`` and ``counts``."""
    factor, (n_clusters, n_features) = CELL_FACTOR[neighbouring], sums.shape
    n_coords = min(n_features, math.ceil(2 * sparsity / eta))
    eps_count = epsilon / (1.0 + math.sqrt(sparsity))
    eps_select = (epsilon - eps_count) / (1.0 + eta / 4.0)
    noisy_counts, count_event = laplace_mechanism(
        counts, sensitivity=factor, epsilon=eps_count, rng=rng, label=f"{label}/counts",
        neighbouring=neighbouring)
    chosen, select_events = [], []
    for j in range(n_clusters):  # disjoint clusters: the same events, paid once
        index, select_events = _top_coordinates(
            np.abs(sums[j]), n_coords, epsilon=eps_select / n_coords,
            sensitivity=factor * coord_bound, neighbouring=neighbouring, rng=rng)
        chosen.append(index)
    rows = np.arange(n_clusters)[:, None]
    values, value_event = laplace_mechanism(
        sums[rows, np.array(chosen)], sensitivity=factor * min(sparsity, n_coords) * coord_bound,
        epsilon=epsilon - eps_count - eps_select, rng=rng, label=f"{label}/values",
        neighbouring=neighbouring)
    noisy_counts = np.reshape(noisy_counts, counts.shape)
    centers = np.zeros_like(sums)
    centers[rows, np.array(chosen)] = np.reshape(values, (n_clusters, n_coords)) / np.maximum(
        noisy_counts, 1.0)[:, None]
    noise_norm = math.sqrt(2.0 * n_coords) * value_event.scale
    return NoisyMeans(np.clip(centers, -coord_bound, coord_bound), noisy_counts, noise_norm,
                      [count_event, *merge_repeats(select_events), value_event])


def one_median_clusters(X, labels, n_clusters, *, epsilon, delta, radius, neighbouring, rng,
                        label):
    r"""Private 1-median of every cluster (:func:`~skdpcluster.averaging.private_one_medians`).

    The k-median alternative to the noisy mean (spec §5.5,
    ``"dp_geometric_median"``): noisy projected gradient descent in
    :math:`B(0, \Lambda)` for all clusters at once, (epsilon, delta)-DP
    once in total (the clusters are disjoint; see that function).

    Returns
    -------
    NoisyMeans
    """
    centers, event = private_one_medians(
        X, labels, centers=np.zeros((n_clusters, X.shape[1])), radii=np.full(n_clusters, radius),
        epsilon=epsilon, delta=delta, rng=rng, neighbouring=neighbouring)
    return NoisyMeans(centers, np.full(n_clusters, np.inf), 0.0, [event.with_label(label)])


def sparsify_rows(X, sparsity, coord_bound):
    """Per-row map onto the sparse model: the ``sparsity`` largest entries by magnitude, clipped."""
    if sparsity < X.shape[1]:
        drop = np.argpartition(-np.abs(X), sparsity - 1, axis=1)[:, sparsity:]
        X = X.copy()
        np.put_along_axis(X, drop, 0.0, axis=1)
    return np.clip(X, -coord_bound, coord_bound)
