"""Differentially private mixture models."""

from skdpcluster.mixture._gaussian_mixture import PrivateGaussianMixture

__all__ = ["PrivateGaussianMixture"]
