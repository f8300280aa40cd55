r"""Utility and speed of PrivateStableKMeans / PrivateStableKMedian against DP-Lloyd (diffprivlib).

What it measures
----------------
Data (the issue's protocol): :func:`~skdpcluster.datasets.make_separated_mixture`
with k = 4 components in d = 4 dimensions, unit variance, means
:math:`\pm R e_1, \pm R e_2` with :math:`R = 10/\sqrt 2`, so the closest means
are exactly 10 standard deviations apart; one data set per n (seed 0). Every
private method gets the same public knowledge: the ball of radius
:math:`\Lambda = 20` about the origin (``data_radius=20``; diffprivlib
``bounds=(-20, 20)`` per coordinate), epsilon = 1 and delta = 1e-6
(diffprivlib is pure epsilon-DP and ignores delta).

* **Utility table** (``stable_runs.csv`` per run, ``stable_summary.csv``):
  n = 10^5 and 10^6 (``--full``; 10^5 only with ``--quick``), 20 runs
  (seeds 0-19; 5 with ``--quick``) of

  - ``PrivateStableKMeans`` and ``PrivateStableKMedian`` with the
    ``"grid"`` and ``"ktuple"`` initializers,
  - diffprivlib's ``KMeans`` (DP-Lloyd), in its own environment through
    :mod:`benchmarks._diffprivlib`.

  A run *meets the target* when the adjusted Rand index of ``predict(X)``
  against the true components is at least 0.99 **and** the k-means cost of
  the released centres is at most 1.01 times the cost of non-private
  scikit-learn ``KMeans(n_clusters=4, n_init=10)`` on the same data. The
  issue's target is 19 of 20 runs.
* **Curve** (``stable_curve.csv``, ``stable_curve_n.png``,
  ``stable_curve_eps.png``, ``stable_min_n.csv``): n in 10^4 ... 10^6 and
  epsilon in 0.25 ... 4 for the four private variants and DP-Lloyd, 10 runs
  each (3 with ``--quick``, on a smaller grid), and the smallest n at which
  each variant meets the target in at least 95 % of its runs
  (``min_n``; empty when no n of the grid does).
* **Speed** (``stable_speed.csv``): fit time of
  ``PrivateStableKMeans(n_clusters=10)`` against scikit-learn
  ``KMeans(n_clusters=10, n_init=1)`` on the same array, n = 10^6, d = 10,
  k = 10 (means 10 apart, ``data_radius=20``), best of ``repeat`` runs each,
  as a ratio (target <= 3). The private fit includes its non-private
  ``labels_``. Timings on a shared machine are indicative.

The k-median estimator is scored by the same two criteria (its centres are
medians, which coincide with the means on this symmetric data).

Usage::

    python -m benchmarks.bench_stable --quick   # n = 1e5, 5 runs, small curve (a few minutes)
    python -m benchmarks.bench_stable --full    # the full protocol (about an hour on 2 cores)
"""

import argparse
import math
import statistics
import subprocess
import time
import warnings

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score

from benchmarks._common import plot_lines, print_table, write_csv, writes_results
from skdpcluster.accountant import BudgetAccountant
from skdpcluster.cluster._stable import PrivateStableKMeans, PrivateStableKMedian
from skdpcluster.cluster._stable_init import nearest_centers
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.exceptions import InsufficientDataError

N_CLUSTERS, N_FEATURES = 4, 4
SEPARATION = 10 / math.sqrt(2)  # closest means 10 standard deviations apart
DATA_RADIUS = 20.0
EPSILON, DELTA = 1.0, 1e-6
ARI_TARGET, COST_TARGET, SHARE_TARGET = 0.99, 1.01, 0.95
DPLLOYD = "diffprivlib_KMeans"
VARIANTS = {
    "stable_kmeans/grid": (PrivateStableKMeans, "grid"),
    "stable_kmeans/ktuple": (PrivateStableKMeans, "ktuple"),
    "stable_kmedian/grid": (PrivateStableKMedian, "grid"),
    "stable_kmedian/ktuple": (PrivateStableKMedian, "ktuple"),
}
PROTOCOLS = {
    True: {"sizes": (100_000,), "runs": 5, "curve_sizes": (10_000, 30_000, 100_000),
           "curve_epsilons": (0.25, 1.0, 4.0), "curve_runs": 3, "speed_n": 1_000_000,
           "repeat": 1},
    False: {"sizes": (100_000, 1_000_000), "runs": 20,
            "curve_sizes": (10_000, 30_000, 100_000, 300_000, 1_000_000),
            "curve_epsilons": (0.25, 0.5, 1.0, 2.0, 4.0), "curve_runs": 10,
            "speed_n": 1_000_000, "repeat": 3},
}


def make_data(n_samples, seed=0, n_clusters=N_CLUSTERS, n_features=N_FEATURES):
    """The issue's mixture: unit variance, closest means 10 apart."""
    return make_separated_mixture(n_samples, n_clusters, n_features, separation=SEPARATION,
                                  random_state=seed)


