"""Fits on Dask arrays (issue #20): the release of the in-memory fit, lazy predictions, refusals."""

import subprocess
import sys
import warnings

import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment
from sklearn.base import clone

da = pytest.importorskip("dask.array")
dask = pytest.importorskip("dask")

from skdpcluster import (  # noqa: E402
    BudgetAccountant,
    KTupleClusterer,
    PrivateGaussianMixture,
    SampleAggregateStableKMeans,
)
from skdpcluster.bounds import center_grid  # noqa: E402
from skdpcluster.cluster import _highdim_candidates as hc  # noqa: E402
from skdpcluster.cluster._highdim import (  # noqa: E402
    HighDimInitializer,
    PrivateHighDimKMeans,
    PrivateHighDimKMedian,
)
from skdpcluster.cluster._highdim_chunked import ProjectedChunks, _chunk_children  # noqa: E402
from skdpcluster.cluster._stable import PrivateStableKMeans, PrivateStableKMedian  # noqa: E402
from skdpcluster.cluster._stable_init import (  # noqa: E402
    GridInitializer,
    shifted_cells_per_axis,
)
from skdpcluster.datasets import make_separated_mixture  # noqa: E402
from skdpcluster.local import LocalPrivateStableKMeans  # noqa: E402
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
    """A fitted clone: two fits of one estimator compared must be two objects."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return clone(estimator).set_params(accountant=BudgetAccountant(10, 1e-3)).fit(X)


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
    _assert_same_ledger(chunked, in_memory)
    assert chunked.privacy_spent_ == in_memory.privacy_spent_


def _events(estimator):
    """The fit's ledger as plain dicts (compared exactly where the passes are the same)."""
    return [event.to_dict() for event in estimator.privacy_ledger_]


def _assert_same_ledger(chunked, in_memory):
    """The same events and costs; scales and sensitivities computed from released values (such
    as the selection's truncation, from the initial centres) agree up to the same rounding."""
    for got, expected in zip(_ledger(chunked), _ledger(in_memory), strict=True):
        assert got[:5] == expected[:5]
        for value, reference in zip(got[5:], expected[5:], strict=True):
            if reference is None:  # pytest >= 9.2 refuses approx(None) with a tolerance
                assert value is None
            else:
                assert value == pytest.approx(reference, rel=1e-9, abs=0)


def _matched_centers(chunked, in_memory):
    """``order`` with ``chunked[order[j]]`` nearest ``in_memory[j]`` (a one-to-one matching), and
    the largest distance of a matched pair: the canonical (lexicographic) order of centres
    whose first coordinates nearly tie depends on the noise."""
    distances = np.linalg.norm(chunked[:, None] - in_memory[None], axis=-1)
    rows, columns = linear_sum_assignment(distances)
    order = np.empty_like(rows)
    order[columns] = rows
    return order, distances[rows, columns].max()


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


def _overflow_raises(chunk):
    return float(np.geterr()["over"] == "raise")


