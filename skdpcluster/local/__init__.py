"""Local differential privacy: per-user randomizers, server aggregators and estimators.

The local model of Shechner (2021), Section 6: every user randomizes its own
row, so no party (not even the server) ever sees a raw row. See
:doc:`/local` for the protocol, its rounds and the privacy proofs.
"""

from skdpcluster.local._ldp import (
    AverageRound,
    BallRegions,
    CostRound,
    GridRegions,
    frequency_error_bound,
    frequency_estimates,
    server_aggregate,
    user_randomizer,
)
from skdpcluster.local._stable import LocalPrivateStableKMeans

__all__ = [
    "AverageRound",
    "BallRegions",
    "CostRound",
    "GridRegions",
    "LocalPrivateStableKMeans",
    "frequency_error_bound",
    "frequency_estimates",
    "server_aggregate",
    "user_randomizer",
]
