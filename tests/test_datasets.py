import numpy as np
import pytest

from skdpcluster.datasets import make_separated_mixture


def test_default_is_the_papers_two_component_line():
    X, y, centers = make_separated_mixture(random_state=0, return_centers=True)
    assert X.shape == (1000, 1) and y.shape == (1000,)
    np.testing.assert_array_equal(centers, [[32.0], [-32.0]])
    assert set(np.unique(y)) == {0, 1}


def test_means_are_plus_minus_separation_on_the_axes():
    _, _, centers = make_separated_mixture(
        10, n_clusters=6, n_features=4, separation=3.0, random_state=0, return_centers=True
    )
    expected = np.zeros((6, 4))
    expected[[0, 2, 4], [0, 1, 2]] = 3.0
    expected[[1, 3, 5], [0, 1, 2]] = -3.0
    np.testing.assert_array_equal(centers, expected)


def test_samples_are_standard_gaussians_around_their_means():
    X, y, centers = make_separated_mixture(
        200_000, n_clusters=4, n_features=3, separation=10, random_state=1, return_centers=True
    )
    for j, center in enumerate(centers):
        component = X[y == j]
        # 50 000 samples: the mean has standard error 0.0045 and the std 0.0032.
        np.testing.assert_allclose(component.mean(axis=0), center, atol=0.03)
        np.testing.assert_allclose(component.std(axis=0), 1.0, atol=0.02)
    # Uniform weights: each count is Binomial(200 000, 1/4), standard deviation 194.
    np.testing.assert_allclose(np.bincount(y), 50_000, atol=1000)


def test_given_means_scales_and_weights():
    means = [[0.0, 0.0], [100.0, 0.0], [0.0, 100.0]]
    X, y, centers = make_separated_mixture(
        90_000, means=means, scales=[1.0, 2.0, 0.5], weights=[2, 1, 1], random_state=2,
        return_centers=True,
    )
    np.testing.assert_array_equal(centers, means)
    np.testing.assert_allclose(np.bincount(y) / len(y), [0.5, 0.25, 0.25], atol=0.01)
    stds = [(X[y == j] - centers[j]).std() for j in range(3)]
    np.testing.assert_allclose(stds, [1.0, 2.0, 0.5], rtol=0.02)


def test_shuffle_false_groups_rows_by_component():
    _, y = make_separated_mixture(500, n_clusters=4, n_features=2, shuffle=False, random_state=3)
    assert (np.diff(y) >= 0).all()
    _, y = make_separated_mixture(500, n_clusters=4, n_features=2, random_state=3)
    assert (np.diff(y) < 0).any()


def test_seeds_reproduce_and_none_is_fresh_entropy():
    first = make_separated_mixture(50, random_state=7)[0]
    np.testing.assert_array_equal(first, make_separated_mixture(50, random_state=7)[0])
    np.random.seed(0)
    unseeded = make_separated_mixture(50)[0]
    np.random.seed(0)
    assert not np.array_equal(unseeded, make_separated_mixture(50)[0])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(n_clusters=4, n_features=1), "need n_features >= 2"),
        (dict(n_clusters=3, n_features=2), "even n_clusters"),
        (dict(n_clusters=1), "n_clusters must be an int >= 2"),
        (dict(n_samples=0), "n_samples must be an int >= 1"),
        (dict(n_samples=10.5), "n_samples must be an int"),
        (dict(separation=0), "separation must be a finite number > 0"),
        (dict(separation=np.inf), "separation must be a finite number > 0"),
        (dict(separation=2, means=[[0.0], [1.0]]), "not both"),
        (dict(means=[0.0, 1.0]), "means must be a finite array"),
        (dict(means=[[0.0], [np.nan]]), "means must be a finite array"),
        (dict(scales=[1.0, 2.0, 3.0]), r"scales must be a float or have shape \(2,\)"),
        (dict(scales=0.0), "scales must be finite and > 0"),
        (dict(weights=[1.0, -1.0]), "weights must be finite and >= 0"),
        (dict(weights=[0.0, 0.0]), "positive sum"),
    ],
)
def test_bad_parameters_raise(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make_separated_mixture(**kwargs)
