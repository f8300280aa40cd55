"""Data access for the estimators' passes: "for each chunk of rows compute f, then add up".

Every private step of the estimators that accept out-of-core input is a sum
over rows (sums, counts, costs, histograms): a pass computes a small
statistic on every chunk of rows and adds the results; the noise is then
added once, in the driver, to the sum (issue #20). Two implementations of
that pass:

* :class:`InMemoryRows`: the whole array is one chunk; the pass is a call.
* :class:`DaskRows`: a :class:`dask.array.Array` chunked along the rows; the
  pass is one task per chunk (run where the chunk lives, on whatever scheduler
  is active, e.g. a :class:`distributed.Client`) and a tree of additions.
  Only the statistics travel to the driver.

A chunk function has the signature ``func(chunk, *args)`` and returns an
ndarray, a float or a tuple of them; results are added element-wise. A
``chunk`` is whatever the rows object's ``make_chunk`` builds from the raw
block of rows (by default a :class:`RowChunk`, the block as float64 with its
squared norms). Chunk functions run under the driver's floating-point error
handling (:func:`~skdpcluster.utils._errstate.in_caller_errstate`).

Dask is optional: nothing here imports it unless the input is a Dask
collection, which is recognised by its module name.
"""

import copy
import sys

import numpy as np

from skdpcluster.utils._errstate import in_caller_errstate

__all__ = ["DaskRows", "InMemoryRows", "RowChunk", "as_rows", "chunk_generators",
           "is_dask_collection"]


def is_dask_collection(X):
    """Whether ``X`` is a Dask array or dataframe (without importing dask when it is not loaded)."""
    if "dask" not in sys.modules:
        return False
    return type(X).__module__.split(".")[0] in ("dask", "dask_expr")


class RowChunk:
    """A block of rows as float64 and, computed on first use, their squared norms."""

    def __init__(self, X):
        self.X = np.asarray(X, dtype=np.float64)
        self._sq_norms = None
        self._cache = {}

    def cached(self, key, compute):
        """``compute()`` once per chunk and ``key``; see :func:`cached_statistic`."""
        return cached_statistic(self._cache, key, compute)

    @property
    def sq_norms(self):
        """:math:`\\|x\\|^2` of every row."""
        if self._sq_norms is None:
            self._sq_norms = np.einsum("ij,ij->i", self.X, self.X)
        return self._sq_norms


def cached_statistic(cache, key, compute):
    """``cache[key]``, set to ``compute()`` on first use; the cache keeps one entry.

    A per-row statistic that two passes of one fit share (the grid cells of
    the rows): in memory the chunk lives for the whole fit, so the second
    pass reuses it; a Dask chunk is rebuilt for every pass, so nothing is
    kept between passes there. One entry bounds the memory to one per-row
    array.
    """
    if key not in cache:
        cache.clear()
        cache[key] = compute()
    return cache[key]


def add_statistics(first, second):
    """Element-wise sum of two chunk results (arrays, floats, or tuples of them)."""
    if isinstance(first, tuple):
        return tuple(map(add_statistics, first, second))
    return first + second


class InMemoryRows:
    """All rows in memory as one chunk.

    Parameters
    ----------
    chunk : object
        What the chunk functions receive (a :class:`RowChunk`, or an
        estimator's own chunk type such as its clipped rows).
    """

    def __init__(self, chunk):
        self.chunk = chunk

    @property
    def shape(self):
        return self.chunk.X.shape

    def map_reduce(self, func, *args):
        """``func(chunk, *args)`` on the one chunk."""
        return func(self.chunk, *args)


#: Chunks per graph of a map-reduce: enough to keep a few dozen workers busy, few enough
#: that their per-chunk statistics never pile up in the workers' memory.
CHUNKS_PER_BATCH = 32


def _apply(block, make_chunk, func, args):
    return func(make_chunk(block), *args)


