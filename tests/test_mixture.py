"""PrivateGaussianMixture: learning separated Gaussian mixtures privately (spec §9)."""

import json
import math
import warnings

import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.mixture import GaussianMixture

from skdpcluster import BudgetAccountant, mechanisms
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.exceptions import (
    BudgetExceededError,
    InsufficientDataError,
    NotSeparatedError,
    NotSeparatedWarning,
    PrivacyLeakWarning,
    UtilityWarning,
)
from skdpcluster.ktuple import min_tuples
from skdpcluster.mechanisms import analytic_gaussian_sigma
from skdpcluster.ktuple._framework import nearest_gaps as _nearest_gaps
from skdpcluster.mixture import _gaussian_mixture
from skdpcluster.mixture._gaussian_mixture import PrivateGaussianMixture, _FreshBudget
from skdpcluster.utils.estimator_checks import dp_checks

N_TUPLES = min_tuples(1.0, 1e-6, 0.05)  # 1963
BETA = 0.05
COVARIANCE_TYPES = ["full", "tied", "diag", "spherical"]


def _chi_radius(d, log_inverse_probability):
    """Laurent & Massart: ||N(0, I_d)|| exceeds this with probability <= exp(-x)."""
    x = log_inverse_probability
    return math.sqrt(d + 2 * math.sqrt(d * x) + 2 * x)


def _matched(estimate, truth):
    """Index of the nearest true mean of every released mean."""
    return np.argmin(np.linalg.norm(estimate[:, None] - truth[None], axis=-1), axis=1)


def _full(gm):
    """Released covariances as (k, d, d) matrices, whatever the covariance_type."""
    k, d = gm.means_.shape
    cov = np.asarray(gm.covariances_)
    return {
        "full": lambda: cov,
        "tied": lambda: np.broadcast_to(cov, (k, d, d)),
        "diag": lambda: cov[:, :, None] * np.eye(d),
        "spherical": lambda: cov[:, None, None] * np.eye(d),
    }[gm.covariance_type]()


def _mean_error_bound(gm, n_component, sigma):
    r"""High-probability bound on ||mu_hat_j - mu_j|| from spec §9.4 item 2 and §9.6.

    ``mu_hat - mu = (xbar - mu) + (learner - xbar)``:

    * sampling (§9.4 item 2, Laurent-Massart at beta/k):
      ``sigma * chi_radius(d, log(k/beta)) / sqrt(n_j)``;
    * the learner (§9.6, CoinPress mean steps with b = 0.01): starting from a
      radius of at most D_j / 2 (the refinement only shrinks it), each step
      clips to ``r + g1`` (``g1 = chi_radius(d, log(n/b))``) and adds noise of
      sd ``(r + g1) / (n sqrt(2 rho_step))`` (units of sigma_max), then
      ``r = g2 sqrt(1/n + sd^2)``; the final noise has norm at most
      ``sigma_max * sd * chi_radius(d, log(k/beta))``. The divisor is the
      noisy count, taken here as at least n_j / 2.

    The sum is doubled to absorb the count's scaling of the last centre's
    offset (``|n/n_hat - 1| r sigma_max``, below 1e-3 of the rest here).
    """
    k, d = gm.means_.shape
    rho_step = _FreshBudget.for_target(gm.epsilon, gm.delta).rho_learner / 2 / 3
    gaps = np.linalg.norm(gm.tuple_centers_[:, None] - gm.tuple_centers_[None], axis=-1)
    np.fill_diagonal(gaps, np.inf)
    g2, g_final = _chi_radius(d, math.log(100)), _chi_radius(d, math.log(k / BETA))
    bounds = []
    for j, n_j in enumerate(np.broadcast_to(n_component, k)):
        n_public = n_j / 2
        g1 = _chi_radius(d, math.log(2 * n_j / 0.01))  # grows with the count: its upper end
        radius, sd = gaps[j].min() / 2 / gm.sigma_max_[j], None
        for _ in range(3):
            sd = (radius + g1) / (n_public * math.sqrt(2 * rho_step))
            radius = g2 * math.sqrt(1 / n_public + sd**2)
        noise = gm.sigma_max_[j] * sd * g_final
        bounds.append(2 * (sigma * g_final / math.sqrt(n_j) + noise))
    return np.array(bounds)


def _gaussian_kl(mean_p, cov_p, mean_q, cov_q):
    """KL(N(mean_p, cov_p) || N(mean_q, cov_q))."""
    inverse = np.linalg.inv(cov_q)
    diff = mean_q - mean_p
    return 0.5 * (np.trace(inverse @ cov_p) + diff @ inverse @ diff - len(mean_p)
                  + np.linalg.slogdet(cov_q)[1] - np.linalg.slogdet(cov_p)[1])


