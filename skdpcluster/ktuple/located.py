r"""Locate, then average: a practical private aggregation of k-tuples (issue #13).

The paper's aggregations (PrivatekNoisyCenters, PrivatekAverages) pay for
noise scaled to the whole domain: they need tuples that agree to
:math:`D/\Delta` with :math:`\Delta` in the hundreds, or about :math:`10^6`
tuples. Here the noise is scaled to the *cluster*:

1. **Width** (:func:`private_width`): AboveThreshold (sparse vector) over a
   public geometric sequence of grid widths, finest first, each with a few
   public random grid shifts; query :math:`q(w, s)` = number of tuple points
   in the k heaviest cells, each tuple counting at most once per cell.
2. **Locate** (:func:`private_sparse_histogram`): a Gaussian histogram of
   the occupied cells at that width, released only above a threshold
   :math:`\tau`; the released cells are joined into touching groups, the k
   heaviest give k coarse centres (post-processing).
3. **Average** (:func:`private_group_means`): every tuple gives at most one
   point to each located group (its point nearest to the group, if close
   enough); the points are clipped to a ball of radius :math:`R` around an
   anchor and averaged with Gaussian noise: the error is
   :math:`\propto R/T` instead of :math:`\propto \Lambda/T`. When the raw
   rows are at hand, :class:`~skdpcluster.KTupleClusterer` replaces this step
   by a private Lloyd step and core steps on the rows (:func:`refine_on_rows`,
   one chunked pass over the rows per step).

When :math:`d >` :data:`PROJECTION_DIM`, steps 1-2 run on a public random
orthonormal projection of the tuples to :data:`PROJECTION_DIM` dimensions,
and step 3 runs twice: first clipped to the data ball
:math:`B(0, \Lambda)` around the groups located in the projection, then to a
small ball around the first means.

Neighbouring relation: two tuple sets are neighbours when they differ in one
tuple (replace-one). Each data row is in one disjoint block and a block makes
one tuple, so a replace-one change of the rows changes at most one tuple.

Privacy (full proof in ``doc/ktuple.rst``, section "Locate, then average"): the
width search is :math:`\varepsilon_w`-DP; the Gaussian releases are
:math:`\rho`-zCDP in total and, together with the threshold of step 2,
:math:`(\rho + 2\sqrt{\rho\log(1/\delta_z)} + \log(1/(1-\delta_\tau)),
\delta_z + \delta_\tau)`-DP; basic composition adds :math:`\varepsilon_w`.
:func:`plan_located_budget` chooses the parts so that the sum is the
request, and a failed step spends exactly what success spends.
"""

import math
from dataclasses import dataclass
from functools import partial

import numpy as np
from scipy import sparse
from scipy.sparse.csgraph import connected_components
from scipy.special import ndtri

from skdpcluster.averaging import _project_onto_ball
from skdpcluster.ktuple._framework import KTupleResult, canonical_order
from skdpcluster.ktuple.averages import project_to_ball
from skdpcluster.mechanisms import (
    PrivacyEvent,
    above_threshold,
    zcdp_gaussian_mechanism,
    zcdp_rho_for_dp,
    zcdp_to_dp,
)
from skdpcluster.utils._compat import single_threaded
from skdpcluster.utils._progress import phase
from skdpcluster.utils._threads import fit_threads, ordered_map
from skdpcluster.utils._validation import check_epsilon_delta

__all__ = [
    "LocatedBudget",
    "histogram_threshold",
    "Location",
    "locate",
    "locate_and_average",
    "min_located_tuples",
    "plan_located_budget",
    "private_group_means",
    "private_located_average",
    "private_sparse_histogram",
    "private_width",
    "refine_on_rows",
    "unspent_events",
    "zcdp_composite_event",
]

#: Share of epsilon spent by the width search (pure DP).
WIDTH_EPSILON_SHARE = 0.15
#: Share of delta spent on the threshold of the sparse histogram.
THRESHOLD_DELTA_SHARE = 0.25
#: Largest share of epsilon that the threshold's delta may cost, :math:`\log(1/(1 - \delta_\tau))`.
THRESHOLD_EPSILON_CAP = 0.05
#: Share of the zCDP budget spent by the histogram; the rest averages the tuples, or, when
#: the caller refines on the raw rows, is left to the rows (see :func:`plan_located_budget`).
HISTOGRAM_RHO_SHARE = 0.5
ROWS_HISTOGRAM_RHO_SHARE = 0.4
#: The width search passes when the k heaviest cells hold this share of the T k tuple points.
MASS_FRACTION = 0.6
#: Candidate widths ``2 Lambda * WIDTH_RATIO**-j``, ``j < N_WIDTHS``, asked from the finest,
#: each with N_SHIFTS public random grid shifts.
WIDTH_RATIO = math.sqrt(2.0)
N_WIDTHS = 24
N_SHIFTS = 3
#: Above this dimension the location runs on a public random projection to this many dimensions.
PROJECTION_DIM = 6
#: A group of touching cells is split in two when it weighs this many times the median group.
SPLIT_RATIO = 1.5
#: A tuple point joins a located group within ``SELECT_FACTOR * w * sqrt(dim)`` of its centre.
SELECT_FACTOR = 2.0
#: A noisy count is trusted from this many standard deviations of its noise (and >= 1).
ACCEPT_COUNT_STDS = 3.0
#: zCDP budgets are shaved by this factor so float rounding never exceeds the request.
_RHO_SAFETY = 1.0 - 1e-10
#: Exact integer keys of grid cells (:func:`_row_keys`) stay below this.
_MAX_KEY = 2**62
#: A cell coordinate whose range passes this is replaced by its rank first.
_RANK_COLUMN_ABOVE = 2**31
#: Blocks of :data:`~skdpcluster.cluster._stable_init.CHUNK_ROWS` rows per chunk of a pass
#: over the rows (:func:`_row_cell_sums`, one thread's task): a whole number of blocks of the
#: distance kernels and of the cell sums, so their blocks and sums are exactly those of one
#: call on all the rows, whatever the chunks. A chunk is about 1/16 of the rows, between these
#: bounds: every thread holds a centred copy of its chunk (5 MB at 16 blocks, d = 10), which
#: at 16 blocks made the peak memory at n = 1e5 1.17 x scikit-learn's (0.94 x at 8). Measured at
#: n = 1e6, d = k = 10, one pass on an idle 2-core machine: one thread 0.093 s at 4 to 16
#: blocks; two threads 0.085 s at 4 blocks, 0.068-0.073 s at 16 (fewer, larger tasks: less
#: time holding the GIL), no better at 32 or 64.
_BLOCKS_PER_CHUNK = (4, 16)
#: After the location, private steps on the raw rows (:func:`refine_on_rows`): one Lloyd
#: step, then CORE_STEPS core steps with radius factor 1/3, as PrivateStableKMeans.
CORE_STEPS, CORE_RADIUS_FACTOR = 2, 1.0 / 3.0


