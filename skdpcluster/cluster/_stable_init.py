r"""Initializers of the stable k-means / k-median estimators, and their shared private kernels.

Private-Stable-k-Means (Shechner 2021, Section 4; ``spec/shechner_stable.md``
§3.1) starts from the output B of *any* private k-means algorithm A. This
module holds the algorithms A that :class:`~skdpcluster.cluster._stable.PrivateStableKMeans`
and :class:`~skdpcluster.cluster._stable.PrivateStableKMedian` can use, and
the kernels they share with the estimators:

* :class:`GridInitializer`: DP-PCA, a multi-resolution private grid coreset
  and DP-Lloyd (spec §9.6, after the "hybrid" of Su et al. 2016); zCDP.
* :class:`KTupleInitializer`: :class:`~skdpcluster.KTupleClusterer` on the
  rows (Cohen et al. 2021, the reduction of ``spec/cohen_ktuple.md`` §8.4,
  steps 1-2, with disjoint blocks); (epsilon, delta)-DP, and may fail.
* :class:`PublicCenters`: centres known in advance; no budget.

**The initializer protocol.** An initializer is any object with

* an attribute ``privacy_model``: ``"zcdp"`` (it spends a zCDP budget
  ``rho``), ``"dp"`` (it spends an ``(epsilon, delta)`` budget) or
  ``"public"`` (it never looks at the data);
* a method ``fit_centers(X, n_clusters, *, budget, data_radius, neighbouring,
  rng)``. ``X`` holds the rows already centred at the public ``data_center``
  and projected into :math:`B(0, \Lambda)`, ``data_radius`` is
  :math:`\Lambda`, ``budget`` is ``{"rho": ...}`` or ``{"epsilon": ...,
  "delta": ...}``, ``neighbouring`` is ``"replace_one"`` or ``"add_remove"``
  and ``rng`` a :class:`numpy.random.Generator`, the only source of
  randomness it may use. It returns ``(centers, events)`` or ``(centers,
  events, info)``: ``centers`` of shape ``(n_clusters, n_features)`` in the
  coordinates of ``X`` (or ``None``, a private failure), ``events`` the
  :class:`~skdpcluster.mechanisms.PrivacyEvent` of every release, whose zCDP
  ``rho`` sum (``"zcdp"``, with ``epsilon = delta = 0`` on every event) or
  basic-composition sum (``"dp"``) is at most the budget under
  ``neighbouring``, and ``info`` a dict of public diagnostics. It must not
  use the exact number of rows for anything but shapes.

An optional attribute ``can_fail`` (default True) says whether
``fit_centers`` may return ``None``; the estimators reserve a fallback share
of the budget only for initializers that can fail.

The kernels (:func:`nearest_centers`, :func:`noisy_cell_sums`,
:func:`lloyd_step`, ...) trust their input: the estimators validate it.
"""

import math
import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.base import clone
from sklearn.cluster import KMeans
from threadpoolctl import threadpool_limits

from skdpcluster.accountant import BudgetAccountant
from skdpcluster.averaging import _project_onto_ball
from skdpcluster.cluster._ktuple import KTupleClusterer
from skdpcluster.mechanisms import zcdp_gaussian_mechanism
from skdpcluster.utils._data import as_rows
from skdpcluster.utils._warnings import warn_user

__all__ = [
    "GridInitializer",
    "KTupleInitializer",
    "PublicCenters",
    "lloyd_step",
    "nearest_centers",
    "noisy_cell_sums",
    "random_ball_points",
]

