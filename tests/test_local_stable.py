"""LocalPrivateStableKMeans: rounds, per-user accounting, validation and utility."""

import math
import warnings

import numpy as np
import pytest
from sklearn.metrics import adjusted_rand_score

from skdpcluster import BudgetAccountant, NotSeparatedWarning, UtilityWarning
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.local import LocalPrivateStableKMeans
from skdpcluster.local._ldp import AverageRound
from skdpcluster.local._stable import ROUNDS, split_users
from skdpcluster.mechanisms import analytic_gaussian_sigma


@pytest.fixture(scope="module")
def easy():
    return make_separated_mixture(50_000, n_clusters=2, n_features=2, separation=20,
                                  random_state=0)


def _fit(X, **params):
    params = {"n_clusters": 2, "epsilon": 4.0, "data_radius": 30.0, "random_state": 0,
              "accountant": BudgetAccountant(), **params}
    return LocalPrivateStableKMeans(**params).fit(X)


def test_three_rounds_each_user_in_exactly_one(easy):
    est = _fit(easy[0])
    assert est.n_rounds_ == 3
    assert [r["name"] for r in est.rounds_] == ["init", "core", "select"]
    assert sum(r["n_users"] for r in est.rounds_) == len(easy[0])
    assert [r["n_users"] for r in est.rounds_] == [22_500, 22_500, 5_000]
    for entry in est.rounds_:  # one user's single report is exactly the per-user budget
        assert entry["epsilon"] == pytest.approx(4.0) and entry["delta"] == pytest.approx(1e-6)


def test_split_users_is_a_partition():
    groups = split_users(1001, {"init": 0.45, "core": 0.45, "select": 0.10},
                         np.random.default_rng(0))
    members = np.concatenate([groups[name] for name in ROUNDS])
    assert np.array_equal(np.sort(members), np.arange(1001))


def test_per_user_guarantee_is_charged_once(easy):
    accountant = BudgetAccountant()
    est = _fit(easy[0], epsilon=2.0, delta=1e-7, accountant=accountant)
    assert est.privacy_spent_ == {"epsilon": 2.0, "delta": 1e-7, "proven": True,
                                  "model": "local, per user"}
    assert accountant.total() == (2.0, 1e-7) and len(accountant.ledger) == 1
    last = est.privacy_ledger_[-1]
    assert last.mechanism == "local_per_user" and last.details["model"] == "local model, per user"
    assert all(e.cost() == (0.0, 0.0) for e in est.privacy_ledger_[:-1])
    per_round = {}
    for event in est.privacy_ledger_[:-1]:
        per_round.setdefault(event.details["round"], []).append(event.details["per_user_epsilon"])
    assert {name: math.fsum(v) for name, v in per_round.items()} == pytest.approx(
        {"init": 2.0, "core": 2.0, "select": 2.0})


def test_recovers_separated_clusters(easy):
    X, y = easy
    est = _fit(X)
    assert est.selected_ == "core" and not est.core_fallback_.any()
    assert est.status_ == "success" and est.quality_ == {
        "selected": "core", "n_heavy_cells": 4, "heavy_cells_short": False, "n_core_accepted": 2}
    assert adjusted_rand_score(y, est.predict(X)) == 1.0
    # Core-round noise of a centre: r * sigma * sqrt(n_core) / N per coordinate, with
    # r = 40 / 3, sigma the per-user block noise at (epsilon/2, delta) and N = n_core / 2;
    # 4 standard deviations in each of the 2 coordinates.
    sigma = analytic_gaussian_sigma(2.0, 2.0, 1e-6)
    n_core = est.rounds_[1]["n_users"]
    tolerance = 4 * math.sqrt(2) * (40 / 3) * sigma * math.sqrt(n_core) / (n_core / 2)
    truth = np.array([[-20.0, 0.0], [20.0, 0.0]])
    assert np.max(np.linalg.norm(est.cluster_centers_ - truth, axis=1)) < tolerance


@pytest.mark.parametrize("params, match", [
    ({"data_radius": None}, "needs a public data_radius"),
    ({"groups": {"init": 0.5, "core": 0.5}}, "groups must map each of"),
    ({"groups": {"init": 0.5, "core": 0.6, "select": -0.1}}, "groups must map each of"),
    ({"n_clusters": 0}, "n_clusters"),
])
def test_bad_parameters_raise_before_spending(easy, params, match):
    accountant = BudgetAccountant()
    with pytest.raises(ValueError, match=match):
        _fit(easy[0][:1000], accountant=accountant, **params)
    assert accountant.ledger == []


