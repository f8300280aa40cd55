"""Utilities shared by the mechanisms and the estimators."""

from skdpcluster.utils._random import check_random_state, spawn_generators
from skdpcluster.utils._validation import check_epsilon_delta, check_probability

__all__ = [
    "check_epsilon_delta",
    "check_probability",
    "check_random_state",
    "spawn_generators",
]
