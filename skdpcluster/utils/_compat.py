"""The private scikit-learn helpers we use, imported in one place.

``_fit_context`` and the parameter-constraint classes live in private
scikit-learn modules (stable from 1.3 to 1.9); if they move, only this file
changes. :func:`single_threaded` wraps threadpoolctl the same way.
"""

import functools

from sklearn.base import _fit_context as fit_context
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from threadpoolctl import ThreadpoolController

__all__ = ["HasMethods", "Interval", "StrOptions", "fit_context", "single_threaded"]


@functools.cache
def _threadpool_controller():
    """One controller per process: building one scans the loaded libraries (milliseconds)."""
    return ThreadpoolController()


def single_threaded():
    """Context manager limiting the native thread pools (BLAS, OpenMP) to one thread.

    :func:`threadpoolctl.threadpool_limits` with ``limits=1``, through a
    controller built once per process (scikit-learn does the same), so that
    entering it costs microseconds instead of a scan of the loaded libraries
    (5 ms per call in a fit, issue #17). For small problems, where threads
    cost more than they give.
    """
    return _threadpool_controller().limit(limits=1)
