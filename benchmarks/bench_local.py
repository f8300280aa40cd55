r"""The local model and sample-and-aggregate (Shechner 2021, §6 and §7) against the central model.

What it measures
----------------
Data: the stable benchmark's mixture (:mod:`benchmarks.bench_stable`):
:func:`~skdpcluster.datasets.make_separated_mixture` with k = 4 components in
d = 4, unit variance, closest means 10 standard deviations apart, one data
set per n (seed 0); public ball of radius :math:`\Lambda = 20`, delta = 1e-6.

* **Local model** (``local_curve.csv``, ``local_curve.png``):
  ``LocalPrivateStableKMeans`` (every row randomized by its own user, 3
  rounds, one report per user) against n, at epsilon = 1 and 4 per user.
  Per run: the k-means cost of the released centres divided by that of
  non-private scikit-learn ``KMeans(n_clusters=4, n_init=3)`` on the same
  rows (``cost_ratio``), the adjusted Rand index against the true
  components (``ari``), and the fit time divided by that ``KMeans`` fit's
  (``time_ratio``). The local model's noise in a sum grows like
  :math:`\sqrt n`, so its error in a mean falls like :math:`1/\sqrt n`
  only; ``useful_from`` in the headline is the smallest n of the grid
  whose median cost ratio is at most 1.01.
* **Sample-and-aggregate** (``local_sa.csv``, ``local_sa.png``):
  ``SampleAggregateStableKMeans`` beside ``PrivateStableKMeans`` (central
  model, epsilon = 1 for the whole fit) at a few n, same metrics: how much
  weaker the thesis' Section 7 construction is (the chunks' k centres move
  together, so the aggregation pays group privacy of size k).

Usage::

    python -m benchmarks.bench_local --quick   # 3 seeds, n up to 4e6 (a few minutes)
    python -m benchmarks.bench_local --full    # 10 seeds, n up to 1.6e7
"""

import argparse
import time
import warnings

from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score

from benchmarks._common import plot_lines, print_table, spread, write_csv, writes_results
from skdpcluster import BudgetAccountant, PrivateStableKMeans, SampleAggregateStableKMeans
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.local import LocalPrivateStableKMeans

N_CLUSTERS, N_FEATURES, SEPARATION, RADIUS = 4, 4, 10 / 2**0.5, 20.0
PROTOCOLS = {
    True: {"local_sizes": [10**4, 10**5, 10**6, 4 * 10**6], "local_epsilons": [1.0, 4.0],
           "sa_sizes": [10**4, 10**5, 10**6], "seeds": 3},
    False: {"local_sizes": [10**4, 10**5, 10**6, 4 * 10**6, 16 * 10**6],
            "local_epsilons": [0.5, 1.0, 2.0, 4.0],
            "sa_sizes": [10**4, 10**5, 3 * 10**5, 10**6, 4 * 10**6], "seeds": 10},
}
#: "Useful": cost within 1 % of non-private k-means (the stable benchmark's bar).
USEFUL_RATIO = 1.01


def data(n):
    """The mixture with n rows and its true components."""
    return make_separated_mixture(n, n_clusters=N_CLUSTERS, n_features=N_FEATURES,
                                  separation=SEPARATION, random_state=0)


def reference(X):
    """Non-private k-means on the same rows: its cost and fit seconds."""
    start = time.perf_counter()
    model = KMeans(N_CLUSTERS, n_init=3, random_state=0).fit(X)
    return -model.score(X), time.perf_counter() - start


def one_run(estimator, X, y, optimum, kmeans_seconds):
    """Fit once; cost ratio, ARI and time ratio against scikit-learn."""
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # random initial centres at small n are the point
        estimator.fit(X)
    seconds = time.perf_counter() - start
    return {"cost_ratio": -estimator.score(X) / optimum,
            "ari": adjusted_rand_score(y, estimator.predict(X)),
            "time_ratio": seconds / kmeans_seconds}


def curve(methods, sizes, seeds):
    """Median (and range) of every metric per method and n."""
    rows = []
    for n in sizes:
        X, y = data(n)
        optimum, kmeans_seconds = reference(X)
        for name, make in methods.items():
            runs = [one_run(make(seed), X, y, optimum, kmeans_seconds) for seed in range(seeds)]
            row = {"method": name, "n": n, "runs": seeds}
            for metric in ("cost_ratio", "ari", "time_ratio"):
                row[metric], row[f"{metric}_min"], row[f"{metric}_max"] = spread(
                    r[metric] for r in runs)
            rows.append(row)
            print(f"  {name:>24} n={n:>9}  cost ratio {row['cost_ratio']:.4g}  "
                  f"ARI {row['ari']:.3f}  time x{row['time_ratio']:.1f}")
    return rows


def local_methods(epsilons):
    return {f"local eps={eps:g}": (lambda seed, eps=eps: LocalPrivateStableKMeans(
        N_CLUSTERS, epsilon=eps, data_radius=RADIUS, random_state=seed,
        accountant=BudgetAccountant())) for eps in epsilons}


def central_methods():
    common = {"epsilon": 1.0, "data_radius": RADIUS}
    return {
        "sample_aggregate eps=1": lambda seed: SampleAggregateStableKMeans(
            N_CLUSTERS, random_state=seed, accountant=BudgetAccountant(), **common),
        "stable eps=1": lambda seed: PrivateStableKMeans(
            N_CLUSTERS, random_state=seed, accountant=BudgetAccountant(), **common),
    }


def useful_from(rows):
    """Smallest n per method whose median cost ratio is at most :data:`USEFUL_RATIO` (or None)."""
    found = {}
    for row in sorted(rows, key=lambda r: r["n"]):
        if row["cost_ratio"] <= USEFUL_RATIO:
            found.setdefault(row["method"], row["n"])
    return {method: found.get(method) for method in dict.fromkeys(r["method"] for r in rows)}


def _plot(name, rows, title):
    plot_lines(name, rows, x="n", y="cost_ratio", group="method", xlabel="n (rows = users)",
               ylabel="cost / non-private k-means cost (median)", title=title, logx=True,
               logy=True, band=("cost_ratio_min", "cost_ratio_max"))


@writes_results
def run(quick):
    """Run the protocol; write the CSV and PNG files; return the headline rows."""
    protocol = PROTOCOLS[bool(quick)]
    local = curve(local_methods(protocol["local_epsilons"]), protocol["local_sizes"],
                  protocol["seeds"])
    write_csv("local_curve", local)
    _plot("local_curve", local, "LDP-Stable-k-Means: cost ratio against n (k=4, d=4)")
    central = curve(central_methods(), protocol["sa_sizes"], protocol["seeds"])
    write_csv("local_sa", central)
    _plot("local_sa", central, "Sample-and-aggregate vs PrivateStableKMeans (eps=1)")
    headline = []
    for rows in (local, central):
        first = useful_from(rows)
        largest = max(r["n"] for r in rows)
        for row in rows:
            if row["n"] == largest:
                headline.append({"method": row["method"], "n": largest,
                                 "cost_ratio": round(row["cost_ratio"], 4),
                                 "ari": round(row["ari"], 3),
                                 "time_ratio": round(row["time_ratio"], 2),
                                 "useful_from": first[row["method"]]})
    return headline


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="3 seeds, n up to 4e6 (default)")
    size.add_argument("--full", action="store_true", help="10 seeds, n up to 1.6e7")
    args = parser.parse_args(argv)
    print_table(run(quick=not args.full))


if __name__ == "__main__":
    main()
