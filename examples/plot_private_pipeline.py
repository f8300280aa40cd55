"""
A pipeline with private scaling
===============================

Scaling the features with scikit-learn's ``StandardScaler`` before a private
estimator leaks the exact mean and scale of the data. Use
:class:`~skdpcluster.preprocessing.PrivateStandardScaler` instead:
:func:`~skdpcluster.preprocessing.make_private_pipeline` charges both steps
to one accountant and hands the scaler's public output bound to the
clusterer as its ``data_radius``, so no budget goes to a bound.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from skdpcluster import BudgetAccountant, PrivateStableKMeans
from skdpcluster.preprocessing import PrivateStandardScaler, make_private_pipeline

# Two features on different scales.
X, y = make_blobs(50_000, centers=3, n_features=2, cluster_std=0.6, random_state=1)
X = X * np.array([1.0, 10.0]) + np.array([5.0, 200.0])

accountant = BudgetAccountant(epsilon=1.0, delta=1e-6)
pipe = make_private_pipeline(
    PrivateStandardScaler(epsilon=0.2, delta=2e-7, random_state=0),
    PrivateStableKMeans(n_clusters=3, epsilon=0.8, delta=8e-7, random_state=0),
    n_features=X.shape[1], accountant=accountant,
).fit(X)
scaler, clusterer = pipe[0], pipe[-1]
print("released mean ", scaler.mean_.round(2), " scale", scaler.scale_.round(2))
print("exact mean    ", X.mean(axis=0).round(2), " scale", X.std(axis=0).round(2), "(not private)")
print("clusterer data_radius (public, from the scaler):", clusterer.data_radius_)
print("total spent:", accountant.total())

# %%
# The released statistics are noisy: the scaler's noise is calibrated to one
# L2 bound on the rows, which the larger feature dominates. The clustering does
# not need them exact. The private centres, mapped back to the original units
# with the released statistics (post-processing), beside non-private k-means
# on the raw rows:
centres = clusterer.cluster_centers_ * scaler.scale_ + scaler.mean_
exact_centres = KMeans(n_clusters=3, n_init=10, random_state=0).fit(X).cluster_centers_
fig, ax = plt.subplots(figsize=(6, 4))
ax.scatter(X[::10, 0], X[::10, 1], c=y[::10], s=2, cmap="Pastel1")
ax.scatter(*exact_centres.T, marker="o", s=120, facecolors="none", edgecolors="black",
           label="KMeans (not private)")
ax.scatter(*centres.T, marker="x", s=80, color="crimson", label="private pipeline")
ax.set_xlabel("feature 0")
ax.set_ylabel("feature 1")
ax.legend()
plt.show()
