r"""k-tuple generation: a non-private clusterer fitted on many blocks of the data.

Every k-tuple algorithm of Cohen et al. (2021) starts by fitting an ordinary,
non-private clusterer on many small pieces ("blocks") of the data; each fit
gives one *k-tuple*, an unordered set of k points of :math:`\mathbb{R}^d`.
This module builds the array of tuples, shape ``(n_tuples, n_clusters,
n_features)``, that the private tuple clusterers of :mod:`skdpcluster.ktuple`
take as input. It is private: estimators validate their input first, and the
functions here trust it.

Two generators of the spec (``spec/cohen_ktuple.md``) are covered:

* GenCenters (§8.4): each tuple is the set of centres the clusterer finds on
  ``samples_per_tuple`` rows drawn with replacement (``sampling=
  "with_replacement"``, ``output="centers"``).
* GenEmpiricalMeans (§9.2): each tuple is the set of per-label means of a
  disjoint block, an empty label giving the zero vector (``sampling=
  "partition"``, ``output="label_means"``).

Randomness follows ``DESIGN.md``: the blocks are drawn from ``rng``, then every
group of :data:`_BLOCKS_PER_GENERATOR` consecutive blocks (a public constant)
gets its own child generator (:func:`~skdpcluster.utils.spawn_generators`),
which draws the random numbers of its blocks in block order before any work is
dispatched. The tuples are therefore a function of ``rng`` and ``X`` only,
whatever ``n_jobs``, the joblib backend (Dask included) or the chunk size.

Blocks are solved in chunks of many blocks per joblib task. For a
:class:`sklearn.cluster.KMeans` base clusterer, a batched path solves all the
small Lloyd problems of a chunk as one computation on 3-D arrays (blocks x
features x rows); it follows scikit-learn's k-means
(greedy k-means++ or random seeding, Lloyd iterations with scikit-learn's
convergence rule and relocation of empty clusters, best of ``n_init``) but
draws its random numbers from the block generators, so it matches
scikit-learn's results, not its random streams (spec §10.5, ambiguity 29).
"""

import contextlib
import copy
import math
from dataclasses import dataclass

import numpy as np
from joblib import Parallel, delayed, effective_n_jobs
from joblib.parallel import get_active_backend
from sklearn.base import clone
from sklearn.cluster import KMeans

from skdpcluster.utils import spawn_generators
from skdpcluster.utils._compat import single_threaded
from skdpcluster.utils._data import chunk_generators
from skdpcluster.utils._errstate import in_caller_errstate
from skdpcluster.utils._progress import advance
from skdpcluster.utils._threads import fit_threads, ordered_map
from skdpcluster.utils._warnings import silenced_warnings

__all__ = ["generate_tuples", "replace_bad_tuples", "sort_tuple_rows"]

# Bytes one chunk of blocks may occupy (its data and the temporaries of the
# batched path). Every busy worker holds one chunk.
_CHUNK_BYTES = 16 * 2**20
# With several workers, this many chunks per worker, so that chunks whose
# blocks converge slowly do not leave the other workers idle.
_CHUNKS_PER_WORKER = 4
#: Consecutive blocks that share one child generator: spawning one per block
#: cost about 10 µs a block. Fixed, so the draws never depend on the chunks.
_BLOCKS_PER_GENERATOR = 1024
_SAMPLINGS = ("partition", "with_replacement")
_OUTPUTS = ("centers", "label_means")
_METHODS = ("auto", "batched", "per_block")
#: Rows per window of the two-step inverse-CDF search of :func:`_sample_by_weight`.
_SEARCH_WINDOW = 32
#: Up to this many rows a block, :func:`_sample_by_weight` counts all the rows in one step:
#: faster than the two steps (490 blocks of 50 rows, 4 draws each: 0.25 ms against 0.35 ms;
#: even at 128 rows).
_DIRECT_SEARCH_ROWS = 2 * _SEARCH_WINDOW
_BATCHED_INITS = ("k-means++", "random")


