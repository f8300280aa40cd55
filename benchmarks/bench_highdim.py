r"""PrivateHighDimKMeans (Balcan et al. 2017) against k-means++, DP-Lloyd (SuLQ) and diffprivlib.

What it measures
----------------
The paper's Section 7 protocol (``spec/balcan_highdim.md`` §4, §6.2) on
high-dimensional data at epsilon = 1: the k-means cost of the released
centres divided by the cost of non-private scikit-learn
``KMeans(init="k-means++", n_init=1)`` on the same data (the paper's
reference), against k, and the fit time divided by that ``KMeans`` fit's.

Data sets (every method gets the same public ball :math:`B(c, \Lambda)`):

* ``digits``: scikit-learn's bundled ``load_digits`` (n = 1797, d = 64,
  pixels in [0, 16]); :math:`c = 8\cdot\mathbf 1`,
  :math:`\Lambda = 8\sqrt{64} = 64`, the ball around the pixel box.
* ``mixture64``: the paper's mixture of 64 Gaussians in
  :math:`\mathbb{R}^{100}` (means uniform in :math:`[-1, 1]^{100}`, standard
  deviation 0.15 per coordinate, equal weights; n = 100 000, or 30 000 with
  ``--quick``); :math:`c = 0`, :math:`\Lambda = 8`.
* ``synthetic784``: an MNIST-sized overlapping mixture, 10 Gaussians in
  :math:`\mathbb{R}^{784}` (means uniform in :math:`[0, 1]^{784}`, standard
  deviation 0.3, clipped to the box; n = 70 000, or 10 000 with
  ``--quick``); :math:`c = 0.5\cdot\mathbf 1`, :math:`\Lambda = 0.5\sqrt{784} = 14`.

Methods:

* ``highdim``: :class:`~skdpcluster.cluster._highdim.PrivateHighDimKMeans`
  with its defaults (practical profile, pure epsilon-DP, calibrated for
  replace-one, hence also add/remove);
* ``highdim_addrm``: the same calibrated for add/remove only (the paper's
  relation and the one of the two baselines below: half the noise);
* ``highdim_gauss``: add/remove with ``sum_mechanism="gaussian"``,
  (epsilon, 1e-6)-DP: not comparable with the pure-DP rows, shown because
  the Gaussian sums are the remedy the spec recommends for large d;
* ``dplloyd5``, ``dplloyd20``: DP-Lloyd / SuLQ k-means (Blum et al. 2005,
  the paper's baseline), written here: k initial centres uniform in the
  public ball, then T noisy Lloyd steps of epsilon/T each, with the
  pure-DP noisy means of
  :func:`~skdpcluster.cluster._highdim_recovery.noisy_cluster_means` (Laplace,
  add/remove); 20 iterations is the paper's setting, 5 the tuned one of
  the spec;
* ``diffprivlib``: ``diffprivlib.models.KMeans`` with bounds
  :math:`(c - \Lambda, c + \Lambda)` per coordinate, in its own environment
  (:mod:`benchmarks._diffprivlib`); left out when that cannot run.

Outputs: ``highdim_runs.csv`` (every run), ``highdim_summary.csv`` (median
and spread per data set, k and method), ``highdim_<dataset>.png`` (cost
ratio against k) and, with ``--full``, ``highdim_eps.png`` (cost ratio
against epsilon on ``synthetic784``, k = 10). Timings on a shared 2-core
machine are indicative.

Usage::

    python -m benchmarks.bench_highdim --quick   # a few minutes on 2 cores
    python -m benchmarks.bench_highdim --full    # the whole grid, 5 runs (about an hour)
"""

import argparse
import math
import statistics
import subprocess
import time
import warnings

import numpy as np
from sklearn.cluster import KMeans
from sklearn.datasets import load_digits

from benchmarks._common import plot_lines, print_table, spread, write_csv, writes_results
from skdpcluster import BudgetAccountant
from skdpcluster.averaging import _project_onto_ball
from skdpcluster.cluster._highdim import PrivateHighDimKMeans
from skdpcluster.cluster._highdim_recovery import noisy_cluster_means
from skdpcluster.cluster._stable_init import nearest_centers, random_ball_points

EPSILON = 1.0
DELTA = 1e-6  # only for highdim_gauss
PROTOCOLS = {
    True: {"runs": 2, "sizes": {"mixture64": 30_000, "synthetic784": 10_000},
           "ks": {"digits": (2, 10), "mixture64": (8, 32), "synthetic784": (10,)},
           "epsilons": ()},
    False: {"runs": 5, "sizes": {"mixture64": 100_000, "synthetic784": 70_000},
            "ks": {"digits": (2, 4, 8, 10, 16, 32), "mixture64": (2, 4, 8, 16, 32, 64),
                   "synthetic784": (2, 5, 10, 20)},
            "epsilons": (0.1, 0.25, 0.5, 1.0, 2.0)},
}


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------


