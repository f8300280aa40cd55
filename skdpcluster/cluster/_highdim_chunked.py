r"""Passes of the high-dimensional estimators over rows chunked along a Dask array (issue #20).

:class:`~skdpcluster.cluster._highdim.PrivateHighDimKMeans` and
:class:`~skdpcluster.cluster._highdim.PrivateHighDimKMedian` read the rows
in four kinds of passes; on Dask input each is one map-reduce of small
per-chunk statistics (:mod:`skdpcluster.utils._data`), and every noisy
release is then made once, in the driver, by the same functions as in
memory:

* the **candidate levels** (Algorithm 1): per level, each chunk projects its
  rows (the public matrix :math:`G`), finds which of them lie in the active
  cubes of the previous level (a small public set) and counts them in the
  children of those cubes; the per-chunk histograms are merged into the
  exact histogram of the in-memory fit (:class:`CellCounts`), which
  :func:`~skdpcluster.cluster._highdim_candidates.release_level` noises;
* the **swap sample** (Algorithm 3 on a Poisson sample): each chunk draws
  its rows' coins from its generator of
  :func:`~skdpcluster.utils._data.chunk_generators` and returns its kept
  projected rows; the sample (about :math:`2^{16}` rows of p coordinates,
  whatever n) is scored in the driver;
* the **recovery and refinement** steps: per-cluster sums and counts of the
  rows assigned by the projected partition or by the nearest centre;
* the **selection** between trials: the cost of every trial's centres.

**Same release.** With one chunk every pass computes what the in-memory
fit computes, with the same generators: the release is the in-memory one,
bit for bit. With several chunks the level histograms are still exact
(integer counts), the sums are added chunk by chunk (equal up to float
rounding), and the swap sample's coins come from per-chunk generators
(``rng.spawn``): i.i.d. Bernoulli coins as in memory, so the release has the
in-memory distribution. The privacy analysis is unchanged: every statistic
is the in-memory one, and the coins are public randomness independent of
the data (:func:`~skdpcluster.cluster._highdim_candidates.swap_sample`).
"""

import copy

import numpy as np

from skdpcluster.cluster._highdim_candidates import (
    SWAP_SAMPLE_ROWS,
    DistanceRows,
    _child_cells,
    _CubeCoords,
    _packed_keys,
    _unique_rows,
    as_projected,
    projected_rows,
    release_level,
)
from skdpcluster.cluster._stable_init import cell_sums, nearest_centers, nearest_costs
from skdpcluster.utils._data import chunk_generators

__all__ = ["CellCounts", "ChunkedData", "ProjectedChunks"]


class CellCounts:
    """Exact counts of occupied cells of one depth; ``+`` merges two histograms.

    The cells are kept sorted as :func:`_unique_rows` sorts them, so a sum
    over chunks is the histogram of all their rows, in the in-memory order.
    """

    def __init__(self, cells, counts, depth):
        self.cells, self.counts, self.depth = cells, counts, depth

    def __add__(self, other):
        if not len(other.cells):
            return self
        if not len(self.cells):
            return other
        cells, inverse, _ = _unique_rows(np.concatenate([self.cells, other.cells]), self.depth)
        counts = np.zeros(len(cells), dtype=np.int64)
        np.add.at(counts, inverse, np.concatenate([self.counts, other.counts]))
        return CellCounts(cells, counts, self.depth)


class _Projector:
    """The projected rows of a block of raw rows: :func:`projected_rows` (picklable).

    Their cubes and float32 points are those of the rows' canonical
    projections, as in memory, whatever the chunking. ``row_radius``: the
    bound of the mapped rows' norms (``None``: their own norms).
    """

    def __init__(self, matrix, clip_radius, row_map, row_radius=None):
        self.matrix, self.clip_radius, self.row_map = matrix, clip_radius, row_map
        self.row_radius = row_radius

    def __call__(self, raw):
        return projected_rows(raw, self.matrix, self.clip_radius, self.row_map, self.row_radius)