def test_chunk_functions_compute_under_the_drivers_floating_point_handling(mixture):
    # Dask's worker threads start from NumPy's default ("warn"), whatever a fit has set.
    rows = DaskRows(da.from_array(mixture, chunks=(CHUNK_ROWS, -1)))
    n_chunks = len(rows.chunk_rows)
    with np.errstate(over="raise"):
        assert rows.map_reduce(_overflow_raises) == n_chunks
        assert sum(rows.map_chunks(_overflow_raises, [()] * n_chunks)) == n_chunks
        lazy = rows.map_rows(lambda block: np.full(len(block), _overflow_raises(block)))
    assert float(lazy.sum().compute()) == len(mixture)


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_dask_fit_on_an_extreme_row_releases_the_same_under_any_floating_point_handling(mixture):
    X = mixture.copy()
    X[0] = 1e200
    estimator = PrivateStableKMeans(4, random_state=0)
    chunks = da.from_array(X, chunks=(CHUNK_ROWS, -1))
    releases = []
    for handling in ("ignore", "raise"):
        with np.errstate(all=handling):
            fitted = _fit(estimator, chunks)
        assert fitted.status_ == "success" and fitted.privacy_spent_["proven"] is True
        releases.append(fitted.cluster_centers_)
    np.testing.assert_array_equal(*releases)


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
     LocalPrivateStableKMeans(4, data_radius=RADIUS), "does not accept Dask input yet"),
    (lambda X: da.from_array(X, chunks=CHUNK_ROWS),  # review: named a missing initializer
     SampleAggregateStableKMeans(1, data_radius=RADIUS),
     "SampleAggregateStableKMeans.fit does not accept Dask input yet"),
    (lambda X: da.from_array(X, chunks=CHUNK_ROWS),
     PrivateHighDimKMedian(4, recovery="one_median", data_radius=RADIUS),
     "recovery='one_median' does not run on Dask"),
    (lambda X: da.from_array(X, chunks=CHUNK_ROWS),
     PrivateHighDimKMeans(1, data_radius=RADIUS), "n_clusters=1"),
    (lambda X: da.from_array(X, chunks=CHUNK_ROWS),
     PrivateGaussianMixture(4, sigma_max=None, data_radius=RADIUS), "sigma_max=None"),
    (lambda X: da.from_array(X, chunks=19),
     PrivateGaussianMixture(4, data_radius=RADIUS), "rechunk X"),
    (lambda X: da.from_array(X, chunks=CHUNK_ROWS),
     PrivateStableKMeans(4, data_radius="data"), "data_radius='data'"),
    (lambda X: da.from_array(X[:, 0], chunks=CHUNK_ROWS),
     PrivateStableKMeans(4, data_radius=RADIUS), "2-D Dask array"),
], ids=["unknown_rows", "nan", "unsupported_estimator", "sample_aggregate_one_cluster",
        "highdim_one_median",
        "highdim_kmeans_one_cluster",
        "mixture_data_sigma", "mixture_chunks_too_small", "data_radius", "one_dimensional"])
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


@pytest.mark.parametrize("estimator", [PrivateStableKMeans(4, random_state=10),
                                       PrivateGaussianMixture(4, random_state=10),
                                       PrivateHighDimKMeans(4, random_state=10)],
                         ids=["stable", "mixture", "highdim"])