@pytest.fixture(scope="module")
def easy():
    """Two unit Gaussians at +-512 e_1 in d = 2 (spec §10.1 layout), weights 0.3 / 0.7."""
    X, y, centers = make_separated_mixture(200_000, n_clusters=2, n_features=2, separation=512,
                                           weights=[0.3, 0.7], random_state=0, return_centers=True)
    return X, y, centers


@pytest.fixture(scope="module")
def small():
    """80 000 rows: two unit Gaussians at +-512 e_1 in d = 2, equal weights, 20 rows per block."""
    return make_separated_mixture(80_000, n_clusters=2, n_features=2, separation=512,
                                  random_state=1)[0]


@pytest.fixture(scope="module")
def correlated():
    """Two correlated Gaussians at +-512 e_1 in d = 2, equal weights."""
    rng = np.random.default_rng(5)
    y = rng.integers(2, size=200_000)
    means = np.array([[512.0, 0.0], [-512.0, 0.0]])
    covariances = np.array([[[4.0, 1.5], [1.5, 1.0]], [[1.0, -0.8], [-0.8, 2.0]]])
    factors = np.linalg.cholesky(covariances)[y]
    noise = np.einsum("nij,nj->ni", factors, rng.standard_normal((y.size, 2)))
    return means[y] + noise, y, means, covariances


@pytest.fixture(scope="module")
def fitted(easy):
    acc = BudgetAccountant(epsilon=1.0, delta=1e-6)
    return PrivateGaussianMixture(n_components=2, accountant=acc, random_state=0).fit(easy[0]), acc


def test_recovers_means_and_weights_within_the_spec_bounds(easy, fitted):
    X, y, centers = easy
    gm, _ = fitted
    assert gm.status_ == "success" and gm.converged_
    match = _matched(gm.means_, centers)
    assert sorted(match) == [0, 1]
    true_weights = np.array([0.3, 0.7])[match]
    n_fresh_per_component = gm.n_fresh_ * true_weights
    errors = np.linalg.norm(gm.means_ - centers[match], axis=1)
    assert np.all(errors <= _mean_error_bound(gm, n_fresh_per_component, sigma=1.0))
    # Weights (§9.4 item 8): multinomial sampling plus the count noise 1/sqrt(2 rho) per count.
    count_sd = 1 / math.sqrt(2 * _FreshBudget.for_target(1.0, 1e-6).rho_learner)
    tolerance = (3 * np.sqrt(true_weights * (1 - true_weights) / gm.n_fresh_)
                 + 2 * count_sd * math.sqrt(2 * math.log(2 * 2 / BETA)) / gm.n_fresh_)
    assert np.all(np.abs(gm.weights_ - true_weights) <= tolerance)
    assert gm.weights_.sum() == pytest.approx(1.0)
    # Mixture TV distance (§9.4 item 9 with Pinsker): small on easy data.
    tv = sum(w * min(1.0, math.sqrt(_gaussian_kl(centers[m], np.eye(2), mean, cov) / 2))
             for w, m, mean, cov in zip(true_weights, match, gm.means_, gm.covariances_))
    assert tv + 0.5 * np.abs(gm.weights_ - true_weights).sum() < 0.1
    assert np.mean(match[gm.labels_] == y) == pytest.approx(1.0)


def test_privacy_spent_matches_ledger_and_accountant(fitted):
    gm, acc = fitted
    # The default fit first releases its bound on 10% of epsilon (skdpcluster.bounds), pure
    # epsilon-DP in this low dimension (its delta is left to the fit), then fits the mixture on
    # the remaining (0.9, 1e-6).
    assert gm.privacy_spent_["proven"] is True
    assert gm.privacy_spent_["epsilon"] == pytest.approx(1.0)
    assert gm.privacy_spent_["delta"] <= 1e-6
    labels = [event.label for event in gm.privacy_ledger_]
    assert labels == ["bounds/center", "bounds/radius", "PrivateGaussianMixture.fit"]
    spent = [sum(event.cost()[i] for event in gm.privacy_ledger_) for i in (0, 1)]
    assert spent == pytest.approx([gm.privacy_spent_["epsilon"], gm.privacy_spent_["delta"]])
    assert acc.total() == pytest.approx(tuple(spent)) and len(acc.ledger) == 1
    event = gm.privacy_ledger_[-1]
    tuple_part, fresh_part = event.details["tuple_part"], event.details["fresh_part"]
    assert [e.delta for e in gm.privacy_ledger_[:2]] == [0.0, 0.0]
    assert tuple_part["epsilon"] <= 0.9 * (1 + 1e-12) and tuple_part["delta"] <= 1e-6 * (1 + 1e-12)
    assert (fresh_part["epsilon"], fresh_part["delta"]) == pytest.approx((0.9, 1e-6))
    json.loads(acc.to_json())  # the nested details stay serialisable


