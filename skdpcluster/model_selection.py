r"""Model selection over private estimators, with honest accounting.

Two facts shape this module.

1. **Every fit of a search spends budget.** With ``GridSearchCV(..., n_jobs=1)``
   a shared :class:`~skdpcluster.BudgetAccountant` sees every fit, because it
   keeps its identity through :func:`sklearn.base.clone`. With process
   parallelism (``n_jobs > 1`` and the default loky backend, or Dask), the
   workers spend on pickled copies and the parent's ledger never hears of
   them. :func:`fit_search_charged` charges the whole search **up front**, in
   the parent, before any fit runs, and lets the workers spend on throw-away
   accountants.
2. **Choosing parameters by scores computed on private data is itself a
   release.** Composing the fits' costs does not cover it: the cross-validation
   scores, and so the chosen ``epsilon``, depend on the data. Use either a
   public validation set (scores on public data cost nothing), or
   :func:`select_privately`, which chooses among privately fitted candidates
   with the exponential mechanism on a clipped k-means cost.
"""

import math

import numpy as np
from sklearn.base import clone
from sklearn.model_selection import ParameterGrid, ParameterSampler, check_cv
from sklearn.utils.validation import check_array

from skdpcluster.accountant import BudgetAccountant
from skdpcluster.mechanisms import exponential_mechanism
from skdpcluster.utils import check_random_state

__all__ = ["fit_search_charged", "search_cost", "select_privately"]


def _is_private(obj):
    return hasattr(obj, "get_params") and {"epsilon", "delta", "accountant"} <= set(obj.get_params(deep=False))


def _private_components(estimator):
    """The private estimators inside ``estimator``, keyed by parameter prefix ("" or "step__")."""
    components = {"": estimator} if _is_private(estimator) else {}
    for name, value in estimator.get_params(deep=True).items():
        if value is not estimator and _is_private(value):
            components[f"{name}__"] = value
    return components


def _fit_cost(estimator):
    """(epsilon, delta) that one fit of ``estimator`` charges at most."""
    components = list(_private_components(estimator).values())
    for component in components:
        if getattr(component, "accounting", "corrected") == "paper":
            raise ValueError(
                "accounting='paper' charges more than the requested (epsilon, delta); "
                "fit_search_charged supports only the provably private defaults."
            )
    return (math.fsum(c.epsilon for c in components), math.fsum(c.delta for c in components))


def _candidates(search):
    if hasattr(search, "param_grid"):
        return list(ParameterGrid(search.param_grid))
    return list(ParameterSampler(search.param_distributions, search.n_iter,
                                 random_state=search.random_state))


def search_cost(search, X, y=None, groups=None):
    """The (epsilon, delta) a search over private estimators spends, and its number of fits.

    Every candidate is fitted once per split, and the refit (if any) uses the
    candidate the search chooses, so it is priced at the most expensive one.
    Fits compose by basic composition.

    Parameters
    ----------
    search : GridSearchCV or RandomizedSearchCV
        Unfitted; its ``estimator`` holds one or more private estimators.
    X, y, groups : array-like
        As passed to ``search.fit`` (used only to count the splits).

    Returns
    -------
    (float, float, int)
        Total epsilon, total delta and the number of fits.
    """
    n_splits = check_cv(search.cv, y).get_n_splits(X, y, groups)
    costs = [_fit_cost(clone(search.estimator).set_params(**params)) for params in _candidates(search)]
    refit = [max(costs)] if search.refit else []
    per_fit = [cost for cost in costs for _ in range(n_splits)] + refit
    return (math.fsum(c[0] for c in per_fit), math.fsum(c[1] for c in per_fit), len(per_fit))


