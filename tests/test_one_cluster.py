"""n_clusters=1 through skdpcluster.averaging (issue #14): a private mean or 1-median."""

import warnings

import numpy as np
import pytest

from skdpcluster import (
    BudgetAccountant,
    KTupleClusterer,
    PrivateHighDimKMeans,
    PrivateHighDimKMedian,
    PrivateStableKMeans,
    PrivateStableKMedian,
    SampleAggregateStableKMeans,
)
from skdpcluster.exceptions import UtilityWarning
from skdpcluster.mechanisms import analytic_gaussian_sigma

RADIUS = 20.0
N_ROWS, LOC = 50_000, 3.0
MEANS = [KTupleClusterer, PrivateStableKMeans, SampleAggregateStableKMeans, PrivateHighDimKMeans]
MEDIANS = [PrivateStableKMedian, PrivateHighDimKMedian]


@pytest.fixture(scope="module")
def blob():
    return np.random.default_rng(0).normal(loc=LOC, size=(N_ROWS, 2))


def _fit(Estimator, X, **params):
    accountant = BudgetAccountant()
    params = {"data_radius": RADIUS, "random_state": 0, **params}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no initializer warning: the old path did not run
        est = Estimator(n_clusters=1, accountant=accountant, **params).fit(X)
    return est, accountant


def _mean_band(event, n_rows, radius):
    r"""Five noise scales per axis of Proposition 2.9, at the widest segment the public grid allows.

    The Gaussian step of every axis has :math:`\sigma` = analytic calibration
    at (epsilon_axis/2, delta_axis) of the replace-one sensitivity
    :math:`(b - a)/n \le (2\Lambda + 4 r_{min})/n`; clipping moves only the
    extreme rows of a Gaussian blob, whose effect is far below that.
    """
    axis = event.details["axis"]
    width = 2.0 * radius * (1 + 2e-4)
    sigma = analytic_gaussian_sigma(width / n_rows, axis["epsilon_gaussian"],
                                    axis["delta_gaussian"])
    return 5.0 * sigma * np.sqrt(event.details["n_axes"])


@pytest.mark.parametrize("Estimator", MEANS, ids=lambda E: E.__name__)
def test_one_cluster_is_the_private_average(Estimator, blob):
    est, accountant = _fit(Estimator, blob)
    assert est.status_ == "success" and est.cluster_centers_.shape == (1, 2)
    assert [e.label for e in est.privacy_ledger_] == [f"{Estimator.__name__}/private_average"]
    band = _mean_band(est.privacy_ledger_[0], N_ROWS, RADIUS)
    assert band < 0.1  # the band is informative: 1/30 of the blob's standard deviation
    assert np.linalg.norm(est.cluster_centers_[0] - blob.mean(axis=0)) < band
    assert accountant.total()[0] <= 1.0 and accountant.total()[1] <= 1e-6
    assert est.privacy_spent_["epsilon"] == pytest.approx(1.0)
    assert np.array_equal(est.labels_, np.zeros(N_ROWS)) and est.score(blob) < 0


@pytest.mark.parametrize("Estimator", MEDIANS, ids=lambda E: E.__name__)
def test_one_cluster_is_the_private_one_median(Estimator, blob):
    est, accountant = _fit(Estimator, blob)
    assert est.status_ == "success"
    assert [e.label for e in est.privacy_ledger_] == [f"{Estimator.__name__}/private_one_median"]
    event = est.privacy_ledger_[0]
    # Per step the noise of the mean gradient is sigma_g / n (sigma_g = 2 / sqrt(2 rho_step)), far
    # below the optimisation error of T = 50 suffix-averaged steps from the ball's centre; the
    # geometric median of a symmetric blob is its centre, LOC.
    sigma_gradient = 2.0 / np.sqrt(2.0 * event.details["rho_per_step"]) / N_ROWS
    assert sigma_gradient < 0.01
    assert np.linalg.norm(est.cluster_centers_[0] - LOC) < 0.1
    assert accountant.total() == pytest.approx((1.0, 1e-6))


