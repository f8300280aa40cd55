"""scikit-learn's common checks and skdpcluster's DP checks, over every public estimator.

Every estimator appears twice below: a configuration for scikit-learn's checks
(tiny unstructured data: a huge epsilon so that a handful of tuples is
admissible) and a realistic configuration with data on which it releases, for
the DP checks. Expected failures of scikit-learn's checks, with their reasons,
live in one place: ``skdpcluster.utils.estimator_checks.EXPECTED_FAILED_CHECKS``.
"""

import pytest
from sklearn.utils.estimator_checks import parametrize_with_checks

from skdpcluster import KTupleClusterer
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.ktuple import min_tuples
from skdpcluster.utils.estimator_checks import dp_checks, expected_failed_checks

SKLEARN_CHECK_INSTANCES = [
    KTupleClusterer(n_clusters=2, epsilon=1e5, delta=0.1, random_state=0),
    KTupleClusterer(n_clusters=2, method="averages", epsilon=300.0, delta=0.1, data_radius=100.0,
                    random_state=0),
]


def _easy(n_samples, n_clusters=2, n_features=1, separation=512):
    return make_separated_mixture(n_samples, n_clusters=n_clusters, n_features=n_features,
                                  separation=separation, random_state=0)[0]


DP_CHECK_CASES = {
    "KTupleClusterer-noisy_centers": (
        KTupleClusterer(n_clusters=2), lambda: _easy(min_tuples(1.0, 1e-6, 0.05) * 80)),
    "KTupleClusterer-averages": (
        KTupleClusterer(n_clusters=2, method="averages", epsilon=60.0, n_tuples=4000, data_radius=600.0),
        lambda: _easy(4000 * 40)),
}


@pytest.mark.filterwarnings("ignore::skdpcluster.exceptions.NotSeparatedWarning")
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
