r"""Cost of the default private bound (``data_radius=None``) against the true public bound.

What it measures
----------------
For each data set, the same estimator is fitted with the public bound its
benchmark uses (``data_radius``, ``data_center``) and with the default
``data_radius=None`` (10% of the budget spends on a private centre and
radius, :mod:`skdpcluster.bounds`), ``runs`` seeds each, epsilon = 1,
delta = 1e-6. The *cost ratio* is the k-means cost of the released centres
divided by the cost of non-private ``KMeans(n_init=10)``; the table reports
the median ratio of both settings, the relative change of the median, and
the released radius.

* ``stable``: the stable benchmark's mixture (k = d = 4, means 10 apart,
  n = 10^5; public bound ``data_radius=20``), ``PrivateStableKMeans``;
* ``stable_shifted``, ``stable_far``: the same rows shifted by 100 (10^4) in
  every coordinate (the public bound is the ball of radius 20 about the true
  centre);
* ``stable_heavy_tailed``: the same means with Student-t noise (2 degrees of
  freedom, infinite variance) instead of Gaussian, public bound 20;
* ``digits``: scikit-learn's bundled ``load_digits`` (n = 1797, d = 64; the
  high-dimensional benchmark's bound, centre 8, radius 64),
  ``PrivateHighDimKMeans`` with k = 10;
* ``wine``: scikit-learn's bundled ``load_wine`` (n = 178, d = 13; bound:
  the box of the features' documented ranges, centre its middle, radius
  half its diagonal), ``PrivateHighDimKMeans`` with k = 3.

Usage::

    python -m benchmarks.bench_bounds --quick   # 3 seeds per cell (python -m benchmarks --quick)
    python -m benchmarks.bench_bounds           # 10 seeds per cell (the doc's table)
"""

import argparse
import math
import statistics
import warnings

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits, load_wine

from benchmarks._common import print_table, write_csv, writes_results
from skdpcluster import PrivateHighDimKMeans, PrivateStableKMeans
from skdpcluster.cluster._stable_init import nearest_centers
from skdpcluster.datasets import make_separated_mixture


def _stable(shift):
    X, _ = make_separated_mixture(100_000, n_clusters=4, n_features=4,
                                  separation=10 / math.sqrt(2), random_state=0)
    return X + shift, np.full(4, float(shift)), 20.0


def _heavy_tailed():
    """The stable mixture with Student-t noise (2 degrees of freedom) instead of Gaussian."""
    rng = np.random.default_rng(0)
    labels = rng.integers(4, size=100_000)
    means = (10 / math.sqrt(2)) * np.array([[1, 0, 0, 0], [-1, 0, 0, 0], [0, 1, 0, 0], [0, -1, 0, 0]])
    return means[labels] + rng.standard_t(2, size=(100_000, 4)), np.zeros(4), 20.0


def _digits():
    X = load_digits().data.astype(float)
    return X, np.full(64, 8.0), 8.0 * math.sqrt(64)


def _wine():
    X = load_wine().data
    low, high = np.floor(X.min(axis=0)), np.ceil(X.max(axis=0))  # the documented ranges, rounded
    return X, (low + high) / 2.0, float(np.linalg.norm(high - low) / 2.0)


DATASETS = {
    "stable": (lambda: _stable(0.0), PrivateStableKMeans, 4),
    "stable_shifted": (lambda: _stable(100.0), PrivateStableKMeans, 4),
    "stable_far": (lambda: _stable(10_000.0), PrivateStableKMeans, 4),
    "stable_heavy_tailed": (_heavy_tailed, PrivateStableKMeans, 4),
    "digits": (_digits, PrivateHighDimKMeans, 10),
    "wine": (_wine, PrivateHighDimKMeans, 3),
}


def _cost(X, centers):
    return float(nearest_centers(X, np.asarray(centers, dtype=float))[1].sum())


def fit_rows(runs):
    """One row per (data set, bound, seed): the cost ratio and the radius used."""
    rows = []
    for name, (load, estimator, k) in DATASETS.items():
        X, center, radius = load()
        reference = _cost(X, KMeans(k, n_init=10, random_state=0).fit(X).cluster_centers_)
        for bound in ("public", "private"):
            params = ({"data_radius": radius, "data_center": center} if bound == "public" else {})
            for seed in range(runs):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    est = estimator(k, epsilon=1.0, delta=1e-6, random_state=seed, **params).fit(X)
                rows.append({"dataset": name, "bound": bound, "seed": seed,
                             "cost_ratio": _cost(X, est.cluster_centers_) / reference,
                             "data_radius": float(est.data_radius_)})
    return rows


def summarize(rows):
    summary = []
    for name in DATASETS:
        medians = {bound: statistics.median(r["cost_ratio"] for r in rows
                                            if r["dataset"] == name and r["bound"] == bound)
                   for bound in ("public", "private")}
        radius = statistics.median(r["data_radius"] for r in rows
                                   if r["dataset"] == name and r["bound"] == "private")
        public_radius = next(r["data_radius"] for r in rows
                             if r["dataset"] == name and r["bound"] == "public")
        summary.append({"dataset": name, "public_ratio": round(medians["public"], 4),
                        "private_ratio": round(medians["private"], 4),
                        "change_%": round(100 * (medians["private"] / medians["public"] - 1), 2),
                        "public_radius": round(public_radius, 2),
                        "private_radius": round(radius, 2)})
    return summary


@writes_results
def run(quick):
    """Run the protocol, write the CSVs; return the summary rows."""
    rows = fit_rows(3 if quick else 10)
    summary = summarize(rows)
    write_csv("bounds_runs", rows)
    write_csv("bounds_summary", summary)
    return summary


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="3 seeds per cell")
    size.add_argument("--full", action="store_true", help="10 seeds per cell (the default)")
    args = parser.parse_args(argv)
    print_table(run(quick=args.quick))


if __name__ == "__main__":
    main()