@pytest.mark.parametrize("Estimator", MEANS[1:] + MEDIANS, ids=lambda E: E.__name__)
def test_one_cluster_with_a_private_bound(Estimator, blob):
    """data_radius=None: the bound is released first, then the average on the rest."""
    est, accountant = _fit(Estimator, blob, data_radius=None)
    labels = [e.label for e in est.privacy_ledger_]
    assert labels[:2] == ["bounds/center", "bounds/radius"] and len(labels) == 3
    assert labels[2].startswith(f"{Estimator.__name__}/private_")
    assert np.linalg.norm(est.cluster_centers_[0] - LOC) < 0.1
    assert accountant.total()[0] <= 1.0 + 1e-9 and accountant.total()[1] <= 1e-6


def test_one_cluster_under_add_remove_divides_by_a_noisy_count(blob):
    est, accountant = _fit(PrivateStableKMeans, blob, neighbouring="add_remove")
    assert [e.mechanism for e in est.privacy_ledger_] == ["private_count", "private_average"]
    assert est.privacy_ledger_[0].epsilon == pytest.approx(0.1)
    assert est.privacy_ledger_[1].neighbouring == "add_remove"
    assert np.linalg.norm(est.cluster_centers_[0] - blob.mean(axis=0)) < 0.1
    assert accountant.total()[0] <= 1.0


def test_one_cluster_stable_attributes_and_quality(blob):
    est, _ = _fit(PrivateStableKMeans, blob)
    assert est.selected_ == "private_mean" and est.initial_centers_ is None
    assert est.quality_["test"] is None and est.quality_["selected"] == "private_mean"
    est = PrivateStableKMeans(n_clusters=2, data_radius=RADIUS, random_state=0,
                              accountant=BudgetAccountant()).fit(blob)
    assert est.core_noisy_counts_ is not None
    est.set_params(n_clusters=1, random_state=1).fit(blob)  # nothing of the k = 2 fit survives
    assert est.core_noisy_counts_ is None and est.budget_ is None


def test_highdim_one_cluster_refuses_delta_zero_before_spending(blob):
    accountant = BudgetAccountant()
    with pytest.raises(ValueError, match="delta=0: PrivateHighDimKMeans\\(n_clusters=1\\)"):
        PrivateHighDimKMeans(n_clusters=1, delta=0, data_radius=RADIUS,
                             accountant=accountant).fit(blob)
    assert accountant.ledger == []


@pytest.mark.parametrize("Estimator", [PrivateStableKMeans, PrivateStableKMedian],
                         ids=lambda E: E.__name__)
def test_one_cluster_still_refuses_a_wrong_initializer_before_spending(Estimator, blob):
    """Review finding: with k = 1 the initializer was never validated, so public centres of the
    wrong shape were silently accepted; the contract asks for a clear error before spending."""
    accountant = BudgetAccountant()
    with pytest.raises(ValueError, match="initial centres must be .* got shape \\(5, 3\\)"):
        Estimator(n_clusters=1, initializer=np.zeros((5, 3)), data_radius=RADIUS,
                  accountant=accountant).fit(blob[:, :3])
    assert accountant.ledger == []


@pytest.mark.parametrize("epsilon", [1.6e-307, 3e-307, 1e-306])
def test_a_tiny_epsilon_fits_one_cluster_without_an_overflow(epsilon):
    """Review R11 L2: the bounding segment's threshold t = ceil((8/eps) log(...)) overflowed
    (math.ceil(inf)) inside the private step, a charged failure; and the pre-spend utility
    warning's row count overflowed before it (OverflowError, not a warning). Now every value is
    among the t extremes, and the warning says no float64 count of rows suffices."""
    X = np.random.default_rng(0).normal(size=(600, 2)) / 20.0
    accountant = BudgetAccountant()
    with pytest.warns(UtilityWarning, match="rows"):
        est = KTupleClusterer(n_clusters=1, epsilon=epsilon, delta=1e-6, data_radius=10.0,
                              random_state=0, accountant=accountant).fit(X)
    assert est.status_ == "success" and est.privacy_spent_["proven"]
    assert [entry.epsilon for entry in accountant.ledger] == [epsilon]
