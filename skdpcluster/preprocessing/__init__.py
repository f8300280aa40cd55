"""Private preprocessing: scalers whose statistics are DP releases charged to the accountant."""

from skdpcluster.preprocessing._scaler import PrivateStandardScaler, make_private_pipeline

__all__ = ["PrivateStandardScaler", "make_private_pipeline"]
