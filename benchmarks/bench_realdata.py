r"""Real and non-separated data: every estimator beside diffprivlib and Google's LSH clustering.

What it measures
----------------
The k-means cost of the released centres divided by the cost of non-private
scikit-learn ``KMeans(n_init=10)`` on the same data (the *cost ratio*, lower
is better, 1 is sklearn's), the adjusted Rand index of the nearest-centre
labels against the data's labels, and on the unbalanced mixture the error of
the smallest cluster's centre (distance from its true mean to the nearest
released centre), at epsilon in {0.5, 1, 4} and delta = 1e-6; medians over
seeds.

Data sets (every method gets the same public ball :math:`B(c, \Lambda)`):

* ``digits`` (1797 x 64, k = 10), ``breast_cancer`` (569 x 30, k = 2),
  ``wine`` (178 x 13, k = 3): scikit-learn's bundled data sets, every
  feature standardized (non-privately: the benchmark's preprocessing, not a
  release); :math:`c = 0`, :math:`\Lambda = 3\sqrt d` (a standardized row
  has mean squared norm d; the rare rows beyond are projected).
* ``unbalanced``: 4 unit Gaussians in d = 6 with means :math:`\pm 6 e_1,
  \pm 6 e_2` and weights 0.7 / 0.2 / 0.07 / 0.03, n = 10 000;
  :math:`c = 0`, :math:`\Lambda = 6 + 3\sqrt 6`.
* ``outliers``: 3 unit Gaussians in d = 4 with means 8 apart, plus 1 % of
  the rows uniform on the sphere of radius 100 (labelled as a fourth
  class), n = 100 000 (20 000 with ``--quick``); :math:`c = 0`,
  :math:`\Lambda = 20` (the clusters' region: the outliers are projected
  onto the ball, as a user's public bound would do).

Methods: every public clustering estimator of the library, fitted with the
public bound and its defaults (``stable_kmeans`` is the default
``PrivateStableKMeans``), plus ``stable_kmeans_private_bound``, the default
``PrivateStableKMeans()`` with ``data_radius=None`` (a private bound on 10 %
of the budget: what a user who types ``Est().fit(X)`` gets); ``diffprivlib``
(``diffprivlib.models.KMeans``, pure epsilon, bounds :math:`c \pm \Lambda`
per coordinate, in its own environment: :mod:`benchmarks._diffprivlib`) and
``google_lsh`` (``private_lsh_clustering`` of google/differential-privacy
``learning/clustering``, radius :math:`\Lambda` about :math:`c`, in its own
environment: :mod:`benchmarks._google`; only when ``SKDP_GOOGLE_CLUSTERING``
points at a copy of it, skipped with the reason printed otherwise).

Outputs: ``realdata_runs.csv`` (every run), ``realdata_summary.csv`` (median
per data set, epsilon and method), ``realdata_headline.csv`` (default, best
of ours, diffprivlib and Google per data set and epsilon) and
``realdata_<dataset>.png`` (median cost ratio against epsilon, one line per
method).

Usage::

    SKDP_GOOGLE_CLUSTERING=/path/to/differential-privacy \
        python -m benchmarks --only realdata --quick   # 3 seeds, outliers at n = 2e4
    python -m benchmarks --only realdata --full        # 10 seeds, outliers at n = 1e5
    python -m benchmarks.bench_realdata --full --seeds 5 --datasets wine digits
"""

import argparse
import math
import statistics
import subprocess
import time
import warnings
from dataclasses import dataclass

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import load_breast_cancer, load_digits, load_wine
from sklearn.metrics import adjusted_rand_score
from sklearn.preprocessing import StandardScaler

from benchmarks._common import RESULTS, plot_lines, print_table, write_csv, writes_results
from skdpcluster import (BudgetAccountant, FederatedPrivateKMeans, KTupleClusterer,
                         PrivateGaussianMixture, PrivateHighDimKMeans, PrivateHighDimKMedian,
                         PrivateStableKMeans, PrivateStableKMedian, SampleAggregateStableKMeans)
