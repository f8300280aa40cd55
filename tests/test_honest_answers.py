"""Issue #14: every estimator answers honestly (friction, one cluster, utility warnings, status)."""

import re
import warnings

import numpy as np
import pytest
from sklearn.base import clone

from skdpcluster import (
    BudgetAccountant,
    InsufficientDataError,
    NotSeparatedWarning,
    PrivateStepFailedWarning,
    FederatedPrivateKMeans,
    KTupleClusterer,
    PrivateGaussianMixture,
    PrivateHighDimKMeans,
    PrivateHighDimKMedian,
    PrivateStableKMeans,
    PrivateStableKMedian,
    SampleAggregateStableKMeans,
    UtilityWarning,
)
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.local import LocalPrivateStableKMeans

ALL_ESTIMATORS = [KTupleClusterer, PrivateGaussianMixture, FederatedPrivateKMeans, PrivateStableKMeans,
                  PrivateStableKMedian, PrivateHighDimKMeans, PrivateHighDimKMedian,
                  SampleAggregateStableKMeans, LocalPrivateStableKMeans]


@pytest.fixture(scope="module")
def easy():
    return make_separated_mixture(20_000, n_clusters=4, n_features=8, separation=10.0, random_state=0)[0]


@pytest.mark.parametrize("Estimator", ALL_ESTIMATORS, ids=lambda E: E.__name__)
def test_sample_weight_is_refused_clearly_before_spending(Estimator):
    accountant = BudgetAccountant()
    X = np.random.default_rng(0).normal(size=(200, 2))
    with pytest.raises(ValueError, match=rf"{Estimator.__name__}\.fit does not accept \['sample_weight'\]"):
        Estimator(accountant=accountant).fit(X, sample_weight=np.ones(len(X)))
    assert accountant.ledger == []


@pytest.mark.parametrize("Estimator", [PrivateStableKMeans, PrivateHighDimKMeans, FederatedPrivateKMeans],
                         ids=lambda E: E.__name__)
@pytest.mark.filterwarnings("ignore:.*no X_server was given")
def test_float32_input_keeps_float32_centres_and_transform(Estimator, easy):
    est = Estimator(n_clusters=4, data_radius=20.0, random_state=0, accountant=BudgetAccountant())
    est.fit(easy.astype(np.float32))
    assert est.cluster_centers_.dtype == np.float32
    assert est.transform(easy[:5].astype(np.float32)).dtype == np.float32
    assert est.transform(easy[:5]).dtype == np.float64


@pytest.mark.filterwarnings("ignore:.*only 1 heavy grid cells")
def test_float32_input_keeps_float64_centres_beyond_the_float32_range():
    # Review RB (noticed): float32 rows with a public data_radius of 1e45 released the centres
    # as -inf in float32 with status_="success"; the released values are finite in float64.
    X = np.random.default_rng(0).normal(size=(2000, 2)).astype(np.float32)
    est = PrivateStableKMeans(2, data_radius=1e45, random_state=0,
                              accountant=BudgetAccountant()).fit(X)
    assert est.cluster_centers_.dtype == np.float64
    assert np.all(np.isfinite(est.cluster_centers_))
    assert np.all(np.abs(est.cluster_centers_) > np.finfo(np.float32).max)


@pytest.mark.parametrize("Estimator", [PrivateHighDimKMeans, PrivateHighDimKMedian], ids=lambda E: E.__name__)
def test_highdim_delta_zero_is_a_pure_fit(Estimator, easy):
    est = Estimator(n_clusters=4, delta=0, random_state=0, accountant=BudgetAccountant()).fit(easy)
    assert est.status_ == "success"
    assert est.privacy_spent_["delta"] == 0.0 and est.privacy_spent_["epsilon"] <= 1.0 + 1e-9