def generate_tuples(
    X,
    base_estimator,
    n_clusters,
    n_tuples,
    *,
    rng,
    sampling="partition",
    samples_per_tuple=None,
    output="centers",
    n_jobs=None,
    method="auto",
):
    """Fit ``base_estimator`` on ``n_tuples`` blocks of ``X``; one k-tuple per block.

    GenCenters (spec §8.4) and GenEmpiricalMeans (spec §9.2) of Cohen et al.
    (2021). Prior validation of the data is assumed.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
        Finite data.
    base_estimator : estimator
        The non-private clusterer. It is cloned for every block; its
        ``n_clusters`` (or, for mixture models, ``n_components``) parameter,
        when it has one, is set to ``n_clusters``, and its ``random_state``,
        when it has one, to an int drawn from the block's generator.
    n_clusters : int
        k, the number of points in every tuple.
    n_tuples : int
        t, the number of tuples (blocks).
    rng : numpy.random.Generator
        Draws the blocks, then is spawned into one child generator per group of
        ``_BLOCKS_PER_GENERATOR`` consecutive blocks.
    sampling : {"partition", "with_replacement"}, default="partition"
        ``"partition"``: the rows are randomly permuted and cut into
        ``n_tuples`` disjoint blocks of ``samples_per_tuple`` rows (by default
        ``n_samples // n_tuples``); the rows left over are not used. Every row
        is in at most one block, so it influences at most one tuple: this is
        what the privacy analysis of the k-tuple clusterers needs
        (neighbouring datasets give tuple databases that differ in at most one
        tuple). ``"with_replacement"``: every block is ``samples_per_tuple``
        rows drawn i.i.d. with replacement (GenCenters, spec §8.4); the
        privacy amplification of spec §8.5 then applies instead.
    samples_per_tuple : int, default=None
        s, the rows per block. Required for ``"with_replacement"``.
    output : {"centers", "label_means"}, default="centers"
        ``"centers"``: the fitted ``cluster_centers_`` (``means_`` for
        mixture models). ``"label_means"``: the mean of the block's rows
        carrying each label ``0 .. n_clusters - 1`` (``labels_``, else
        ``predict``); a label with no row gives the zero vector (spec §9.2)
        and labels outside that range (such as a noise label -1) are ignored.
    n_jobs : int, default=None
        Number of joblib workers; ``None`` means 1 unless a
        :func:`joblib.parallel_config` context says otherwise. Any joblib
        backend works, including ``"dask"``. The result does not depend on it.
        Without a configured backend the batched path runs on threads (NumPy
        releases the GIL; no copy of the blocks to worker processes), the
        per-block path on joblib's default backend.
    method : {"auto", "batched", "per_block"}, default="auto"
        ``"batched"``: the vectorised k-means path, which needs a
        :class:`sklearn.cluster.KMeans` with ``init`` "k-means++" or "random";
        it honours ``n_init``, ``max_iter`` and ``tol`` (``algorithm``,
        ``copy_x`` and ``verbose`` do not change the result and are ignored).
        ``"per_block"``: one scikit-learn fit per block. ``"auto"``: batched whenever possible.

    Returns
    -------
    tuples : ndarray of shape (n_tuples, n_clusters, n_features)
        float64. Row order inside a tuple is whatever the clusterer gave;
        see :func:`sort_tuple_rows` for a canonical order. A block whose fit
        raises or whose tuple is not finite (for example k-means arithmetic
        overflowing on extreme rows) gives the public bad tuple of
        :func:`replace_bad_tuples`.

    Raises
    ------
    ValueError
        Only for public facts, never for data values: an unknown option,
        blocks that do not fit in ``X`` or have fewer than ``n_clusters``
        rows, ``method="batched"`` with a base estimator it cannot run, or
        ``output="centers"`` with a clusterer that, once fitted, has neither
        ``cluster_centers_`` nor ``means_`` (a property of its class). A
        centre array of another shape may depend on the data (a clusterer
        that finds its own number of clusters), so it gives a bad tuple.

    """
    _check_options(sampling=sampling, output=output, method=method)
    n_samples, n_features = X.shape
    block_size = _block_size(n_samples, n_clusters, n_tuples, sampling, samples_per_tuple)
    blocks = _draw_blocks(rng, n_samples, n_tuples, block_size, sampling)
    estimator = _with_n_clusters(base_estimator, n_clusters)
    if _use_batched_path(estimator, method):
        solver = _BatchedKMeans.from_kmeans(estimator, output, block_size)
    else:
        solver = _PerBlockFits(estimator, output, (n_clusters, n_features))
    draws = _draw_per_block(solver, rng, n_tuples)
    tuples = _solve_in_chunks(solver, np.asarray(X, dtype=np.float64), blocks, draws, n_jobs)
    return replace_bad_tuples(tuples)


