"""Warnings attributed to the user's code, not to library internals."""

import sys
import warnings

__all__ = ["warn_user"]

_INTERNAL_PREFIXES = ("skdpcluster", "sklearn", "joblib")


def warn_user(message, category):
    """Emit ``message`` with the stack level of the first frame outside skdpcluster and sklearn."""
    frame, level = sys._getframe(1), 2  # stacklevel 2 is our caller
    while frame is not None and frame.f_globals.get("__name__", "").startswith(_INTERNAL_PREFIXES):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