#: Rows per block of a distance computation: small blocks stay in cache and keep BLAS
#: single-threaded (measured 5-10x faster than 65536-row blocks at n = 1e6, k = d = 10).
CHUNK_ROWS = 4096
#: Up to this many cells, per-cell sums are one-hot matrix products, faster than one
#: bincount per column (n = 1e5, d = 10: 7 ms against 13 ms at 10 cells, 180 ms against
#: about 13 ms at 60 cells).
ONE_HOT_MAX_CELLS = 16
#: L2 sensitivities of k blocks of sums of vectors of norm <= 1, and of their counts,
#: over disjoint blocks (spec §9.3): a replaced row may leave one block and enter another.
SUM_COUNT_SENSITIVITY = {"replace_one": (2.0, math.sqrt(2.0)), "add_remove": (1.0, 1.0)}
#: L2 sensitivity of the upper triangle of sum x x^T for ||x|| <= 1 (spec §9.3).
SECOND_MOMENT_SENSITIVITY = {"replace_one": math.sqrt(2.0), "add_remove": 1.0}
#: Acceptance rule of a noisy mean (spec §9.5): N~ >= max(3 sigma_c, 1) and
#: (sigma_s sqrt(d) + sigma_c) / N~ <= 1/2.
ACCEPT_COUNT_STDS, ACCEPT_RELATIVE_ERROR = 3.0, 0.5


# ---------------------------------------------------------------------------
# Shared kernels
# ---------------------------------------------------------------------------


def nearest_centers(X, centers, sq_norms=None):
    r"""Index of the nearest centre of every row and the squared distance to it.

    Computed in blocks of :data:`CHUNK_ROWS` rows as
    :math:`\|x\|^2 - 2 x \cdot c + \|c\|^2`, clamped at 0 (spec §9.11).

    Returns
    -------
    labels : ndarray of shape (n_samples,)
    sq_distances : ndarray of shape (n_samples,)
    """
    if sq_norms is None:
        sq_norms = np.einsum("ij,ij->i", X, X)
    scaled = -2.0 * centers.T
    center_sq = np.einsum("ij,ij->i", centers, centers)
    labels = np.empty(len(X), dtype=np.intp)
    sq_distances = np.empty(len(X))
    for start in range(0, len(X), CHUNK_ROWS):
        rows = slice(start, start + CHUNK_ROWS)
        block = X[rows] @ scaled
        block += center_sq
        labels[rows] = block.argmin(axis=1)
        sq_distances[rows] = np.take_along_axis(block, labels[rows, None], axis=1)[:, 0]
    sq_distances += sq_norms
    np.maximum(sq_distances, 0.0, out=sq_distances)
    return labels, sq_distances


def center_gaps(centers):
    r""":math:`\hat D_i = \min_{j \ne i} \|c_i - c_j\|` (thesis step 2); ``inf`` when k = 1."""
    if len(centers) < 2:
        return np.full(len(centers), np.inf)
    gaps = np.linalg.norm(centers[:, None, :] - centers[None, :, :], axis=-1)
    np.fill_diagonal(gaps, np.inf)
    return gaps.min(axis=1)


def cell_sums(X, labels, n_cells):
    """Per-cell sums of the rows and counts; rows labelled ``n_cells`` or more are dropped.

    Few cells: one-hot products per block of rows (BLAS); many cells (grids):
    one weighted ``bincount`` per column.
    """
    labels = np.minimum(labels, n_cells)
    counts = np.bincount(labels, minlength=n_cells + 1)[:n_cells].astype(float)
    if n_cells <= ONE_HOT_MAX_CELLS:
        one_hot = np.eye(n_cells + 1)
        sums = np.zeros((n_cells + 1, X.shape[1]))
        for start in range(0, len(X), CHUNK_ROWS):
            rows = slice(start, start + CHUNK_ROWS)
            sums += one_hot[labels[rows]].T @ X[rows]
        return sums[:n_cells], counts
    sums = np.empty((n_cells, X.shape[1]))
    for j, column in enumerate(X.T):
        sums[:, j] = np.bincount(labels, weights=column, minlength=n_cells + 1)[:n_cells]
    return sums, counts