def replace_bad_tuples(tuples):
    """Replace every tuple with a non-finite value by the public *bad tuple* (all zeros).

    A base clusterer can fail on some blocks' values (an exception, or
    arithmetic that overflows on extreme rows); the tuple of such a block
    becomes a fixed public value, so that the failure is neither an exception
    nor a non-finite array after the randomness was drawn. The k rows of the
    bad tuple coincide, so it can never pass the partition test and is counted
    as not partitioned by any balls (``DESIGN.md``, privacy rule 1;
    :func:`~skdpcluster.ktuple.partition.ball_radii` gives it radius 0). A
    tuple with fewer than k distinct rows is left as it is: the test already
    treats it in exactly this way. Each block's tuple is replaced (or not)
    from that block alone, so a replace-one change of the data still changes
    at most one tuple.

    Parameters
    ----------
    tuples : ndarray of shape (n_tuples, n_clusters, n_features)
        Modified in place.

    Returns
    -------
    tuples : ndarray of shape (n_tuples, n_clusters, n_features)
    """
    tuples[~np.isfinite(tuples).all(axis=(1, 2))] = 0.0
    return tuples


def sort_tuple_rows(tuples):
    """Sort the rows of every tuple lexicographically (first coordinate first).

    A k-tuple is an unordered set; this is its canonical form (``DESIGN.md``,
    privacy rule 2; spec §11, ambiguity 2).

    Parameters
    ----------
    tuples : ndarray of shape (n_tuples, n_clusters, n_features)

    Returns
    -------
    ndarray of shape (n_tuples, n_clusters, n_features)
    """
    order = np.lexsort(tuples[..., ::-1].transpose(2, 0, 1), axis=-1)
    return np.take_along_axis(tuples, order[..., None], axis=1)


# Blocks and dispatch ---------------------------------------------------------


def _check_options(**options):
    """Refuse option values outside their choices, naming the option."""
    allowed = {"sampling": _SAMPLINGS, "output": _OUTPUTS, "method": _METHODS}
    for name, value in options.items():
        if value not in allowed[name]:
            raise ValueError(f"{name} must be one of {allowed[name]}, got {name}={value!r}.")


def _block_size(n_samples, n_clusters, n_tuples, sampling, samples_per_tuple):
    """Rows per block, checked against the data size and ``n_clusters``."""
    if sampling == "with_replacement" and samples_per_tuple is None:
        raise ValueError("sampling='with_replacement' needs samples_per_tuple.")
    block_size = n_samples // n_tuples if samples_per_tuple is None else samples_per_tuple
    if sampling == "partition" and n_tuples * block_size > n_samples:
        raise ValueError(
            f"n_tuples={n_tuples} disjoint blocks of {block_size} rows need "
            f"{n_tuples * block_size} rows, but X has n_samples={n_samples}."
        )
    if block_size < n_clusters:
        raise ValueError(
            f"Every block needs at least n_clusters={n_clusters} rows, got {block_size} "
            f"(n_samples={n_samples}, n_tuples={n_tuples}); use fewer tuples or more data."
        )
    return block_size


def _draw_blocks(rng, n_samples, n_tuples, block_size, sampling):
    """Row indices of every block, shape (n_tuples, block_size)."""
    if sampling == "with_replacement":
        return rng.integers(n_samples, size=(n_tuples, block_size))
    used = rng.permutation(n_samples)[: n_tuples * block_size]
    return used.reshape(n_tuples, block_size)


def _draw_per_block(solver, rng, n_blocks):
    """The random numbers of every block, in block order (row b: block b).

    One child generator of ``rng`` per group of :data:`_BLOCKS_PER_GENERATOR`
    consecutive blocks draws its blocks' numbers in one call.
    """
    stops = np.append(np.arange(_BLOCKS_PER_GENERATOR, n_blocks, _BLOCKS_PER_GENERATOR), n_blocks)
    sizes = np.diff(stops, prepend=0)
    children = spawn_generators(rng, len(sizes))
    return np.concatenate([solver.draw(child, int(size)) for child, size in zip(children, sizes)])


def _with_n_clusters(estimator, n_clusters):
    """Clone ``estimator`` with its ``n_clusters`` or ``n_components`` set to ``n_clusters``."""
    estimator = clone(estimator)
    params = estimator.get_params(deep=False)
    for name in ("n_clusters", "n_components"):
        if name in params:
            return estimator.set_params(**{name: n_clusters})
    return estimator


def _use_batched_path(estimator, method):
    # Only KMeans itself: a subclass may change what fit does.
    batchable = type(estimator) is KMeans and (
        isinstance(estimator.init, str) and estimator.init in _BATCHED_INITS
    )
    if method == "batched" and not batchable:
        raise ValueError(
            "method='batched' needs a sklearn.cluster.KMeans base estimator with init "
            f"'k-means++' or 'random', got {estimator!r}; use method='per_block'."
        )
    return batchable and method != "per_block"


