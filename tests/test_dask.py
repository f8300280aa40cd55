"""Fits on Dask arrays (issue #20): the release of the in-memory fit, lazy predictions, refusals."""

import subprocess
import sys
import warnings

import numpy as np
import pytest
from sklearn.base import clone

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

from skdpcluster import BudgetAccountant, KTupleClusterer, PrivateGaussianMixture  # noqa: E402
from skdpcluster.bounds import center_grid  # noqa: E402
from skdpcluster.cluster._stable import PrivateStableKMeans, PrivateStableKMedian  # noqa: E402
from skdpcluster.cluster._stable_init import (  # noqa: E402
    GridInitializer,
    shifted_cells_per_axis,
)
from skdpcluster.datasets import make_separated_mixture  # noqa: E402
from skdpcluster.utils._data import DaskRows, RowChunk, as_rows  # noqa: E402

RADIUS = 20.0
#: Uneven chunks (the last one shorter), so the per-chunk sums really are partial sums.
CHUNK_ROWS = 1_700


@pytest.fixture(scope="module")
def mixture():
    X, _ = make_separated_mixture(10_000, n_clusters=4, n_features=4, separation=8,
                                  random_state=0)
    return X


def _fit(estimator, X):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return estimator.set_params(accountant=BudgetAccountant(10, 1e-3)).fit(X)


def _ledger(estimator):
    return [(e.mechanism, e.label, e.epsilon, e.delta, e.rho, e.scale, e.sensitivity)
            for e in estimator.privacy_ledger_]


def _assert_same_release(in_memory, chunked, scale):
    """Same noise draws and statistics equal up to the order of float additions.

    The sums of a pass are added chunk by chunk instead of row by row, a
    relative rounding difference of about n * 2^-53; released centres are
    noisy means of such sums, so they agree to well within 1e-9 of the data
    scale, and every discrete choice (grid level, heavy cells, selection) is
    the same.
    """
    assert chunked.selected_ == in_memory.selected_
    assert chunked.initializer_info_ == in_memory.initializer_info_
    np.testing.assert_allclose(chunked.cluster_centers_, in_memory.cluster_centers_, rtol=0,
                               atol=1e-9 * scale)
    for name, centers in in_memory.candidate_centers_.items():
        np.testing.assert_allclose(chunked.candidate_centers_[name], centers, rtol=0,
                                   atol=1e-9 * scale)
    assert _ledger(chunked) == _ledger(in_memory)
    assert chunked.privacy_spent_ == in_memory.privacy_spent_


@pytest.mark.parametrize("estimator", [
    PrivateStableKMeans(4, final_lloyd_step=True, random_state=3),
    PrivateStableKMedian(4, gd_iterations=8, random_state=4),
], ids=["kmeans", "kmedian"])
@pytest.mark.parametrize("data_radius", [RADIUS, None], ids=["public_bound", "private_bound"])
def test_dask_fit_equals_in_memory_fit(mixture, estimator, data_radius):
    """Same data, same seed: the Dask fit releases what the in-memory fit releases."""
    in_memory = _fit(estimator.set_params(data_radius=data_radius), mixture)
    chunked = _fit(estimator.set_params(data_radius=data_radius),
                   da.from_array(mixture, chunks=(CHUNK_ROWS, 2)))
    _assert_same_release(in_memory, chunked, scale=RADIUS)
    if data_radius is None:
        assert chunked.data_radius_ == in_memory.data_radius_
        np.testing.assert_array_equal(chunked.data_center_, in_memory.data_center_)
    labels = chunked.labels_
    assert isinstance(labels, da.Array)
    np.testing.assert_array_equal(labels.compute(), in_memory.labels_)


def test_dask_fit_on_in_process_distributed_cluster(mixture):
    """The passes run as tasks of a distributed scheduler (threads of this process)."""
    distributed = pytest.importorskip("distributed")
    estimator = PrivateStableKMeans(4, data_radius=RADIUS, random_state=5)
    in_memory = _fit(estimator, mixture)
    with distributed.Client(processes=False, n_workers=2, threads_per_worker=1,
                            dashboard_address=None):
        chunked = _fit(estimator, da.from_array(mixture, chunks=CHUNK_ROWS))
    _assert_same_release(in_memory, chunked, scale=RADIUS)


