"""Smoke tests of the benchmark modules: their smallest units at tiny sizes, never a benchmark."""

import csv
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
    assert {s.test for s in full} == {"Test1", "Test2", "Test3"}
    test1 = [s for s in full if s.test == "Test1"]
    assert sorted({s.separation for s in test1}) == [32, 64, 128, 256, 512]
    # The minimal admissible numbers of tuples of the two modes (review: 5019; spec §10.4: 4296).
    assert {s.mode: s.n_tuples(100) for s in quick} == {"corrected": 5019, "paper": 4296}
    assert paper.Setting("Test1", 2, 1, 64, "corrected", "averages").n_tuples(10**6) == 10**6


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


# Cohen et al.'s experiments (issue #18 item 3) -------------------------------------------


def test_naive_baseline_noises_every_sample_and_reports_the_mixture_fit():
    separated, error, sigma = paper.naive_run(2000, 0)
    # Gaussian mechanism on the whole vector: L2 sensitivity 2 Lambda = 4096, eps = 1,
    # delta = e^-28 (analytic calibration; the classical bound would give about 30 800).
    assert 20_000 < sigma < 30_800
    # The noise swamps R = 512: the fitted means are tens of R away from the true ones.
    assert error > 5 and isinstance(separated, bool)


def test_naive_rows_count_successes_only_for_means_near_the_truth(monkeypatch, tmp_path):
    monkeypatch.setattr("benchmarks._common.RESULTS", tmp_path)
    (row,) = paper.naive_rows((2000,), n_runs=2, verbose=False)
    assert row["runs"] == 2 and row["successes"] == 0 and row["median_mean_error_R"] > 5
    assert (tmp_path / "ktuple_paper_naive.csv").exists()


def _summary_csv(path, rows):
    header = "test,method,mode,k,d,R,size_95"
    path.write_text("\n".join([header, *rows]) + "\n")


def test_merge_results_replaces_only_the_rows_of_the_settings_run(monkeypatch, tmp_path):
    monkeypatch.setattr("benchmarks._common.RESULTS", tmp_path)
    _summary_csv(tmp_path / "ktuple_paper.csv", [
        "Test1,noisy_centers,corrected,2,1,32,", "Test1,noisy_centers,corrected,2,1,64,2800",
        "Test1,averages,corrected,2,1,32,1195826", "Test3,noisy_centers,paper,2,8,724.08,162",
    ])
    new = {"test": "Test1", "method": "noisy_centers", "mode": "corrected", "k": 2, "d": 1,
           "R": 32, "size_95": 9381}
    merged = paper.merge_results("ktuple_paper", [new], keep_old=True)
    # Only the row of the same test, method, mode and mixture is replaced (R read back as 32).
    assert [row["size_95"] for row in merged] == [2800, 1195826, 162, 9381]
    assert paper.merge_results("ktuple_paper", [new], keep_old=False) == [new]


def test_filters_choose_settings_by_test_method_mode_and_abscissa():
    full = paper.settings(quick=False)
    chosen = [s for s in full
              if paper.selected(s, ["Test1"], ["noisy_centers"], None, [32.0])]
    assert {(s.separation, s.mode, s.method) for s in chosen} == {
        (32, "corrected", "noisy_centers"), (32, "paper", "noisy_centers")}
    # The abscissa is k in Test2 and d in Test3 (R is then 512 k or 256 sqrt(d)).
    test3 = [s for s in full if paper.selected(s, ["Test3"], ["averages"], ["paper"], [8])]
    assert [(s.n_features, s.mode, s.method) for s in test3] == [(8, "paper", "averages")]
    test2 = [s for s in full if paper.selected(s, ["Test2"], None, None, [6])]
    assert {s.n_clusters for s in test2} == {6} and len(test2) == 4
    assert len([s for s in full if paper.selected(s)]) == len(full) == 52


