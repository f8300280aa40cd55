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


# Loaders of FedDP-KMeans's real data sets, on small files written here -----------------

ACS_COLUMNS = ["AGEP", "COW", "SCHL", "MAR", "OCCP", "POBP", "RELP", "WKHP", "SEX", "RAC1P",
               "ST"]


def _write_acs(path, n_rows=60, seed=0):
    rng = np.random.default_rng(seed)
    lines = [",".join(ACS_COLUMNS)]
    for i in range(n_rows):
        cow = 5.0 if i % 3 else 1.0  # two in three federal employees, written as floats
        values = [30, cow, rng.integers(1, 4), rng.integers(1, 3), 1000 + rng.integers(0, 5),
                  rng.integers(1, 3), 0, 40, rng.integers(1, 3), 1, ["6", "36", "48"][i % 3]]
        lines.append(",".join(str(value) for value in values))
    path.write_text("\n".join(lines) + "\n")
    return path


def test_load_acs_income_one_hot_rows_clients_and_server(tmp_path):
    from skdpcluster.datasets import ACS_CATEGORICAL, load_acs_income

    path = _write_acs(tmp_path / "acs.csv")
    bunch = load_acs_income(path, n_server_in=5, n_server_out=10)
    assert bunch.data.shape == (40, len(bunch.feature_names))
    # One 1 per categorical feature: every row has norm sqrt(7) (the paper's radius 2.65).
    np.testing.assert_allclose(np.linalg.norm(bunch.data, axis=1), np.sqrt(7))
    assert {name.split("=")[0] for name in bunch.feature_names} == set(ACS_CATEGORICAL)
    assert "COW=5" not in bunch.feature_names and not any(
        name.startswith(("AGEP", "WKHP")) for name in bunch.feature_names)
    assert set(bunch.client_ids) == {"36", "48"}  # the federal rows (i % 3 != 0) of two states
    assert bunch.server.shape == (15, bunch.data.shape[1])


def test_load_acs_income_refuses_missing_columns_and_absent_classes(tmp_path):
    from skdpcluster.datasets import load_acs_income

    (tmp_path / "bad.csv").write_text("ST,COW\n6,5\n")
    with pytest.raises(ValueError, match="lacks the ACSIncome columns"):
        load_acs_income(tmp_path / "bad.csv")
    path = _write_acs(tmp_path / "acs.csv")
    with pytest.raises(ValueError, match="no row has COW == 2"):
        load_acs_income(path, cow=2)
    with pytest.raises(ValueError, match="n_server_out=100 exceeds"):
        load_acs_income(path, n_server_out=100)


def test_load_stackoverflow_embeddings_selects_the_tag_pair(tmp_path):
    from skdpcluster.datasets import load_stackoverflow_embeddings

    rng = np.random.default_rng(0)
    embeddings = rng.standard_normal((50, 8))
    embeddings /= np.linalg.norm(embeddings, axis=1, keepdims=True)
    tags = np.array(["github", "pdf", "java", "python", "sql"] * 10)
    users = np.arange(50) % 7
    np.savez(tmp_path / "so.npz", embeddings=embeddings, user_ids=users, tags=tags)
    bunch = load_stackoverflow_embeddings(tmp_path / "so.npz", n_server_in=3, n_server_out=5)
    in_topic = np.isin(tags, ["github", "pdf"])
    np.testing.assert_array_equal(bunch.data, embeddings[in_topic])
    np.testing.assert_array_equal(bunch.client_ids, users[in_topic])
    # The first five out-of-topic questions, in file order, close the server data.
    np.testing.assert_array_equal(bunch.server[3:], embeddings[~in_topic][:5])
    assert bunch.server.shape == (8, 8)
    with pytest.raises(ValueError, match="first tag in tags"):
        load_stackoverflow_embeddings(tmp_path / "so.npz", tags=("rust", "go"))
    np.savez(tmp_path / "bad.npz", embeddings=embeddings)
    with pytest.raises(ValueError, match="lacks the arrays"):
        load_stackoverflow_embeddings(tmp_path / "bad.npz")
