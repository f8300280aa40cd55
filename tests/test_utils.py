import numpy as np
import pytest

from skdpcluster.utils import check_epsilon_delta, check_probability, check_random_state, spawn_generators


def test_none_is_fresh_entropy_not_the_global_generator():
    np.random.seed(0)
    first = check_random_state(None).random(4)
    np.random.seed(0)
    second = check_random_state(None).random(4)
    assert not np.array_equal(first, second)


def test_int_and_generator_seeds():
    assert np.array_equal(check_random_state(3).random(5), check_random_state(3).random(5))
    rng = np.random.default_rng(1)
    assert check_random_state(rng) is rng
    assert isinstance(check_random_state(np.random.SeedSequence(2)), np.random.Generator)


@pytest.mark.parametrize("bad", [np.random.RandomState(0), 1.5, "seed", True])
def test_bad_seeds_are_refused(bad):
    with pytest.raises(ValueError, match="random_state"):
        check_random_state(bad)


def test_spawned_children_are_independent_and_reproducible():
    a = [g.random() for g in spawn_generators(np.random.default_rng(5), 3)]
    b = [g.random() for g in spawn_generators(np.random.default_rng(5), 3)]
    assert a == b and len(set(a)) == 3


@pytest.mark.parametrize(
    "epsilon, delta, match",
    [(0, 1e-6, "epsilon"), (-1, 1e-6, "epsilon"), (float("inf"), 1e-6, "epsilon"),
     ("1", 1e-6, "epsilon"), (1, 1, "delta"), (1, -1e-9, "delta"), (1, float("nan"), "delta")],
)
def test_privacy_parameter_errors_name_the_parameter(epsilon, delta, match):
    with pytest.raises(ValueError, match=match):
        check_epsilon_delta(epsilon, delta)


def test_probability_range():
    assert check_probability(0.05, "beta") == 0.05
    with pytest.raises(ValueError, match="beta"):
        check_probability(1.0, "beta")
    assert check_probability(1.0, "beta", closed_right=True) == 1.0
