"""The private 1-median by noisy projected gradient descent (Shechner 2021, §5;
``spec/shechner_stable.md`` §9.7), for one cell or for disjoint cells at once."""

import functools
import math

import numpy as np

from skdpcluster.averaging._common import (
    _MAX_DOMAIN_RADIUS,
    _check_choice,
    _check_finite_array,
    _check_generator,
    _check_points,
    _check_positive_int,
    _check_real,
    _gdp_rho,
    _project_onto_ball,
    _split_evenly,
    rows_outside_ball,
    scale_into_ball,
)
from skdpcluster.mechanisms import (
    PrivacyEvent,
    zcdp_gaussian_mechanism,
    zcdp_gaussian_sigma,
)
from skdpcluster.utils._threads import ordered_map
from skdpcluster.utils._validation import check_epsilon_delta

# Noisy projected gradient descent for the 1-median (shechner_stable.md §9.3,
# §9.7): L2 sensitivity of one cell's gradient sum and count. The replace-one
# values are those of k disjoint cells released jointly, so one call per cell
# with the same parameters costs the same as one call in total.
_MEDIAN_SENSITIVITIES = {"add_remove": (1.0, 1.0), "replace_one": (2.0, math.sqrt(2.0))}
_MEDIAN_COUNT_SHARE = 0.1
# Values per block of rows in the 1-median's gradient sums (1 MiB of float64).
_MEDIAN_BLOCK_ELEMENTS = 2**17
# Blocks of values per thread, at least, in the 1-median's steps (see _cell_blocks).
_MEDIAN_THREAD_BLOCKS = 8
# Values per block of the gather of the points sorted by cell (128 KiB: in cache).
_GATHER_BLOCK_ELEMENTS = 2**14
# Blocks of the gather per thread, at least (see sorted_by_cell).
_GATHER_THREAD_BLOCKS = 64
#: Largest step factor: s R / sqrt(t + 1) times a noisy gradient stays finite for R <= 1e100
#: and any noise scale below 1e100.
MAX_STEP_SCALE = 1e6
# Rows closer than this to their cell's iterate add 0 to its gradient sum (u(0) = 0): above
# it, underflow costs the squared norms a relative 2^-74 at most (see _block_unit_sums).
_MEDIAN_MIN_NORM = 2.0**-500
# The public functions project every point into B(c_j, _DOMAIN_REACH * R_j) first, for
# domain radii R_j of at most _MAX_DOMAIN_RADIUS (the estimators' largest data_radius): every
# difference to an iterate is then finite and far from overflowing (see _clip_into_domains).
_DOMAIN_REACH = 2.0**20

# ---------------------------------------------------------------------------
# Private 1-median (shechner_stable.md §9.7)
# ---------------------------------------------------------------------------