@pytest.mark.filterwarnings("ignore::skdpcluster.UtilityWarning")  # 100 rows: public estimate
@pytest.mark.parametrize("params, n_features, match", [
    ({"grid_size": 200}, 3, r"grid_size=200: .*cap of 262144 floats.*; use grid_size <= 44"),
    ({"grid_size": 2}, 40_000, r"grid_size=2: .*no grid fits 40000 features"),
    ({"n_clusters": 300, "grid_size": 2}, 1000, r"n_clusters=300: .*use n_clusters <= 262"),
], ids=["grid-d3", "grid-too-many-features", "core-balls"])
def test_oversized_reports_are_refused_before_any_randomness(params, n_features, match):
    # Audit RB-03: grid_size=200 in d = 3 (24e6 floats per init report, batches of 64) ended in
    # a MemoryError inside the private step, a charged and unproven failure.
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    accountant = BudgetAccountant()
    X = np.random.default_rng(1).normal(size=(100, n_features))
    with pytest.raises(ValueError, match=match):
        _fit(X, accountant=accountant, random_state=rng, data_radius=5.0, **params)
    assert accountant.ledger == [] and rng.bit_generator.state == state


def test_a_round_without_users_does_not_crash():
    X = np.array([[0.0, 0.0], [1.0, 1.0]])  # floor(0.45 * 2) = 0 users in init and core
    with pytest.warns(NotSeparatedWarning, match="from 0 heavy grid cells"):
        est = _fit(X)
    # No core user, so no core region is accepted: the release is B, filler points (RB-05).
    assert est.status_ == "fallback" and est.cluster_centers_.shape == (2, 2)
    assert [r["n_users"] for r in est.rounds_] == [0, 0, 2]


# -- honest answers (audit RB-05) -------------------------------------------------------------


@pytest.mark.parametrize("epsilon, n_samples, warns", [
    (1.0, 10**4, True), (1.0, 10**5, True), (1.0, 10**6, True),  # cost 8.4, 9.4, 7.9 x optimum
    (4.0, 10**5, True),  # 3.1 x
    (4.0, 10**6, False), (4.0, 4 * 10**6, False), (1.0, 16 * 10**6, False),  # 1.06, 1.014; -
])
def test_utility_warning_from_the_real_per_user_noise(epsilon, n_samples, warns):
    """The pre-spend warning on the local benchmark's configurations (k = d = 4, Lambda = 20).

    ``benchmarks/results/local_curve.csv`` gives the costs in the comments. The
    fraction was 2 sqrt(kd/n)/epsilon (0.080 and 0.025 at n = 1e4, 1e5,
    epsilon = 1: silent); it is now k sigma sqrt(d / n_init), the noise of a
    cluster's coreset point, with sigma the block vector's real noise.
    """
    est = LocalPrivateStableKMeans(4, epsilon=epsilon, data_radius=20.0)
    sigma = analytic_gaussian_sigma(2.0, epsilon / 2, 1e-6)
    n_init = math.floor(0.45 * n_samples)
    assert est._noise_fraction(n_samples, 4) == pytest.approx(
        4 * sigma * math.sqrt(4 / n_init), rel=1e-12)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        est._warn_if_noise_dominates(n_samples, 4)
    assert any(issubclass(w.category, UtilityWarning) for w in record) is warns


def test_a_fit_whose_core_round_accepts_nothing_is_a_fallback():
    """n = 1e5 at epsilon = 1 (the local benchmark's data): 0 heavy cells, every core region
    fell back, cost 13 x the optimum. It said status_='success' with a UserWarning only."""
    X, _ = make_separated_mixture(10**5, n_clusters=4, n_features=4, separation=10 / 2**0.5,
                                  random_state=0)
    with pytest.warns(UtilityWarning, match="about 61% of the data bound"), \
            pytest.warns(NotSeparatedWarning, match="accepted none of the 4 regions.*status_="
                                                    "'fallback'"):
        est = _fit(X, n_clusters=4, epsilon=1.0, data_radius=20.0)
    assert est.core_fallback_.all() and est.status_ == "fallback"
    assert est.quality_ == {"selected": "core", "n_heavy_cells": 0, "heavy_cells_short": True,
                            "n_core_accepted": 0}
    assert {tuple(c) for c in est.cluster_centers_} == {tuple(c) for c in est.initial_centers_}