def test_every_figure_has_both_algorithms_in_both_modes_and_runs_are_sized():
    full = paper.settings(quick=False)
    curves = {(s.test, s.method, s.mode) for s in full}
    assert curves == {(test, method, mode) for test in ("Test1", "Test2", "Test3")
                      for method in ("noisy_centers", "averages") for mode in paper.MODES}
    averages = {s.separation for s in full if s.method == "averages" and s.test == "Test1"}
    assert averages == {32, 64, 128, 256, 512}
    runs = {s.separation: paper._runs(s, False, None) for s in full
            if s.test == "Test1" and s.method == "noisy_centers"}
    assert runs[32] == paper.FULL_RUNS_R32 and runs[512] == paper.FULL_RUNS
    assert paper._runs(next(s for s in full if s.method == "averages"), False, 20) == 3


def test_averages_beyond_the_sample_cap_run_nothing_and_say_so():
    # Test2, k = 2, d = 4: the paper's constant scaled by k d / 2 is 4.8e6 tuples of
    # 30 samples, above MAX_SAMPLES, so the search runs no grid point (no fit at all).
    setting = paper.Setting("Test2", 2, 4, 1024, "corrected", "averages")
    assert setting.start() == pytest.approx(4 * math.sqrt(1.1e6 * 1.3e6))
    assert paper.search(setting, 1, verbose=False) == []
    row = paper.summarize(setting, [], 1)
    assert row["size_95"] == row["max_size"] == row["total_95"] == ""
    # Test1's start is unchanged (the committed grid values 845577, 1195826, ... stay valid).
    test1 = paper.Setting("Test1", 2, 1, 32, "corrected", "averages")
    assert paper._grid_value(test1, test1.start(), paper.GRID_STEP, 0) == 1195826


def test_paper_mode_summary_row_has_the_noise_to_gap_ratio():
    # Regression (d26c4ea): describe() passed allow_unproven to noise_to_gap_ratio, so the
    # paper mode crashed in summarize with a TypeError.
    setting = paper.Setting("Test1", 2, 1, 512, "paper")
    grid = [{"size": 57, "pass_95": True, "pass_50": True}]
    row = paper.summarize(setting, grid, 10, floor=0.02)
    assert row["n_tuples"] == 4296 and row["total_95"] == 4296 * 57
    assert 0 < row["noise_to_gap"] < 1


def test_filtered_run_refreshes_one_setting_and_keeps_the_others(monkeypatch, tmp_path):
    monkeypatch.setattr("benchmarks._common.RESULTS", tmp_path)
    monkeypatch.setattr(paper, "FLOOR_RUNS", 2)
    easy = [paper.Setting("Test1", 2, 1, 1e5, "paper")]
    kept = paper.Setting("Test1", 2, 1, 512, "corrected")
    passing = [{"size": 99, "pass_95": True, "pass_50": True}]
    paper.write_csv("ktuple_paper", [paper.summarize(setting, passing, 10)
                                     for setting in (kept, *easy)])
    # A trivially separated mixture in place of the quick settings: one fit per grid point.
    monkeypatch.setattr(paper, "settings", lambda quick: easy)
    paper.main(["--quick", "--runs", "1", "--tests", "Test1", "--modes", "paper"])
    with (tmp_path / "ktuple_paper.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["R"], row["mode"]) for row in rows] == [
        ("512", "corrected"), ("100000.0", "paper")]
    assert rows[0]["size_95"] == "99" and int(rows[1]["size_95"]) < 99
    assert not (tmp_path / "ktuple_paper_naive.csv").exists()  # no "Naive" in --tests


# Balcan et al.'s experiments (issue #18 item 4) -----------------------------------------


def test_gridding_spends_epsilon_once_and_finds_separated_clusters():
    from benchmarks import bench_highdim_paper as balcan

    X, center, radius = balcan.make_small3d(5000)
    centers, events = balcan.gridding(X, 3, epsilon=1.0, center=center, radius=radius,
                                      rng=np.random.default_rng(0))
    assert centers.shape == (3, 3) and len(events) == 1
    assert events[0].epsilon == 1.0 and events[0].sensitivity == 2.0
    # Cells of width 4/m, m = ceil(500^(2/5)) = 12: the centres are within a cell of the means.
    assert balcan.kmeans_cost(X, centers) < 3 * KMeans_cost(X, 3)


