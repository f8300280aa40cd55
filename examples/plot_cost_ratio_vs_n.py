"""
Cost ratio and success against n, for each estimator
====================================================

How many rows does each central-model estimator need? On the benchmark's
mixture (k = 4 unit-variance clusters in d = 4, closest means 10 standard
deviations apart, public ``data_radius=20``, epsilon = 1, delta = 1e-6), the
k-means cost of the released centres relative to non-private scikit-learn
``KMeans`` (median of 3 seeds), and the share of runs that meet the target
(a release with cost within 1 % of scikit-learn's).

This is a small version of ``python -m benchmarks.bench_stable`` and
``bench_ktuple_practical``; the committed tables are in
``benchmarks/results/``. The federated and local estimators need other data
(see the other examples and :doc:`/guide/choosing`).
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans

from skdpcluster import (BudgetAccountant, KTupleClusterer, PrivateHighDimKMeans,
                         PrivateStableKMeans, PrivateStableKMedian)
from skdpcluster.datasets import make_separated_mixture

ESTIMATORS = {
    "PrivateStableKMeans": PrivateStableKMeans,
    "PrivateStableKMedian": PrivateStableKMedian,
    "KTupleClusterer": KTupleClusterer,
    "PrivateHighDimKMeans": PrivateHighDimKMeans,
}
SIZES = [2_000, 5_000, 10_000, 30_000]
SEEDS = range(3)


def cost_ratio(name, X, reference, seed):
    """k-means cost of one private fit over the non-private cost (inf when nothing is released)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")              # too-few-rows warnings are the point here
        est = ESTIMATORS[name](4, epsilon=1.0, delta=1e-6, data_radius=20.0,
                               accountant=BudgetAccountant(), random_state=seed).fit(X)
    if est.cluster_centers_ is None:
        return np.inf
    distances = ((X[:, None, :] - est.cluster_centers_[None]) ** 2).sum(axis=2)
    return distances.min(axis=1).sum() / reference


ratios = {name: [] for name in ESTIMATORS}
for n in SIZES:
    X, _ = make_separated_mixture(n, n_clusters=4, n_features=4, separation=10 / np.sqrt(2),
                                  random_state=0)
    reference = -KMeans(4, n_init=10, random_state=0).fit(X).score(X)
    for name in ESTIMATORS:
        ratios[name].append([cost_ratio(name, X, reference, seed) for seed in SEEDS])
        print(f"n={n:>6} {name:<21} cost ratios {np.round(ratios[name][-1], 4)}")

# %%
fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
for name, rows in ratios.items():
    rows = np.array(rows)
    left.plot(SIZES, np.median(rows, axis=1), marker="o", label=name)
    right.plot(SIZES, (rows <= 1.01).mean(axis=1), marker="o", label=name)
left.set(xscale="log", yscale="log", xlabel="n", ylabel="cost / non-private cost (median)")
right.set(xscale="log", xlabel="n", ylabel="share of runs within 1 %", ylim=(-0.05, 1.05))
left.legend()
fig.tight_layout()
plt.show()
