"""Floating-point error handling of a fit, carried to the workers of its passes.

A private step computes on raw rows, and a finite but extreme row can make an
intermediate overflow (a squared norm of a row of 1e200, a product by a
centre). The private steps handle the resulting ``inf`` and ``nan`` where
they meet them (such a row is beyond every radius, is clipped, or costs the
truncation value), so the release does not change; but NumPy's reaction to
the condition is itself an output: a ``RuntimeWarning`` printed for some
data sets and not for their neighbours, or, under a caller's
``np.seterr(over="raise")``, an exception that would end the fit. A fit
therefore runs under ``np.errstate(all="ignore")``
(:class:`skdpcluster.cluster._base._fit_scope`).

NumPy keeps that state per thread (per context from NumPy 2), and worker
threads and processes start from NumPy's default, so every pass that runs a
function elsewhere (:func:`~skdpcluster.utils._threads.ordered_map`, the
map-reduces of :mod:`skdpcluster.utils._data`, the federated executors,
the joblib workers of the k-tuple generation) wraps it with
:func:`in_caller_errstate`.
"""

import functools

import numpy as np

__all__ = ["in_caller_errstate", "quiet_floating_point"]


def in_caller_errstate(func):
    """``func``, to be called under the floating-point error handling in force now.

    Returns a picklable callable (for Dask and joblib workers) that applies
    the caller's :func:`numpy.geterr` around every call of ``func``.
    """
    return functools.partial(_call_in_errstate, np.geterr(), func)


def _call_in_errstate(state, func, *args, **kwargs):
    with np.errstate(**state):
        return func(*args, **kwargs)


def quiet_floating_point(func):
    """``func`` under ``np.errstate(all="ignore")``, as a fit runs (for the function API).

    The private functions of :mod:`skdpcluster.ktuple` take raw tuples: an
    extreme finite tuple made NumPy print "overflow encountered in multiply"
    for some inputs and not for their neighbours (review RE-F1), an output
    outside the ledger. The functions handle the resulting ``inf`` and
    ``nan`` themselves, as the estimators' passes do.
    """
    @functools.wraps(func)
    def quiet(*args, **kwargs):
        with np.errstate(all="ignore"):
            return func(*args, **kwargs)
    return quiet