# ---------------------------------------------------------------------------
# Budget
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LocatedBudget:
    r"""The public split of ``(epsilon, delta)`` between the steps.

    Attributes
    ----------
    epsilon_width : float
        Pure DP of the width search (AboveThreshold).
    delta_threshold : float
        :math:`\delta_\tau` of the sparse histogram's threshold; it also
        costs :math:`\log(1/(1-\delta_\tau))` of epsilon.
    rho_histogram, rho_average : float
        zCDP of the Gaussian histogram and of the tuple averages.
    rho_rows : float
        zCDP left for the caller's steps on the raw rows (0 for tuples only).
    delta_zcdp : float
        The delta at which the total zCDP is converted.
    """

    epsilon_width: float
    delta_threshold: float
    rho_histogram: float
    rho_average: float
    rho_rows: float
    delta_zcdp: float

    @property
    def epsilon_threshold(self):
        """:math:`\\log(1/(1-\\delta_\\tau))`, the epsilon side of the threshold (see the proof)."""
        return -math.log1p(-self.delta_threshold)

    @property
    def rho_total(self):
        """All the zCDP of the plan."""
        return self.rho_histogram + self.rho_average + self.rho_rows


def plan_located_budget(epsilon, delta, *, on_rows=False):
    r"""Split ``(epsilon, delta)`` between the steps (public values only).

    :math:`\varepsilon_w = 0.15\varepsilon`, :math:`\delta_\tau =
    \min(\delta/4, 1 - e^{-0.05\varepsilon})` (the second term only for a
    delta so large that the threshold's cost :math:`\log(1/(1-\delta_\tau))`
    would exceed :math:`0.05\varepsilon`: with :math:`\delta/4`, epsilon
    = 1e-3 and delta = 0.5 left a negative epsilon for the zCDP steps and
    were refused with a misleading message; review RA-13),
    :math:`\delta_z = \delta - \delta_\tau` and :math:`\rho` the largest zCDP with
    :math:`\varepsilon_w + \log(1/(1-\delta_\tau)) + \rho + 2\sqrt{\rho\log(1/\delta_z)}
    \le \varepsilon`. On tuples only, :math:`\rho` is split evenly between the
    histogram and the averages; with ``on_rows=True`` the histogram gets
    40 % and the rest is left for the caller's steps on the raw rows
    (which average thousands of rows instead of hundreds of tuples).

    Returns
    -------
    LocatedBudget
    """
    epsilon, delta = check_epsilon_delta(epsilon, delta, allow_zero_delta=False)
    delta_threshold = min(THRESHOLD_DELTA_SHARE * delta,
                          -math.expm1(-THRESHOLD_EPSILON_CAP * epsilon))
    epsilon_width = WIDTH_EPSILON_SHARE * epsilon
    epsilon_zcdp = epsilon - epsilon_width + math.log1p(-delta_threshold)
    delta_zcdp = delta - delta_threshold
    rho = zcdp_rho_for_dp(epsilon_zcdp, delta_zcdp) * _RHO_SAFETY
    if not ROWS_HISTOGRAM_RHO_SHARE * rho > 0:
        raise ValueError(
            f"epsilon={epsilon!r} is too small for the located method: its zCDP share underflows "
            "to 0 (re-review V3: a ZeroDivisionError); use a larger epsilon.")
    if on_rows:
        histogram = ROWS_HISTOGRAM_RHO_SHARE * rho
        return LocatedBudget(epsilon_width, delta_threshold, histogram, 0.0, rho - histogram,
                             delta_zcdp)
    histogram = HISTOGRAM_RHO_SHARE * rho
    return LocatedBudget(epsilon_width, delta_threshold, histogram, rho - histogram, 0.0,
                         delta_zcdp)


def zcdp_composite_event(events, delta):
    """The zCDP releases composed (Bun & Steinke 2016, Lemma 2.3) and converted once (Prop. 1.3)."""
    rho = math.fsum(event.rho for event in events if event.rho is not None)
    return PrivacyEvent(
        "zcdp_composition", zcdp_to_dp(rho, delta), delta, rho=rho, label="located/zcdp_total",
        details={"composition": "zcdp", "conversion": "Bun & Steinke 2016, Proposition 1.3"},
    )


def histogram_threshold(sigma, k, delta_threshold):
    r"""The release threshold :math:`\tau = 1 + \sigma\,\Phi^{-1}(1 - \delta_\tau/k)`.

    A cell occupied by one tuple only has count 1, so it passes with
    probability :math:`\delta_\tau/k`; a replaced tuple has at most k such
    cells.
    """
    # scipy.stats.norm.isf(q) is -ndtri(q), without its per-call overhead (0.4 ms)
    return 1.0 + sigma * -float(ndtri(delta_threshold / k))


def min_located_tuples(k, epsilon, delta, *, on_rows=False):
    r"""The fewest tuples with which all k groups can pass the histogram threshold.

    A group holds at most one point of each of the T tuples, so its cell
    count is at most T, and it is released only if its noisy count exceeds
    :math:`\tau` (:func:`histogram_threshold`). Below :math:`T = \tau +
    2\sigma` a group of all T tuples is released with probability under
    2.3 %, so the method cannot work; this is a function of public values only.

    Returns
    -------
    int
    """
    budget = plan_located_budget(epsilon, delta, on_rows=on_rows)
    sigma = math.sqrt(2 * k) / math.sqrt(2.0 * budget.rho_histogram)
    return math.ceil(histogram_threshold(sigma, k, budget.delta_threshold) + 2.0 * sigma)