from skdpcluster.cluster._stable_init import nearest_centers
from skdpcluster.datasets import make_separated_mixture

EPSILONS = (0.5, 1.0, 4.0)
DELTA = 1e-6
DEFAULT = "stable_kmeans"


@dataclass(frozen=True)
class Dataset:
    """Rows, labels, k, the public ball and (unbalanced mixture) the smallest cluster's mean."""

    X: np.ndarray
    y: np.ndarray
    k: int
    center: np.ndarray
    radius: float
    smallest_mean: np.ndarray = None


def _standardized(loader, k):
    data = loader()
    X = StandardScaler().fit_transform(data.data)
    d = X.shape[1]
    return Dataset(X, data.target, k, np.zeros(d), 3.0 * math.sqrt(d))


def _unbalanced():
    X, y, means = make_separated_mixture(10_000, n_clusters=4, n_features=6, separation=6.0,
                                         weights=[0.7, 0.2, 0.07, 0.03], random_state=0,
                                         return_centers=True)
    return Dataset(X, y, 4, np.zeros(6), 6.0 + 3.0 * math.sqrt(6), smallest_mean=means[3])


def _outliers(n_samples):
    rng = np.random.default_rng(0)
    n_out = n_samples // 100
    means = 8.0 / math.sqrt(2) * np.eye(4)[:3]  # pairwise 8 apart
    X, y = make_separated_mixture(n_samples - n_out, means=means, random_state=rng)
    directions = rng.standard_normal((n_out, 4))
    far = 100.0 * directions / np.linalg.norm(directions, axis=1, keepdims=True)
    order = rng.permutation(n_samples)
    return Dataset(np.vstack([X, far])[order], np.concatenate([y, np.full(n_out, 3)])[order], 3,
                   np.zeros(4), 20.0)


def datasets(quick):
    """The data sets of the protocol (the outlier mixture is smaller with ``quick``)."""
    return {
        "digits": lambda: _standardized(load_digits, 10),
        "breast_cancer": lambda: _standardized(load_breast_cancer, 2),
        "wine": lambda: _standardized(load_wine, 3),
        "unbalanced": _unbalanced,
        "outliers": lambda: _outliers(20_000 if quick else 100_000),
    }


def _bounded(cls, **extra):
    """A fit function: ``cls`` with the public ball, a fresh accountant and the seed."""
    def fit(X, k, epsilon, data, seed):
        size = {"n_components" if cls is PrivateGaussianMixture else "n_clusters": k}
        est = cls(**size, epsilon=epsilon, delta=DELTA, data_radius=data.radius,
                  data_center=data.center, accountant=BudgetAccountant(), random_state=seed,
                  **extra).fit(X)
        return getattr(est, "cluster_centers_", getattr(est, "means_", None))
    return fit


def _private_bound(cls):
    """A fit function with the default private bound (``data_radius=None``)."""
    def fit(X, k, epsilon, data, seed):
        est = cls(k, epsilon=epsilon, delta=DELTA, accountant=BudgetAccountant(),
                  random_state=seed).fit(X)
        return est.cluster_centers_
    return fit


METHODS = {
    "stable_kmeans": _bounded(PrivateStableKMeans),
    "stable_kmeans_private_bound": _private_bound(PrivateStableKMeans),
    "stable_kmedian": _bounded(PrivateStableKMedian),
    "highdim_kmeans": _bounded(PrivateHighDimKMeans),
    "highdim_kmedian": _bounded(PrivateHighDimKMedian),
    "sample_aggregate": _bounded(SampleAggregateStableKMeans),
    "ktuple": _bounded(KTupleClusterer),
    "gaussian_mixture": _bounded(PrivateGaussianMixture),
    "federated": _bounded(FederatedPrivateKMeans),
}


