import warnings
from pathlib import Path

import joblib
import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClusterMixin
from sklearn.cluster import KMeans
from sklearn.mixture import GaussianMixture

from skdpcluster.ktuple import _tuples
from skdpcluster.ktuple._tuples import generate_tuples, sort_tuple_rows
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.utils._compat import single_threaded


class ConstantLabeler(ClusterMixin, BaseEstimator):
    """Gives every row the label 0."""

    def __init__(self, n_clusters=2):
        self.n_clusters = n_clusters

    def fit(self, X, y=None):
        self.labels_ = np.zeros(len(X), dtype=int)
        return self


class RowIdLabeler(ClusterMixin, BaseEstimator):
    """Gives row i of a block the label i, so the label means are the block's rows."""

    def __init__(self, n_clusters=1):
        self.n_clusters = n_clusters

    def fit(self, X, y=None):
        self.labels_ = np.arange(len(X))
        return self


@pytest.fixture(scope="module")
def separated():
    """4 000 rows of 4 components at ±50·e_i in the plane."""
    return make_separated_mixture(4000, 4, 2, separation=50, random_state=0)[0]


def _tuples_of(X, method, *, base=None, n_tuples=20, seed=1, **kwargs):
    """Tuples of 4 k-means centres (``base``, by default k-means++ with one seeding)."""
    base = KMeans(init="k-means++", n_init=1) if base is None else base
    return generate_tuples(
        X, base, 4, n_tuples, rng=np.random.default_rng(seed), method=method, **kwargs
    )


def _row_blocks(X, n_tuples, **kwargs):
    """The rows of every block, as the label means of RowIdLabeler."""
    block_size = kwargs.get("samples_per_tuple") or len(X) // n_tuples
    tuples = generate_tuples(
        X, RowIdLabeler(), block_size, n_tuples, rng=np.random.default_rng(3),
        output="label_means", **kwargs,
    )
    return tuples[:, :, 0]


# Blocks ------------------------------------------------------------------------


def test_partition_blocks_are_disjoint_and_drop_the_remainder():
    X = np.arange(1.0, 104.0)[:, None]
    rows = _row_blocks(X, 10)
    assert rows.shape == (10, 10)
    assert len(np.unique(rows)) == 100
    assert np.isin(rows, X).all()


def test_partition_with_samples_per_tuple_uses_that_many_rows():
    X = np.arange(1.0, 101.0)[:, None]
    rows = _row_blocks(X, 6, samples_per_tuple=7)
    assert rows.shape == (6, 7)
    assert len(np.unique(rows)) == 42


def test_with_replacement_blocks_draw_rows_iid():
    X = np.arange(1.0, 21.0)[:, None]
    rows = _row_blocks(X, 50, sampling="with_replacement", samples_per_tuple=20)
    assert rows.shape == (50, 20)
    assert np.isin(rows, X).all()
    distinct_per_block = [len(np.unique(block)) for block in rows]
    # 20 draws from 20 rows repeat a row with probability 1 - 20!/20^20 ≈ 1.
    assert max(distinct_per_block) < 20


def test_label_means_of_an_empty_label_are_zero():
    X = np.arange(1.0, 31.0).reshape(15, 2)
    tuples = generate_tuples(
        X, ConstantLabeler(), 3, 5, rng=np.random.default_rng(0), output="label_means"
    )
    assert tuples.shape == (5, 3, 2)
    np.testing.assert_array_equal(tuples[:, 1:], 0.0)
    np.testing.assert_allclose(tuples[:, 0].mean(axis=0), X.mean(axis=0))


# Paths and outputs ---------------------------------------------------------------


@pytest.mark.parametrize("method", ["batched", "per_block"])
@pytest.mark.parametrize("sampling", ["partition", "with_replacement"])
@pytest.mark.parametrize("output", ["centers", "label_means"])
def test_every_combination_gives_float64_tuples(separated, method, sampling, output):
    tuples = _tuples_of(
        separated, method, n_tuples=7, sampling=sampling, samples_per_tuple=50, output=output
    )
    assert tuples.shape == (7, 4, 2) and tuples.dtype == np.float64
    assert np.isfinite(tuples).all()


def test_batched_path_matches_scikit_learn_on_separated_data(separated):
    batched = sort_tuple_rows(_tuples_of(separated, "batched"))
    per_block = sort_tuple_rows(_tuples_of(separated, "per_block"))
    assert batched.shape == (20, 4, 2)
    np.testing.assert_allclose(batched, per_block, rtol=0, atol=1e-8)