def test_highdim_delta_zero_refused_where_delta_is_spent(easy):
    accountant = BudgetAccountant()
    with pytest.raises(ValueError, match="delta=0: sum_mechanism='gaussian'"):
        PrivateHighDimKMeans(delta=0, sum_mechanism="gaussian", accountant=accountant).fit(easy)
    with pytest.raises(ValueError, match="delta=0: .*recovery='one_median'"):
        PrivateHighDimKMedian(delta=0, recovery="one_median", accountant=accountant).fit(easy)
    assert accountant.ledger == []


# -- status_ "fallback" of the k-tuple clusterer ------------------------------------------------

def test_ktuple_too_few_rows_releases_by_the_fallback_on_the_whole_budget():
    """Issue #14: 60 rows raised InsufficientDataError at default construction."""
    X = np.random.default_rng(0).normal(size=(60, 3))
    accountant = BudgetAccountant()
    with pytest.warns(NotSeparatedWarning, match="status_='fallback'"):
        est = KTupleClusterer(n_clusters=3, data_radius=10.0, accountant=accountant, random_state=0).fit(X)
    assert est.status_ == "fallback" and est.cluster_centers_.shape == (3, 3)
    assert est.fallback_info_["share"] == 1.0 and "needs at least" in est.fallback_info_["reason"]
    assert est.n_tuples_ == 0 and est.predict(X).shape == (60,)
    assert est.privacy_spent_["epsilon"] == pytest.approx(1.0) and est.privacy_spent_["delta"] <= 1e-6
    assert accountant.total() == (est.privacy_spent_["epsilon"], est.privacy_spent_["delta"])


@pytest.mark.parametrize("method", ["located", "noisy_centers", "averages"])
def test_ktuple_failed_test_and_success_charge_the_same_and_reserve_the_share(method):
    """The reserved share is charged on success (unused) and spent by the fallback on failure:
    the same bits (before the fix, a fallback of noisy_centers or averages charged 4e-11 less,
    its stable fit's zCDP safety margin)."""
    easy = make_separated_mixture(10_000, 4, 4, separation=100, random_state=0)[0]
    noise = np.random.default_rng(0).uniform(-100, 100, size=(10_000, 4))
    fits, accountants = {}, {}
    for name, X in {"easy": easy, "noise": noise}.items():
        accountants[name] = BudgetAccountant()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotSeparatedWarning)
            fits[name] = KTupleClusterer(4, method=method, epsilon=8.0, delta=1e-2,
                                         data_radius=200.0, fallback_share=0.1,
                                         accountant=accountants[name], random_state=0).fit(X)
    assert fits["easy"].status_ == "success" and fits["easy"].fallback_info_ is None
    assert fits["easy"].privacy_ledger_[-1].label == "KTupleClusterer/fallback_share_unused"
    assert fits["noise"].status_ == "fallback" and fits["noise"].cluster_centers_.shape == (4, 4)
    assert fits["noise"].fallback_info_["share"] == pytest.approx(0.1)
    assert fits["easy"].privacy_spent_ == fits["noise"].privacy_spent_
    assert accountants["easy"].total() == accountants["noise"].total()
    # Within the request, short of it by at most the zCDP conversions' safety margin.
    assert fits["noise"].privacy_spent_["epsilon"] == pytest.approx(8.0, rel=1e-9)
    assert fits["noise"].privacy_spent_["delta"] == pytest.approx(1e-2, rel=1e-9)


def test_ktuple_auto_share_reserves_nothing_where_the_tuple_path_runs_on_the_whole_budget():
    """A reserved 10% measurably hurt the tuple path near its smallest n (16/20 targets met at
    n = 1e4, k = 4, d = 4, against 20/20 on the whole budget): "auto" reserves it only when the
    tuple path cannot run at all, a public fact."""
    easy = make_separated_mixture(10_000, 4, 4, separation=10, random_state=0)[0]
    est = KTupleClusterer(4, data_radius=40.0, accountant=BudgetAccountant(), random_state=0).fit(easy)
    assert est.status_ == "success" and est.fallback_info_ is None
    assert "KTupleClusterer/fallback_share_unused" not in [e.label for e in est.privacy_ledger_]
    small = easy[:300]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = KTupleClusterer(4, data_radius=40.0, accountant=BudgetAccountant(),
                              random_state=0).fit(small)
    assert est.status_ in ("fallback", "failure") and est.fallback_info_["share"] == 1.0
    assert est.privacy_spent_["epsilon"] == pytest.approx(1.0)