def random_ball_points(rng, n_points, n_features, radius):
    """Uniform points of the ball B(0, radius): data-independent filler centres."""
    directions = rng.standard_normal((n_points, n_features))
    directions /= np.maximum(np.linalg.norm(directions, axis=1, keepdims=True), 1e-300)
    return directions * radius * rng.random((n_points, 1)) ** (1.0 / n_features)


@dataclass(frozen=True)
class NoisyCells:
    """Noisy per-cell sums and counts and the noise scales they carry."""

    sums: np.ndarray
    counts: np.ndarray
    sigma_sum: float
    sigma_count: float
    events: list

    def accepted(self):
        r"""Cells whose noisy mean is trusted (spec §9.5, post-processing of the release).

        :math:`\tilde N_i \ge \max(3\sigma_c, 1)` and
        :math:`(\sigma_s\sqrt d + \sigma_c)/\tilde N_i \le 1/2`.
        """
        n_features = self.sums.shape[1]
        floor = max(ACCEPT_COUNT_STDS * self.sigma_count, 1.0)
        error = self.sigma_sum * math.sqrt(n_features) + self.sigma_count
        return (self.counts >= floor) & (error <= ACCEPT_RELATIVE_ERROR * self.counts)

    def means(self):
        """Noisy sums divided by the noisy counts (where accepted; 0 elsewhere)."""
        divisor = np.where(self.accepted(), self.counts, np.inf)[:, None]
        return self.sums / divisor


def noisy_cell_sums(sums, counts, *, rho, neighbouring, rng, label):
    r"""Release per-cell sums of vectors of norm <= 1 and the cell counts under a zCDP budget.

    Two Gaussian mechanisms on the concatenated blocks (spec §9.3 and §9.4):
    the sums with L2 sensitivity :math:`\Delta_s` and the counts with
    :math:`\Delta_c` (2 and :math:`\sqrt 2` under replace-one, 1 and 1 under
    add/remove, because the cells are disjoint). The budget is split as
    :math:`\rho_s : \rho_c = q : 1` with :math:`q = \sqrt d\,\Delta_s/\Delta_c`,
    which minimises :math:`d\sigma_s^2 + \sigma_c^2`, the mean squared error
    of a scaled mean; :math:`\sigma = \Delta/\sqrt{2\rho}` (Bun & Steinke
    2016, Proposition 1.6), so the pair is :math:`\rho`-zCDP.

    Parameters
    ----------
    sums : ndarray of shape (n_cells, n_features)
        Sums of vectors of norm at most 1 over disjoint cells.
    counts : ndarray of shape (n_cells,)
    rho : float
        > 0.
    neighbouring : {"replace_one", "add_remove"}
    rng : numpy.random.Generator
    label : str
        Prefix of the event labels.

    Returns
    -------
    NoisyCells
    """
    sum_sensitivity, count_sensitivity = SUM_COUNT_SENSITIVITY[neighbouring]
    ratio = math.sqrt(sums.shape[1]) * sum_sensitivity / count_sensitivity
    rho_sums, rho_counts = rho * ratio / (1.0 + ratio), rho / (1.0 + ratio)
    noisy_sums, sum_event = zcdp_gaussian_mechanism(
        sums, sensitivity=sum_sensitivity, rho=rho_sums, rng=rng, label=f"{label}/sums",
        neighbouring=neighbouring,
    )
    noisy_counts, count_event = zcdp_gaussian_mechanism(
        counts, sensitivity=count_sensitivity, rho=rho_counts, rng=rng, label=f"{label}/counts",
        neighbouring=neighbouring,
    )
    return NoisyCells(np.reshape(noisy_sums, sums.shape), np.reshape(noisy_counts, counts.shape),
                      sum_event.scale, count_event.scale, [sum_event, count_event])


def voronoi_sums(chunk, centers):
    """Per-Voronoi-cell sums and counts of a chunk of rows (one pass of a map-reduce)."""
    labels, _ = nearest_centers(chunk.X, centers, chunk.sq_norms)
    return cell_sums(chunk.X, labels, len(centers))