def private_one_median(
    points,
    *,
    center,
    radius,
    epsilon,
    delta,
    rng,
    n_iter=50,
    step_scale=0.5,
    neighbouring="replace_one",
):
    r"""Private 1-median of one cell by noisy projected gradient descent (Shechner 2021, §5).

    Implements step 3 of ``spec/shechner_stable.md`` §9.7 for one cell, the
    practical form of the thesis' private convex ERM tool (Theorem 5.1,
    Bassily, Smith & Thakurta 2014; spec §4.1) for the loss
    :math:`\ell(w, x) = \|w - x\|` on the domain :math:`B(c, R)`:

    .. math::

        \tilde N = \max(|X| + N(0, \sigma_c^2), 1), \qquad
        g_t = \sum_{x \in X} u(w_t - x) + N(0, \sigma_g^2 I_d), \quad u(v) = v/\|v\|,

        w_{t+1} = \Pi_{B(c, R)}\left(w_t - \eta_t\, g_t / \tilde N\right), \qquad
        \eta_t = s\, R / \sqrt{t + 1},

    from :math:`w_0 = c`, for :math:`T` = ``n_iter`` steps, and return the
    average of the iterates of the second half (suffix averaging). The
    excess risk is about :math:`R(1/\sqrt{T} + \sqrt{d}\,\Delta_g/(\tilde N
    \sqrt{2\rho}))`, the form of Theorem 5.1.

    **Privacy.** Every :math:`u(\cdot)` has norm at most 1, so one point
    changes the gradient sum by at most :math:`\Delta_g` = 1 (add/remove) or
    2 (replace-one) and the count by :math:`\Delta_c` = 1 (add/remove) or
    :math:`\sqrt 2` (replace-one, the value for k disjoint cells released
    jointly; spec §9.3). The :math:`T + 1` releases are Gaussian mechanisms
    with :math:`\sigma_c = \Delta_c / \sqrt{2\rho_c}` and
    :math:`\sigma_g = \Delta_g / \sqrt{2\rho_g}`, :math:`\rho_c = 0.1\rho`,
    :math:`\rho_g = 0.9\rho/T` (spec §9.7). Their adaptive composition is
    :math:`\mu`-GDP with :math:`\mu^2 = 2\rho` (Dong, Roth & Su 2022,
    Corollary 3.3), and :math:`\rho` is chosen so that this is exactly
    :math:`(\varepsilon, \delta)`-DP (the analytic Gaussian calibration at
    sensitivity 1; Balle & Wang 2018, Theorem 8). It is also
    :math:`\rho`-zCDP (Bun & Steinke 2016). Calls on disjoint cells with the
    same parameters cost this once in total, as one Gaussian mechanism on
    the stacked vectors.

    **Far points.** First every point :math:`x` is replaced by
    :math:`c + \Pi(x - c)`, :math:`\Pi` the projection into the public ball
    :math:`B(0, 2^{20} R)` (points inside it are kept bit for bit; an
    offset that overflows to :math:`\pm\infty` goes to the sphere along the
    signs of its infinite coordinates:
    :func:`~skdpcluster.averaging._common.scale_into_ball`). The map is a
    function of the point and public values, so the analysis above is
    unchanged. With :math:`R \le 10^{100}` every difference :math:`w_t - x`
    is then finite and its squared norm does not overflow, so every point
    adds its unit vector (of norm at most 1) and the release is finite.
    The map keeps :math:`x` on its ray from :math:`c`, so for an iterate in
    :math:`B(c, R)` it turns the direction of :math:`w_t - x` by at most
    :math:`\arcsin(1/(2^{20} - 2)) < 10^{-6}` radians. (Without it, a
    difference that overflowed made the release NaN, and a point farther
    than about :math:`1.3 \cdot 10^{154}` from the iterate added 0; review
    RD-6.)

    Parameters
    ----------
    points : array-like of shape (n_points, n_features)
        The points of the cell; may be empty.
    center : array-like of shape (n_features,)
        Public centre :math:`c` of the domain (the initial centre
        :math:`b_i`), also the starting point.
    radius : float
        Public radius :math:`R` of the domain, in :math:`(0, 10^{100}]` (for
        example :math:`\hat D_i / 2`).
    epsilon : float
        > 0.
    delta : float
        In (0, 1).
    rng : numpy.random.Generator
    n_iter : int, default=50
        Number of gradient steps :math:`T`.
    step_scale : float, default=0.5
        The step factor :math:`s`, in (0, 1e6] (above, the steps' products
        overflowed after the noise was drawn: NaN releases).
    neighbouring : {"replace_one", "add_remove"}, default="replace_one"
        The relation the sensitivities are calibrated to (the library's
        default is replace-one).

    Returns
    -------
    median : ndarray of shape (n_features,)
        A point of :math:`B(c, R)`.
    event : PrivacyEvent
        ``"private_one_median"``, ``(epsilon, delta)``, with ``rho`` the zCDP
        of the same releases; ``details`` holds their shares (``rho_count``,
        ``rho_per_step``), sensitivities and noise scales (``count_*``,
        ``gradient_*``); ``sensitivity`` and ``scale`` are set where both
        kinds of release share one value.
    """
    points, center = _check_points(points, center)
    radius = _check_real(radius, "radius")
    medians, event = private_one_medians(
        points, np.zeros(points.shape[0], dtype=np.intp), centers=center[None, :],
        radii=[radius], epsilon=epsilon, delta=delta, rng=rng, n_iter=n_iter,
        step_scale=step_scale, neighbouring=neighbouring,
    )
    return medians[0], event


