"""The k-tuple clustering framework of Cohen et al. (ICML 2021), as functions on arrays.

Every function takes an array of tuples of shape ``(n_tuples, k, d)``,
privacy parameters and a :class:`numpy.random.Generator`, and returns its
result together with the privacy events it spent.
"""

from skdpcluster.ktuple.partition import (
    compute_m_eps1,
    ell,
    min_tuples,
    private_test_close_tuples,
    private_test_partition,
)

__all__ = [
    "compute_m_eps1",
    "ell",
    "min_tuples",
    "private_test_close_tuples",
    "private_test_partition",
]
