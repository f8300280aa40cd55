r"""Kernels of private high-dimensional clustering (Balcan, Dick, Liang, Mou & Zhang, ICML 2017).

Plain functions on validated arrays, used by
:class:`~skdpcluster.cluster._highdim.PrivateHighDimKMeans` and
:class:`~skdpcluster.cluster._highdim.PrivateHighDimKMedian`
(``spec/balcan_highdim.md``):

* :func:`project_rows`: the Johnson-Lindenstrauss step of Algorithm 4,
  :math:`y = Gx/\sqrt p` with the spec's scaling (A3), clipped to a ball.
* :func:`private_candidates`: Algorithms 1 and 2, the randomly shifted
  recursive cube partition with noisy counts, in :math:`O(n p)` per level
  with the exact binomial draw for empty cubes (spec §5.3) and the root cube
  :math:`v + [-2\Lambda, 2\Lambda]^p` (fix A2).
* :func:`swap_losses` and :func:`private_local_swap`: Algorithm 3, the
  private local search by swaps, scored in :math:`O(|C|\,n)` per round with
  bounded memory (spec §5.4), on the rows kept by :func:`swap_sample`.

Every noisy release goes through :mod:`skdpcluster.mechanisms`; the functions
return their :class:`~skdpcluster.mechanisms.PrivacyEvent` list and the
caller charges it. The guarantees are those of the idealised real-valued
mechanisms (see :mod:`skdpcluster.mechanisms`).
"""

import math
from dataclasses import dataclass, replace

import numpy as np
from sklearn.cluster import KMeans
from sklearn.utils import gen_batches

from skdpcluster.averaging import _project_onto_ball
from skdpcluster.averaging._common import project_into_ball
from skdpcluster.cluster._stable_init import (
    UNDERFLOW_MARGIN,
    fixed_order_projection,
    fixed_order_sq_distances,
    random_ball_points,
    rounding_margin,
    sure_nearest,
)
from skdpcluster.mechanisms import exponential_mechanism, laplace_mechanism, laplace_zero_cells_above
from skdpcluster.utils._compat import single_threaded

__all__ = [
    "CandidateSet",
    "cap_candidates",
    "initial_slots",
    "merge_repeats",
    "private_candidates",
    "private_local_swap",
    "ProjectedRows",
    "project_rows",
    "projected_rows",
    "slot_groups",
    "swap_losses",
    "swap_sample",
]

#: Elements of one block of rows (2 MiB of float64).
CHUNK_ELEMENTS = 2**18
#: At most this many empty cubes are activated per level; beyond it a uniform
#: subset is kept (post-processing of the level's release, spec §5.3). Reached
#: only with a user-supplied gamma far below the automatic one.
MAX_EMPTY_ACTIVATIONS = 100_000
#: Enumerate the children explicitly when there are at most this many.
_ENUMERATE_CHILDREN = 2**16
#: Values of one block of distances that stays in a core's cache (256 KiB of float64).
_CACHED_ELEMENTS = 2**15
#: Candidates x rows from which a swap round first tests which pairs it can skip: below, the
#: test costs more than the products it saves (small fits, such as digits' 21 x 1797).
_SKIP_TEST_MIN_VALUES = 2**20
#: Expected number of rows the local search scores (:func:`swap_sample`).
SWAP_SAMPLE_ROWS = 2**16
#: Restarts of the k-means on the (small) weighted candidate set.
_CORESET_N_INIT = 10
#: The unit roundoff of float64, the precision of the swap distances.
_FLOAT64_UNIT = 2.0**-53


def merge_repeats(events):
    """Identical events (same mechanism, parameters and label) merged into one with a ``count``."""
    merged = {}
    for event in events:
        key = replace(event, count=1)
        merged[key] = merged.get(key, 0) + event.count
    return [replace(key, count=count) for key, count in merged.items()]


# ---------------------------------------------------------------------------
# Projection (Algorithm 4, first step; spec A3)
# ---------------------------------------------------------------------------


def project_rows(X, n_components, clip_radius, rng, row_map=None):
    r"""Gaussian random projection :math:`y_i = G x_i/\sqrt p`, clipped to :math:`B(0, \Lambda_p)`.

    :math:`G \sim N(0, 1)^{p\times d}` is drawn from ``rng`` independently of
    the data. The paper's scaling :math:`1/\sqrt d` shrinks distances by
    :math:`\sqrt{p/d}`; :math:`1/\sqrt p` preserves them in expectation
    (spec A3). Clipping each row to the ball is a per-record map, so
    neighbouring data sets stay neighbours. With ``n_components >= d`` the
    rows are returned unprojected (and clipped).

    ``row_map`` (a per-row map, such as the clipping to the public bound)
    is applied to ``X`` block by block first, so its full-size output is
    never stored here.

    Returns
    -------
    Y : ndarray of shape (n_samples, min(n_components, n_features))
    """
    return project_with(X, projection_matrix(X.shape[1], n_components, rng), clip_radius,
                        row_map)


def projection_matrix(n_features, n_components, rng):
    r"""The matrix :math:`G^T/\sqrt p` of :func:`project_rows`, or ``None`` when ``p >= d``."""
    if n_components >= n_features:
        return None
    return rng.standard_normal((n_features, n_components)) / math.sqrt(n_components)



