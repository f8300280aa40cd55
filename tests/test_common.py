"""scikit-learn's common checks and skdpcluster's DP checks, over every public estimator.

Every estimator appears three times below: at default construction and in a
tuned configuration for scikit-learn's checks (tiny unstructured data: a huge
epsilon so that a handful of tuples is admissible), and in a realistic
configuration with data on which it releases, for the DP checks. Expected failures of scikit-learn's checks, with their reasons,
live in one place: ``skdpcluster.utils.estimator_checks.EXPECTED_FAILED_CHECKS``.
"""

import joblib
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_blobs
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import FunctionTransformer, StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from skdpcluster import (
    BudgetAccountant,
    FederatedPrivateKMeans,
    KTupleClusterer,
    PrivateGaussianMixture,
    PrivateHighDimKMeans,
    PrivateHighDimKMedian,
    PrivateStableKMeans,
    PrivateStableKMedian,
    SampleAggregateStableKMeans,
)
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.ktuple import min_tuples
from skdpcluster.local import LocalPrivateStableKMeans
from skdpcluster.utils.estimator_checks import dp_checks, expected_failed_checks

#: Default construction, as a new user tries it (issue #14).
DEFAULT_INSTANCES = [
    KTupleClusterer(), PrivateGaussianMixture(), FederatedPrivateKMeans(), PrivateStableKMeans(),
    PrivateStableKMedian(), PrivateHighDimKMeans(), PrivateHighDimKMedian(),
    LocalPrivateStableKMeans(), SampleAggregateStableKMeans(),
]

# The tuned k-tuple instances reserve an explicit fallback share: on the checks' unstructured
# data their tuple path can run (so "auto" reserves nothing) but its private test fails.
SKLEARN_CHECK_INSTANCES = DEFAULT_INSTANCES + [
    KTupleClusterer(n_clusters=2, method="noisy_centers", epsilon=1e5, delta=0.1,
                    fallback_share=0.1, random_state=0),
    KTupleClusterer(n_clusters=2, epsilon=20.0, delta=0.1, data_radius=100.0, fallback_share=0.1,
                    random_state=0),
    KTupleClusterer(n_clusters=2, method="averages", epsilon=300.0, delta=0.1, data_radius=100.0,
                    fallback_share=0.1, random_state=0),
    PrivateGaussianMixture(2, epsilon=300.0, delta=0.1, fallback_share=0.1, random_state=0),
    FederatedPrivateKMeans(n_clusters=2, epsilon=1e4, data_radius=3.0, random_state=0),
    PrivateStableKMeans(n_clusters=2, data_radius=10.0, random_state=0),
    PrivateStableKMedian(n_clusters=2, data_radius=10.0, random_state=0),
    PrivateHighDimKMeans(n_clusters=2, data_radius=10.0, random_state=0),
    PrivateHighDimKMedian(n_clusters=2, data_radius=10.0, random_state=0),
    LocalPrivateStableKMeans(n_clusters=2, data_radius=10.0, random_state=0),
    SampleAggregateStableKMeans(n_clusters=2, data_radius=10.0, random_state=0),
]

# fit(X) without server data uses FedDP's documented SpherePacking fallback, which warns.
pytestmark = pytest.mark.filterwarnings("ignore:.*no X_server was given")


def _easy(n_samples, n_clusters=2, n_features=1, separation=512):
    return make_separated_mixture(n_samples, n_clusters=n_clusters, n_features=n_features,
                                  separation=separation, random_state=0)[0]


DP_CHECK_CASES = {
    "KTupleClusterer-noisy_centers": (
        KTupleClusterer(n_clusters=2, method="noisy_centers"),
        lambda: _easy(min_tuples(1.0, 1e-6, 0.05) * 80)),
    "KTupleClusterer-located": (
        KTupleClusterer(n_clusters=2, data_radius=600.0), lambda: _easy(20_000)),
    "KTupleClusterer-averages": (
        KTupleClusterer(n_clusters=2, method="averages", epsilon=60.0, n_tuples=4000, data_radius=600.0),
        lambda: _easy(4000 * 40)),
    "PrivateGaussianMixture": (PrivateGaussianMixture(2), lambda: _easy(80_000, n_features=2)),
    "FederatedPrivateKMeans": (FederatedPrivateKMeans(n_clusters=2, data_radius=600.0),
                               lambda: _easy(20_000)),
    # The stable benchmark's data: k = 4, d = 4, closest means 10 standard deviations apart.
    "PrivateStableKMeans": (PrivateStableKMeans(n_clusters=4, data_radius=20.0),
                            lambda: _easy(50_000, n_clusters=4, n_features=4, separation=10 / 2**0.5)),
    "PrivateStableKMedian": (PrivateStableKMedian(n_clusters=4, data_radius=20.0),
                             lambda: _easy(50_000, n_clusters=4, n_features=4, separation=10 / 2**0.5)),
    "PrivateHighDimKMeans": (PrivateHighDimKMeans(n_clusters=4, data_radius=20.0),
                             lambda: _easy(20_000, n_clusters=4, n_features=8, separation=10.0)),
    "PrivateHighDimKMedian": (PrivateHighDimKMedian(n_clusters=4, data_radius=20.0),
                              lambda: _easy(20_000, n_clusters=4, n_features=8, separation=10.0)),
    "SampleAggregateStableKMeans": (
        SampleAggregateStableKMeans(n_clusters=2, epsilon=4.0, data_radius=600.0),
        lambda: _easy(40_000)),
    # The local model needs many more rows (noise of order sqrt(n) per round).
    "LocalPrivateStableKMeans": (
        LocalPrivateStableKMeans(n_clusters=2, epsilon=4.0, data_radius=600.0),
        lambda: _easy(100_000)),
}