# ---------------------------------------------------------------------------
# Grids
# ---------------------------------------------------------------------------


def _candidate_widths(data_radius):
    """The public widths, finest first."""
    return 2.0 * data_radius * WIDTH_RATIO ** -np.arange(N_WIDTHS)[::-1].astype(float)


def _public_projection(n_features, rng):
    """A uniformly random orthonormal (p, d) map (public randomness); None when d <= PROJECTION_DIM."""
    if n_features <= PROJECTION_DIM:
        return None
    basis, _ = np.linalg.qr(rng.standard_normal((n_features, PROJECTION_DIM)))
    return basis.T


def tuple_cell_counts(points, width, shift):
    """Occupied cells of a shifted grid and how many tuples have a point in each.

    Parameters
    ----------
    points : ndarray of shape (n_tuples, k, p)
    width : float
    shift : ndarray of shape (p,)

    Returns
    -------
    cells : ndarray of int of shape (n_occupied, p)
        Integer cell coordinates: cell ``c`` is ``shift + width * [c, c + 1)``,
        in the byte order of the rows (that of :func:`numpy.unique` on them).
    counts : ndarray of shape (n_occupied,)
        Number of tuples with at least one point in the cell (each tuple counts once).
    """
    n_tuples, k, p = points.shape
    cells = np.floor((points - shift) / width).astype(np.int64).reshape(-1, p)
    keys = _row_keys(cells).reshape(n_tuples, k)
    same = keys[:, :, None] == keys[:, None, :]  # (n_tuples, k, k)
    first = ~np.any(np.tril(same, k=-1), axis=2).ravel()  # no earlier point of the tuple there
    _, index, counts = np.unique(keys.ravel()[first], return_index=True, return_counts=True)
    occupied = cells[first][index]
    order = _byte_order(occupied)
    return occupied[order], counts[order].astype(float)


def _row_keys(cells):
    """One int64 per row of an integer array, equal exactly when the rows are equal.

    Mixed-radix packing of the columns (each offset by its minimum). When the
    packed value would pass 2**62, the key so far is replaced by its rank
    among the distinct keys (:func:`numpy.unique`), which keeps it exact and
    small; so is a column whose own range passes 2**31.
    """
    keys, radix = np.zeros(len(cells), dtype=np.int64), 1
    if not len(cells):
        return keys
    for column in cells.T:
        low, high = int(column.min()), int(column.max())
        if high - low >= _RANK_COLUMN_ABOVE:
            column = np.unique(column, return_inverse=True)[1]
            low, high = 0, int(column.max())
        span = high - low + 1
        if radix * span > _MAX_KEY:
            keys = np.unique(keys, return_inverse=True)[1]
            radix = int(keys.max()) + 1
        keys = keys * span + (column - low)
        radix *= span
    return keys


def _byte_order(rows):
    """The permutation that sorts distinct rows as :func:`numpy.unique` sorts their bytes.

    The released cells keep the order the histogram noise was always drawn in.
    """
    rows = np.ascontiguousarray(rows)
    keys = rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()
    return np.unique(keys, return_index=True)[1]


class _GridCounter:
    """:func:`tuple_cell_counts` of fixed points, remembering the last grid.

    The width search's passing grid is the histogram's: :func:`locate`
    counts it once.
    """

    def __init__(self, points):
        self.points = points
        self._last = (None, None)

    def __call__(self, width, shift):
        key = (float(width), np.asarray(shift).tobytes())
        if self._last[0] != key:
            self._last = (key, tuple_cell_counts(self.points, width, shift))
        return self._last[1]


def _heaviest_mass(counts, k):
    return float(np.sum(np.sort(counts)[-k:]))


# ---------------------------------------------------------------------------
# Step 1: width
# ---------------------------------------------------------------------------


def private_width(points, *, data_radius, epsilon, rng, mass_fraction=MASS_FRACTION,
                  cell_counts=None):
    r"""The finest public grid at which k cells hold most tuple points: AboveThreshold.

    The queries are the public grids (width :math:`w`, shift :math:`s`),
    :data:`N_SHIFTS` random shifts per width, widths from the finest;
    :math:`q(w, s)` = the sum of the k largest cell counts of
    :func:`tuple_cell_counts` on that grid. Several shifts per width let a
    grid whose boundaries cut through the groups be skipped without
    coarsening (AboveThreshold's cost does not depend on the number of
    queries).
    *Sensitivity* :math:`k`: a tuple has a point in at most k cells and
    counts once in each, so removing it lowers at most k counts by 1 and the
    sum of the k largest by at most k; adding one raises it by at most k;
    a replacement is one of each, and :math:`q` is monotone in every count,
    so :math:`|q(S) - q(S')| \le k`. Threshold: ``mass_fraction * T * k``.
    The release is :math:`\varepsilon`-DP (Dwork & Roth 2014, Theorem 3.23),
    pass or fail.

    Parameters
    ----------
    points : ndarray of shape (n_tuples, k, p)
        Tuples in the location space (inside B(0, data_radius)).
    data_radius : float
        Public Lambda; the widths are ``2 Lambda * sqrt(2)**-j``.
    epsilon : float
    rng : numpy.random.Generator
    mass_fraction : float, default=MASS_FRACTION
    cell_counts : callable, default=None
        ``cell_counts(width, shift)`` gives :func:`tuple_cell_counts` of
        ``points`` on that grid (a caller may remember grids); ``None``
        computes it.

    Returns
    -------
    found : (float, ndarray) or None
        The width and its grid shift, or ``None`` when no grid passed.
    event : PrivacyEvent
    """
    n_tuples, k, p = points.shape
    widths = np.repeat(_candidate_widths(data_radius), N_SHIFTS)
    shifts = rng.random((len(widths), p)) * widths[:, None]
    cell_counts = cell_counts or partial(tuple_cell_counts, points)
    queries = (_heaviest_mass(cell_counts(w, s)[1], k) for w, s in zip(widths, shifts))
    index, event = above_threshold(
        queries, threshold=mass_fraction * n_tuples * k, sensitivity=k, epsilon=epsilon, rng=rng,
        label="located/width",
    )
    return (None if index is None else (float(widths[index]), shifts[index])), event