def test_fresh_budget_is_exactly_the_target():
    """8 (rho_refine + rho_learner) = mu^2, and mu-GDP is (eps, delta)-DP (Balle & Wang)."""
    for epsilon, delta in [(1.0, 1e-6), (0.3, 1e-9), (4.0, 1e-5)]:
        budget = _FreshBudget.for_target(epsilon, delta)
        assert 8 * (budget.rho_refine + budget.rho_learner) == pytest.approx(budget.mu**2)
        assert budget.mu == pytest.approx(1 / analytic_gaussian_sigma(1.0, epsilon, delta))


def test_fresh_releases_use_the_derived_noise(fitted):
    gm, _ = fitted
    budget = _FreshBudget.for_target(0.9, 1e-6)  # the rest after the pure private bound's 10%
    events = gm.privacy_ledger_[-1].details["fresh_part"]["details"]["events"]
    counts = [e for e in events if e["label"].startswith("gaussian_mixture/counts")]
    learners = [e for e in events if e["mechanism"] == "private_gaussian_estimate"]
    assert [c["scale"] for c in counts] == pytest.approx(
        [1 / math.sqrt(2 * budget.rho_refine), 1 / math.sqrt(2 * budget.rho_learner)])
    assert [e["rho"] for e in learners] == pytest.approx([budget.rho_learner] * 2)
    refine_rho = sum(e["rho"] for e in events if e["label"].startswith("gaussian_mixture/refine"))
    assert refine_rho == pytest.approx(2 * budget.rho_refine)  # two components


@pytest.mark.parametrize("d", [1, 5, 50])
def test_ledger_never_exceeds_the_request(d):
    X, _ = make_separated_mixture(N_TUPLES * 12, n_clusters=2, n_features=d, separation=400,
                                  random_state=d)
    acc = BudgetAccountant(epsilon=0.7, delta=1e-6)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        gm = PrivateGaussianMixture(2, epsilon=0.7, accountant=acc, random_state=0).fit(X)
    assert not any(issubclass(w.category, PrivacyLeakWarning) for w in record)
    spent = np.sum([e.cost() for e in gm.privacy_ledger_], axis=0)
    assert spent[0] <= 0.7 * (1 + 1e-12) and spent[1] <= 1e-6 * (1 + 1e-12)
    assert acc.total()[0] <= 0.7 * (1 + 1e-12)


def _is_spd(matrices, floor):
    """Symmetric, with every eigenvalue above ``floor`` up to rounding (1e-12 of the largest)."""
    matrices = np.asarray(matrices)
    symmetric = np.allclose(matrices, np.swapaxes(matrices, -1, -2))
    eigenvalues = np.linalg.eigvalsh(matrices)
    return symmetric and np.all(eigenvalues >= floor - 1e-12 * eigenvalues.max())


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_covariances_are_spd_with_the_documented_floor(easy, covariance_type):
    """Noise-dominated case: few fresh rows (samples_per_tuple leaves 40), tiny sigma_min."""
    X = easy[0][: N_TUPLES * 30 + 40]
    gm = PrivateGaussianMixture(2, covariance_type=covariance_type, samples_per_tuple=30,
                                tuple_method="noisy_centers", fallback_share=0.0,
                                sigma_min=1e-3, sigma_max=50.0, random_state=1).fit(X)
    assert gm.status_ == "success" and gm.n_fresh_ == 40
    full = _full(gm)
    assert _is_spd(full, floor=1e-3**2 + gm.reg_covar)
    assert np.all(np.linalg.eigvalsh(full) <= 50.0**2 + gm.reg_covar + 1e-9)
    expected_shape = {"full": (2, 2, 2), "tied": (2, 2), "diag": (2, 2), "spherical": (2,)}
    assert np.shape(gm.covariances_) == expected_shape[covariance_type]
    assert np.shape(gm.precisions_cholesky_) == expected_shape[covariance_type]
    precision = np.linalg.inv(full)
    if covariance_type in ("full", "tied"):
        chol = np.broadcast_to(gm.precisions_cholesky_, full.shape)
        assert np.allclose(chol @ np.swapaxes(chol, -1, -2), precision)
        assert np.allclose(np.broadcast_to(gm.precisions_, full.shape), precision)
    else:
        assert np.allclose(gm.precisions_, 1 / np.asarray(gm.covariances_))


