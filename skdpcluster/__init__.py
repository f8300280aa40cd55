"""Differentially private clustering estimators for scikit-learn.

Subpackages and modules
-----------------------
accountant
    :class:`BudgetAccountant`, the shared privacy ledger.
cluster
    The private clustering estimators: :class:`KTupleClusterer`,
    :class:`PrivateStableKMeans`, :class:`PrivateStableKMedian`,
    :class:`PrivateHighDimKMeans`, :class:`PrivateHighDimKMedian`,
    :class:`FederatedPrivateKMeans`, :class:`SampleAggregateStableKMeans`.
local
    The local model: :class:`~skdpcluster.local.LocalPrivateStableKMeans`,
    per-user randomizers and server aggregators.
mixture
    :class:`PrivateGaussianMixture`.
model_selection
    Searches and private selection with honest accounting.
ktuple
    The k-tuple framework of Cohen et al. (2021) as functions on arrays.
averaging
    Private averages, 1-median and single-Gaussian estimation.
bounds
    Private centre and radius: the default ``data_radius=None`` of every estimator.
preprocessing
    :class:`~skdpcluster.preprocessing.PrivateStandardScaler` and
    :func:`~skdpcluster.preprocessing.make_private_pipeline`.
datasets
    The papers' test distributions.
mechanisms
    Laplace, Gaussian (analytic calibration), exponential mechanism, zCDP and
    subsampling; pure functions returning a value and a privacy event.
exceptions
    Errors and warnings.
utils
    Randomness and parameter validation helpers.
"""

from importlib.metadata import PackageNotFoundError, version

from skdpcluster.accountant import BudgetAccountant
from skdpcluster.cluster import (
    FederatedPrivateKMeans,
    KTupleClusterer,
    PrivateHighDimKMeans,
    PrivateHighDimKMedian,
    PrivateStableKMeans,
    PrivateStableKMedian,
    SampleAggregateStableKMeans,
)
from skdpcluster.exceptions import (
    BudgetExceededError,
    DetachedAccountantError,
    InsufficientDataError,
    NoiseReuseError,
    NoiseReuseWarning,
    NotSeparatedError,
    NotSeparatedWarning,
    PrivacyLeakWarning,
    PrivateStepFailedWarning,
    UnprovenPrivacyWarning,
    UtilityWarning,
)
from skdpcluster.mixture import PrivateGaussianMixture

try:
    __version__ = version("skdpcluster")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = [
    "BudgetAccountant",
    "BudgetExceededError",
    "DetachedAccountantError",
    "FederatedPrivateKMeans",
    "InsufficientDataError",
    "KTupleClusterer",
    "NoiseReuseError",
    "NoiseReuseWarning",
    "NotSeparatedError",
    "NotSeparatedWarning",
    "PrivacyLeakWarning",
    "PrivateGaussianMixture",
    "PrivateHighDimKMeans",
    "PrivateHighDimKMedian",
    "PrivateStableKMeans",
    "PrivateStableKMedian",
    "PrivateStepFailedWarning",
    "SampleAggregateStableKMeans",
    "UnprovenPrivacyWarning",
    "UtilityWarning",
    "__version__",
]
