"""
Private and non-private centres on 2-D blobs
============================================

:class:`~skdpcluster.PrivateStableKMeans` fitted on 20 000 rows of four 2-D
blobs, beside scikit-learn's non-private ``KMeans``. The private centres are
an (epsilon, delta)-differentially private release; with a public bound on the
rows (``data_radius``) nothing else is spent.
"""

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import make_blobs

from skdpcluster import BudgetAccountant, PrivateStableKMeans

X, y = make_blobs(20_000, centers=4, n_features=2, cluster_std=1.0, center_box=(-15, 15),
                  random_state=0)
accountant = BudgetAccountant(epsilon=1.0, delta=1e-6)
private = PrivateStableKMeans(n_clusters=4, epsilon=1.0, delta=1e-6, data_radius=30.0,
                              accountant=accountant, random_state=0).fit(X)
exact = KMeans(n_clusters=4, n_init=10, random_state=0).fit(X)

# %%
# The private fit reports its status, what it spent, and its cost relative to
# the non-private optimum (k-means cost = ``-score``).
ratio = private.score(X) / exact.score(X)
print(f"status={private.status_}  spent={accountant.total()}  cost ratio={ratio:.5f}")

# %%
# The released centres sit on top of the non-private ones.
fig, ax = plt.subplots(figsize=(5, 5))
ax.scatter(X[::10, 0], X[::10, 1], c=y[::10], s=2, cmap="Pastel1")
ax.scatter(*exact.cluster_centers_.T, marker="o", s=120, facecolors="none",
           edgecolors="black", label="KMeans (not private)")
ax.scatter(*private.cluster_centers_.T, marker="x", s=80, color="crimson",
           label=r"PrivateStableKMeans ($\varepsilon$=1)")
ax.set_title(f"cost ratio {ratio:.4f}")
ax.legend(loc="lower right")
ax.set_aspect("equal")
plt.show()