@pytest.mark.parametrize("covariance_type", COVARIANCE_TYPES)
def test_score_samples_and_predict_proba_agree_with_scipy(easy, covariance_type):
    X = easy[0]
    gm = PrivateGaussianMixture(2, covariance_type=covariance_type, random_state=2).fit(X)
    rows = X[:500] + np.random.default_rng(0).normal(0, 3, size=(500, 2))
    weighted = np.column_stack([
        math.log(w) + stats.multivariate_normal(mean, cov).logpdf(rows)
        for w, mean, cov in zip(gm.weights_, gm.means_, _full(gm))
    ])
    assert np.allclose(gm.score_samples(rows), logsumexp(weighted, axis=1), rtol=1e-10, atol=1e-8)
    assert gm.score(rows) == pytest.approx(np.mean(logsumexp(weighted, axis=1)))
    proba = gm.predict_proba(rows)
    assert np.allclose(proba, np.exp(weighted - logsumexp(weighted, axis=1, keepdims=True)))
    assert np.array_equal(gm.predict(rows), weighted.argmax(axis=1))


@pytest.mark.parametrize("covariance_type", ["full", "diag"])
def test_sample_follows_the_released_mixture(correlated, covariance_type):
    gm = PrivateGaussianMixture(2, covariance_type=covariance_type, random_state=3)
    gm.fit(correlated[0])
    X, y = gm.sample(20_000)
    assert X.shape == (20_000, 2) and np.all(np.diff(y) >= 0)
    # Component sizes: multinomial with the released weights (chi-square test).
    assert stats.chisquare(np.bincount(y, minlength=2), 20_000 * gm.weights_).pvalue > 1e-3
    # Within a component, the squared Mahalanobis distance is chi2(d) under scipy's normal.
    for j, cov in enumerate(_full(gm)):
        rows = X[y == j]
        log_density = stats.multivariate_normal(gm.means_[j], cov).logpdf(rows)
        squared = -2 * (log_density + 0.5 * np.linalg.slogdet(2 * np.pi * cov)[1])
        assert stats.kstest(squared, stats.chi2(df=2).cdf).pvalue > 1e-3
        assert np.allclose(np.cov(rows, rowvar=False), cov, rtol=0.1, atol=0.05)
    assert np.array_equal(gm.sample(5)[0], gm.sample(5)[0])  # int random_state: reproducible


def test_correlated_covariances_are_learned(correlated):
    X, _, means, covariances = correlated
    gm = PrivateGaussianMixture(2, random_state=4).fit(X)
    match = _matched(gm.means_, means)
    assert sorted(match) == [0, 1]
    for released, truth in zip(gm.covariances_, covariances[match]):
        assert np.linalg.norm(released - truth, 2) / np.linalg.norm(truth, 2) < 0.15


def test_integer_seed_is_reproducible(small):
    X = small
    a = PrivateGaussianMixture(2, random_state=7).fit(X)
    b = PrivateGaussianMixture(2, random_state=7).fit(X)
    c = PrivateGaussianMixture(2, random_state=8).fit(X)
    assert a.status_ == b.status_ == c.status_ == "success"
    for name in ("means_", "covariances_", "weights_", "tuple_centers_", "sigma_max_"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.means_, c.means_)


def test_parallel_blocks_give_the_same_fit(small):
    X = small
    a = PrivateGaussianMixture(2, random_state=5, n_jobs=1).fit(X)
    b = PrivateGaussianMixture(2, random_state=5, n_jobs=2).fit(X)
    assert np.array_equal(a.means_, b.means_) and np.array_equal(a.covariances_, b.covariances_)


def test_fit_predict_and_predict_on_training_rows(small):
    X = small
    gm = PrivateGaussianMixture(2, random_state=9)
    labels = gm.fit_predict(X)
    assert np.array_equal(labels, gm.labels_) and np.array_equal(labels, gm.predict(X))



@pytest.mark.filterwarnings("ignore::UserWarning")  # 20 rows: the bound's and the utility warnings
def test_a_noisy_scale_near_zero_does_not_end_the_fit_in_linalg_error():
    """Regression: on scikit-learn's 20-row check data, seed 58 released a log-scale so far
    below its clipping interval that sigma_min underflowed to 2e-314; whitening overflowed to
    NaN and ``eigh`` raised inside the private step (caught by the safety net, which this
    suite's conftest turns into a failure). CI failed on it with ``random_state=None``."""
    X = np.asfortranarray(3 * np.random.RandomState(0).uniform(size=(20, 3)))
    gm = PrivateGaussianMixture(random_state=58).fit(X)
    assert gm.status_ in ("success", "fallback")
    assert np.all(np.isfinite(gm.means_)) and np.all(np.isfinite(gm.covariances_))
    assert np.all(np.linalg.eigvalsh(gm.covariances_) > 0)