def _row_blocks(rows, width=None, elements=None):
    """Slices of blocks of ``rows`` with about ``elements`` values each (none if empty).

    ``elements`` defaults to :data:`CHUNK_ELEMENTS`.
    ``width``: values per row (default ``rows.shape[1]``). A Dask chunk may hold no rows
    (after a filter): scikit-learn's ``gen_batches`` refuses ``n=0``, which ended the private
    step of a high-dimensional fit after randomness was drawn.
    """
    if len(rows) == 0:
        return []
    width = rows.shape[1] if width is None else width
    elements = CHUNK_ELEMENTS if elements is None else elements
    return gen_batches(len(rows), max(1, elements // max(width, 1)))


def project_with(X, matrix, clip_radius, row_map=None):
    """:func:`project_rows` with its matrix already drawn (:func:`projection_matrix`).

    A map of each row, so a block of rows gives its rows of the whole projection.
    ``row_map`` may return its input itself; it is then copied before the clip.
    """
    if matrix is None:
        mapped = X if row_map is None else row_map(X)
        return _clip_in_place(np.array(X, dtype=float) if mapped is X else mapped, clip_radius)
    if row_map is None:
        return _clip_in_place(X @ matrix, clip_radius)
    Y = np.empty((len(X), matrix.shape[1]))
    for batch in _row_blocks(X):
        Y[batch] = row_map(X[batch]) @ matrix
    return _clip_in_place(Y, clip_radius)


def projected_rows(X, matrix, clip_radius, row_map=None, row_radius=None):
    r""":func:`project_with`'s projection, with what makes every decision on it row-exact.

    The matrix product's projection :math:`\mathrm{fl}(xM)` depends on the
    row's block (its shape and the row's place in it: under add/remove one
    row less moves every later row of its block, and a Dask chunking moves
    them too). Every discrete decision on a projected row (its cube, its
    float32 point and so its partition label) is instead that of its
    **canonical projection** :math:`f(x)`: :math:`xM` computed coordinate by
    coordinate in a fixed order (:func:`~skdpcluster.cluster._stable_init.fixed_order_projection`)
    and clipped to :math:`B(0, \Lambda_p)` as :func:`_clip_in_place` clips,
    a function of the row alone. It is computed only for the few rows the
    bound :func:`_projection_errors` cannot decide from the product
    (:class:`_CubeCoords`, :meth:`ProjectedRows.float32_values`).

    ``row_radius``: a public bound on the norms of the (mapped) rows, such
    as the fit's :math:`\Lambda` (no pass over the rows for their norms);
    ``None``: each row's own norm.

    Returns
    -------
    ProjectedRows
        With ``matrix=None`` the clipped rows, their own canonical projection.
    """
    if matrix is None:
        return ProjectedRows(project_with(X, None, clip_radius, row_map))
    if row_radius is not None:
        Y, sq_norms = project_with(X, matrix, clip_radius, row_map), np.full(len(X), row_radius**2)
    elif row_map is None:
        Y, sq_norms = _clip_in_place(X @ matrix, clip_radius), np.einsum("ij,ij->i", X, X)
    else:
        Y, sq_norms = np.empty((len(X), matrix.shape[1])), np.empty(len(X))
        for batch in _row_blocks(X):
            rows = row_map(X[batch])
            Y[batch] = rows @ matrix
            sq_norms[batch] = np.einsum("ij,ij->i", rows, rows)
        _clip_in_place(Y, clip_radius)
    return ProjectedRows(Y, _projection_errors(sq_norms, matrix, clip_radius),
                         _FixedOrderProjection(X, matrix, clip_radius, row_map), clip_radius)


def _projection_errors(sq_norms, matrix, clip_radius):
    r"""Per row, a bound :math:`e` on :math:`\|\mathrm{clip}(\mathrm{fl}(xM)) - f(x)\|` (computed).

    Both :math:`\mathrm{fl}(xM)` (any summation order, FMA or not) and the
    fixed-order projection are within :math:`\gamma_d\sum_k|x_k||M_{kj}|
    \le \gamma_d\|x\|\|M_{:,j}\|` of the exact :math:`(xM)_j`
    (:math:`\gamma_d = du/(1 - du)`, :math:`u = 2^{-53}`), so the two
    vectors are within :math:`2\gamma_d\|x\|\|M\|_F`. The projection onto
    a ball is 1-Lipschitz, and :func:`_clip_in_place` moves each vector by
    at most :math:`(5p + 29)u\Lambda_p` (to first order) from its exact
    projection: a row it keeps is proven inside; a row it scales
    (:func:`~skdpcluster.averaging._common.scale_into_ball`) comes out along
    itself up to :math:`6u` per coordinate (two roundings, each moved one
    float toward 0) with a norm within :math:`(2.5p + 18)u\Lambda_p` of
    :math:`\Lambda_p` (the factor :math:`\gamma = 1 - 2(p + 8)u` and the
    computed norm's :math:`(p/2 + 2)u`), and the exact projection of a
    scaled row inside the ball is within :math:`(2.5p + 5)u\Lambda_p` of
    the sphere (the threshold :math:`\Lambda_p^2(1 - 4(p + 2)u)`). So
    :math:`e = 1.01(2\gamma_d\|x\|\|M\|_F + 2(5p + 32)u\Lambda_p)` plus
    :data:`~skdpcluster.cluster._stable_init.UNDERFLOW_MARGIN`
    (products below the smallest normal float), with ``sq_norms`` the
    computed :math:`\|x\|^2` or a bound on them (the factor 1.01 covers
    their rounding and that of :math:`\|M\|_F`). It bounds each
    coordinate's difference as well, and :math:`e \ge 16u\Lambda_p`.
    """
    n_features, n_components = matrix.shape
    gamma = n_features * _FLOAT64_UNIT / (1.0 - n_features * _FLOAT64_UNIT)
    errors = np.sqrt(sq_norms)
    errors *= 2.0 * gamma * float(np.linalg.norm(matrix))
    errors += 2.0 * (5 * n_components + 32) * _FLOAT64_UNIT * clip_radius
    errors *= 1.01
    errors += UNDERFLOW_MARGIN
    return errors


class _FixedOrderProjection:
    """The canonical projection :math:`f(x)` of some of the raw rows (picklable)."""

    def __init__(self, X, matrix, clip_radius, row_map):
        self.X, self.matrix, self.clip_radius, self.row_map = X, matrix, clip_radius, row_map

    def __call__(self, index):
        rows = np.asarray(self.X[index], dtype=np.float64)
        if self.row_map is not None:
            rows = self.row_map(rows)
        return _clip_in_place(fixed_order_projection(rows, self.matrix), self.clip_radius)


class ProjectedRows:
    r"""Projected rows :attr:`values` and, per row, how far they may be from the canonical ones.

    ``errors[i]`` bounds :math:`\|` ``values[i]`` :math:`- f(x_i)\|`, each
    coordinate's difference too (:func:`_projection_errors`), and
    ``canonical(index)`` computes :math:`f(x_i)` for the rows ``index``.
    ``errors=None``: the values are the canonical projections themselves (an
    array given to :func:`private_candidates` or :class:`DistanceRows`);
    else ``radius`` is the clip radius :math:`\Lambda_p`.
    """

    def __init__(self, values, errors=None, canonical=None, radius=None):
        self.values, self.errors, self._canonical = values, errors, canonical
        self.radius, self.shape = radius, values.shape

    def __len__(self):
        return len(self.values)

    def canonical(self, index):
        """:math:`f(x_i)` of the rows ``index`` (an integer array), shape ``(len(index), p)``."""
        if self.errors is None:
            return np.asarray(self.values[index], dtype=np.float64)
        return self._canonical(index)

    def float32_rows(self, rows):
        """The float32 points of the rows ``rows`` (a slice or indices), each its canonical one.

        :meth:`float32_values`, with the unsure rows' points computed from
        :meth:`canonical`.
        """
        points, unsure = self.float32_values(rows)
        if len(unsure):
            points[unsure] = _float32_toward_zero(
                self.canonical(np.arange(len(self.values))[rows][unsure]))
        return points

    def float32_values(self, rows):
        r"""The rows' float32 points where they are sure, and the positions where they are not.

        A row's float32 point is :func:`_float32_toward_zero` of its
        canonical projection :math:`f(x)`, a function of the row alone.
        Rounding toward 0 is monotone and every coordinate of :math:`f(x)`
        lies in :math:`[y_j - e, y_j + e]` (:math:`y` = ``values``, :math:`e`
        = ``errors``): where both ends, computed as :math:`y_j \mp 2e` (wide
        enough for their own rounding since :math:`e \ge 16u\Lambda_p \ge
        16u|y_j|`; the largest :math:`e` of the rows is used for all of them,
        which only recomputes more), have the same :func:`_float32_cells` key
        on every coordinate, they round to the same float32 value, and so does
        every value between them: that value is the canonical one. At the
        other positions (returned) the point must be computed from
        :meth:`canonical`.

        Returns
        -------
        points : ndarray of float32, shape (n_rows, p)
        unsure : ndarray of int
            Positions in ``rows``.
        """
        values = np.asarray(self.values[rows], dtype=np.float64)
        points = _float32_toward_zero(values)
        if self.errors is None:
            return points, np.empty(0, dtype=np.intp)
        reach = float(_float32_reach(self.errors[rows]).max(initial=0.0))  # one for all: wider
        low, high = _float32_cells(values - reach), _float32_cells(values + reach)
        return points, np.unique(np.flatnonzero(low != high) // values.shape[1])


def _float32_cells(values):
    r"""Per float64 value, an integer that is equal for two values with the same float32 toward 0.

    The bits of the sign, the exponent and the 23 leading bits of the
    significand (the float64 bits shifted right by 29, in place; ``values``
    is overwritten). Rounding toward 0 to float32 keeps those bits of a
    float32 normal number and a prefix of them below (float32 subnormals),
    so equal keys give equal float32 values (values of different signs never
    have equal keys).
    """
    keys = values.view(np.int64)
    keys >>= 29
    return keys


def _float32_reach(errors):
    """Half-width of the interval around a projected value that must round to one float32."""
    return 2.0 * errors


def as_projected(Y):
    """``Y`` as :class:`ProjectedRows` (an array: its own canonical projection)."""
    return Y if isinstance(Y, ProjectedRows) else ProjectedRows(np.asarray(Y))


def _clip_in_place(Y, radius):
    r"""Rows of ``Y`` projected onto B(0, ``radius``) in place, block by block; returns ``Y``.

    :func:`~skdpcluster.averaging._common.project_into_ball` (every clipped
    row's exact norm at most ``radius``, as the swap's sensitivity
    :math:`(2\Lambda_p)^q` assumes; the radial scaling exceeded it by ulps)
    without temporaries of the size of ``Y``; a function of each row alone.
    """
    for batch in _row_blocks(Y):
        project_into_ball(Y[batch], radius)
    return Y


# ---------------------------------------------------------------------------
# Candidates (Algorithms 1 and 2; spec §2.1, §2.2, §5.3)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class CandidateSet:
    """Candidate centres with their released noisy counts (weights) and depths (0 = root)."""

    centers: np.ndarray
    weights: np.ndarray
    depths: np.ndarray

    @classmethod
    def concatenate(cls, parts):
        return cls(*(np.concatenate([getattr(p, name) for p in parts])
                     for name in ("centers", "weights", "depths")))

    def subset(self, index):
        return CandidateSet(self.centers[index], self.weights[index], self.depths[index])


@dataclass(frozen=True)
class _Level:
    """Public settings of one level of decisions of Algorithm 1."""

    epsilon: float
    gamma: float
    sensitivity: float
    neighbouring: str

    @property
    def scale(self):
        return self.sensitivity / self.epsilon


def _sample_empty_children(parents, occupied, n_pick, rng):
    """``n_pick`` distinct children of ``parents``, uniform among those not in ``occupied``.

    A uniform parent and a uniform offset in {0,1}^p give a uniform child;
    rejecting occupied and already chosen ones leaves a uniform sample
    without replacement of the empty children. Small trees are enumerated.
    """
    n_parents, p = parents.shape
    if n_pick == 0:
        return np.empty((0, p), dtype=np.int64)
    if n_parents * 2.0**p <= _ENUMERATE_CHILDREN:
        offsets = (np.arange(2**p)[:, None] >> np.arange(p)[None, :]) & 1
        children = (2 * parents[:, None, :] + offsets[None, :, :]).reshape(-1, p)
        empty = children[[row.tobytes() not in occupied for row in children]]
        return empty[rng.choice(len(empty), size=n_pick, replace=False)]
    chosen = {}
    while len(chosen) < n_pick:
        batch = 2 * (n_pick - len(chosen)) + 16
        rows = 2 * parents[rng.integers(n_parents, size=batch)] + rng.integers(0, 2, (batch, p))
        for row in rows:
            key = row.tobytes()
            if key not in occupied and key not in chosen and len(chosen) < n_pick:
                chosen[key] = row
    return np.array(list(chosen.values()), dtype=np.int64)


def _unsigned_type(n_bits):
    """The smallest unsigned NumPy integer type with at least ``n_bits`` bits."""
    return next(t for t in (np.uint8, np.uint16, np.uint32, np.uint64)
                if np.iinfo(t).bits >= n_bits)


class _CubeCoords:
    r"""Integer coordinates of the points' cubes at every depth 1..``n_levels`` of one shift.

    One pass over ``Y`` stores the coordinates at the deepest level,
    :math:`f = \mathrm{clip}(\lfloor (y - o)/w_L \rfloor, 0, 2^L - 1)` with
    :math:`w_a = e/2^a`, one coordinate per row (contiguous per axis) in the
    smallest unsigned type that holds L bits: one byte per coordinate for
    L <= 8, so :math:`np` bytes in all, an eighth of ``Y``. A shallower
    level is a shift of them, :math:`\lfloor (y - o)/w_a \rfloor = f \gg (L - a)`,
    exactly: dividing by :math:`w_L = w_a/2^{L-a}` scales the correctly
    rounded quotient by a power of two, :math:`\lfloor 2^s t\rfloor \gg s =
    \lfloor t\rfloor` for :math:`t \ge 0`, and the clips agree
    (:math:`t_a \ge 2^a` iff :math:`t_L \ge 2^L`), so every level sees the
    cells that the float computation at its own depth gives (for L <= 53,
    where :math:`2^L - 1` is a float).

    **A row's cubes are those of its canonical projection** :math:`f(x)`
    (:func:`projected_rows`), at every level, whatever block or chunk the row
    was projected in: the finest level's cell boundaries are all the
    boundaries. ``Y`` is an array (its own canonical projection) or
    :class:`ProjectedRows`; where every coordinate :math:`t` of a row is
    farther than :func:`_cube_margin` from an integer (its largest value in
    a block of rows is used for all of them: a wider margin only recomputes
    more rows), the floor of the coordinate of :math:`f(x)` is that of
    :math:`t`, and the other rows' coordinates are computed from :math:`f(x)`.
    """

    def __init__(self, Y, grid, n_levels):
        Y = as_projected(Y)
        origin, width = grid[0], grid[1] / 2**n_levels
        self.n_levels = n_levels
        self.fine_t = np.empty(Y.shape[::-1], dtype=_unsigned_type(n_levels))
        unsure = []
        if Y.errors is not None:  # |t| <= (|y| + |o|)/w, |y| <= Lambda_p up to the clip's rounding
            largest = (1.01 * Y.radius + float(np.abs(origin).max())) / width
        for batch in _row_blocks(Y.values):
            block = _grid_units(Y.values[batch], origin, width)
            floor = np.floor(block, out=block if Y.errors is None else None)
            if Y.errors is not None:
                unsure.append(batch.start + _near_integers(
                    block, floor, float(_cube_margin(Y.errors[batch], width, largest).max())))
            self.fine_t[:, batch] = self._clipped(floor).T
        unsure = np.concatenate(unsure) if unsure else []
        if len(unsure):
            self.fine_t[:, unsure] = self._clipped(np.floor(
                _grid_units(Y.canonical(unsure), origin, width))).T

    def _clipped(self, floor):
        r""":math:`\mathrm{clip}(\lfloor t\rfloor, 0, 2^L - 1)`, in place."""
        return np.clip(floor, 0, 2**self.n_levels - 1, out=floor)

    @property
    def n_dims(self):
        return self.fine_t.shape[0]

    def level(self, rows, depth):
        """The depth-``depth`` coordinates of the points ``rows``, read as an array."""
        return _CubeLevel(self, rows, depth)


def _grid_units(values, origin, width):
    """:math:`(y - o)/w`: the points' coordinates in cells of the finest level (a new array)."""
    block = values - origin
    block /= width
    return block


def _near_integers(units, floor, margin):
    """Rows with a coordinate within ``margin`` of an integer (``units`` is overwritten)."""
    units -= floor  # the fractions, exact for units >= 0
    near = units <= margin
    near |= units >= 1.0 - margin
    return np.unique(np.flatnonzero(near) // units.shape[1])


def _cube_margin(errors, width, largest):
    r"""Distance (in cells) to an integer below which a row's cube is taken from :math:`f(x)`.

    With :math:`t = \mathrm{fl}(\mathrm{fl}(y - o)/w)` and :math:`t'` the
    same of :math:`f(x)`, :math:`|y_j - f_j| \le e` (``errors``) gives
    :math:`|t - t'| \le e/w + 2.01u(|t| + |t'|) \le 1.01e/w + 4.03u(T + 1)`
    (the subtraction's and the division's rounding; :math:`T` = ``largest``
    bounds :math:`|t|`: :math:`(1.01\Lambda_p + \max_j|o_j|)/w`, the
    computed clip's exact norm at most :math:`\Lambda_p`, :func:`_clip_in_place`).
    Twice that, :math:`2e/w + 8u(T + 1)`, also covers
    the test's own rounding (:math:`t - \lfloor t\rfloor` is exact for
    :math:`t \ge 0`, and :math:`1 - m` rounds by :math:`u/2`): a row whose
    every fraction is in :math:`(m, 1 - m)` has :math:`\lfloor t'\rfloor =
    \lfloor t\rfloor`. The grid's clip only merges cells, so the clipped
    cubes agree too.
    """
    return 2.0 * errors / width + 8.0 * _FLOAT64_UNIT * (largest + 1.0)


class _CubeLevel:
    """The integer coordinates of the cubes of depth ``depth`` holding the points ``rows``.

    Indexing returns the int64 coordinates of the requested points only, so
    the functions below read it block by block, as they would an array.
    ``rows`` are increasing point indices, so n of them are all the points.
    """

    def __init__(self, cubes, rows, depth):
        self.cubes, self.rows, self.depth = cubes, rows, depth
        self.shape = (len(rows), cubes.n_dims)

    def __len__(self):
        return self.shape[0]

    def __getitem__(self, index):
        block = self.cubes.fine_t[:, self.rows[index]] >> (self.cubes.n_levels - self.depth)
        return np.ascontiguousarray(block.T, dtype=np.int64)

    def low_bit_keys(self):
        """Every point's child index in its parent, ``((coords & 1) << arange(p)).sum(axis=1)``."""
        shift, p = self.cubes.n_levels - self.depth, self.cubes.n_dims
        keys = np.zeros(len(self.rows), dtype=_unsigned_type(p))
        every_row = len(self.rows) == self.cubes.fine_t.shape[1]  # rows is arange(n)
        for axis, column in enumerate(self.cubes.fine_t):
            bits = (column if every_row else column[self.rows]) >> shift
            bits &= 1
            keys |= bits.astype(keys.dtype, copy=False) << axis
        return keys.astype(np.int64)


def _packed_keys(coords, weights, mask=-1):
    """``(coords & mask) @ weights`` (int64), block by block of :data:`CHUNK_ELEMENTS` values."""
    keys = np.empty(len(coords), dtype=np.int64)
    for batch in _row_blocks(coords):
        keys[batch] = (coords[batch] & mask) @ weights
    return keys


def _unique_rows(coords, depth):
    """``np.unique(coords, axis=0, return_inverse=True, return_counts=True)``, fast for small grids.

    When the p coordinates of ``depth`` bits each fit in 62 bits, every row
    is packed into one integer key (a 1-d sort instead of a lexicographic one).
    ``coords`` is an integer array or a :class:`_CubeLevel`.
    """
    p = coords.shape[1]
    if depth * p > 62:
        cells, inverse, counts = np.unique(coords[:], axis=0, return_inverse=True,
                                           return_counts=True)
        return cells, inverse.ravel(), counts
    keys = _packed_keys(coords, np.int64(1) << (depth * np.arange(p, dtype=np.int64)))
    _, first, inverse, counts = np.unique(
        keys, return_index=True, return_inverse=True, return_counts=True)
    return coords[first], inverse, counts


def _child_cells(coords, parent_of, n_parents, depth):
    """:func:`_unique_rows` of the children's coordinates by a histogram of the parents' children.

    A point's child is its parent's index (``parent_of``) and the low bit of
    each coordinate, :math:`p` bits: when the :math:`2^p` children of the
    ``n_parents`` parents are at most a few per point, one ``bincount`` of
    those keys replaces the sort of all points. Only the occupied children
    are then sorted, so cells, inverse and counts are exactly
    :func:`_unique_rows`'s. ``coords`` is an integer array or a :class:`_CubeLevel`.
    """
    p = coords.shape[1]
    n_keys = n_parents << p
    if n_keys > max(2 * len(coords), 2**16):
        return _unique_rows(coords, depth)
    if isinstance(coords, _CubeLevel):
        keys = coords.low_bit_keys()
    else:
        keys = _packed_keys(coords, np.int64(1) << np.arange(p, dtype=np.int64), mask=1)
    keys += parent_of << p
    counts = np.bincount(keys, minlength=n_keys)
    present = np.flatnonzero(counts)
    rank = np.zeros(n_keys, dtype=np.intp)
    rank[present] = np.arange(len(present))
    member = np.zeros(n_keys, dtype=np.intp)
    member[keys] = np.arange(len(keys))  # any point of a child has its coordinates
    cells, order, _ = _unique_rows(coords[member[present]], depth)
    sorted_counts = np.empty_like(counts[present])
    sorted_counts[order] = counts[present]
    return cells, order[rank][keys], sorted_counts  # compose the small tables first


def _level_step(cubes, alive, parents, depth, level, rng, parent_of):
    r"""One level of Algorithm 1 on rows in memory: :func:`release_level` of the children's counts.

    ``alive`` indexes the points lying in active cubes of depth ``depth - 1``,
    ``parents`` holds the integer coordinates of all those cubes (empty ones
    included) and ``parent_of`` the row of ``parents`` holding each alive
    point.

    Returns the new ``alive``, ``parents`` (the activated cubes'
    coordinates), their noisy counts, the event and the new ``parent_of``.
    """
    cells, inverse, counts = _child_cells(cubes.level(alive, depth), parent_of, len(parents),
                                          depth)
    new_parents, weights, event, active = release_level(cells, counts, parents, cubes.n_dims,
                                                        level, rng)
    keep = active[inverse]
    if not keep.all():  # no copies of n-vectors when every point stays in an active cube
        alive, inverse = alive[keep], inverse[keep]
    return alive, new_parents, weights, event, (np.cumsum(active) - 1)[inverse]


def release_level(cells, counts, parents, n_dims, level, rng):
    r"""The noisy decisions of one level of Algorithm 1, from the exact counts of its children.

    ``cells`` (sorted as :func:`_unique_rows` sorts them) are the occupied
    children of the active cubes ``parents`` and ``counts`` their numbers of
    points. A child is activated iff its count plus :math:`\mathrm{Lap}(b)`
    exceeds :math:`\gamma`; the children are disjoint, so one histogram
    release of L1 sensitivity ``level.sensitivity`` costs ``level.epsilon``
    (Theorem 2). Empty children are handled by the exact binomial draw; the
    noisy count of an activated empty child is :math:`\gamma + \mathrm{Exp}(b)`
    (memorylessness of the Laplace tail).

    Returns the activated cubes' coordinates (occupied ones first, in the
    order of ``cells``), their noisy counts, the event, and which of
    ``cells`` are active.
    """
    noisy, event = laplace_mechanism(
        counts.astype(float), sensitivity=level.sensitivity, epsilon=level.epsilon, rng=rng,
        label="highdim/candidates/level_counts", neighbouring=level.neighbouring)
    active = np.atleast_1d(noisy) > level.gamma
    n_empty = len(parents) * 2.0 ** n_dims - len(cells)
    _, empty_counts = laplace_zero_cells_above(
        n_empty, scale=level.scale, threshold=level.gamma, rng=rng,
        max_released=MAX_EMPTY_ACTIVATIONS)
    occupied = {row.tobytes() for row in cells}
    empty = _sample_empty_children(parents, occupied, len(empty_counts), rng)
    new_parents = np.concatenate([cells[active], empty])
    weights = np.concatenate([np.atleast_1d(noisy)[active], empty_counts])
    return new_parents, weights, event, active


class _RowLevels:
    """The levels of one shift over rows in memory: the points still in active cubes are kept."""

    def __init__(self, Y, grid, n_levels):
        self.cubes = _CubeCoords(Y, grid, n_levels)
        self.alive, self.parent_of = np.arange(len(Y)), np.zeros(len(Y), dtype=np.int64)

    def step(self, parents, depth, level, rng):
        """:func:`_level_step`: the activated children of ``parents``, their noisy counts, the event."""
        self.alive, cells, weights, event, self.parent_of = _level_step(
            self.cubes, self.alive, parents, depth, level, rng, self.parent_of)
        return cells, weights, event


def _residual_weights(levels):
    """Noisy count of each cube minus those of its activated children, at least 0 (post-processing).

    ``levels[a]`` holds the integer coordinates and noisy counts of the
    activated cubes of depth a. The residual is the mass a candidate stands
    for that no deeper candidate covers, the weight of a coreset point.
    """
    residuals = [weights.copy() for _, weights in levels]
    for depth in range(len(levels) - 1, 0, -1):
        index = {row.tobytes(): i for i, row in enumerate(levels[depth - 1][0])}
        parents = [index[row.tobytes()] for row in levels[depth][0] // 2]
        np.subtract.at(residuals[depth - 1], parents, levels[depth][1])
    return [np.maximum(r, 0.0) for r in residuals]


def _one_shift(Y, radius, n_levels, level, root_weight, rng):
    r"""Algorithm 1 on the root cube :math:`v + [-2\Lambda_p, 2\Lambda_p]^p`, :math:`v` uniform.

    :math:`v \sim U([-\Lambda_p, \Lambda_p]^p)` is drawn from ``rng``.

    The root always contains :math:`B(0, \Lambda_p)` (fix A2 of the spec);
    below it, every level with edge at most :math:`2\Lambda_p` has a grid
    offset that is uniform modulo the cell size. Returns the centres of the
    root and of every activated cube of depth 1..``n_levels``, weighted by
    their residual noisy counts (:func:`_residual_weights`).
    """
    p = Y.shape[1]
    shift = rng.uniform(-radius, radius, size=p)
    origin, edge = shift - 2.0 * radius, 4.0 * radius
    levels = [(np.zeros((1, p), dtype=np.int64), np.array([root_weight]))]
    grid = (origin, edge)
    steps = Y.cube_levels(grid, n_levels) if hasattr(Y, "cube_levels") else _RowLevels(
        Y, grid, n_levels)
    events = []
    for depth in range(1, n_levels + 1):
        if len(levels[-1][0]) == 0:
            break
        cells, weights, event = steps.step(levels[-1][0], depth, level, rng)
        events.append(event)
        levels.append((cells, weights))
    parts = [CandidateSet(origin + (cells + 0.5) * (edge / 2**depth), weights,
                          np.full(len(cells), depth))
             for depth, ((cells, _), weights) in enumerate(zip(levels, _residual_weights(levels)))]
    return CandidateSet.concatenate(parts), events


def private_candidates(Y, *, radius, n_shifts, n_levels, level_epsilon, gamma, count_sensitivity,
                       root_weight, neighbouring, rng):
    r"""Private candidate centres: Algorithm 2 (``n_shifts`` randomly shifted runs of Algorithm 1).

    Each run recursively halves every edge of the active cubes, starting from
    a randomly shifted root cube, and activates a child iff
    :math:`m + \mathrm{Lap}(\Delta/\varepsilon_1) > \gamma` (:math:`m` its
    number of points, :math:`\Delta` = ``count_sensitivity``: 1 under
    add/remove, 2 under replace-one, :math:`\varepsilon_1` =
    ``level_epsilon``), for at most ``n_levels`` levels. The candidates are
    the centres of the roots and of every activated cube, projected onto
    :math:`B(0, \Lambda_p)` (post-processing; needed for the sensitivity of
    Algorithm 3, spec A4), weighted by their residual noisy counts
    (:func:`_residual_weights`; ``root_weight`` stands for a root's count).

    **Privacy.** One level is one Laplace histogram over disjoint cubes, so
    it costs :math:`\varepsilon_1`; a run costs at most ``n_levels``
    :math:`\cdot\varepsilon_1` and the whole call at most
    ``n_shifts * n_levels * level_epsilon`` (Theorems 2 and 4, basic
    composition). The events list one Laplace release per level actually run.

    Parameters
    ----------
    Y : ndarray of shape (n_samples, p) or chunked projected rows
        Points in :math:`B(0, \Lambda_p)`; or an object with ``shape`` and
        ``cube_levels(grid, n_levels)`` whose ``step`` runs one level as a
        pass over chunks (:mod:`skdpcluster.cluster._highdim_chunked`).
    radius : float
        :math:`\Lambda_p`.
    n_shifts, n_levels : int
    level_epsilon, gamma, count_sensitivity, root_weight : float
    neighbouring : {"replace_one", "add_remove"}
    rng : numpy.random.Generator

    Returns
    -------
    candidates : CandidateSet
    events : list of PrivacyEvent
    info : dict
        ``max_depth``: the deepest activated cube.
    """
    level = _Level(level_epsilon, gamma, count_sensitivity, neighbouring)
    parts, events = [], []
    for _ in range(n_shifts):
        part, shift_events = _one_shift(Y, radius, n_levels, level, root_weight, rng)
        parts.append(part)
        events += shift_events
    found = CandidateSet.concatenate(parts)
    found = CandidateSet(_project_onto_ball(found.centers, 0.0, radius), found.weights,
                         found.depths)
    _, first = np.unique(found.centers, axis=0, return_index=True)
    info = {"max_depth": int(found.depths.max())}
    return found.subset(np.sort(first)), merge_repeats(events), info


def cap_candidates(candidates, max_candidates, minimum, radius, rng):
    """At most ``max_candidates`` (sampled by noisy count), at least ``minimum`` (padded).

    Both are post-processing: the cap samples without replacement with
    probability proportional to the residual noisy counts (spec §5.3), the
    padding adds data-independent uniform points of the ball (spec A8) so
    that every slot of the local search has a candidate to swap with.
    """
    if max_candidates is not None and len(candidates.centers) > max_candidates:
        weights = np.maximum(candidates.weights, 1e-12)
        keep = rng.choice(len(weights), size=max_candidates, replace=False,
                          p=weights / weights.sum())
        candidates = candidates.subset(np.sort(keep))
    missing = minimum - len(candidates.centers)
    if missing > 0:
        filler = random_ball_points(rng, missing, candidates.centers.shape[1], radius)
        candidates = CandidateSet.concatenate(
            [candidates, CandidateSet(filler, np.full(missing, 1e-12), np.full(missing, -1))])
    return candidates


def initial_slots(candidates, n_clusters, init, rng):
    """:math:`Z^{(0)}`: k i.i.d. uniform candidates (Algorithm 3), or a weighted k-means of them.

    ``"noisy_counts"`` (an extension of spec §5.3) runs k-means (k-means++
    seeding and Lloyd) on the candidates weighted by their residual noisy
    counts, a private coreset, and adds the k centres to the candidates as
    the start. It reads no data, so it is post-processing; the centres are
    convex combinations of candidates, so they stay in the ball.

    Returns
    -------
    candidates : CandidateSet
        ``candidates``, extended by the k-means centres for ``"noisy_counts"``.
    slots : ndarray of shape (n_clusters,)
    """
    if init == "uniform":
        return candidates, rng.integers(len(candidates.centers), size=n_clusters)
    weights = np.maximum(candidates.weights, 1e-12)
    coreset = KMeans(n_clusters, n_init=_CORESET_N_INIT,
                     random_state=int(rng.integers(2**31 - 1)))
    with single_threaded():  # a few thousand candidates: threads only cost
        labels = coreset.fit_predict(candidates.centers, sample_weight=weights)
    start = CandidateSet(coreset.cluster_centers_, np.bincount(labels, weights, n_clusters),
                         np.full(n_clusters, -2))
    slots = np.arange(len(candidates.centers), len(candidates.centers) + n_clusters)
    return CandidateSet.concatenate([candidates, start]), slots


# ---------------------------------------------------------------------------
# Local swap (Algorithm 3; spec §2.3, §5.4)
# ---------------------------------------------------------------------------


class DistanceRows:
    r"""Rows :math:`D[c, i] = \|y_i - C_c\|^{q}` (q = 2: k-means, 1: k-median), computed on demand.

    The points and the candidates are stored rounded toward 0 to float32
    (half the memory; toward 0, so that nothing leaves :math:`B(0,
    \Lambda_p)`), and those values are the points and candidates of the
    distances. A point is that of its row's canonical projection when ``Y``
    is :class:`ProjectedRows` (:meth:`ProjectedRows.float32_values`), a
    function of the row whatever block it was projected in. The distances
    are computed in float64, where a product of two float32 values is exact
    (48 significant bits, no underflow):

    * k-means: :math:`\|c\|^2 - 2c\cdot y + \|y\|^2`, a matrix product per
      block (the squared norms are computed once per point and candidate).
      Its rounding, at most :math:`(p + 2)2^{-53}S` (:attr:`scale`
      :math:`S`), can depend on the block's shape.
    * k-median: :math:`\sqrt{\sum_j (c_j - y_j)^2}`, element-wise in a fixed
      order (:func:`_euclidean`): a value is the same function of its
      candidate and point in any block, with a relative error of at most
      :math:`(p + 3)2^{-53}` (the square root of the expanded form would turn
      a block-dependent rounding near 0 into its square root).

    Nothing of size :math:`|C| \times n` is ever stored: :meth:`column_blocks`
    computes the requested candidates by cache-sized blocks of points.
    """

    def __init__(self, Y, centers, power):
        centers = _float32_toward_zero(np.asarray(centers, dtype=np.float64))
        # The candidates with their squared norms as a last coordinate (against a row of ones).
        self.augmented = np.empty((len(centers), centers.shape[1] + 1))
        self.centers, self.c_sq = self.augmented[:, :-1], self.augmented[:, -1]
        self.centers[:] = centers
        self.c_sq[:] = np.einsum("ij,ij->i", self.centers, self.centers)
        self.power = power
        Y = as_projected(Y)
        self.scaled_t = np.empty((Y.shape[1], len(Y)), dtype=np.float32)
        self.y_sq = np.empty(len(Y))
        unsure = []
        for batch in _row_blocks(Y.values):
            block, near = Y.float32_values(batch)
            self._store(batch, block)
            unsure.append(batch.start + near)
        unsure = np.concatenate(unsure) if unsure else []
        if len(unsure):  # all at once: the fixed-order projection costs d NumPy calls
            self._store(unsure, _float32_toward_zero(Y.canonical(unsure)))
        self.scale = (_norm_bound(self.c_sq, Y.shape[1]) + _norm_bound(self.y_sq, Y.shape[1]))**2

    def _store(self, columns, points):
        """The float32 ``points`` as the points ``columns``, with their squared norms."""
        self.scaled_t[:, columns] = -2.0 * points.T  # exact: a power of two
        points = points.astype(np.float64)
        self.y_sq[columns] = np.einsum("ij,ij->i", points, points)

    def __len__(self):
        return len(self.centers)

    def permuted(self, order):
        """The same distances with the points in ``order`` (a permutation or a subset)."""
        view = object.__new__(DistanceRows)
        view.__dict__.update(self.__dict__, scaled_t=np.ascontiguousarray(self.scaled_t[:, order]),
                             y_sq=self.y_sq[order])
        return view

    def _finish(self, block, y_sq):
        r"""Squared distances from :math:`\|c\|^2 - 2c\cdot y` (a block of products), in place."""
        block += y_sq
        return np.maximum(block, 0.0, out=block)

    def column_blocks(self, index):
        """``(columns, D[index, columns])`` for consecutive blocks of the points.

        The blocks hold about :data:`_CACHED_ELEMENTS` values and are one
        buffer, overwritten by the next block: the distances by pieces, in
        cache and without a new array per block.
        """
        centers = self.augmented[index]
        width = max(1, _CACHED_ELEMENTS // max(len(centers), len(self.augmented[0])))
        width = min(width, max(len(self.y_sq), 1))
        points = np.ones((len(self.scaled_t) + 1, width))
        block = np.empty((len(centers), width))
        work = np.empty_like(block) if self.power != 2 else None
        for start in range(0, len(self.y_sq), width):
            columns = slice(start, min(start + width, len(self.y_sq)))
            size = columns.stop - start
            out = block[:, :size]
            if self.power == 2:
                points[:-1, :size] = self.scaled_t[:, columns]
                np.matmul(centers, points[:, :size], out=out)
                yield columns, self._finish(out, self.y_sq[columns])
            else:
                yield columns, _euclidean(centers, self.scaled_t[:, columns], out, work[:, :size])

    def nearest(self, index):
        r"""For every point, the position in ``index`` of its nearest candidate (first on ties).

        **A function of the point alone** (the partition of Algorithm 3 that
        the recovery's noisy sums use, review R7 F): the first index of the
        smallest of the point's distances computed in a fixed order, its
        :func:`~skdpcluster.cluster._stable_init.fixed_order_sq_distances`
        to the candidates (k-means) or :func:`_euclidean` (k-median, the
        distances of :meth:`column_blocks` themselves). The points are
        functions of their rows (:meth:`ProjectedRows.float32_values`), but
        the k-means distances of :meth:`column_blocks` are a matrix
        product's, whose rounding depends on the block. They are within
        :math:`(\gamma_{p+1} + 2\gamma_p + u)(\|y\| + \|c\|)^2` of the
        exact squared distance (the products of float32 values are exact;
        the squared norms, the sum and the last addition round), the fixed-order
        values within :math:`(p + 2)u(\|y\| + \|c\|)^2`; twice their sum
        is below :func:`~skdpcluster.cluster._stable_init.rounding_margin`'s
        :math:`16(p + 4)u(\|y\| + \max_c\|c\|)^2`, so where the block's
        smallest value beats every other by more than that margin (plus
        :data:`~skdpcluster.cluster._stable_init.UNDERFLOW_MARGIN`) its index
        is the fixed-order label (the proof of
        :func:`~skdpcluster.cluster._stable_init.nearest_centers`), and the
        other points are compared in the fixed order.
        """
        nearest = np.empty(len(self.y_sq), dtype=np.intp)
        if self.power != 2:
            for columns, block in self.column_blocks(index):
                nearest[columns] = _column_argmin(block)[0]
            return nearest
        center_norm = math.sqrt(float(self.c_sq[index].max(initial=0.0)))
        margin = rounding_margin(len(self.scaled_t))
        unsure = []
        for columns, block in self.column_blocks(index):
            slack = np.sqrt(self.y_sq[columns])  # a block's slack: no temporary of n values
            slack += center_norm
            slack *= slack
            slack *= margin
            slack += UNDERFLOW_MARGIN
            nearest[columns], _, near = sure_nearest(block, slack)
            unsure.append(columns.start + near)
        unsure = np.concatenate(unsure) if unsure else []
        if len(unsure):
            points = self.scaled_t[:, unsure].T * np.float32(-0.5)  # the stored points, exactly
            nearest[unsure] = fixed_order_sq_distances(
                points.astype(np.float64), self.centers[index]).argmin(axis=1)
        return nearest

    def dominated(self, starts, slots, groups):
        r"""Which candidates are, on every point of a group, at least as far as its bound.

        The points are sorted by nearest slot: group g holds the points from
        ``starts[g]`` on, all nearest to slot ``groups[g]`` of ``slots``.
        Returns two boolean ``(n_candidates, len(starts))`` arrays: ``near[c,
        g]`` when, for every point y of group g, candidate c is at least as far
        as the group's slot, and ``second[c, g]`` when it is at least as far as
        some other slot. The first bound of :func:`swap_losses`, :math:`d_1`,
        is the distance to the group's slot; the second, :math:`d_2`, is at most
        the distance to any other slot. So where ``near`` (``second``) holds,
        :math:`\min(D_{cy}, d_1(y)) = d_1(y)` (:math:`d_2(y)`) for every point:
        :meth:`group_sums` adds the bound without computing :math:`D_{cy}`.

        **The test.** :math:`\|y - c\|^2 - \|y - z\|^2 = \|c\|^2 - \|z\|^2
        - 2y\cdot(c - z)` is affine in y, so on the ball :math:`B(\mu_g,
        R_g)` around the group's mean that holds its points it is at least
        :math:`\|c\|^2 - \|z\|^2 - 2\mu_g\cdot(c - z) - 2R_g\|c - z\|`
        (computed in float64 from the stored points and centres). The test
        asks that lower bound to be at least the margin :math:`m = 32(p +
        8)uS`, with :math:`u = 2^{-53}` and :math:`S` :attr:`scale`, a bound
        on every :math:`(\|c\| + \|y\|)^2`.

        **Why the computed values agree.** The products being exact, the
        k-means distances are :math:`\|c\|^2 - 2c\cdot y + \|y\|^2` with
        errors at most :math:`(\gamma_p + 2u)S` on either side
        (:math:`\gamma_n = nu/(1 - nu)`, any summation order, FMA or not),
        and the k-means form of :meth:`group_sums` compares :math:`\|c\|^2 -
        2c\cdot y` with :math:`\mathrm{fl}(b - \|y\|^2)`: together at most
        :math:`(3\gamma_p + 5u)S`. The k-median squares are within
        :math:`(p + 3)uS` of the exact ones, and the correctly rounded square
        root keeps their order. The test's own float64 evaluation errs by
        less than :math:`(p + 10)u\cdot 4S`, so the margin (about 5 times the
        sum of these) makes the computed distance to c at least the computed
        bound on every point: the minimum the per-point sum would take is
        the bound, bit for bit. A point's term in the loss is the bound
        whether or not its group is skipped, so the swap scores keep their
        sensitivity (:func:`private_local_swap`); what the other rows decide
        is only which terms are computed: for k-median nothing else, for
        k-means the block shape of a computed term, whose rounding is at most
        :math:`(p + 2)uS`.

        On separated data almost every (candidate, group) pair is skipped:
        candidates near another cluster are farther than that cluster's
        slot (issue #17).
        """
        slot_centers = self.centers[np.asarray(slots)]
        means, radii = self.group_balls(starts)
        margin = 32 * (self.centers.shape[1] + 8) * _FLOAT64_UNIT * self.scale
        mean_dots = means @ self.centers.T  # (groups, candidates)
        near = np.zeros((len(starts), len(self.centers)), dtype=bool)
        second = np.zeros_like(near)
        for slot, z in enumerate(slot_centers):
            gaps = np.linalg.norm(self.centers - z, axis=1)
            lower = (self.c_sq - z @ z) - 2.0 * (mean_dots - (means @ z)[:, None])
            lower -= 2.0 * radii[:, None] * gaps
            farther = lower >= margin
            own = groups == slot
            near[own] = farther[own]
            second[~own] |= farther[~own]
        return near.T, second.T

    def group_balls(self, starts):
        """Centre (mean) and radius of a ball holding each group of points (float64).

        The radius is the largest computed distance to the mean, enlarged by
        a relative :math:`2^{-40}` for its float64 rounding.
        """
        stops = np.append(starts[1:], len(self.y_sq))
        means = np.empty((len(starts), len(self.scaled_t)))
        radii = np.empty(len(starts))
        for g, (start, stop) in enumerate(zip(starts, stops)):
            points = self.scaled_t[:, start:stop].astype(np.float64)
            points *= -0.5  # the stored rows, exactly
            means[g] = points.mean(axis=1)
            points -= means[g][:, None]
            radii[g] = math.sqrt(np.einsum("ij,ij->j", points, points).max())
        return means, radii * (1.0 + 2.0**-40)

    def group_sums(self, starts, bounds, skips):
        r"""Per group of points, :math:`\sum_{i \in G_l} \min(D_{ci}, b_i)` for every candidate c.

        The groups are the runs of points beginning at ``starts``; one
        ``(n_candidates, len(starts))`` float64 array per bound ``b`` in
        ``bounds`` (arrays over the points). Where ``skip[c, l]``
        (one boolean array per bound, :meth:`dominated`) the minimum is the
        bound on every point, and the sum is the bound's; the other pairs
        are computed by blocks of candidates on the group's points. For
        k-means the squared norms of the points are taken out of the
        minimum, :math:`\min(D_{ci}, b_i) = \|y_i\|^2 + \min(\|c\|^2 -
        2c \cdot y_i, b_i - \|y_i\|^2)`, so a block is one matrix product
        (:math:`\|c\|^2` rides along as a last coordinate against a row of
        ones) and the norms are summed once per group: the same value up to
        the rounding of the distances (which the expanded form has anyway)
        and without the clamp at 0.
        """
        stops = np.append(starts[1:], len(self.y_sq))
        centers = self.augmented
        if self.power == 2:  # compare c^2 - 2c.y with b - y^2: no pass to add y^2 and clamp
            bounds = [bound - self.y_sq for bound in bounds]
        # A skipped pair's sum: the bound's, added as a computed pair's terms are (``sum``, not
        # ``reduceat``), so that skipping or not gives the same bits.
        sums = [np.repeat([[bound[start:stop].sum() for start, stop in zip(starts, stops)]],
                          len(self), axis=0) for bound in bounds]
        for g, (start, stop) in enumerate(zip(starts, stops)):
            group = slice(start, stop)
            computed = np.flatnonzero(~np.logical_and.reduce([skip[:, g] for skip in skips]))
            if not len(computed):  # gen_batches refuses 0 (every pair skipped: S = 0)
                continue
            if self.power == 2:
                points = _with_ones(self.scaled_t[:, group])
            for batch in gen_batches(len(computed), max(1, _CACHED_ELEMENTS // (stop - start))):
                index = computed[batch]
                if self.power == 2:
                    block = centers[index] @ points
                else:
                    block = np.empty((len(index), stop - start))
                    block = _euclidean(centers[index], self.scaled_t[:, group], block,
                                       np.empty_like(block))
                for position, (total, bound, skip) in enumerate(zip(sums, bounds, skips)):
                    needed = ~skip[index, g]
                    if not needed.all():
                        rows = block[needed]  # a copy
                    elif position == len(sums) - 1:
                        rows = block  # not read again: its minimum is taken in place
                    else:
                        rows = block.copy()
                    total[index[needed], g] = np.minimum(rows, bound[group], out=rows).sum(axis=1)
        if self.power == 2:
            offset = np.add.reduceat(self.y_sq, starts)
            sums = [total + offset for total in sums]
        return sums

    def loss(self, slots):
        """:math:`L(Z) = \\sum_i \\min_j D[z_j, i]`."""
        return math.fsum(block.min(axis=0).sum() for _, block in self.column_blocks(slots))


def _norm_bound(sq_norms, n_dims):
    r"""An upper bound on the norms of float32 vectors whose float64 squared norms are ``sq_norms``.

    The squares of float32 values are exact in float64, so a sum of
    ``n_dims`` of them is within :math:`\gamma_p \le 2pu` of the exact value
    (relative, any order; :math:`u = 2^{-53}`), and the exact squared norm
    is at most the computed one over :math:`1 - 2(p + 1)u` (infinite, so
    that nothing is skipped, past :math:`p \approx 2^{51}`).
    """
    if len(sq_norms) == 0:
        return 0.0
    shrink = 1.0 - 2.0 * (n_dims + 1) * _FLOAT64_UNIT
    return math.sqrt(float(sq_norms.max()) / shrink) if shrink > 0 else math.inf


def _float32_toward_zero(values):
    """``values`` in float32, each rounded toward zero: no coordinate, so no norm, grows.

    Rounding to nearest could put a row clipped to :math:`B(0, \\Lambda_p)`
    outside it by a relative :math:`2^{-24}`, and a term of the swap loss
    above the sensitivity by as much.
    """
    rounded = values.astype(np.float32)
    grew = np.abs(rounded) > np.abs(values)
    bits = rounded.view(np.int32)  # sign and magnitude: one less is the next float toward 0
    np.subtract(bits, grew, out=bits, casting="unsafe")
    return rounded


def _euclidean(centers, scaled_t, out, work):
    r"""Distances of ``centers`` to the points :math:`y = -\tfrac12` ``scaled_t``, into ``out``.

    Coordinate by coordinate, :math:`\sqrt{\sum_j (c_j - y_j)^2}`, with NumPy's
    element-wise operations in a fixed order: a value is the same function of
    its candidate and point wherever it sits in a block (a matrix product's
    rounding depends on the block's shape, and a square root near 0 turns an
    absolute error e of the square into :math:`\sqrt e`), and its relative
    error is at most :math:`(p + 3)u`. ``centers`` may carry a last column
    (the squared norm), which is not read.
    """
    for j in range(len(scaled_t)):
        target = out if j == 0 else work
        np.subtract(centers[:, j, None], scaled_t[j] * np.float32(-0.5), out=target)  # exact y_j
        np.multiply(target, target, out=target)
        if j:
            out += work
    return np.sqrt(out, out=out)


def _with_ones(scaled_t):
    """The float32 columns ``scaled_t`` in float64, with a last row of ones."""
    points = np.ones((len(scaled_t) + 1, scaled_t.shape[1]))
    points[:-1] = scaled_t
    return points


def _column_argmin(block):
    """``(block.argmin(axis=0), block.min(axis=0))`` of a few long rows, by one pass per row.

    The first minimum wins, as in ``argmin``; NumPy's ``argmin`` along axis 0
    reads the columns with a stride, slower for k rows of n.
    """
    index = np.zeros(block.shape[1], dtype=np.intp)
    best = block[0].copy()
    closer = np.empty(block.shape[1], dtype=bool)
    for row in range(1, len(block)):
        np.less(block[row], best, out=closer)
        np.putmask(index, closer, row)
        np.minimum(best, block[row], out=best)
    return index, best


def swap_sample(distances, n_noisy, rng, expected_rows=SWAP_SAMPLE_ROWS):
    r"""The rows the local search scores: each kept with probability :math:`\min(1, m/\tilde n)`.

    An extension of Algorithm 3 for speed (the paper scores every row):
    with :math:`m` = ``expected_rows`` the local search costs
    :math:`O(T|C|m)` instead of :math:`O(T|C|n)`. The noisy count
    :math:`\tilde n` sets the rate, so nothing exact about the data is used.

    **Privacy.** The coins are drawn from ``rng``, independent of the data,
    one per row (Poisson sampling). Fix the coins of the rows two
    neighbouring data sets share: the sampled loss
    :math:`L_S(Z) = \sum_{i \in S}\min_j D[z_j, i]` then differs in at most
    one term, in :math:`[0, \Delta]`, exactly as the full loss, so every
    exponential mechanism of :func:`private_local_swap` keeps its
    sensitivity :math:`\Delta` and is :math:`\varepsilon'`-DP for every
    value of the coins; a mixture over public coins keeps the guarantee
    (sampling also amplifies it; that is not claimed). The scores shrink by
    about q, so the exponential mechanisms are less sharp: with :math:`m = 2^{16}` the
    median k-means cost ratio on the 64-Gaussian mixture of
    ``benchmarks/bench_highdim.py`` (d = 100, k = 16, 4 seeds) went from
    1.154 to 1.156 at n = 10^5 and from 1.068 to 1.071 at n = 3·10^5.

    Parameters
    ----------
    distances : DistanceRows
        Distances to all the rows.
    n_noisy : float
        The noisy number of rows :math:`\tilde n` (a private release).
    rng : numpy.random.Generator
        Public randomness; not used when :math:`q = 1`.
    expected_rows : float, default=SWAP_SAMPLE_ROWS
        :math:`m`.

    Returns
    -------
    DistanceRows
        ``distances`` restricted to the kept rows (``distances`` itself when q = 1).
    """
    rate = expected_rows / max(float(n_noisy), 1.0)
    if rate >= 1.0:
        return distances
    return distances.permuted(np.flatnonzero(rng.random(len(distances.y_sq)) < rate))


def swap_losses(distances, slots):
    r"""Loss after every swap: ``out[c, j]`` = :math:`L(Z - \{z_j\} + \{C_c\})` (spec §5.4).

    With :math:`a_i` the nearest slot of point i, :math:`G_j = \{i: a_i = j\}`,
    :math:`d_1(i)` and :math:`d_2(i)` its nearest and second-nearest slot
    distances (:math:`+\infty` when k = 1): replacing :math:`z_j` by
    :math:`C_c` leaves the points of :math:`G_j` the choice of :math:`C_c`
    and their second-nearest slot, and the others that of :math:`C_c` and
    their nearest, so

    .. math::

        L(j \to c) = \sum_{l} A_{cl} - A_{cj} + B_{cj},\qquad
        A_{cl} = \sum_{i \in G_l} \min(D_{ci}, d_1(i)),\quad
        B_{cl} = \sum_{i \in G_l} \min(D_{ci}, d_2(i)).

    With the points sorted by :math:`a_i` (:func:`slot_groups`), A and B
    are sums over runs of points (:meth:`DistanceRows.group_sums`):
    :math:`O(|C|\,n)` per call instead of the naive :math:`O(|C|\,k^2 n)`,
    and no loop over the points. The (candidate, group) pairs that
    :meth:`DistanceRows.dominated` proves far from the group add the sum of
    the bound instead, the same terms (on separated data, almost all pairs;
    ``python -m benchmarks.bench_scaling --quick``: the high-dimensional fit
    at n = 10^5 went from 4.4 to 2.75 times ``KMeans``'s time), from
    :data:`_SKIP_TEST_MIN_VALUES` candidate-row pairs on.

    Returns
    -------
    ndarray of shape (n_candidates, n_clusters)
    """
    by_slot, starts, groups, d1, d2 = slot_groups(distances, slots)
    if len(distances) * len(d1) >= _SKIP_TEST_MIN_VALUES:
        skips = by_slot.dominated(starts, slots, groups)
    else:  # the same terms, all computed: cheaper than the test on few values
        skips = (np.zeros((len(distances), len(starts)), dtype=bool),) * 2
    near, second = by_slot.group_sums(starts, (d1, d2), skips)
    out = np.repeat(near.sum(axis=1)[:, None], len(slots), axis=1)
    out[:, groups] += second - near
    return out


def slot_groups(distances, slots):
    r"""The points sorted by nearest slot, with their nearest and second-nearest slot distances.

    Returns
    -------
    by_slot : DistanceRows
        ``distances`` with the points sorted by nearest slot (stable).
    starts : ndarray
        Where each group of points with the same nearest slot begins.
    groups : ndarray
        The slot (position in ``slots``) of each group.
    d1, d2 : ndarray
        Per sorted point, the distance to its nearest and second-nearest slot
        (:math:`+\infty` when k = 1).

    Notes
    -----
    The k-means nearest slot is taken from the block's matrix product, so a
    point within its rounding of two slots may change group with its block
    (under add/remove). That moves no discrete fate into a release: the
    point's terms in :func:`swap_losses` are then :math:`\min(D_{ci}, d)`
    with :math:`d` the distance to one of two slots equal up to that
    rounding, whichever group holds it (for the swap of either slot, its
    nearest remaining slot is the other one), and the pruning of
    :meth:`DistanceRows.dominated` changes which terms are computed, not
    their values. Only the distances' rounding, at most :math:`(p +
    2)u(\|y\| + \|c\|)^2` per term, depends on the blocks, the class the
    sensitivity arguments leave out.
    """
    nearest = np.empty(len(distances.y_sq), dtype=np.intp)
    d1, d2 = np.empty_like(distances.y_sq), np.empty_like(distances.y_sq)
    for columns, slot_rows in distances.column_blocks(slots):
        nearest[columns], d1[columns] = _column_argmin(slot_rows)
        slot_rows[nearest[columns], np.arange(slot_rows.shape[1])] = np.inf
        d2[columns] = slot_rows.min(axis=0)  # the second smallest (inf when k = 1)
    order = np.argsort(nearest.astype(np.int16 if len(slots) < 2**15 else np.intp), kind="stable")
    counts = np.bincount(nearest, minlength=len(slots))
    groups = np.flatnonzero(counts)
    starts = (np.cumsum(counts) - counts)[groups]
    return distances.permuted(order), starts, groups, d1[order], d2[order]


def private_local_swap(distances, initial, *, n_iter, epsilon, sensitivity, neighbouring, rng):
    r"""Algorithm 3 (localswap): private local search by swaps with the exponential mechanism.

    Starting from :math:`Z^{(0)}` (``initial``, k candidate indices), each of
    ``n_iter`` rounds picks a pair (slot j, candidate :math:`c \notin Z`)
    with probability proportional to

    .. math::

        \exp\left(-\frac{\varepsilon'\, L(Z - \{z_j\} + \{c\})}{2\Delta}\right),
        \qquad \varepsilon' = \frac{\varepsilon}{T + 1},

    and always swaps (scoring with :math:`-L(Z')` instead of the increment
    gives the same distribution). A last exponential mechanism with the same
    :math:`\varepsilon'` picks one iterate by :math:`-L(Z^{(t)})`.
    :math:`\Delta` = ``sensitivity`` is :math:`4\Lambda_p^2` (k-means) or
    :math:`2\Lambda_p` (k-median) when points and candidates lie in
    :math:`B(0, \Lambda_p)`, under add/remove and replace-one alike (one
    term of the loss, in :math:`[0, \Delta]`, appears, disappears or
    changes); the paper's "8 Lambda^2" is the denominator :math:`2\Delta`
    (spec A4). Unlike the paper, :math:`Z^{(0)}` is eligible in the final
    pick: it is a function of the candidates only, so the guarantee is
    unchanged.

    **Privacy.** :math:`T + 1` exponential mechanisms of :math:`\varepsilon'`
    each: :math:`\varepsilon`-DP by basic composition (Theorem 6).

    Returns
    -------
    slots : ndarray of shape (n_clusters,)
        Candidate indices of the chosen iterate.
    events : list of PrivacyEvent
    info : dict
        ``selected``: the index of the chosen iterate (0 is :math:`Z^{(0)}`).
    """
    epsilon_round = epsilon / (n_iter + 1)
    slots = np.asarray(initial, dtype=np.intp).copy()
    iterates, losses, events = [slots.copy()], [distances.loss(slots)], []
    # Blocks of a few rows x n: one BLAS thread is 5-15x faster than many (measured).
    with single_threaded():
        for _ in range(n_iter):
            slots, loss, event = _swap_round(distances, slots, epsilon_round, sensitivity,
                                             neighbouring, rng)
            iterates.append(slots)
            losses.append(loss)
            events.append(event)
    pick, event = exponential_mechanism(
        -np.asarray(losses), epsilon=epsilon_round, sensitivity=sensitivity, rng=rng,
        label="highdim/swap", neighbouring=neighbouring)
    return iterates[pick], merge_repeats(events + [event]), {"selected": pick}


def _swap_round(distances, slots, epsilon, sensitivity, neighbouring, rng):
    """One round of Algorithm 3: the new slots, their loss and the event."""
    k = len(slots)
    after = swap_losses(distances, slots)
    allowed = np.flatnonzero(~np.isin(np.arange(len(distances)), slots))
    index, event = exponential_mechanism(
        -after[allowed].ravel(), epsilon=epsilon, sensitivity=sensitivity, rng=rng,
        label="highdim/swap", neighbouring=neighbouring)
    candidate, slot = allowed[index // k], index % k
    slots = slots.copy()
    slots[slot] = candidate
    return slots, float(after[candidate, slot]), event