@pytest.fixture(scope="module")
def uniform_noise():
    return np.random.default_rng(0).uniform(-20, 20, size=(10_000, 4))


def _kmeans_cost(X, centers):
    return float(((X[:, None, :] - centers[None]) ** 2).sum(-1).min(1).sum())


def _fit_with_and_without_fallback(estimator, X):
    """The default fit (``fallback_share="auto"``) and the fit with the fallback off, same seed."""
    fits = []
    for share in ("auto", 0.0):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotSeparatedWarning)
            fits.append(clone(estimator).set_params(fallback_share=share, random_state=0,
                                                    accountant=BudgetAccountant()).fit(X))
    return fits


def test_ktuple_default_answers_uniform_noise_by_the_general_method_on_the_refinement_share(uniform_noise):
    """Issue #14: at the default, a failed location gave status_='failure' (nothing reserved).

    The general method now runs on the zCDP share the row refinement would have spent: same
    ledger total and rho as fallback_share=0, which still releases nothing.
    """
    auto, off = _fit_with_and_without_fallback(KTupleClusterer(4, data_radius=40.0),
                                               uniform_noise)
    assert off.status_ == "failure" and off.cluster_centers_ is None
    assert auto.status_ == "fallback" and auto.located_info_["failed_step"] == "locate"
    assert auto.fallback_info_["method"] == "grid" and auto.fallback_info_["share"] == pytest.approx(0.6)
    assert auto.privacy_spent_ == off.privacy_spent_  # same (epsilon, delta, rho): nothing reserved
    assert any(e.label.startswith("located/general/") for e in auto.privacy_ledger_)
    # a useful answer: within 10% of scikit-learn's KMeans(n_init=10) cost (measured 1.03)
    from sklearn.cluster import KMeans
    optimum = KMeans(4, n_init=10, random_state=0).fit(uniform_noise).inertia_
    assert _kmeans_cost(uniform_noise, auto.cluster_centers_) <= 1.1 * optimum


def test_ktuple_grid_fallback_short_of_heavy_cells_warns_after_the_fit():
    """Review R2-5: the grid's UserWarning was given inside the located method's fallback, so
    made an error it failed the charged fit; now fallback_info_ holds the released count and a
    UtilityWarning after the fit says that some centres are filler points."""
    X = np.random.default_rng(0).uniform(-1.0, 1.0, size=(3000, 6))
    accountant = BudgetAccountant()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        warnings.filterwarnings("error", message="GridInitializer", category=UserWarning)
        est = KTupleClusterer(4, data_radius=40.0, random_state=0, accountant=accountant).fit(X)
    assert est.status_ == "fallback" and est.fallback_info_["n_heavy_cells"] == 3
    assert est.privacy_spent_["proven"] is True and len(accountant.ledger) == 1
    (short,) = [w for w in record if "heavy grid cells" in str(w.message)]
    assert short.category is UtilityWarning
    assert "found 3 heavy grid cells for 4 centres" in str(short.message)


def test_mixture_grid_fallback_short_of_heavy_cells_warns_after_the_fit():
    """Review R3-2: the mixture runs the same general method; with the grid's in-step warning
    off it said nothing about the filler centres. Now the k-tuple's post-fit UtilityWarning."""
    X = np.random.default_rng(0).uniform(-1.0, 1.0, size=(8000, 4))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        gm = PrivateGaussianMixture(4, data_radius=40.0, random_state=0,
                                    accountant=BudgetAccountant()).fit(X)
    assert gm.status_ == "fallback" and gm.fallback_info_["n_heavy_cells"] == 2
    (short,) = [w for w in record if "heavy grid cells" in str(w.message)]
    assert short.category is UtilityWarning
    assert "found 2 heavy grid cells for 4 centres" in str(short.message)