@pytest.mark.filterwarnings("ignore::skdpcluster.exceptions.NotSeparatedWarning")
@pytest.mark.filterwarnings("ignore:GridInitializer")  # tiny check data: few heavy grid cells
@parametrize_with_checks(SKLEARN_CHECK_INSTANCES, expected_failed_checks=expected_failed_checks)
def test_sklearn_compatible_estimator(estimator, check):
    check(estimator)


@pytest.fixture(scope="module")
def case_data():
    cache = {}

    def get(case):
        if case not in cache:
            cache[case] = DP_CHECK_CASES[case][1]()
        return cache[case]

    return get


@pytest.mark.parametrize("check", [c for c, _ in dp_checks()], ids=[n for _, n in dp_checks()])
@pytest.mark.parametrize("case", sorted(DP_CHECK_CASES))
def test_dp_contract(case, check, case_data):
    check(DP_CHECK_CASES[case][0], case_data(case))


def _fresh(case, **params):
    return clone(DP_CHECK_CASES[case][0]).set_params(random_state=0, accountant=BudgetAccountant(),
                                                      **params)


@pytest.mark.parametrize("case", sorted(DP_CHECK_CASES))
def test_pipeline_with_scaler_and_pandas_output(case, case_data):
    pd = pytest.importorskip("pandas")
    X = case_data(case)
    frame = pd.DataFrame(X, columns=[f"f{i}" for i in range(X.shape[1])])
    # A scaler with fixed, public parameters keeps the data bounds public.
    scaler = FunctionTransformer(lambda Z: Z / 10.0, feature_names_out="one-to-one")
    pipe = make_pipeline(scaler, _fresh(case)).set_output(transform="pandas").fit(frame)
    estimator = pipe[-1]
    if hasattr(estimator, "transform"):
        names = pipe.get_feature_names_out()
        assert list(names) == [f"{type(estimator).__name__.lower()}{i}" for i in range(estimator.n_clusters)]
        out = pipe.transform(frame.iloc[:20])
        assert isinstance(out, pd.DataFrame) and list(out.columns) == list(names)
    assert np.array_equal(pipe.predict(frame.iloc[:20]), estimator.predict(frame.iloc[:20] / 10.0))
    assert list(estimator.feature_names_in_) == list(frame.columns)


@pytest.mark.parametrize("case", sorted(DP_CHECK_CASES))
def test_joblib_dump_round_trip(case, case_data, tmp_path):
    X = case_data(case)
    accountant = BudgetAccountant()
    fitted = _fresh(case).set_params(accountant=accountant).fit(X)
    joblib.dump(fitted, tmp_path / "model.joblib")
    restored = joblib.load(tmp_path / "model.joblib")
    assert np.array_equal(fitted.predict(X[:100]), restored.predict(X[:100]))
    assert restored.privacy_spent_ == fitted.privacy_spent_ and len(accountant.ledger) == 1


@pytest.mark.parametrize("case", sorted(DP_CHECK_CASES))
def test_dask_backend_gives_the_same_fit(case, case_data):
    distributed = pytest.importorskip("distributed")
    if "n_jobs" not in DP_CHECK_CASES[case][0].get_params():
        pytest.skip("no parallel path (the local-model simulation is one vectorised pass)")
    X = case_data(case)
    expected = _fresh(case, n_jobs=1).fit(X)
    with distributed.Client(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=":0"):
        with joblib.parallel_config(backend="dask"):
            got = _fresh(case, n_jobs=2).fit(X)
    for name in ("cluster_centers_", "means_", "covariances_", "weights_"):
        if getattr(expected, name, None) is not None:
            assert np.array_equal(getattr(expected, name), getattr(got, name)), name


# Some of scikit-learn's checks never seed the estimator, so the default instances above draw
# fresh entropy there: a private step that raises for one noise draw in a hundred makes CI
# fail at random (it did: PrivateGaussianMixture on the 20-row data, fixed in 82dfa53). This
# sweep looks for such draws deliberately, on the checks' own kinds of data; the conftest's
# safety-net fixture fails the test if a private step raised.
_CHECK_LIKE_DATA = {
    "uniform_20x3": 3 * np.random.RandomState(0).uniform(size=(20, 3)),
    "standardized_blobs_30": StandardScaler().fit_transform(
        make_blobs(n_samples=30, centers=3, n_features=2, random_state=0)[0]),
    "tight_blobs_150": make_blobs(n_samples=150, centers=3, n_features=2, cluster_std=0.1,
                                  random_state=0)[0],
    "integers_40x2": np.random.RandomState(0).randint(-5, 5, size=(40, 2)).astype(float),
}


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")  # tiny data: bound, utility and grid warnings
@pytest.mark.parametrize("data", sorted(_CHECK_LIKE_DATA))
@pytest.mark.parametrize("estimator", DEFAULT_INSTANCES, ids=lambda e: type(e).__name__)
def test_default_fits_on_check_data_never_raise_inside_a_private_step(estimator, data):
    X = _CHECK_LIKE_DATA[data]
    estimator = clone(estimator)
    if isinstance(estimator, LocalPrivateStableKMeans):  # refuses to run without a public ball
        estimator.set_params(data_radius=float(np.abs(X).max() * np.sqrt(X.shape[1])))
    for seed in range(100):
        fitted = clone(estimator).set_params(random_state=seed).fit(X)
        assert fitted.status_ in ("success", "fallback", "failure")
