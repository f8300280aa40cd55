"""The private scikit-learn helpers we use, imported in one place.

``_fit_context``, the parameter-constraint classes and the cached
threadpoolctl controller (``threadpool_controller().limit(...)`` costs
nothing, where each ``threadpool_limits(...)`` rescans the loaded libraries:
10-40 ms) live in private scikit-learn modules (stable from 1.3 to 1.9); if
they move, only this file changes.
"""

from sklearn.base import _fit_context as fit_context
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.parallel import _get_threadpool_controller as threadpool_controller

__all__ = ["HasMethods", "Interval", "StrOptions", "fit_context", "threadpool_controller"]
