"""FedDP-KMeans on the paper's synthetic setting: cost against epsilon, and time per round.

Scott, Lampert & Saulpic (ICML 2025), §5.1 and App. G.1 (``spec/feddp_kmeans.md`` §6):
a mixture of k = 10 Gaussians in d = 100 (means uniform in [0, 1]^d, covariance
0.5 I), 100 clients of 1000 points (n = 1e5), and server data that is small and
out of distribution (20 points per component plus 100 uniform points in
[0, 1]^d). Data-point-level DP, delta = 1e-6, neighbouring="add_remove" (the
paper's relation) unless the method says "replace-one" (the estimator's default).

**Cost.** k-means cost per point of the released centres against the total
epsilon of the fit (basic composition: what the accountant is charged). With
the optional ``dp-accounting`` package, ``pld_epsilon`` is the PLD total of
the same releases, the x-axis of the paper's figures. Methods: FedDP-KMeans
(T = 0 and 1 FedDP-Lloyds steps), and the paper's baselines ServerKMeans++,
ServerLloyds and SpherePacking, each followed by 3 FedDP-Lloyds steps with the
whole budget; "Optimal" is non-private k-means on all client data. The spec's
reference values (§6.5: FedDP-Init median cost/n at eps_init = 0.1 ... 1, whose
PLD totals are 0.080 ... 0.811; optimum 49.9) are in ``spec_reference``.

**Time.** Seconds per round of communication (fit time / rounds, server work
included) against n and the number of clients, with scikit-learn's
``KMeans(n_init=1)`` on the same rows as the yardstick (``ratio`` = fit time /
KMeans time); at the largest n with 100 clients, also on joblib threads
(``n_jobs=2``) and on a local Dask cluster (``executor="dask"``).

Writes ``results/federated_cost.csv``, ``federated_cost.png``,
``federated_time.csv`` and ``federated_time.png``.

Usage::

    python -m benchmarks.bench_federated --quick   # n = 1e5, eps 0.1 ... 1, 3 seeds (~3 min)
    python -m benchmarks.bench_federated --full    # eps 0.05 ... 10, T in {0,1,2} / {1,2,5},
                                                   # 5 seeds, client level, larger timing grid
"""

import argparse
import math
import time
from dataclasses import dataclass

import numpy as np
from sklearn.cluster import KMeans

from benchmarks._common import plot_lines, print_table, spread, write_csv, writes_results
from skdpcluster import BudgetAccountant
from skdpcluster.cluster import _federated_init as fi
from skdpcluster.cluster._federated import FederatedPrivateKMeans

N_FEATURES, N_CLUSTERS = 100, 10
#: Spec §6.5 [R]: FedDP-Init median cost/n at basic eps_init, and the PLD total of those releases.
SPEC_FEDDP = {0.1: (53.94, 0.080), 0.2: (52.06, 0.160), 0.3: (51.53, 0.241), 0.5: (50.17, 0.404),
              0.75: (49.94, 0.607), 1.0: (49.925, 0.811)}
SPEC_OPTIMUM = 49.913


@dataclass(frozen=True)
class Method:
    """One curve: an estimator configuration."""

    name: str
    init: str
    n_lloyd_iter: int
    neighbouring: str = "add_remove"

    def estimator(self, epsilon, seed):
        return FederatedPrivateKMeans(
            N_CLUSTERS, epsilon=epsilon, delta=1e-6, init=self.init,
            n_lloyd_iter=self.n_lloyd_iter, neighbouring=self.neighbouring, random_state=seed,
            accountant=BudgetAccountant())


def methods(quick):
    """FedDP-KMeans variants and the paper's baselines."""
    feddp_iters = (0, 1) if quick else (0, 1, 2)
    baseline_iters = (3,) if quick else (1, 2, 5)
    chosen = [Method(f"FedDP-KMeans T={t}", "feddp", t) for t in feddp_iters]
    chosen.append(Method("FedDP-KMeans T=0 replace-one", "feddp", 0, "replace_one"))
    names = {"server_kmeans++": "ServerKMeans++", "server_lloyds": "ServerLloyds",
             "sphere_packing": "SpherePacking"}
    chosen += [Method(f"{label} + Lloyds T={t}", init, t)
               for init, label in names.items() for t in baseline_iters]
    return chosen


