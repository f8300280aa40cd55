"""Searches over private estimators: every fit charged, in-process or in worker processes."""

import warnings
from types import SimpleNamespace

import joblib
import numpy as np
import pytest
from dp_stats import epsilon_lower_bound, event_counts
from scipy import stats
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, KFold, RandomizedSearchCV, ShuffleSplit
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skdpcluster import (
    BudgetAccountant,
    BudgetExceededError,
    FederatedPrivateKMeans,
    KTupleClusterer,
    NoiseReuseError,
    NoiseReuseWarning,
    PrivacyLeakWarning,
    PrivateHighDimKMeans,
    PrivateStableKMeans,
)
from skdpcluster.accountant import noise_fingerprint
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.local import LocalPrivateStableKMeans
from skdpcluster.model_selection import (
    _HeldOutClippedCost,
    _private_selection,
    fit_search_charged,
    search_cost,
    select_privately,
)
from skdpcluster.preprocessing import PrivateStandardScaler

# The searches on `data` fix random_state=0 so that they are reproducible; every fit of such a
# search draws the same noise, which the accountant rightly reports. The new tests below use
# random_state=None wherever the outcome does not matter.
_SEEDED = pytest.mark.filterwarnings("ignore::skdpcluster.NoiseReuseWarning")


@pytest.fixture(scope="module")
def data():
    return make_separated_mixture(160_000, n_clusters=2, n_features=1, separation=512, random_state=0)


def _search(accountant, n_jobs=1, **grid):
    estimator = KTupleClusterer(n_clusters=2, method="noisy_centers",
                                accountant=accountant, random_state=0)
    return GridSearchCV(estimator, grid or {"epsilon": [1.0, 2.0]}, cv=3, n_jobs=n_jobs)


@_SEEDED
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


@_SEEDED
def test_process_parallel_search_is_charged_up_front(data):
    acc = BudgetAccountant()
    search = fit_search_charged(_search(acc, n_jobs=2), data[0], accountant=acc, data_radius=600.0)
    assert len(acc.ledger) == 1 and "7 fits and a private choice" in acc.ledger[0].label
    fits_epsilon, fits_delta, _ = search_cost(_search(None), data[0])
    assert acc.total() == pytest.approx((fits_epsilon + 0.1, fits_delta))
    assert search.best_estimator_.accountant is acc and search.estimator.accountant is acc
    assert search.best_estimator_.status_ == "success"


@_SEEDED
def test_charged_search_refuses_before_fitting_when_over_budget(data):
    acc = BudgetAccountant(epsilon=5.0)
    search = _search(acc)
    with pytest.raises(BudgetExceededError):
        fit_search_charged(search, data[0], accountant=acc, data_radius=600.0)
    assert acc.ledger == [] and not hasattr(search, "best_estimator_")


@_SEEDED
def test_charged_search_through_a_pipeline(data):
    acc = BudgetAccountant()
    pipe = make_pipeline(StandardScaler(), KTupleClusterer(n_clusters=2, method="noisy_centers",
                                                           random_state=0))
    search = GridSearchCV(pipe, {"ktupleclusterer__epsilon": [1.0, 2.0]}, cv=2)
    fit_search_charged(search, data[0], accountant=acc, selection_epsilon=0.5, data_radius=10.0)
    assert acc.total()[0] == pytest.approx(2 * 1.0 + 2 * 2.0 + 2.0 + 0.5)
    assert search.best_estimator_[-1].accountant is acc


@_SEEDED
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


# -- issue #12: process-parallel searches, refit price, randomized searches, private choice, seeds --


@pytest.fixture(scope="module")
def small():
    return make_separated_mixture(2000, n_clusters=2, n_features=1, separation=512, random_state=0)[0]