def lloyd_step(X, centers, *, data_radius, rho, neighbouring, rng, label):
    r"""One DP-Lloyd step on full Voronoi cells (spec §9.5 ``lloyd_step``; thesis footnote 13).

    Sums of :math:`x/\Lambda` and counts per Voronoi cell of ``centers`` go
    through :func:`noisy_cell_sums`; an accepted cell moves to
    :math:`\Pi_{B(0,\Lambda)}(\Lambda\tilde S_i/\tilde N_i)`, the others keep
    their centre. :math:`\rho`-zCDP. ``X`` is an array or a rows object of
    :mod:`skdpcluster.utils._data` (one pass: :func:`voronoi_sums`).

    Returns
    -------
    centers : ndarray of shape (n_clusters, n_features)
    fallback : ndarray of bool of shape (n_clusters,)
        True where a centre kept its previous value.
    noisy : NoisyCells
    """
    sums, counts = as_rows(X).map_reduce(voronoi_sums, centers)
    noisy = noisy_cell_sums(sums / data_radius, counts, rho=rho, neighbouring=neighbouring,
                            rng=rng, label=label)
    accepted = noisy.accepted()
    moved = _project_onto_ball(data_radius * noisy.means(), 0.0, data_radius)
    return np.where(accepted[:, None], moved, centers), ~accepted, noisy


# ---------------------------------------------------------------------------
# Initializers
# ---------------------------------------------------------------------------


class PublicCenters:
    """Initial centres known in advance (public data or an earlier release): no budget.

    Parameters
    ----------
    centers : array-like of shape (n_clusters, n_features)
        In the coordinates of the rows given to :meth:`fit_centers`.
    """

    privacy_model = "public"
    can_fail = False
    accepts_chunked_rows = True

    def __init__(self, centers):
        self.centers = centers

    def fit_centers(self, X, n_clusters, *, budget, data_radius, neighbouring, rng):
        """Return the public centres; no release, no event."""
        return np.array(self.centers, dtype=float), [], {}


#: Shares of the initializer budget (spec §9.4): DP-PCA, grid counts, coreset sums, DP-Lloyd.
GRID_SHARES = {"pca": 0.10, "counts": 0.12, "sums": 0.38, "lloyd": 0.40}
#: Grid resolutions tried (cells per axis), coarsest first (spec §9.6 step 3).
GRID_LEVELS = (2, 4, 8, 16, 32, 64)
#: Heavy cells must hold this share of the noisy total at the chosen level.
GRID_MASS_SHARE = 0.8
#: Largest tolerated noise of a coreset point relative to Lambda (tau_acc of step 4).
GRID_CORESET_ERROR = 0.3