def paper_data(n_clients=100, per_client=1000, seed=0):
    """The paper's synthetic mixture (App. G.1): rows, client ids, server rows, true means."""
    rng = np.random.default_rng(seed)
    means = rng.uniform(size=(N_CLUSTERS, N_FEATURES))
    n_samples = n_clients * per_client
    X = means[rng.integers(N_CLUSTERS, size=n_samples)]
    X += rng.normal(scale=math.sqrt(0.5), size=X.shape)
    in_distribution = np.repeat(means, 20, axis=0)
    in_distribution += rng.normal(scale=math.sqrt(0.5), size=in_distribution.shape)
    server = np.vstack([in_distribution, rng.uniform(size=(100, N_FEATURES))])
    return X, np.repeat(np.arange(n_clients), per_client), server, means


def cost_per_point(X, centers):
    """k-means cost of ``centers`` on ``X`` divided by n, in blocks."""
    total, center_sq = 0.0, np.einsum("ij,ij->i", centers, centers)
    for start in range(0, len(X), 20_000):
        block = X[start:start + 20_000]
        distances = np.einsum("ij,ij->i", block, block)[:, None] - 2 * block @ centers.T + center_sq
        total += float(np.maximum(distances.min(axis=1), 0.0).sum())
    return total / len(X)


def pld_epsilon(estimator):
    """PLD total (dp-accounting) of a basic-accounted fit's releases; NaN without the package."""
    try:
        import dp_accounting  # noqa: F401
    except ImportError:
        return math.nan
    steps = estimator.budget_["steps"]
    releases = {step: fi.Release(step=step, **values) for step, values in steps.items()}
    return fi._pld_epsilon(releases, estimator.delta)


def cost_rows(data, quick):
    """One row per (method, epsilon): median / min / max cost per point over seeds."""
    X, clients, server, _ = data
    epsilons = sorted(SPEC_FEDDP) if quick else [0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 2.0, 5.0,
                                                 10.0]
    n_seeds = 3 if quick else 5
    rows = []
    for method in methods(quick):
        for epsilon in epsilons:
            costs, fitted = [], None
            for seed in range(n_seeds):
                fitted = method.estimator(epsilon, seed).fit(X, client_ids=clients,
                                                             X_server=server)
                costs.append(cost_per_point(X, fitted.cluster_centers_))
            median, low, high = spread(costs)
            reference = SPEC_FEDDP.get(epsilon, (math.nan, math.nan))
            is_anchor = method.name == "FedDP-KMeans T=0"
            rows.append(dict(
                method=method.name, epsilon=epsilon, pld_epsilon=pld_epsilon(fitted),
                cost_median=median, cost_min=low, cost_max=high, seeds=n_seeds,
                spec_reference=reference[0] if is_anchor else math.nan,
                spec_pld_epsilon=reference[1] if is_anchor else math.nan))
        print(f"  {method.name}: done")
    return rows


def reference_rows(data, epsilons):
    """Non-private optimum (sklearn KMeans) and the cost at the true means, flat over epsilon."""
    X, _, _, means = data
    optimum = KMeans(N_CLUSTERS, n_init=3, random_state=0).fit(X).cluster_centers_
    optimum = cost_per_point(X, optimum)
    truth = cost_per_point(X, means)
    return [dict(method=name, epsilon=e, pld_epsilon=math.nan, cost_median=value,
                 cost_min=value, cost_max=value, seeds=1,
                 spec_reference=SPEC_OPTIMUM if name.startswith("Optimal") else math.nan,
                 spec_pld_epsilon=math.nan)
            for name, value in (("Optimal (non-private k-means)", optimum), ("true means", truth))
            for e in epsilons]


def _time_fit(X, clients, server, **params):
    """Seconds per round of one fit (epsilon 1, T = 2) and its number of rounds."""
    est = FederatedPrivateKMeans(N_CLUSTERS, epsilon=1.0, n_lloyd_iter=2, random_state=0,
                                 accountant=BudgetAccountant(), **params)
    start = time.perf_counter()
    est.fit(X, client_ids=clients, X_server=server)
    return (time.perf_counter() - start) / est.n_rounds_, est.n_rounds_