def fit_search_charged(search, X, y=None, *, accountant=None, groups=None, **fit_params):
    """Fit ``search`` after charging its whole cost to ``accountant`` up front.

    Works with any ``n_jobs`` and joblib backend: the parent charges
    :func:`search_cost` once (all or nothing, before any data is touched),
    then the fits run with throw-away accountants, so nothing is spent twice
    and nothing goes unrecorded. The fitted ``best_estimator_`` gets the real
    accountant back as its parameter.

    Parameters
    ----------
    search : GridSearchCV or RandomizedSearchCV
    X, y : array-like
    accountant : BudgetAccountant, default=None
        Charged with the search's cost; ``None`` uses the private estimator's
        own ``accountant`` parameter, or the default accountant.
    groups : array-like, default=None
    **fit_params : dict
        Passed to ``search.fit``.

    Returns
    -------
    search : the fitted search
    """
    components = _private_components(search.estimator)
    if not components:
        raise ValueError("search.estimator holds no private estimator (with epsilon, delta, accountant).")
    if accountant is None:
        accountant = next(iter(components.values())).accountant or BudgetAccountant.default()
    epsilon, delta, n_fits = search_cost(search, X, y, groups)
    accountant.spend(epsilon, delta, label=f"{type(search).__name__}: {n_fits} fits charged up front")
    original = search.estimator
    sink = {f"{prefix}accountant": BudgetAccountant() for prefix in components}
    search.estimator = clone(original).set_params(**sink)
    try:
        search.fit(X, y, groups=groups, **fit_params)
    finally:
        search.estimator = original
    if hasattr(search, "best_estimator_"):
        search.best_estimator_.set_params(**{key: accountant for key in sink})
    return search


def select_privately(candidates, X, *, data_radius, epsilon, random_state=None, accountant=None):
    r"""Choose among fitted candidates by the exponential mechanism on a clipped k-means cost.

    The score of candidate j is :math:`-\sum_i \min(\|x_i - c_{j}(x_i)\|^2, (2\Lambda)^2)`,
    where :math:`c_j(x_i)` is its nearest released centre and
    :math:`\Lambda` = ``data_radius``. Clipping bounds each row's term in
    :math:`[0, 4\Lambda^2]`, so replacing one row changes every score by at
    most :math:`4\Lambda^2`, and the choice is ``epsilon``-DP (McSherry &
    Talwar 2007). The candidates themselves must have been fitted privately
    (their budgets are already charged); the total is their costs plus
    ``epsilon`` by basic composition.

    Parameters
    ----------
    candidates : list of fitted private estimators
        Each with ``cluster_centers_`` (``None`` if its private test failed:
        such a candidate gets the worst possible score).
    X : array-like of shape (n_samples, n_features)
        The private data the candidates were fitted on.
    data_radius : float
        Public bound Lambda on the norm of the rows (and of useful centres), so
        that every squared distance worth counting is below :math:`(2\Lambda)^2`.
    epsilon : float
        Budget of the selection.
    random_state : None, int or Generator
    accountant : BudgetAccountant, default=None
        Charged with ``epsilon``; ``None`` uses the default accountant.

    Returns
    -------
    index : int
        Position of the chosen candidate.
    """
    X = check_array(X, dtype=np.float64)
    if not (np.isfinite(data_radius) and data_radius > 0):
        raise ValueError(f"data_radius must be a finite number > 0, got {data_radius!r}.")
    if not candidates:
        raise ValueError("candidates must be a non-empty list of fitted estimators.")
    accountant = BudgetAccountant.default() if accountant is None else accountant
    accountant.check(epsilon, 0.0)
    rng = check_random_state(random_state)
    ceiling = (2.0 * data_radius) ** 2
    scores = np.array([-_clipped_cost(X, c.cluster_centers_, ceiling) for c in candidates])
    index, event = exponential_mechanism(scores, epsilon=epsilon, sensitivity=ceiling, rng=rng,
                                         label="select_privately")
    accountant.spend(epsilon, 0.0, label="select_privately", events=[event])
    return index


def _clipped_cost(X, centers, ceiling):
    if centers is None:
        return ceiling * X.shape[0]
    squared = ((X[:, None, :] - centers[None, :, :]) ** 2).sum(axis=-1).min(axis=1)
    return float(np.minimum(squared, ceiling).sum())