def test_passes_hold_at_most_one_chunk_per_task(estimator):
    """Bounded memory: no task of a fit builds anything larger than one chunk of rows.

    The rows are generated chunk-wise (never as one array); a pass maps every
    chunk to a statistic whose size depends on public values only (k, d, the
    grids) and adds those up, so the largest task result is a chunk itself
    (or its clipped copy) or such a statistic, whatever the number of rows. (The
    high-dimensional fit's swap sample is a list of per-chunk parts of at most a
    projected chunk each, about 2^16 rows in all, whatever the number of rows.)
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
        estimator = _fit(estimator, X)
    chunk_bytes = chunk_rows * n_features * 8
    # The largest statistics (int64, public sizes): the private bound's per-column median
    # counts on the centre grid, and the grid counts of all shifted levels (p = d = 4).
    statistic_bytes = 8 * max(2 * n_features * center_grid().size,
                              sum(shifted_cells_per_axis(g) ** n_features
                                  for g in GridInitializer()._levels(n_features)))
    assert len(recorder.sizes) > 10 * n_chunks  # every pass went through the graph
    assert max(recorder.sizes) <= max(chunk_bytes, statistic_bytes)
    assert estimator.status_ in ("success", "fallback")  # the mixture's test may fail here


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
            "from skdpcluster import PrivateGaussianMixture;"
            "PrivateGaussianMixture(2, data_radius=10.0, random_state=0).fit(X).predict(X);"
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
    order, distance = _matched_centers(chunked.cluster_centers_, in_memory.cluster_centers_)
    assert distance < 0.2
    assert isinstance(chunked.labels_, da.Array)
    assert np.mean(np.argsort(order)[chunked.labels_.compute()] == in_memory.labels_) > 0.99


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
    # The clip tau (so the clipped cost's sensitivity and scale) is a function of the released
    # centres, which the chunked sums reproduce up to their rounding only (they differed by
    # 1.1e-16 here before and after R6a F5, whose clipping moved tau by one ulp): those two
    # fields to 1e-12, every other field of the ledger exactly.
    for ours, theirs in zip(_ledger(chunked), _ledger(in_memory), strict=True):
        if ours[1] == "KTupleClusterer/clipped_cost":
            assert ours[:5] == theirs[:5]
            assert ours[5:] == pytest.approx(theirs[5:], rel=1e-12)
        else:
            assert ours == theirs


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
        in_memory = clone(estimator).set_params(accountant=BudgetAccountant(10, 1e-3)).fit(
            mixture, **server)
        chunked = clone(estimator).set_params(accountant=BudgetAccountant(10, 1e-3)).fit(
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
        in_memory = clone(estimator).set_params(accountant=BudgetAccountant(10, 1e-3)).fit(
            mixture, client_ids=ids)
        chunked = clone(estimator).set_params(accountant=BudgetAccountant(10, 1e-3)).fit(
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


# ---------------------------------------------------------------------------
# PrivateGaussianMixture: the split, the tuples and the fresh part on chunks
# ---------------------------------------------------------------------------


def _release(gm):
    """Everything a mixture fit releases (the ledger's details hold the noisy counts)."""
    names = ("status_", "weights_", "means_", "covariances_", "tuple_centers_", "n_tuples_",
             "samples_per_tuple_", "n_fresh_", "fallback_info_", "quality_")
    return {name: getattr(gm, name) for name in names}, [e.to_dict() for e in gm.privacy_ledger_]


def _assert_same_mixture_release(chunked, in_memory):
    (chunked_values, chunked_ledger), (memory_values, memory_ledger) = (
        _release(chunked), _release(in_memory))
    assert chunked_ledger == memory_ledger
    for name, value in memory_values.items():
        if isinstance(value, np.ndarray):
            np.testing.assert_array_equal(chunked_values[name], value, err_msg=name)
        else:
            assert chunked_values[name] == value, name


@pytest.fixture(scope="module")
def far_mixture():
    """Four components 40 apart (unit variance, d = 3): the k-tuple test passes at some seeds."""
    X, _ = make_separated_mixture(12_000, n_clusters=4, n_features=3, separation=40,
                                  random_state=0)
    return X


FAR_RADIUS = 200.0


@pytest.mark.parametrize("params, n_rows, status", [
    ({"data_radius": FAR_RADIUS}, 12_000, "success"),
    ({"data_radius": None}, 12_000, "fallback"),
    ({"data_radius": FAR_RADIUS, "tuple_method": "noisy_centers", "fallback_share": 0.5}, 12_000,
     "fallback"),
    ({"data_radius": FAR_RADIUS}, 800, "fallback"),
    ({"data_radius": FAR_RADIUS, "n_components": 1}, 12_000, "success"),
], ids=["located", "private_bound_in_share_fallback", "reserved_fallback", "too_few_rows",
        "one_component"])
def test_mixture_dask_fit_in_one_chunk_is_the_in_memory_fit(far_mixture, params, n_rows, status):
    """Same blocks, same seed: a one-chunk Dask fit releases exactly what the in-memory fit does.

    One chunk: the split and the blocks are drawn from the same generators as
    in memory (``chunk_generators``), and every pass is one call on that
    chunk, so the sums are the same floating-point operations: bit-for-bit
    equality of every released value and of the ledger (noisy counts in its
    details), on each path (the k-tuple test passed; a private bound and the
    general method on the located method's share; a reserved fallback; too few
    rows for the tuple path; one component).
    """
    X = far_mixture[:n_rows]
    estimator = PrivateGaussianMixture(**{"n_components": 4, **params}, random_state=0)
    in_memory = _fit(estimator, X)
    chunked = _fit(estimator, da.from_array(X, chunks=(n_rows, 3)))
    assert in_memory.status_ == status
    _assert_same_mixture_release(chunked, in_memory)
    assert isinstance(chunked.labels_, da.Array)
    np.testing.assert_array_equal(chunked.labels_.compute(), in_memory.labels_)


def test_mixture_dask_fit_in_chunks_draws_the_blocks_inside_the_chunks(far_mixture):
    """Several chunks change the split and the blocks (random within each chunk, sizes public):
    the same plan and charge, and on rows in random order a release from the same
    distribution, hence centres within the noise of the in-memory ones."""
    estimator = PrivateGaussianMixture(4, data_radius=FAR_RADIUS, random_state=0)
    in_memory = _fit(estimator, far_mixture)
    chunked = _fit(estimator, da.from_array(far_mixture, chunks=CHUNK_ROWS))
    assert chunked.status_ == in_memory.status_ == "success"
    for name in ("n_tuples_", "samples_per_tuple_", "n_fresh_"):
        assert getattr(chunked, name) == getattr(in_memory, name)
    assert chunked.privacy_spent_ == in_memory.privacy_spent_
    assert [(e.label, e.epsilon, e.delta) for e in chunked.privacy_ledger_] == [
        (e.label, e.epsilon, e.delta) for e in in_memory.privacy_ledger_]
    # Unit-variance components of about 1500 fresh rows each: both fits' means are within
    # about 0.1 of the truth (measured: 0.06 apart) and their covariances within about 0.3 of
    # the identity (measured: 0.27 apart; the learner's noise dominates at this size).
    np.testing.assert_allclose(chunked.means_, in_memory.means_, atol=0.2)
    np.testing.assert_allclose(chunked.covariances_, in_memory.covariances_, atol=0.6)
    assert np.mean(chunked.labels_.compute() == in_memory.labels_) > 0.99


@pytest.mark.slow  # 2 x 30 fits: about a minute on 2 busy cores
def test_mixture_dask_fit_in_chunks_has_the_in_memory_distribution(far_mixture):
    """On rows in random order, the chunked split and blocks give releases distributed as in
    memory: over 30 seeds each, the held-out log-likelihood of the released mixture passes a
    two-sample Kolmogorov-Smirnov test, and the k-tuple test passes about as often."""
    from scipy.stats import ks_2samp

    held_out, _ = make_separated_mixture(2_000, n_clusters=4, n_features=3, separation=40,
                                         random_state=99)
    chunked_input = da.from_array(far_mixture, chunks=CHUNK_ROWS)
    results = {"memory": [], "chunks": []}
    for seed in range(30):
        estimator = PrivateGaussianMixture(4, data_radius=FAR_RADIUS, random_state=seed)
        for name, X in (("memory", far_mixture), ("chunks", chunked_input)):
            fitted = _fit(estimator, X)
            results[name].append((fitted.score(held_out), fitted.status_ == "success"))
    memory, chunks = (np.array(results[name]) for name in ("memory", "chunks"))
    assert ks_2samp(memory[:, 0], chunks[:, 0]).pvalue > 1e-3
    # Success counts of two binomial(30, p) samples: a difference above 13 has probability
    # below 4e-4 whatever p (computed exactly over p in [0.01, 0.99]).
    assert abs(memory[:, 1].sum() - chunks[:, 1].sum()) <= 13


def test_mixture_dask_split_changes_one_row_of_one_part_when_one_row_is_replaced(mixture):
    """Privacy of step 1 on chunks: the split is data-independent, so a replaced row is in the
    tuple rows or in the fresh rows of both neighbours, at the same place."""
    from skdpcluster.mixture._gaussian_mixture import _split_rows

    neighbour = mixture.copy()
    neighbour[4_321] = [1e3, -1e3, 5.0, 0.0]
    layout = [500, 600, 0, 900, 800, 700]

    def parts(X):
        rows = DaskRows(da.from_array(X, chunks=CHUNK_ROWS))
        split = _split_rows(rows, layout, np.random.default_rng(4))
        return [part.array.compute() for part in split]

    (tuples, fresh), (tuples_n, fresh_n) = parts(mixture), parts(neighbour)
    assert len(tuples) == sum(layout) and len(fresh) == len(mixture) - sum(layout)
    changed = [np.any(a != b, axis=1).sum() for a, b in ((tuples, tuples_n), (fresh, fresh_n))]
    assert sorted(changed) == [0, 1]
    np.testing.assert_array_equal(np.sort(np.concatenate([tuples, fresh]), axis=0),
                                  np.sort(mixture, axis=0))


def test_mixture_predictions_of_dask_input_are_lazy(far_mixture):
    estimator = _fit(PrivateGaussianMixture(4, data_radius=FAR_RADIUS, random_state=0),
                     far_mixture)
    X = da.from_array(far_mixture, chunks=CHUNK_ROWS)
    for method in ("predict", "predict_proba", "score_samples"):
        lazy = getattr(estimator, method)(X)
        assert isinstance(lazy, da.Array), method
        assert lazy.chunks[0] == X.chunks[0]
        np.testing.assert_allclose(lazy.compute(), getattr(estimator, method)(far_mixture),
                                   rtol=1e-12, err_msg=method)
    assert estimator.score(X) == pytest.approx(estimator.score(far_mixture), rel=1e-12)
    with pytest.raises(ValueError, match="expecting 3 features"):
        estimator.predict(X[:, :2])


# ---------------------------------------------------------------------------
# The stable estimators' k-tuple initializer on Dask rows
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def wide_mixture():
    """Clusters far apart enough for the k-tuple initializer's test to pass at epsilon=4."""
    X, _ = make_separated_mixture(20_000, n_clusters=4, n_features=2, separation=30,
                                  random_state=0)
    return X


def _ktuple_stable(**params):
    return PrivateStableKMeans(4, initializer="ktuple", epsilon=4.0, data_radius=100.0,
                               random_state=24, **params)


def test_stable_ktuple_initializer_in_one_chunk_is_the_in_memory_fit(wide_mixture):
    """The k-tuple initializer reads the clipped rows as chunked rows: with one chunk, the same
    blocks and so the same release and ledger as in memory."""
    in_memory = _fit(_ktuple_stable(), wide_mixture)
    chunked = _fit(_ktuple_stable(), da.from_array(wide_mixture, chunks=(len(wide_mixture), 2)))
    assert in_memory.initializer_status_ == "success"
    _assert_same_release(in_memory, chunked, scale=100.0)
    np.testing.assert_array_equal(chunked.labels_.compute(), in_memory.labels_)


def test_stable_ktuple_initializer_in_chunks(wide_mixture):
    """Several chunks: blocks inside the chunks (the k-tuple clusterer's distribution), the same
    charge, and centres within the noise of the in-memory ones."""
    in_memory = _fit(_ktuple_stable(), wide_mixture)
    chunked = _fit(_ktuple_stable(), da.from_array(wide_mixture, chunks=5_000))
    assert chunked.initializer_status_ == in_memory.initializer_status_ == "success"
    assert chunked.initializer_info_ == in_memory.initializer_info_
    assert [(e.label, e.epsilon, e.delta, e.rho) for e in chunked.privacy_ledger_] == [
        (e.label, e.epsilon, e.delta, e.rho) for e in in_memory.privacy_ledger_]
    # Clusters of 5000 unit-variance rows: both fits within a few hundredths of the true means.
    assert _matched_centers(chunked.cluster_centers_, in_memory.cluster_centers_)[1] < 0.2


def test_tuples_of_one_chunk_are_the_in_memory_tuples(mixture):
    """One chunk: the blocks are drawn from ``rng`` itself (``chunk_generators``), as in memory."""
    from sklearn.cluster import KMeans

    from skdpcluster.ktuple._tuples import generate_tuples, generate_tuples_of_rows

    base = KMeans(4, n_init=1)
    in_memory = generate_tuples(mixture, base, 4, 400, rng=np.random.default_rng(7))
    rng = np.random.default_rng(7)
    chunked = generate_tuples_of_rows(DaskRows(da.from_array(mixture, chunks=(len(mixture), 4))),
                                      base, 4, 400, rng=rng)
    np.testing.assert_array_equal(chunked, in_memory)
    # The task drew from a copy: the caller's generator did not move, whatever the scheduler.
    assert rng.bit_generator.state == np.random.default_rng(7).bit_generator.state


def test_ktuple_fit_in_one_chunk_is_the_in_memory_fit(wide_mixture):
    estimator = KTupleClusterer(4, data_radius=100.0, random_state=0)
    in_memory = _fit(estimator, wide_mixture)
    chunked = _fit(estimator, da.from_array(wide_mixture, chunks=(len(wide_mixture), 2)))
    assert in_memory.status_ == "success"
    np.testing.assert_array_equal(chunked.cluster_centers_, in_memory.cluster_centers_)
    assert _events(chunked) == _events(in_memory)


# --- the high-dimensional estimators (Balcan et al.) ----------------------------------------



@pytest.fixture(scope="module")
def highdim_mixture():
    """d = 12 > p, so the rows are really projected; n = 8000 (p = 4, L = 6 levels)."""
    X, _ = make_separated_mixture(8_000, n_clusters=4, n_features=12, separation=8,
                                  random_state=1)
    return X


_HIGHDIM_FITS = {
    "kmeans": PrivateHighDimKMeans(4, data_radius=RADIUS, random_state=31),
    "kmedian": PrivateHighDimKMedian(4, data_radius=RADIUS, random_state=32),
    "two_trials_two_refinements": PrivateHighDimKMeans(4, n_trials=2, n_refine_iter=2,
                                                       data_radius=RADIUS, random_state=33),
    "private_bound": PrivateHighDimKMeans(4, random_state=34),
    "sparse": PrivateHighDimKMeans(4, recovery="sparse", sparsity=6, coord_bound=12.0,
                                   random_state=35),
    "gaussian_sums": PrivateHighDimKMedian(4, sum_mechanism="gaussian", data_radius=RADIUS,
                                           random_state=36),
    "one_cluster_median": PrivateHighDimKMedian(1, data_radius=RADIUS, random_state=37),
}


@pytest.mark.parametrize("Estimator", [PrivateHighDimKMeans, PrivateHighDimKMedian])
def test_highdim_dask_fit_with_an_empty_chunk(highdim_mixture, Estimator):
    """Review finding: a chunk of no rows (common after filtering a dataframe) ended the private
    step in scikit-learn's gen_batches(0) after randomness was drawn (status_="failure", the
    whole budget charged). Empty chunks add nothing: the release of the same rows without them."""
    estimator = Estimator(4, data_radius=RADIUS, random_state=41)
    n = len(highdim_mixture) // 2
    with_empty = da.from_array(highdim_mixture, chunks=((n, 0, n), (12,)))
    without = da.from_array(highdim_mixture, chunks=((n, n), (12,)))
    got, expected = _fit(estimator, with_empty), _fit(estimator, without)
    assert got.status_ == expected.status_ == "success"
    np.testing.assert_array_equal(got.cluster_centers_, expected.cluster_centers_)


@pytest.mark.parametrize("estimator", list(_HIGHDIM_FITS.values()), ids=list(_HIGHDIM_FITS))
def test_highdim_dask_fit_in_one_chunk_is_the_in_memory_fit(highdim_mixture, estimator):
    """One chunk: every pass computes the in-memory statistics with the same generators, so the
    release, the ledger and every private attribute are the in-memory ones, bit for bit."""
    in_memory = _fit(estimator, highdim_mixture)
    chunked = _fit(estimator, da.from_array(highdim_mixture, chunks=(len(highdim_mixture), 12)))
    assert in_memory.status_ == chunked.status_ == "success"
    np.testing.assert_array_equal(chunked.cluster_centers_, in_memory.cluster_centers_)
    assert _events(chunked) == _events(in_memory)
    for name in ("n_samples_noisy_", "settings_", "n_candidates_", "candidate_depth_",
                 "selected_trial_", "budget_"):
        assert getattr(chunked, name) == getattr(in_memory, name), name
    assert isinstance(chunked.labels_, da.Array)
    np.testing.assert_array_equal(chunked.labels_.compute(), in_memory.labels_)


@pytest.mark.parametrize("estimator", [_HIGHDIM_FITS[name] for name in (
    "kmeans", "kmedian", "two_trials_two_refinements", "sparse")],
    ids=["kmeans", "kmedian", "two_trials_two_refinements", "sparse"])
def test_highdim_dask_fit_in_chunks_equals_the_in_memory_fit(highdim_mixture, estimator):
    """Uneven chunks, fewer rows than the swap sample's 2^16 (every row scored, no coins): the
    level histograms merged over the chunks are the exact in-memory counts (same candidates),
    and the cluster sums differ only by the order of float additions."""
    in_memory = _fit(estimator, highdim_mixture)
    chunked = _fit(estimator, da.from_array(highdim_mixture, chunks=(CHUNK_ROWS, 12)))
    assert chunked.n_candidates_ == in_memory.n_candidates_
    np.testing.assert_allclose(chunked.cluster_centers_, in_memory.cluster_centers_, rtol=0,
                               atol=1e-9 * RADIUS)
    _assert_same_ledger(chunked, in_memory)
    assert chunked.privacy_spent_ == in_memory.privacy_spent_


def _projected(X, chunks, matrix, radius):
    rows = DaskRows(da.from_array(X, chunks=(chunks, X.shape[1])))
    return ProjectedChunks(rows, lambda raw: hc.project_with(raw, matrix, radius),
                           matrix.shape[1])


def test_highdim_level_histogram_merged_over_chunks_is_the_in_memory_histogram(highdim_mixture):
    """Each chunk finds its rows' active cubes from the small set of activated parents; the sum
    of the chunks' histograms is the in-memory level's (cells in the same order, same counts)."""
    rng = np.random.default_rng(5)
    matrix, radius, n_levels = hc.projection_matrix(12, 4, rng), RADIUS, 6
    Y = hc.project_with(highdim_mixture, matrix, radius)
    grid = (rng.uniform(-radius, radius, 4) - 2 * radius, 4 * radius)
    level = hc._Level(epsilon=1.0, gamma=20.0, sensitivity=2.0, neighbouring="replace_one")
    in_memory, level_rng = hc._RowLevels(Y, grid, n_levels), np.random.default_rng(6)
    parents = np.zeros((1, 4), dtype=np.int64)
    projected = _projected(highdim_mixture, CHUNK_ROWS, matrix, radius)
    for depth in range(1, 4):
        expected = hc._child_cells(in_memory.cubes.level(in_memory.alive, depth),
                                   in_memory.parent_of, len(parents), depth)
        merged = projected.rows.map_reduce(_chunk_children, projected.projector, grid, n_levels,
                                           parents, depth)
        np.testing.assert_array_equal(merged.cells, expected[0])
        np.testing.assert_array_equal(merged.counts, expected[2])
        parents, _, _ = in_memory.step(parents, depth, level, level_rng)
    assert 1 < len(parents) < len(Y)  # the levels did keep some cubes and drop others


def test_highdim_swap_sample_of_one_chunk_is_the_in_memory_sample(highdim_mixture):
    rng = np.random.default_rng(7)
    matrix = hc.projection_matrix(12, 4, rng)
    Y = hc.project_with(highdim_mixture, matrix, RADIUS)
    centers = Y[:5]
    expected = hc.swap_sample(hc.DistanceRows(Y, centers, 2), len(Y),
                              np.random.default_rng(8), expected_rows=1000)
    sample = _projected(highdim_mixture, len(Y), matrix, RADIUS).swap_sample(
        len(Y), np.random.default_rng(8), expected_rows=1000)
    got = hc.DistanceRows(sample, centers, 2)
    np.testing.assert_array_equal(got.scaled_t, expected.scaled_t)
    np.testing.assert_array_equal(got.y_sq, expected.y_sq)


def test_highdim_swap_sample_in_chunks_keeps_every_row_independently_at_the_rate(
        highdim_mixture):
    """Several chunks: every chunk's coins come from its own generator (``rng.spawn``), i.i.d.
    Bernoulli(m / n) as in memory; the same generator gives the same rows on every pass."""
    rng = np.random.default_rng(9)
    matrix = hc.projection_matrix(12, 4, rng)
    n, rate = len(highdim_mixture), 0.25
    projected = _projected(highdim_mixture, CHUNK_ROWS, matrix, RADIUS)
    first = projected.swap_sample(n, np.random.default_rng(10), expected_rows=rate * n)
    again = projected.swap_sample(n, np.random.default_rng(10), expected_rows=rate * n)
    np.testing.assert_array_equal(first, again)
    Y = hc.projected_rows(highdim_mixture, matrix, RADIUS).float32_rows(slice(None))
    assert Y.dtype == first.dtype == np.float32  # the points the distances store
    kept = np.isin(Y.view([("", Y.dtype)] * 4).ravel(), first.view([("", Y.dtype)] * 4).ravel())
    assert kept.sum() == len(first)  # the sample holds rows of Y, each at most once
    # Binomial(n, rate) kept in all (5 sigma), and the same rate in the first and last chunk.
    sigma = np.sqrt(n * rate * (1 - rate))
    assert abs(len(first) - n * rate) < 5 * sigma
    for part in (kept[:CHUNK_ROWS], kept[-(n % CHUNK_ROWS):]):
        assert abs(part.mean() - rate) < 5 * np.sqrt(rate * (1 - rate) / len(part))


def test_highdim_fallback_of_the_stable_estimator_runs_on_dask(mixture):
    """``accepts_chunked_rows``: after a failed k-tuple test the stable estimator's
    ``fallback="highdim"`` reads the clipped Dask rows; with one chunk, the in-memory release."""
    estimator = PrivateStableKMeans(4, initializer="ktuple", fallback="highdim",
                                    data_radius=RADIUS, random_state=39)
    in_memory = _fit(estimator, mixture)
    chunked = _fit(estimator, da.from_array(mixture, chunks=(len(mixture), 4)))
    assert in_memory.initializer_status_ == chunked.initializer_status_ == "fallback_highdim"
    np.testing.assert_array_equal(chunked.cluster_centers_, in_memory.cluster_centers_)
    assert _events(chunked) == _events(in_memory)


def test_highdim_initializer_of_the_stable_estimator_in_chunks(mixture):
    estimator = PrivateStableKMeans(4, initializer=HighDimInitializer(), data_radius=RADIUS,
                                    random_state=38)
    in_memory = _fit(estimator, mixture)
    chunked = _fit(estimator, da.from_array(mixture, chunks=CHUNK_ROWS))
    np.testing.assert_allclose(chunked.cluster_centers_, in_memory.cluster_centers_, rtol=0,
                               atol=1e-9 * RADIUS)
    _assert_same_ledger(chunked, in_memory)


def test_highdim_dask_fit_in_chunks_above_the_swap_sample_size():
    """n > 2^16: the local search scores a Poisson sample whose coins now come from per-chunk
    generators. The candidates (exact level histograms) and the ledger are the in-memory ones;
    the swap sample is another draw of the same law, so the release is another draw of the
    in-memory distribution: both local searches choose among the same candidates by scores
    summed over about 2^16 of the same rows (measured: the same cost on 3 seeds; 5 % band)."""
    X, _ = make_separated_mixture(100_000, n_clusters=4, n_features=12, separation=8,
                                  random_state=2)
    estimator = PrivateHighDimKMeans(4, data_radius=RADIUS, random_state=40)
    in_memory = _fit(estimator, X)
    chunked = _fit(estimator, da.from_array(X, chunks=(17_000, 12)))
    assert chunked.n_candidates_ == in_memory.n_candidates_
    _assert_same_ledger(chunked, in_memory)
    assert chunked.score(X) >= 1.05 * in_memory.score(X)  # scores are negative costs


def test_highdim_dask_fit_on_in_process_distributed_cluster(highdim_mixture):
    """The passes run as tasks of a distributed scheduler; their functions and arguments pickle."""
    distributed = pytest.importorskip("distributed")
    import pickle

    estimator = _HIGHDIM_FITS["kmeans"]
    in_memory = _fit(estimator, highdim_mixture)
    X = da.from_array(highdim_mixture, chunks=CHUNK_ROWS)
    with distributed.Client(processes=False, n_workers=2, threads_per_worker=1,
                            dashboard_address=None):
        chunked = _fit(estimator, X)
    np.testing.assert_allclose(chunked.cluster_centers_, in_memory.cluster_centers_, rtol=0,
                               atol=1e-9 * RADIUS)
    data = estimator._prepare(DaskRows(X), np.zeros(12), RADIUS)
    projected = data.project(hc.projection_matrix(12, 4, np.random.default_rng(0)), RADIUS)
    pickle.dumps((data.row_map, projected.projector))  # no closures: process workers can run them
