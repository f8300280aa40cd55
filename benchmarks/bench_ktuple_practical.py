r"""Issue #13: the practical k-tuple aggregation (``method="located"``) against the issue's targets.

What it measures
----------------
Every fit gets epsilon = 1, delta = 1e-6 and a public ``data_radius``, and is
otherwise built by default construction (``KTupleClusterer(n_clusters, data_radius=...)``,
so ``method="auto"`` resolves to ``"located"``). Data from
:func:`~skdpcluster.datasets.make_separated_mixture`, unit variance, one data
set per seed:

* ``k4_d4``: k = 4, d = 4, means :math:`\pm 10 e_1, \pm 10 e_2` (closest
  14.1 apart), ``data_radius=20``; n = 10^4 and 10^5.
* ``k8_d4``: k = 8, d = 4, means :math:`\pm 20 e_i`, ``data_radius=40``; n = 10^5.
* ``k10_d20``: k = 10, d = 20, means drawn from N(0, 12^2 I) (seed
  1000 + run), ``data_radius=80``; n = 10^5.
* ``k2_d1``: k = 2, d = 1, means :math:`\pm 512`, ``data_radius=600``; n = 10^5.

A run *releases* when ``status_ == "success"``; it *meets the target* when
it releases, the adjusted Rand index of ``predict(X)`` against the true
components is >= 0.99, and the k-means cost of the released centres is at
most the row's bound (1.05, 1.01, 1.01, 1.02, 1.01) times the cost of
scikit-learn ``KMeans(n_init=10)`` on the same data. The issue's target is
19 of 20 runs. ``noisy_centers`` is run on the first row for comparison.

Also:

* ``mixture``: ``PrivateGaussianMixture(2, data_radius=300)`` on means
  (-200, 0) and (200, 50), sd 1 and 2, weights 0.3 / 0.7, n = 4·10^5; the
  target is max mean error < 0.5, max weight error < 0.02 and SPD covariances.
* ``stable``: ``PrivateStableKMeans(4, initializer="ktuple", data_radius=20)``
  on ``k4_d4`` at n = 10^5; the target is ``initializer_status_ == "success"``
  (no fallback) with ARI >= 0.99 and cost <= 1.01.
* **Curve** over n on ``k4_d4`` (``ktuple_practical_curve.png``: share of runs
  that release and that meet the first row's target, and the median cost
  ratio), and the smallest n at which >= 95 % of the runs meet it.

Files: ``ktuple_practical_runs.csv``, ``ktuple_practical_summary.csv``,
``ktuple_practical_curve.csv``, ``ktuple_practical_curve.png``,
``ktuple_practical_cost.png``.

Usage::

    python -m benchmarks.bench_ktuple_practical --quick   # 3 runs per row (a few minutes)
    python -m benchmarks.bench_ktuple_practical --full    # 20 runs per row, finer curve
"""

import argparse
import statistics
import time
import warnings

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score

from benchmarks._common import plot_lines, print_table, write_csv, writes_results
from skdpcluster import (
    BudgetAccountant,
    KTupleClusterer,
    PrivateGaussianMixture,
    PrivateStableKMeans,
)
from skdpcluster.datasets import make_separated_mixture

EPSILON, DELTA, ARI_TARGET = 1.0, 1e-6, 0.99
PROTOCOLS = {
    True: {"runs": 3, "curve_runs": 3, "curve_sizes": (1_000, 2_000, 5_000, 10_000, 30_000),
           "extra_runs": 2},
    False: {"runs": 20, "curve_runs": 20,
            "curve_sizes": (1_000, 2_000, 3_000, 5_000, 7_000, 10_000, 30_000, 100_000),
            "extra_runs": 20},
}
GMM_MEANS = np.array([[-200.0, 0.0], [200.0, 50.0]])
GMM_SCALES, GMM_WEIGHTS = [1.0, 2.0], [0.3, 0.7]


def _random_means(seed):
    return np.random.default_rng(1000 + seed).normal(0.0, 12.0, (10, 20))