def kmeans_cost(X, centers):
    """Sum of squared distances to the nearest centre (chunked)."""
    return float(nearest_centers(X, np.asarray(centers, dtype=float))[1].sum())


def reference_cost(X, seed=0):
    """The OPT proxy: non-private scikit-learn ``KMeans(n_init=10)``."""
    return float(KMeans(N_CLUSTERS, n_init=10, random_state=seed).fit(X).inertia_)


def score(X, y, optimum, centers, labels):
    """ARI, cost ratio and whether the run meets the target."""
    ari = float(adjusted_rand_score(y, labels))
    ratio = kmeans_cost(X, centers) / optimum
    return {"ari": ari, "cost_ratio": ratio, "ok": ari >= ARI_TARGET and ratio <= COST_TARGET}


def fit_private(variant, X, epsilon, seed):
    """Fit one private variant; the fitted estimator and its fit time (None if too few rows)."""
    Estimator, initializer = VARIANTS[variant]
    estimator = Estimator(N_CLUSTERS, epsilon=epsilon, delta=DELTA, initializer=initializer,
                          data_radius=DATA_RADIUS, random_state=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # initializer fallbacks are recorded in the rows
        start = time.perf_counter()
        try:
            estimator.fit(X)
        except InsufficientDataError:  # the k-tuple test needs more rows than n
            return None, "insufficient_data"
        return estimator, time.perf_counter() - start


def private_runs(variant, X, y, optimum, epsilon, seeds):
    """One row per seed for a private variant."""
    rows = []
    for seed in seeds:
        estimator, seconds = fit_private(variant, X, epsilon, seed)
        base = {"method": variant, "n": len(X), "epsilon": epsilon, "seed": seed}
        if estimator is None:
            rows.append({**base, "ari": float("nan"), "cost_ratio": float("nan"), "ok": False,
                         "seconds": float("nan"), "selected": "", "initializer_status": seconds})
            continue
        rows.append({**base, **score(X, y, optimum, estimator.cluster_centers_, estimator.labels_),
                     "seconds": seconds, "selected": estimator.selected_,
                     "initializer_status": estimator.initializer_status_})
    return rows


def dplloyd_runs(X, y, optimum, epsilon, seeds):
    """One row per seed for diffprivlib's KMeans (empty, with a message, if it cannot run)."""
    from benchmarks._diffprivlib import run_diffprivlib_kmeans

    try:
        results = run_diffprivlib_kmeans(X, N_CLUSTERS, epsilon=epsilon,
                                         bounds=(-DATA_RADIUS, DATA_RADIUS), random_states=seeds,
                                         y=y)
    except (OSError, subprocess.SubprocessError) as error:
        print(f"  diffprivlib unavailable ({error}); its rows are left out")
        return []
    rows = []
    for result in results:
        ratio = result["cost"] / optimum
        rows.append({"method": DPLLOYD, "n": len(X), "epsilon": epsilon, "seed": result["seed"],
                     "ari": result["ari"], "cost_ratio": ratio,
                     "ok": result["ari"] >= ARI_TARGET and ratio <= COST_TARGET,
                     "seconds": result["seconds"], "selected": "", "initializer_status": ""})
    return rows


def _statistic(rows):
    """``stat(key, function)``: ``function`` of the values of ``key`` (nan without rows)."""
    def stat(key, function):
        return function([row[key] for row in rows]) if rows else float("nan")
    return stat


def summarize(rows):
    """Per (method, n, epsilon): successes and the spread of ARI and cost ratio."""
    groups = {}
    for row in rows:
        groups.setdefault((row["method"], row["n"], row["epsilon"]), []).append(row)
    summary = []
    for (method, n, epsilon), group in groups.items():
        measured = [r for r in group if not math.isnan(r["ari"])]
        successes = sum(r["ok"] for r in group)
        stat = _statistic(measured)
        summary.append({
            "method": method, "n": n, "epsilon": epsilon, "runs": len(group),
            "successes": successes, "share": successes / len(group),
            "target_met": successes / len(group) >= SHARE_TARGET,
            "ari_min": stat("ari", min), "ari_median": stat("ari", statistics.median),
            "cost_ratio_median": stat("cost_ratio", statistics.median),
            "excess_cost_median": stat("cost_ratio", statistics.median) - 1.0,
            "cost_ratio_max": stat("cost_ratio", max),
            "fit_s_median": stat("seconds", statistics.median),
            "fallbacks": sum(r["initializer_status"] not in ("", "success") for r in group),
        })
    return summary


def utility(sizes, n_runs, epsilons=(EPSILON,), variants=tuple(VARIANTS), with_dplloyd=True):
    """Every run of every method on the data of every n; one reference fit per data set."""
    rows = []
    for n in sizes:
        X, y = make_data(n)
        optimum = reference_cost(X)
        for epsilon in epsilons:
            for variant in variants:
                rows += private_runs(variant, X, y, optimum, epsilon, range(n_runs))
            if with_dplloyd:
                rows += dplloyd_runs(X, y, optimum, epsilon, list(range(n_runs)))
            print(f"  n={n:>8} eps={epsilon:<5} done", flush=True)
    return rows


def smallest_n(summary):
    """Per (method, epsilon): the smallest n whose runs meet the target in >= 95 % of runs."""
    table = {}
    for row in sorted(summary, key=lambda r: r["n"]):
        key = (row["method"], row["epsilon"])
        table.setdefault(key, "")
        if row["target_met"] and table[key] == "":
            table[key] = row["n"]
    return [{"method": m, "epsilon": e, "min_n": n} for (m, e), n in sorted(table.items())]


def speed(n_samples, repeat):
    """Best-of-``repeat`` fit times at d = k = 10: the private fit over KMeans(n_init=1)."""
    X, _ = make_separated_mixture(n_samples, 10, 10, separation=SEPARATION, random_state=0)

    def best(fit):
        times = []
        for seed in range(repeat):
            start = time.perf_counter()
            fit(seed)
            times.append(time.perf_counter() - start)
        return min(times)

    kmeans_s = best(lambda s: KMeans(10, n_init=1, random_state=s).fit(X))
    # A fresh accountant per timed fit: the same seeds on one ledger would repeat the noise.
    stable_s = best(lambda s: PrivateStableKMeans(10, data_radius=DATA_RADIUS, random_state=s,
                                                  accountant=BudgetAccountant()).fit(X))
    return {"n": n_samples, "d": 10, "k": 10, "stable_s": stable_s, "kmeans_s": kmeans_s,
            "time_ratio": stable_s / kmeans_s, "repeat": repeat}


def _plot(curve_summary):
    at_eps = [r for r in curve_summary if r["epsilon"] == EPSILON]
    for row in at_eps:  # a log axis needs positive values; 1e-6 stands for "no excess"
        row["excess_cost_plot"] = max(row["excess_cost_median"], 1e-6)
    plot_lines("stable_curve_n", at_eps, x="n", y="excess_cost_plot", group="method",
               xlabel="n (rows)", ylabel="median cost / sklearn KMeans cost - 1",
               title="Excess k-means cost against n (k=4, d=4, eps=1, delta=1e-6)", logx=True,
               logy=True)
    n_eps = max(r["n"] for r in curve_summary if r["n"] <= 100_000)
    at_n = [r for r in curve_summary if r["n"] == n_eps]
    plot_lines("stable_curve_eps", at_n, x="epsilon", y="share", group="method",
               xlabel="epsilon", ylabel="share of runs meeting ARI>=0.99 and cost<=1.01 OPT",
               title=f"Target met against epsilon (n={n_eps}, k=4, d=4)", logx=True)


def _headline(summary, minimum, speed_row):
    rows = [{"table": "utility", "method": r["method"], "n": r["n"], "epsilon": r["epsilon"],
             "successes": f"{r['successes']}/{r['runs']}", "ari_min": r["ari_min"],
             "cost_ratio_median": r["cost_ratio_median"], "cost_ratio_max": r["cost_ratio_max"],
             "note": f"{r['fallbacks']} fallbacks"}
            for r in summary]
    rows += [{"table": "min_n", "method": r["method"], "n": r["min_n"], "epsilon": r["epsilon"],
              "note": "smallest n meeting the target in >= 95% of runs"}
             for r in minimum if r["epsilon"] == EPSILON]
    rows.append({"table": "speed", "method": "PrivateStableKMeans", "n": speed_row["n"],
                 "epsilon": EPSILON,
                 "note": f"{speed_row['time_ratio']:.2f}x KMeans(n_init=1) (d=10, k=10)"})
    columns = ["table", "method", "n", "epsilon", "successes", "ari_min", "cost_ratio_median",
               "cost_ratio_max", "note"]
    return [{c: row.get(c, "") for c in columns} for row in rows]


@writes_results
def run(quick):
    """Run the protocol; write the CSV and PNG files; return the headline rows."""
    protocol = PROTOCOLS[bool(quick)]
    runs = utility(protocol["sizes"], protocol["runs"])
    summary = summarize(runs)
    write_csv("stable_runs", runs)
    write_csv("stable_summary", summary)
    print_table(summary, ["method", "n", "runs", "successes", "ari_min", "ari_median",
                          "cost_ratio_median", "cost_ratio_max", "fit_s_median", "fallbacks"])
    curve_summary = summarize(utility(protocol["curve_sizes"], protocol["curve_runs"],
                                      epsilons=protocol["curve_epsilons"]))
    minimum = smallest_n(curve_summary)
    write_csv("stable_curve", curve_summary)
    write_csv("stable_min_n", minimum)
    _plot(curve_summary)
    print_table(minimum)
    speed_row = speed(protocol["speed_n"], protocol["repeat"])
    write_csv("stable_speed", [speed_row])
    print_table([speed_row])
    return _headline(summary, minimum, speed_row)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="n = 1e5, 5 runs (default)")
    size.add_argument("--full", action="store_true", help="n = 1e5 and 1e6, 20 runs, full curve")
    args = parser.parse_args(argv)
    print_table(run(quick=not args.full))


if __name__ == "__main__":
    main()