# ---------------------------------------------------------------------------
# Step 2: locate
# ---------------------------------------------------------------------------


def private_sparse_histogram(points, *, width, shift, rho, delta_threshold, rng,
                             cell_counts=None):
    r"""Gaussian histogram of the occupied cells, released above the threshold :math:`\tau`.

    *Sensitivity* on the cells occupied under both neighbours: each tuple
    counts at most once in each of at most k cells, so a replacement changes
    at most 2k counts by 1: L2 sensitivity :math:`\sqrt{2k}`, and
    :math:`\sigma = \sqrt{2k}/\sqrt{2\rho}` makes those counts
    :math:`\rho`-zCDP (Bun & Steinke 2016, Proposition 1.6). A cell occupied
    under one neighbour only has count 1 there (at most k such cells per
    side) and passes :math:`\tau` (:func:`histogram_threshold`) with
    probability at most :math:`\delta_\tau/k`; the proof in
    ``doc/ktuple.rst`` turns this into the extra
    :math:`(\log(1/(1-\delta_\tau)), \delta_\tau)` of the second event.
    ``cell_counts`` is as in :func:`private_width`.

    Returns
    -------
    cells : ndarray of int of shape (n_released, p)
    noisy_counts : ndarray of shape (n_released,)
    events : list of PrivacyEvent
        The zCDP Gaussian release and the threshold's cost.
    """
    k = points.shape[1]
    cells, counts = (cell_counts or partial(tuple_cell_counts, points))(width, shift)
    noisy, event = zcdp_gaussian_mechanism(
        counts, sensitivity=math.sqrt(2 * k), rho=rho, rng=rng, label="located/histogram",
    )
    tau = histogram_threshold(event.scale, k, delta_threshold)
    threshold_event = PrivacyEvent(
        "sparse_histogram_threshold", -math.log1p(-delta_threshold), delta_threshold,
        label="located/histogram_threshold", details={"tau": tau, "k": k},
    )
    keep = np.atleast_1d(noisy) > tau
    return cells[keep], np.atleast_1d(noisy)[keep], [event, threshold_event]


def located_groups(cells, weights, k):
    """Post-processing: k groups of released cells (their weighted centres), or None.

    Cells touch when their integer coordinates differ by at most 1 on every
    axis; touching cells form a group. While there are fewer than k groups,
    the heaviest group is split in two (:func:`_split_in_two`) if it weighs
    at least :data:`SPLIT_RATIO` times the median of the others (two clusters
    whose cells touch); otherwise the location fails. The k heaviest groups
    are kept. A group's centre is the weighted mean of its cells' centres, in
    cell units (add 0.5 to the integer corner).

    Returns
    -------
    ndarray of shape (k, p) or None
    """
    if len(cells) < k:
        return None
    touching = np.abs(cells[:, None, :] - cells[None, :, :]).max(axis=-1) <= 1
    n_groups, labels = connected_components(sparse.csr_matrix(touching), directed=False)
    while n_groups < k:
        mass = np.bincount(labels, weights=weights, minlength=n_groups)
        heaviest = int(np.argmax(mass))
        members = np.flatnonzero(labels == heaviest)
        others = np.delete(mass, heaviest)
        if len(members) < 2 or not len(others) or mass[heaviest] < SPLIT_RATIO * np.median(others):
            return None
        labels[members[_split_in_two(cells[members], weights[members])]] = n_groups
        n_groups += 1
    mass = np.bincount(labels, weights=weights, minlength=n_groups)
    heaviest = np.argsort(mass)[::-1][:k]
    return np.stack([
        np.average(cells[labels == g] + 0.5, axis=0, weights=weights[labels == g]) for g in heaviest
    ])


def _split_in_two(cells, weights, n_iter=10):
    """Weighted 2-means of cells, started at the heaviest cell and the cell farthest from it.

    Deterministic post-processing. Returns a boolean mask of the second part.
    """
    first = cells[np.argmax(weights)].astype(float)
    second = cells[np.argmax(np.linalg.norm(cells - first, axis=1))].astype(float)
    part = np.all(cells == second, axis=1)
    for _ in range(n_iter):
        update = np.linalg.norm(cells - second, axis=1) < np.linalg.norm(cells - first, axis=1)
        if update.all() or not update.any():
            break
        part = update
        first = np.average(cells[~part], axis=0, weights=weights[~part])
        second = np.average(cells[part], axis=0, weights=weights[part])
    return part


# ---------------------------------------------------------------------------
# Step 3: average
# ---------------------------------------------------------------------------


def _nearest_point_of_each_tuple(points, centers, radii):
    """Every tuple's point nearest to each centre (index), and whether it is within the radius."""
    sq_distances = (
        np.einsum("tkd,tkd->tk", points, points)[:, :, None]
        - 2.0 * np.einsum("tkd,gd->tkg", points, centers)
        + np.einsum("gd,gd->g", centers, centers)[None, None, :]
    )
    nearest = sq_distances.argmin(axis=1)  # (n_tuples, n_groups)
    closest = np.take_along_axis(sq_distances, nearest[:, None, :], axis=1)[:, 0, :]
    return nearest, closest <= radii[None, :] ** 2


@dataclass
class GroupMeans:
    """What :func:`private_group_means` releases."""

    means: np.ndarray
    accepted: np.ndarray
    noisy_counts: np.ndarray
    sigma_sum: float
    events: list