def KMeans_cost(X, k):
    from sklearn.cluster import KMeans

    return KMeans(k, n_init=1, random_state=0).fit(X).inertia_


def test_kvariates_seeding_composes_to_epsilon_and_stays_in_the_ball():
    from benchmarks import bench_highdim_paper as balcan

    X, center, radius = balcan.make_small3d(2000)
    centers, events = balcan.kvariates_seeding(X, 3, epsilon=1.0, center=center, radius=radius,
                                               rng=np.random.default_rng(0))
    assert math.fsum(event.epsilon for event in events) == pytest.approx(1.0)
    assert all(event.sensitivity == pytest.approx(2 * math.sqrt(3) * radius) for event in events)
    assert np.all(np.linalg.norm(centers - center, axis=1) <= radius * (1 + 1e-12))


def test_sparse_rows_are_sparse_and_box_bounded():
    from benchmarks import bench_highdim_paper as balcan

    X, center, radius = balcan.make_sparse(500, 100)
    assert np.all((X != 0).sum(axis=1) <= balcan.SPARSITY)
    assert X.min() >= 0 and X.max() <= 1 and radius == math.sqrt(balcan.SPARSITY)
    assert np.all(np.linalg.norm(X, axis=1) <= radius + 1e-12)


def test_highdim_paper_cell_scores_every_method_against_the_reference():
    from benchmarks import bench_highdim_paper as balcan

    X, center, radius = balcan.make_small3d(3000)
    rows = balcan.run_cell("small3d", "d=3 k=3", X, center, radius, 3, 1.0,
                           balcan.SMALL3D_METHODS, range(1))
    assert [row["method"] for row in rows] == ["reference", *balcan.SMALL3D_METHODS]
    assert all(row["cost_ratio"] > 0.9 and math.isfinite(row["cost_ratio"]) for row in rows)
    (kmedian,) = balcan.run_cell("kmedian", "x", X, center, radius, 3, 1.0,
                                 {"dplloyd5": balcan.DPLLOYD["dplloyd5"]}, range(1),
                                 loss="kmedian")[1:]
    assert kmedian["loss"] == "kmedian" and kmedian["cost_ratio"] > 0.9


def test_weiszfeld_refine_lowers_the_kmedian_cost():
    from benchmarks import bench_highdim_paper as balcan

    rng = np.random.default_rng(0)
    X = np.vstack([rng.standard_normal((200, 2)), rng.standard_normal((200, 2)) + 10])
    X[:10] += 100  # outliers pull the means, not the medians
    start = np.array([[0.0, 0.0], [10.0, 10.0]]) + 2
    assert balcan.kmedian_cost(X, balcan.weiszfeld_refine(X, start)) < balcan.kmedian_cost(X, start)


# FedDP-KMeans's experiments (issue #18 item 5) -------------------------------------------


def test_elbow_is_the_largest_second_difference():
    from benchmarks import bench_federated_paper as fed

    costs = [100.0 / k if k <= 4 else 25.0 - (k - 4) * 0.1 for k in range(1, 9)]
    assert fed.elbow(list(range(1, 9)), costs) == 2
    assert fed.elbow([1, 2, 3, 4, 5], [10, 8, 6, 1, 0.9]) == 4


def test_missing_server_drops_the_last_components_points():
    from benchmarks import bench_federated_paper as fed

    means = np.random.default_rng(0).uniform(size=(10, 100))
    server = fed.missing_server(means, 2)
    assert server.shape == (8 * 20 + 100, 100)
    # Each block of 20 averages to its own mean (noise 0.71 / sqrt(20) per coordinate, norm about
    # 1.6, against about 4 between means); the last two components have no block.
    blocks = server[:160].reshape(8, 20, 100).mean(axis=1)
    nearest = np.argmin(((blocks[:, None] - means[None]) ** 2).sum(axis=2), axis=1)
    np.testing.assert_array_equal(nearest, np.arange(8))