def test_failure_is_reported_not_garbage():
    X = np.random.default_rng(0).normal(size=(N_TUPLES * 20, 2))  # one blob: tuples never agree
    acc = BudgetAccountant()
    with pytest.warns(NotSeparatedWarning, match="status_='failure'") as record:
        gm = PrivateGaussianMixture(2, fallback_share=0.0, accountant=acc, random_state=0).fit(X)
    assert record[0].filename == __file__
    assert gm.status_ == "failure" and not gm.converged_
    assert gm.means_ is None and gm.covariances_ is None and gm.weights_ is None
    assert np.all(gm.labels_ == -1)
    # The whole fit is priced either way: the private bound (pure epsilon, 10%) and the rest
    # (which keeps all of delta).
    assert acc.total() == pytest.approx((1.0, 1e-6))
    assert gm.privacy_ledger_[-1].details["fresh_part"]["details"]["released"] is False
    for method in (gm.predict, gm.predict_proba, gm.score_samples):
        with pytest.raises(NotFittedError, match="failed"):
            method(X[:3])
    with pytest.raises(NotFittedError, match="failed"):
        gm.sample(3)


def test_on_failure_raise_charges_and_keeps_previous_state(small):
    X_easy = small
    acc = BudgetAccountant()
    gm = PrivateGaussianMixture(2, on_failure="raise", accountant=acc, random_state=0).fit(X_easy)
    means = gm.means_.copy()
    with pytest.raises(NotSeparatedError):
        gm.fit(np.random.default_rng(1).normal(size=(N_TUPLES * 20, 2)))
    assert np.array_equal(gm.means_, means) and gm.status_ == "success"
    assert len(acc.ledger) == 2


@pytest.mark.parametrize(
    "params, rows, error, match",
    [
        ({}, "nan", ValueError, "NaN"),
        # Review: 3 rows left no tuple to plan and raised ZeroDivisionError while planning.
        ({}, 3, InsufficientDataError, "3 rows, but PrivateGaussianMixture needs at least"),
        ({"fallback_share": 0.0}, 300, InsufficientDataError, r"needs at least \d+ tuples"),
        ({"samples_per_tuple": 100, "fallback_share": 0.0}, N_TUPLES * 30, InsufficientDataError,
         "fresh rows"),
        ({"n_tuples": 100, "fallback_share": 0.0}, N_TUPLES * 30, InsufficientDataError,
         "at least 161 tuples"),  # at (0.9, 1e-6): the pure private bound leaves all delta
        ({"n_tuples": 100, "tuple_method": "noisy_centers", "fallback_share": 0.0}, N_TUPLES * 30,
         InsufficientDataError, "at least 1963"),
        ({"epsilon": 0}, N_TUPLES * 30, ValueError, "epsilon"),
        ({"delta": 1.0}, N_TUPLES * 30, ValueError, "delta"),
        ({"n_components": 0}, N_TUPLES * 30, ValueError, "n_components"),
        ({"covariance_type": "banded"}, N_TUPLES * 30, ValueError, "covariance_type"),
        ({"sigma_min": 2.0, "sigma_max": 1.0}, N_TUPLES * 30, ValueError, "must not exceed"),
        ({"sigma_max": -1.0}, N_TUPLES * 30, ValueError, "sigma_max"),
        ({"reg_covar": -1.0}, N_TUPLES * 30, ValueError, "reg_covar"),
        ({"random_state": np.random.RandomState(0)}, N_TUPLES * 30, ValueError, "random_state"),
    ],
)
def test_bad_input_fails_before_any_spend(easy, small, fitted, params, rows, error, match):
    acc = BudgetAccountant()
    gm = clone(fitted[0]).set_params(accountant=acc, random_state=0)
    gm.fit(small)
    before = (gm.means_.copy(), gm.privacy_spent_, len(acc.ledger))
    X = np.full((N_TUPLES * 30, 2), np.nan) if rows == "nan" else easy[0][:rows]
    gm.set_params(**params)
    with pytest.raises(error, match=match):
        gm.fit(X)
    assert np.array_equal(gm.means_, before[0]) and gm.privacy_spent_ == before[1]
    assert len(acc.ledger) == before[2]


def test_budget_refused_before_the_data_is_touched(small):
    acc = BudgetAccountant(epsilon=0.5)
    with pytest.raises(BudgetExceededError, match="ceiling"):
        PrivateGaussianMixture(2, accountant=acc).fit(small)
    assert acc.ledger == []


def test_data_derived_bounds_warn_and_are_not_written_back(small):
    X = small
    with pytest.warns(PrivacyLeakWarning, match="sigma_min or sigma_max"):
        gm = PrivateGaussianMixture(2, sigma_min=None, sigma_max=None, random_state=0).fit(X)
    assert gm.sigma_min is None and gm.sigma_max is None
    # Issue #12 item 7: bounds from the data are used but not stored, and the fit is unproven.
    assert gm.status_ == "success" and np.isnan(gm.sigma_min_).all() and np.isnan(gm.sigma_max_).all()
    assert gm.privacy_spent_["proven"] is False
    assert gm.privacy_ledger_[-1].mechanism == "unproven"
    with pytest.warns(PrivacyLeakWarning, match="data_radius='data'"), warnings.catch_warnings():
        warnings.simplefilter("ignore", NotSeparatedWarning)  # far too few tuples for averages
        gm = PrivateGaussianMixture(2, tuple_method="averages", n_tuples=N_TUPLES,
                                    data_radius="data", random_state=0).fit(X)
    assert gm.data_radius == "data" and np.isnan(gm.data_radius_)
    assert gm.privacy_spent_["proven"] is False