#: name: (k, data_radius, cost bound, data(n, seed) -> (X, y))
DATASETS = {
    "k4_d4": (4, 20.0, None, lambda n, s: make_separated_mixture(n, 4, 4, separation=10,
                                                                  random_state=s)[:2]),
    "k8_d4": (8, 40.0, 1.01, lambda n, s: make_separated_mixture(n, 8, 4, separation=20,
                                                                  random_state=s)[:2]),
    "k10_d20": (10, 80.0, 1.02, lambda n, s: make_separated_mixture(
        n, means=_random_means(s), random_state=s)[:2]),
    "k2_d1": (2, 600.0, 1.01, lambda n, s: make_separated_mixture(n, 2, 1, separation=512,
                                                                   random_state=s)[:2]),
}
#: (dataset, n, cost bound, method)
TARGET_ROWS = [
    ("k4_d4", 10_000, 1.05, "auto"), ("k4_d4", 10_000, 1.05, "noisy_centers"),
    ("k4_d4", 100_000, 1.01, "auto"), ("k8_d4", 100_000, 1.01, "auto"),
    ("k10_d20", 100_000, 1.02, "auto"), ("k2_d1", 100_000, 1.01, "auto"),
]


def _quiet(fit):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fit()


def ktuple_run(dataset, n, bound, method, seed):
    """One fit of KTupleClusterer and its scores."""
    k, radius, _, make = DATASETS[dataset]
    X, y = make(n, seed)
    start = time.perf_counter()
    est = _quiet(lambda: KTupleClusterer(k, method=method, data_radius=radius,
                                         accountant=BudgetAccountant(), random_state=seed).fit(X))
    seconds = time.perf_counter() - start
    row = {"dataset": dataset, "n": n, "method": est.method_, "seed": seed,
           "released": est.status_ == "success", "ari": float("nan"),
           "cost_ratio": float("nan"), "fit_s": seconds, "bound": bound}
    if row["released"]:
        optimum = KMeans(k, n_init=10, random_state=0).fit(X).inertia_
        row["ari"] = adjusted_rand_score(y, est.predict(X))
        row["cost_ratio"] = -est.score(X) / optimum
    row["ok"] = bool(row["released"] and row["ari"] >= ARI_TARGET and row["cost_ratio"] <= bound)
    return row


def mixture_run(seed, n=400_000):
    """One PrivateGaussianMixture fit on the issue's two-component mixture."""
    X, _ = make_separated_mixture(n, means=GMM_MEANS, scales=GMM_SCALES, weights=GMM_WEIGHTS,
                                  random_state=seed)[:2]
    est = _quiet(lambda: PrivateGaussianMixture(2, data_radius=300.0, accountant=BudgetAccountant(),
                                                random_state=seed).fit(X))
    row = {"dataset": "mixture", "n": n, "method": est.method_, "seed": seed,
           "released": est.means_ is not None}
    if row["released"]:
        order = np.argsort(est.means_[:, 0])
        spd = all(np.all(np.linalg.eigvalsh(c) > 0) for c in est.covariances_)
        row.update(mean_error=float(np.abs(est.means_[order] - GMM_MEANS).max()),
                   weight_error=float(np.abs(est.weights_[order] - GMM_WEIGHTS).max()), spd=spd)
        row["ok"] = bool(row["mean_error"] < 0.5 and row["weight_error"] < 0.02 and spd)
    else:
        row["ok"] = False
    return row


def stable_run(seed, n=100_000):
    """One PrivateStableKMeans(initializer="ktuple") fit on k4_d4."""
    X, y = DATASETS["k4_d4"][3](n, seed)
    est = _quiet(lambda: PrivateStableKMeans(4, initializer="ktuple", data_radius=20.0,
                                             accountant=BudgetAccountant(),
                                             random_state=seed).fit(X))
    optimum = KMeans(4, n_init=10, random_state=0).fit(X).inertia_
    ari, ratio = adjusted_rand_score(y, est.labels_), -est.score(X) / optimum
    return {"dataset": "stable_ktuple_init", "n": n, "method": "located", "seed": seed,
            "released": est.initializer_status_ == "success", "ari": ari, "cost_ratio": ratio,
            "ok": bool(est.initializer_status_ == "success" and ari >= ARI_TARGET
                       and ratio <= 1.01)}