def _fast(**params):
    """A KTupleClusterer that releases on ``small`` in milliseconds; |x| < 600.

    A huge epsilon, and a tiny beta: with the default beta=0.05 about 5% of seeds fail the
    private test on this data; with beta=1e-6 none of 300 seeds did. No fallback: a
    candidate that cannot be released (``n_clusters=3`` on these 2 clusters) fails, rather
    than answering by the general method with a lower cost (3 centres fit better).
    """
    return KTupleClusterer(n_clusters=2, epsilon=1e5, delta=0.1, beta=1e-6, fallback_share=0.0,
                           **params)


def test_process_parallel_search_refuses_instead_of_under_charging(small):
    """Regression (issue #12, item 1): with n_jobs=2 only the refit reached the ledger, silently."""
    acc = BudgetAccountant()
    search = GridSearchCV(_fast(accountant=acc), {"epsilon": [1e5, 2e5]}, cv=3, n_jobs=2)
    with joblib.parallel_config(backend="loky"), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # scikit-learn's FitFailedWarning for each refused fit
        with pytest.raises(ValueError, match="fit_search_charged"):
            search.fit(small)
        assert acc.ledger == []
        with acc:  # accountant=None: the workers must not spend on their own default accountants
            with pytest.raises(ValueError, match="fit_search_charged"):
                GridSearchCV(_fast(), {"epsilon": [1e5, 2e5]}, cv=3, n_jobs=2).fit(small)
        assert acc.ledger == []
    charged = fit_search_charged(search, small, accountant=acc, data_radius=600.0)
    assert len(acc.ledger) == 1 and acc.total() == pytest.approx((3 * 3e5 + 2e5 + 0.1, 7 * 0.1))
    assert charged.best_estimator_.status_ == "success" and charged.best_estimator_.accountant is acc


def test_threaded_search_charges_every_fit_to_the_shared_accountant(small):
    acc = BudgetAccountant()
    search = GridSearchCV(_fast(accountant=acc), {"epsilon": [1e5, 2e5]}, cv=3, n_jobs=2)
    with joblib.parallel_config(backend="threading"):
        search.fit(small)
    assert len(acc.ledger) == 7 and acc.total()[0] == pytest.approx(3 * 3e5 + search.best_params_["epsilon"])


def test_refit_is_priced_at_the_componentwise_maximum(small):
    """Regression (issue #12, item 2): max() of (epsilon, delta) tuples took the delta of the wrong candidate."""
    grid = [{"epsilon": [1.0], "delta": [1e-9]}, {"epsilon": [0.9], "delta": [1e-3]}]
    epsilon, delta, n_fits = search_cost(GridSearchCV(_fast(), grid, cv=3), small)
    assert n_fits == 7
    assert epsilon == pytest.approx(3 * 1.0 + 3 * 0.9 + 1.0)
    assert delta == pytest.approx(3 * 1e-9 + 3 * 1e-3 + 1e-3)  # the refit pays the largest delta


@pytest.mark.parametrize("random_state", [None, np.random.RandomState(0)], ids=["None", "RandomState"])
def test_randomized_search_is_priced_on_the_candidates_it_fits(small, random_state):
    """Regression (issue #12, item 3): pricing drew its own candidates, not the fitted ones."""
    search = RandomizedSearchCV(_fast(), {"epsilon": stats.uniform(1e5, 1e5)}, n_iter=3, cv=2,
                                random_state=random_state)
    with pytest.raises(ValueError, match="random_state"):
        search_cost(search, small)
    acc = BudgetAccountant()
    fit_search_charged(search, small, accountant=acc, data_radius=600.0)
    fitted = [params["epsilon"] for params in search.cv_results_["params"]]
    expected = 2 * sum(fitted) + max(fitted) + 0.1
    assert acc.total()[0] == pytest.approx(expected, rel=1e-12)
    assert search.random_state is random_state  # the pinned seed is only for the duration


def test_search_cost_refuses_other_searches(small):
    from sklearn.experimental import enable_halving_search_cv  # noqa: F401
    from sklearn.model_selection import HalvingGridSearchCV

    with pytest.raises(ValueError, match="GridSearchCV or a RandomizedSearchCV"):
        search_cost(HalvingGridSearchCV(_fast(), {"epsilon": [1e5, 2e5]}), small)


