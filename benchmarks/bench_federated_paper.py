r"""FedDP-KMeans (Scott et al., ICML 2025): client-level privacy, missing server clusters, choosing k.

What it measures
----------------
The paper's experiments on its synthetic mixture (``spec/feddp_kmeans.md``
§6; the data of :func:`benchmarks.bench_federated.paper_data`: k = 10
Gaussians in d = 100, means uniform in :math:`[0, 1]^d`, covariance
:math:`0.5 I`; server data 20 points per component plus 100 uniform points)
that :mod:`benchmarks.bench_federated` (data-point level, cost against
epsilon) does not cover. Every fit uses ``neighbouring="add_remove"`` (the
paper's relation) and delta = 1e-6, and reports the k-means cost per point
of its centres on all client rows, median and range over seeds, against
the **total epsilon of basic composition** (what the accountant is
charged). The paper plots the PLD total of the same releases (smaller at
equal noise); the optional ``dp-accounting`` package is not installed here.

* ``clients`` (Figure 2 left, spec §4 and §6.3): client-level privacy,
  1000, 2000 and 5000 clients of 50 points (n = 50k, 100k, 250k);
  ``privacy_unit="client"`` with the per-client bounds of the paper's
  configuration for this data (spec §4 table: 1500, 1, 21, 10, 120, 50).
  Methods: FedDP-KMeans (T = 0, the paper's Pareto-optimal choice in 81-86 %
  of client-level runs, Table 5) and ServerLloyds + 1 FedDP-Lloyds step;
  ``Optimal`` is non-private k-means on all rows. The spec's re-implementation
  reached 54.03, 51.79, 50.79, 50.02 at PLD totals 0.90, 1.62, 3.08, 6.08
  with 2000 clients (``spec_reference``).
* ``missing`` (Figures 3-6, App. H.2): data-point level, 100 clients of
  1000 points; the server's in-distribution points come from all but 0, 1, 2
  or 5 of the 10 components (the same 100 uniform points). Methods:
  FedDP-KMeans T = 0 and T = 1, and the server baselines ServerKMeans++,
  ServerLloyds and SpherePacking, each + 2 FedDP-Lloyds steps.
* ``elbow`` (Figure 7, App. H.3): FedDP-Init's steps 1-2 with k' = 20 at
  epsilon = 1 (data-point level, 100 clients), then weighted k-means of the
  noisily weighted projected server points for k = 1 ... 20, a
  post-processing with no further privacy cost (the fit's step-3 release is
  made with a 5 % share and not used). The chosen k is the elbow of that
  curve (:func:`elbow`); the non-private curve on all client rows is shown
  beside it.

Not reproduced: the paper's real data sets (US Census ACSIncome and the
Stack Overflow embeddings) cannot be downloaded here; their loaders are
:func:`skdpcluster.datasets.load_acs_income` and
:func:`skdpcluster.datasets.load_stackoverflow_embeddings`, and
``--acs PATH`` / ``--stackoverflow PATH`` run FedDP-KMeans on local copies.
Client subsampling is not benchmarked: the estimator has none, and the
paper's own accounting of it (its code's ``cohort_fraction``) uses a sampler
that is not Poisson, so its amplified epsilon is heuristic (spec §4 item 4).

Outputs: ``federated_clients.csv``/``.png``, ``federated_missing.csv``/``.png``
and ``federated_elbow.csv``/``.png`` (``federated_real.csv`` with local data).

Usage::

    python -m benchmarks.bench_federated_paper --quick   # smaller grids, 1 seed (~5 min)
    python -m benchmarks.bench_federated_paper --full    # the grids above, 2 seeds (an hour or more)
    python -m benchmarks.bench_federated_paper --full --experiments elbow missing  # 25-40 min each
"""

import argparse
import math
import warnings

import numpy as np
from sklearn.cluster import KMeans

from benchmarks._common import plot_lines, print_table, spread, write_csv, writes_results
from benchmarks.bench_federated import N_CLUSTERS, cost_per_point, paper_data
from skdpcluster import BudgetAccountant
from skdpcluster.cluster._federated import FederatedPrivateKMeans