def _check_cells(labels, centers, radii, n_points):
    """Validated cell labels, domain centres and radii of :func:`private_one_medians`."""
    centers = _check_finite_array(centers, "centers", 2)
    radii = np.asarray(radii, dtype=float)
    if (radii.shape != (centers.shape[0],)
            or not np.all((radii > 0) & (radii <= _MAX_DOMAIN_RADIUS))):
        raise ValueError(
            f"radii must hold one radius in (0, {_MAX_DOMAIN_RADIUS:g}] per row of centers "
            f"({centers.shape[0]}), got {radii!r}; rescale the points and the domains for a "
            "larger one (the 1-median is equivariant under scaling)."
        )
    labels = np.asarray(labels)
    if (labels.shape != (n_points,) or not np.issubdtype(labels.dtype, np.integer)
            or (n_points and (labels.min() < 0 or labels.max() >= centers.shape[0]))):
        raise ValueError(
            f"labels must hold one cell index in [0, {centers.shape[0]}) per point; pass "
            "integers of shape (n_points,)."
        )
    return labels, centers, radii


def _block_unit_sums(iterates, points_t, blocks):
    r"""Partial sums :math:`\sum_x u(w_j - x)` of the blocks, in order: ``[(cell, sum), ...]``.

    ``blocks`` are (cell, start, stop) column ranges of ``points_t`` (the
    points sorted by cell, transposed: one contiguous row per feature), all
    at most :data:`_MEDIAN_BLOCK_ELEMENTS` values. Per block: the
    differences :math:`w_j - x` (one contiguous row per feature, computed
    in a buffer allocated once per call), their norms, the factors
    :math:`\gamma/\|w_j - x\|` and one matrix-vector product.

    **The sensitivity in floating point.** Every row adds its difference
    :math:`v = \mathrm{fl}(w_j - x)` times a computed factor :math:`a`, and
    :math:`\|a v\| \le 1` holds for the computed values. The squared norm is
    a sum of the :math:`d` squares :math:`v_i^2`, all :math:`\ge 0` (no
    cancellation, whatever the order of the additions), with at most two
    roundings per term, so with the unit roundoff :math:`u = 2^{-53}` its
    computed value :math:`s` satisfies :math:`s \ge \|v\|^2(1-u)^{2d} -
    2d\,2^{-1075}` (:math:`2^{-1075}` bounds an underflow's absolute
    error). Rows with a computed norm below :data:`_MEDIAN_MIN_NORM` =
    :math:`2^{-500}` add 0 (:math:`u(0) = 0`; a row that close to the
    iterate barely moves it); above it :math:`2d\,2^{-1075} \le d\,2^{-74}
    s`, and the computed norm :math:`N = \mathrm{fl}(\sqrt s)` satisfies
    :math:`\|v\| \le N(1 + (d + 2)u)` to first order. The factor is
    :math:`a = \mathrm{fl}(\gamma/N)` with :math:`\gamma = 1 - 2(d + 8)u`
    (exact in float64), so the products :math:`\mathrm{fl}(a v_i)` form a
    vector of norm at most :math:`\gamma(1 + u)^2(1 + (d + 2)u) < 1`. (With
    :math:`1/N` instead, a row's contribution exceeded norm 1 by a unit in
    the last place on ordinary rows, and by up to 25 % when the squares
    underflowed; ``test_one_median_unit_vectors_have_norm_at_most_one``.)
    This bounds every row's term; the matrix-vector product and the block
    sums that add the terms round like any floating-point sum (a relative
    3e-11 measured on 10^6 rows), which the sensitivity does not count.
    """
    n_features = points_t.shape[0]
    gamma = 1.0 - 2.0 * (n_features + 8) * 2.0**-53
    size = max(stop - start for _, start, stop in blocks)
    differences = np.empty(n_features * size)
    norms, factors = np.empty(size), np.empty(size)
    partials = []
    for cell, start, stop in blocks:
        rows = stop - start
        difference = differences[:n_features * rows].reshape(n_features, rows)
        np.subtract(iterates[cell][:, None], points_t[:, start:stop], out=difference)
        norm = np.sqrt(np.einsum("ij,ij->j", difference, difference, out=norms[:rows]),
                       out=norms[:rows])
        factor = factors[:rows]
        if norm.min() >= _MEDIAN_MIN_NORM:  # the usual block: no row adds 0 (a third faster)
            np.divide(gamma, norm, out=factor)
        else:
            factor.fill(0.0)
            np.divide(gamma, norm, out=factor, where=norm >= _MEDIAN_MIN_NORM)
        partials.append((cell, difference @ factor))
    return partials