@pytest.mark.filterwarnings("ignore::skdpcluster.NotSeparatedWarning")  # n_clusters=3 fails, as intended
def test_charged_search_chooses_privately_by_default(small):
    """Regression (issue #12, item 4): best_params_ and cv_results_ came from exact private scores."""
    acc = BudgetAccountant()
    search = GridSearchCV(_fast(), {"n_clusters": [3, 2]}, cv=KFold(4))  # the first candidate fails
    fit_search_charged(search, small, accountant=acc, selection_epsilon=0.25, data_radius=600.0)
    assert search.best_index_ == 1 and search.best_params_ == {"n_clusters": 2}
    assert not any("score" in key and "time" not in key for key in search.cv_results_)
    assert not hasattr(search, "best_score_")
    event = search.selection_event_
    assert (event.mechanism, event.epsilon, event.sensitivity) == ("exponential", 0.25, 1200.0**2)
    assert acc.total()[0] == pytest.approx(4 * 2e5 + 1e5 + 0.25)
    assert search.scoring is None and search.refit is True and isinstance(search.cv, KFold)  # restored


def test_private_choice_sensitivity_counts_overlapping_test_folds(small):
    cv = ShuffleSplit(n_splits=4, test_size=0.5, random_state=0)
    multiplicity = np.bincount(np.concatenate([test for _, test in cv.split(small)])).max()
    assert multiplicity >= 2
    search = fit_search_charged(GridSearchCV(_fast(), {"epsilon": [1e5]}, cv=cv), small,
                                accountant=BudgetAccountant(), data_radius=600.0)
    assert search.selection_event_.sensitivity == multiplicity * 1200.0**2


def test_non_private_selection_is_explicit_and_loud(small):
    search = GridSearchCV(_fast(), {"epsilon": [1e5, 2e5]}, cv=3)
    with pytest.warns(PrivacyLeakWarning, match="not private"):
        fit_search_charged(search, small, accountant=BudgetAccountant(), selection="non_private")
    assert "mean_test_score" in search.cv_results_ and search.selection_event_ is None


def test_private_choice_validates_before_spending(small):
    acc = BudgetAccountant()
    search = GridSearchCV(_fast(), {"epsilon": [1e5, 2e5]}, cv=3)
    for kwargs, match in [({}, "data_radius"), ({"data_radius": -1.0}, "data_radius"),
                          ({"data_radius": 600.0, "selection_epsilon": 0.0}, "selection_epsilon"),
                          ({"data_radius": 600.0, "selection": "best"}, "selection"),
                          ({"data_radius": 600.0, "random_state": "x"}, "random_state")]:
        with pytest.raises(ValueError, match=match):
            fit_search_charged(search, small, accountant=acc, **kwargs)
    with pytest.raises(ValueError, match="refit"):
        fit_search_charged(GridSearchCV(_fast(), {"epsilon": [1e5]}, refit=False), small,
                           accountant=acc, data_radius=600.0)
    assert acc.ledger == [] and not hasattr(search, "cv_results_")


_NOT_ONE_ROW_REPLACED = {
    "stable_add_remove": (PrivateStableKMeans(n_clusters=2, neighbouring="add_remove", data_radius=600.0),
                          {}, "neighbouring='add_remove'"),
    "highdim_add_remove": (PrivateHighDimKMeans(n_clusters=2, neighbouring="add_remove", data_radius=600.0),
                           {}, "neighbouring='add_remove'"),
    "federated_add_remove": (FederatedPrivateKMeans(n_clusters=2, neighbouring="add_remove",
                                                    data_radius=600.0), {}, "neighbouring='add_remove'"),
    "federated_client": (FederatedPrivateKMeans(n_clusters=2, privacy_unit="client", data_radius=600.0),
                         {"client_ids": np.arange(2000) % 10}, "privacy_unit='client'"),
}


