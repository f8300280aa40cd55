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

import functools
import math
from dataclasses import dataclass

import numpy as np
from sklearn.base import clone
from sklearn.cluster import KMeans

from skdpcluster.accountant import BudgetAccountant
from skdpcluster.averaging import _project_onto_ball
from skdpcluster.cluster._ktuple import KTupleClusterer
from skdpcluster.mechanisms import zcdp_gaussian_mechanism
from skdpcluster.utils._compat import single_threaded
from skdpcluster.utils._data import as_rows
from skdpcluster.utils._warnings import collected_warnings, warn_user

__all__ = [
    "GridInitializer",
    "KTupleInitializer",
    "PublicCenters",
    "add_cell_sums",
    "cell_indices",
    "cell_sum_terms",
    "core_sq_radii",
    "core_terms",
    "fixed_order_projection",
    "fixed_order_sq_distances",
    "lloyd_step",
    "nearest_centers",
    "nearest_costs",
    "nearest_projected_centers",
    "noisy_cell_sums",
    "random_ball_points",
    "rounding_margin",
    "sure_nearest",
    "within_radii",
]

#: Rows per block of a distance computation: small blocks stay in cache and keep BLAS
#: single-threaded (measured 5-10x faster than 65536-row blocks at n = 1e6, k = d = 10).
CHUNK_ROWS = 4096
#: Rows per block of the grid initializer's cell indices (a few MiB of temporaries).
GRID_BLOCK_ROWS = 16 * CHUNK_ROWS
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
    :math:`\|x\|^2 - 2 x \cdot c + \|c\|^2` by a matrix product, clamped at
    0 (spec §9.11).

    **The label is a function of the row alone** (and of the centres), never
    of the block it is computed in: a matrix product's rounding depends on
    the block's shape and on the row's place in it, so under add/remove
    (one row less moves every later row in its block) a row near a Voronoi
    boundary could change cell, and a release of per-cell sums and counts
    change by more than its sensitivity (review R6a, F1). Let
    :math:`D_j = \|x - c_j\|^2` exactly and :math:`F_j` its value computed
    coordinate by coordinate in a fixed order (:func:`fixed_order_sq_distances`).
    Both the block's values (up to the common shift :math:`\|x\|^2`) and
    :math:`F_j` are within :math:`M/2` of :math:`D_j`, with
    :math:`M = 4(d + 4)u(\|x\| + \max_j\|c_j\|)^2` (:math:`u = 2^{-53}`;
    products and sums of :math:`d` terms, :math:`\gamma_d`-bounded). Where the
    block's smallest value beats the second by more than :math:`2M` (tested
    with a factor 4 of slack against the rounding of the test itself), its
    index j* satisfies :math:`F_{j} - F_{j^*} > 0` for every other j, so it is
    the first index of the smallest :math:`F`; every other row is labelled
    by that index directly. Either way the label is
    :math:`\arg\min_j F_j` (first index on ties). The distances keep the
    block's rounding (a relative :math:`M`: the summation-rounding class the
    sensitivity arguments leave out); :func:`fixed_order_sq_distances` gives
    a row's own value where a square root would magnify it.

    Returns
    -------
    labels : ndarray of shape (n_samples,)
    sq_distances : ndarray of shape (n_samples,)
    """
    if sq_norms is None:
        sq_norms = np.einsum("ij,ij->i", X, X)
    scaled = -2.0 * centers
    center_sq = np.einsum("ij,ij->i", centers, centers)
    margin = rounding_margin(X.shape[1])
    center_norm = math.sqrt(float(center_sq.max(initial=0.0)))
    labels = np.empty(len(X), dtype=np.intp)
    sq_distances = np.empty(len(X))
    exact = []
    for start in range(0, len(X), CHUNK_ROWS):
        rows = slice(start, start + CHUNK_ROWS)
        slack = np.sqrt(sq_norms[rows])
        slack += center_norm
        slack *= slack
        slack *= margin
        slack += UNDERFLOW_MARGIN
        labels[rows], sq_distances[rows], unsure = _clear_nearest(X[rows], scaled, center_sq,
                                                                   slack)
        if len(unsure):
            values = fixed_order_sq_distances(X[rows][unsure], centers)
            unsure += start
            labels[unsure] = values.argmin(axis=1)
            exact.append((unsure, values.min(axis=1)))
    sq_distances += sq_norms
    np.maximum(sq_distances, 0.0, out=sq_distances)
    for unsure, values in exact:
        sq_distances[unsure] = values
    return labels, sq_distances


def _clear_nearest(points, scaled, center_sq, slack):
    """The block's labels, smallest values and the rows whose gap is not clear of ``slack``.

    ``scaled`` is ``-2 centers``; the decision is :func:`sure_nearest`'s.
    """
    block = scaled @ points.T
    block += center_sq[:, None]
    return sure_nearest(block, slack)


def sure_nearest(block, slack):
    """Per column of ``block`` (centres x rows): the label, the smallest value, the unsure columns.

    A column's label is sure where exactly one value is within its
    ``slack`` of the smallest (the flags are written into ``block``, no
    block-sized temporary, and the product of the indices by the flags is
    then that centre's index, exactly); the labels of the unsure columns
    are meaningless.
    """
    best = block.min(axis=0)
    np.less_equal(block, slack + best, out=block, casting="unsafe")
    labels = np.arange(len(block), dtype=np.float64) @ block
    return labels, best, np.flatnonzero(block.sum(axis=0) != 1.0)


def nearest_projected_centers(X, basis, centers):
    r"""Index of the centre nearest to every row's projection ``x @ basis``, a function of the row.

    The label of :func:`nearest_centers` on the projected rows, decided on
    the projection computed in a fixed order (:func:`fixed_order_projection`)
    and its :func:`fixed_order_sq_distances`: the matrix product's projection
    depends on the row's block. ``basis`` has orthonormal columns (up to
    rounding), so a projected coordinate computed either way is within
    :math:`1.01(d + 1)u\|x\|` of the exact one and the two projections are
    within :math:`e = 2.02\sqrt p(d + 1)u\|x\|` of each other; a squared
    distance then moves by at most :math:`E = e(2(\|z\| + \max_j\|c_j\|)
    + e)`. The product's label is kept where its gap beats
    :func:`rounding_margin`'s margin plus :math:`4E` (the proof of
    :func:`nearest_centers` with both errors); the other rows are projected
    and compared in the fixed order.
    """
    scaled = -2.0 * centers
    center_sq = np.einsum("ij,ij->i", centers, centers)
    margin = rounding_margin(basis.shape[1])
    center_norm = math.sqrt(float(center_sq.max(initial=0.0)))
    projection_error = 2.02 * math.sqrt(basis.shape[1]) * (X.shape[1] + 1) * 2.0**-53
    labels = np.empty(len(X), dtype=np.intp)
    for start in range(0, len(X), CHUNK_ROWS):
        rows = slice(start, start + CHUNK_ROWS)
        projected = X[rows] @ basis
        scale = np.sqrt(np.einsum("ij,ij->i", projected, projected)) + center_norm
        error = projection_error * np.sqrt(np.einsum("ij,ij->i", X[rows], X[rows]))
        slack = margin * scale * scale + 4.0 * error * (2.0 * scale + error) + UNDERFLOW_MARGIN
        labels[rows], _, unsure = _clear_nearest(projected, scaled, center_sq, slack)
        if len(unsure):
            exact = fixed_order_sq_distances(fixed_order_projection(X[rows][unsure], basis),
                                             centers)
            labels[start + unsure] = exact.argmin(axis=1)
    return labels


def nearest_costs(X, centers, power, assignment):
    r"""Every row's cost :math:`\min_j \|x - c_j\|^p` from ``assignment = nearest_centers(X, centers)``.

    k-means (``power=2``): the squared distances as computed. k-median
    (``power=1``): the square root of the row's
    :func:`fixed_order_sq_distances` to its centre, a function of the row
    alone: the square root would turn the matrix product's rounding near 0,
    which depends on the row's block, into a term that moves by about
    :math:`\sqrt{u}` times the scale (review R2-1 of the high-dimensional
    estimators; under add/remove the same for every k-median cost here).
    """
    labels, sq_distances = assignment
    if power == 2:
        return sq_distances
    return np.sqrt(fixed_order_sq_distances(X, centers, labels))


#: Absolute margin added to :func:`rounding_margin`'s: products and squares below the
#: smallest normal float lose up to 2^-1075 each (not a relative error), d + 2 of them per
#: value at most; 2^-1000 covers them for any d below 2^70, so the decisions stay row-exact
#: on data of any scale (review R7).
UNDERFLOW_MARGIN = 2.0**-1000


def rounding_margin(n_features):
    r"""Relative margin :math:`4M/(\|x\| + \max_j\|c_j\|)^2 = 16(d + 4)u` of the row-exact decisions.

    A decision on a computed squared distance (which centre is nearest, is
    the row inside a radius) is taken from the fast value only when that
    value is farther than this margin times :math:`(\|x\| + \max_j
    \|c_j\|)^2` from the threshold; otherwise from
    :func:`fixed_order_sq_distances` (:func:`nearest_centers` gives the proof).
    """
    return 16.0 * (n_features + 4) * 2.0**-53


def core_sq_radii(radii, n_features):
    r"""Squared radii :math:`T_i` below which a row's fixed-order distance proves it in its core.

    A core term :math:`(x - c_i)/r_i` must have an exact norm at most 1 (the
    sensitivities of the core sums assume it), but :func:`within_radii`
    decides :math:`F \le T` on the rounded :math:`F`
    (:func:`fixed_order_sq_distances`: :math:`F \ge D(1 - (d+2)u) - d\,2^{-1075}`
    for the exact :math:`D = \|x - c_i\|^2`), so with :math:`T = r_i^2` rows
    a few units in the last place outside :math:`r_i` counted as inside
    (review R8: 236 of 5000 rows decided inside at the radius). With
    :math:`T = \mathrm{fl}(\mathrm{fl}(r_i^2)(1 - 4(d+2)u))` and
    :math:`r_i \ge 2^{-500}` (so :math:`d\,2^{-1075} \le d\,2^{-75}r_i^2`),
    :math:`F \le T` gives :math:`D \le r_i^2[(1+u)^2(1 - 4(d+2)u) +
    d\,2^{-75}]/(1 - (d+2)u) < r_i^2`, the argument of
    :func:`~skdpcluster.averaging._common.rows_outside_ball`. The same holds
    for the computed difference :math:`v = \mathrm{fl}(x - c_i)` that
    :func:`core_terms` sums, since :math:`F` is the sum of the rounded
    squares of :math:`v`'s coordinates: :math:`F \ge \|v\|^2(1-u)^d -
    d\,2^{-1075}`, so :math:`\|v\|^2 \le r_i^2[(1+u)^2(1 - 4(d+2)u) +
    d\,2^{-75}]/(1-u)^d < r_i^2`. A smaller radius gets :math:`T = -1`: an
    empty core (degenerate centres, closer than :math:`2^{-499}`).
    """
    radii = np.asarray(radii, dtype=float)
    shrunk = radii * radii * (1.0 - 4.0 * (n_features + 2) * 2.0**-53)
    return np.where(radii >= 2.0**-500, shrunk, -1.0)


def within_radii(X, centers, labels, sq_distances, sq_radii, sq_norms):
    r"""Whether every row is within ``sq_radii`` (squared, per row) of its centre, row by row.

    The decision of :math:`F \le r^2` with :math:`F` the row's
    :func:`fixed_order_sq_distances` to ``centers[labels]``: a function of
    the row alone. ``sq_distances`` (from :func:`nearest_centers`) are within
    :math:`M` of the exact :math:`D` and :math:`F` within :math:`M/2`, so
    where :math:`|` ``sq_distances`` :math:`- r^2| > 2M` the fast comparison
    gives the same answer; the other rows are decided on :math:`F`. A core
    (spec §9.5) is then the same set of rows however the rows are blocked,
    also under add/remove.
    """
    inside = sq_distances <= sq_radii
    scale = np.sqrt(sq_norms)
    scale += math.sqrt(float(np.einsum("ij,ij->i", centers, centers).max(initial=0.0)))
    unsure = np.flatnonzero(np.abs(sq_distances - sq_radii)
                            <= rounding_margin(X.shape[1]) * scale * scale + UNDERFLOW_MARGIN)
    if len(unsure):
        inside[unsure] = (fixed_order_sq_distances(X[unsure], centers, labels[unsure])
                          <= sq_radii[unsure])
    return inside


def fixed_order_sq_distances(X, centers, labels=None):
    r""":math:`\|x - c\|^2` coordinate by coordinate in a fixed order: a function of the row alone.

    Every coordinate's difference and square, then their sum from the first
    coordinate to the last, each an element-wise NumPy operation: the value
    does not depend on the other rows (no matrix product), and its relative
    error is at most :math:`(d + 2)u`. With ``labels``, the distance of every
    row to its own centre ``centers[labels]`` (shape ``(n,)``); else to every
    centre (shape ``(n, k)``).
    """
    if labels is not None:  # in blocks of CHUNK_ROWS rows: temporaries of a block only
        total = np.empty(len(X))
        for start in range(0, len(X), CHUNK_ROWS):
            rows = slice(start, start + CHUNK_ROWS)
            difference = X[rows] - centers[labels[rows]]
            np.square(difference, out=difference)
            block = total[rows]
            block[:] = difference[:, 0]
            for column in range(1, X.shape[1]):
                block += difference[:, column]
        return total
    total = np.square(X[:, 0, None] - centers[None, :, 0])
    for column in range(1, X.shape[1]):
        total += np.square(X[:, column, None] - centers[None, :, column])
    return total


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
    if n_cells <= ONE_HOT_MAX_CELLS:
        sums, counts = np.zeros((n_cells + 1, X.shape[1])), np.zeros(n_cells + 1)
        add_cell_sums(X, labels, sums, counts)
        return sums[:n_cells], counts[:n_cells]
    counts = np.bincount(labels, minlength=n_cells + 1)[:n_cells].astype(float)
    sums = np.empty((n_cells, X.shape[1]))
    for j, column in enumerate(X.T):
        sums[:, j] = np.bincount(labels, weights=column, minlength=n_cells + 1)[:n_cells]
    return sums, counts


def add_cell_sums(X, labels, sums, counts):
    """Add the per-cell sums and counts of the rows to ``sums`` and ``counts``, in place.

    Exactly the additions of :func:`cell_sums` on every block of
    :data:`CHUNK_ROWS` rows in turn, block sums added one after the other,
    bit for bit, without a call per block: a pass over the rows in chunks of
    a multiple of :data:`CHUNK_ROWS` rows gives the sums of one pass in
    :data:`CHUNK_ROWS`-row chunks.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    labels : ndarray of int of shape (n_samples,)
        Cells in ``0 ... n_cells``; ``n_cells`` collects the dropped rows.
    sums : ndarray of shape (n_cells + 1, n_features)
        Running sums; the last row is the dropped rows' (meaningless).
    counts : ndarray of shape (n_cells + 1,)
        Running counts (whole numbers).
    """
    counts += np.bincount(labels, minlength=len(sums))
    for term in cell_sum_terms(X, labels, len(sums) - 1):
        sums += term


def core_terms(X, centers, labels):
    r"""Every core row's difference :math:`v = \mathrm{fl}(x - c_j)` to its centre (a new array).

    j = ``labels``; a row labelled ``len(centers)`` (in no core) is returned as
    it is, for the cell that the sums drop. The core sum :math:`S_j = \sum (x -
    c_j)/r_j` is the sum of these rows divided by :math:`r_j`: every :math:`v`
    of a core row has an exact norm below :math:`r_j` (:func:`core_sq_radii`),
    so one row changes the sum by at most :math:`r_j` and :math:`S_j` by at
    most 1, and the sum rounds like any sum of n such vectors. The expanded
    :math:`(\sum x - N_j c_j)/r_j` rounded at the scale of :math:`n u
    |c_j|/r_j` instead, which a small radius made larger than the sensitivity
    (review R9: one row changed it by 208 against 1 at :math:`r_j = 4.5 \cdot
    10^{-15}`). The rows and centres lie in :math:`B(0, \Lambda)`, so no
    difference overflows.
    """
    padded = np.vstack([centers, np.zeros((1, X.shape[1]))])
    return X - np.take(padded, labels, axis=0)


def cell_sum_terms(X, labels, n_cells):
    """The terms :func:`add_cell_sums` adds: the per-cell sums of every block of rows, in order.

    Yields one ndarray of shape (n_cells + 1, n_features) per block of
    :data:`CHUNK_ROWS` rows (row ``n_cells``: the dropped rows). Adding them
    in turn to running sums is :func:`add_cell_sums`, bit for bit, wherever
    they were computed.
    """
    one_hot = np.eye(n_cells + 1) if n_cells <= ONE_HOT_MAX_CELLS else None
    for start in range(0, len(X), CHUNK_ROWS):
        rows = slice(start, start + CHUNK_ROWS)
        if one_hot is not None:
            yield one_hot.take(labels[rows], axis=0).T @ X[rows]  # take: faster, same rows
        else:
            yield np.column_stack([np.bincount(labels[rows], weights=column, minlength=n_cells + 1)
                                   for column in X[rows].T])


def random_ball_points(rng, n_points, n_features, radius):
    """Uniform points of the ball B(0, radius): data-independent filler centres."""
    directions = rng.standard_normal((n_points, n_features))
    directions /= np.maximum(np.linalg.norm(directions, axis=1, keepdims=True), 1e-300)
    return directions * radius * rng.random((n_points, 1)) ** (1.0 / n_features)


def filler_centers(n_points, directions, radius, rng):
    r"""Centres for missing clusters: :math:`\pm` ``radius`` times the given unit directions.

    The points :math:`+r v_1, -r v_1, +r v_2, \dots` (``directions`` columns
    :math:`v_j`, in that order), then uniform points of :math:`B(0, r)` when
    more are needed. Close to the centre of the data ball, the best guess
    without data; along the top principal directions of a released second
    moment, the DP-Lloyd steps that follow split the rows along them (a
    2-means split along the first principal direction when k = 2). Only
    released or public values.
    """
    signed = np.stack([directions.T, -directions.T], axis=1).reshape(-1, directions.shape[0])
    chosen = radius * signed[:n_points]
    extra = random_ball_points(rng, n_points - len(chosen), directions.shape[0], radius)
    return np.vstack([chosen, extra])


@dataclass(frozen=True)
class NoisyCells:
    """Noisy per-cell sums and counts and the noise scales they carry."""

    sums: np.ndarray
    counts: np.ndarray
    sigma_sum: float
    sigma_count: float
    events: list

    def accepted(self, accuracy=True):
        r"""Cells whose noisy mean is trusted (spec §9.5, post-processing of the release).

        :math:`\tilde N_i \ge \max(3\sigma_c, 1)` and, with ``accuracy``,
        :math:`(\sigma_s\sqrt d + \sigma_c)/\tilde N_i \le 1/2`.
        """
        n_features = self.sums.shape[1]
        floor = max(ACCEPT_COUNT_STDS * self.sigma_count, 1.0)
        if not accuracy:
            return self.counts >= floor
        error = self.sigma_sum * math.sqrt(n_features) + self.sigma_count
        return (self.counts >= floor) & (error <= ACCEPT_RELATIVE_ERROR * self.counts)

    def means(self, accuracy=True):
        """Noisy sums divided by the noisy counts (where accepted; 0 elsewhere)."""
        divisor = np.where(self.accepted(accuracy), self.counts, np.inf)[:, None]
        return self.sums / divisor

    def shrunk_means(self, accuracy=True):
        r""":meth:`means` shrunk towards 0 by :func:`james_stein` (per-coordinate noise :math:`\sigma_s/\tilde N_i`)."""
        accepted = self.accepted(accuracy)
        noise = self.sigma_sum / np.where(accepted, self.counts, np.inf)
        return james_stein(self.means(accuracy), noise)


def james_stein(vectors, noise_sd):
    r"""Positive-part James-Stein shrinkage of noisy vectors towards 0 (post-processing).

    A row :math:`m_i = \mu_i + N(0, s_i^2 I_d)` becomes
    :math:`\max(0, 1 - (d - 2)s_i^2/\|m_i\|^2)\,m_i`, whose expected squared
    error is below that of :math:`m_i` whatever :math:`\mu_i` for
    :math:`d \ge 3` (James & Stein 1961; the positive part, Baranchik 1964).
    A noisy mean of a cell costs its rows :math:`\|\tilde c - \mu\|^2` each
    on top of their cost to the true mean, so in high dimension, where the
    noise :math:`s_i\sqrt d` exceeds the spread of the means, the
    shrunk centres keep k-means near the one-centre solution instead of far
    above it (issue #16: standardized digits, d = 64). Rows are returned
    unchanged for d < 3; it uses only released values and public scales.

    Parameters
    ----------
    vectors : ndarray of shape (n_vectors, n_features)
    noise_sd : ndarray of shape (n_vectors,)
        Per-coordinate standard deviation of each row's noise (0 or inf allowed).

    Returns
    -------
    ndarray of shape (n_vectors, n_features)
    """
    n_features = vectors.shape[1]
    if n_features < 3:
        return vectors
    sq_norms = np.einsum("ij,ij->i", vectors, vectors)
    noise = np.nan_to_num(np.asarray(noise_sd, dtype=float), posinf=0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = 1.0 - (n_features - 2) * noise**2 / sq_norms
    factor = np.where(sq_norms > 0, np.clip(factor, 0.0, 1.0), 0.0)
    return vectors * factor[:, None]


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
    through :func:`noisy_cell_sums`; a cell whose noisy count is credible
    (:math:`\tilde N_i \ge \max(3\sigma_c, 1)`; no accuracy rule: the
    shrinkage takes care of noisy means) moves to
    :math:`\Pi_{B(0,\Lambda)}(\Lambda\,\mathrm{JS}(\tilde S_i/\tilde N_i))`
    (:meth:`NoisyCells.shrunk_means`), the others keep their centre.
    :math:`\rho`-zCDP. ``X`` is an array or a rows object of
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
    accepted = noisy.accepted(accuracy=False)
    moved = _project_onto_ball(data_radius * noisy.shrunk_means(accuracy=False), 0.0,
                               data_radius)
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
#: Up to this many dimensions the grid is not projected: (3g/2)^4 <= 2^18 keeps four levels
#: (g = 2 ... 16), and a DP-PCA to 3 of 4 standardized features picks a random subspace when
#: the variances are equal (issue #15's pipeline: ARI 0.2-0.3 in 5 of 6 seeds).
GRID_MAX_UNPROJECTED_DIM = 4
#: Radius (relative to Lambda) of the ball about the data ball's centre holding the centres
#: found without a heavy cell: the best data-independent guess; the DP-Lloyd steps then split
#: the data along random directions through it. Lambda / 4 (before issue #16) put them about
#: Lambda / 4 from the data in high dimension: breast_cancer at epsilon = 0.5 (no heavy
#: cell) cost 2.50 x KMeans, one centre 1.47 x.
GRID_FILLER_RADIUS = 1e-3
#: Grid resolutions tried (cells per axis), coarsest first (spec §9.6 step 3).
GRID_LEVELS = (2, 4, 8, 16, 32, 64)
#: Largest tolerated noise of a coreset point relative to Lambda (tau_acc of step 4).
GRID_CORESET_ERROR = 0.3


@dataclass(frozen=True)
class MultiresolutionLeaves:
    """The leaves of :func:`multiresolution_leaves`: a partition decided by released counts.

    Attributes
    ----------
    levels : tuple of int
        Cells per axis of every level, coarsest first.
    node_cells : list of ndarray
        Per level, the cells that are nodes (sorted cell indices); node ids
        run over the levels in this order.
    leaf_of_node : ndarray
        Leaf index of every node (``-1``: dropped, too light).
    weights : ndarray
        Noisy weight of every leaf.
    finest_level : int
        Cells per axis of the finest level holding a leaf (0 when there is none).
    """

    levels: tuple
    node_cells: list
    leaf_of_node: np.ndarray
    weights: np.ndarray
    finest_level: int

    def finest_cell_leaves(self, n_dims):
        """Leaf of every cell of the finest level (``-1``: dropped or in no node).

        A row belongs to the deepest node on its chain of cells (so the leaves
        are disjoint and each row is in at most one), and the cell of a row at
        every level is a function of its finest cell: a row's leaf is this
        table at its finest cell. Built top-down, each node writing its leaf
        over the finest cells it covers (a box of :math:`r^p` cells,
        :func:`descendant_offsets`), so deeper nodes overwrite their parents.
        Post-processing of the released partition.
        """
        finest = self.levels[-1]
        table = np.full(finest**n_dims, -1, dtype=np.int32)  # leaves are few; half the memory
        first_node = 0
        for cells_per_axis, cells in zip(self.levels, self.node_cells):
            ratio = finest // cells_per_axis
            corners = _finest_corners(cells, cells_per_axis, n_dims, ratio)
            leaves = self.leaf_of_node[first_node:first_node + len(cells)]
            table[corners[:, None] + descendant_offsets(finest, n_dims, ratio)] = leaves[:, None]
            first_node += len(cells)
        return table


def _axes(cells, cells_per_axis, n_dims):
    """Axis coordinates :math:`a_j` of cells :math:`\\sum_j a_j c^j`, shape (n_cells, n_dims)."""
    return (cells[:, None] // cells_per_axis ** np.arange(n_dims)) % cells_per_axis


def _finest_corners(cells, cells_per_axis, n_dims, ratio):
    """The finest cell at the lowest corner of each cell (``ratio`` finest cells per axis in one)."""
    finest = cells_per_axis * ratio
    return (_axes(cells, cells_per_axis, n_dims) * ratio) @ finest ** np.arange(n_dims)


@functools.lru_cache(maxsize=32)
def descendant_offsets(cells_per_axis, n_dims, ratio):
    r"""Index offsets :math:`\sum_j o_j c^j`, :math:`o \in [0, r)^p`, of a box of :math:`r^p` cells.

    Added to the index of a box's lowest corner in a grid of :math:`c` =
    ``cells_per_axis`` cells per axis, they give every cell of the box. Public
    and the same in every fit, so cached (read-only) for the process.
    """
    offsets = np.zeros(1, dtype=np.intp)
    for axis in reversed(range(n_dims)):
        offsets = (offsets[:, None] + np.arange(ratio) * cells_per_axis**axis).ravel()
    offsets.flags.writeable = False
    return offsets


def child_cells(cells, cells_per_axis, n_dims):
    """The :math:`2^p` cells of the next finer level (twice the cells per axis) in each cell.

    Returns the children in increasing cell order and, for each, the
    position of its parent in ``cells``.
    """
    corners = _finest_corners(cells, cells_per_axis, n_dims, 2)
    children = (corners[:, None] + descendant_offsets(2 * cells_per_axis, n_dims, 2)).ravel()
    parents = np.repeat(np.arange(len(cells)), 2**n_dims)
    order = np.argsort(children, kind="stable")
    return children[order], parents[order]


def coarse_cells(cells, cells_per_axis, n_dims, ratio):
    r"""Cell of a coarser grid holding each of the given cells of a finer one (public, no data).

    Cell :math:`\sum_j a_j c^j` of the grid with :math:`c` = ``cells_per_axis``
    cells per axis lies in cell :math:`\sum_j \lfloor a_j/r\rfloor (c/r)^j` of the
    grid with :math:`c/r` cells per axis (``ratio`` r, a power of two dividing c):
    the nested grids of :meth:`GridInitializer._cell_index`, whose origins agree
    and whose widths differ by the factor r.
    """
    coarse_per_axis = cells_per_axis // ratio
    return (_axes(cells, cells_per_axis, n_dims) // ratio) @ coarse_per_axis ** np.arange(n_dims)


def shifted_cells_per_axis(g):
    """Cells per axis of the shifted grid of level ``g``: ``[-Lambda - s, 2 Lambda - s)`` in cells of ``2 Lambda / g``."""
    return g + g // 2


def multiresolution_leaves(levels, n_dims, release_counts, thresholds):
    r"""A private quadtree-like partition from the noisy counts of nested dense grids.

    The *nodes* are the heavy cells (:math:`\tilde n_c > \tau_g`) of the
    coarsest level and, at every finer level, the heavy cells whose parent is
    a node. Every node is a *leaf* holding the rows of its cell that lie in
    no child node, with the noisy weight :math:`\tilde n_c - \sum_{\text{child
    nodes}} \tilde n_{c'}`; leaves of weight at most their level's
    :math:`\tau_g` are dropped with their rows. Dense regions are refined to
    the finest level at which they stay heavy, so a small cluster keeps its
    own leaves where a single level would merge it (coarse) or drop it (fine).

    Only the counts the partition reads are released: every cell of the
    coarsest level, then at each finer level the :math:`2^p` children of the
    nodes of the level above (the other cells of a level could never be
    nodes). Which cells those are is a function of the counts released
    before, so each level is a Gaussian mechanism on a sub-vector of that
    level's counts (sensitivity at most the whole vector's), adaptively
    composed: the privacy of a release of every cell, and the same partition
    as from the counts of every cell (the same law), at the cost of the
    nodes' children rather than of the :math:`(3g/2)^p` cells of a level
    (126k noisy counts at p = 3, most of a fit at n = 10^4: issue #17).

    Parameters
    ----------
    levels : sequence of int
        Cells per axis, each level twice the previous one.
    n_dims : int
        Dimension of the grids.
    release_counts : callable
        ``release_counts(level, cells)``: the noisy counts of the given cells
        (sorted indices :math:`\sum_j a_j c^j`) of level ``level`` (a
        position in ``levels``). Called once per level, coarsest first, even
        with no cells, so that every level's release is made and charged
        whatever the counts.
    thresholds : list of float
        Per level, the heavy-cell threshold :math:`\tau_g`.

    Returns
    -------
    MultiresolutionLeaves
    """
    node_cells, node_counts, node_parents, node_thresholds = [], [], [], []
    cells = np.arange(levels[0] ** n_dims)
    parents = np.full(cells.size, -1, dtype=np.intp)
    for level, (cells_per_axis, threshold) in enumerate(zip(levels, thresholds)):
        if level > 0:
            cells, parent_positions = child_cells(node_cells[-1], levels[level - 1], n_dims)
            parents = len(node_counts) - len(node_cells[-1]) + parent_positions
        noisy = np.asarray(release_counts(level, cells), dtype=float)
        heavy = noisy > threshold
        node_cells.append(cells[heavy])
        node_counts.extend(noisy[heavy])
        node_parents.extend(parents[heavy])
        node_thresholds.extend([threshold] * int(heavy.sum()))
    node_counts = np.asarray(node_counts, dtype=float)
    node_parents = np.asarray(node_parents, dtype=np.intp)
    has_parent = node_parents >= 0
    weights = node_counts - np.bincount(node_parents[has_parent], weights=node_counts[has_parent],
                                        minlength=len(node_counts))
    kept = weights > np.asarray(node_thresholds, dtype=float)
    leaf_of_node = np.where(kept, np.cumsum(kept) - 1, -1)
    level_of_node = np.repeat(np.asarray(levels), [len(c) for c in node_cells])
    finest = int(level_of_node[kept].max()) if kept.any() else 0
    return MultiresolutionLeaves(tuple(levels), node_cells, leaf_of_node, weights[kept], finest)


class GridInitializer:
    r"""DP-PCA + private grid coreset + DP-Lloyd: the initializer A of spec §9.6.

    Not from the thesis: a practical private k-means whose output is good
    enough for the core steps on separated data (Su et al. 2016's "hybrid":
    private grid coreset, then DPLloyd). With a zCDP budget :math:`\rho_A`,
    split 0.10 / 0.12 / 0.38 / 0.40 between the four stages (the PCA share
    goes to the sums when no projection is needed):

    1. :math:`p = \min(d, \text{projection\_dim})` (by default d up to
       d = 4, else 3); if :math:`p < d`,
       Analyze-Gauss DP-PCA (Dwork, Talwar, Thakurta & Zhang 2014): the upper
       triangle of :math:`\sum_x (x/\Lambda)(x/\Lambda)^\top` plus Gaussian
       noise (sensitivity :math:`\sqrt 2` replace-one, 1 add/remove), and
       :math:`V` the top-p eigenvectors of the noisy matrix.
    2. A shift :math:`s` uniform in :math:`[0, \Lambda)^p` (public
       randomness, drawn before any release) and, for every level
       :math:`g \in \{2, 4, \dots, 64\}` with :math:`(3g/2)^p \le`
       ``max_grid_cells``: noisy counts of the dense grid of cells of width
       :math:`2\Lambda/g` with origin :math:`-\Lambda - s` (:math:`3g/2` cells
       per axis, so that it still covers the ball; each cell of level g is
       the union of :math:`2^p` cells of level 2g) in the projected
       coordinates :math:`y = xV`. The shift keeps clusters centred on the
       data's centre from straddling the same cell boundaries at every level.
    3. Heavy cells :math:`\tilde n_c > \tau_g`,
       :math:`\tau_g = \max(\sigma_c(\sqrt{2\log(\text{cells})} + 2), \sigma_s\sqrt d/0.3)`,
       refined top-down into a multi-resolution partition
       (:func:`multiresolution_leaves`, post-processing of the counts): the
       nodes are the heavy cells of the coarsest level and the heavy cells
       of finer levels whose parent is a node; each node is a leaf of the rows
       of its cell in no child node, with weight
       :math:`\tilde n_c - \sum_{\text{child nodes}}\tilde n_{c'}`, kept when
       above :math:`\tau_g`. Dense regions get fine cells and a small cluster
       keeps its own leaves (the single level of earlier versions, the finest
       one holding 80% of the mass, dropped clusters of a few percent at
       n = 10^4: issue #16). Only the counts the partition reads are
       released (every cell of the coarsest level, then the children of the
       nodes): the same partition, and the same privacy, as the noisy counts
       of every cell (:func:`multiresolution_leaves`).
    4. Noisy sums of :math:`x/\Lambda` over the leaves (disjoint, each row in
       at most one: one Gaussian mechanism); coreset points
       :math:`\Pi_{B(0,\Lambda)}(\Lambda\,\mathrm{JS}(\tilde S_c/\tilde w_c))` with
       weights :math:`\tilde w_c`, where JS is the James-Stein shrinkage of
       :func:`james_stein` with the public noise scale
       :math:`\sigma_s/\tilde w_c` (post-processing; in high dimension it
       keeps a noise-dominated point near the centre of the data ball).
    5. Weighted k-means on the coreset (k-means++, ``n_restarts`` restarts,
       at most 100 Lloyd iterations; post-processing); with at most k
       leaves, each leaf's point is a centre (the optimum). With fewer than k
       leaves, the missing centres are :func:`filler_centers`:
       :math:`\pm 10^{-3}\Lambda` times the principal directions of step 1
       (the coordinate axes without projection), near the centre of the data
       ball, and a warning says so.
    6. ``n_lloyd_steps`` DP-Lloyd steps (:func:`lloyd_step`, whose means are
       shrunk the same way), splitting the 0.40 share evenly.

    Every release is a Gaussian mechanism calibrated as
    :math:`\sigma = \Delta/\sqrt{2\rho}`, so the whole initializer is
    :math:`\rho_A`-zCDP under the given neighbouring relation (adaptive
    composition, Bun & Steinke 2016, Lemma 2.3). The exact number of rows is
    never used: the total is a noisy count. The shift is data-independent
    and the partition of steps 3-4 a function of released counts only, so
    the leaves' sums have the sensitivity of disjoint cells whatever the
    shift and the counts (adaptive composition).

    Parameters
    ----------
    projection_dim : int or None, default=None
        Dimension p of the grid. ``None`` chooses it from the public number
        of features d: no projection up to d = 4
        (:data:`GRID_MAX_UNPROJECTED_DIM`), else p = 3. (A projection to 3 of 4
        standardized features, whose variances are all 1, is a random
        subspace: issue #15.)
    n_lloyd_steps : int, default=2
        DP-Lloyd steps after the coreset.
    max_grid_cells : int, default=2**18
        Largest dense grid.
    n_restarts : int, default=10
        k-means++ restarts on the coreset.
    warn_few_heavy_cells : bool, default=True
        Warn (``UserWarning``) when step 5 needs filler centres. Every
        estimator of the package passes False and reports it after the fit,
        from the released number of heavy cells (a
        :class:`~skdpcluster.UtilityWarning`; ``quality_["heavy_cells_short"]``
        of the stable and local estimators, ``fallback_info_["n_heavy_cells"]``
        of the k-tuple clusterer and the mixture): a warning inside a private
        step, made an error, would fail a fit after its randomness.
    """

    privacy_model = "zcdp"
    can_fail = False
    #: ``fit_centers`` also takes a rows object of :mod:`skdpcluster.utils._data` (Dask input).
    accepts_chunked_rows = True

    def __init__(self, projection_dim=None, n_lloyd_steps=2, max_grid_cells=2**18, n_restarts=10,
                 warn_few_heavy_cells=True):
        self.projection_dim = projection_dim
        self.n_lloyd_steps = n_lloyd_steps
        self.max_grid_cells = max_grid_cells
        self.n_restarts = n_restarts
        self.warn_few_heavy_cells = warn_few_heavy_cells

    def fit_centers(self, X, n_clusters, *, budget, data_radius, neighbouring, rng):
        """Private initial centres of ``X`` (rows in B(0, data_radius)); see the class docstring.

        ``X`` is an array or a rows object of :mod:`skdpcluster.utils._data`:
        every stage is one pass of per-chunk sums (second moment, the grid
        counts of all levels, the leaves' sums, each Lloyd step).
        """
        rows = as_rows(X)
        n_features = rows.shape[1]
        shares = self._shares(n_features, budget["rho"])
        basis, events = self._projection(rows, shares["pca"], data_radius, neighbouring, rng)
        grid, leaves, count_events = self._heavy_cells(
            rows, basis, shares, data_radius, neighbouring, rng)
        points, weights, sum_event = self._coreset(
            rows, basis, grid, leaves, shares["sums"], data_radius, neighbouring, rng)
        level = leaves.finest_level
        centers = self._cluster_coreset(points, weights, n_clusters, data_radius, rng,
                                        directions=basis)
        centers, lloyd_events, fallbacks = self._lloyd(
            rows, centers, shares["lloyd"], data_radius, neighbouring, rng)
        info = {"grid_level": level, "n_heavy_cells": len(points),
                "projection_dim": n_features if basis is None else basis.shape[1],
                "lloyd_fallbacks": fallbacks}
        return centers, events + count_events + [sum_event] + lloyd_events, info

    # -- budget ---------------------------------------------------------------------
    def _dimension(self, n_features):
        """p of step 1, from public values only (``projection_dim=None``: see the parameter)."""
        if self.projection_dim is None:
            return n_features if n_features <= GRID_MAX_UNPROJECTED_DIM else 3
        return min(self.projection_dim, n_features)

    def _shares(self, n_features, rho):
        shares = {name: share * rho for name, share in GRID_SHARES.items()}
        if self._dimension(n_features) >= n_features:
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
        p = self._dimension(n_features)
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

    def _thresholds(self, n_features, n_dims, shares, neighbouring):
        """The levels and, per level, the heavy-cell threshold :math:`\\tau_g` (public values)."""
        levels = tuple(self._levels(n_dims))
        sigma_counts, sigma_sums = self._noise_scales(n_features, shares, len(levels),
                                                      neighbouring)
        accuracy_floor = sigma_sums * math.sqrt(n_features) / GRID_CORESET_ERROR
        cells = [shifted_cells_per_axis(g) ** n_dims for g in levels]
        return levels, [max(sigma_counts * (math.sqrt(2.0 * math.log(size)) + 2.0),
                            accuracy_floor) for size in cells]

    def heavy_cell_threshold(self, n_features, rho, neighbouring):
        """Smallest heavy-cell threshold over the levels: a cell needs at least this many rows.

        A function of public values only (``n_features``, the budget, the
        relation), for the estimators' utility messages.
        """
        shares = self._shares(n_features, rho)
        return min(self._thresholds(n_features, self._dimension(n_features), shares,
                                    neighbouring)[1])

    def _levels(self, p):
        """Cells per axis of every level (``g``, then its shifted grid has ``3g/2`` cells)."""
        return ([g for g in GRID_LEVELS if shifted_cells_per_axis(g) ** p <= self.max_grid_cells]
                or [GRID_LEVELS[0]])

    @staticmethod
    def _grid_shift(n_dims, data_radius, rng):
        """Uniform shift of the nested grids in ``[0, Lambda)^p``: public randomness (step 2)."""
        return rng.uniform(0.0, data_radius, size=n_dims)

    @staticmethod
    def _cell_index(projected, g, data_radius, shift=None):
        """Cell of every row in the grid of width ``2 Lambda / g`` over ``[-Lambda, Lambda]^p``.

        With a ``shift`` (public, in ``[0, Lambda)^p``), the grid origin moves to
        ``-Lambda - shift`` and it has :func:`shifted_cells_per_axis` cells per axis,
        so that every level still covers the ball and each cell of level ``g`` is the
        union of ``2^p`` cells of level ``2g``.
        """
        scaled, cells = _grid_coordinates(projected, g, data_radius, shift)
        return _index_of_coordinates(scaled, cells)

    def _heavy_cells(self, rows, basis, shares, data_radius, neighbouring, rng):
        """Steps 2-3: noisy counts per level, and the leaves of the multi-resolution partition.

        The counts of all levels come from one pass (:func:`_finest_cell_counts`: the
        finest level's, added up into the coarser ones by :func:`_level_counts`); the
        noisy counts are those :func:`multiresolution_leaves` reads. Returns the grid
        (levels and public shift, what a pass needs to find a row's cells), the
        :class:`MultiresolutionLeaves` and the count events (one per level).
        """
        n_features = rows.shape[1]
        n_dims = n_features if basis is None else basis.shape[1]
        levels, thresholds = self._thresholds(n_features, n_dims, shares, neighbouring)
        grid = (levels, self._grid_shift(n_dims, data_radius, rng))
        finest_counts = rows.map_reduce(_finest_cell_counts, basis, grid, data_radius)
        counts = _level_counts(finest_counts, levels, n_dims)
        events = []

        def release_counts(level, cells):
            noisy, event = zcdp_gaussian_mechanism(
                _counts_at(counts[level], cells),
                sensitivity=SUM_COUNT_SENSITIVITY[neighbouring][1],
                rho=shares["counts"] / len(levels), rng=rng,
                label=f"stable/grid_init/counts_g{levels[level]}", neighbouring=neighbouring,
            )
            events.append(event)
            return noisy

        leaves = multiresolution_leaves([shifted_cells_per_axis(g) for g in levels], n_dims,
                                        release_counts, thresholds)
        return grid, leaves, events

    def _coreset(self, rows, basis, grid, leaves, rho, data_radius, neighbouring, rng):
        """Step 4: noisy sums over the leaves (disjoint, one pass); coreset points and weights."""
        weights = leaves.weights
        n_dims = rows.shape[1] if basis is None else basis.shape[1]
        cell_leaves = leaves.finest_cell_leaves(n_dims)
        sums, _ = rows.map_reduce(_leaf_sums, basis, grid, data_radius, cell_leaves,
                                  len(weights))
        noisy, event = zcdp_gaussian_mechanism(
            sums / data_radius, sensitivity=SUM_COUNT_SENSITIVITY[neighbouring][0], rho=rho,
            rng=rng, label="stable/grid_init/cell_sums", neighbouring=neighbouring,
        )
        means = james_stein(np.reshape(noisy, sums.shape) / weights[:, None],
                            event.scale / weights)
        return _project_onto_ball(data_radius * means, 0.0, data_radius), weights, event

    def _cluster_coreset(self, points, weights, n_clusters, data_radius, rng, directions=None):
        """Step 5: weighted k-means++ on the coreset (post-processing).

        With at most k coreset points, every point is a centre: that is the
        optimum (cost 0) that the restarts would look for, found without
        them (on separated data each cluster is about one heavy cell, and
        the restarts were most of a fit at n = 10^4: issue #17). Missing
        centres (fewer leaves than k) are :func:`filler_centers` along the
        released principal ``directions`` (columns; the coordinate axes when ``None``).

        Before the restarts, equal coreset points (the shrinkage can take
        several to the centre) are merged, their weights added: the weighted
        k-means objective is the same, and scikit-learn's ``KMeans`` then has
        no duplicate points to warn about ("Number of distinct clusters found
        smaller than n_clusters"), so no warning filter is touched
        (:mod:`skdpcluster.utils._warnings`). At most k distinct points are
        the centres themselves, as above, with filler centres for the rest.
        """
        n_fit = min(n_clusters, len(points))
        if directions is None:
            directions = np.eye(points.shape[1])
        filler = filler_centers(n_clusters - n_fit, directions, GRID_FILLER_RADIUS * data_radius,
                                rng)
        if n_fit < n_clusters and self.warn_few_heavy_cells:
            warn_user(
                f"GridInitializer: only {len(points)} heavy grid cells for n_clusters={n_clusters}"
                f"; {n_clusters - n_fit} initial centres are placed near the centre of the data "
                "ball. There is too little data for this epsilon (or data_radius is much too "
                "large).", UserWarning)
        if n_fit == len(points):  # a centre per point: the points are the optimum (cost 0)
            return np.vstack([points, filler])
        points, weights = _merge_equal_points(points, weights)
        if len(points) <= n_fit:  # more than k points, at most k distinct: the same optimum
            return np.vstack([points, filler_centers(n_fit - len(points), directions,
                                                     GRID_FILLER_RADIUS * data_radius, rng)])
        model = KMeans(n_clusters=n_fit, n_init=self.n_restarts, max_iter=100,
                       random_state=int(rng.integers(2**31 - 1)))
        # A few hundred points: native threads cost more than they give (8x, measured).
        with single_threaded():
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


def _merge_equal_points(points, weights):
    """Equal rows of ``points`` merged into their first occurrence, their weights added.

    Returns the arrays themselves when the rows are distinct (the usual case).
    """
    _, first, inverse = np.unique(points, axis=0, return_index=True, return_inverse=True)
    if len(first) == len(points):
        return points, weights
    order = np.argsort(first, kind="stable")  # first-occurrence order, as in ``points``
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    merged = np.bincount(rank[inverse.ravel()], weights=weights, minlength=len(first))
    return points[first[order]], merged


def _second_moment(chunk):
    r""":math:`\sum x x^\top` of a chunk of rows (the DP-PCA statistic of step 1)."""
    return chunk.X.T @ chunk.X


def _finest_cells(chunk, basis, grid, data_radius):
    """Cell of every row of a chunk in the finest level of the shifted ``grid`` (levels, shift).

    The rows' cells at the coarser levels follow from it (:func:`coarse_cells`),
    so a pass needs this one index per row. Computed once per chunk
    (:meth:`~skdpcluster.utils._data.RowChunk.cached`): in memory the counts
    and the leaves' sums of a fit share it.
    """
    levels, shift = grid
    key = ("grid_cells", levels, shift.tobytes(), data_radius,
           None if basis is None else basis.tobytes())
    return chunk.cached(key, lambda: cell_indices(chunk.X, basis, levels[-1], data_radius, shift))


def cell_indices(X, basis, g, data_radius, shift):
    r""":meth:`GridInitializer._cell_index` of the projected rows, :data:`GRID_BLOCK_ROWS` at a time.

    The blocks bound the temporaries (projection, scaled coordinates, axes)
    to a few MiB. **A row's cell is a function of the row alone**: the cell
    of its projection computed coordinate by coordinate in a fixed order
    (:func:`fixed_order_projection`). The matrix product's rounding depends
    on the block (under add/remove one row less moves the others in it), but
    both ways a projected coordinate is within :math:`(d + 1)u\,2\Lambda` of
    the exact one (the rows are in :math:`B(0, \Lambda)`, the basis vectors
    of unit norm); where every grid coordinate is farther than
    :func:`_cell_margin` from a cell boundary the product's cell is that
    cell, and the other rows are projected again in the fixed order.
    """
    index = np.empty(len(X), dtype=np.int64)
    margin = None if basis is None else _cell_margin(X.shape[1], g, data_radius, shift)
    for start in range(0, len(X), GRID_BLOCK_ROWS):
        rows = slice(start, start + GRID_BLOCK_ROWS)
        if basis is None:
            index[rows] = GridInitializer._cell_index(X[rows], g, data_radius, shift)
            continue
        scaled, cells = _grid_coordinates(X[rows] @ basis, g, data_radius, shift)
        fraction = scaled - np.floor(scaled)
        near = np.unique(np.flatnonzero((fraction <= margin) | (fraction >= 1.0 - margin))
                         // scaled.shape[1])
        index[rows] = _index_of_coordinates(scaled, cells)
        if len(near):
            index[start + near] = GridInitializer._cell_index(
                fixed_order_projection(X[rows][near], basis), g, data_radius, shift)
    return index


def _grid_coordinates(projected, g, data_radius, shift):
    """Coordinates of the rows in units of cells from the grid's origin, and cells per axis."""
    width = 2.0 * data_radius / g
    if shift is None:
        cells, offset = g, data_radius
    else:
        cells, offset = shifted_cells_per_axis(g), data_radius + shift
    scaled = projected + offset
    scaled /= width
    return scaled, cells


def _index_of_coordinates(scaled, cells):
    """The cell index of grid coordinates (``scaled`` is overwritten): floor, clip, Horner."""
    np.floor(scaled, out=scaled)
    axes = np.clip(scaled, 0, cells - 1, out=scaled).astype(np.int64)
    index = axes[:, -1]
    for axis in range(scaled.shape[1] - 2, -1, -1):  # sum_j a_j cells^j, Horner's rule
        index *= cells
        index += axes[:, axis]
    return index


def _cell_margin(n_features, g, data_radius, shift):
    r"""Distance to a cell boundary (in cells) below which a row's cell is recomputed.

    Four times a bound on the difference of a grid coordinate
    :math:`(y + o)/w` computed from two projections within
    :math:`(d + 1)u\,2\Lambda` of the exact one (plus the rounding of the
    addition and the division): :math:`4(d + 8)u\,((2\Lambda + o)/w + m + 1)`
    with :math:`m` cells per axis, :math:`o` the largest offset.
    """
    width = 2.0 * data_radius / g
    offset = data_radius + (0.0 if shift is None else float(np.max(shift)))
    cells = g if shift is None else shifted_cells_per_axis(g)
    return 4.0 * (n_features + 8) * 2.0**-53 * ((2.0 * data_radius + offset) / width + cells + 1)


def fixed_order_projection(X, basis):
    """``X @ basis`` as a sum over the coordinates in order: a function of each row alone."""
    projected = X[:, :1] * basis[0]
    for column in range(1, X.shape[1]):
        projected += X[:, column, None] * basis[column]
    return projected


def _finest_cell_counts(chunk, basis, grid, data_radius):
    """Rows of a chunk per cell of the finest grid level (steps 2-3)."""
    n_dims = chunk.X.shape[1] if basis is None else basis.shape[1]
    return np.bincount(_finest_cells(chunk, basis, grid, data_radius),
                       minlength=shifted_cells_per_axis(grid[0][-1]) ** n_dims)


def _level_counts(finest_counts, levels, n_dims):
    """Per level, the occupied cells (sorted) and their row counts, added up from the finest level.

    Sums of integers, so exact in floating point; a few entries per occupied
    cell rather than dense arrays of every cell of every level (the memory of
    a fit at n = 10^4 is that of its grid, issue #17). :func:`_counts_at`
    reads them.
    """
    finest = shifted_cells_per_axis(levels[-1])
    occupied = np.flatnonzero(finest_counts)
    rows = finest_counts[occupied].astype(float)
    counts = []
    for g in levels:
        cells, position = np.unique(coarse_cells(occupied, finest, n_dims, levels[-1] // g),
                                    return_inverse=True)
        counts.append((cells, np.bincount(position, weights=rows, minlength=len(cells))))
    return counts


def _counts_at(level_counts, cells):
    """Row counts of the given cells of a level of :func:`_level_counts` (0 for an empty cell)."""
    occupied, counts = level_counts
    position = np.searchsorted(occupied, cells)
    found = position < len(occupied)
    found[found] = occupied[position[found]] == cells[found]
    values = np.zeros(len(cells))
    values[found] = counts[position[found]]
    return values


def _leaf_sums(chunk, basis, grid, data_radius, cell_leaves, n_leaves):
    """Sums and counts of a chunk's rows per leaf of the multi-resolution partition (step 4).

    ``cell_leaves`` is the leaf of every finest cell (``-1``: none); rows in no
    leaf go to an extra index ``n_leaves`` (dropped).
    """
    row_leaves = cell_leaves[_finest_cells(chunk, basis, grid, data_radius)]
    return cell_sums(chunk.X, np.where(row_leaves < 0, n_leaves, row_leaves), n_leaves)


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
    #: ``fit_centers`` also takes Dask rows: :class:`~skdpcluster.KTupleClusterer` accepts them.
    accepts_chunked_rows = True

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
        with collected_warnings(ignore=True):  # NotSeparatedWarning: handled by the caller
            inner.fit(X)
        info = {"ktuple_status": inner.status_, "n_tuples": inner.n_tuples_}
        return inner.cluster_centers_, list(inner.privacy_ledger_), info
