"""PrivatekAverages (spec §5, §7; review finding 6)."""

import math

import numpy as np
import pytest

from skdpcluster.ktuple import min_tuples
from skdpcluster.ktuple.averages import per_cluster_budget, private_k_averages, project_to_ball


def _tuples(n, centers, spread, seed):
    rng = np.random.default_rng(seed)
    return centers[None] + rng.normal(0, spread, size=(n, *centers.shape))


CENTERS = np.array([[-40.0, 5.0], [30.0, -20.0], [10.0, 60.0]])


def test_recovers_cluster_averages_with_a_large_budget():
    # epsilon = 60 makes ell small, so a few thousand tuples suffice (the paper needs ~5e5 k d at eps = 1).
    epsilon, delta, beta = 60.0, 1e-6, 0.05
    tuples = _tuples(4000, CENTERS, 0.5, seed=0)
    result = private_k_averages(tuples, epsilon=epsilon, delta=delta, beta=beta, data_radius=100.0,
                                r_min=0.01, rng=np.random.default_rng(1))
    assert result.success
    truth = CENTERS[np.lexsort(CENTERS.T[::-1])]
    averages = tuples.mean(axis=0)[np.lexsort(CENTERS.T[::-1])]
    # Spec §7.4: error <= (2t/n)(w + 4 r_min) + sigma sqrt(2 log(4/beta_ax)) per axis; with these
    # parameters the Gaussian term is ~0.05 and the segment term ~0.1, so 0.5 is a safe band.
    assert np.max(np.abs(result.centers - averages)) < 0.5
    assert np.max(np.abs(result.centers - truth)) < 0.6
    assert result.privacy_spent() == pytest.approx((epsilon, delta))


@pytest.mark.parametrize("d", [1, 5, 50])
def test_ledger_never_exceeds_the_request(d):
    epsilon, delta, beta = 1.0, 1e-6, 0.05
    n = min_tuples(epsilon, delta, beta)
    centers = np.zeros((2, d))
    centers[1, 0] = 50.0
    result = private_k_averages(_tuples(n, centers, 0.1, seed=d), epsilon=epsilon, delta=delta,
                                beta=beta, data_radius=100.0, r_min=0.01, rng=np.random.default_rng(0))
    spent = result.privacy_spent()
    assert spent[0] <= epsilon * (1 + 1e-12) and spent[1] <= delta * (1 + 1e-12)
    group = next(e for e in result.events if e.mechanism == "ktuple_group_private_averages")
    # Theorem 4.9: per-cluster budget eps/(4k(ell+1)), delta/(8k e^{eps/2}(ell+1)).
    ell = result.public["ell"]
    assert group.details["per_cluster_epsilon"] == pytest.approx(epsilon / (8 * (ell + 1)))
    assert group.details["per_cluster_delta"] == pytest.approx(delta / (16 * math.exp(0.5) * (ell + 1)))
    for inner in group.details["per_cluster_events"]:
        assert inner["epsilon"] <= group.details["per_cluster_epsilon"] * (1 + 1e-12)
        assert inner["delta"] <= group.details["per_cluster_delta"] * (1 + 1e-12)


def test_output_invariant_to_point_order_inside_tuples():
    tuples = _tuples(4000, CENTERS, 0.5, seed=2)
    shuffled = np.stack([t[np.random.default_rng(i).permutation(3)] for i, t in enumerate(tuples)])
    params = dict(epsilon=60.0, delta=1e-6, beta=0.05, data_radius=100.0, r_min=0.01)
    a = private_k_averages(tuples, rng=np.random.default_rng(3), **params)
    b = private_k_averages(shuffled, rng=np.random.default_rng(3), **params)
    assert a.success and np.allclose(a.centers, b.centers, rtol=0, atol=1e-9)


def test_points_outside_the_ball_are_projected():
    points = np.array([[3.0, 4.0], [0.3, 0.4], [0.0, 0.0]])
    assert np.allclose(project_to_ball(points, 1.0), [[0.6, 0.8], [0.3, 0.4], [0.0, 0.0]])


@pytest.mark.parametrize(
    "kwargs, match",
    [(dict(data_radius=0.0), "data_radius"), (dict(r_min=0.0), "r_min"), (dict(r_min=200.0), "r_min"),
     (dict(epsilon=-1.0), "epsilon")],
)
def test_invalid_parameters_raise_before_randomness(kwargs, match):
    params = dict(epsilon=1.0, delta=1e-6, beta=0.05, data_radius=100.0, r_min=0.01) | kwargs
    rng = np.random.default_rng(0)
    state = rng.bit_generator.state
    with pytest.raises(ValueError, match=match):
        private_k_averages(_tuples(3000, CENTERS, 0.5, seed=0), rng=rng, **params)
    assert rng.bit_generator.state == state


def test_per_cluster_budget_and_its_limit():
    eps_hat, delta_hat = per_cluster_budget(1.0, 1e-6, 2, 99.0)
    assert eps_hat == pytest.approx(1.0 / 800) and delta_hat == pytest.approx(1e-6 / (1600 * math.exp(0.5)))
    with pytest.raises(ValueError, match="too large for method='averages'"):
        per_cluster_budget(1e5, 0.1, 2, 1.0)  # e^(eps/2) would overflow; delta_hat underflows
