"""The memory-bounded passes of issue #17 change no release.

The digests below were recorded from main (commit 156e0e1) before the
passes were chunked: the same seed must give bit-for-bit the same centres
and labels. The chunk sizes are also shrunk so that every blocked loop runs
over many blocks (a few rows each), which the small data would otherwise
fit in one.
"""

import hashlib
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
from skdpcluster.datasets import make_separated_mixture

#: estimator -> (sha256 of cluster_centers_.tobytes(), of labels_ as int64), first 16 hex digits
RECORDED = {
    PrivateHighDimKMeans: ("4eaac50597b6d56a", "cac487f768555375"),
    PrivateHighDimKMedian: ("4eaac50597b6d56a", "cac487f768555375"),
    PrivateStableKMedian: ("48ce8ad975c7bb41", "cac487f768555375"),
}


def _digest(array, dtype):
    return hashlib.sha256(np.ascontiguousarray(array, dtype=dtype).tobytes()).hexdigest()[:16]


@pytest.mark.parametrize("chunk_elements", [None, 64])
@pytest.mark.parametrize("estimator", list(RECORDED), ids=lambda cls: cls.__name__)
def test_release_unchanged_by_the_chunked_passes(estimator, chunk_elements, monkeypatch):
    if chunk_elements is not None:
        monkeypatch.setattr(_highdim_candidates, "CHUNK_ELEMENTS", chunk_elements)
    X = make_separated_mixture(6000, 4, 10, separation=50.0, random_state=1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = estimator(4, data_radius=50.0 + 8 * np.sqrt(10), random_state=5,
                           accountant=BudgetAccountant()).fit(X)
    assert fitted.status_ == "success"
    assert (_digest(fitted.cluster_centers_, np.float64),
            _digest(fitted.labels_, np.int64)) == RECORDED[estimator]