def summarize(rows):
    """Per (dataset, n, method): runs, releases, target met, ARI and cost-ratio spread."""
    groups = {}
    for row in rows:
        groups.setdefault((row["dataset"], row["n"], row["method"]), []).append(row)
    summary = []
    for (dataset, n, method), runs in groups.items():
        ratios = [r["cost_ratio"] for r in runs if r.get("released") and "cost_ratio" in r]
        aris = [r["ari"] for r in runs if r.get("released") and "ari" in r]
        summary.append({
            "dataset": dataset, "n": n, "method": method, "runs": len(runs),
            "released": sum(r["released"] for r in runs), "target_met": sum(r["ok"] for r in runs),
            "ari_min": min(aris) if aris else float("nan"),
            "cost_ratio_median": statistics.median(ratios) if ratios else float("nan"),
            "cost_ratio_max": max(ratios) if ratios else float("nan"),
            "share_released": sum(r["released"] for r in runs) / len(runs),
            "share_target": sum(r["ok"] for r in runs) / len(runs),
        })
    return summary


def smallest_n(curve):
    """Smallest n of the curve at which >= 95 % of the runs meet the first row's target."""
    passing = [row["n"] for row in curve if row["share_target"] >= 0.95]
    return min(passing) if passing else None


def _plot(curve):
    long = [{"n": r["n"], "share": r[key], "what": name} for r in curve
            for key, name in (("share_released", "released"),
                              ("share_target", "ARI>=0.99, cost<=1.05"))]
    plot_lines("ktuple_practical_curve", long, x="n", y="share", group="what", xlabel="n (rows)",
               ylabel="share of runs", logx=True,
               title="KTupleClusterer (located), k=4, d=4, ±10 e_i, eps=1")
    released = [dict(r, what="median") for r in curve if r["released"]]
    plot_lines("ktuple_practical_cost", released, x="n", y="cost_ratio_median", group="what",
               xlabel="n (rows)", ylabel="cost / sklearn KMeans(n_init=10) cost", logx=True,
               title="Cost ratio of the released centres (k=4, d=4)")


@writes_results
def run(quick):
    """Run the protocol; write the CSV and PNG files; return the headline rows."""
    protocol = PROTOCOLS[bool(quick)]
    rows = [ktuple_run(d, n, b, m, s) for d, n, b, m in TARGET_ROWS
            for s in range(protocol["runs"])]
    rows += [mixture_run(s) for s in range(protocol["extra_runs"])]
    rows += [stable_run(s) for s in range(protocol["extra_runs"])]
    summary = summarize(rows)
    columns = list(dict.fromkeys(key for row in rows for key in row))
    write_csv("ktuple_practical_runs", [{c: row.get(c, "") for c in columns} for row in rows])
    write_csv("ktuple_practical_summary", summary)
    print_table(summary, ["dataset", "n", "method", "runs", "released", "target_met", "ari_min",
                          "cost_ratio_median", "cost_ratio_max"])
    curve = summarize([ktuple_run("k4_d4", n, 1.05, "auto", s) for n in protocol["curve_sizes"]
                       for s in range(protocol["curve_runs"])])
    write_csv("ktuple_practical_curve", curve)
    _plot(curve)
    print_table(curve, ["n", "runs", "released", "target_met", "cost_ratio_median"])
    minimum = smallest_n(curve)
    print(f"  smallest n meeting the k4_d4 target in >= 95% of runs: {minimum}")
    headline = [{"dataset": r["dataset"], "n": r["n"], "method": r["method"],
                 "target_met": f"{r['target_met']}/{r['runs']}",
                 "cost_ratio_median": r["cost_ratio_median"]} for r in summary]
    headline.append({"dataset": "k4_d4 curve", "n": minimum, "method": "located",
                     "target_met": "smallest n with >= 95%", "cost_ratio_median": ""})
    return headline


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="3 runs per row (default)")
    size.add_argument("--full", action="store_true", help="20 runs per row, finer curve")
    args = parser.parse_args(argv)
    print_table(run(quick=not args.full))


if __name__ == "__main__":
    main()
