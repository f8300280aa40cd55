"""Differentially private clustering estimators."""

from skdpcluster.cluster._federated import FederatedPrivateKMeans
from skdpcluster.cluster._ktuple import KTupleClusterer

__all__ = ["FederatedPrivateKMeans", "KTupleClusterer"]
