"""Searches over private estimators: every fit charged, in-process or in worker processes."""

import numpy as np
import pytest
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skdpcluster import BudgetAccountant, BudgetExceededError, KTupleClusterer
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.model_selection import fit_search_charged, search_cost, select_privately


@pytest.fixture(scope="module")
def data():
    return make_separated_mixture(160_000, n_clusters=2, n_features=1, separation=512, random_state=0)


def _search(accountant, n_jobs=1, **grid):
    estimator = KTupleClusterer(n_clusters=2, method="noisy_centers",
                                accountant=accountant, random_state=0)
    return GridSearchCV(estimator, grid or {"epsilon": [1.0, 2.0]}, cv=3, n_jobs=n_jobs)


def test_in_process_search_charges_every_fit_to_the_shared_accountant(data):
    acc = BudgetAccountant()
    search = _search(acc).fit(data[0])
    assert len(acc.ledger) == 2 * 3 + 1  # candidates x folds + refit
    assert acc.total()[0] == pytest.approx(3 * 1.0 + 3 * 2.0 + search.best_params_["epsilon"])
    assert search.best_estimator_.accountant is acc


def test_search_cost_counts_folds_and_refit(data):
    epsilon, delta, n_fits = search_cost(_search(None), data[0])
    assert n_fits == 7
    assert epsilon == pytest.approx(3 * 1.0 + 3 * 2.0 + 2.0)  # refit priced at the dearest candidate
    assert delta == pytest.approx(7 * 1e-6)


def test_process_parallel_search_is_charged_up_front(data):
    acc = BudgetAccountant()
    search = fit_search_charged(_search(acc, n_jobs=2), data[0], accountant=acc)
    assert len(acc.ledger) == 1 and "7 fits" in acc.ledger[0].label
    assert acc.total() == pytest.approx(search_cost(_search(None), data[0])[:2])
    assert search.best_estimator_.accountant is acc and search.estimator.accountant is acc
    assert search.best_estimator_.status_ == "success"


def test_charged_search_refuses_before_fitting_when_over_budget(data):
    acc = BudgetAccountant(epsilon=5.0)
    search = _search(acc)
    with pytest.raises(BudgetExceededError):
        fit_search_charged(search, data[0], accountant=acc)
    assert acc.ledger == [] and not hasattr(search, "best_estimator_")


def test_charged_search_through_a_pipeline(data):
    acc = BudgetAccountant()
    pipe = make_pipeline(StandardScaler(), KTupleClusterer(n_clusters=2, method="noisy_centers",
                                                           random_state=0))
    search = GridSearchCV(pipe, {"ktupleclusterer__epsilon": [1.0, 2.0]}, cv=2)
    fit_search_charged(search, data[0], accountant=acc)
    assert acc.total()[0] == pytest.approx(2 * 1.0 + 2 * 2.0 + 2.0)
    assert search.best_estimator_[-1].accountant is acc


def test_select_privately_prefers_the_better_candidate_and_charges_epsilon(data):
    X, _ = data
    good = KTupleClusterer(n_clusters=2, method="noisy_centers", epsilon=2.0, random_state=0).fit(X)
    bad = KTupleClusterer(n_clusters=2, method="noisy_centers", epsilon=2.0, random_state=0).fit(X)
    bad.cluster_centers_ = np.array([[-2000.0], [2000.0]])  # a candidate far from the data
    acc = BudgetAccountant()
    picks = [select_privately([bad, good], X, data_radius=600.0, epsilon=1.0, random_state=seed,
                              accountant=acc) for seed in range(20)]
    assert picks == [1] * 20  # the cost gap is ~1e4 sensitivities: the mechanism is near-certain
    assert acc.total() == pytest.approx((20.0, 0.0))


def test_select_privately_validates_before_spending(data):
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match="data_radius"):
        select_privately([object()], data[0], data_radius=0.0, epsilon=1.0, accountant=acc)
    assert acc.ledger == []