def test_dask_dataframe_of_numeric_columns(mixture):
    dd = pytest.importorskip("dask.dataframe")
    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame(mixture, columns=["a", "b", "c", "d"])
    estimator = PrivateStableKMeans(4, data_radius=RADIUS, random_state=6)
    in_memory = _fit(estimator, frame)
    chunked = _fit(estimator, dd.from_pandas(frame, npartitions=4))
    _assert_same_release(in_memory, chunked, scale=RADIUS)
    np.testing.assert_array_equal(chunked.feature_names_in_, ["a", "b", "c", "d"])


def test_float32_dask_input_keeps_float32(mixture):
    estimator = _fit(PrivateStableKMeans(4, data_radius=RADIUS, random_state=7),
                     da.from_array(mixture.astype(np.float32), chunks=CHUNK_ROWS))
    assert estimator.cluster_centers_.dtype == np.float32


def test_predict_and_transform_of_dask_input_are_lazy(mixture):
    estimator = _fit(PrivateStableKMeans(4, data_radius=RADIUS, random_state=8), mixture)
    X = da.from_array(mixture, chunks=CHUNK_ROWS)
    labels, distances = estimator.predict(X), estimator.transform(X)
    assert isinstance(labels, da.Array) and isinstance(distances, da.Array)
    assert labels.chunks == (X.chunks[0],) and distances.chunks == (X.chunks[0], (4,))
    np.testing.assert_array_equal(labels.compute(), estimator.predict(mixture))
    np.testing.assert_allclose(distances.compute(), estimator.transform(mixture), rtol=1e-12)
    assert estimator.score(X) == pytest.approx(estimator.score(mixture), rel=1e-10)
    with pytest.raises(ValueError, match="expecting 4 features"):
        estimator.predict(X[:, :3])


@pytest.mark.parametrize("make_input, estimator, match", [
    (lambda X: da.from_array(X, chunks=CHUNK_ROWS)[da.from_array(X[:, 0] > -1e9,
                                                                  chunks=CHUNK_ROWS)],
     PrivateStableKMeans(4, data_radius=RADIUS), "unknown chunk sizes"),
    (lambda X: da.from_array(np.where(np.arange(len(X))[:, None] == 5000, np.nan, X),
                             chunks=CHUNK_ROWS),
     PrivateStableKMeans(4, data_radius=RADIUS), "NaN or infinity"),
    (lambda X: da.from_array(X, chunks=CHUNK_ROWS),
     PrivateGaussianMixture(4, data_radius=RADIUS), "does not accept Dask input yet"),
    (lambda X: da.from_array(X, chunks=CHUNK_ROWS),
     PrivateStableKMeans(4, initializer="ktuple", data_radius=RADIUS), "initializer='ktuple'"),
    (lambda X: da.from_array(X, chunks=CHUNK_ROWS),
     PrivateStableKMeans(4, data_radius="data"), "data_radius='data'"),
    (lambda X: da.from_array(X[:, 0], chunks=CHUNK_ROWS),
     PrivateStableKMeans(4, data_radius=RADIUS), "2-D Dask array"),
], ids=["unknown_rows", "nan", "unsupported_estimator", "ktuple_initializer", "data_radius",
        "one_dimensional"])
def test_bad_dask_input_raises_before_spending(mixture, make_input, estimator, match):
    accountant = BudgetAccountant(10, 1e-3)
    with pytest.raises(ValueError, match=match):
        estimator.set_params(accountant=accountant).fit(make_input(mixture))
    assert accountant.ledger == []


def test_failed_dask_fit_keeps_the_previous_fit(mixture):
    estimator = _fit(PrivateStableKMeans(4, data_radius=RADIUS, random_state=9), mixture)
    before = {k: v for k, v in vars(estimator).items() if k.endswith("_")}
    X = da.from_array(mixture, chunks=CHUNK_ROWS)
    with pytest.raises(ValueError, match="unknown chunk sizes"):
        estimator.fit(X[X[:, 0] > -1e9])
    after = {k: v for k, v in vars(estimator).items() if k.endswith("_")}
    assert after.keys() == before.keys()
    assert all(after[k] is before[k] for k in before)


