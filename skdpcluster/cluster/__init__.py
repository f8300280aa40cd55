"""Differentially private clustering estimators."""

from skdpcluster.cluster._ktuple import KTupleClusterer

__all__ = ["KTupleClusterer"]