def test_public_float_bounds_are_used_as_given(small):
    gm = PrivateGaussianMixture(2, sigma_min=0.5, sigma_max=2.0, random_state=0).fit(small)
    assert np.all(gm.sigma_min_ == 0.5) and np.all(gm.sigma_max_ == 2.0)
    eigenvalues = np.linalg.eigvalsh(gm.covariances_)
    assert np.all(eigenvalues >= 0.25) and np.all(eigenvalues <= 4.0 + 1e-6)


def test_gaussian_mixture_as_the_labelling_algorithm(easy, small):
    centers = easy[2]
    gm = PrivateGaussianMixture(2, base_estimator=GaussianMixture(max_iter=20),
                                random_state=0).fit(small[:60_000])
    assert gm.status_ == "success"
    assert np.all(np.linalg.norm(gm.means_ - centers[_matched(gm.means_, centers)], axis=1) < 0.5)


def test_float32_input_and_feature_names(small):
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame(small.astype(np.float32), columns=["a", "b"])
    gm = PrivateGaussianMixture(2, random_state=0).fit(frame)
    assert list(gm.feature_names_in_) == ["a", "b"] and gm.n_features_in_ == 2
    assert gm.means_.dtype == np.float64 and gm.predict(frame[:4]).shape == (4,)


def test_unfitted_estimator_raises():
    with pytest.raises(NotFittedError):
        PrivateGaussianMixture().predict(np.zeros((2, 2)))


@pytest.mark.slow
def test_success_rate_and_error_bound_over_seeds():
    """§9.4: on separated data, success with frequency >= 1 - beta; the mean bound every time."""
    X, _, centers = make_separated_mixture(300_000, n_clusters=4, n_features=3, separation=2048,
                                           random_state=11, return_centers=True)
    successes = 0
    for seed in range(20):
        gm = PrivateGaussianMixture(4, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotSeparatedWarning)
            gm.fit(X)
        if gm.status_ != "success":
            continue
        successes += 1
        match = _matched(gm.means_, centers)
        assert sorted(match) == [0, 1, 2, 3]
        errors = np.linalg.norm(gm.means_ - centers[match], axis=1)
        assert np.all(errors <= _mean_error_bound(gm, gm.n_fresh_ / 4, sigma=1.0))
    assert successes >= 19


@pytest.mark.parametrize("check", [c for c, _ in dp_checks()], ids=[n for _, n in dp_checks()])
def test_dp_contract(check, small):
    check(PrivateGaussianMixture(2), small)


# ---------------------------------------------------------------------------
# The refinement pass (not in the paper): its releases on worst-case neighbours (audit RE-F5)
# ---------------------------------------------------------------------------

REFINE_RELEASES = {
    "clipped_mean": ("_clipped_mean", "_clipped_mean_sensitivity"),
    "log_scale": ("_log_scale", "_log_scale_sensitivity"),
}


def _noise_free_refine_release(monkeypatch, release, points, radius=5.0):
    """The release's noise-free value on ``points`` and the sensitivity it claimed (n = 200)."""
    from skdpcluster.mixture import _gaussian_mixture

    claimed = []

    def noise_free(value, *, sensitivity, **kwargs):
        claimed.append(sensitivity)
        return np.atleast_1d(np.asarray(value, dtype=float)), None

    monkeypatch.setattr(_gaussian_mixture, "zcdp_gaussian_mechanism", noise_free)
    function = getattr(_gaussian_mixture, REFINE_RELEASES[release][0])
    value, _ = function(points, 200, np.zeros(3), radius, 1.0, np.random.default_rng(0))
    return value, claimed[-1]


@pytest.mark.parametrize("release", sorted(REFINE_RELEASES))
@pytest.mark.parametrize("factor, should_pass", [pytest.param(None, True, id="real"),
                                                 pytest.param(0.5, False, id="mutant-half")])