class _ResultSizes(dask.callbacks.Callback):
    """Records the size of every task result of a computation."""

    def __init__(self):
        super().__init__()
        self.sizes = []

    def _posttask(self, key, result, dsk, state, worker_id):
        self.sizes.append(getattr(result, "nbytes", 0) if not isinstance(result, tuple)
                          else sum(getattr(part, "nbytes", 0) for part in result))


def test_passes_hold_at_most_one_chunk_per_task():
    """Bounded memory: no task of a fit builds anything larger than one chunk of rows.

    The rows are generated chunk-wise (never as one array); a pass maps every
    chunk to a statistic whose size depends on public values only (k, d, the
    grids) and adds those up, so the largest task result is a chunk itself
    (or its clipped copy) or such a statistic, whatever the number of rows.
    """
    n_chunks, chunk_rows, n_features = 12, 2_000, 4
    means = 8.0 * np.eye(n_features)

    def block(block_id=None):
        rng = np.random.default_rng(block_id[0])
        return means[rng.integers(4, size=chunk_rows)] + rng.standard_normal((chunk_rows,
                                                                              n_features))

    X = da.map_blocks(block, chunks=((chunk_rows,) * n_chunks, (n_features,)), dtype=float)
    recorder = _ResultSizes()
    with recorder, dask.config.set(scheduler="synchronous"):
        estimator = _fit(PrivateStableKMeans(4, random_state=10), X)
    chunk_bytes = chunk_rows * n_features * 8
    # The largest statistics (int64, public sizes): the private bound's per-column median
    # counts on the centre grid, and the grid counts of all shifted levels (p = d = 4).
    statistic_bytes = 8 * max(2 * n_features * center_grid().size,
                              sum(shifted_cells_per_axis(g) ** n_features
                                  for g in GridInitializer()._levels(n_features)))
    assert len(recorder.sizes) > 10 * n_chunks  # every pass went through the graph
    assert max(recorder.sizes) <= max(chunk_bytes, statistic_bytes)
    assert estimator.status_ == "success"


def test_in_memory_rows_call_the_function_once():
    X = np.arange(12.0).reshape(6, 2)
    assert as_rows(X).map_reduce(lambda chunk: chunk.X.sum()) == X.sum()
    rows = DaskRows(da.from_array(X, chunks=4))
    assert rows.map_reduce(lambda chunk, c: (chunk.X.sum(axis=0), c * len(chunk.X)), 2.0)[1] == 12.0
    assert isinstance(RowChunk(X).sq_norms, np.ndarray)


