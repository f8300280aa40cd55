"""The private scikit-learn helpers we use, imported in one place.

``_fit_context`` and the parameter-constraint classes live in private
scikit-learn modules (stable from 1.3 to 1.9); if they move, only this file
changes.
"""

from sklearn.base import _fit_context as fit_context
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions

__all__ = ["HasMethods", "Interval", "StrOptions", "fit_context"]