def make_dataset(name, n_samples=None, seed=0):
    """``(X, center, radius)``: the rows and the public ball every method is given."""
    if name == "digits":
        X = load_digits().data.astype(float)
        return X, np.full(X.shape[1], 8.0), 8.0 * math.sqrt(X.shape[1])
    rng = np.random.default_rng(seed)
    if name == "mixture64":
        means = rng.uniform(-1.0, 1.0, size=(64, 100))
        X = means[rng.integers(64, size=n_samples)] + 0.15 * rng.standard_normal((n_samples, 100))
        return X, np.zeros(100), 8.0
    means = rng.uniform(0.0, 1.0, size=(10, 784))
    X = means[rng.integers(10, size=n_samples)] + 0.3 * rng.standard_normal((n_samples, 784))
    return np.clip(X, 0.0, 1.0), np.full(784, 0.5), 0.5 * math.sqrt(784)


def kmeans_cost(X, centers):
    """Sum of squared distances to the nearest centre (chunked)."""
    return float(nearest_centers(X, np.asarray(centers, dtype=float))[1].sum())


# ---------------------------------------------------------------------------
# Methods
# ---------------------------------------------------------------------------


def dp_lloyd(X, n_clusters, *, epsilon, n_iter, center, radius, rng):
    r"""DP-Lloyd / SuLQ k-means, pure epsilon-DP under add/remove: ``(centers, events)``.

    Rows are clipped to :math:`B(c, \Lambda)`; the k initial centres are
    uniform in that ball (data-independent); each of ``n_iter`` steps
    assigns the rows to the nearest centre and releases Laplace noisy counts
    and sums with epsilon/``n_iter`` (L1 sensitivity :math:`\sqrt d\Lambda`
    of a sum), dividing by the noisy counts and projecting onto the ball.
    """
    rows = _project_onto_ball(X - center, 0.0, radius)
    centers = random_ball_points(rng, n_clusters, X.shape[1], radius)
    events = []
    for step in range(n_iter):
        labels = nearest_centers(rows, centers)[0]
        result = noisy_cluster_means(rows, labels, n_clusters, epsilon=epsilon / n_iter, delta=0.0,
                                     radius=radius, mechanism="laplace", neighbouring="add_remove",
                                     rng=rng, label=f"dplloyd/step_{step + 1}")
        centers, events = result.centers, events + result.events
    return centers + center, events


def _highdim(neighbouring, **params):
    def fit(X, k, epsilon, center, radius, seed):
        estimator = PrivateHighDimKMeans(
            k, epsilon=epsilon, data_radius=radius, data_center=center, neighbouring=neighbouring,
            random_state=seed, accountant=BudgetAccountant(), **params)
        return estimator.fit(X).cluster_centers_
    return fit


def _dplloyd(n_iter):
    def fit(X, k, epsilon, center, radius, seed):
        centers, events = dp_lloyd(X, k, epsilon=epsilon, n_iter=n_iter, center=center,
                                   radius=radius, rng=np.random.default_rng(seed))
        assert math.fsum(e.cost()[0] for e in events) <= epsilon * (1 + 1e-9)
        return centers
    return fit


METHODS = {
    "highdim": _highdim("replace_one"),
    "highdim_addrm": _highdim("add_remove"),
    "highdim_gauss": _highdim("add_remove", sum_mechanism="gaussian", delta=DELTA),
    "dplloyd5": _dplloyd(5),
    "dplloyd20": _dplloyd(20),
}


def reference(X, k, seed):
    """Non-private k-means++ (one initialisation): its cost and fit time."""
    start = time.perf_counter()
    fitted = KMeans(k, init="k-means++", n_init=1, random_state=seed).fit(X)
    return float(fitted.inertia_), time.perf_counter() - start


def run_cell(dataset, X, center, radius, k, epsilon, seeds):
    """Every method on one (data set, k, epsilon): one row per method and seed."""
    rows = []
    for seed in seeds:
        ref_cost, ref_seconds = reference(X, k, seed)
        base = {"dataset": dataset, "n": len(X), "d": X.shape[1], "k": k, "epsilon": epsilon,
                "seed": seed}
        rows.append({**base, "method": "kmeans++", "cost": ref_cost, "cost_ratio": 1.0,
                     "seconds": ref_seconds, "time_ratio": 1.0})
        for method, fit in METHODS.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                centers = fit(X, k, epsilon, center, radius, seed)
                seconds = time.perf_counter() - start
            cost = kmeans_cost(X, centers)
            rows.append({**base, "method": method, "cost": cost, "cost_ratio": cost / ref_cost,
                         "seconds": seconds, "time_ratio": seconds / ref_seconds})
    return rows + diffprivlib_rows(rows, X, center, radius, k, epsilon, seeds)