class GridInitializer:
    r"""DP-PCA + private grid coreset + DP-Lloyd: the initializer A of spec §9.6.

    Not from the thesis: a practical private k-means whose output is good
    enough for the core steps on separated data (Su et al. 2016's "hybrid":
    private grid coreset, then DPLloyd). With a zCDP budget :math:`\rho_A`,
    split 0.10 / 0.12 / 0.38 / 0.40 between the four stages (the PCA share
    goes to the sums when no projection is needed):

    1. :math:`p = \min(d, \text{projection\_dim})`; if :math:`p < d`,
       Analyze-Gauss DP-PCA (Dwork, Talwar, Thakurta & Zhang 2014): the upper
       triangle of :math:`\sum_x (x/\Lambda)(x/\Lambda)^\top` plus Gaussian
       noise (sensitivity :math:`\sqrt 2` replace-one, 1 add/remove), and
       :math:`V` the top-p eigenvectors of the noisy matrix.
    2. For every level :math:`g \in \{2, 4, \dots, 64\}` with
       :math:`g^p \le` ``max_grid_cells``: noisy counts of the dense grid of
       :math:`g^p` cells over :math:`[-\Lambda, \Lambda]^p` in the projected
       coordinates :math:`y = xV`.
    3. Heavy cells :math:`H_g = \{c : \tilde n_c > \tau_g\}`,
       :math:`\tau_g = \max(\sigma_c(\sqrt{2\log g^p} + 2), \sigma_s\sqrt d/0.3)`;
       the finest level with :math:`|H_g| \ge k` and
       :math:`\sum_{H_g}\tilde n_c \ge 0.8\,\hat n` (:math:`\hat n` the noisy
       total of the coarsest level), else the level with the most heavy mass.
    4. Noisy sums of :math:`x/\Lambda` over the heavy cells of that level
       (disjoint cells: one Gaussian mechanism); coreset points
       :math:`\Pi_{B(0,\Lambda)}(\Lambda\tilde S_c/\tilde n_c)` with weights
       :math:`\tilde n_c`.
    5. Weighted k-means on the coreset (k-means++, ``n_restarts`` restarts,
       at most 100 Lloyd iterations; post-processing). With fewer than k heavy
       cells, the missing centres are uniform points of
       :math:`B(0, \Lambda/4)` and a warning says so.
    6. ``n_lloyd_steps`` DP-Lloyd steps (:func:`lloyd_step`), splitting the
       0.40 share evenly.

    Every release is a Gaussian mechanism calibrated as
    :math:`\sigma = \Delta/\sqrt{2\rho}`, so the whole initializer is
    :math:`\rho_A`-zCDP under the given neighbouring relation (adaptive
    composition, Bun & Steinke 2016, Lemma 2.3). The exact number of rows is
    never used: the total is a noisy count.

    Parameters
    ----------
    projection_dim : int, default=3
        Dimension p of the grid.
    n_lloyd_steps : int, default=2
        DP-Lloyd steps after the coreset.
    max_grid_cells : int, default=2**18
        Largest dense grid.
    n_restarts : int, default=10
        k-means++ restarts on the coreset.
    """

    privacy_model = "zcdp"
    can_fail = False
    #: ``fit_centers`` also takes a rows object of :mod:`skdpcluster.utils._data` (Dask input).
    accepts_chunked_rows = True

    def __init__(self, projection_dim=3, n_lloyd_steps=2, max_grid_cells=2**18, n_restarts=10):
        self.projection_dim = projection_dim
        self.n_lloyd_steps = n_lloyd_steps
        self.max_grid_cells = max_grid_cells
        self.n_restarts = n_restarts

    def fit_centers(self, X, n_clusters, *, budget, data_radius, neighbouring, rng):
        """Private initial centres of ``X`` (rows in B(0, data_radius)); see the class docstring.

        ``X`` is an array or a rows object of :mod:`skdpcluster.utils._data`:
        every stage is one pass of per-chunk sums (second moment, the grid
        counts of all levels, the heavy cells' sums, each Lloyd step).
        """
        rows = as_rows(X)
        n_features = rows.shape[1]
        shares = self._shares(n_features, budget["rho"])
        basis, events = self._projection(rows, shares["pca"], data_radius, neighbouring, rng)
        level, heavy, noisy_counts, count_events = self._heavy_cells(
            rows, basis, n_clusters, shares, data_radius, neighbouring, rng)
        points, weights, sum_event = self._coreset(
            rows, basis, level, heavy, noisy_counts, shares["sums"], data_radius, neighbouring,
            rng)
        centers = self._cluster_coreset(points, weights, n_clusters, data_radius, rng)
        centers, lloyd_events, fallbacks = self._lloyd(
            rows, centers, shares["lloyd"], data_radius, neighbouring, rng)
        info = {"grid_level": level, "n_heavy_cells": len(points),
                "projection_dim": n_features if basis is None else basis.shape[1],
                "lloyd_fallbacks": fallbacks}
        return centers, events + count_events + [sum_event] + lloyd_events, info

    # -- budget ---------------------------------------------------------------------
    def _shares(self, n_features, rho):
        shares = {name: share * rho for name, share in GRID_SHARES.items()}
        if min(self.projection_dim, n_features) >= n_features:
            shares["sums"] += shares.pop("pca")
            shares["pca"] = 0.0
        return shares

    def _noise_scales(self, n_features, shares, n_levels, neighbouring):
        sum_sensitivity, count_sensitivity = SUM_COUNT_SENSITIVITY[neighbouring]
        sigma_counts = count_sensitivity / math.sqrt(2.0 * shares["counts"] / n_levels)
        sigma_sums = sum_sensitivity / math.sqrt(2.0 * shares["sums"])
        return sigma_counts, sigma_sums

    # -- stages ---------------------------------------------------------------------
    def _projection(self, rows, rho, data_radius, neighbouring, rng):
        """Step 1: Analyze-Gauss DP-PCA; ``None`` when no projection is needed."""
        n_features = rows.shape[1]
        p = min(self.projection_dim, n_features)
        if p >= n_features:
            return None, []
        upper = np.triu_indices(n_features)
        moment = rows.map_reduce(_second_moment)[upper] / data_radius**2
        noisy, event = zcdp_gaussian_mechanism(
            moment, sensitivity=SECOND_MOMENT_SENSITIVITY[neighbouring], rho=rho, rng=rng,
            label="stable/grid_init/second_moment", neighbouring=neighbouring,
        )
        matrix = np.zeros((n_features, n_features))
        matrix[upper] = noisy
        matrix = matrix + np.triu(matrix, 1).T
        _, vectors = np.linalg.eigh(matrix)
        return vectors[:, ::-1][:, :p], [event]

    def _levels(self, p):
        return [g for g in GRID_LEVELS if g**p <= self.max_grid_cells] or [GRID_LEVELS[0]]

    @staticmethod
    def _cell_index(projected, g, data_radius):
        width = 2.0 * data_radius / g
        axes = np.clip(np.floor((projected + data_radius) / width), 0, g - 1).astype(np.int64)
        return axes @ (g ** np.arange(projected.shape[1], dtype=np.int64))

    def _heavy_cells(self, rows, basis, n_clusters, shares, data_radius, neighbouring, rng):
        """Steps 2-3: noisy counts per level; the chosen level, its heavy cells and counts.

        The counts of all levels are computed in one pass (:func:`_grid_counts`).
        """
        n_features = rows.shape[1]
        levels = self._levels(n_features if basis is None else basis.shape[1])
        sigma_counts, sigma_sums = self._noise_scales(n_features, shares, len(levels),
                                                      neighbouring)
        accuracy_floor = sigma_sums * math.sqrt(n_features) / GRID_CORESET_ERROR
        found, events = [], []
        all_counts = rows.map_reduce(_grid_counts, basis, tuple(levels), data_radius)
        for g, counts in zip(levels, all_counts):
            counts = counts.astype(float)
            noisy, event = zcdp_gaussian_mechanism(
                counts, sensitivity=SUM_COUNT_SENSITIVITY[neighbouring][1],
                rho=shares["counts"] / len(levels), rng=rng,
                label=f"stable/grid_init/counts_g{g}", neighbouring=neighbouring,
            )
            threshold = max(sigma_counts * (math.sqrt(2.0 * math.log(counts.size)) + 2.0),
                            accuracy_floor)
            heavy = np.flatnonzero(noisy > threshold)
            found.append((g, heavy, noisy, float(np.sum(noisy[heavy]))))
            events.append(event)
        total = float(np.sum(found[0][2]))
        admissible = [entry for entry in found
                      if len(entry[1]) >= n_clusters and entry[3] >= GRID_MASS_SHARE * total]
        level, heavy, noisy, _ = admissible[-1] if admissible else max(found, key=lambda e: e[3])
        return level, heavy, noisy, events

    def _coreset(self, rows, basis, g, heavy, noisy_counts, rho, data_radius, neighbouring,
                 rng):
        """Step 4: noisy sums of the heavy cells; coreset points and weights."""
        position = np.full(noisy_counts.size, len(heavy), dtype=np.intp)
        position[heavy] = np.arange(len(heavy))
        sums, _ = rows.map_reduce(_heavy_cell_sums, basis, g, data_radius, position,
                                  len(heavy))
        noisy, event = zcdp_gaussian_mechanism(
            sums / data_radius, sensitivity=SUM_COUNT_SENSITIVITY[neighbouring][0], rho=rho, rng=rng,
            label=f"stable/grid_init/cell_sums_g{g}", neighbouring=neighbouring,
        )
        weights = noisy_counts[heavy]
        points = _project_onto_ball(data_radius * np.reshape(noisy, sums.shape)
                                    / weights[:, None], 0.0, data_radius)
        return points, weights, event

    def _cluster_coreset(self, points, weights, n_clusters, data_radius, rng):
        """Step 5: weighted k-means++ on the coreset (post-processing)."""
        n_fit = min(n_clusters, len(points))
        filler = random_ball_points(rng, n_clusters - n_fit, points.shape[1], data_radius / 4.0)
        if n_fit < n_clusters:
            warn_user(
                f"GridInitializer: only {len(points)} heavy grid cells for n_clusters={n_clusters}"
                f"; {n_clusters - n_fit} initial centres are random points. There is too little "
                "data for this epsilon (or data_radius is much too large).", UserWarning)
        if n_fit == 0:
            return filler
        model = KMeans(n_clusters=n_fit, n_init=self.n_restarts, max_iter=100,
                       random_state=int(rng.integers(2**31 - 1)))
        # A few hundred points: native threads cost more than they give (8x, measured).
        with warnings.catch_warnings(), threadpool_limits(limits=1):
            warnings.simplefilter("ignore")  # duplicate coreset points
            model.fit(points, sample_weight=weights)
        return np.vstack([model.cluster_centers_, filler])

    def _lloyd(self, rows, centers, rho, data_radius, neighbouring, rng):
        """Step 6: DP-Lloyd steps; returns the centres, events and per-step fallback counts."""
        events, fallbacks = [], []
        for step in range(self.n_lloyd_steps):
            centers, fallback, noisy = lloyd_step(
                rows, centers, data_radius=data_radius, rho=rho / self.n_lloyd_steps,
                neighbouring=neighbouring, rng=rng, label=f"stable/grid_init/lloyd_{step + 1}")
            events += noisy.events
            fallbacks.append(int(fallback.sum()))
        return centers, events, fallbacks