@pytest.mark.parametrize("selection", ["private", "non_private"])
@pytest.mark.parametrize("case", list(_NOT_ONE_ROW_REPLACED))
def test_search_refuses_neighbours_other_than_one_row_replaced_before_spending(small, case, selection):
    """Regression (reviews RA-1, RA-2): these searches were accepted and charged, under-priced.

    At client level the private choice was calibrated for one row while one client's rows move
    every candidate's summed score (88 x the sensitivity in the audit); under add/remove the
    splits, a function of the private number of rows, move with one added row, so a fold fit is
    not epsilon-DP. Both fits and choice are refused, before anything is charged or fitted.
    """
    estimator, fit_params, match = _NOT_ONE_ROW_REPLACED[case]
    acc = BudgetAccountant(100.0, 1e-3)
    search = GridSearchCV(clone(estimator), {"epsilon": [0.5, 1.0]}, cv=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and nothing warned either (the selection='non_private' warning comes later)
        with pytest.raises(ValueError, match=match):
            fit_search_charged(search, small, accountant=acc, selection=selection, **fit_params)
        with pytest.raises(ValueError, match=match):
            search_cost(search, small)
    assert acc.ledger == [] and not hasattr(search, "cv_results_")


def _scaled_search(clusterer, scaler_accountant=None, grid=None):
    """A search over a pipeline of a private scaler and ``clusterer``: two private steps."""
    pipe = make_pipeline(PrivateStandardScaler(epsilon=1.0, data_radius=600.0, accountant=scaler_accountant),
                         clusterer)
    return GridSearchCV(pipe, grid or {"ktupleclusterer__epsilon": [1e5, 2e5]},
                        cv=ShuffleSplit(2, test_size=0.25, random_state=0))


def test_a_search_is_charged_to_the_accountant_a_later_private_step_names(small, monkeypatch):
    """Review R1-2: only the first private step's accountant was read, so a pipeline whose private
    scaler names none and whose clusterer names acc was charged to the default accountant."""
    default = BudgetAccountant()
    monkeypatch.setattr(BudgetAccountant, "_base_default", default)
    acc = BudgetAccountant()
    search = _scaled_search(_fast(accountant=acc, data_radius=10.0))
    fit_search_charged(search, small, data_radius=10.0)
    assert default.ledger == []  # before the fix: the whole search, and acc.ledger == []
    (entry,) = acc.ledger
    assert entry.epsilon == pytest.approx(search_cost(search, small)[0] + 0.1)
    assert search.best_estimator_[-1].accountant is acc


@pytest.mark.parametrize("swapped_by", ["pipeline", "grid"])
def test_a_search_whose_private_steps_name_different_accountants_is_refused(small, swapped_by):
    """Review R1-2: the search was charged to the first step's accountant, whatever the others name;
    a grid that swaps in a step naming another accountant counts too."""
    first, second = BudgetAccountant(), BudgetAccountant()
    if swapped_by == "pipeline":
        search = _scaled_search(_fast(accountant=second, data_radius=10.0), scaler_accountant=first)
    else:
        search = _scaled_search(_fast(data_radius=10.0), scaler_accountant=first,
                                grid={"ktupleclusterer": [_fast(accountant=second, data_radius=10.0)]})
    with pytest.raises(ValueError, match=r"name 2 different accountants \(accountant 1 by "
                                         r"privatestandardscaler; accountant 2 by ktupleclusterer\)"):
        fit_search_charged(search, small, data_radius=10.0)
    assert first.ledger == second.ledger == [] and first._reserved == second._reserved == {}
    assert not hasattr(search, "cv_results_")


def test_search_names_the_parameter_that_the_grid_or_a_pipeline_sets(small):
    acc = BudgetAccountant(100.0, 1e-3)
    grid = GridSearchCV(FederatedPrivateKMeans(n_clusters=2, data_radius=600.0),
                        {"privacy_unit": ["sample", "client"]}, cv=3)
    with pytest.raises(ValueError, match="privacy_unit='client'"):
        fit_search_charged(grid, small, accountant=acc)
    pipe = make_pipeline(StandardScaler(), PrivateStableKMeans(n_clusters=2, data_radius=10.0))
    search = GridSearchCV(pipe, {"privatestablekmeans__neighbouring": ["add_remove"]}, cv=3)
    with pytest.raises(ValueError, match="privatestablekmeans__neighbouring='add_remove'"):
        fit_search_charged(search, small, accountant=acc)
    assert acc.ledger == []


@pytest.mark.parametrize("in_pipeline", [False, True], ids=["estimator", "pipeline"])
def test_a_private_choice_over_the_local_model_is_refused_before_spending(small, in_pipeline):
    """Task H1: the private choice scores raw held-out rows at a curator, which the local model's
    trust assumption (nobody sees a raw row) rules out; it was accepted and charged."""
    local = LocalPrivateStableKMeans(n_clusters=2, data_radius=600.0)
    estimator = make_pipeline(StandardScaler(), local) if in_pipeline else local
    grid = {f"{'localprivatestablekmeans__' if in_pipeline else ''}epsilon": [0.5, 1.0]}
    search = GridSearchCV(estimator, grid, cv=3)
    acc = BudgetAccountant(100.0, 1e-3)
    acc.spend(0.5, 1e-6, label="earlier fit")
    before = (acc.ledger, acc.total())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and nothing warned
        with pytest.raises(ValueError, match="LocalPrivateStableKMeans.*no party.*public considerations"):
            fit_search_charged(search, small, accountant=acc)
    assert (acc.ledger, acc.total()) == before and acc._reserved == {}
    assert not hasattr(search, "cv_results_")


def test_select_privately_refuses_client_level_candidates_before_spending(small):
    """Regression (review RA-1): its sensitivity 4 Lambda^2 is one row's; a client holds many."""
    acc = BudgetAccountant()
    client_level = SimpleNamespace(cluster_centers_=np.array([[0.0]]), privacy_unit="client")
    with pytest.raises(ValueError, match="privacy_unit='client'"):
        select_privately([client_level], small, data_radius=600.0, epsilon=1.0, accountant=acc)
    assert acc.ledger == []


def test_select_privately_is_charged_for_one_row(small):
    """Review R8 M1: its entry records privacy_unit='sample', so a client-level accountant
    refuses it before the draw (its 4 Lambda^2 gives no client-level guarantee)."""
    candidates = [SimpleNamespace(cluster_centers_=np.array([[0.0]]))]
    acc = BudgetAccountant()
    select_privately(candidates, small, data_radius=600.0, epsilon=1.0, accountant=acc)
    assert [entry.privacy_unit for entry in acc.ledger] == ["sample"]
    client = BudgetAccountant(privacy_unit="client")
    with pytest.raises(ValueError, match="protects one row.*privacy_unit='client'"):
        select_privately(candidates, small, data_radius=600.0, epsilon=1.0, accountant=client)
    assert client.ledger == [] and client._reserved == {}


def test_seeded_search_warns_or_refuses_before_charging(small):
    """Regression (issue #12, item 8): GridSearchCV(..., random_state=0) reused one noise stream per fit."""
    search = GridSearchCV(_fast(random_state=0), {"epsilon": [1e5]}, cv=3)
    strict = BudgetAccountant(on_repeated_noise="raise")
    with pytest.raises(NoiseReuseError, match="random_state=None"):
        fit_search_charged(search, small, accountant=strict, data_radius=600.0)
    assert strict.ledger == []
    with pytest.warns(NoiseReuseWarning):
        fit_search_charged(search, small, accountant=BudgetAccountant(), data_radius=600.0)
    in_process = BudgetAccountant()
    with pytest.warns(NoiseReuseWarning):  # the shared accountant notices the folds' repeated seed
        GridSearchCV(_fast(accountant=in_process, random_state=0), {"epsilon": [1e5]}, cv=3).fit(small)


def _one_fit_search(random_state):
    """A search of one fit (one candidate, one split, no refit): no repeat within the search itself."""
    return GridSearchCV(_fast(random_state=random_state), {"epsilon": [1e5]}, refit=False,
                        cv=ShuffleSplit(1, test_size=0.25, random_state=0))


_ONE_FIT = pytest.mark.filterwarnings("ignore::skdpcluster.PrivacyLeakWarning")  # refit=False: non_private


@_ONE_FIT
@pytest.mark.parametrize("on_repeated_noise", ["raise", "warn"])
def test_a_seeded_search_after_a_fit_with_its_seed_is_a_repeat(small, on_repeated_noise):
    """Re-review V1-6: fit_search_charged spent with no noise key, so a fit with seed 7 and then a
    one-fit search with seed 7 (the same noise stream) passed even with on_repeated_noise='raise'."""
    acc = BudgetAccountant(on_repeated_noise=on_repeated_noise)
    _fast(random_state=7, accountant=acc).fit(small)
    search = _one_fit_search(7)
    if on_repeated_noise == "raise":
        with pytest.raises(NoiseReuseError, match="KTupleClusterer was already charged"):
            fit_search_charged(search, small, accountant=acc, selection="non_private")
        assert len(acc.ledger) == 1 and acc._reserved == {} and not hasattr(search, "cv_results_")
    else:
        with pytest.warns(NoiseReuseWarning, match="KTupleClusterer was already charged"):
            fit_search_charged(search, small, accountant=acc, selection="non_private")
        assert len(acc.ledger) == 2


@_ONE_FIT
@pytest.mark.parametrize("on_repeated_noise", ["raise", "warn"])
@pytest.mark.parametrize("seeded", ["estimator", "choice"])
def test_a_fit_after_a_seeded_search_with_its_seed_is_a_repeat(small, seeded, on_repeated_noise):
    """Re-review V1-6: after a search with seed 8 (its estimator's, or its private choice's), a fit
    with seed 8 was accepted silently: the search's charge recorded no noise stream."""
    acc = BudgetAccountant(on_repeated_noise=on_repeated_noise)
    if seeded == "estimator":
        fit_search_charged(_one_fit_search(8), small, accountant=acc, selection="non_private")
    else:  # a private choice refits; the estimator is unseeded, so the search repeats nothing itself
        fit_search_charged(_one_fit_search(None).set_params(refit=True), small, accountant=acc,
                           data_radius=600.0, random_state=8)
    (search_entry,) = acc.ledger
    later = _fast(random_state=8, accountant=acc)
    if on_repeated_noise == "raise":
        with pytest.raises(NoiseReuseError, match="already charged"):
            later.fit(small)
        assert acc.ledger == [search_entry] and not hasattr(later, "cluster_centers_")
    else:
        with pytest.warns(NoiseReuseWarning, match="already charged"):
            later.fit(small)
        assert len(acc.ledger) == 2


def test_a_fit_after_a_search_whose_choice_moved_its_generator_is_a_repeat(small):
    """Review R1-1 (part B): with one Generator as the estimator's and the private choice's
    random_state, the choice's direct draws moved its state but not its spawn counter, and a later
    fit on it drew the noise of the search's refit (a clone spawning the same children),
    unnoticed."""
    generator = np.random.default_rng(7)
    acc = BudgetAccountant()
    estimator = _fast(accountant=acc, random_state=generator)
    search = GridSearchCV(estimator, {"epsilon": [1e5]}, cv=ShuffleSplit(1, test_size=0.25, random_state=0))
    with pytest.warns(NoiseReuseWarning, match="draw the same noise"):  # its fold and its refit
        fit_search_charged(search, small, accountant=acc, data_radius=600.0, random_state=generator)
    with pytest.warns(NoiseReuseWarning, match="KTupleClusterer was already charged"):
        estimator.fit(small)
    assert np.array_equal(estimator.cluster_centers_, search.best_estimator_.cluster_centers_)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoiseReuseWarning)
        estimator.fit(small)  # the Generator has spawned since: fresh children


