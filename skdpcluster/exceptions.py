"""Exceptions and warnings raised by skdpcluster."""

__all__ = [
    "BudgetExceededError",
    "DetachedAccountantError",
    "InsufficientDataError",
    "NotSeparatedError",
    "NoiseReuseError",
    "NoiseReuseWarning",
    "NotSeparatedWarning",
    "PrivacyAccountingError",
    "PrivacyLeakWarning",
    "PrivateStepFailedWarning",
    "UnprovenPrivacyWarning",
    "UtilityWarning",
]


class BudgetExceededError(ValueError):
    """A spend would take a :class:`~skdpcluster.BudgetAccountant` past its ceiling.

    Raised by :meth:`BudgetAccountant.check` and :meth:`BudgetAccountant.spend`
    *before* anything is recorded, so the ledger is unchanged. Subclasses
    :class:`ValueError` so that ordinary ``except ValueError`` clauses catch it.
    """


class InsufficientDataError(ValueError):
    """Too few rows (or tuples) for the requested privacy parameters.

    The number of rows is treated as public, so this is raised before any
    randomness is drawn or budget is spent. The message says how many are
    needed.
    """


class PrivacyLeakWarning(UserWarning):
    """A public parameter was derived from the private data.

    For example ``data_radius=None`` computes the bound from the data; the
    resulting fit is *not* differentially private with respect to that bound.
    """


class NotSeparatedError(RuntimeError):
    """The private "easy instance" test failed and ``on_failure='raise'`` was set.

    The test's outcome is itself a private release, so its budget has been
    charged to the accountant; the estimator's fitted state is unchanged.
    """


class NotSeparatedWarning(UserWarning):
    """The private "easy instance" test failed: the data is not well separated.

    This is an expected, private outcome (the released ``status_`` says so); the
    estimator then behaves as its ``on_failure`` parameter says.
    """


class UnprovenPrivacyWarning(UserWarning):
    """A reproduction mode of a paper was selected whose privacy is not proven.

    Such modes exist only to reproduce published experiments; the defaults are
    the provably private variants.
    """


class PrivateStepFailedWarning(UserWarning):
    """The private step of a fit raised after its randomness was drawn.

    The fit then releases nothing (``status_="failure"``), charges the whole
    planned budget, and reports ``privacy_spent_["proven"] = False``: the
    failure is a function of the data that no noise protects, so it is
    accounted but not covered by the estimator's privacy proof. The message
    never contains data-dependent text. It signals a defect (a data value that
    a private step should have handled); the test suite turns it into an
    error.
    """


class PrivacyAccountingError(RuntimeError):
    """A component spent more than its budget: a defect of the code, not a property of the data.

    For example a custom initializer whose events exceed the share it was
    given. Raised as it is, through the safety net of a fit's private step
    (which turns every other exception into a charged failure, see
    :class:`PrivateStepFailedWarning`); nothing is charged or released.
    """


class DetachedAccountantError(BudgetExceededError):
    """A spend on a copy of a :class:`~skdpcluster.BudgetAccountant` made by unpickling.

    A copy made by ``pickle``, ``copy.deepcopy`` or a worker process of a
    parallel backend (joblib's loky, Dask) has its own ledger, which the
    original never sees, so a spend on it would go unrecorded. Such copies
    (and estimators unpickled with ``accountant=None``) refuse to spend,
    before any randomness is drawn. Charge a parallel search up front with
    :func:`skdpcluster.model_selection.fit_search_charged`, or restore a saved
    ledger on purpose with :meth:`BudgetAccountant.from_json`.
    """


class NoiseReuseWarning(UserWarning):
    """Two fits charged to one accountant draw the same noise (the same ``random_state``).

    The difference of the two releases is then free of noise, and the
    accountant's composition does not hold. Use a different seed for each fit
    charged to the same accountant, or ``random_state=None``.
    """


class NoiseReuseError(ValueError):
    """Raised instead of :class:`NoiseReuseWarning` by an accountant with ``on_repeated_noise="raise"``.

    Raised by :meth:`BudgetAccountant.check` before any randomness is drawn;
    nothing is recorded.
    """


class UtilityWarning(UserWarning):
    """The noise a fit will add is a large fraction of the data bound: the release will be close to random.

    Emitted before anything is spent, from public values only (``n_samples``,
    ``n_features``, ``n_clusters``, ``epsilon``), so the warning itself
    reveals nothing. The message names the number of rows needed for a
    useful answer at this budget. The fit still runs and is charged: the
    guarantee holds, only the utility is poor.
    """