def test_random_init_with_n_init_auto_matches_scikit_learn(separated):
    batched = _tuples_of(separated, "batched", base=KMeans(init="random"))
    per_block = _tuples_of(separated, "per_block", base=KMeans(init="random"))
    np.testing.assert_allclose(sort_tuple_rows(batched), sort_tuple_rows(per_block), atol=1e-8)


def test_label_means_equal_centres_after_convergence(separated):
    centers = _tuples_of(separated, "batched")
    label_means = _tuples_of(separated, "batched", output="label_means")
    scikit_label_means = _tuples_of(separated, "per_block", output="label_means")
    np.testing.assert_allclose(label_means, centers, atol=1e-8)
    np.testing.assert_allclose(
        sort_tuple_rows(label_means), sort_tuple_rows(scikit_label_means), atol=1e-8
    )


def test_auto_uses_the_batched_path_for_kmeans(separated):
    np.testing.assert_array_equal(_tuples_of(separated, "auto"), _tuples_of(separated, "batched"))


def test_base_estimator_number_of_clusters_is_set_to_n_clusters(separated):
    tuples = generate_tuples(separated, KMeans(n_clusters=8), 3, 5, rng=np.random.default_rng(0))
    assert tuples.shape == (5, 3, 2)


@pytest.mark.parametrize("output", ["centers", "label_means"])
def test_gaussian_mixture_means_or_predicted_labels_are_used(separated, output):
    tuples = generate_tuples(
        separated, GaussianMixture(n_components=7), 4, 5, rng=np.random.default_rng(0),
        output=output,
    )
    means = np.array([[50.0, 0], [-50, 0], [0, 50], [0, -50]])
    nearest = np.abs(tuples[:, :, None] - means).max(axis=3).min(axis=1)
    assert tuples.shape == (5, 4, 2)
    assert (nearest < 0.5).all()


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(sampling="bootstrap"), "sampling must be one of"),
        (dict(output="medians"), "output must be one of"),
        (dict(method="fast"), "method must be one of"),
        (dict(sampling="with_replacement"), "needs samples_per_tuple"),
        (dict(samples_per_tuple=500), "disjoint blocks"),
        (dict(n_tuples=2000), "at least n_clusters=4 rows"),
        (dict(method="batched", base_estimator=GaussianMixture()), "method='batched' needs"),
        (dict(method="batched", base_estimator=KMeans(init=np.zeros((4, 2)))), "'k-means\\+\\+'"),
        (dict(base_estimator=RowIdLabeler()), "no cluster_centers_ or means_"),
    ],
)
def test_bad_options_raise(separated, kwargs, match):
    arguments = dict(base_estimator=KMeans(), n_clusters=4, n_tuples=10)
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=match):
        generate_tuples(separated, rng=np.random.default_rng(0), **arguments)


# Reproducibility and parallelism ---------------------------------------------------


@pytest.mark.parametrize("method", ["batched", "per_block"])
def test_same_seed_same_tuples_other_seed_other_tuples(separated, method):
    first = _tuples_of(separated, method, seed=5)
    np.testing.assert_array_equal(first, _tuples_of(separated, method, seed=5))
    assert not np.array_equal(first, _tuples_of(separated, method, seed=6))


@pytest.mark.parametrize("method", ["batched", "per_block"])
@pytest.mark.parametrize("backend", ["loky", "threading"])
def test_tuples_do_not_depend_on_n_jobs_or_backend(separated, method, backend):
    sequential = _tuples_of(separated, method)
    with joblib.parallel_config(backend=backend):
        parallel = _tuples_of(separated, method, n_jobs=2)
    np.testing.assert_array_equal(parallel, sequential)


def test_tuples_on_the_fit_threads_are_the_one_thread_tuples(separated):
    # Issue #17: with n_jobs=None the batched chunks run on fit_threads() threads.
    with single_threaded():
        one_thread = _tuples_of(separated, "batched", n_tuples=200)
    np.testing.assert_array_equal(_tuples_of(separated, "batched", n_tuples=200), one_thread)


def test_tuples_do_not_depend_on_the_chunk_size(separated, monkeypatch):
    default = _tuples_of(separated, "batched")
    monkeypatch.setattr(_tuples, "_CHUNK_BYTES", 1)  # one block per chunk
    np.testing.assert_array_equal(_tuples_of(separated, "batched"), default)