def test_a_private_choice_records_only_its_direct_draws(small):
    """The exponential mechanism of the private choice draws from its Generator directly and never
    spawns: a later fit spawning from that Generator draws fresh noise and is accepted."""
    generator = np.random.default_rng(9)
    acc = BudgetAccountant(on_repeated_noise="raise")
    direct = noise_fingerprint("fit_search_charged/selection", generator)[:1]
    fit_search_charged(_one_fit_search(None).set_params(refit=True), small, accountant=acc,
                       data_radius=600.0, random_state=generator)
    assert acc.ledger[0].noise_key == direct
    _fast(accountant=acc, random_state=generator).fit(small)
    assert len(acc.ledger) == 2


def _one_fit_pipeline_search(scaler_seed, clusterer_seed):
    """A one-fit search over a pipeline of two seeded private steps."""
    search = _scaled_search(_fast(random_state=clusterer_seed, data_radius=10.0),
                            grid={"ktupleclusterer__epsilon": [1e5]})
    search.estimator.set_params(privatestandardscaler__random_state=scaler_seed)
    return search.set_params(refit=False, cv=ShuffleSplit(1, test_size=0.25, random_state=0))


@_ONE_FIT
@pytest.mark.parametrize("on_repeated_noise", ["raise", "warn"])
def test_a_one_fit_search_whose_private_steps_share_a_seed_is_a_repeat(small, on_repeated_noise):
    """Review R1-7: a one-fit search over a pipeline whose two private steps have random_state=3 was
    charged silently (the repeat was only counted over 2 fits or more); its Pipeline.fit is refused."""
    acc = BudgetAccountant(on_repeated_noise=on_repeated_noise)
    search = _one_fit_pipeline_search(3, 3)
    match = r"private steps PrivateStandardScaler\(random_state=3\), KTupleClusterer\(random_state=3\)"
    if on_repeated_noise == "raise":
        with pytest.raises(NoiseReuseError, match=match):
            fit_search_charged(search, small, accountant=acc, selection="non_private")
        assert acc.ledger == [] and acc._reserved == {} and not hasattr(search, "cv_results_")
    else:
        with pytest.warns(NoiseReuseWarning, match=match):
            fit_search_charged(search, small, accountant=acc, selection="non_private")
        assert len(acc.ledger) == 1


