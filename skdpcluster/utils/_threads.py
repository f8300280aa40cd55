"""Native parallelism inside one fit: the threads scikit-learn's ``KMeans`` would use.

scikit-learn's ``KMeans`` runs its passes over the rows on all the threads of
the OpenMP pool, whatever ``n_jobs`` means elsewhere (``n_jobs`` is joblib's
parallelism across tasks). The in-memory passes of this library follow the
same convention (issue #17): :func:`fit_threads` is the number of threads of
that pool, so ``OMP_NUM_THREADS`` and :func:`threadpoolctl.threadpool_limits`
control it as they control ``KMeans``; :func:`ordered_map` runs a function
on public blocks of rows on those threads. NumPy releases the GIL in its
array kernels, so blocks of a few thousand rows run in parallel.

**The release does not depend on the number of threads.** The blocks are
fixed by public values (the row count and a block size), every block is
computed by the same code whatever thread runs it, and the callers add the
per-block results in block order, as a sequential loop would: the sums, and
so the noisy releases drawn from them, are the same bits on one thread or
many.
"""

import contextvars
import os
import threading
from concurrent.futures import ThreadPoolExecutor, wait

from skdpcluster.utils._compat import openmp_threads
from skdpcluster.utils._errstate import in_caller_errstate

__all__ = ["fit_threads", "ordered_map"]

_EXECUTORS = {}
_EXECUTORS_LOCK = threading.Lock()
_THREAD_PREFIX = "skdpcluster-fit"


def _forget_executors_in_child():
    """A forked child inherits the pools but not their threads: start afresh there."""
    global _EXECUTORS_LOCK
    _EXECUTORS.clear()
    _EXECUTORS_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_executors_in_child)


def fit_threads():
    """Threads for the passes of a fit: scikit-learn's OpenMP thread count for ``KMeans``.

    Read it before entering :func:`~skdpcluster.utils._compat.single_threaded`
    (which limits the OpenMP pool to one thread, and so this count).
    """
    return openmp_threads()


def _executor(n_threads):
    """A process-wide pool of ``n_threads`` threads, created on first use and kept."""
    with _EXECUTORS_LOCK:
        if n_threads not in _EXECUTORS:
            _EXECUTORS[n_threads] = ThreadPoolExecutor(
                max_workers=n_threads, thread_name_prefix=_THREAD_PREFIX)
        return _EXECUTORS[n_threads]


def ordered_map(func, items, n_threads):
    """``[func(item) for item in items]``, computed on ``n_threads`` threads, in item order.

    With one thread, or one item, or when called from one of the pool's own
    threads (a nested call, which could otherwise wait forever on a pool
    whose threads all wait), the loop runs in the calling thread.
    Exceptions are raised in the caller, the first in item order, as the loop
    would raise it; the items not yet started are cancelled and those running
    are waited for first, so nothing of the map runs on once the caller has
    the error. A forked child starts with no pool (the parent's threads are
    not copied by ``fork``). The threads compute under the caller's
    floating-point error handling (:func:`~skdpcluster.utils._errstate.in_caller_errstate`)
    and each in a copy of the caller's :mod:`contextvars` context (so a
    :func:`~skdpcluster.utils._warnings.collected_warnings` scope of the
    caller collects their warnings too).
    """
    items = list(items)
    nested = threading.current_thread().name.startswith(_THREAD_PREFIX)
    if n_threads <= 1 or len(items) <= 1 or nested:
        return [func(item) for item in items]
    func = in_caller_errstate(func)
    executor = _executor(min(n_threads, len(items)))
    futures = [executor.submit(contextvars.copy_context().run, func, item) for item in items]
    try:
        return [future.result() for future in futures]
    except BaseException:
        for future in futures:  # as the loop: nothing runs on once the caller has the error
            future.cancel()
        wait(futures)
        raise