__all__ = ["CLIENT_CLIP", "client_rows", "elbow", "elbow_rows", "missing_rows",
           "missing_server", "run"]

DELTA = 1e-6
#: The paper's client-level bounds for this data (spec §4 table, in the estimator's keys).
CLIENT_CLIP = {"projection": 1500.0, "weights": 1.0, "sums": 21.0, "counts": 10.0,
               "lloyd_sums": 120.0, "lloyd_counts": 50.0}
#: Spec §6.5 [R] (client level, 2000 clients): FedDP-Init cost/n at PLD epsilon totals.
SPEC_CLIENTS_2000 = {0.90: 54.03, 1.62: 51.79, 3.08: 50.79, 6.08: 50.02}
PROTOCOLS = {
    True: {"seeds": 1, "clients": (1000,), "client_eps": (1.0, 4.0), "missing": (0, 2),
           "missing_eps": (0.5, 2.0)},
    False: {"seeds": 2, "clients": (1000, 2000, 5000), "client_eps": (1.0, 2.0, 4.0, 8.0),
            "missing": (0, 1, 2, 5), "missing_eps": (0.25, 0.5, 1.0, 2.0)},
}
EXPERIMENTS = ("clients", "missing", "elbow")


def _fit(X, clients, server, epsilon, seed, **params):
    """One fit charged to a fresh accountant; its cost per point and basic epsilon total."""
    estimator = FederatedPrivateKMeans(N_CLUSTERS, epsilon=epsilon, delta=DELTA,
                                       neighbouring="add_remove", random_state=seed,
                                       accountant=BudgetAccountant(), **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        estimator.fit(X, client_ids=clients, X_server=server)
    assert estimator.privacy_spent_["epsilon"] <= epsilon * (1 + 1e-9)
    return cost_per_point(X, estimator.cluster_centers_), estimator


def _curve_rows(X, clients, server, methods, epsilons, n_seeds, base):
    """Median / min / max cost per point over seeds for every (method, epsilon)."""
    rows = []
    for name, params in methods.items():
        for epsilon in epsilons:
            costs = [_fit(X, clients, server, epsilon, seed, **params)[0]
                     for seed in range(n_seeds)]
            median, low, high = spread(costs)
            rows.append({**base, "method": name, "epsilon": epsilon, "cost_median": median,
                         "cost_min": low, "cost_max": high, "seeds": n_seeds})
        print(f"  {base} {name}: done", flush=True)
    return rows


def _optimum(X, epsilons, base):
    optimum = cost_per_point(X, KMeans(N_CLUSTERS, n_init=3, random_state=0).fit(X)
                             .cluster_centers_)
    return [{**base, "method": "Optimal (non-private)", "epsilon": e, "cost_median": optimum,
             "cost_min": optimum, "cost_max": optimum, "seeds": 1} for e in epsilons]


# Client level (Figure 2 left) -----------------------------------------------------


def client_rows(protocol, progress=None):
    """Cost against epsilon at client level for each number of clients.

    ``progress(rows)`` is called with the rows so far after every number of clients.
    """
    methods = {
        "FedDP-KMeans T=0": {"privacy_unit": "client", "client_clip": CLIENT_CLIP,
                             "n_lloyd_iter": 0},
        "ServerLloyds + Lloyds T=1": {"privacy_unit": "client", "client_clip": CLIENT_CLIP,
                                      "init": "server_lloyds", "n_lloyd_iter": 1},
    }
    rows = []
    for n_clients in protocol["clients"]:
        X, clients, server, _ = paper_data(n_clients, 50)
        base = {"n_clients": n_clients}
        rows += _curve_rows(X, clients, server, methods, protocol["client_eps"],
                            protocol["seeds"], base)
        for row in rows:
            row.setdefault("spec_reference", "; ".join(
                f"{cost} at PLD eps {eps}" for eps, cost in SPEC_CLIENTS_2000.items())
                if n_clients == 2000 and row["method"].startswith("FedDP") else "")
        rows += [{**row, "spec_reference": ""} for row in _optimum(X, protocol["client_eps"], base)]
        if progress:
            progress(rows)
    return rows


# Missing server clusters (Figures 3-6) ------------------------------------------------


def missing_server(means, n_missing, seed=0):
    """The paper's server data without the in-distribution points of ``n_missing`` components.

    20 points from each of the first ``10 - n_missing`` components (covariance
    0.5 I) and 100 points uniform in :math:`[0, 1]^d`.
    """
    rng = np.random.default_rng([seed, 7, n_missing])
    kept = means[: len(means) - n_missing]
    inside = np.repeat(kept, 20, axis=0)
    inside = inside + rng.normal(scale=math.sqrt(0.5), size=inside.shape)
    return np.vstack([inside, rng.uniform(size=(100, means.shape[1]))])


def missing_rows(protocol, progress=None):
    """Cost against epsilon, data-point level, for each number of missing components.

    ``progress(rows)`` is called with the rows so far after every setting.
    """
    X, clients, _, means = paper_data()
    methods = {
        "FedDP-KMeans T=0": {"n_lloyd_iter": 0},
        "FedDP-KMeans T=1": {"n_lloyd_iter": 1},
        "ServerKMeans++ + Lloyds T=2": {"init": "server_kmeans++", "n_lloyd_iter": 2},
        "ServerLloyds + Lloyds T=2": {"init": "server_lloyds", "n_lloyd_iter": 2},
        "SpherePacking + Lloyds T=2": {"init": "sphere_packing", "n_lloyd_iter": 2},
    }
    rows = []
    for n_missing in protocol["missing"]:
        server = missing_server(means, n_missing)
        base = {"missing": n_missing}
        rows += _curve_rows(X, clients, server, methods, protocol["missing_eps"],
                            protocol["seeds"], base)
        rows += _optimum(X, protocol["missing_eps"], base)
        if progress:
            progress(rows)
    return rows


# Choosing k (Figure 7) ------------------------------------------------------------------


def elbow(ks, costs):
    """The k of largest curvature: the largest second difference of the cost curve.

    ``costs`` are normalised by the cost at the first k; for ks 1, 2, ...
    the elbow is the k at which the decrease flattens most abruptly.
    """
    costs = np.asarray(costs, dtype=float) / costs[0]
    second = costs[:-2] - 2 * costs[1:-1] + costs[2:]
    return int(ks[1 + int(np.argmax(second))])


def _weighted_costs(points, weights, ks):
    return [float(KMeans(k, n_init=10, random_state=0).fit(points, sample_weight=weights)
                  .inertia_) / weights.sum() for k in ks]


def elbow_rows(protocol, k_max=20, epsilon=1.0, data=None):
    """FedDP-Init's projected, weighted server points at k' = k_max: the k-means cost curve.

    ``data`` is ``(X, client_ids, X_server)``; ``None`` means the paper's
    mixture with 100 clients.
    """
    X, clients, server = data or paper_data()[:3]
    rows = []
    for seed in range(protocol["seeds"]):
        estimator = FederatedPrivateKMeans(
            k_max, epsilon=epsilon, delta=DELTA, neighbouring="add_remove", n_lloyd_iter=0,
            budget_split={"projection": 0.45, "weights": 0.45, "sums": 0.05, "counts": 0.05},
            random_state=seed, accountant=BudgetAccountant())
        estimator.fit(X, client_ids=clients, X_server=server)
        kept = estimator.server_mask_
        projected = server[kept] @ estimator.components_.T  # data_center=None: the origin
        ks = list(range(1, k_max + 1))
        costs = _weighted_costs(projected, estimator.server_weights_[kept], ks)
        rows += [{"curve": f"FedDP steps 1-2, eps={epsilon}, seed {seed}", "k": k,
                  "cost": cost, "elbow": elbow(ks, costs)} for k, cost in zip(ks, costs)]
    ks = list(range(1, k_max + 1))
    costs = _weighted_costs(X[::10], np.ones(len(X[::10])), ks)
    rows += [{"curve": "non-private, all client rows (1 in 10)", "k": k, "cost": cost,
              "elbow": elbow(ks, costs)} for k, cost in zip(ks, costs)]
    return rows


# Real data, where a local copy exists ------------------------------------------------------


def real_rows(name, bunch, epsilons=(0.5, 1.0, 2.0, 4.0), n_seeds=2):
    """FedDP-KMeans (T = 0) and ServerLloyds + 2 Lloyds steps on a loaded data set."""
    unit = "client" if name == "stackoverflow" else "sample"
    methods = {"FedDP-KMeans T=0": {"privacy_unit": unit, "n_lloyd_iter": 0},
               "ServerLloyds + Lloyds T=2": {"privacy_unit": unit, "init": "server_lloyds",
                                             "n_lloyd_iter": 2}}
    X, clients, server = bunch.data, bunch.client_ids, bunch.server
    rows = _curve_rows(X, clients, server, methods, epsilons, n_seeds, {"dataset": name})
    return rows + _optimum(X, epsilons, {"dataset": name})


# Output ----------------------------------------------------------------------------------


def _write(name, rows, group, title, x="epsilon", y="cost_median", **plot):
    write_csv(name, rows)
    for value in dict.fromkeys(row[group] for row in rows) if group else [None]:
        picked = [row for row in rows if group is None or row[group] == value]
        suffix = "" if group is None else f"_{group}{value}"
        plot_lines(f"{name}{suffix}", picked, x=x, y=y, group="method" if "method" in rows[0]
                   else "curve", title=title.format(value=value), **plot)


@writes_results
def run(quick, experiments=EXPERIMENTS, acs=None, stackoverflow=None):
    """Run the chosen experiments, write their CSVs and plots, return headline rows."""
    protocol = PROTOCOLS[quick]
    headline = []
    cost_plot = {"xlabel": "total epsilon (basic composition), delta = 1e-6",
                 "ylabel": "k-means cost / n", "logx": True, "band": ("cost_min", "cost_max")}
    if "clients" in experiments:
        def write_clients(rows):
            _write("federated_clients", rows, "n_clients",
                   "Client level, {value} clients x 50 points", **cost_plot)

        rows = client_rows(protocol, write_clients)
        headline += [{"experiment": "clients", "setting": f"{r['n_clients']} clients",
                      "method": r["method"], "epsilon": r["epsilon"], "cost": r["cost_median"]}
                     for r in rows if r["epsilon"] in (1.0, 4.0)]
    if "missing" in experiments:
        rows = missing_rows(protocol, lambda rows: _write(
            "federated_missing", rows, "missing", "Server data missing {value} of 10 components",
            **cost_plot))
        headline += [{"experiment": "missing", "setting": f"{r['missing']} missing",
                      "method": r["method"], "epsilon": r["epsilon"], "cost": r["cost_median"]}
                     for r in rows if r["epsilon"] == 1.0]
    if "elbow" in experiments:
        rows = elbow_rows(protocol)
        _write("federated_elbow", rows, None, "Choosing k: weighted server k-means, k' = 20",
               x="k", y="cost", xlabel="k", ylabel="k-means cost / total weight")
        headline += [{"experiment": "elbow", "setting": curve, "method": "elbow",
                      "epsilon": 1.0, "cost": next(r["elbow"] for r in rows if r["curve"] == curve)}
                     for curve in dict.fromkeys(r["curve"] for r in rows)]
    real = []
    if acs:
        from skdpcluster.datasets import load_acs_income

        real += real_rows("acs_income", load_acs_income(acs))
    if stackoverflow:
        from skdpcluster.datasets import load_stackoverflow_embeddings

        real += real_rows("stackoverflow", load_stackoverflow_embeddings(stackoverflow))
    if real:
        _write("federated_real", real, "dataset", "{value}", **cost_plot)
    print_table(headline)
    return headline


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="smaller grids, 1 seed (default)")
    size.add_argument("--full", action="store_true", help="the full grids, 2 seeds")
    parser.add_argument("--experiments", nargs="+", choices=EXPERIMENTS, default=EXPERIMENTS)
    parser.add_argument("--acs", help="a local ACSIncome CSV (see load_acs_income)")
    parser.add_argument("--stackoverflow", help="a local .npz of Stack Overflow embeddings")
    args = parser.parse_args(argv)
    run(not args.full, args.experiments, args.acs, args.stackoverflow)


if __name__ == "__main__":
    main()