def test_refinement_releases_move_by_at_most_their_claimed_sensitivity(monkeypatch, release,
                                                                        factor, should_pass):
    """Worst-case neighbours of the refinement pass, noise-free (audit RE-F5, ``re_09``).

    ``_clipped_mean`` claims add/remove sensitivity radius / n (an added row is
    clipped to norm radius), ``_log_scale`` L / (2n) (an added term lies in
    [-L/2, L/2]). Adding a row far away (clipped to the radius) or at the
    centre (log-distance clipped to the low end) moves the release by exactly
    the claim, and swapping two such rows inside the component by twice the
    claim, the factor ``_FreshBudget``'s GDP accounting assumes
    (mu^2 = 8 rho per pass). The mutant halves the claimed sensitivity through
    its seam: the changes are then twice the claim and the test fails.
    """
    from skdpcluster.mixture import _gaussian_mixture

    if factor is not None:
        name = REFINE_RELEASES[release][1]
        original = getattr(_gaussian_mixture, name)
        monkeypatch.setattr(_gaussian_mixture, name, lambda *args: factor * original(*args))
    base = np.random.default_rng(0).standard_normal((200, 3))
    far, at_centre, opposite = (np.array([[1e6, 0.0, 0.0]]), np.array([[1e-300, 0.0, 0.0]]),
                                np.array([[-1e6, 0.0, 0.0]]))
    value, claim = _noise_free_refine_release(monkeypatch, release, base)
    added = [_noise_free_refine_release(monkeypatch, release, np.vstack([base, row]))[0]
             for row in (far, at_centre)]
    add_remove = max(np.linalg.norm(a - value) for a in added) / claim
    other = opposite if release == "clipped_mean" else at_centre
    swapped = _noise_free_refine_release(monkeypatch, release, np.vstack([base, other]))[0]
    swap = np.linalg.norm(added[0] - swapped) / claim
    within = bool(add_remove <= 1.0 + 1e-9 and swap <= 2.0 + 1e-9)
    assert within is should_pass
    if should_pass:  # the pair is the worst case: the claims are tight
        assert add_remove == pytest.approx(1.0, rel=1e-9) and swap == pytest.approx(2.0, rel=1e-9)


def test_nearest_gaps_neither_overflow_nor_underflow():
    """Review R6-L2: np.linalg.norm squared the gaps, so released centres more than ~1.34e154
    apart had an infinite gap (and refinement radius); tiny gaps underflowed to 0."""
    big = np.finfo(float).max
    assert _nearest_gaps(np.array([[0.0, 0.0], [3e200, 4e200]])) == pytest.approx([5e200, 5e200], rel=1e-15)
    assert _nearest_gaps(np.array([[0.0, 0.0], [3e-170, 4e-170], [1.0, 1.0]]))[0] == pytest.approx(5e-170)
    assert _nearest_gaps(np.array([[0.0, 0.0], [3.0, 4.0], [3.0, 4.0]])).tolist() == [5.0, 0.0, 0.0]
    with np.errstate(over="ignore"):  # fits run under errstate(all="ignore")
        assert _nearest_gaps(np.array([[-big], [big]])).tolist() == [big, big]