def _chunk_bounds(n_blocks, bytes_per_block, n_workers):
    """Contiguous ``(start, stop)`` ranges of blocks, one task each."""
    n_chunks = max(
        math.ceil(n_blocks * bytes_per_block / _CHUNK_BYTES),
        _CHUNKS_PER_WORKER * n_workers if n_workers > 1 else 1,
    )
    edges = np.linspace(0, n_blocks, min(n_chunks, n_blocks) + 1).round().astype(int)
    return list(zip(edges[:-1], edges[1:]))


def _solve_in_chunks(solver, X, blocks, draws, n_jobs):
    """Run ``solver`` on chunks of blocks; tuples in block order.

    ``draws`` holds the random numbers of every block, drawn in the calling
    process (:func:`_draw_per_block`), so the tasks are pure functions of arrays.
    With ``n_jobs`` meaning one joblib worker (the default) and a solver that
    runs on threads (the batched path), the chunks run on the
    :func:`~skdpcluster.utils._threads.fit_threads` threads, as scikit-learn's
    ``KMeans`` runs its passes on its OpenMP threads (the convention of
    :mod:`skdpcluster.utils._threads`: every block's tuple is computed from
    that block alone, so the tuples are the same bits on any number of
    threads); otherwise through joblib, on ``n_jobs`` workers.

    Third-party code warns depending on the block (a scikit-learn fit per
    block), and joblib about nested parallelism: those runs hold the shared
    :func:`~skdpcluster.utils._warnings.silenced_warnings` (joblib worker
    processes, in :meth:`_PerBlockFits._fit_block`). The batched solver on one
    worker leaves the process's warning filters alone: it gives no warning
    (its NumPy work runs under ``np.errstate(all="ignore")``).
    """
    n_workers = effective_n_jobs(n_jobs)
    n_threads = fit_threads() if n_workers == 1 and solver.prefer == "threads" else 1
    n_blocks, block_size = blocks.shape
    bounds = _chunk_bounds(n_blocks, solver.bytes_per_block(block_size, X.shape[1]),
                           max(n_workers, n_threads))

    def chunk_args(start, stop):
        return np.take(X, blocks[start:stop], axis=0), draws[start:stop]  # take: faster here

    if n_threads > 1:
        with single_threaded():  # products of small blocks: BLAS threads would only compete
            chunks = ordered_map(lambda bound: solver(*chunk_args(*bound)), bounds, n_threads)
        advance(n_blocks, n_blocks, "blocks")
    else:
        chunks = []
        worker = in_caller_errstate(solver)  # joblib's workers start from NumPy's default
        tasks = (delayed(worker)(*chunk_args(start, stop)) for start, stop in bounds)
        # joblib's "multiprocessing" backend has no generators: it refused them after the
        # blocks were drawn (a charged failure on any data; re-review V3).
        backend, _ = get_active_backend(prefer=solver.prefer)
        return_as = "generator" if getattr(backend, "supports_return_generator", True) else "list"
        parallel = Parallel(n_jobs=n_jobs, return_as=return_as, prefer=solver.prefer)
        quiet = n_workers > 1 or solver.prefer != "threads"
        with silenced_warnings() if quiet else contextlib.nullcontext():
            for (_, stop), chunk in zip(bounds, parallel(tasks)):
                chunks.append(chunk)
                advance(int(stop), n_blocks, "blocks")
    return np.concatenate(chunks).astype(np.float64, copy=False)


# The scikit-learn path: one fit per block -------------------------------------