def test_ktuple_default_success_is_the_fallback_off_fit():
    """Nothing is reserved at the default: a successful fit is bit-identical to fallback_share=0."""
    easy = make_separated_mixture(10_000, 4, 4, separation=10, random_state=0)[0]
    centers = [KTupleClusterer(4, data_radius=40.0, fallback_share=share, accountant=BudgetAccountant(),
                               random_state=0).fit(easy).cluster_centers_ for share in ("auto", 0.0)]
    assert np.array_equal(*centers)


def test_ktuple_auto_reserves_a_share_for_the_paper_methods():
    """The paper's methods have no refinement share to reuse: "auto" reserves AUTO_FALLBACK_SHARE."""
    X = make_separated_mixture(20_000, 2, 1, separation=5000, random_state=0)[0]  # >= 2 * 2189 tuples
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotSeparatedWarning)
        est = KTupleClusterer(2, method="noisy_centers", data_radius=1e4, accountant=BudgetAccountant(),
                              random_state=0).fit(X)
    if est.status_ == "success":
        assert est.privacy_ledger_[-1].label == "KTupleClusterer/fallback_share_unused"
        assert est.privacy_ledger_[-1].epsilon == pytest.approx(0.1)
    else:
        assert est.status_ == "fallback" and est.fallback_info_["share"] == pytest.approx(0.1)
    assert est.privacy_spent_["epsilon"] == pytest.approx(1.0)


def test_mixture_default_answers_one_blob_by_the_general_method():
    """Issue #14: at the default the mixture's failed k-tuple location released nothing."""
    X = np.random.default_rng(0).normal(size=(60_000, 2))  # one blob: the tuples never agree
    auto, off = _fit_with_and_without_fallback(PrivateGaussianMixture(2, data_radius=10.0), X)
    assert off.status_ == "failure" and off.means_ is None
    assert auto.status_ == "fallback" and auto.fallback_info_["method"] == "grid"
    assert auto.means_.shape == (2, 2) and np.all(np.isfinite(auto.covariances_))
    assert auto.privacy_spent_ == off.privacy_spent_


@pytest.mark.parametrize("Estimator", [PrivateStableKMeans, PrivateStableKMedian], ids=lambda E: E.__name__)
def test_stable_with_the_default_ktuple_initializer_reports_fallback_on_uniform_noise(Estimator, uniform_noise):
    """Done-when of issue #14: uniform noise gives "fallback" for every estimator with an easy-instance
    test (here the k-tuple initializer, located by default; its own fallback is off inside)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est = Estimator(4, initializer="ktuple", data_radius=40.0, accountant=BudgetAccountant(),
                        random_state=0).fit(uniform_noise)
    assert est.status_ == "fallback" and est.initializer_status_ == "fallback_grid"
    assert est.privacy_spent_["epsilon"] == pytest.approx(1.0)


def test_ktuple_quality_signals_and_private_cost_estimate(uniform_noise):
    """Issue #14: the released test outcome as a fitted attribute, and an opt-in private cost."""
    easy = make_separated_mixture(10_000, 4, 4, separation=10, random_state=0)[0]
    fits = {}
    for name, X in {"easy": easy, "noise": uniform_noise}.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotSeparatedWarning)
            fits[name] = KTupleClusterer(4, data_radius=40.0, estimate_cost=True, accountant=BudgetAccountant(),
                                         random_state=0).fit(X)
    easy_q, noise_q = fits["easy"].quality_, fits["noise"].quality_
    assert (easy_q["test"], easy_q["test_passed"], noise_q["test_passed"]) == ("located", True, False)
    assert easy_q["located_width"] == fits["easy"].located_info_["width"]
    for name, X in {"easy": easy, "noise": uniform_noise}.items():
        fit, quality = fits[name], fits[name].quality_
        assert fit.privacy_spent_["epsilon"] == pytest.approx(1.0) and fit.privacy_spent_["delta"] <= 1e-6
        (event,) = [e for e in fit.privacy_ledger_ if e.label == "KTupleClusterer/clipped_cost"]
        assert event.epsilon == pytest.approx(0.05) and quality["cost_noise_scale"] == pytest.approx(
            quality["cost_clip"] / 0.05)
        distances = ((X[:, None, :] - fit.cluster_centers_[None]) ** 2).sum(-1).min(1)
        exact = np.minimum(distances, quality["cost_clip"]).sum()
        # Laplace: |noise| > 8 b has probability e^-8
        assert abs(quality["clipped_cost"] - exact) <= 8 * quality["cost_noise_scale"]
    # a separated fit is rarely clipped; on noise most rows are far from every centre
    assert easy_q["mean_clipped_cost"] < 0.2 * easy_q["cost_clip"]
    assert noise_q["mean_clipped_cost"] > 0.5 * noise_q["cost_clip"]
    plain = KTupleClusterer(4, data_radius=40.0, accountant=BudgetAccountant(), random_state=0).fit(easy)
    assert plain.quality_["clipped_cost"] is None and plain.quality_["test_passed"] is True