def test_noisy_centres_released_far_apart_are_refined():
    """Review R6-L2: with clusters 1.3e154 apart, the released tuple centres often are more than
    1.34e154 apart; the refinement radius was inf and the fit a charged private_step_failed."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80_000, 1))
    X[:40_000] += 1.3e154
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = PrivateGaussianMixture(n_components=2, tuple_method="noisy_centers", fallback_share=0.0,
                                   sigma_min=0.1, sigma_max=10.0, data_radius=1e155,
                                   accountant=BudgetAccountant(), random_state=3).fit(X)
    assert np.ptp(g.tuple_centers_) > 1.34e154  # the gap whose square overflows
    assert g.status_ == "success" and g.privacy_spent_["proven"]
    assert "private_step_failed" not in [e.mechanism for e in g.privacy_ledger_]
    assert np.all(np.isfinite(g.means_))


def test_the_refinement_noises_offsets_not_positions(monkeypatch):
    """Review R10 H1: the refinement noised center + mean offset, rounded at the ulp of center:
    with rows one ulp apart at 2^40 one added row moved it by 4069 sensitivities, and over 1000
    seeds the neighbours' releases never met. Every noised value is now a mean of n_public
    terms each within its reach, so its norm is at most n_public times its sensitivity."""
    noised = []

    def recording(value, *, sensitivity, **options):
        noised.append((np.linalg.norm(np.atleast_1d(value)), sensitivity))
        return mechanisms.zcdp_gaussian_mechanism(value, sensitivity=sensitivity, **options)

    monkeypatch.setattr(_gaussian_mixture, "zcdp_gaussian_mechanism", recording)
    center = np.array([2.0**40])
    rows = np.vstack([np.full((4999, 1), center + np.spacing(center)), np.full((5001, 1), center)])
    _gaussian_mixture._refine_component(rows, 10_000.0, center, 1.0, 0.1,
                                        np.random.default_rng(0))
    assert len(noised) == 2 * _gaussian_mixture.REFINE_ROUNDS
    for norm, sensitivity in noised:
        assert norm <= 10_000.0 * sensitivity * (1 + 1e-9)


def test_a_sigma_max_the_learner_refuses_is_refused_before_any_spend():
    """Review R10 M1: sigma_max above 1e152 was refused by the learner inside the private step,
    after the refinement's noise: a charged failure (proven=False). Now a ValueError naming
    sigma_max, with nothing charged."""
    accountant = BudgetAccountant()
    X = np.random.default_rng(0).normal(size=(400, 2))
    estimator = PrivateGaussianMixture(n_components=1, epsilon=1.0, delta=1e-6, data_radius=10.0,
                                       sigma_min=1e-3, sigma_max=1e153, random_state=0,
                                       accountant=accountant)
    with pytest.raises(ValueError, match="sigma_max=1e\\+153"):
        estimator.fit(X)
    assert accountant.ledger == []


def _fit_recording_warnings(estimator, X):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimator.fit(X)
    return [(warning.category, str(warning.message)) for warning in caught]


@pytest.mark.parametrize("budget, scale", [(1e-80, 1.0), (1e-100, 1e9), (1e-150, 1e90)])
def test_a_budget_the_learner_refuses_falls_back_to_the_refinement(budget, scale):
    """Review R11 M2: at epsilon = delta <= 1e-80 the learner refused the released noisy count
    and bounds inside the private step (rho 'too small for the public bounds'): a charged
    failure, proven=False. Those components now release the refinement pass's centre and an
    isotropic covariance from its scale (status_='fallback'), the ledger is the plan and a
    UtilityWarning says so after the fit; the neighbouring budget 1e-60 still fits."""
    rng = np.random.default_rng(0)
    X = np.vstack([rng.normal(-5, 1, (300, 2)), rng.normal(5, 1, (300, 2))]) * scale / 20.0
    for epsilon in (budget, 1e-60):
        accountant = BudgetAccountant()
        g = PrivateGaussianMixture(n_components=2, epsilon=epsilon, delta=epsilon,
                                   data_radius=10.0 * scale, random_state=0,
                                   accountant=accountant)
        caught = _fit_recording_warnings(g, X)
        assert "private_step_failed" not in [e.mechanism for e in g.privacy_ledger_]
        assert g.privacy_spent_ == {"epsilon": epsilon, "delta": epsilon, "proven": True}
        assert len(accountant.ledger) == 1 and accountant.total() == (epsilon, epsilon)
        refined_only = g.fallback_info_.get("learner_fallback", [])
        assert bool(refined_only) == (epsilon == budget)
        learner_warnings = [m for c, m in caught if c is UtilityWarning and "learner_fallback" in m]
        assert len(learner_warnings) == (1 if refined_only else 0)
        assert g.status_ == "fallback"  # the k-tuple path cannot run at these budgets either
        for j in refined_only:  # s^2 I + reg_covar, s within the component's released bounds
            variance = g.covariances_[j][0, 0] - g.reg_covar
            np.testing.assert_array_equal(g.covariances_[j],
                                          (variance + g.reg_covar) * np.eye(2))
            assert g.sigma_min_[j] ** 2 * (1 - 1e-12) <= variance
            assert variance <= g.sigma_max_[j] ** 2 * (1 + 1e-12)
        assert np.all(np.isfinite(g.means_)) and np.all(np.isfinite(g.precisions_cholesky_))


def test_one_component_whose_learner_falls_back_is_no_failed_test():
    """Review R11 M2, one component: the learner's fallback alone gives status_='fallback' with
    fallback_info_ naming it, a UtilityWarning and no NotSeparatedWarning; on_failure='raise'
    does not raise (no private test failed). Seed 3 draws a noisy count of at most 1."""
    X = np.random.default_rng(0).normal(size=(400, 2))
    for on_failure in ("warn", "raise"):
        accountant = BudgetAccountant()
        g = PrivateGaussianMixture(n_components=1, epsilon=1e-80, delta=1e-80, data_radius=10.0,
                                   on_failure=on_failure, random_state=3, accountant=accountant)
        caught = _fit_recording_warnings(g, X)
        assert g.status_ == "fallback" and g.converged_
        assert g.fallback_info_ == {"reason": _gaussian_mixture._LEARNER_FALLBACK_REASON,
                                    "learner_fallback": [0]}
        assert NotSeparatedWarning not in [category for category, _ in caught]
        assert any(c is UtilityWarning and "learner_fallback" in m for c, m in caught)
        assert g.privacy_spent_["proven"] and accountant.total() == (1e-80, 1e-80)
        assert np.all(np.isfinite(g.means_)) and np.all(np.isfinite(g.score_samples(g.means_)))