@dataclass(frozen=True)
class _PerBlockFits:
    """Fit a clone of ``estimator`` on every block of a chunk.

    Parameters
    ----------
    estimator : estimator
        Already configured with the right number of clusters.
    output : {"centers", "label_means"}
    tuple_shape : (int, int)
        ``(n_clusters, n_features)``.
    """

    estimator: object
    output: str
    tuple_shape: tuple
    #: joblib's default backend (processes): a scikit-learn fit holds the GIL for much of its time.
    prefer = None

    def draw(self, rng, n_blocks):
        """Every block's ``random_state``: an int a ``RandomState`` accepts, shape (n_blocks, 1)."""
        return rng.integers(2**32, size=(n_blocks, 1))

    def bytes_per_block(self, block_size, n_features):
        return 8 * block_size * n_features

    def __call__(self, X_blocks, seeds):
        # Blocks are small: native threads inside one fit (OpenMP, BLAS) cost
        # more than they give. Parallelism comes from n_jobs, across chunks.
        with single_threaded():
            return np.stack(
                [self._fit_block(X, int(seed)) for X, seed in zip(X_blocks, seeds[:, 0])]
            )

    def _fit_block(self, X, seed):
        """The block's tuple; NaN (a bad tuple) when the fit or its read-out raises.

        Whether a base clusterer raises can depend on the block's values
        (for example a GaussianMixture on an extreme row), and a raise after
        the blocks were drawn would leak that, so every failure becomes a
        bad tuple. Only the structural error of :meth:`_fitted_centers` is raised.
        """
        model = clone(self.estimator)
        if "random_state" in model.get_params(deep=False):
            model.set_params(random_state=seed)
        try:
            with np.errstate(all="ignore"), silenced_warnings():
                model.fit(X)
                if self.output == "label_means":
                    labels = model.labels_ if hasattr(model, "labels_") else model.predict(X)
                    return _label_means(X.T[None], np.asarray(labels)[None], self.tuple_shape[0])[0]
        except Exception:  # noqa: BLE001 - a data-dependent failure must not escape
            return np.full(self.tuple_shape, np.nan)
        return self._fitted_centers(model)

    def _fitted_centers(self, model):
        """``cluster_centers_`` (or ``means_``); NaN when its shape is not ``tuple_shape``."""
        centers = getattr(model, "cluster_centers_", getattr(model, "means_", None))
        if centers is None:
            raise ValueError(
                f"{type(model).__name__} has no cluster_centers_ or means_; use "
                "output='label_means' for a clusterer that only labels."
            )
        if np.shape(centers) != self.tuple_shape:
            return np.full(self.tuple_shape, np.nan)
        return np.asarray(centers, dtype=np.float64)


# The batched path: many small k-means problems as one 3-D computation ---------


@dataclass(frozen=True)
class _BatchedKMeans:
    """scikit-learn's k-means on every block of a chunk at once.

    Parameters
    ----------
    n_clusters, n_init, max_iter : int
        As in :class:`sklearn.cluster.KMeans` (``n_init`` resolved).
    init : {"k-means++", "random"}
    tol : float
        Relative tolerance; the absolute one of a block is ``tol`` times the
        mean variance of its features, as in scikit-learn.
    output : {"centers", "label_means"}
    block_size : int
        Rows per block (the "random" seeding draws one number per row).
    """

    n_clusters: int
    n_init: int
    max_iter: int
    init: str
    tol: float
    output: str
    block_size: int
    #: NumPy releases the GIL in the array kernels, so threads run the chunks in parallel
    #: without copying them to worker processes (a joblib hint: a configured backend wins).
    prefer = "threads"

    @classmethod
    def from_kmeans(cls, kmeans, output, block_size):
        n_init = kmeans.n_init
        if n_init == "auto":  # scikit-learn's rule
            n_init = 1 if kmeans.init == "k-means++" else 10
        return cls(
            kmeans.n_clusters, n_init, kmeans.max_iter, kmeans.init, kmeans.tol, output, block_size
        )

    @property
    def n_local_trials(self):
        return _n_local_trials(self.n_clusters)

    def draw(self, rng, n_blocks):
        """All the uniform numbers each block's seedings use, ``n_init`` runs side by side."""
        if self.init == "random":
            per_init = self.block_size
        else:
            per_init = 1 + (self.n_clusters - 1) * self.n_local_trials
        return rng.random((n_blocks, self.n_init * per_init))

    def bytes_per_block(self, block_size, n_features):
        # Block copies (gathered, centred, compacted), distances, one-hot labels,
        # and the seeding's candidate distances and comparisons.
        return 8 * block_size * (4 * n_features + 3 * self.n_clusters + 2 * self.n_local_trials + 6)

    def __call__(self, X_blocks, uniforms):
        X = np.ascontiguousarray(X_blocks.transpose(0, 2, 1))
        # Extreme rows can overflow to inf or NaN in a block; such a block's tuple is
        # non-finite and becomes the bad tuple (replace_bad_tuples). Blocks never mix.
        with np.errstate(all="ignore"):
            centers, labels, _ = self.fit(X, uniforms, labelled=self.output == "label_means")
            if self.output == "label_means":
                return _label_means(X, labels, self.n_clusters)
        return centers

    def fit(self, X, uniforms, labelled=True):
        """Best of ``n_init`` seedings + Lloyd runs, per block.

        Parameters
        ----------
        X : ndarray of shape (n_blocks, n_features, block_size)
            The blocks, feature-major.
        uniforms : ndarray of shape (n_blocks, n_uniforms)
            From :meth:`draw`, one row per block.
        labelled : bool, default=True
            False skips the final assignment when ``n_init=1`` (nothing to
            compare): ``labels`` and ``inertia`` are then None.

        Returns
        -------
        centers : ndarray of shape (n_blocks, n_clusters, n_features)
        labels : ndarray of shape (n_blocks, block_size) or None
        inertia : ndarray of shape (n_blocks,) or None
        """
        # Centre every block first, as scikit-learn does, for accurate distances.
        block_means = X.mean(axis=2, keepdims=True)
        X = X - block_means
        tol = self.tol * X.var(axis=2).mean(axis=1)
        seed = _SEEDINGS[self.init]
        best = None
        for run_uniforms in np.split(uniforms, self.n_init, axis=1):
            run = _lloyd(X, seed(X, run_uniforms, self.n_clusters), tol, self.max_iter,
                         labelled=labelled or self.n_init > 1)
            best = run if best is None else _keep_lower_inertia(best, run)
        centers, labels, inertia = best
        return centers + block_means.transpose(0, 2, 1), labels, inertia


