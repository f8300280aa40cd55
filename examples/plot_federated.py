"""
A federated run
===============

:class:`~skdpcluster.FederatedPrivateKMeans` (FedDP-KMeans, Scott, Lampert &
Saulpic 2025): 50 clients hold 400 rows each of a 10-dimensional mixture of
five clusters, spread unevenly (each client mostly sees two clusters); the
server holds 60 public points that are *out of distribution* (drawn around
shifted means). The server never sees a row, only noisy sums over clients.
We compare the cost of the private centres with non-private k-means on all
the clients' rows, against the total epsilon of the fit.
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np
from sklearn.cluster import KMeans

from skdpcluster import BudgetAccountant, FederatedPrivateKMeans

rng = np.random.default_rng(0)
k, d, n_clients, rows = 5, 10, 50, 400
means = rng.uniform(-4, 4, size=(k, d))
X, clients = [], []
for client in range(n_clients):
    favourite = rng.choice(k, size=2, replace=False)       # each client sees mostly two clusters
    labels = np.where(rng.random(rows) < 0.8, rng.choice(favourite, rows), rng.integers(k, size=rows))
    X.append(means[labels] + rng.normal(size=(rows, d)))
    clients += [client] * rows
X, clients = np.vstack(X), np.array(clients)
server = means.repeat(12, axis=0) + rng.normal(scale=1.5, size=(12 * k, d)) + 0.5

optimum = -KMeans(k, n_init=10, random_state=0).fit(X).score(X)
epsilons = [0.1, 0.25, 0.5, 1.0, 2.0]
ratios = []
for epsilon in epsilons:
    runs = []
    for seed in range(3):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")       # the smallest epsilons warn about their noise
            est = FederatedPrivateKMeans(k, epsilon=epsilon, delta=1e-6, data_radius=16.0,
                                         accountant=BudgetAccountant(), random_state=seed)
            est.fit(X, client_ids=clients, X_server=server)
        runs.append(-est.score(X) / optimum)
    ratios.append(runs)
    print(f"epsilon={epsilon:<5} rounds={est.n_rounds_} init={est.init_} "
          f"cost ratio median={np.median(runs):.3f}")

# %%
ratios = np.array(ratios)
fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(epsilons, np.median(ratios, axis=1), marker="o", label="FedDP-KMeans (median of 3)")
ax.fill_between(epsilons, ratios.min(axis=1), ratios.max(axis=1), alpha=0.3)
ax.axhline(1.0, color="black", lw=0.8, label="non-private k-means, all rows")
ax.set(xscale="log", xlabel=r"total $\varepsilon$ of the fit", ylabel="cost / non-private cost")
ax.legend()
plt.show()