def _parent_index(parents, coords, depth):
    """Row of ``parents`` (cubes of ``depth``) holding each row of ``coords``, -1 if none."""
    if depth * coords.shape[1] <= 62:
        weights = np.int64(1) << (depth * np.arange(coords.shape[1], dtype=np.int64))
        table, keys = _packed_keys(parents, weights), _packed_keys(coords, weights)
        order = np.argsort(table)
        where = np.minimum(np.searchsorted(table[order], keys), len(table) - 1)
        return np.where(table[order][where] == keys, order[where], -1)
    _, inverse = np.unique(np.concatenate([parents, coords]), axis=0, return_inverse=True)
    inverse = inverse.ravel()
    position = np.full(inverse.max() + 1, -1)
    position[inverse[:len(parents)]] = np.arange(len(parents))
    return position[inverse[len(parents):]]


def _chunk_children(chunk, projector, grid, n_levels, parents, depth):
    """The chunk's histogram over the children of the active cubes ``parents`` (one level).

    A row is in an active cube of depth ``depth - 1`` iff its cube is one of
    ``parents`` (every ancestor of an active cube is active), which is the
    set of rows the in-memory fit keeps from level to level.
    """
    cubes = _CubeCoords(projector(chunk.X), grid, n_levels)
    n_rows = len(chunk.X)
    if depth == 1:
        alive, parent_of = np.arange(n_rows), np.zeros(n_rows, dtype=np.int64)
    else:
        index = _parent_index(parents, cubes.level(np.arange(n_rows), depth - 1)[:], depth - 1)
        alive = np.flatnonzero(index >= 0)
        parent_of = index[alive].astype(np.int64)
    if not len(alive):
        return CellCounts(np.empty((0, cubes.n_dims), dtype=np.int64),
                          np.empty(0, dtype=np.int64), depth)
    cells, _, counts = _child_cells(cubes.level(alive, depth), parent_of, len(parents), depth)
    return CellCounts(cells, counts, depth)


class _ChunkedLevels:
    """The levels of one shift of Algorithm 1, each one pass over the chunks."""

    def __init__(self, projected, grid, n_levels):
        self.projected, self.grid, self.n_levels = projected, grid, n_levels

    def step(self, parents, depth, level, rng):
        """The activated children of ``parents``, their noisy counts and the level's event."""
        histogram = self.projected.rows.map_reduce(
            _chunk_children, self.projected.projector, self.grid, self.n_levels, parents, depth)
        new_parents, weights, event, _ = release_level(
            histogram.cells, histogram.counts, parents, self.projected.shape[1], level, rng)
        return new_parents, weights, event


def _sample_chunk(block, projector, generator, rate):
    """The float32 points of a block's rows kept by its Poisson coins (all when ``rate >= 1``).

    The points :class:`~skdpcluster.cluster._highdim_candidates.DistanceRows`
    stores (:meth:`~skdpcluster.cluster._highdim_candidates.ProjectedRows.float32_rows`),
    so the driver's distances are those of the in-memory fit.
    """
    Y = as_projected(projector(np.asarray(block, dtype=np.float64)))
    if rate >= 1.0:
        return Y.float32_rows(slice(None))
    return Y.float32_rows(np.flatnonzero(copy.deepcopy(generator).random(len(Y)) < rate))


class ProjectedChunks:
    """The projected rows of Dask rows, never stored: each pass projects the chunks again.

    Stands for the in-memory ``Y`` in
    :func:`~skdpcluster.cluster._highdim_candidates.private_candidates`
    (through :meth:`cube_levels`).
    """

    def __init__(self, rows, projector, n_components):
        self.rows, self.projector = rows, projector
        self.shape = (rows.shape[0], n_components)

    def cube_levels(self, grid, n_levels):
        return _ChunkedLevels(self, grid, n_levels)

    def swap_sample(self, n_noisy, rng, expected_rows=SWAP_SAMPLE_ROWS):
        r"""The rows :func:`~skdpcluster.cluster._highdim_candidates.swap_sample` keeps, gathered.

        Each row is kept with probability :math:`\min(1, m/\tilde n)` by a
        coin of its chunk's generator; the kept rows (about :math:`m` of
        them) are brought to the driver. With one chunk they are the rows
        the in-memory call keeps, in the same order.

        Returns
        -------
        ndarray of float32, shape (n_kept, p)
            The kept rows' float32 points (those of their canonical projections).
        """
        rate = expected_rows / max(float(n_noisy), 1.0)
        generators = chunk_generators(rng, len(self.rows.chunk_rows))
        parts = self.rows.map_chunks(_sample_chunk,
                                     [(self.projector, g, rate) for g in generators])
        return np.concatenate(parts)