# Batched k-means kernels. Blocks are feature-major, shape (n_blocks,
# n_features, block_size), and distances cluster-major, shape (n_blocks,
# n_centres, block_size), so that the elementwise work runs along the long
# block axis; centres have shape (n_blocks, n_centres, n_features).


def _keep_lower_inertia(best, new):
    """Per block, the run ``(centers, labels, inertia)`` with the lower inertia."""
    better = new[2] < best[2]
    return tuple(
        np.where(better.reshape((-1,) + (1,) * (kept.ndim - 1)), candidate, kept)
        for kept, candidate in zip(best, new)
    )


def _squared_norms(X):
    """Squared norm of every row of every block, shape (n_blocks, block_size)."""
    return np.einsum("bds,bds->bs", X, X)


def _squared_distances(X, centers, x_sq):
    """Squared distances from every centre to every row, shape (n_blocks, n_centres, block_size).

    ``x_sq`` is :func:`_squared_norms` of ``X`` (computed once per run).
    """
    distances = np.matmul(-2.0 * centers, X)  # scaling by -2 is exact: as -2 * (centers @ X)
    distances += np.einsum("bmd,bmd->bm", centers, centers)[:, :, None]
    distances += x_sq[:, None, :]
    return np.maximum(distances, 0, out=distances)


def _assign(X, centers, x_sq):
    """Label of the nearest centre (lowest index on ties) and its squared distance."""
    distances = _squared_distances(X, centers, x_sq)
    nearest = distances.min(axis=1)
    # The first centre at the minimum, as argmin would give, but about twice as fast.
    labels = (distances != nearest[:, None, :]).argmin(axis=1)
    return labels, nearest


def _label_sums(X, labels, n_clusters):
    """Per-block sum of the rows and row count of every label ``0 .. n_clusters - 1``."""
    one_hot = (labels[:, None, :] == np.arange(n_clusters)[:, None]).astype(X.dtype)
    return np.matmul(one_hot, X.transpose(0, 2, 1)), one_hot.sum(axis=2)


def _label_means(X, labels, n_clusters):
    """Per-block mean of every label's rows; the zero vector for an empty label (spec §9.2)."""
    sums, counts = _label_sums(X, labels, n_clusters)
    return sums / np.maximum(counts, 1)[:, :, None]


def _relocate_empty_clusters(X, labels, distances, sums, counts):
    """Move every empty cluster onto a far row of its block, in place.

    scikit-learn's rule: the e empty clusters of a block take the e rows
    farthest from their centre, each leaving the cluster it was in.
    """
    empty = counts == 0
    blocks, clusters = np.nonzero(empty)
    if blocks.size == 0:
        return
    rank = np.cumsum(empty, axis=1)[blocks, clusters] - 1
    farthest = np.argsort(-distances[blocks], axis=1, kind="stable")[np.arange(blocks.size), rank]
    points = X[blocks, :, farthest]
    previous = (blocks, labels[blocks, farthest])
    np.subtract.at(sums, previous, points)
    np.subtract.at(counts, previous, 1)
    sums[blocks, clusters] = points
    counts[blocks, clusters] = 1


def _lloyd_step(X, centers, x_sq):
    """One Lloyd iteration: labels from ``centers``, then the new centres."""
    labels, distances = _assign(X, centers, x_sq)
    sums, counts = _label_sums(X, labels, centers.shape[1])
    _relocate_empty_clusters(X, labels, distances, sums, counts)
    return labels, sums / np.maximum(counts, 1)[:, :, None]