def time_rows(quick):
    """Seconds per round against n and the number of clients, and the KMeans yardstick."""
    sizes = (20_000, 100_000) if quick else (10_000, 100_000, 300_000)
    client_counts = (10, 100, 1000) if quick else (10, 100, 1000, 10_000)
    units = ("sample",) if quick else ("sample", "client")
    rows = []
    for n_samples in sizes:
        for n_clients in client_counts:
            X, clients, server, _ = paper_data(n_clients, n_samples // n_clients, seed=1)
            start = time.perf_counter()
            KMeans(N_CLUSTERS, n_init=1, random_state=0).fit(X)
            kmeans_s = time.perf_counter() - start
            for unit in units:
                per_round, rounds = _time_fit(X, clients, server, privacy_unit=unit)
                rows.append(dict(n_samples=n_samples, n_clients=n_clients, privacy_unit=unit,
                                 engine="in-process", rounds=rounds, s_per_round=per_round,
                                 kmeans_s=kmeans_s, ratio=per_round * rounds / kmeans_s))
    return rows + engine_rows(rows)


def engine_rows(rows, n_clients=100):
    """The largest n with 100 clients on joblib threads (n_jobs=2) and on a local Dask cluster."""
    n_samples = max(row["n_samples"] for row in rows)
    base = next(row for row in rows if row["n_samples"] == n_samples
                and row["n_clients"] == n_clients and row["privacy_unit"] == "sample")
    X, clients, server, _ = paper_data(n_clients, n_samples // n_clients, seed=1)
    engines = {"joblib n_jobs=2": {"n_jobs": 2}}
    try:
        import distributed
    except ImportError:
        distributed = None
    timed = [(name, *_time_fit(X, clients, server, **params)) for name, params in engines.items()]
    if distributed is not None:
        with distributed.Client(processes=False, n_workers=2, threads_per_worker=1,
                                dashboard_address=":0"):
            timed.append(("dask, 2 workers", *_time_fit(X, clients, server, executor="dask")))
    return [{**base, "engine": name, "s_per_round": per_round,
             "ratio": per_round * rounds / base["kmeans_s"]} for name, per_round, rounds in timed]


@writes_results
def run(quick=True):
    """Cost and timing benchmarks; write CSV and PNG; return headline rows."""
    data = paper_data()
    rows = cost_rows(data, quick)
    rows += reference_rows(data, sorted({row["epsilon"] for row in rows}))
    write_csv("federated_cost", rows)
    print_table(rows, ["method", "epsilon", "pld_epsilon", "cost_median", "cost_min", "cost_max",
                       "spec_reference", "spec_pld_epsilon"])
    plot_lines("federated_cost", rows, x="epsilon", y="cost_median", group="method",
               xlabel="total epsilon (basic composition), delta = 1e-6",
               ylabel="k-means cost / n", logx=True, band=("cost_min", "cost_max"),
               title="FedDP-KMeans, synthetic mixture (d=100, k=10, 100 clients)")
    timing = time_rows(quick)
    write_csv("federated_time", timing)
    print_table(timing)
    sample = [row for row in timing
              if row["privacy_unit"] == "sample" and row["engine"] == "in-process"]
    plot_lines("federated_time", sample, x="n_samples", y="s_per_round", group="n_clients",
               xlabel="n (rows)", ylabel="seconds per round", logx=True, logy=True,
               title="FedDP-KMeans: time per round of communication")
    return headline(rows, timing)


def headline(rows, timing):
    """Cost at epsilon 0.5 (PLD ~ 0.40) per method, and the time per round at the largest n."""
    picked = [dict(measure=f"cost/n at eps=0.5: {row['method']}", value=row["cost_median"],
                   reference=row["spec_reference"])
              for row in rows if row["epsilon"] == 0.5]
    largest = max(row["n_samples"] for row in timing)
    picked += [dict(measure=(f"s/round n={largest} clients={row['n_clients']} "
                             f"({row['privacy_unit']}, {row['engine']})"),
                    value=row["s_per_round"], reference=math.nan)
               for row in timing if row["n_samples"] == largest]
    return picked


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true",
                        help="the spec's grid; without it, --quick (n = 1e5, eps 0.1 ... 1)")
    parser.add_argument("--quick", action="store_true", help="the default")
    print_table(run(quick=not parser.parse_args(argv).full))

if __name__ == "__main__":
    main()