class DaskRows:
    """Rows of a Dask array, chunked along the rows only; passes are map-reduces.

    Parameters
    ----------
    array : dask.array.Array of shape (n_samples, n_features)
        Known chunk sizes; one chunk along the columns.
    make_chunk : callable, default=RowChunk
        Builds the chunk a chunk function receives from a raw block of rows
        (run on the worker; must pickle).
    """

    def __init__(self, array, make_chunk=RowChunk):
        self.array = array
        self.make_chunk = make_chunk

    @property
    def shape(self):
        return self.array.shape

    @property
    def dtype(self):
        return self.array.dtype

    def with_chunks(self, make_chunk):
        """The same rows, with chunk functions receiving ``make_chunk(block)``."""
        return DaskRows(self.array, make_chunk)

    def map_reduce(self, func, *args):
        """Sum over the chunks of ``func(make_chunk(block), *args)``.

        The chunks are taken in batches of :data:`CHUNKS_PER_BATCH`: one graph
        per batch, whose partial results are added pairwise (a balanced tree),
        and the batch sums are added in the driver, in chunk order. A batch
        bounds how many per-chunk statistics exist at once (a statistic such
        as the grid initializer's counts is megabytes, whatever the chunk),
        so memory does not grow with the number of chunks.
        """
        import dask

        blocks = self.array.to_delayed().ravel()
        apply = in_caller_errstate(_apply)
        total = None
        for start in range(0, len(blocks), CHUNKS_PER_BATCH):
            parts = [dask.delayed(apply, pure=True)(block, self.make_chunk, func, args)
                     for block in blocks[start:start + CHUNKS_PER_BATCH]]
            while len(parts) > 1:
                paired = [dask.delayed(add_statistics, pure=True)(a, b)
                          for a, b in zip(parts[::2], parts[1::2])]
                parts = paired + parts[len(paired) * 2:]
            batch = dask.compute(parts[0])[0]
            total = batch if total is None else add_statistics(total, batch)
        return total

    @property
    def chunk_rows(self):
        """Rows of every chunk (public: the array's metadata)."""
        return self.array.chunks[0]

    def __getitem__(self, rows):
        """The rows of a slice, lazily (a public view: no value is read)."""
        if not isinstance(rows, slice):
            raise TypeError(f"DaskRows takes a slice of rows, got {type(rows).__name__}.")
        return DaskRows(self.array[rows], self.make_chunk)

    def split(self, n_first, rng):
        """A random split of every chunk i: ``n_first[i]`` of its rows at random, and the rest.

        Chunk i's rows are permuted by its generator of
        :func:`chunk_generators` (``rng`` itself when there is one chunk, so
        that the split is then the in-memory ``X[rng.permutation(n)]``); the
        sizes ``n_first`` are public, so the split never depends on the
        values. Nothing is computed here: both parts are lazy, and every pass
        over them permutes the chunk again (from a copy of its generator, so
        the same rows every time).

        Returns
        -------
        first, rest : DaskRows or None
            float64 rows; ``None`` for a part with no rows.
        """
        import dask
        import dask.array as da

        generators = chunk_generators(rng, len(self.chunk_rows))
        blocks = self.array.to_delayed().ravel()
        parts = ([], [])
        for block, generator, n, size in zip(blocks, generators, n_first, self.chunk_rows):
            for part, first, n_rows in zip(parts, (True, False), (n, size - n)):
                if n_rows:
                    task = dask.delayed(_split_part, pure=True)(block, generator, int(n), first)
                    part.append(da.from_delayed(task, shape=(n_rows, self.shape[1]),
                                                dtype=np.float64))
        return tuple(DaskRows(da.concatenate(part)) if part else None for part in parts)

    def map_chunks(self, func, per_chunk_args):
        """``[func(block, *per_chunk_args[i]) for every chunk i]``, computed where the chunks live.

        For statistics that are not added up (a list of per-chunk results,
        e.g. the k-tuples of the blocks of each chunk); chunks whose
        ``per_chunk_args`` entry is ``None`` are skipped.
        """
        import dask

        func = in_caller_errstate(func)
        tasks = [dask.delayed(func, pure=True)(block, *args)
                 for block, args in zip(self.array.to_delayed().ravel(), per_chunk_args)
                 if args is not None]
        return list(dask.compute(*tasks))

    def map_rows(self, func, *args, n_columns=None, dtype=np.float64):
        """Lazy Dask array of ``func(block, *args)`` per block of raw rows (``map_blocks``).

        ``n_columns=None`` gives a 1-D result (one value per row).
        """
        func = in_caller_errstate(func)
        if n_columns is None:
            return self.array.map_blocks(func, *args, drop_axis=1, dtype=dtype)
        return self.array.map_blocks(func, *args, chunks=(self.array.chunks[0], (n_columns,)),
                                     dtype=dtype)