def _lloyd(X, centers, tol, max_iter, labelled=True):
    """Lloyd iterations on every block until all have converged.

    A block stops, as in scikit-learn, when its labels no longer change or the
    total squared shift of its centres is at most its ``tol``. Blocks that
    have stopped are dropped from the working arrays.

    Parameters
    ----------
    X : ndarray of shape (n_blocks, n_features, block_size)
    centers : ndarray of shape (n_blocks, n_clusters, n_features)
        Initial centres.
    tol : ndarray of shape (n_blocks,)
        Absolute tolerance of every block.
    max_iter : int
    labelled : bool, default=True
        False skips the final assignment: ``labels`` and ``inertia`` are None.

    Returns
    -------
    centers, labels, inertia
        Final centres, the labels they give and the block's inertia.
    """
    final = centers.copy()
    active = np.arange(len(X))
    x_sq = _squared_norms(X)
    X_active, x_sq_active, labels_old = X, x_sq, np.full((len(X), X.shape[2]), -1)
    for _ in range(max_iter):
        labels, new_centers = _lloyd_step(X_active, centers, x_sq_active)
        shift = ((new_centers - centers) ** 2).sum(axis=(1, 2))
        final[active] = new_centers
        running = ~((labels == labels_old).all(axis=1) | (shift <= tol))
        if not running.any():
            break
        if not running.all():
            active, X_active, tol = active[running], X_active[running], tol[running]
            x_sq_active = x_sq_active[running]
            labels, new_centers = labels[running], new_centers[running]
        centers, labels_old = new_centers, labels
    if not labelled:
        return final, None, None
    labels, distances = _assign(X, final, x_sq)
    return final, labels, distances.sum(axis=1)


def _kmeans_plusplus(X, uniforms, n_clusters):
    """Greedy k-means++ seeding of every block (Arthur & Vassilvitskii 2007).

    scikit-learn's variant: the first centre is a uniform row; every next one
    is the best, by resulting potential, of ``2 + log(k)`` rows drawn with
    probability proportional to their squared distance to the nearest centre.
    ``uniforms`` has shape (n_blocks, 1 + (n_clusters - 1) * n_local_trials).
    """
    n_blocks, n_features, block_size = X.shape
    rows = np.arange(n_blocks)
    first = np.minimum((uniforms[:, 0] * block_size).astype(np.intp), block_size - 1)
    centers = np.empty((n_blocks, n_clusters, n_features))
    centers[:, 0] = X[rows, :, first]
    x_sq = _squared_norms(X)
    closest = _squared_distances(X, centers[:, :1], x_sq)[:, 0]
    trial_uniforms = uniforms[:, 1:].reshape(n_blocks, n_clusters - 1, _n_local_trials(n_clusters))
    for index in range(1, n_clusters):
        candidates = _sample_by_weight(closest, trial_uniforms[:, index - 1])
        trials = _squared_distances(X, X[rows[:, None], :, candidates], x_sq)
        np.minimum(trials, closest[:, None, :], out=trials)
        best = trials.sum(axis=2).argmin(axis=1)
        centers[:, index] = X[rows, :, candidates[rows, best]]
        closest = trials[rows, best]
    return centers


def _n_local_trials(n_clusters):
    """Candidates per greedy k-means++ step, scikit-learn's default."""
    return 2 + int(np.log(n_clusters))