def group_offsets(tuples, nearest, anchors, radii):
    r"""The vectors :math:`\Pi_{B(0,1)}((x - a_j)/R_j)` of :func:`private_group_means`.

    ``x`` is point ``nearest[t, j]`` of tuple t, for every tuple t and group
    j: an array of shape (n_tuples, k, d), every vector of exact norm at
    most 1 (:func:`~skdpcluster.ktuple.averages.project_to_ball`; the radial
    scaling exceeded it by up to 6e-16 on half of the clipped vectors,
    review R8), also where :math:`(x - a_j)/R_j` overflows.
    """
    chosen = tuples[np.arange(len(tuples))[:, None], nearest]  # (n_tuples, k groups, d)
    return project_to_ball((chosen - anchors) / radii[:, None], 1.0)


def private_group_means(tuples, *, selection, anchors, radii, rho, rng, label):
    r"""Clipped Gaussian average of one point per tuple per group: :math:`\rho`-zCDP.

    For group j, every tuple contributes the point chosen by ``selection``
    (a function of that tuple alone), clipped to :math:`B(a_j, R_j)`, as the
    unit-norm vector :math:`(x - a_j)/R_j`; :math:`S_j` sums them and
    :math:`N_j` counts them. *Sensitivity* under replace-one: each tuple
    adds at most one vector of norm :math:`\le 1` and one unit of count to
    each of the k groups, so a replacement changes every :math:`S_j` by at
    most 2 in norm and every :math:`N_j` by at most 1: L2 sensitivities
    :math:`2\sqrt{k}` and :math:`\sqrt{k}` jointly over the groups (the
    groups may share points; the bound does not need them disjoint). The
    budget is split :math:`\rho_S : \rho_N = q : 1` with
    :math:`q = \sqrt{d}\,\Delta_S/\Delta_N = 2\sqrt d`, which minimises
    :math:`d\sigma_S^2 + \sigma_N^2`. The mean
    :math:`a_j + R_j\,\Pi_{B(0,1)}(\tilde S_j/\tilde N_j)` divides by the
    noisy count (post-processing); it is accepted when
    :math:`\tilde N_j \ge \max(3\sigma_N, 1)`.

    Parameters
    ----------
    tuples : ndarray of shape (n_tuples, k, d)
    selection : (ndarray of int of shape (n_tuples, k), ndarray of bool of shape (n_tuples, k))
        For every tuple and group, the index of the chosen point and whether
        it joins the group.
    anchors : ndarray of shape (k, d)
    radii : ndarray of shape (k,)
        Public (or previously released) clipping radii, > 0.
    rho : float
    rng : numpy.random.Generator
    label : str

    Returns
    -------
    GroupMeans
    """
    n_tuples, k, d = tuples.shape
    nearest, inside = selection
    sums = np.einsum("tg,tgd->gd", inside.astype(float),
                     group_offsets(tuples, nearest, anchors, radii))
    counts = inside.sum(axis=0).astype(float)
    ratio = 2.0 * math.sqrt(d)
    noisy_sums, sum_event = zcdp_gaussian_mechanism(
        sums, sensitivity=2.0 * math.sqrt(k), rho=rho * ratio / (1.0 + ratio), rng=rng,
        label=f"{label}/sums",
    )
    noisy_counts, count_event = zcdp_gaussian_mechanism(
        counts, sensitivity=math.sqrt(k), rho=rho / (1.0 + ratio), rng=rng, label=f"{label}/counts",
    )
    noisy_sums, noisy_counts = np.reshape(noisy_sums, sums.shape), np.reshape(noisy_counts, (k,))
    accepted = noisy_counts >= max(ACCEPT_COUNT_STDS * count_event.scale, 1.0)
    divisor = np.where(accepted, noisy_counts, np.inf)[:, None]
    means = anchors + radii[:, None] * _project_onto_ball(noisy_sums / divisor, 0.0, 1.0)
    return GroupMeans(means, accepted, noisy_counts, sum_event.scale, [sum_event, count_event])


def _average_near_located(tuples, location, budget, rng):
    """Step 3 when the location ran in the data space: one average in balls around the cells."""
    d = tuples.shape[2]
    radii = np.full(len(location.centers), SELECT_FACTOR * location.width * math.sqrt(d))
    selection = _nearest_point_of_each_tuple(tuples, location.centers, radii)
    result = private_group_means(tuples, selection=selection, anchors=location.centers,
                                 radii=radii, rho=budget.rho_average, rng=rng,
                                 label="located/average")
    return np.where(result.accepted[:, None], result.means, location.centers), True, result.events


def _average_from_projection(tuples, location, data_radius, budget, rng):
    """Step 3 after a projected location: a data-ball average, then one in smaller balls."""
    (k, p), d, width = location.centers.shape, tuples.shape[2], location.width
    select = _nearest_point_of_each_tuple(tuples @ location.projection.T, location.centers,
                                          np.full(k, SELECT_FACTOR * width * math.sqrt(p)))
    first = private_group_means(
        tuples, selection=select, anchors=np.zeros((k, d)), radii=np.full(k, data_radius),
        rho=budget.rho_average / 2.0, rng=rng, label="located/average_wide",
    )
    # Released values only: the width, the noise scale and the noisy counts.
    error = 3.0 * math.sqrt(d) * first.sigma_sum * data_radius / np.maximum(first.noisy_counts, 1.0)
    radii = SELECT_FACTOR * width * math.sqrt(d) + error
    second = private_group_means(
        tuples, selection=_nearest_point_of_each_tuple(tuples, first.means, radii),
        anchors=first.means, radii=radii, rho=budget.rho_average / 2.0, rng=rng,
        label="located/average_narrow",
    )
    means = np.where(second.accepted[:, None], second.means, first.means)
    return means, bool(np.all(first.accepted)), first.events + second.events


# ---------------------------------------------------------------------------
# The whole aggregation
# ---------------------------------------------------------------------------


@dataclass
class Location:
    """What :func:`locate` releases (steps 1-2).

    Attributes
    ----------
    centers : ndarray of shape (k, p) or None
        The k located group centres in the location space; ``None`` when a
        step failed.
    projection : ndarray of shape (p, d) or None
        The public map from the data space to the location space (``None``:
        the identity).
    width : float or None
        The released grid width.
    events : list of PrivacyEvent
    public : dict
        Diagnostics (``n_tuples``, ``location_dim``, ``width``,
        ``n_released_cells``, ``failed_step``).
    """

    centers: np.ndarray | None
    projection: np.ndarray | None
    width: float | None
    events: list
    public: dict

    def to_location_space(self, points):
        """Map data-space points (last axis d) to the location space."""
        return points if self.projection is None else points @ self.projection.T