@_ONE_FIT
def test_a_one_fit_search_whose_private_steps_have_their_own_seeds_is_not_a_repeat(small):
    acc = BudgetAccountant(on_repeated_noise="raise")
    fit_search_charged(_one_fit_pipeline_search(3, 4), small, accountant=acc, selection="non_private")
    (entry,) = acc.ledger
    recorded = {*noise_fingerprint("PrivateStandardScaler", 3), *noise_fingerprint("KTupleClusterer", 4)}
    assert set(entry.noise_key) == recorded  # every fingerprint of both seeds


def _selection_draws(X_test, n_draws, seed, sensitivity_factor=1.0):
    """Indices chosen by the private choice of a one-split search between two fixed candidates."""
    search = GridSearchCV(_fast(data_radius=1.0), {"epsilon": [1e5]})
    splits = [(np.arange(0), np.arange(X_test.shape[0]))]
    scorer, choice = _private_selection(search, [{}], splits, X_test.shape[0], epsilon=1.0,
                                        data_radius=None, random_state=seed)
    choice.sensitivity *= sensitivity_factor  # the mutant halves it
    candidates = [SimpleNamespace(cluster_centers_=np.array([[-1.0]])),
                  SimpleNamespace(cluster_centers_=np.array([[1.0]]))]
    cv_results = {"split0_test_score": [scorer(candidate, X_test) for candidate in candidates]}
    return np.array([choice(cv_results) for _ in range(n_draws)])