_SCORES = ("cost_ratio", "ari", "small_err")


def _score(X, y, centers, reference_cost, smallest_mean):
    """Cost ratio, ARI and the smallest cluster's centre error of released ``centers``."""
    centers = np.asarray(centers, dtype=float)
    labels, distances = nearest_centers(X, centers)
    error = (float(np.linalg.norm(centers - smallest_mean, axis=1).min())
             if smallest_mean is not None else float("nan"))
    return {"cost_ratio": float(distances.sum()) / reference_cost,
            "ari": float(adjusted_rand_score(y, labels)), "small_err": error}


def our_rows(name, data, epsilon, seeds, reference_cost, methods=METHODS):
    """One row per (method, seed) of the library's estimators; a failed fit keeps its error."""
    rows = []
    base = {"dataset": name, "n": data.X.shape[0], "d": data.X.shape[1], "k": data.k,
            "epsilon": epsilon}
    for method, fit in methods.items():
        for seed in seeds:
            start = time.perf_counter()
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # fallbacks and utility warnings: in the rows
                    centers = fit(data.X, data.k, epsilon, data, seed)
                status = "ok" if centers is not None else "nothing released"
            except Exception as error:  # noqa: BLE001 -- a benchmark records every failure
                centers, status = None, f"{type(error).__name__}: {error}"[:120]
            seconds = time.perf_counter() - start
            score = (_score(data.X, data.y, centers, reference_cost, data.smallest_mean)
                     if centers is not None else dict.fromkeys(_SCORES, math.nan))
            rows.append({**base, "method": method, "seed": seed, **score,
                         "seconds": seconds, "status": status})
    return rows


def _anchor_rows(method, results, base, data, reference_cost):
    out = []
    for result in results:
        score = _score(data.X, data.y, result["centers"], reference_cost, data.smallest_mean)
        out.append({**base, "method": method, "seed": result["seed"], **score,
                    "seconds": result["seconds"], "status": "ok"})
    return out


def anchor_rows(name, data, epsilon, seeds, reference_cost, learning):
    """diffprivlib's and (when ``learning`` is a folder) Google's runs; a failure is printed."""
    from benchmarks._diffprivlib import run_diffprivlib_kmeans
    from benchmarks._google import run_google_clustering

    base = {"dataset": name, "n": data.X.shape[0], "d": data.X.shape[1], "k": data.k,
            "epsilon": epsilon}
    rows = []
    try:
        results = run_diffprivlib_kmeans(data.X, data.k, epsilon=epsilon,
                                         bounds=(data.center - data.radius,
                                                 data.center + data.radius),
                                         random_states=seeds, y=data.y)
        rows += _anchor_rows("diffprivlib", results, base, data, reference_cost)
    except (OSError, subprocess.SubprocessError) as error:
        print(f"  diffprivlib unavailable ({error}); its rows are left out")
    if learning is not None:
        try:
            results = run_google_clustering(data.X, data.k, epsilon=epsilon, delta=DELTA,
                                            center=data.center, radius=data.radius,
                                            random_states=seeds, y=data.y, learning=learning)
            rows += _anchor_rows("google_lsh", results, base, data, reference_cost)
        except (OSError, subprocess.SubprocessError) as error:
            print(f"  Google's LSH clustering failed ({error}); its rows are left out")
    return rows


def reference_cost(X, k):
    """Cost of non-private ``KMeans(n_init=10)`` (seed 0): the denominator of every ratio."""
    centers = KMeans(k, n_init=10, random_state=0).fit(X).cluster_centers_
    return float(nearest_centers(X, centers)[1].sum())