def test_mixture_quality_reports_the_released_test_outcome():
    X = np.random.default_rng(0).normal(size=(60_000, 2))  # one blob: the location fails
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotSeparatedWarning)
        gm = PrivateGaussianMixture(2, data_radius=10.0, accountant=BudgetAccountant(), random_state=0).fit(X)
    assert gm.quality_ == {"test": "located", "test_passed": False,
                           "located_width": gm.located_info_["width"]}
    assert gm.located_info_["failed_step"] in ("width", "locate")


def test_ktuple_fallback_off_keeps_failure_and_insufficient_data():
    X = np.random.default_rng(0).normal(size=(60, 3))
    with pytest.raises(InsufficientDataError, match="needs at least"):
        KTupleClusterer(n_clusters=3, data_radius=10.0, fallback_share=0.0,
                        accountant=BudgetAccountant()).fit(X)


def test_ktuple_fallback_handles_overflowing_rows():
    X = make_separated_mixture(4000, 2, 2, separation=5000, random_state=0)[0]
    X[:200] = 1e308
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotSeparatedWarning)
        warnings.simplefilter("error", PrivateStepFailedWarning)
        est = KTupleClusterer(2, method="noisy_centers", data_radius=1e4, fallback_share=0.1,
                              accountant=BudgetAccountant(), random_state=0).fit(X)
    assert est.status_ in ("success", "fallback") and est.privacy_spent_["proven"]
    assert np.all(np.isfinite(est.cluster_centers_))


@pytest.mark.parametrize("fallback_share", ["auto", 0.0])
def test_ktuple_one_cluster_is_a_private_mean(fallback_share):
    """Issue #14: n_clusters=1 was refused, then went through the fallback; now one private average."""
    X = np.random.default_rng(0).normal(loc=3.0, size=(5000, 2))
    accountant = BudgetAccountant()
    with warnings.catch_warnings():
        warnings.simplefilter("error", NotSeparatedWarning)
        est = KTupleClusterer(n_clusters=1, data_radius=20.0, fallback_share=fallback_share,
                              accountant=accountant, random_state=0).fit(X)
    assert est.status_ == "success" and est.fallback_info_ is None and est.method_ == "private_average"
    assert [e.mechanism for e in est.privacy_ledger_] == ["private_average"]
    # Prop. 2.9 per axis at (eps/2, delta/2): noise about 2 * 20 / (eps n) ~ 0.01; 0.2 is 20 of them
    assert np.linalg.norm(est.cluster_centers_[0] - X.mean(axis=0)) < 0.2
    assert accountant.total()[0] == pytest.approx(1.0) and accountant.total()[1] <= 1e-6
    assert np.array_equal(est.predict(X), np.zeros(len(X)))