@pytest.mark.parametrize("sensitivity_factor, violates", [(1.0, False), (0.5, True)],
                         ids=["private_choice", "mutant_half_sensitivity"])
def test_private_choice_privacy_loss_on_worst_case_neighbours(sensitivity_factor, violates):
    """Clopper-Pearson lower bound on the choice's privacy loss (epsilon=1) on neighbouring test folds.

    Lambda = 1, so the clip is C = 4. The neighbours differ in one held-out row, +1 against -1:
    it moves candidate 0's clipped cost by C and candidate 1's by -C, the largest change a row
    can make. The other rows put the score gap at -3C, where the loss is 0.73 of epsilon and the
    mutant's (sensitivity halved) reaches 1.73.
    """
    n_draws = 20_000
    near = _selection_draws(np.array([[1.0], [1.0], [1.0]]), n_draws, 1, sensitivity_factor)
    far = _selection_draws(np.array([[1.0], [1.0], [-1.0]]), n_draws, 2, sensitivity_factor)
    edges = np.array([0.5])
    bound = epsilon_lower_bound(event_counts(near, edges), n_draws, event_counts(far, edges), n_draws)
    assert (bound > 1.0) is violates, bound


def test_held_out_clipped_cost_clips_every_row():
    scorer = _HeldOutClippedCost(4.0)
    fitted = SimpleNamespace(cluster_centers_=np.array([[0.0], [10.0]]))
    assert scorer(fitted, np.array([[1.0], [5.0], [9.0], [100.0]])) == -(1.0 + 4.0 + 1.0 + 4.0)
    assert scorer(SimpleNamespace(cluster_centers_=None), np.zeros((3, 1))) == -12.0