def test_federated_curve_and_elbow_rows_on_a_small_federation():
    from benchmarks import bench_federated_paper as fed
    from benchmarks.bench_federated import paper_data

    X, clients, server, _ = paper_data(10, 100)
    rows = fed._curve_rows(X, clients, server,
                           {"client": {"privacy_unit": "client", "client_clip": fed.CLIENT_CLIP,
                                       "n_lloyd_iter": 0}}, (2.0,), 1, {"n_clients": 10})
    assert rows[0]["method"] == "client" and rows[0]["cost_median"] > 40  # d * 0.5 = 50 at best
    rows = fed.elbow_rows({"seeds": 1}, k_max=4, data=(X, clients, server))
    assert {row["k"] for row in rows} == {1, 2, 3, 4} and all(row["cost"] > 0 for row in rows)


def test_highdim_paper_keeps_the_runs_of_experiments_not_rerun(monkeypatch, tmp_path):
    from benchmarks import bench_highdim_paper as balcan

    monkeypatch.setattr("benchmarks._common.RESULTS", tmp_path)
    (tmp_path / "highdim_paper_runs.csv").write_text(
        "experiment,cost_ratio\nsmall3d,1.5\nsparse,7.25\n")
    assert balcan._kept_rows(["small3d"]) == [{"experiment": "sparse", "cost_ratio": 7.25}]
    assert balcan._kept_rows(balcan.EXPERIMENTS) == []


# Results files and README (quick and full runs write apart) -------------------------------


def test_full_run_writes_its_own_files_and_leaves_the_quick_ones(monkeypatch, tmp_path):
    from benchmarks import _common

    monkeypatch.setattr(_common, "RESULTS", tmp_path)

    @_common.writes_results
    def run(quick, value):
        _common.write_csv("table", [{"value": value}])
        if value == "boom":
            raise RuntimeError(value)
        return _common.result_path("table", "csv")

    assert run(True, "quick") == tmp_path / "table.csv"
    assert run(quick=False, value="full") == tmp_path / "table_full.csv"
    with pytest.raises(RuntimeError):
        run(False, "boom")
    assert (tmp_path / "table.csv").read_text().split() == ["value", "quick"]
    assert (tmp_path / "table_full.csv").read_text().split() == ["value", "boom"]
    # Outside a run (and after a failed one) names are the quick ones again.
    assert _common.result_path("table", "csv") == tmp_path / "table.csv"
    assert _common.result_path("table", "csv", quick=False) == tmp_path / "table_full.csv"


def test_every_benchmark_run_names_its_files_by_mode():
    import importlib

    from benchmarks.__main__ import discover

    for name in discover():
        run = importlib.import_module(f"benchmarks.bench_{name}").run
        assert getattr(run, "__wrapped__", None) is not None, f"bench_{name}.run"


def test_readme_regeneration_keeps_the_notes_after_the_section(monkeypatch, tmp_path):
    from benchmarks import _common, _readme

    monkeypatch.setattr(_common, "RESULTS", tmp_path)
    readme = tmp_path / "README.rst"
    monkeypatch.setattr(_readme, "README", readme)
    readme.write_text(f"Intro\n\n{_readme.BEGIN}\nold figures\n{_readme.END}\n\nNotes by hand.\n")
    _common.write_csv("scaling", [{"estimator": "stable_kmeans", "n_samples": 1e5,
                                   "time_ratio": 1.5}])
    _common.write_csv("scaling_full", [{"estimator": "stable_kmeans", "n_samples": 1e7,
                                        "time_ratio": 0.9}])
    _readme.update_readme([], quick=False)
    text = readme.read_text()
    assert text.startswith("Intro\n\n") and text.endswith(f"{_readme.END}\n\nNotes by hand.\n")
    assert "old figures" not in text and "``python -m benchmarks --full``" in text
    assert "1e+07: 0.90 x" in text and "1e+05" not in text
