"""The private scikit-learn helpers we use, imported in one place.

``_fit_context`` and the parameter-constraint classes live in private
scikit-learn modules (stable from 1.3 to 1.9), and so does scikit-learn's
cached threadpoolctl controller (``sklearn.utils.parallel``, in 1.6 to 1.9 at
least), which :func:`single_threaded` uses, and the OpenMP thread count that
``KMeans`` uses (``sklearn.utils._openmp_helpers``). If they move, only this
file changes.
"""

from sklearn.base import _fit_context as fit_context
from sklearn.utils._openmp_helpers import _openmp_effective_n_threads as openmp_threads
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.parallel import _get_threadpool_controller as threadpool_controller

__all__ = ["HasMethods", "Interval", "StrOptions", "fit_context", "openmp_threads",
           "single_threaded", "threadpool_controller"]


def single_threaded():
    """Context manager limiting the native thread pools (BLAS, OpenMP) to one thread.

    :func:`threadpoolctl.threadpool_limits` with ``limits=1``, through
    scikit-learn's controller, built once per process: entering it costs
    microseconds where every ``threadpool_limits(...)`` rescans the loaded
    libraries (5-40 ms per call in a fit, issue #17). For the passes over rows
    in blocks (products of a block by a few centres or projection vectors),
    where threads cost more than they give; the values do not depend on the
    number of threads.
    """
    return threadpool_controller().limit(limits=1)