def test_too_few_heavy_cells_is_a_utility_warning_after_the_fit():
    """Review R2-5: the grid's plain UserWarning was given inside the init round, so under
    ``-W error::UserWarning`` the fit became a charged, unproven failure. It is now a
    UtilityWarning after the fit, from the released count, when the fit is not a fallback
    (whose own warning names the heavy cells)."""
    X, _ = make_separated_mixture(2 * 10**5, n_clusters=4, n_features=4, separation=10 / 2**0.5,
                                  random_state=0)
    accountant = BudgetAccountant()
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        warnings.filterwarnings("error", message="GridInitializer", category=UserWarning)
        est = _fit(X, n_clusters=5, epsilon=4.0, data_radius=20.0, random_state=0,
                   accountant=accountant)
    assert est.status_ == "success" and est.privacy_spent_["proven"] is True
    assert est.quality_["n_heavy_cells"] == 4 and est.quality_["heavy_cells_short"] is True
    (short,) = [w for w in record if "heavy grid cells" in str(w.message)]
    assert short.category is UtilityWarning
    assert "found 4 heavy grid cells for n_clusters=5" in str(short.message)
    assert len(accountant.ledger) == 1


def test_one_cluster_whose_count_fails_is_a_fallback():
    X = np.random.default_rng(0).normal(size=(200, 2))
    with pytest.warns(NotSeparatedWarning, match="the released centre is data_center"):
        est = _fit(X, n_clusters=1, epsilon=1.0, data_radius=5.0, data_center=[1.0, 2.0])
    assert est.status_ == "fallback" and np.array_equal(est.cluster_centers_, [[1.0, 2.0]])
    assert est.quality_["n_core_accepted"] == 0


def test_one_cluster_is_a_local_mean():
    """Issue #14: k = 1 is one LDP-AVG round of all users (it ran the three k-means rounds)."""
    rng = np.random.default_rng(1)
    X = rng.normal(3.0, 1.0, size=(100_000, 2))
    accountant = BudgetAccountant()
    est = _fit(X, n_clusters=1, data_radius=10.0, accountant=accountant)  # epsilon = 4
    assert est.status_ == "success" and est.selected_ == "mean" and est.n_rounds_ == 1
    assert est.quality_["n_core_accepted"] == 1
    assert est.rounds_ == [{"name": "mean", "n_users": len(X), "epsilon": 4.0, "delta": 1e-6}]
    assert [e.label for e in est.privacy_ledger_] == [
        "local/mean/block_vector", "local/mean/region_index", "local/per_user_guarantee"]
    # Each user's block vector carries N(0, sigma^2) per entry (sigma: analytic calibration of
    # L2 sensitivity 2 at (eps/2, delta)), in units of Lambda: the mean's noise per coordinate
    # is Lambda sigma sqrt(n) / n; the noisy count is within 1.1 n (its sd is ~1% of n here).
    sigma = AverageRound("mean", None, 4.0, 1e-6, np.zeros(2), 10.0).sigma
    band = 5.0 * 10.0 * sigma * math.sqrt(2 / len(X)) * 1.1
    assert band < 1.2
    assert np.linalg.norm(est.cluster_centers_[0] - X.mean(axis=0)) < band
    assert accountant.total() == pytest.approx((4.0, 1e-6))


@pytest.mark.parametrize("n_clusters", [1, 2])
def test_an_epsilon_below_the_index_reports_resolution_is_refused_before_any_randomness(n_clusters):
    # randomized_response refuses an epsilon below about m 2^-47 (review RB-06); inside the
    # fit that came after the block vectors' noise: a charged status_="failure".
    X = np.random.default_rng(0).normal(size=(2000, 2))
    accountant = BudgetAccountant()
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match="epsilon=1e-14 is too small for the region-index"):
        LocalPrivateStableKMeans(n_clusters, epsilon=1e-14, data_radius=5.0, random_state=rng,
                                 accountant=accountant).fit(X)
    assert accountant.ledger == [] and rng.bit_generator.state == state


@pytest.mark.parametrize("epsilon", [1e-16, 1e-300])
def test_an_epsilon_below_the_resolution_is_refused_by_name_before_the_utility_estimate(epsilon):
    # Re-review V2: the utility estimate ran first and divided by p - q = 0 (ZeroDivisionError).
    X = np.random.default_rng(0).normal(size=(2000, 2))
    accountant = BudgetAccountant()
    with pytest.raises(ValueError, match="is too small for the region-index reports"):
        LocalPrivateStableKMeans(2, epsilon=epsilon, data_radius=5.0, random_state=0,
                                 accountant=accountant).fit(X)
    assert accountant.ledger == []
