"""Time k-tuple generation: the batched k-means path against one scikit-learn fit per block.

Both paths run in this process, on the same data and the same blocks (same
seed), with the same ``n_jobs``. For every configuration the script prints the
best of ``--repeat`` times of each path, their ratio, and how far apart the
tuples are after putting the rows of every tuple in canonical order
(``max_abs_diff``, and the share of tuples that agree to 1e-6; a tuple can
differ when the two paths seed k-means differently and Lloyd stops in
different local optima).

Data: ``make_separated_mixture`` with means ±R·e_i (R = ``--separation``,
default 32, the smallest separation of the papers' Test1), or, when
``n_features < n_clusters / 2``, means 2R apart on the first axis. The base
clusterer is ``KMeans(init="k-means++", n_init=1)`` (spec §10.5).

Writes ``benchmarks/results/tuples.csv`` and ``benchmarks/results/tuples.png``
(the plot needs matplotlib).

Usage::

    python -m benchmarks.bench_tuples --full     # n = 2e5 and 1e6 rows
    python -m benchmarks.bench_tuples --quick    # n = 2e5 only
"""

import argparse
import itertools
import os
import time

import numpy as np
import sklearn
from sklearn.cluster import KMeans

from benchmarks._common import print_table, result_path, spread, write_csv, writes_results
from skdpcluster.ktuple._tuples import generate_tuples, sort_tuple_rows
from skdpcluster.datasets import make_separated_mixture

COLUMNS = [
    "n_samples", "n_tuples", "n_clusters", "n_features", "rows_per_tuple",
    "per_block_s", "batched_s", "speedup", "max_abs_diff", "matched_fraction",
]
GRID_TUPLES, GRID_CLUSTERS, GRID_FEATURES = (1000, 5000), (2, 4), (1, 4)


def make_data(n_samples, n_clusters, n_features, separation, seed):
    """The benchmark mixture: ±R·e_i, or means 2R apart on a line when d < k/2."""
    if n_features >= n_clusters // 2:
        return make_separated_mixture(
            n_samples, n_clusters, n_features, separation=separation, random_state=seed
        )[0]
    means = np.zeros((n_clusters, n_features))
    means[:, 0] = 2 * separation * (np.arange(n_clusters) - (n_clusters - 1) / 2)
    return make_separated_mixture(n_samples, means=means, random_state=seed)[0]


def timed_tuples(X, n_clusters, n_tuples, method, args):
    """Tuples of one path and the best of ``args.repeat`` times, in seconds."""
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        tuples = generate_tuples(
            X, KMeans(init="k-means++", n_init=1), n_clusters, n_tuples,
            rng=np.random.default_rng(args.seed), method=method, n_jobs=args.n_jobs,
        )
        times.append(time.perf_counter() - start)
    return tuples, min(times)


def run_config(n_samples, n_tuples, n_clusters, n_features, args):
    """One row of the table."""
    X = make_data(n_samples, n_clusters, n_features, args.separation, args.seed)
    per_block, per_block_s = timed_tuples(X, n_clusters, n_tuples, "per_block", args)
    batched, batched_s = timed_tuples(X, n_clusters, n_tuples, "batched", args)
    difference = np.abs(sort_tuple_rows(per_block) - sort_tuple_rows(batched)).max(axis=(1, 2))
    return dict(
        n_samples=n_samples, n_tuples=n_tuples, n_clusters=n_clusters, n_features=n_features,
        rows_per_tuple=n_samples // n_tuples, per_block_s=per_block_s, batched_s=batched_s,
        speedup=per_block_s / batched_s, max_abs_diff=difference.max(),
        matched_fraction=np.mean(difference < 1e-6),
    )


def plot(rows, path):
    """Bar chart of the speed-ups; skipped with a message when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("  (matplotlib not installed: no plot; pip install '.[bench]')")
        return
    labels = [
        f"n={r['n_samples']:.0e}\nt={r['n_tuples']}\nk={r['n_clusters']} d={r['n_features']}"
        for r in rows
    ]
    figure, axes = plt.subplots(figsize=(max(6, 0.8 * len(rows)), 4.5))
    axes.bar(range(len(rows)), [r["speedup"] for r in rows], color="tab:blue")
    axes.set_xticks(range(len(rows)), labels, fontsize=7)
    axes.set_ylabel("speed-up (per-block time / batched time)")
    axes.set_title("k-tuple generation: batched k-means vs one scikit-learn fit per block")
    axes.axhline(1, color="grey", linewidth=0.8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


@writes_results
def run(quick=True, n_jobs=1, separation=32.0, seed=0, repeat=3):
    """Time both paths over the grid; write ``tuples.csv`` and ``tuples.png``; return headline rows."""
    args = argparse.Namespace(n_jobs=n_jobs, separation=separation, seed=seed, repeat=repeat)
    sizes = (200_000,) if quick else (200_000, 1_000_000)
    print(f"  numpy {np.__version__}, scikit-learn {sklearn.__version__}, {os.cpu_count()} CPUs, "
          f"n_jobs={n_jobs}, separation={separation:g}, best of {repeat} runs")
    run_config(2000, 10, 2, 1, args)  # warm both paths up (imports, thread pools)
    rows = [run_config(*config, args)
            for config in itertools.product(sizes, GRID_TUPLES, GRID_CLUSTERS, GRID_FEATURES)]
    print_table(rows, COLUMNS)
    write_csv("tuples", rows)
    plot(rows, result_path("tuples", "png"))
    speedups = [row["speedup"] for row in rows]
    median, low, high = spread(speedups)
    return [{"measure": "batched / per-block speed-up", "median": median, "min": low, "max": high,
             "tuples_matched": float(np.mean([row["matched_fraction"] for row in rows]))}]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="n = 2e5 rows only")
    parser.add_argument("--full", action="store_true", help="n = 2e5 and 1e6 rows")
    parser.add_argument("--n-jobs", type=int, default=1, help="joblib workers for both paths")
    parser.add_argument("--separation", type=float, default=32.0, help="R of the means")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="runs per path; the best is kept")
    args = parser.parse_args()
    print_table(run(quick=not args.full, n_jobs=args.n_jobs, separation=args.separation,
                    seed=args.seed, repeat=args.repeat))


if __name__ == "__main__":
    main()
