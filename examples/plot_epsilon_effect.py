"""
The effect of epsilon
=====================

A smaller epsilon means more noise in every release. On a fixed data set
(k = 4 well-separated clusters in d = 4, n = 10 000), the k-means cost of the
centres of :class:`~skdpcluster.PrivateStableKMeans`, relative to
non-private scikit-learn ``KMeans``, for epsilon from 0.05 to 4 (three seeds
each; the band spans their minimum and maximum).
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans

from skdpcluster import BudgetAccountant, PrivateStableKMeans, UtilityWarning
from skdpcluster.datasets import make_separated_mixture

X, y = make_separated_mixture(10_000, n_clusters=4, n_features=4, separation=10 / np.sqrt(2),
                              random_state=0)
reference = -KMeans(n_clusters=4, n_init=10, random_state=0).fit(X).score(X)
epsilons = [0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0]
ratios = []
for epsilon in epsilons:
    runs = []
    for seed in range(3):
        with warnings.catch_warnings():
            # The small epsilons warn that the noise will swamp the answer, as they should.
            warnings.simplefilter("ignore", UtilityWarning)
            warnings.filterwarnings("ignore", message="GridInitializer")
            est = PrivateStableKMeans(4, epsilon=epsilon, delta=1e-6, data_radius=20.0,
                                      accountant=BudgetAccountant(), random_state=seed).fit(X)
        runs.append(-est.score(X) / reference)
    ratios.append(runs)
    print(f"epsilon={epsilon:<5} cost ratio median={np.median(runs):.4f}  max={max(runs):.4f}")

# %%
ratios = np.array(ratios)
fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(epsilons, np.median(ratios, axis=1), marker="o")
ax.fill_between(epsilons, ratios.min(axis=1), ratios.max(axis=1), alpha=0.3)
ax.set_xscale("log")
ax.set_yscale("log")
ax.set_xlabel(r"$\varepsilon$ of the fit")
ax.set_ylabel("k-means cost / non-private cost")
ax.set_title(r"PrivateStableKMeans, n = 10 000, $\delta = 10^{-6}$")
plt.show()