def diffprivlib_rows(rows, X, center, radius, k, epsilon, seeds):
    """diffprivlib's KMeans per seed (nothing, with a message, if it cannot run)."""
    from benchmarks._diffprivlib import run_diffprivlib_kmeans

    try:
        results = run_diffprivlib_kmeans(X, k, epsilon=epsilon, bounds=(center - radius,
                                                                        center + radius),
                                         random_states=list(seeds))
    except (OSError, subprocess.SubprocessError) as error:
        print(f"  diffprivlib unavailable ({error}); its rows are left out")
        return []
    reference_rows = {row["seed"]: row for row in rows if row["method"] == "kmeans++"}
    out = []
    for result in results:
        ref = reference_rows[result["seed"]]
        out.append({key: ref[key] for key in ("dataset", "n", "d", "k", "epsilon", "seed")}
                   | {"method": "diffprivlib", "cost": result["cost"],
                      "cost_ratio": result["cost"] / ref["cost"], "seconds": result["seconds"],
                      "time_ratio": result["seconds"] / ref["seconds"]})
    return out


# ---------------------------------------------------------------------------
# Protocol, summary, plots
# ---------------------------------------------------------------------------


def summarize(rows):
    """Median and range of the cost ratio, median time ratio, per (dataset, k, epsilon, method)."""
    groups = {}
    for row in rows:
        groups.setdefault((row["dataset"], row["k"], row["epsilon"], row["method"]), []).append(row)
    summary = []
    for (dataset, k, epsilon, method), group in groups.items():
        median, low, high = spread(r["cost_ratio"] for r in group)
        summary.append({"dataset": dataset, "n": group[0]["n"], "d": group[0]["d"], "k": k,
                        "epsilon": epsilon, "method": method, "runs": len(group),
                        "cost_ratio": median, "cost_ratio_min": low, "cost_ratio_max": high,
                        "time_ratio": statistics.median(r["time_ratio"] for r in group)})
    return summary


def protocol_rows(quick):
    """All runs of the protocol (the k grid at epsilon = 1, then the epsilon sweep with --full)."""
    settings = PROTOCOLS[quick]
    rows = []
    for dataset, ks in settings["ks"].items():
        X, center, radius = make_dataset(dataset, settings["sizes"].get(dataset))
        for k in ks:
            rows += run_cell(dataset, X, center, radius, k, EPSILON, range(settings["runs"]))
            print(f"  {dataset} (n={len(X)}, d={X.shape[1]}) k={k} done", flush=True)
    if settings["epsilons"]:
        X, center, radius = make_dataset("synthetic784", settings["sizes"]["synthetic784"])
        for epsilon in settings["epsilons"]:
            if epsilon != EPSILON:
                rows += run_cell("synthetic784", X, center, radius, 10, epsilon,
                                 range(settings["runs"]))
            print(f"  synthetic784 k=10 eps={epsilon} done", flush=True)
    return rows


def _plots(summary):
    for dataset in dict.fromkeys(row["dataset"] for row in summary):
        series = [r for r in summary if r["dataset"] == dataset and r["epsilon"] == EPSILON]
        plot_lines(f"highdim_{dataset}", series, x="k", y="cost_ratio", group="method",
                   xlabel="k", ylabel="k-means cost / k-means++ cost", logx=True, logy=True,
                   title=f"{dataset} (n={series[0]['n']}, d={series[0]['d']}), eps={EPSILON}",
                   band=("cost_ratio_min", "cost_ratio_max"))
    sweep = [r for r in summary if r["dataset"] == "synthetic784" and r["k"] == 10]
    if len({r["epsilon"] for r in sweep}) > 1:
        plot_lines("highdim_eps", sweep, x="epsilon", y="cost_ratio", group="method",
                   xlabel="epsilon", ylabel="k-means cost / k-means++ cost", logx=True, logy=True,
                   title="synthetic784, k=10", band=("cost_ratio_min", "cost_ratio_max"))


def _headline(summary):
    """One row per (data set, k) at epsilon = 1: every method's median cost ratio."""
    table = {}
    for row in summary:
        if row["epsilon"] != EPSILON:
            continue
        key = (row["dataset"], row["k"])
        entry = table.setdefault(key, {"dataset": row["dataset"], "n": row["n"], "d": row["d"],
                                       "k": row["k"]})
        if row["method"] != "kmeans++":
            entry[row["method"]] = row["cost_ratio"]
        if row["method"] == "highdim":
            entry["highdim_time_ratio"] = row["time_ratio"]
    return list(table.values())


@writes_results
def run(quick):
    """Run the protocol, write the CSVs and plots; return the headline rows."""
    rows = protocol_rows(quick)
    summary = summarize(rows)
    write_csv("highdim_runs", rows)
    write_csv("highdim_summary", summary)
    _plots(summary)
    return _headline(summary)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes, 2 runs (default)")
    size.add_argument("--full", action="store_true", help="the whole grid, 5 runs, epsilon sweep")
    args = parser.parse_args(argv)
    print_table(run(quick=not args.full))


if __name__ == "__main__":
    main()