def _cell_blocks(counts, n_features, n_runs=1):
    """Blocks (cell, start, stop) of the non-empty cells of points sorted by cell, in runs.

    Each cell's points are taken in blocks of about
    :data:`_MEDIAN_BLOCK_ELEMENTS` values (cache-sized: 4x faster than whole
    cells at n = 10^6, d = 10). The blocks, in order, are cut in at most
    ``n_runs`` runs of consecutive blocks with about as many points each
    (one run per thread of :func:`_unit_sums`), and at least
    :data:`_MEDIAN_THREAD_BLOCKS` blocks of values each: every NumPy call of
    a block hands the GIL over, which costs about as much as the block's
    arithmetic, so two threads made the steps 5-15 % slower at n = 10^5,
    d = 10 (7.6 blocks a step) on the 2-core machine (issue #17).
    """
    block = max(1, _MEDIAN_BLOCK_ELEMENTS // n_features)
    blocks = [(cell, first, min(first + block, stop))
              for cell, start, stop in _cell_ranges(counts)
              for first in range(start, stop, block)]
    total = max(int(np.sum(counts)), 1)
    n_runs = max(1, min(n_runs, total // (_MEDIAN_THREAD_BLOCKS * block)))
    runs = [[] for _ in range(n_runs)]
    for cell, start, stop in blocks:  # a block goes to the run its first point falls in
        runs[min(n_runs - 1, start * n_runs // total)].append((cell, start, stop))
    return [run for run in runs if run]


def _unit_sums(iterates, points_t, runs, n_threads=1):
    r"""Per cell :math:`\sum_x u(w_j - x)`: the runs of blocks (:func:`_cell_blocks`) on threads.

    Every run is one task of :func:`~skdpcluster.utils._threads.ordered_map`
    on ``n_threads`` threads; every block's partial sum is computed by
    :func:`_block_unit_sums` whatever thread runs it, and the partial sums
    are added to their cell's sum in block order: the sums are the same bits
    however the blocks are cut in runs and on any number of threads (issue #17).
    """
    sums = np.zeros_like(iterates)
    partials = ordered_map(functools.partial(_block_unit_sums, iterates, points_t), runs,
                           n_threads)
    for run_partials in partials:
        for cell, partial in run_partials:
            sums[cell] += partial
    return sums


def private_one_medians(
    points,
    labels,
    *,
    centers,
    radii,
    epsilon,
    delta,
    rng,
    n_iter=50,
    step_scale=0.5,
    neighbouring="replace_one",
):
    r"""Private 1-medians of disjoint cells: :func:`private_one_median` on all cells at once.

    Cell j holds the points with ``labels == j`` and runs the noisy projected
    gradient descent of :func:`private_one_median` on its domain
    :math:`B(c_j, R_j)` from :math:`w_0 = c_j`; the k cells advance
    together, one vectorised pass over all the points per step (spec §9.7
    step 3, Shechner 2021 §5).

    **Privacy.** The noisy counts of all cells are one Gaussian release of
    the count vector, and each step one Gaussian release of the stacked
    gradient sums, with the noise scales of :func:`private_one_median`. The
    cells are disjoint, so one point changes one cell's count and sum
    (add/remove: L2 sensitivities 1 and 1) or two of them (replace-one:
    :math:`\sqrt 2` and :math:`\sqrt 2 \le 2`), each sum by a vector of
    norm at most 1: the stacked releases have the sensitivities
    :math:`\Delta_c, \Delta_g` of one cell, and the whole is
    (``epsilon``, ``delta``)-DP and :math:`\rho`-zCDP once in total, as one
    cell is. Every point is first projected into :math:`B(c_j, 2^{20} R_j)`
    of its cell, as in :func:`private_one_median` (**Far points**).

    Parameters
    ----------
    points : array-like of shape (n_points, n_features)
    labels : array-like of int of shape (n_points,)
        Cell of every point, in ``[0, n_cells)``.
    centers : array-like of shape (n_cells, n_features)
        Public domain centres :math:`c_j`, also the starting points.
    radii : array-like of shape (n_cells,)
        Public domain radii :math:`R_j`, in :math:`(0, 10^{100}]`.
    epsilon, delta, rng, n_iter, step_scale, neighbouring
        As in :func:`private_one_median`.

    Returns
    -------
    medians : ndarray of shape (n_cells, n_features)
        Row j is a point of :math:`B(c_j, R_j)`.
    event : PrivacyEvent
        ``"private_one_median"``, ``(epsilon, delta)``, with ``rho`` the zCDP
        of the same releases.
    """
    points = _check_points(points)[0]
    labels, centers, radii = _check_cells(labels, centers, radii, points.shape[0])
    if centers.shape[1] != points.shape[1]:
        raise ValueError(
            f"centers must have {points.shape[1]} columns to match points, got {centers.shape[1]}."
        )
    epsilon, delta = check_epsilon_delta(epsilon, delta, allow_zero_delta=False)
    n_iter = _check_positive_int(n_iter, "n_iter")
    reach = float(np.max(np.abs(centers))) + float(np.max(radii))
    if not (n_iter - n_iter // 2) * reach < np.finfo(float).max:
        raise ValueError(
            f"centers and radii reach {reach:.3g}: the sum of the {n_iter - n_iter // 2} suffix "
            "iterates would overflow float64 (re-review V2: a centre at -1.5e308 released -inf); "
            "translate the points and the centres (the 1-median is equivariant under "
            "translation).")
    step_scale = _check_real(step_scale, "step_scale")
    if step_scale > MAX_STEP_SCALE:
        raise ValueError(
            f"step_scale={step_scale!r} is above {MAX_STEP_SCALE:g}: a step of more than a "
            "million domain radii only overshoots, and its products overflow float64.")
    _check_choice(neighbouring, "neighbouring", _MEDIAN_SENSITIVITIES)
    check_one_median_budget(epsilon=epsilon, delta=delta, n_iter=n_iter,
                            neighbouring=neighbouring)
    rng = _check_generator(rng)
    counts, order = cell_order(labels, len(centers))
    points_t = sorted_by_cell(points, order)
    _clip_into_domains(points_t, counts, centers, radii)
    return one_medians_of_sorted(points_t, counts, centers=centers, radii=radii,
                                 epsilon=epsilon, delta=delta, rng=rng, n_iter=n_iter,
                                 step_scale=step_scale, neighbouring=neighbouring)


def _clip_into_domains(points_t, counts, centers, radii):
    r"""Project the points sorted by cell into the balls :math:`B(c_j, 2^{20} R_j)`, in place.

    The map of :func:`private_one_median` (**Far points**), for the public
    functions only: the estimators hand :func:`one_medians_of_sorted` rows
    already clipped into a ball of radius at most :math:`10^{100}`, and this
    pass is not on their path (issue #17). A point whose offset
    :math:`x - c_j` is not proven inside the ball
    (:func:`~skdpcluster.averaging._common.rows_outside_ball`) becomes
    :math:`c_j + ` :func:`~skdpcluster.averaging._common.scale_into_ball`
    of it; the others are left bit for bit. Offsets that overflow are taken
    to the sphere along their signs (no RuntimeWarning: its emission would
    depend on the data).
    """
    with np.errstate(over="ignore"):
        for cell, start, stop in _cell_ranges(counts):
            offsets = points_t[:, start:stop].T - centers[cell]
            reach = _DOMAIN_REACH * radii[cell]
            outside = rows_outside_ball(offsets, np.einsum("ij,ij->i", offsets, offsets), reach)
            if len(outside):
                clipped = centers[cell] + scale_into_ball(offsets[outside], reach)
                points_t[:, start + outside] = clipped.T


def one_medians_of_sorted(points_t, counts, *, centers, radii, epsilon, delta, rng, n_iter,
                          step_scale, neighbouring, n_threads=1, warm_start=False):
    """:func:`private_one_medians` on trusted points, sorted by :func:`sorted_by_cell`.

    The releases are those of :func:`private_one_medians` (with
    ``warm_start``, of the second half of its schedule: :func:`descent_schedule`),
    the same bits for any ``n_threads`` (the threads of every step's pass,
    :func:`_unit_sums`).
    A caller that builds ``points_t`` with ``counts, order =
    cell_order(labels(), n_cells)`` keeps neither the labels nor a 64-bit
    order alive beside it (the peak memory of a 10^6-row fit, issue #17).
    """
    runs = _cell_blocks(counts, points_t.shape[0], n_threads)
    return _median_descent(
        counts, lambda iterates: _unit_sums(iterates, points_t, runs, n_threads), centers,
        radii, epsilon=epsilon, delta=delta, rng=rng, n_iter=n_iter, step_scale=step_scale,
        neighbouring=neighbouring, warm_start=warm_start)


def cell_order(labels, n_cells):
    """Cell counts, and the points of the cells in cell order (each cell in point order).

    Points labelled ``n_cells`` are left out. The order is int32 when the
    points allow it. Labels that fit in 16 bits are sorted as such (NumPy's
    stable sort is then a radix sort; the order is the same).
    """
    counts = np.bincount(labels, minlength=n_cells + 1)[:n_cells]
    if n_cells < 2**15:
        labels = labels.astype(np.int16)
    order = np.argsort(labels, kind="stable")[:counts.sum()]
    return counts, order.astype(np.int32) if len(labels) < 2**31 else order


def sorted_by_cell(points, order, n_threads=1):
    """``points[order].T`` as a C-contiguous array: one row per feature, the points as columns.

    Gathered in blocks of :data:`_GATHER_BLOCK_ELEMENTS` values through one
    row buffer per run, so that the copy needs no more than a block beside it
    (a feature at a time would copy every column and a 64-bit order: +25 %
    peak memory at n = 10^6; a new array per block costs its page faults);
    runs of at least :data:`_GATHER_THREAD_BLOCKS` blocks on ``n_threads``
    threads (each writes its own columns; at n = 10^5, d = 10, two threads
    took 2.9 ms against 2.3 ms on one, at 10^6 28-31 ms against 41 ms).
    """
    n_features = points.shape[1]
    points_t = np.empty((n_features, len(order)))
    block = max(1, _GATHER_BLOCK_ELEMENTS // max(n_features, 1))
    starts = range(0, len(order), block)

    def gather(run):
        rows = np.empty((block, n_features))
        for start in run:
            indices = order[start:start + block]
            # mode="clip" writes straight into ``rows`` (valid indices: a permutation's)
            gathered = np.take(points, indices, axis=0, out=rows[:len(indices)], mode="clip")
            points_t[:, start:start + len(indices)] = gathered.T

    n_runs = max(1, min(n_threads, len(starts) // _GATHER_THREAD_BLOCKS))
    ordered_map(gather, np.array_split(starts, n_runs), n_threads)
    return points_t


def _cell_ranges(counts):
    """(cell, start, stop) of the non-empty cells of points sorted by cell."""
    stops = np.cumsum(counts)
    return [(j, stops[j] - counts[j], stops[j]) for j in np.flatnonzero(counts)]


def _chunk_cell_counts(chunk, cell_labels, n_cells):
    """Points per cell of a chunk of rows; ``cell_labels(chunk)`` is ``n_cells`` for no cell."""
    return np.bincount(cell_labels(chunk), minlength=n_cells + 1)[:n_cells]


def _chunk_unit_sums(chunk, cell_labels, iterates):
    """:func:`_unit_sums` of the rows of one chunk (the rows labelled ``len(iterates)`` dropped)."""
    counts, order = cell_order(cell_labels(chunk), len(iterates))
    return _unit_sums(iterates, sorted_by_cell(chunk.X, order),
                      _cell_blocks(counts, chunk.X.shape[1]))


def private_one_medians_of_rows(rows, cell_labels, *, centers, radii, epsilon, delta, rng,
                                n_iter=50, step_scale=0.5, neighbouring="replace_one",
                                warm_start=False):
    """:func:`private_one_medians` on rows read chunk by chunk (:mod:`skdpcluster.utils._data`).

    ``cell_labels(chunk)`` gives the cell of every row of a chunk (``len(centers)``
    for rows in no cell; it must pickle). The counts are one pass and every
    gradient step one more pass of per-chunk sums; the releases, their noise
    and the privacy proof are those of :func:`private_one_medians` (the
    statistics are the same sums, added in another order; ``warm_start`` as
    in :func:`descent_schedule`). Parameters are trusted (the estimators
    validate them).
    """
    counts = rows.map_reduce(_chunk_cell_counts, cell_labels, len(centers))
    return _median_descent(
        counts, lambda iterates: rows.map_reduce(_chunk_unit_sums, cell_labels, iterates),
        np.asarray(centers, dtype=float), np.asarray(radii, dtype=float), epsilon=epsilon,
        delta=delta, rng=rng, n_iter=n_iter, step_scale=step_scale, neighbouring=neighbouring,
        warm_start=warm_start)


def descent_schedule(n_iter, warm_start=False):
    r"""The steps of the :math:`T`-step schedule that run, and the first one averaged.

    Returns ``(first, averaged)``: the descent runs the steps
    :math:`t` = ``first``, ..., :math:`T - 1`, with :math:`\eta_t = s
    R/\sqrt{t + 1}`, and returns the average of the iterates of the steps
    :math:`t \ge` ``averaged``.

    * Cold (the spec's schedule, §9.7): all :math:`T` steps from
      :math:`w_0 = c`, the iterates of the second half averaged.
    * ``warm_start``: the start is already near the median (the stable
      k-median's initial centres, the private initializer's centres of the
      cells), so the schedule's first half, whose large steps would carry
      the iterate away from it, is skipped: the :math:`\lceil T/2 \rceil`
      steps :math:`t \ge \lfloor T/2 \rfloor` run, on the whole budget
      (each with about twice the zCDP of a cold step), and the iterates of
      all but their first quarter are averaged (a start near the median
      needs little burn-in). Half the passes over the rows (issue #17). On
      separated mixtures (n from 5000 to 10^5, d from 2 to 10, k from 4 to
      10, epsilon 0.3 or 1, 8 seeds each; ``python -m
      benchmarks.bench_median_schedule --full``) its excess k-median cost
      over the true centres was below the cold schedule's in five of six
      settings (up to 2.3 times below, at epsilon = 0.3) and 1.3 times
      above it in one (d = 2: 0.47 % against 0.35 %).

    The releases and their privacy analysis are the cold descent's with
    :math:`T - ` ``first`` steps: the schedule is public.
    """
    if not warm_start:
        return 0, n_iter // 2
    first = n_iter // 2
    return first, first + (n_iter - first) // 4


def _median_descent(counts, unit_sums, centers, radii, *, epsilon, delta, rng, n_iter, step_scale,
                    neighbouring, warm_start=False):
    """The releases of :func:`private_one_medians`: noisy counts, then the noisy steps.

    The steps are those of :func:`descent_schedule` (all ``n_iter`` unless
    ``warm_start``), the budget split evenly among them.
    ``unit_sums(iterates)`` returns the per-cell sums of unit vectors at the iterates.
    """
    first, averaged = descent_schedule(n_iter, warm_start)
    n_steps = n_iter - first
    gradient_sensitivity, count_sensitivity = _MEDIAN_SENSITIVITIES[neighbouring]
    rho_count, rho_step = _median_rhos(epsilon, delta, n_steps)
    noisy_counts, count_event = zcdp_gaussian_mechanism(
        counts.astype(float), sensitivity=count_sensitivity, rho=rho_count, rng=rng,
        neighbouring=neighbouring,
    )
    divisors = np.maximum(noisy_counts, 1.0)[:, None]
    radii = radii[:, None]
    iterates, suffix_sum = centers.copy(), np.zeros_like(centers)
    for step in range(first, n_iter):
        gradients, gradient_event = zcdp_gaussian_mechanism(
            unit_sums(iterates),
            sensitivity=gradient_sensitivity, rho=rho_step, rng=rng, neighbouring=neighbouring,
        )
        step_sizes = step_scale * radii / math.sqrt(step + 1)
        iterates = _project_onto_ball(iterates - step_sizes * gradients / divisors, centers, radii)
        if step >= averaged:
            suffix_sum += iterates
    return suffix_sum / (n_iter - averaged), _median_event(
        epsilon, delta, count_event, gradient_event, n_steps, step_scale, len(centers), first)


def _median_rhos(epsilon, delta, n_iter):
    """The zCDP of the 1-median's count release and of each of its ``n_iter`` steps."""
    rho = _gdp_rho(epsilon, delta)
    rho_count = _MEDIAN_COUNT_SHARE * rho
    return rho_count, _split_evenly(rho - rho_count, n_iter)


def check_one_median_budget(*, epsilon, delta, n_iter, neighbouring):
    """Refuse, before any randomness, a budget whose 1-median releases cannot calibrate.

    Raises ``ValueError`` naming epsilon and delta where the calibration of
    :func:`_median_rhos` refuses them (epsilon above 1e17) or a release's
    zCDP share rounds to 0 or its noise scale leaves the float range (a tiny
    epsilon and delta). :func:`private_one_medians` runs it on its
    parameters; the estimators run it in their plans (review R10 M1: the
    refusal came inside their private step, a charged failure).
    """
    gradient_sensitivity, count_sensitivity = _MEDIAN_SENSITIVITIES[neighbouring]
    try:
        rho_count, rho_step = _median_rhos(epsilon, delta, n_iter)
        zcdp_gaussian_sigma(count_sensitivity, rho_count)
        zcdp_gaussian_sigma(gradient_sensitivity, rho_step)
    except ValueError as exc:
        raise ValueError(f"the private 1-median cannot calibrate its noise at epsilon={epsilon!r}, "
                         f"delta={delta!r} over n_iter={n_iter}: {exc}") from None


def _median_event(epsilon, delta, count_event, gradient_event, n_iter, step_scale, n_cells,
                  first_step=0):
    """The event of :func:`private_one_medians`: one count release and ``n_iter`` gradient ones.

    ``sensitivity`` and ``scale`` are set where the two kinds of release
    share one value (the sensitivity 1 under add/remove), else ``None``;
    ``details`` holds both kinds' values (``count_*``, ``gradient_*``), the
    steps run (``n_iter``; the schedule's length :math:`T` before the warm
    start, now ``schedule_length``) and the schedule's first step run
    (``first_step``: :func:`descent_schedule`).
    """
    sensitivity = _shared(count_event.sensitivity, gradient_event.sensitivity)
    scale = _shared(count_event.scale, gradient_event.scale)
    details = {"composition": "gaussian_dp", "n_iter": n_iter, "first_step": first_step,
               "schedule_length": first_step + n_iter, "step_scale": step_scale,
               "rho_count": count_event.rho, "rho_per_step": gradient_event.rho,
               "count_sensitivity": count_event.sensitivity,
               "gradient_sensitivity": gradient_event.sensitivity,
               "count_scale": count_event.scale, "gradient_scale": gradient_event.scale,
               "cells": n_cells}
    if sensitivity is None or scale is None:
        details["releases"] = ("two kinds of Gaussian release with their own sensitivity and "
                               "scale: the counts (count_*) and every step's gradient sums "
                               "(gradient_*)")
    return PrivacyEvent(
        "private_one_median", epsilon, delta, sensitivity, scale,
        rho=math.fsum([count_event.rho] + [gradient_event.rho] * n_iter),
        neighbouring=count_event.neighbouring, details=details)


def _shared(count_value, gradient_value):
    """The value both kinds of release of the 1-median have, or ``None`` if they differ."""
    return count_value if count_value == gradient_value else None
