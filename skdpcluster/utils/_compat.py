"""The private scikit-learn helpers we use, imported in one place.

``_fit_context`` and the parameter-constraint classes live in private
scikit-learn modules (stable from 1.3 to 1.9), and so does scikit-learn's
cached threadpoolctl controller (``sklearn.utils.parallel``, in 1.6 to 1.9 at
least): ``threadpool_controller().limit(...)`` reuses one scan of the loaded
libraries, where every ``threadpool_limits(...)`` rescans them (10-40 ms).
If they move, only this file changes.
"""

from sklearn.base import _fit_context as fit_context
from sklearn.utils._param_validation import HasMethods, Interval, StrOptions
from sklearn.utils.parallel import _get_threadpool_controller as threadpool_controller

__all__ = ["HasMethods", "Interval", "StrOptions", "fit_context", "threadpool_controller"]