def _second_moment(chunk):
    r""":math:`\sum x x^\top` of a chunk of rows (the DP-PCA statistic of step 1)."""
    return chunk.X.T @ chunk.X


def _projected(chunk, basis):
    return chunk.X if basis is None else chunk.X @ basis


def _grid_counts(chunk, basis, levels, data_radius):
    """Grid-cell counts of a chunk of rows at every level (steps 2-3), a tuple of arrays."""
    projected = _projected(chunk, basis)
    return tuple(np.bincount(GridInitializer._cell_index(projected, g, data_radius),
                             minlength=g ** projected.shape[1]) for g in levels)


def _heavy_cell_sums(chunk, basis, g, data_radius, position, n_heavy):
    """Sums and counts of a chunk's rows per heavy cell of level ``g`` (step 4).

    ``position`` maps a grid cell to its heavy-cell index, or to ``n_heavy`` (dropped).
    """
    index = GridInitializer._cell_index(_projected(chunk, basis), g, data_radius)
    return cell_sums(chunk.X, position[index], n_heavy)


class KTupleInitializer:
    r"""k-tuple clustering of the rows (Cohen et al. 2021) as the initializer A.

    The k-means reduction of Cohen et al. (``spec/cohen_ktuple.md`` §8.4)
    fits a non-private clusterer on many pieces of the data (GenCenters) and
    aggregates the k-tuples privately (B_tuple); its step 3 (averaging the
    Voronoi cells) is what the core steps of the stable estimators do. Here
    the pieces are the disjoint blocks of :class:`~skdpcluster.KTupleClusterer`
    (each row in one block, so its (epsilon, delta) guarantee under
    replace-one carries over to the rows without the sampling amplification
    of §8.5, which would use far fewer rows).

    The clusterer runs with its own throw-away accountant; its events are
    returned and charged once by the estimator. A failed private test returns
    ``None`` (the estimator then falls back, see its ``initializer``).

    Parameters
    ----------
    clusterer : KTupleClusterer, default=None
        Template whose settings (``method``, ``n_tuples``, ``separation``,
        ...) are kept; ``n_clusters``, ``epsilon``, ``delta``,
        ``data_radius``, ``data_center``, ``accountant``, ``random_state`` and
        ``on_failure`` are set by the estimator. ``None`` means
        ``KTupleClusterer()``. Only the provable modes
        (``accounting="corrected"``, ``lambda_mechanism="log_laplace"``) are
        accepted.
    base_estimator : estimator, default=None
        Overrides the template's ``base_estimator`` when not ``None``.
    beta : float, default=None
        Overrides the template's ``beta`` when not ``None``.
    n_jobs : int, default=None
        Overrides the template's ``n_jobs`` when not ``None``.
    """

    privacy_model = "dp"
    can_fail = True

    def __init__(self, clusterer=None, base_estimator=None, beta=None, n_jobs=None):
        self.clusterer = clusterer
        self.base_estimator = base_estimator
        self.beta = beta
        self.n_jobs = n_jobs

    def configured(self, n_clusters, budget, data_radius, rng=None):
        """The KTupleClusterer that will run, with validated parameters (public values only)."""
        template = KTupleClusterer() if self.clusterer is None else self.clusterer
        if template.accounting != "corrected" or template.lambda_mechanism != "log_laplace":
            raise ValueError(
                "the k-tuple initializer needs the provably private KTupleClusterer modes "
                "(accounting='corrected', lambda_mechanism='log_laplace'), got "
                f"accounting={template.accounting!r}, "
                f"lambda_mechanism={template.lambda_mechanism!r}.")
        overrides = {name: value for name, value in {
            "base_estimator": self.base_estimator, "beta": self.beta, "n_jobs": self.n_jobs,
        }.items() if value is not None}
        inner = clone(template).set_params(**overrides)
        inner.set_params(
            n_clusters=n_clusters, epsilon=budget["epsilon"], delta=budget["delta"],
            data_radius=data_radius, data_center=None, on_failure="warn",
            accountant=BudgetAccountant(), random_state=rng, verbose=0,
            fallback_share=0.0)  # the stable estimator runs its own fallback
        inner._validate_params()
        return inner

    def check_input(self, X, n_clusters, budget, data_radius):
        """Raise (before any randomness) for k < 2 or an X too small for the k-tuple test."""
        inner = self.configured(n_clusters, budget, data_radius)
        inner._check_n_clusters()
        inner._plan(X)

    def fit_centers(self, X, n_clusters, *, budget, data_radius, neighbouring, rng):
        """Fit the k-tuple clusterer; ``None`` centres when its private test failed."""
        if neighbouring != "replace_one":
            raise ValueError("the k-tuple initializer is private under replace-one only.")
        inner = self.configured(n_clusters, budget, data_radius, rng)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # NotSeparatedWarning: handled by the caller
            inner.fit(X)
        info = {"ktuple_status": inner.status_, "n_tuples": inner.n_tuples_}
        return inner.cluster_centers_, list(inner.privacy_ledger_), info