def _sample_by_weight(weights, uniforms):
    """Row indices drawn with probability proportional to ``weights``, one per uniform.

    ``weights`` has shape (n_blocks, block_size), ``uniforms`` (n_blocks, m);
    the inverse-CDF rule of :func:`numpy.searchsorted` (side "left"): the
    index is the number of cumulative weights below ``uniform * total``. If
    all weights of a block are 0, its draws are row 0, as in scikit-learn.
    The count is taken in two steps, exact because the cumulative weights
    never decrease: the windows of :data:`_SEARCH_WINDOW` rows whose last
    cumulative weight is below the threshold, then the rows below it in the
    next window (about ``block_size / _SEARCH_WINDOW + _SEARCH_WINDOW``
    comparisons per draw instead of ``block_size``); blocks of at most
    :data:`_DIRECT_SEARCH_ROWS` rows are counted in one step.
    """
    n_blocks, size = weights.shape
    if size <= _DIRECT_SEARCH_ROWS:
        cumulative = np.cumsum(weights, axis=1)
        thresholds = (uniforms * cumulative[:, -1:])[:, :, None]
        return np.minimum((cumulative[:, None, :] < thresholds).sum(axis=2), size - 1)
    n_windows = -(-size // _SEARCH_WINDOW)
    padded = np.full((n_blocks, n_windows * _SEARCH_WINDOW), np.inf)  # never below a threshold
    cumulative = np.cumsum(weights, axis=1, out=padded[:, :size])
    thresholds = (uniforms * cumulative[:, -1:])[:, :, None]
    windows = padded.reshape(n_blocks, n_windows, _SEARCH_WINDOW)
    before = (windows[:, None, :, -1] < thresholds).sum(axis=2)
    window = windows[np.arange(n_blocks)[:, None], np.minimum(before, n_windows - 1)]
    indices = before * _SEARCH_WINDOW + (window < thresholds).sum(axis=2)
    return np.minimum(indices, size - 1)


def _random_seeding(X, uniforms, n_clusters):
    """``n_clusters`` distinct uniform rows of every block; ``uniforms`` has one number per row."""
    chosen = np.argpartition(uniforms, n_clusters - 1, axis=1)[:, :n_clusters]
    return X[np.arange(len(X))[:, None], :, chosen]


_SEEDINGS = {"k-means++": _kmeans_plusplus, "random": _random_seeding}


# ---------------------------------------------------------------------------
# Rows read chunk by chunk (Dask input, issue #20)
# ---------------------------------------------------------------------------


def allocate_blocks(chunk_rows, n_tuples, min_rows):
    r"""Blocks per chunk: proportional to the chunk sizes, each block of >= ``min_rows`` rows.

    ``chunk_rows`` (the chunk sizes) and ``n_tuples`` are public, so the
    allocation is too: chunk i gets :math:`\lfloor c_i t / n\rfloor` blocks,
    and the remaining blocks go, one each, to the chunks with the largest
    remainders that still have room (``min_rows`` rows per block: k for the
    k-tuple clusterer, the public block size of the mixture).

    Raises
    ------
    ValueError
        When the chunks cannot hold ``n_tuples`` blocks of ``min_rows`` rows.
    """
    chunk_rows = np.asarray(chunk_rows, dtype=np.int64)
    capacity = chunk_rows // min_rows
    share = chunk_rows * n_tuples / chunk_rows.sum()
    blocks = np.minimum(np.floor(share).astype(np.int64), capacity)
    if capacity.sum() >= n_tuples:
        while blocks.sum() < n_tuples:
            open_chunks = np.flatnonzero(blocks < capacity)
            ranked = open_chunks[np.argsort(-(share - blocks)[open_chunks], kind="stable")]
            blocks[ranked[: n_tuples - blocks.sum()]] += 1
    else:
        raise ValueError(
            f"the chunks of X (sizes {chunk_rows.min()} to {chunk_rows.max()} rows) cannot hold "
            f"{n_tuples} blocks of at least {min_rows} rows each: rechunk X into "
            "larger chunks of rows (X.rechunk({0: ...}))."
        )
    return blocks


def _tuples_of_chunk(block, base_estimator, n_clusters, n_tuples, rng, options):
    return generate_tuples(np.asarray(block, dtype=np.float64), base_estimator, n_clusters,
                           n_tuples, rng=copy.deepcopy(rng), **options)


def generate_tuples_of_rows(rows, base_estimator, n_clusters, n_tuples, *, rng, n_jobs=None,
                            samples_per_tuple=None, output="centers"):
    """:func:`generate_tuples` on an array, or chunk by chunk on the rows of a Dask array.

    On a :class:`~skdpcluster.utils._data.DaskRows`, every chunk is cut into
    its share of the blocks (:func:`allocate_blocks`, blocks of at least
    ``samples_per_tuple`` rows when given, else ``n_clusters``) and clustered
    where it lives, with its own generator
    (:func:`~skdpcluster.utils._data.chunk_generators`: the tuples do not
    depend on the scheduler); only the tuples travel. Each row is in at most
    one block, as in memory, so neighbouring datasets still give tuple sets
    that differ in at most one tuple. With one chunk the blocks and the
    tuples are the in-memory ones; with several, the blocks are random within
    a chunk instead of within all rows: the tuples have the in-memory
    distribution when the rows are in random order across chunks
    (exchangeable).
    """
    options = {"samples_per_tuple": samples_per_tuple, "output": output}
    if not hasattr(rows, "map_chunks"):
        return generate_tuples(rows, base_estimator, n_clusters, n_tuples, rng=rng,
                               n_jobs=n_jobs, **options)
    blocks = allocate_blocks(rows.chunk_rows, n_tuples, samples_per_tuple or n_clusters)
    generators = chunk_generators(rng, len(blocks))
    args = [(base_estimator, n_clusters, int(t), generator, options) if t else None
            for t, generator in zip(blocks, generators)]
    return np.concatenate(rows.map_chunks(_tuples_of_chunk, args))
