"""Differentially private clustering estimators."""

from skdpcluster.cluster._federated import FederatedPrivateKMeans
from skdpcluster.cluster._highdim import PrivateHighDimKMeans, PrivateHighDimKMedian
from skdpcluster.cluster._ktuple import KTupleClusterer
from skdpcluster.cluster._sample_aggregate import SampleAggregateStableKMeans
from skdpcluster.cluster._stable import PrivateStableKMeans, PrivateStableKMedian

__all__ = [
    "FederatedPrivateKMeans",
    "KTupleClusterer",
    "PrivateHighDimKMeans",
    "PrivateHighDimKMedian",
    "PrivateStableKMeans",
    "PrivateStableKMedian",
    "SampleAggregateStableKMeans",
]