def chunk_generators(rng, n_chunks):
    """One generator per chunk: ``rng`` itself for one chunk, else ``rng.spawn(n_chunks)``.

    With one chunk, a chunk-wise step draws exactly what the in-memory step
    draws from ``rng`` (same data, same seed, same release); with several,
    every chunk has its own stream, so nothing depends on the scheduler.
    A task must draw from a copy (:func:`copy.deepcopy`): a threaded
    scheduler passes the object itself, and a pass may run a task again.
    """
    return [rng] if n_chunks == 1 else rng.spawn(n_chunks)


def _split_part(block, generator, n_first, first):
    """The first ``n_first`` rows of a random permutation of ``block``, or the rest (float64)."""
    order = copy.deepcopy(generator).permutation(len(block))
    rows = np.asarray(block, dtype=np.float64)
    return rows[order[:n_first]] if first else rows[order[n_first:]]


def _count_nonfinite(chunk):
    return int(np.count_nonzero(~np.isfinite(chunk.X)))


def dask_rows_from_input(X, *, estimator, min_samples=2):
    """Validate a Dask array or dataframe as the training input of ``estimator``.

    Checks, before any randomness: two dimensions, a numeric dtype, known
    chunk sizes (the row count is public, so it must be known without
    reading the values), at least ``min_samples`` rows, and finite values
    (one map-reduce pass). Sets ``n_features_in_`` and, for a dataframe,
    ``feature_names_in_``.

    Returns
    -------
    DaskRows
    """
    import dask.array as da

    name = type(estimator).__name__
    columns = getattr(X, "columns", None)
    if columns is not None:
        X = X.to_dask_array(lengths=True)
    if not isinstance(X, da.Array):
        raise ValueError(f"{name}.fit accepts a dask.array.Array or a dask dataframe, got "
                         f"{type(X).__name__}.")
    if X.ndim != 2:
        raise ValueError(f"{name}.fit expects a 2-D Dask array of shape (n_samples, n_features), "
                         f"got {X.ndim} dimensions; reshape it (X.reshape(-1, 1) for one feature).")
    if not (np.issubdtype(X.dtype, np.number) or X.dtype == bool) or np.issubdtype(
            X.dtype, np.complexfloating):
        raise ValueError(f"{name}.fit expects numeric columns, got dtype {X.dtype}.")
    if any(np.isnan(size) for size in X.shape):
        raise ValueError(
            f"{name}.fit: the Dask array has unknown chunk sizes (shape {X.shape}). The number of "
            "rows is a public input of the privacy analysis: call X.compute_chunk_sizes() (or "
            "df.to_dask_array(lengths=True)) first, which treats the row count as public.")
    if X.shape[0] < min_samples:
        raise ValueError(f"Found array with {X.shape[0]} sample(s) (shape={X.shape}) while a "
                         f"minimum of {min_samples} is required by {name}.")
    if len(X.chunks[1]) > 1:
        X = X.rechunk({1: -1})
    rows = DaskRows(X)
    if rows.map_reduce(_count_nonfinite):
        raise ValueError(f"Input X contains NaN or infinity; {name} needs finite values: drop or "
                         "impute those rows first.")
    if hasattr(estimator, "feature_names_in_"):
        del estimator.feature_names_in_
    if columns is not None and all(isinstance(c, str) for c in columns):
        estimator.feature_names_in_ = np.asarray(list(columns), dtype=object)
    estimator.n_features_in_ = X.shape[1]
    return rows


def check_dask_predict_input(X, estimator):
    """A Dask input of ``predict``/``transform``: 2-D, with the fitted number of columns."""
    if getattr(X, "columns", None) is not None:
        X = X.to_dask_array(lengths=True)
    if X.ndim != 2 or X.shape[1] != estimator.n_features_in_:
        raise ValueError(f"X has shape {X.shape}, but {type(estimator).__name__} is expecting "
                         f"{estimator.n_features_in_} features as input.")
    if len(X.chunks[1]) > 1:
        X = X.rechunk({1: -1})
    return X


def as_rows(X):
    """``X`` itself if it is a rows object (has ``map_reduce``), else one in-memory chunk of it."""
    if hasattr(X, "map_reduce"):
        return X
    return InMemoryRows(RowChunk(X))