def test_select_privately_is_charged_under_the_ledgers_relation(small):
    """Re-review V1: select_privately always spent as replace-one, so after add/remove fits on
    one accountant it was refused; the choice is epsilon-DP under both relations."""
    candidates = [PrivateStableKMeans(2, data_radius=600.0, neighbouring="add_remove",
                                      random_state=seed, accountant=BudgetAccountant()).fit(small)
                  for seed in (1, 2)]
    for acc in (BudgetAccountant(), BudgetAccountant(neighbouring="add_remove")):
        acc.spend(1.0, 0.0, label="fit", neighbouring="add_remove")
        select_privately(candidates, small, data_radius=600.0, epsilon=0.5, random_state=0,
                         accountant=acc)
        assert [entry.neighbouring for entry in acc.ledger] == ["add_remove", "add_remove"]
        assert acc.total() == pytest.approx((1.5, 0.0))


@pytest.mark.parametrize("on_repeated_noise", ["raise", "warn"])
def test_select_privately_checks_and_records_its_noise_stream(small, on_repeated_noise):
    """Review R1-3: select_privately passed no noise key, so two choices with seed 7 (the same Gumbel
    draws), and a fit with seed 7 after them, passed even with on_repeated_noise='raise'."""
    acc = BudgetAccountant(on_repeated_noise=on_repeated_noise)
    candidates = [SimpleNamespace(cluster_centers_=np.array([[-512.0], [512.0]])),
                  SimpleNamespace(cluster_centers_=np.array([[0.0]]))]

    def choose():
        return select_privately(candidates, small, data_radius=600.0, epsilon=1.0, random_state=7,
                                accountant=acc)

    choose()
    (entry,) = acc.ledger
    # Before: None. Its direct draws only (the exponential mechanism never spawns).
    assert entry.noise_key == noise_fingerprint("select_privately", 7)[:1]
    later = _fast(random_state=7, accountant=acc)
    if on_repeated_noise == "raise":
        with pytest.raises(NoiseReuseError, match="select_privately was already charged"):
            choose()
        with pytest.raises(NoiseReuseError, match="select_privately was already charged"):
            later.fit(small)
        assert acc.ledger == [entry]
    else:
        with pytest.warns(NoiseReuseWarning, match="select_privately was already charged"):
            choose()
        assert len(acc.ledger) == 2
    assert acc._reserved == {}