def test_tuples_do_not_depend_on_chunks_that_cut_generator_groups(separated, monkeypatch):
    monkeypatch.setattr(_tuples, "_BLOCKS_PER_GENERATOR", 3)  # many groups of 3 blocks
    sequential = _tuples_of(separated, "batched")
    monkeypatch.setattr(_tuples, "_CHUNK_BYTES", 1)  # one block per chunk
    np.testing.assert_array_equal(_tuples_of(separated, "batched", n_jobs=2), sequential)


def test_each_group_of_blocks_draws_from_its_own_child_generator():
    solver = _tuples._PerBlockFits(KMeans(2), "centers", (2, 1))
    n_blocks, group = 2 * _tuples._BLOCKS_PER_GENERATOR + 5, _tuples._BLOCKS_PER_GENERATOR
    draws = _tuples._draw_per_block(solver, np.random.default_rng(3), n_blocks)
    children = np.random.default_rng(3).spawn(3)
    assert draws.shape == (n_blocks, 1)
    for child, start, stop in zip(children, (0, group, 2 * group), (group, 2 * group, n_blocks)):
        expected = child.integers(2**32, size=(stop - start, 1))
        np.testing.assert_array_equal(draws[start:stop], expected)


@pytest.fixture(scope="module")
def dask_client():
    distributed = pytest.importorskip("distributed")
    with distributed.Client(processes=False, n_workers=2, threads_per_worker=1) as client:
        yield client


# joblib's Dask backend scatters the chunk arrays and tracks them in a
# _WeakKeyDictionary whose weakref callback can race with its clear() and print
# "Exception ignored ... on_destroy: KeyError" (about 1 call in 20); harmless.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
@pytest.mark.parametrize("method", ["batched", "per_block"])
def test_dask_backend_gives_the_sequential_tuples(separated, dask_client, method):
    with joblib.parallel_config(backend="dask"):
        on_dask = _tuples_of(separated, method)
    np.testing.assert_array_equal(on_dask, _tuples_of(separated, method, n_jobs=1))


# Batched k-means against scikit-learn ------------------------------------------------


def _feature_major(X_blocks):
    return np.ascontiguousarray(X_blocks.transpose(0, 2, 1))


def test_lloyd_iterations_match_scikit_learn_from_the_same_start():
    """Same initial centres on structureless data: same centres and inertia."""
    rng = np.random.default_rng(0)
    X_blocks = rng.normal(size=(40, 60, 3))
    X = _feature_major(X_blocks)
    initial = X[:, :, :4].transpose(0, 2, 1).copy()
    tol = 1e-4 * X.var(axis=2).mean(axis=1)
    centers, _, inertia = _tuples._lloyd(X, initial, tol, max_iter=300)
    for block, start, center, block_inertia in zip(X_blocks, initial, centers, inertia):
        reference = KMeans(4, init=start, n_init=1).fit(block)
        np.testing.assert_allclose(center, reference.cluster_centers_, atol=1e-8)
        assert block_inertia == pytest.approx(reference.inertia_, rel=1e-9)


def test_empty_cluster_moves_to_the_farthest_row_as_in_scikit_learn():
    block = np.array([[0.0], [0.1], [0.2], [10.0], [10.5]])
    start = np.array([[0.0], [100.0], [5.0]])
    centers, _, _ = _tuples._lloyd(block.T[None], start[None], np.zeros(1), max_iter=300)
    reference = KMeans(3, init=start, n_init=1).fit(block)
    np.testing.assert_allclose(centers[0], reference.cluster_centers_)


def test_kmeans_plusplus_seeds_one_row_per_separated_component(separated):
    X = _feature_major(separated[:4000].reshape(20, 200, 2))
    uniforms = np.random.default_rng(0).random((20, 1 + 3 * _tuples._n_local_trials(4)))
    seeds = _tuples._kmeans_plusplus(X, uniforms, 4)
    components = np.argmax(np.abs(seeds), axis=2) * 2 + (seeds.sum(axis=2) < 0)
    assert all(len(set(block)) == 4 for block in components)
    rows = X.transpose(0, 2, 1)
    assert all(
        (seed[:, None] == block).all(axis=2).any(axis=1).all() for seed, block in zip(seeds, rows)
    )