def locate(tuples, *, data_radius, budget, rng):
    """Steps 1-2 (width, then thresholded histogram) on tuples centred at the public centre.

    Parameters
    ----------
    tuples : ndarray of shape (n_tuples, k, d)
        Centred at the public data centre; points outside B(0, data_radius)
        are projected onto it.
    data_radius : float
    budget : LocatedBudget
    rng : numpy.random.Generator

    Returns
    -------
    Location
    """
    n_tuples, k, d = tuples.shape
    tuples = project_to_ball(tuples, data_radius)
    projection_rng, width_rng, histogram_rng = rng.spawn(3)
    projection = _public_projection(d, projection_rng)
    points = tuples if projection is None else tuples @ projection.T
    public = {"n_tuples": n_tuples, "location_dim": points.shape[2], "width": None,
              "n_released_cells": 0, "failed_step": None}
    cell_counts = _GridCounter(points)  # the passing grid is counted once
    found, width_event = private_width(points, data_radius=data_radius,
                                       epsilon=budget.epsilon_width, rng=width_rng,
                                       cell_counts=cell_counts)
    location = Location(None, projection, None, [width_event], public)
    if found is None:
        public["failed_step"] = "width"
        return location
    location.width, shift = found
    public["width"] = location.width
    cells, weights, histogram_events = private_sparse_histogram(
        points, width=location.width, shift=shift, rho=budget.rho_histogram,
        delta_threshold=budget.delta_threshold, rng=histogram_rng, cell_counts=cell_counts,
    )
    location.events += histogram_events
    public["n_released_cells"] = len(cells)
    groups = located_groups(cells, weights, k)
    if groups is None:
        public["failed_step"] = "locate"
    else:
        location.centers = shift + groups * location.width
    return location


def unspent_events(events, budget):
    """One event for the planned tuple-step budget that a failed step left unused.

    The ledger of a fit must not depend on the outcome: whatever of the
    threshold's (epsilon, delta) and of the histogram and average zCDP was
    not spent is charged here.
    """
    rho = budget.rho_histogram + budget.rho_average - math.fsum(
        e.rho for e in events if e.rho is not None)
    threshold_spent = any(e.mechanism == "sparse_histogram_threshold" for e in events)
    epsilon, delta = (0.0, 0.0) if threshold_spent else (budget.epsilon_threshold,
                                                          budget.delta_threshold)
    if rho <= 1e-12 * budget.rho_total and delta == 0.0:
        return []
    return [PrivacyEvent("unused_budget", epsilon, delta, rho=max(rho, 0.0),
                         label="located/failed_step_unused_budget")]


def locate_and_average(tuples, *, data_radius, budget, rng, if_not_located=None):
    """Steps 1-3 on tuples centred at the public centre; no composite event (the caller adds it).

    Parameters
    ----------
    tuples : ndarray of shape (n_tuples, k, d)
        Tuples centred at the public data centre; points outside
        B(0, data_radius) are projected onto it.
    data_radius : float
        Public Lambda.
    budget : LocatedBudget
        With ``rho_average > 0``.
    rng : numpy.random.Generator
    if_not_located : callable, default=None
        Stage 2 when steps 1-2 fail: ``if_not_located(rho, rng) -> (centers,
        events)``, a ``rho``-zCDP mechanism (``rho = budget.rho_average``,
        the share step 3 would have spent) whose events carry their ``rho``;
        chosen from the released outcome only, at the same cost (see
        :class:`skdpcluster.cluster._ktuple._GeneralMethodOnRows`). ``None``: nothing
        is released.

    Returns
    -------
    KTupleResult
        ``centers`` (canonical order) or ``None``; ``events`` spend exactly
        the width, threshold, histogram and average shares of ``budget``
        whether or not a step failed.
    """
    tuples = project_to_ball(tuples, data_radius)
    locate_rng, average_rng = rng.spawn(2)
    location = locate(tuples, data_radius=data_radius, budget=budget, rng=locate_rng)
    events, centers = list(location.events), None
    if location.centers is not None:
        if location.projection is None:
            centers, ok, average_events = _average_near_located(tuples, location, budget,
                                                                average_rng)
        else:
            centers, ok, average_events = _average_from_projection(
                tuples, location, data_radius, budget, average_rng)
        events += average_events
        if not ok:
            location.public["failed_step"], centers = "average", None
    elif if_not_located is not None:
        centers, stage_events = if_not_located(budget.rho_average, average_rng)
        events += stage_events
    events += unspent_events(events, budget)
    centers = None if centers is None else canonical_order(centers)
    return KTupleResult(centers, centers is not None, events, location.public)


def private_located_average(tuples, *, data_radius, epsilon, delta, rng):
    r"""Locate, then average (all three steps) with the whole ``(epsilon, delta)`` on the tuples.

    Parameters
    ----------
    tuples : ndarray of shape (n_tuples, k, d)
        Centred at the public data centre; neighbours differ in one tuple.
    data_radius : float
        Public bound Lambda on the norm of the tuple points (points outside
        are projected onto the ball).
    epsilon, delta : float
    rng : numpy.random.Generator

    Returns
    -------
    KTupleResult
        Its events sum to at most ``(epsilon, delta)`` under basic
        composition (the zCDP parts through one composite event).
    """
    budget = plan_located_budget(epsilon, delta)
    result = locate_and_average(tuples, data_radius=data_radius, budget=budget, rng=rng)
    result.events.append(zcdp_composite_event(result.events, budget.delta_zcdp))
    return result


# ---------------------------------------------------------------------------
# Step 4: refine on the raw rows
# ---------------------------------------------------------------------------