class _ProjectedPartition:
    """Label of a raw row: its nearest centre in the projected space (Algorithm 3's partition)."""

    def __init__(self, projector, centers, power):
        self.projector, self.centers, self.power = projector, centers, power

    def __call__(self, raw, mapped):
        distances = DistanceRows(self.projector(raw), self.centers, self.power)
        return distances.nearest(np.arange(len(self.centers)))


class _NearestCenter:
    """Label of a mapped row: its nearest centre in the original space (a Lloyd step)."""

    def __init__(self, centers):
        self.centers = centers

    def __call__(self, raw, mapped):
        return nearest_centers(mapped, self.centers, np.einsum("ij,ij->i", mapped, mapped))[0]


def _chunk_cluster_sums(chunk, row_map, labeler, n_clusters):
    mapped = row_map(chunk.X)
    return cell_sums(mapped, labeler(chunk.X, mapped), n_clusters)


def _chunk_costs(chunk, row_map, center_sets, power):
    mapped = row_map(chunk.X)
    sq_norms = np.einsum("ij,ij->i", mapped, mapped)
    return np.array([float(np.sum(nearest_costs(mapped, centers, power,
                                                nearest_centers(mapped, centers, sq_norms))))
                     for centers in center_sets])


def _raw_nearest(block, centers):
    return nearest_centers(np.asarray(block, dtype=np.float64), centers)[0]


class ChunkedData:
    """Dask rows with the per-row map of the fit: the chunked counterpart of the in-memory data.

    Parameters
    ----------
    rows : DaskRows
        The raw rows.
    row_map : callable
        Per-row map onto the public bounds (picklable; run on the workers).
    radius : float
        The L2 bound of the mapped rows.
    """

    def __init__(self, rows, row_map, radius):
        self.rows, self.row_map, self.radius = rows, row_map, radius

    @property
    def n_features(self):
        return self.rows.shape[1]

    def project(self, matrix, clip_radius):
        """The projected rows (:class:`ProjectedChunks`; nothing is computed here)."""
        n_components = self.n_features if matrix is None else matrix.shape[1]
        return ProjectedChunks(
            self.rows, _Projector(matrix, clip_radius, self.row_map, self.radius), n_components)

    def swap_rows(self, Y, centers, power, n_noisy, rng):
        """Distances of the swap sample to ``centers``, and the partition by chosen slots."""
        distances = DistanceRows(Y.swap_sample(n_noisy, rng), centers, power)
        return distances, lambda slots: _ProjectedPartition(Y.projector, centers[slots], power)

    def cluster_sums(self, labels, n_clusters):
        """Per-cluster sums and counts of the mapped rows labelled by ``labels`` (one pass)."""
        return self.rows.map_reduce(_chunk_cluster_sums, self.row_map, labels, n_clusters)

    def nearest_labels(self, centers):
        return _NearestCenter(centers)

    def costs(self, center_sets, power):
        """:math:`\\sum_i \\min_j \\|x_i - z_j\\|^q` of every set of centres (one pass)."""
        return list(self.rows.map_reduce(_chunk_costs, self.row_map, center_sets, power))

    def training_labels(self, centers):
        """A lazy Dask array: the nearest of ``centers`` for every raw row (``labels_``)."""
        return self.rows.map_rows(_raw_nearest, centers, dtype=np.intp)