def test_mixture_one_component_is_a_private_gaussian():
    """Issue #14: n_components=1 was refused (and listed as an expected check failure)."""
    X = np.random.default_rng(1).normal(loc=3.0, size=(50_000, 2))
    accountant = BudgetAccountant()
    gm = PrivateGaussianMixture(n_components=1, data_radius=20.0, accountant=accountant,
                                random_state=0).fit(X)
    assert gm.status_ == "success" and gm.n_tuples_ == 0 and gm.n_fresh_ == len(X)
    assert gm.weights_.tolist() == [1.0]
    assert np.abs(gm.means_[0] - 3.0).max() < 0.1
    assert np.abs(gm.covariances_[0] - np.eye(2)).max() < 0.15
    assert accountant.total()[0] == pytest.approx(1.0) and accountant.total()[1] == pytest.approx(1e-6)


def test_mixture_too_few_rows_releases_by_the_fallback():
    """Issue #14: PrivateGaussianMixture() raised InsufficientDataError on sklearn's check data."""
    X = np.random.default_rng(0).normal(size=(60, 3))
    accountant = BudgetAccountant()
    with pytest.warns(NotSeparatedWarning, match="status_='fallback'"):
        gm = PrivateGaussianMixture(data_radius=10.0, accountant=accountant, random_state=0).fit(X)
    assert gm.status_ == "fallback" and gm.means_.shape == (2, 3) and gm.n_tuples_ == 0
    assert gm.fallback_info_["share"] == 1.0 and "needs at least" in gm.fallback_info_["reason"]
    assert gm.predict(X).shape == (60,)
    assert gm.privacy_spent_["epsilon"] == pytest.approx(1.0) and gm.privacy_spent_["delta"] <= 1e-6


def test_mixture_failed_test_releases_the_fallback_at_the_same_cost():
    X = np.random.default_rng(0).normal(size=(60_000, 2))  # one blob: the tuples never agree
    accountant = BudgetAccountant()
    with pytest.warns(NotSeparatedWarning, match="status_='fallback'"):
        gm = PrivateGaussianMixture(2, data_radius=10.0, fallback_share=0.1, accountant=accountant,
                                    random_state=0).fit(X)
    assert gm.status_ == "fallback" and gm.fallback_info_["share"] == pytest.approx(0.1)
    assert gm.n_tuples_ > 0 and gm.means_.shape == (2, 2)
    assert gm.privacy_spent_["epsilon"] == pytest.approx(1.0)


# -- UtilityWarning from public values -------------------------------------------------------------

@pytest.mark.parametrize("Estimator", ALL_ESTIMATORS, ids=lambda E: E.__name__)
def test_tiny_input_warns_about_utility_before_spending(Estimator):
    """Issue #14: 60 rows and 8 centres at epsilon = 1 gave status_='success' and said nothing.

    2 k sqrt(d) / (epsilon n) = 2 * k * sqrt(3) / 60 >= 0.1 for every k >= 2 (local: larger).
    An accountant too small for the fit shows the warning comes before any spend.
    """
    X = np.random.default_rng(0).normal(size=(60, 3))
    accountant = BudgetAccountant(epsilon=0.5)
    with pytest.warns(UtilityWarning, match=r"with 60 rows, .*About \d+ rows"):
        with pytest.raises(ValueError, match="budget|exceed"):
            Estimator(data_radius=5.0, accountant=accountant).fit(X)
    assert accountant.ledger == []


@pytest.mark.filterwarnings("ignore:.*no X_server was given")
@pytest.mark.parametrize("Estimator", [PrivateStableKMeans, FederatedPrivateKMeans, PrivateHighDimKMeans],
                         ids=lambda E: E.__name__)
def test_enough_rows_do_not_warn_about_utility(Estimator, easy):
    # 2 * 4 * sqrt(8) / 20000 = 0.0011
    with warnings.catch_warnings():
        warnings.simplefilter("error", UtilityWarning)
        Estimator(n_clusters=4, data_radius=20.0, accountant=BudgetAccountant(), random_state=0).fit(easy)


def _warnings_of(estimator, X, **fit_params):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.fit(X, **fit_params)
    return [(w.category.__name__, str(w.message)) for w in caught]


