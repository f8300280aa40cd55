"""Issue #14: every estimator answers honestly (friction, one cluster, utility warnings, status)."""

import numpy as np
import pytest

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
