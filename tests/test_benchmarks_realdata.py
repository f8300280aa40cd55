"""Smoke tests of ``benchmarks/bench_realdata.py`` and its Google runner, at tiny sizes."""

import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import _google as google  # noqa: E402
from benchmarks import bench_realdata as realdata  # noqa: E402


@pytest.fixture(scope="module")
def wine():
    return realdata.datasets(quick=True)["wine"]()


def test_datasets_follow_the_protocol():
    data = realdata.datasets(quick=True)["unbalanced"]()
    assert data.X.shape == (10_000, 6) and data.k == 4
    # Weights 0.7 / 0.2 / 0.07 / 0.03: the smallest component is the one whose mean is kept.
    shares = np.bincount(data.y) / data.y.size
    assert shares == pytest.approx([0.7, 0.2, 0.07, 0.03], abs=0.01)
    assert np.linalg.norm(data.X[data.y == 3].mean(axis=0) - data.smallest_mean) < 0.2
    outliers = realdata.datasets(quick=True)["outliers"]()
    assert outliers.X.shape == (20_000, 4) and np.mean(outliers.y == 3) == pytest.approx(0.01)
    assert np.all(np.linalg.norm(outliers.X[outliers.y == 3], axis=1) == pytest.approx(100.0))


def test_standardized_data_get_the_public_ball(wine):
    assert wine.X.shape == (178, 13) and wine.k == 3
    assert np.allclose(wine.X.mean(axis=0), 0.0, atol=1e-9)
    assert wine.radius == pytest.approx(3 * math.sqrt(13)) and not np.any(wine.center)


def test_rows_score_our_estimators(wine):
    reference = realdata.reference_cost(wine.X, wine.k)
    methods = {m: realdata.METHODS[m] for m in ("stable_kmeans", "stable_kmeans_private_bound")}
    rows = realdata.our_rows("wine", wine, 1.0, [0], reference, methods)
    assert [r["method"] for r in rows] == list(methods)
    for row in rows:
        assert row["status"] == "ok" and row["cost_ratio"] >= 1.0 - 1e-9
        assert -1.0 <= row["ari"] <= 1.0 and math.isnan(row["small_err"])


def test_a_fit_that_releases_nothing_is_a_row_not_an_error(wine):
    def nothing(X, k, epsilon, data, seed):
        return None

    row = realdata.our_rows("wine", wine, 1.0, [0], 1.0, {"none": nothing})[0]
    assert row["status"] == "nothing released" and math.isnan(row["cost_ratio"])


def test_headline_takes_medians_and_the_best_of_ours():
    def row(method, seed, cost, small=math.nan, status="ok"):
        return {"dataset": "d", "epsilon": 1.0, "method": method, "seed": seed,
                "cost_ratio": cost, "ari": 0.5, "small_err": small, "seconds": 1.0,
                "status": status}

    rows = [row("stable_kmeans", s, c, 3.0) for s, c in enumerate((2.0, 4.0, 3.0))]
    rows += [row("highdim_kmeans", s, c, 1.0) for s, c in enumerate((1.5, 1.4, 9.0))]
    rows += [row("ktuple", 0, math.nan, status="nothing released")]
    rows += [row("google_lsh", 0, 1.2)]
    summary = realdata.summarize(rows)
    top = realdata.headline(summary)[0]
    assert top["default"] == 3.0 and top["best_ours"] == "highdim_kmeans"
    assert top["best_cost"] == 1.5 and top["google_lsh"] == 1.2
    assert math.isnan(top["diffprivlib"]) and top["small_err_best"] == 1.0


def test_google_is_skipped_with_a_reason(monkeypatch, tmp_path, capsys):
    monkeypatch.delenv(google.ENV_VAR, raising=False)
    assert google.locate() is None
    assert google.ENV_VAR in capsys.readouterr().out
    assert google.locate(tmp_path) is None
    assert "holds no learning/clustering" in capsys.readouterr().out
    package = tmp_path / "learning" / "clustering"
    package.mkdir(parents=True)
    (package / "clustering_algorithm.py").write_text("")
    for path in (tmp_path, tmp_path / "learning", package):
        assert google.locate(path) == tmp_path / "learning"


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get(google.ENV_VAR), reason=f"{google.ENV_VAR} is not set")
def test_google_runs_side_by_side(wine):
    learning = google.locate()
    runs = google.run_google_clustering(wine.X, wine.k, epsilon=1.0, delta=1e-6,
                                        center=wine.center, radius=wine.radius,
                                        random_states=[0, 0, 1], y=wine.y, learning=learning)
    assert [r["seed"] for r in runs] == [0, 0, 1]
    assert runs[0]["centers"] == runs[1]["centers"]  # the seed makes a run reproducible
    assert np.asarray(runs[0]["centers"]).shape == (wine.k, 13) and runs[0]["cost"] > 0