@pytest.mark.parametrize("n_init, output", [(1, "centers"), (1, "label_means"), (3, "centers")])
def test_skipping_the_final_labels_leaves_the_tuples_unchanged(n_init, output):
    """The tuple path skips the last assignment when only one run's centres are wanted."""
    X_blocks = np.random.default_rng(5).normal(size=(30, 40, 3))
    solver = _tuples._BatchedKMeans(4, n_init, 300, "k-means++", 1e-4, output, 40)
    uniforms = solver.draw(np.random.default_rng(6), 30)
    centers, labels, inertia = solver.fit(_feature_major(X_blocks), uniforms)
    expected = centers if output == "centers" else _tuples._label_means(
        _feature_major(X_blocks), labels, 4)
    np.testing.assert_array_equal(solver(X_blocks, uniforms), expected)
    unlabelled = solver.fit(_feature_major(X_blocks), uniforms, labelled=False)
    np.testing.assert_array_equal(unlabelled[0], centers)
    assert (unlabelled[1] is None) == (n_init == 1)


def test_more_seedings_never_raise_the_inertia():
    X = _feature_major(np.random.default_rng(1).normal(size=(50, 40, 2)))
    solver = _tuples._BatchedKMeans(4, 5, 300, "k-means++", 1e-4, "centers", 40)
    uniforms = np.random.default_rng(2).random((50, 5 * (1 + 3 * solver.n_local_trials)))
    _, _, best_of_five = solver.fit(X, uniforms)
    one = _tuples._BatchedKMeans(4, 1, 300, "k-means++", 1e-4, "centers", 40)
    _, _, first_only = one.fit(X, uniforms[:, : uniforms.shape[1] // 5])
    assert (best_of_five <= first_only + 1e-12).all()
    assert (best_of_five < first_only).any()


def test_batched_inertia_is_as_good_as_scikit_learn_on_hard_data():
    """Overlapping components: the two paths reach the same inertia on average."""
    X_blocks = np.random.default_rng(3).normal(size=(100, 80, 2))
    solver = _tuples._BatchedKMeans(3, 10, 300, "k-means++", 1e-4, "centers", 80)
    uniforms = np.random.default_rng(4).random((100, 10 * (1 + 2 * solver.n_local_trials)))
    _, _, batched = solver.fit(_feature_major(X_blocks), uniforms)
    scikit = np.array([
        KMeans(3, n_init=10, random_state=seed).fit(block).inertia_
        for seed, block in enumerate(X_blocks)
    ])
    ratio = batched / scikit
    assert abs(ratio.mean() - 1) < 0.005
    assert np.quantile(np.abs(ratio - 1), 0.9) < 0.01
    assert np.abs(ratio - 1).max() < 0.05


def test_sort_tuple_rows_is_lexicographic():
    tuples = np.array([[[1.0, 2.0], [0.0, 5.0], [1.0, -1.0]]])
    np.testing.assert_array_equal(
        sort_tuple_rows(tuples), [[[0.0, 5.0], [1.0, -1.0], [1.0, 2.0]]]
    )


#: The tuples of k-means on blocks of 20 000 rows (500 blocks of 40 rows, or 40 blocks of
#: 500), recorded from main 038aa15 before issue #17's k-tuple speed work, are in
#: ``data/ktuple_releases_038aa15.npz``: the batched k-means must give the same tuples, to
#: the rounding of another CPU's BLAS kernels (1e-9 relative; bit for bit on this machine).
RECORDED_TUPLES = {
    "k-means++": (4, 500, {}),
    "k-means++, n_init=3": (4, 500, {"n_init": 3}),
    "random": (4, 500, {"init": "random", "n_init": "auto"}),
    "k-means++, 500 rows a block": (4, 40, {}),
    "k-means++, 7 clusters": (7, 40, {}),
}


@pytest.mark.parametrize("name", list(RECORDED_TUPLES))
def test_batched_tuples_are_those_recorded_before_the_speed_work(name):
    n_clusters, n_tuples, params = RECORDED_TUPLES[name]
    X = make_separated_mixture(20_000, 4, 3, separation=30.0, random_state=3)[0]
    base = KMeans(**{"init": "k-means++", "n_init": 1, **params})
    tuples = generate_tuples(X, base, n_clusters, n_tuples, rng=np.random.default_rng(7))
    path = Path(__file__).resolve().parent / "data" / "ktuple_releases_038aa15.npz"
    with np.load(path) as recorded:
        np.testing.assert_allclose(tuples, recorded[f"tuples_{name}"], rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("block_size", [1, 5, 32, 33, 64, 65, 509])  # one step up to 64 rows
def test_sampling_by_weight_is_the_inverse_cdf_of_searchsorted(block_size):
    # The two-step windowed count must be numpy.searchsorted(cumsum, u * total) exactly,
    # zero weights, all-zero blocks and uniforms at 0 and near 1 included.
    rng = np.random.default_rng(block_size)
    weights = rng.random((40, block_size)) * (rng.random((40, block_size)) < 0.4)
    weights[0] = 0.0
    uniforms = rng.random((40, 5))
    uniforms[1:, 0], uniforms[2:, 1] = 0.0, np.nextafter(1.0, 0.0)
    cumulative = np.cumsum(weights, axis=1)
    expected = [np.searchsorted(c, u * c[-1]) for c, u in zip(cumulative, uniforms)]
    assert np.array_equal(_tuples._sample_by_weight(weights, uniforms),
                          np.minimum(expected, block_size - 1))


@pytest.mark.parametrize("backend", [None, "threading"])
def test_a_base_clusterers_warning_on_one_extreme_row_does_not_escape(backend):
    """Review RE-F1: GaussianMixture warned ("distinct clusters ... smaller than n_clusters")
    on the block holding one extreme row, so the neighbour with that row was told apart."""
    from skdpcluster import BudgetAccountant, KTupleClusterer

    rng = np.random.default_rng(0)
    X = rng.standard_normal((4000, 2))
    X[:2000, 0] += 50.0
    neighbour = X.copy()
    neighbour[0] = [1e200, 0.0]
    for data in (X, neighbour):
        estimator = KTupleClusterer(2, data_radius=100.0, base_estimator=GaussianMixture(2),
                                    accountant=BudgetAccountant(), random_state=7, n_jobs=2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if backend is None:
                estimator.set_params(n_jobs=None).fit(data)
            else:
                with joblib.parallel_config(backend=backend):
                    estimator.fit(data)
        assert [str(w.message) for w in caught] == []
        assert estimator.status_ == "success"


def test_two_generations_in_two_threads_silence_blocks_and_restore_the_filters():
    """Re-review V3: with a catch_warnings per generation, two fits in two threads (order A in,
    B in, A out, B out) let B's block warnings through and left the process's filters at
    "ignore" for good. The silence is now one process-wide, re-entrant span."""
    import threading

    a_inside, b_inside, a_done = threading.Event(), threading.Event(), threading.Event()

    class Solver:
        prefer = None

        def __init__(self, name):
            self.name = name

        def bytes_per_block(self, block_size, n_features):
            return 8 * block_size * n_features

        def __call__(self, X_blocks, draws):
            if self.name == "A":
                a_inside.set()
                b_inside.wait()
            else:
                b_inside.set()
                a_done.wait()
                warnings.warn("a block's data-dependent warning", UserWarning)
            return np.zeros((len(X_blocks), 1, 1))

    def run(name):
        _tuples._solve_in_chunks(Solver(name), np.zeros((4, 1)), np.arange(4).reshape(2, 2),
                                 np.zeros((2, 1)), n_jobs=1)
        if name == "A":
            a_done.set()

    with warnings.catch_warnings(record=True) as shown:
        warnings.simplefilter("always")
        before = list(warnings.filters)
        first, second = (threading.Thread(target=run, args=(name,)) for name in "AB")
        first.start()
        a_inside.wait()
        second.start()
        first.join()
        second.join()
        assert [str(w.message) for w in shown] == []
        assert warnings.filters == before


def test_the_multiprocessing_backend_gives_the_sequential_release():
    """Re-review V3: joblib's "multiprocessing" backend refuses return_as="generator", after the
    blocks were drawn: every fit was a charged failure, on any data."""
    from skdpcluster import BudgetAccountant, KTupleClusterer

    X = make_separated_mixture(20_000, n_clusters=2, n_features=2, separation=20.0,
                               random_state=0)[0]
    fits = []
    for backend in (None, "multiprocessing"):
        estimator = KTupleClusterer(2, data_radius=100.0, base_estimator=GaussianMixture(2),
                                    n_jobs=2, random_state=0, accountant=BudgetAccountant())
        if backend is None:
            fits.append(estimator.fit(X))
        else:
            with joblib.parallel_config(backend=backend):
                fits.append(estimator.fit(X))
    assert [fit.status_ for fit in fits] == ["success", "success"]
    np.testing.assert_array_equal(fits[0].cluster_centers_, fits[1].cluster_centers_)