def refine_on_rows(tuples, X, *, center, data_radius, budget, rng, if_not_located=None):
    r"""Steps 1-2 on the tuples, then a private Lloyd step and core steps on the raw rows.

    After the location (:func:`locate`), the rows are assigned to the
    nearest located centre *in the location space* and the cells are
    averaged (one DP-Lloyd step: sums of :math:`x/\Lambda` over disjoint
    cells, L2 sensitivities 2 and :math:`\sqrt 2` under replace-one,
    :func:`~skdpcluster.cluster._stable_init.noisy_cell_sums`), then
    :data:`CORE_STEPS` ball-restricted core steps of
    :class:`~skdpcluster.PrivateStableKMeans` follow (Shechner 2021,
    Section 4, steps 2-4; :func:`_core_step_on_rows`); each of the
    :math:`1 +` :data:`CORE_STEPS` steps gets an equal share of
    ``budget.rho_rows``. The rows also made the tuples: the row steps compose
    sequentially with the tuple steps (replace-one of a row changes one tuple
    and one row). When the location or the Lloyd step fails, the rest of
    ``budget.rho_rows`` goes to ``if_not_located``, else it is charged unused.

    Every step is one pass over the rows in chunks (:func:`_row_cell_sums`):
    ``X`` is never copied, centred or clipped as a whole. ``X`` may also be a
    rows object of :mod:`skdpcluster.utils._data` (Dask input): each pass is
    then a map-reduce over its chunks.

    Parameters
    ----------
    tuples : ndarray of shape (n_tuples, k, d)
        Centred at ``center``.
    X : ndarray of shape (n_samples, d), or rows of :mod:`skdpcluster.utils._data`
        The raw rows (not centred); rows outside :math:`B(c, \Lambda)` are
        projected onto it.
    center : ndarray of shape (d,)
        The public (or previously released) data centre c.
    data_radius : float
        Public (or previously released) :math:`\Lambda`.
    budget : LocatedBudget
        Planned with ``on_rows=True``.
    rng : numpy.random.Generator
    if_not_located : callable, default=None
        Stage 2 when the location or the Lloyd step fails:
        ``if_not_located(rho, rng) -> (centers, events)``, a ``rho``-zCDP
        mechanism on the rows (``rho`` = the part of ``budget.rho_rows`` not
        yet spent), chosen from released outcomes only, at the same cost (see
        :class:`skdpcluster.cluster._ktuple._GeneralMethodOnRows`). ``None``:
        nothing is released.

    Returns
    -------
    centers : ndarray of shape (k, d) or None
        In coordinates centred at ``center``.
    events : list of PrivacyEvent
        Exactly the width, threshold, histogram and row shares of ``budget``,
        whether or not a step failed (no composite event: the caller adds it).
    public : dict
        :attr:`Location.public`.
    """
    from skdpcluster.cluster._stable_init import (  # noqa: PLC0415 (import cycle)
        nearest_centers,
        noisy_cell_sums,
    )

    locate_rng, rows_rng = rng.spawn(2)
    phase("location (private grid width and histogram)")
    location = locate(tuples, data_radius=data_radius, budget=budget, rng=locate_rng)
    events = location.events + unspent_events(location.events, budget)
    rho_step = budget.rho_rows / (1 + CORE_STEPS)
    if location.centers is None:
        return (*_rows_stage_two(if_not_located, budget.rho_rows, rows_rng, events),
                location.public)

    phase("refinement on the rows", steps=1 + CORE_STEPS)

    def nearest_located(chunk):
        return nearest_centers(location.to_location_space(chunk.X), location.centers)[0]

    sums, counts = _row_cell_sums(X, center, data_radius, nearest_located,
                                  len(location.centers))
    noisy = noisy_cell_sums(sums / data_radius, counts, rho=rho_step, neighbouring="replace_one",
                            rng=rows_rng, label="located/lloyd_step")
    events += noisy.events
    if not np.all(noisy.accepted()):
        location.public["failed_step"] = "lloyd_step"
        return (*_rows_stage_two(if_not_located, budget.rho_rows - rho_step, rows_rng, events),
                location.public)
    centers = _project_onto_ball(data_radius * noisy.means(), 0.0, data_radius)
    caps = [None] * (CORE_STEPS - 1) + [_cluster_scale(location, *X.shape)]
    for step, cap in enumerate(caps):
        centers, step_events = _core_step_on_rows(
            X, centers, center=center, data_radius=data_radius, max_radius=cap, rho=rho_step,
            rng=rows_rng, label=f"located/core_step_{step}",
        )
        events += step_events
    return centers, events, location.public


def _rows_stage_two(if_not_located, rho, rng, events):
    """``(centers, events)`` once a step of :func:`refine_on_rows` failed with ``rho`` left."""
    if if_not_located is None:
        return None, events + [_unused_rows_event(rho)]
    centers, stage_events = if_not_located(rho, rng)
    return centers, events + stage_events