def summarize(rows):
    """Median cost ratio, ARI, small-cluster error and seconds per (dataset, epsilon, method)."""
    groups = {}
    for row in rows:
        groups.setdefault((row["dataset"], row["epsilon"], row["method"]), []).append(row)
    summary = []
    for (dataset, epsilon, method), group in groups.items():
        ok = [r for r in group if r["status"] == "ok"]

        def median(key, ok=ok):
            values = [r[key] for r in ok if not math.isnan(r[key])]
            return round(statistics.median(values), 4) if values else math.nan

        summary.append({"dataset": dataset, "epsilon": epsilon, "method": method,
                        "runs": len(group), "failed": len(group) - len(ok),
                        "cost_ratio": median("cost_ratio"), "ari": median("ari"),
                        "small_err": median("small_err"), "seconds": median("seconds")})
    return summary


def headline(summary):
    """Per (dataset, epsilon): cost ratio of the default, the best of ours, diffprivlib, Google."""
    anchors = ("diffprivlib", "google_lsh")
    out = []
    for key in dict.fromkeys((r["dataset"], r["epsilon"]) for r in summary):
        cell = {r["method"]: r for r in summary if (r["dataset"], r["epsilon"]) == key}
        ours = [r for m, r in cell.items() if m not in anchors and not math.isnan(r["cost_ratio"])]
        best = min(ours, key=lambda r: r["cost_ratio"])
        row = {"dataset": key[0], "epsilon": key[1],
               "default": cell[DEFAULT]["cost_ratio"], "default_ari": cell[DEFAULT]["ari"],
               "best_ours": best["method"], "best_cost": best["cost_ratio"],
               "best_ari": best["ari"]}
        for anchor in anchors:
            row[anchor] = cell[anchor]["cost_ratio"] if anchor in cell else math.nan
            row[f"{anchor}_ari"] = cell[anchor]["ari"] if anchor in cell else math.nan
        row["small_err_default"] = cell[DEFAULT]["small_err"]
        row["small_err_best"] = min((r["small_err"] for r in ours), key=_nan_last)
        out.append(row)
    return out


def _nan_last(value):
    return (math.isnan(value), value)


def plot(summary):
    for dataset in dict.fromkeys(r["dataset"] for r in summary):
        rows = [r for r in summary if r["dataset"] == dataset and not math.isnan(r["cost_ratio"])]
        plot_lines(f"realdata_{dataset}", rows, x="epsilon", y="cost_ratio", group="method",
                   xlabel="epsilon", ylabel="cost / sklearn KMeans(n_init=10)",
                   title=f"{dataset}: median cost ratio", logx=True, logy=True)


@writes_results
def run(quick, methods=METHODS, names=None, n_seeds=None):
    """Run the protocol (``n_seeds`` in place of 3 or 10); write CSVs and plots; return headline."""
    from benchmarks._google import locate

    learning = locate()
    seeds = list(range(n_seeds or (3 if quick else 10)))
    rows = []
    for name, load in datasets(quick).items():
        if names is not None and name not in names:
            continue
        data = load()
        reference = reference_cost(data.X, data.k)
        for epsilon in EPSILONS:
            print(f"  {name} (n={data.X.shape[0]}, d={data.X.shape[1]}, k={data.k}), "
                  f"epsilon={epsilon}", flush=True)
            rows += our_rows(name, data, epsilon, seeds, reference, methods)
            rows += anchor_rows(name, data, epsilon, seeds, reference, learning)
    summary = summarize(rows)
    write_csv("realdata_runs", rows)
    write_csv("realdata_summary", summary)
    top = headline(summary)
    write_csv("realdata_headline", top)
    plot(summary)
    print(f"  files in {RESULTS}")
    return top


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="3 seeds (the default)")
    size.add_argument("--full", action="store_true", help="10 seeds, outliers at n = 1e5")
    parser.add_argument("--datasets", nargs="+", help="only these data sets")
    parser.add_argument("--seeds", type=int, help="seeds per cell, in place of 3 or 10")
    args = parser.parse_args(argv)
    print_table(run(quick=not args.full, names=args.datasets, n_seeds=args.seeds))


if __name__ == "__main__":
    main()
