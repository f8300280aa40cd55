"""The memory-bounded passes of issue #17: bounded peaks, and no release changed.

The label digests below were recorded from main (commit 156e0e1) before the
passes were chunked (the k-median's again when the grid counts became those
the partition reads, issue #17: another draw from the seed, the same
clusters): the same seed must give the same labels, and the chunked passes
bit-for-bit the centres of the unchunked ones. The chunk sizes are also
shrunk so that every blocked loop runs over many blocks (a few rows each),
which the small data would otherwise fit in one. The peaks are what
:mod:`tracemalloc` sees (NumPy reports its buffers), with blocks much
smaller than the data, as at n = 10^6.
"""

import hashlib
import tracemalloc
import warnings

import numpy as np
import pytest

from skdpcluster import (
    BudgetAccountant,
    PrivateHighDimKMeans,
    PrivateHighDimKMedian,
    PrivateStableKMedian,
)
from skdpcluster.cluster import _highdim_candidates
from skdpcluster.cluster._federated_init import clip_rows
from skdpcluster.datasets import make_separated_mixture

#: estimator -> sha256 of labels_ as int64, first 16 hex digits, recorded from main before the
#: passes were chunked (the stable k-median's re-recorded with issue #17's grid counts). The
#: centres' bits depend on the platform's floating-point kernels (BLAS, SIMD paths: the recorded
#: centre digests of a 2-core Xeon did not hold on another 2-core Xeon, on every commit), so the
#: chunked passes' centres are compared with the unchunked ones in the same process instead.
RECORDED_LABELS = {
    PrivateHighDimKMeans: "cac487f768555375",
    PrivateHighDimKMedian: "cac487f768555375",
    PrivateStableKMedian: "f10eb58ffefe5a48",
}


def _digest(array, dtype):
    return hashlib.sha256(np.ascontiguousarray(array, dtype=dtype).tobytes()).hexdigest()[:16]


def _fitted(estimator):
    X = make_separated_mixture(6000, 4, 10, separation=50.0, random_state=1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return estimator(4, data_radius=50.0 + 8 * np.sqrt(10), random_state=5,
                         accountant=BudgetAccountant()).fit(X)


@pytest.mark.parametrize("estimator", list(RECORDED_LABELS), ids=lambda cls: cls.__name__)
def test_release_unchanged_by_the_chunked_passes(estimator, monkeypatch):
    whole = _fitted(estimator)
    monkeypatch.setattr(_highdim_candidates, "CHUNK_ELEMENTS", 64)
    chunked = _fitted(estimator)
    assert whole.status_ == chunked.status_ == "success"
    assert _digest(whole.labels_, np.int64) == RECORDED_LABELS[estimator]
    np.testing.assert_array_equal(chunked.cluster_centers_, whole.cluster_centers_)
    np.testing.assert_array_equal(chunked.labels_, whole.labels_)


def _peak_bytes(function, *args, **kwargs):
    tracemalloc.start()
    try:
        result = function(*args, **kwargs)
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


N_ROWS, N_COMPONENTS = 40_000, 5


@pytest.fixture
def small_blocks(monkeypatch):
    monkeypatch.setattr(_highdim_candidates, "CHUNK_ELEMENTS", 5000)
    monkeypatch.setattr(_highdim_candidates, "_CACHED_ELEMENTS", 5000)
    return np.random.default_rng(0).standard_normal((N_ROWS, 10)) * 5.0


def test_projection_clips_in_place(small_blocks):
    # Was 3.4 x the output (X @ G, then _project_onto_ball's offsets, product and sum).
    Y, peak = _peak_bytes(_highdim_candidates.project_rows, small_blocks, N_COMPONENTS, 8.0,
                          np.random.default_rng(1))
    assert peak <= 1.1 * Y.nbytes


def test_candidates_store_no_coordinates_of_all_the_points(small_blocks):
    # Was 14 int64 values per point (a float and an int64 copy of the n x p coordinates, the
    # n x p low bits); now a few index vectors: alive, parent_of, keys, inverse and their
    # successors, <= 10 values per point.
    Y = _highdim_candidates.project_rows(small_blocks, N_COMPONENTS, 8.0,
                                         np.random.default_rng(1))
    _, peak = _peak_bytes(
        _highdim_candidates.private_candidates, Y, radius=8.0, n_shifts=1, n_levels=4,
        level_epsilon=1.0, gamma=20.0, count_sensitivity=1.0, root_weight=float(N_ROWS),
        neighbouring="add_remove", rng=np.random.default_rng(2))
    assert peak <= 10 * 8 * N_ROWS


def test_distances_are_built_and_argmin_taken_by_blocks(small_blocks):
    Y = _highdim_candidates.project_rows(small_blocks, N_COMPONENTS, 8.0,
                                         np.random.default_rng(1))
    # float32 -2 Y^T and float64 |y|^2: 4p + 8 bytes per point (was 3 float32 copies of Y on top),
    # and one block's temporaries (the rounding toward 0 and the float64 norms: 40 bytes a value).
    distances, peak = _peak_bytes(_highdim_candidates.DistanceRows, Y, Y[:50], 2)
    assert peak <= (4 * N_COMPONENTS + 8) * N_ROWS + 40 * 5000
    slots = np.arange(0, 50, 5)
    nearest, peak = _peak_bytes(distances.nearest, slots)
    every = np.hstack([block.copy() for _, block in distances.column_blocks(slots)])
    assert np.array_equal(nearest, every.argmin(axis=0))
    assert peak <= 8 * N_ROWS + 4 * 8 * 5000  # the labels and a few float64 blocks, never k x n


def test_projection_maps_the_raw_rows_block_by_block(small_blocks):
    # The high-dim fit projects the raw rows through the clipping map block by block, so the
    # clipped copy of the data (made later, for the recovery) is not stored at this peak.
    center, radius = np.full(10, 0.5), 12.0

    def clip(rows):
        return clip_rows(rows, center, radius)

    Y, peak = _peak_bytes(_highdim_candidates.project_rows, small_blocks, N_COMPONENTS, 8.0,
                          np.random.default_rng(1), row_map=clip)
    expected = _highdim_candidates.project_rows(clip(small_blocks), N_COMPONENTS, 8.0,
                                                np.random.default_rng(1))
    assert np.array_equal(Y, expected)
    assert peak <= 1.1 * Y.nbytes + 3 * 8 * 5000  # Y and a few blocks, never the clipped copy