def test_importing_and_fitting_in_memory_does_not_import_dask():
    code = ("import sys, numpy as np; from skdpcluster.cluster._stable import PrivateStableKMeans;"
            "from skdpcluster.bounds import private_bounds;"
            "import warnings; warnings.simplefilter('ignore');"
            "X = np.random.default_rng(0).standard_normal((3000, 3));"
            "PrivateStableKMeans(2, random_state=0).fit(X);"
            "assert 'dask' not in sys.modules, 'dask imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------
# KTupleClusterer: blocks inside the chunks
# ---------------------------------------------------------------------------


def _tuple_statistic(tuples):
    """One number per tuple: the sum of its centres' norms (invariant to their order)."""
    return np.linalg.norm(tuples, axis=2).sum(axis=1)


@pytest.mark.parametrize("order, same", [("shuffled", True), ("sorted_by_cluster", False)])
def test_chunked_tuples_have_the_in_memory_distribution_on_exchangeable_rows(order, same):
    """Chunking changes the blocks; the tuples keep their distribution if rows are exchangeable.

    In memory the blocks are a random partition of all rows; on Dask, of
    each chunk's rows. On rows in random order the two tuple samples pass a
    two-sample Kolmogorov-Smirnov test; on rows sorted by cluster (not
    exchangeable: each chunk sees one or two clusters) they fail it, which
    shows the test can tell and documents the condition.
    """
    from scipy.stats import ks_2samp
    from sklearn.cluster import KMeans

    from skdpcluster.ktuple._tuples import generate_tuples, generate_tuples_of_rows

    X, y = make_separated_mixture(24_000, n_clusters=4, n_features=2, separation=3,
                                  random_state=1)
    if order == "sorted_by_cluster":
        X = X[np.argsort(y, kind="stable")]
    base, n_tuples = KMeans(4, n_init=1), 600
    in_memory = generate_tuples(X, base, 4, n_tuples, rng=np.random.default_rng(0))
    chunked = generate_tuples_of_rows(DaskRows(da.from_array(X, chunks=4_000)), base, 4,
                                      n_tuples, rng=np.random.default_rng(1))
    assert chunked.shape == in_memory.shape
    p_value = ks_2samp(_tuple_statistic(in_memory), _tuple_statistic(chunked)).pvalue
    assert (p_value > 1e-3) if same else (p_value < 1e-6)


def test_chunked_tuples_change_at_most_one_tuple_when_one_row_is_replaced():
    """Privacy of the tuple path: every row is in at most one block, on Dask as in memory."""
    from sklearn.cluster import KMeans

    from skdpcluster.ktuple._tuples import generate_tuples_of_rows

    X, _ = make_separated_mixture(6_000, n_clusters=2, n_features=2, separation=4,
                                  random_state=2)
    neighbour = X.copy()
    neighbour[3_333] = [1e3, -1e3]

    def tuples(rows):
        return generate_tuples_of_rows(DaskRows(da.from_array(rows, chunks=1_000)),
                                       KMeans(2, n_init=1), 2, 150,
                                       rng=np.random.default_rng(3))

    changed = np.any(tuples(X) != tuples(neighbour), axis=(1, 2))
    assert changed.sum() <= 1


def test_allocate_blocks_fills_the_chunks_in_proportion():
    from skdpcluster.ktuple._tuples import allocate_blocks

    blocks = allocate_blocks([1_000, 1_000, 500, 37], 101, 4)
    assert blocks.sum() == 101 and np.all(blocks * 4 <= [1_000, 1_000, 500, 37])
    assert list(blocks) == [40, 40, 20, 1]
    with pytest.raises(ValueError, match="rechunk X"):
        allocate_blocks([7] * 10, 11, 4)


def test_ktuple_fit_on_dask(mixture):
    """The k-tuple fit runs on Dask: same plan and ledger structure, centres close to in memory."""
    estimator = KTupleClusterer(4, data_radius=RADIUS, random_state=11)
    in_memory = _fit(estimator, mixture)
    chunked = _fit(estimator, da.from_array(mixture, chunks=2_500))
    assert in_memory.status_ == chunked.status_ == "success"
    assert chunked.n_tuples_ == in_memory.n_tuples_
    assert [(e.label, e.epsilon, e.delta, e.rho) for e in chunked.privacy_ledger_] == [
        (e.label, e.epsilon, e.delta, e.rho) for e in in_memory.privacy_ledger_]
    # Different blocks, same clusters: both near the true means (8 apart, unit variance).
    np.testing.assert_allclose(chunked.cluster_centers_, in_memory.cluster_centers_, atol=0.2)
    assert isinstance(chunked.labels_, da.Array)
    assert np.mean(chunked.labels_.compute() == in_memory.labels_) > 0.99


def test_ktuple_fallback_runs_on_dask_rows(mixture):
    """A reserved fallback share fits PrivateStableKMeans on the same Dask rows."""
    estimator = KTupleClusterer(4, method="noisy_centers", fallback_share=0.5,
                                data_radius=RADIUS, random_state=12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        chunked = _fit(estimator, da.from_array(mixture, chunks=2_500))
    assert chunked.status_ == "fallback"
    assert np.all(np.isfinite(chunked.cluster_centers_))
    assert chunked.privacy_spent_["epsilon"] <= 1.0 + 1e-9


def test_ktuple_dask_chunks_too_small_for_the_blocks_raise_before_spending(mixture):
    accountant = BudgetAccountant(10, 1e-3)
    with pytest.raises(ValueError, match="rechunk X"):
        KTupleClusterer(4, data_radius=RADIUS, fallback_share=0.0,
                        accountant=accountant).fit(da.from_array(mixture, chunks=3))
    assert accountant.ledger == []


def _uniform_noise():
    """Rows with no clusters: the located method fails and the general method answers."""
    return np.random.default_rng(0).uniform(-1.0, 1.0, size=(20_000, 6))


def test_ktuple_general_method_in_share_runs_on_dask_rows():
    """A failed location runs the general method (GridInitializer) on the Dask rows themselves.

    Same seed, same failed location outcome: the in-share general method's
    passes are map-reduces of the clipped chunks and release what it releases
    in memory (rounding of the chunk-wise sums only); the charge is the same.
    """
    U = _uniform_noise()
    estimator = KTupleClusterer(4, random_state=3)
    in_memory = _fit(estimator, U)
    chunked = _fit(estimator, da.from_array(U, chunks=CHUNK_ROWS * 3))
    assert in_memory.status_ == chunked.status_ == "fallback"
    assert chunked.fallback_info_ == in_memory.fallback_info_
    assert chunked.fallback_info_["method"] == "grid"
    assert chunked.located_info_["failed_step"] == in_memory.located_info_["failed_step"]
    np.testing.assert_allclose(chunked.cluster_centers_, in_memory.cluster_centers_, rtol=0,
                               atol=1e-9)
    assert _ledger(chunked) == _ledger(in_memory)


def test_ktuple_cost_estimate_on_dask_rows():
    """``estimate_cost=True`` on Dask: the clipped cost is one map-reduce, the same release."""
    U = _uniform_noise()
    estimator = KTupleClusterer(4, estimate_cost=True, random_state=3)
    in_memory = _fit(estimator, U)
    chunked = _fit(estimator, da.from_array(U, chunks=CHUNK_ROWS * 3))
    assert chunked.status_ == in_memory.status_ == "fallback"
    assert chunked.quality_.keys() == in_memory.quality_.keys()
    for key, value in in_memory.quality_.items():
        if isinstance(value, float):
            assert chunked.quality_[key] == pytest.approx(value, rel=1e-9)
        else:
            assert chunked.quality_[key] == value
    assert _ledger(chunked) == _ledger(in_memory)


def test_ktuple_one_cluster_refuses_dask_input_before_spending(mixture):
    accountant = BudgetAccountant(10, 1e-3)
    with pytest.raises(ValueError, match=r"n_clusters=1\) does not accept Dask input"):
        KTupleClusterer(1, data_radius=RADIUS, accountant=accountant).fit(
            da.from_array(mixture, chunks=CHUNK_ROWS))
    assert accountant.ledger == []


@pytest.mark.parametrize("n_features", [3, 8], ids=["unprojected", "projected"])
def test_grid_initializer_multiresolution_on_dask_rows(n_features):
    """The multi-resolution grid in two passes (counts of all levels, leaf sums) on chunks.

    The same leaves (finest level, number of leaves) and centres equal to the
    in-memory ones up to the rounding of chunk-wise sums.
    """
    X, _ = make_separated_mixture(12_000, n_clusters=4, n_features=n_features, separation=8,
                                  random_state=1)
    radius = float(np.max(np.linalg.norm(X, axis=1)))
    results = []
    for rows in (X, DaskRows(da.from_array(X, chunks=CHUNK_ROWS))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            results.append(GridInitializer().fit_centers(
                rows, 4, budget={"rho": 0.5}, data_radius=radius, neighbouring="replace_one",
                rng=np.random.default_rng(5)))
    (in_memory, memory_events, memory_info), (chunked, chunked_events, chunked_info) = results
    assert chunked_info == memory_info
    assert memory_info["n_heavy_cells"] >= 4
    np.testing.assert_allclose(chunked, in_memory, rtol=0, atol=1e-9 * radius)
    assert [(e.label, e.rho, e.scale) for e in chunked_events] == [
        (e.label, e.rho, e.scale) for e in memory_events]


# ---------------------------------------------------------------------------
# FederatedPrivateKMeans: one shard per chunk
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("params, with_server", [
    ({"data_radius": RADIUS}, False),
    ({"data_radius": None}, False),
    ({"data_radius": RADIUS}, True),
], ids=["public_bound", "private_bound", "feddp_init"])
def test_federated_dask_fit_equals_in_memory_fit(mixture, params, with_server):
    from skdpcluster import FederatedPrivateKMeans

    server = {"X_server": mixture[::50]} if with_server else {}
    estimator = FederatedPrivateKMeans(4, random_state=13, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        in_memory = estimator.set_params(accountant=BudgetAccountant(10, 1e-3)).fit(
            mixture, **server)
        chunked = estimator.set_params(accountant=BudgetAccountant(10, 1e-3)).fit(
            da.from_array(mixture, chunks=CHUNK_ROWS), **server)
    np.testing.assert_allclose(chunked.cluster_centers_, in_memory.cluster_centers_, rtol=0,
                               atol=1e-9 * RADIUS)
    assert chunked.n_rounds_ == in_memory.n_rounds_
    assert _ledger(chunked) == _ledger(in_memory)
    np.testing.assert_array_equal(chunked.labels_.compute(), in_memory.labels_)


def test_federated_chunks_as_clients_equal_client_ids_per_chunk(mixture):
    """``client_ids="chunks"``: each partition is one client, as explicit ids per chunk are."""
    from skdpcluster import FederatedPrivateKMeans

    X = da.from_array(mixture, chunks=CHUNK_ROWS)
    ids = np.repeat(np.arange(len(X.chunks[0])), X.chunks[0])
    estimator = FederatedPrivateKMeans(4, privacy_unit="client", init="sphere_packing",
                                       data_radius=RADIUS, random_state=14)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        in_memory = estimator.set_params(accountant=BudgetAccountant(10, 1e-3)).fit(
            mixture, client_ids=ids)
        chunked = estimator.set_params(accountant=BudgetAccountant(10, 1e-3)).fit(
            X, client_ids="chunks")
    np.testing.assert_allclose(chunked.cluster_centers_, in_memory.cluster_centers_, rtol=0,
                               atol=1e-9 * RADIUS)
    assert _ledger(chunked) == _ledger(in_memory)
    with pytest.raises(ValueError, match="client_ids must be None"):
        estimator.fit(X, client_ids=ids)


def test_map_reduce_over_more_chunks_than_one_batch():
    """Batches of CHUNKS_PER_BATCH chunks: every chunk is counted once, in any batch layout."""
    from skdpcluster.utils._data import CHUNKS_PER_BATCH

    X = np.arange(2.0 * 1_000).reshape(-1, 2)
    rows = DaskRows(da.from_array(X, chunks=7))
    assert len(X) // 7 > 2 * CHUNKS_PER_BATCH
    sums, counts = rows.map_reduce(lambda chunk: (chunk.X.sum(axis=0), len(chunk.X)))
    np.testing.assert_array_equal(sums, X.sum(axis=0))
    assert counts == len(X)


def test_stable_one_cluster_on_dask_input(mixture):
    """Issue #14: k-median's 1-median runs pass by pass (the in-memory release); k-means keeps
    its k-cluster path on Dask input (the private average needs the rows in memory)."""
    chunked_X = da.from_array(mixture, chunks=CHUNK_ROWS)
    median = PrivateStableKMedian(1, data_radius=RADIUS, random_state=0)
    in_memory, chunked = _fit(clone(median), mixture), _fit(clone(median), chunked_X)
    assert [e.label for e in chunked.privacy_ledger_] == ["PrivateStableKMedian/private_one_median"]
    np.testing.assert_allclose(chunked.cluster_centers_, in_memory.cluster_centers_, rtol=0,
                               atol=1e-9 * RADIUS)
    assert _ledger(chunked) == _ledger(in_memory)
    assert np.array_equal(np.asarray(chunked.labels_), np.zeros(len(mixture)))
    mean = _fit(PrivateStableKMeans(1, data_radius=RADIUS, random_state=0), chunked_X)
    assert mean.status_ == "success" and mean.privacy_ledger_[-1].label == "stable/zcdp_total"