def _row_cell_sums(X, center, radius, labelled, n_cells, terms=None):
    """Per-cell sums and counts of the clipped rows, in one pass over ``X`` in chunks.

    ``labelled(chunk)`` gives the cell of every row of a
    :class:`~skdpcluster.cluster._stable._ClippedData` chunk (``n_cells``: no
    cell); ``terms(rows, labels)``, if given, maps a chunk's rows to what is
    summed instead of the rows (such as
    :func:`~skdpcluster.cluster._stable_init.core_terms`). The chunks of
    :data:`_BLOCKS_PER_CHUNK` blocks of rows (fixed by the row count: about 1/16
    of the rows), centred and projected into B(0, radius)
    (:class:`~skdpcluster.cluster._stable._ClippedData`), run on the
    :func:`~skdpcluster.utils._threads.fit_threads` threads, the convention of
    :mod:`skdpcluster.utils._threads`: each chunk gives the sum terms of its
    blocks (:func:`~skdpcluster.cluster._stable_init.cell_sum_terms`), added in
    block order in the calling thread, as
    :func:`~skdpcluster.cluster._stable_init.add_cell_sums` adds them on all the
    rows: the sums are the same bits on any number of threads. ``X`` is never
    copied, centred or clipped as a whole.

    A rows object ``X`` (Dask input) is read by one map-reduce of
    :func:`~skdpcluster.cluster._stable.clipped_rows` instead (``labelled``
    then travels to the workers).

    Returns
    -------
    sums : ndarray of shape (n_cells, d)
    counts : ndarray of shape (n_cells,)
    """
    if hasattr(X, "map_reduce"):
        from skdpcluster.cluster._stable import clipped_rows  # noqa: PLC0415 (import cycle)

        return clipped_rows(X, center, radius).map_reduce(_labelled_cell_sums, labelled, n_cells,
                                                          terms)
    from skdpcluster.cluster._stable import _ClippedData  # noqa: PLC0415 (import cycle)
    from skdpcluster.cluster._stable_init import (  # noqa: PLC0415 (import cycle)
        CHUNK_ROWS,
        cell_sum_terms,
    )

    fewest, most = _BLOCKS_PER_CHUNK
    chunk_rows = CHUNK_ROWS * min(most, max(fewest, len(X) // (16 * CHUNK_ROWS)))

    def chunk_terms(start):
        chunk = _ClippedData.from_rows(X[start:start + chunk_rows], center, radius)
        labels = labelled(chunk)
        rows = chunk.X if terms is None else terms(chunk.X, labels)
        return np.bincount(labels, minlength=n_cells + 1), list(
            cell_sum_terms(rows, labels, n_cells))

    sums, counts = np.zeros((n_cells + 1, X.shape[1])), np.zeros(n_cells + 1)
    n_threads = fit_threads()
    with single_threaded():  # products of a chunk by a few vectors: BLAS threads only cost
        for chunk_counts, terms in ordered_map(chunk_terms, range(0, len(X), chunk_rows),
                                               n_threads):
            counts += chunk_counts
            for term in terms:
                sums += term
    return sums[:n_cells], counts[:n_cells]


def _labelled_cell_sums(chunk, labelled, n_cells, terms=None):
    """Sums and counts of a clipped chunk's rows (or ``terms``) per cell ``labelled(chunk)``."""
    from skdpcluster.cluster._stable_init import cell_sums  # noqa: PLC0415 (import cycle)

    labels = labelled(chunk)
    return cell_sums(chunk.X if terms is None else terms(chunk.X, labels), labels, n_cells)


def _core_step_on_rows(X, centers, *, center, data_radius, max_radius, rho, rng, label):
    r"""One private core step on the rows (Shechner 2021, Section 4, steps 2-4): :math:`\rho`-zCDP.

    The statistics of :func:`~skdpcluster.cluster._stable.core_statistics`,
    computed in one chunked pass: :math:`r_i = \min(\hat D_i/3, r_{max})`
    with :math:`\hat D_i` the gap to the nearest other centre, the core
    :math:`\hat X_i = \{x : \|x - c_i\| \le r_i\}` (disjoint, since
    :math:`r_i < \hat D_i/2`), :math:`S_i = \sum_{x\in\hat X_i}(x - c_i)/r_i`
    (terms of norm :math:`\le 1`, added term by term:
    :func:`~skdpcluster.cluster._stable_init.core_terms`) and
    :math:`N_i = |\hat X_i|`, released by
    :func:`~skdpcluster.cluster._stable_init.noisy_cell_sums` (L2
    sensitivities 2 and :math:`\sqrt 2` under replace-one). An accepted centre
    moves to :math:`\Pi_{B(0,\Lambda)}(c_i + r_i\,\Pi_{B(0,1)}(\tilde S_i/\tilde N_i))`,
    as in :func:`~skdpcluster.cluster._stable.core_step`; the others stay.

    Returns
    -------
    centers : ndarray of shape (k, d)
    events : list of PrivacyEvent
    """
    from skdpcluster.cluster._stable_init import (  # noqa: PLC0415 (import cycle)
        center_gaps,
        core_sq_radii,
        core_terms,
        nearest_centers,
        noisy_cell_sums,
        within_radii,
    )

    k = len(centers)
    gaps = center_gaps(centers)
    radii = np.where(np.isinf(gaps), 2.0 * data_radius, CORE_RADIUS_FACTOR * gaps)
    if max_radius is not None:
        radii = np.minimum(radii, max_radius)

    def in_core(chunk):  # the stable core step's row-exact membership (its _core_sums)
        labels, sq_distances = nearest_centers(chunk.X, centers, chunk.sq_norms)
        inside = within_radii(chunk.X, centers, labels, sq_distances,
                              core_sq_radii(radii, chunk.X.shape[1])[labels], chunk.sq_norms)
        return np.where(inside, labels, k)

    def terms(rows, labels):  # summed term by term, never as (sum x - N c) / r (review R9)
        return core_terms(rows, centers, labels)

    sums, counts = _row_cell_sums(X, center, data_radius, in_core, k, terms=terms)
    noisy = noisy_cell_sums(sums / np.where(radii > 0, radii, 1.0)[:, None], counts, rho=rho,
                            neighbouring="replace_one", rng=rng, label=label)
    accepted = noisy.accepted() & (radii > 0)
    shift = _project_onto_ball(noisy.shrunk_means(), 0.0, 1.0) * radii[:, None]
    moved = _project_onto_ball(centers + shift, 0.0, data_radius)
    return np.where(accepted[:, None], moved, centers), noisy.events


def _cluster_scale(location, n_samples, n_features):
    r"""A ball that holds a cluster's rows, from released and public values only.

    At the released width :math:`w` most tuple points of a group share a grid
    cell, so their spread per axis is at most about :math:`w`; a tuple point
    is the mean of about :math:`R = n/(T k)` rows of its cluster (public), so
    the rows spread about :math:`w\sqrt{R}` per axis and lie within
    :math:`w\sqrt{R}\,(\sqrt d + 3)`. The last core step's radius is capped
    there, which shrinks its noise when the clusters are far apart.
    """
    n_tuples, k = location.public["n_tuples"], len(location.centers)
    rows_per_cluster = max(n_samples // n_tuples, k) / k
    return location.width * math.sqrt(rows_per_cluster) * (math.sqrt(n_features) + 3.0)


def _unused_rows_event(rho):
    return PrivacyEvent("unused_budget", 0.0, 0.0, rho=rho, label="located/rows_unused_budget")
