"""
The Cohen et al. Test1 curve (small)
====================================

The paper's first experiment (Cohen, Kaplan, Mansour, Stemmer & Tsfadia,
ICML 2021, Figure 5): a mixture of two unit Gaussians in one dimension at
:math:`\\pm R`, clustered by ``KTupleClusterer(method="noisy_centers")`` at the
minimal number of tuples, with s samples per tuple. A run succeeds when the
private test passes and every sample is nearest to the released centre of
its own component. The success rate against s, at R = 512, 8 runs per point
(the full search, with 20 runs and R from 32 to 512, is
``python -m benchmarks.bench_ktuple_paper``; it finds 95 % success from
s = 57 with the library's provable defaults).
"""

import warnings

import matplotlib.pyplot as plt
import numpy as np

from skdpcluster import BudgetAccountant, KTupleClusterer
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.ktuple import min_tuples

EPSILON, DELTA, BETA = 1.0, np.exp(-28), 0.05      # the paper's setting
n_tuples = min_tuples(EPSILON, DELTA, BETA)        # 5019 with the corrected accounting
print("tuples:", n_tuples)


def success(samples_per_tuple, run):
    """One run: fresh samples, one private fit, the paper's success criterion."""
    data_rng, fit_rng = np.random.default_rng([samples_per_tuple, run]).spawn(2)
    X, y = make_separated_mixture(n_tuples * samples_per_tuple, n_clusters=2, n_features=1,
                                  separation=512, random_state=data_rng)
    est = KTupleClusterer(2, method="noisy_centers", epsilon=EPSILON, delta=DELTA, beta=BETA,
                          n_tuples=n_tuples, fallback_share=0.0, accountant=BudgetAccountant(),
                          random_state=fit_rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")            # a failed private test warns
        est.fit(X)
    if est.status_ != "success":
        return False
    # every component's samples share one label, and the two labels differ
    return all(np.unique(est.labels_[y == c]).size == 1 for c in (0, 1)) and \
        np.unique(est.labels_).size == 2


sizes = [20, 28, 40, 57, 80]
rates = []
for s in sizes:
    rates.append(np.mean([success(s, run) for run in range(8)]))
    print(f"samples per tuple={s:>3}  rows={n_tuples * s:>7}  success rate={rates[-1]:.2f}")

# %%
fig, ax = plt.subplots(figsize=(6, 4))
ax.plot(sizes, rates, marker="o")
ax.axhline(0.95, color="grey", ls="--", lw=0.8, label="95 %")
ax.set(xscale="log", xlabel="samples per tuple s", ylabel="success rate", ylim=(-0.05, 1.05),
       title="Test1: d = 1, k = 2, R = 512, noisy_centers")
ax.legend()
plt.show()