@pytest.mark.filterwarnings("ignore:.*no X_server was given")
@pytest.mark.parametrize("make", [
    pytest.param(lambda: PrivateStableKMeans(neighbouring="add_remove"), id="stable-add_remove"),
    pytest.param(lambda: PrivateStableKMedian(neighbouring="add_remove"), id="kmedian-add_remove"),
    pytest.param(lambda: PrivateHighDimKMeans(neighbouring="add_remove"), id="highdim-add_remove"),
    pytest.param(lambda: FederatedPrivateKMeans(neighbouring="add_remove"), id="federated-add_remove"),
    pytest.param(lambda: FederatedPrivateKMeans(privacy_unit="client"), id="federated-client"),
])
def test_warnings_do_not_tell_neighbours_apart_where_the_row_count_is_private(make):
    """Review RC-01: the utility warning quoted the exact n where n is private.

    Under add/remove (or client-level privacy) 57 rows gave no warning and 56
    rows warned "with 56 rows": the neighbours were told apart with certainty.
    The warnings of both fits must now be the same.
    """
    X = np.random.default_rng(0).uniform(-1, 1, size=(57, 2))
    fits = []
    for rows in (X, X[:56]):
        estimator = make().set_params(n_clusters=2, data_radius=10.0, random_state=0,
                                      accountant=BudgetAccountant(1e9, 1.0))
        fit_params = {}
        if estimator.get_params().get("privacy_unit") == "client":
            fit_params["client_ids"] = np.arange(len(rows))
        fits.append(_warnings_of(estimator, rows, **fit_params))
    assert fits[0] == fits[1]
    # Only the post-fit heavy-cell warning may name rows: it reads the released counts and
    # public values (epsilon, delta, d, k), not n.
    assert not any("rows" in message and "About" in message for _, message in fits[1]
                   if "released noisy counts" not in message)
    assert not any("56 rows" in message for _, message in fits[1])


def test_rows_named_by_the_warning_are_enough():
    X = np.random.default_rng(0).normal(size=(60, 3))
    with pytest.warns(UtilityWarning, match=r"About (\d+) rows") as record:
        PrivateStableKMeans(data_radius=5.0, accountant=BudgetAccountant(), random_state=0).fit(X)
    noise, grid = [int(re.search(r"About (\d+) rows", str(w.message)).group(1))
                   for w in record[:2]]
    assert noise == 278  # ceil(2 * 8 * sqrt(3) / 0.1)
    assert grid == 4608  # 8 clusters of 2 x 288 rows, the grid's heavy-cell threshold
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*noise of each released centre",
                                category=UtilityWarning)
        PrivateStableKMeans()._warn_if_noise_dominates(noise, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UtilityWarning)
        PrivateStableKMeans()._warn_if_noise_dominates(grid, 3)


@pytest.mark.parametrize("data_radius", [None, 30.0])
def test_federated_without_server_data_says_what_initialized_and_warns_once(data_radius, easy):
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        est = FederatedPrivateKMeans(n_clusters=4, data_radius=data_radius, accountant=BudgetAccountant(),
                                     random_state=0).fit(easy)
    assert est.init_ == "sphere_packing"
    assert sum("no X_server was given" in str(w.message) for w in record) == 1


def test_stable_initializer_fallback_is_reported_as_status_fallback():
    """One meaning of status_: a failed initializer test whose reserved share released is 'fallback'."""
    X = np.random.default_rng(0).uniform(-10, 10, size=(20_000, 2))  # no clusters: the k-tuple test fails
    with pytest.warns(UserWarning, match="fallback_grid|grid initializer"):
        est = PrivateStableKMeans(2, initializer=KTupleClusterer(method="noisy_centers"), data_radius=20.0,
                                  accountant=BudgetAccountant(), random_state=0).fit(X)
    assert est.initializer_status_ == "fallback_grid" and est.status_ == "fallback"
    assert est.cluster_centers_.shape == (2, 2)
