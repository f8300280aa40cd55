"""Smoke tests of the benchmark modules: their smallest units at tiny sizes, never a benchmark."""

import math
import sys
from pathlib import Path

import numpy as np
import pytest

# ``benchmarks`` is a top-level folder of the repository, not part of the package.
ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import bench_ktuple_paper as paper
from benchmarks import bench_scaling as scaling
from benchmarks import bench_speed as speed
from skdpcluster.ktuple import min_tuples


@pytest.mark.parametrize(
    "labels, expected",
    [
        ([1, 1, 0, 0], True),  # a bijection, in either order
        ([0, 0, 1, 1], True),
        ([1, 0, 0, 0], False),  # component 0 split between two centres
        ([0, 0, 0, 0], False),  # both components on one centre
        ([-1, -1, -1, -1], False),  # nothing released
    ],
)
def test_separates_is_the_papers_criterion(labels, expected):
    y = np.array([0, 0, 1, 1])
    assert paper.separates(np.array(labels), y, 2) is expected


def test_settings_follow_the_protocol():
    quick = paper.settings(quick=True)
    assert {(s.separation, s.mode) for s in quick} == {
        (r, mode) for r in (128, 512) for mode in ("corrected", "paper")
    }
    full = paper.settings(quick=False)
    assert {s.test for s in full} == {"Test1", "Test2", "Test3", "Averages"}
    test1 = [s for s in full if s.test == "Test1"]
    assert sorted({s.separation for s in test1}) == [32, 64, 128, 256, 512]
    # The minimal admissible numbers of tuples of the two modes (review: 5019; spec §10.4: 4296).
    assert {s.mode: s.n_tuples(100) for s in quick} == {"corrected": 5019, "paper": 4296}
    assert paper.Setting("Averages", 2, 1, 64, "corrected", "averages").n_tuples(10**6) == 10**6


def test_success_rate_is_one_when_easy_and_zero_when_impossible():
    easy = paper.Setting("Test1", 2, 1, 1e5, "corrected")
    assert paper.success_count(easy, 8, 3) == (3, 3, 3)
    overlapping = paper.Setting("Test1", 2, 1, 0.5, "corrected")
    successes, runs, _ = paper.success_count(overlapping, 8, 3)
    assert successes == 0
    assert runs == 2  # two failures of three already decide both criteria


def test_failure_floor_is_small_on_agreeing_tuples():
    # The private test fails only through its own noise here: well below beta = 0.05.
    assert paper.failure_floor("corrected", 20) <= 0.1


def test_paper_mode_runs_through_the_estimator():
    assert paper.run_once(paper.Setting("Test1", 2, 1, 1e5, "paper"), 8, 0) == (True, True)


def test_timing_row_has_positive_times_and_ratios():
    X = speed.make_data(20_000, 1e4, n_clusters=2, n_features=2)  # 10 rows per tuple
    row = speed.compare(X, n_clusters=2)
    assert row["status"] == "success"
    assert row["n_tuples"] == 20_000 // (5 * 2)  # the default "located" method: n // (5 k) tuples
    for key in ("ktuple_s", "kmeans_s", "time_ratio", "ktuple_mib", "kmeans_mib", "memory_ratio"):
        assert row[key] > 0 and math.isfinite(row[key])
    assert row["time_ratio"] == pytest.approx(row["ktuple_s"] / row["kmeans_s"])


def test_breakdown_times_the_parts():
    X = speed.make_data(5000, 1e4, n_clusters=2, n_features=2)
    parts = speed.breakdown(X, min_tuples(1.0, 1e-6, 0.05), n_clusters=2, per_block=False)
    assert parts["tuples_s"] > 0 and parts["aggregate_s"] > 0
    assert math.isnan(parts["per_block_s"])


def test_growth_exponent_recovers_a_power_law():
    rows = [{"n_samples": n, "seconds": 3.0 * n**1.5} for n in (10, 100, 1000)]
    assert speed.growth_exponent(rows, "seconds") == pytest.approx(1.5)


def test_practical_summary_counts_releases_and_targets():
    from benchmarks import bench_ktuple_practical as practical

    rows = [
        {"dataset": "k4_d4", "n": 10, "method": "located", "released": True, "ok": True,
         "ari": 1.0, "cost_ratio": 1.01},
        {"dataset": "k4_d4", "n": 10, "method": "located", "released": True, "ok": False,
         "ari": 0.5, "cost_ratio": 1.5},
        {"dataset": "k4_d4", "n": 20, "method": "located", "released": False, "ok": False},
    ]
    summary = practical.summarize(rows)
    assert [(r["n"], r["released"], r["target_met"]) for r in summary] == [(10, 2, 1), (20, 0, 0)]
    assert summary[0]["cost_ratio_median"] == 1.255 and math.isnan(summary[1]["ari_min"])
    assert practical.smallest_n(summary) is None
    summary[1]["share_target"] = 1.0
    assert practical.smallest_n(summary) == 20


def test_practical_run_scores_one_tiny_fit():
    from benchmarks import bench_ktuple_practical as practical

    row = practical.ktuple_run("k2_d1", 2_000, 1.01, "auto", seed=0)
    assert row["method"] == "located" and row["released"] in (True, False)
    assert row["ok"] == (row["released"] and row["ari"] >= 0.99 and row["cost_ratio"] <= 1.01)


def test_local_benchmark_useful_from_is_the_first_n_within_one_percent():
    from benchmarks import bench_local as local

    rows = [{"method": "a", "n": 10, "cost_ratio": 2.0},
            {"method": "a", "n": 100, "cost_ratio": 1.005},
            {"method": "b", "n": 10, "cost_ratio": 1.5}]
    assert local.useful_from(rows) == {"a": 100, "b": None}


def test_scaling_row_reports_ratios_and_the_slopes():
    X = scaling.make_data(3000, n_clusters=2, n_features=2)
    rows = [scaling.compare("stable_kmeans", X[:n], n_clusters=2, repeat=1) for n in (1500, 3000)]
    for key in ("private_s", "kmeans_s", "time_ratio", "private_mib", "memory_ratio"):
        assert all(row[key] > 0 and math.isfinite(row[key]) for row in rows)
    assert rows[0]["time_ratio"] == pytest.approx(rows[0]["private_s"] / rows[0]["kmeans_s"])
    (summary,) = scaling.slopes(rows)
    assert summary["estimator"] == "stable_kmeans" and math.isfinite(summary["slope_time"])


def test_scaling_predicts_a_cell_linearly_and_leaves_skipped_cells_out_of_the_slopes():
    previous = {"n_samples": 1000, "private_s": 2.0, "kmeans_s": 1.0}
    # (2 + 1) s per pair of fits x 10 (n ten times larger) x (repeat + 1) fits x 1.25
    assert scaling.predicted_seconds(previous, 10_000, repeat=3) == pytest.approx(150.0)
    X = scaling.make_data(3000, n_clusters=2, n_features=2)
    rows = [scaling.compare("stable_kmeans", X[:n], n_clusters=2, repeat=1) for n in (1500, 3000)]
    rows.append(scaling._skipped("stable_kmeans", 30_000, predicted=100.0, left=10.0))
    (summary,) = scaling.slopes(rows)
    assert summary["n_max"] == 3000 and math.isfinite(summary["slope_time"])
    assert summary["slope_time_top"] == pytest.approx(summary["slope_time"])  # two sizes: one line
