r"""Balcan et al. (ICML 2017) §7: the 3-D experiment with its baselines, the epsilon sweep, k-median, sparse recovery.

What it measures
----------------
The experiments of ``spec/balcan_highdim.md`` §4 that
:mod:`benchmarks.bench_highdim` (the high-dimensional k grid) does not
cover. Every cost is divided by the cost of non-private scikit-learn
``KMeans(init="k-means++", n_init=1)`` on the same rows (the paper's
reference); every method gets the same public ball :math:`B(c, \Lambda)`
and the same epsilon. Runs are seeded by their number.

* ``small3d`` (R1, A5): the paper's small synthetic set, 3 dimensions and
  k = 3. Its parameters are in the paper's supplement, which we do not have;
  ours: 3 Gaussians with means uniform in :math:`[-1, 1]^3`, standard
  deviation 0.1 per coordinate, n = 10 000, :math:`c = 0`,
  :math:`\Lambda = 2`. Methods:

  - ``highdim``: :class:`~skdpcluster.cluster._highdim.PrivateHighDimKMeans`
    (defaults: pure epsilon-DP, replace-one);
  - ``dplloyd20``, ``dplloyd5``: SuLQ k-means
    (:func:`benchmarks.bench_highdim.dp_lloyd`; add/remove);
  - ``sample_aggregate``: sample-and-aggregate k-means. The paper's baseline
    is Nissim et al. (2007); this is the library's
    :class:`~skdpcluster.cluster.SampleAggregateStableKMeans` (Shechner's
    version of the same idea, (epsilon, 1e-6)-DP);
  - ``gridding``: Su et al. (2016)'s uniform grid (UGkM), built from their
    description: :math:`M = (n\varepsilon/10)^{2d/(2+d)}` cells over the
    public box :math:`[c - \Lambda, c + \Lambda]^d`, one Laplace release of
    all cell counts (L1 sensitivity 2 under replace-one with n public), then
    weighted k-means on the cell centres with the noisy counts clipped at 0
    (post-processing). Time and memory grow like :math:`M`, exponential in d
    as the paper says; it runs here in 3-D only;
  - ``kvariates``: a k-variates++-style seeding (Nock et al. 2016): k rounds
    of :math:`D^2` sampling from the rows (the first uniform), each sampled
    row released with Laplace noise of scale :math:`2\sqrt d\Lambda/(\varepsilon/k)`
    per coordinate, projected onto the ball. **Not** Nock et al.'s
    calibration: theirs uses the data's spread and is not given in
    Balcan et al.'s description, so we calibrate to the worst case (see
    :func:`kvariates_seeding` for the privacy argument). It is the
    order-of-magnitude-worse baseline the paper describes.

* ``eps_sweep`` (R5, A4): ``synthetic784`` of :mod:`benchmarks.bench_highdim`
  (the MNIST-sized overlapping mixture; MNIST itself is not available
  offline), k = 10, epsilon in {0.1, 0.25, 0.5, 1, 2}: ``highdim``,
  ``highdim_gauss`` (Gaussian sums, (epsilon, 1e-6)), ``dplloyd20``,
  ``dplloyd5``.
* ``kmedian`` (§6.2): ``mixture64`` of :mod:`benchmarks.bench_highdim`,
  k in {8, 32}: k-median cost (sum of distances) of
  :class:`~skdpcluster.cluster._highdim.PrivateHighDimKMedian` with the
  noisy-mean recovery (pure DP) and the private 1-median recovery
  (``recovery="one_median"``, (epsilon, 1e-6)), and of ``dplloyd5``, divided
  by the k-median cost of the non-private k-means++ centres refined by 10
  Weiszfeld (k-medians) steps, the reference.
* ``sparse`` (Algorithm 5, Corollary 2): s-sparse rows, s = 10, in d in
  {100, 1000}: k = 5 clusters, each with a random support of s coordinates
  and mean entries uniform in [0.3, 1], noise 0.2 on the support, entries
  clipped to [0, 1] (so :math:`\Lambda_\infty = 1`,
  :math:`\Lambda = \sqrt s`), n = 20 000: ``highdim`` with the mean
  recovery against ``highdim_sparse`` (``recovery="sparse"``,
  ``sparsity=10``, ``coord_bound=1``).

Outputs: ``highdim_paper_runs.csv`` (every run), ``highdim_paper.csv``
(median and range per experiment, setting and method),
``highdim_paper_small3d.png``, ``highdim_paper_eps.png``,
``highdim_paper_kmedian.png``, ``highdim_paper_sparse.png``.

Usage::

    python -m benchmarks.bench_highdim_paper --quick   # 2 runs, smaller sets (about 2 min)
    python -m benchmarks.bench_highdim_paper --full    # 5 runs, as the paper (about 15 min)
    python -m benchmarks.bench_highdim_paper --full --experiments eps_sweep   # keep the rest
"""

import argparse
import csv
import math
import statistics
import time
import warnings

import numpy as np
from sklearn.cluster import KMeans

from benchmarks._common import (plot_lines, print_table, result_path, spread, write_csv,
                                writes_results)
from benchmarks.bench_highdim import dp_lloyd, kmeans_cost, make_dataset
from benchmarks.bench_ktuple_paper import _parse
from skdpcluster import BudgetAccountant
from skdpcluster.averaging import _project_onto_ball
from skdpcluster.cluster import SampleAggregateStableKMeans
from skdpcluster.cluster._highdim import PrivateHighDimKMeans, PrivateHighDimKMedian
from skdpcluster.cluster._stable_init import nearest_centers
from skdpcluster.mechanisms import laplace_mechanism

__all__ = ["gridding", "kvariates_seeding", "make_small3d", "make_sparse", "run"]

EPSILON, DELTA = 1.0, 1e-6
PROTOCOLS = {
    True: {"runs": 2, "n_small3d": 10_000, "n_eps": 5_000, "n_kmedian": 10_000,
           "kmedian_ks": (8,), "n_sparse": 10_000, "sparse_ds": (100, 1000),
           "epsilons": (0.25, 1.0)},
    False: {"runs": 5, "n_small3d": 10_000, "n_eps": 10_000, "n_kmedian": 30_000,
            "kmedian_ks": (8, 32), "n_sparse": 20_000, "sparse_ds": (100, 1000),
            "epsilons": (0.1, 0.25, 0.5, 1.0, 2.0)},
}
SPARSITY = 10
EXPERIMENTS = ("small3d", "eps_sweep", "kmedian", "sparse")


# ---------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------


def make_small3d(n_samples, seed=0):
    """``(X, center, radius)``: 3 Gaussians in 3-D (see the module docstring)."""
    rng = np.random.default_rng([seed, 3])
    means = rng.uniform(-1.0, 1.0, size=(3, 3))
    X = means[rng.integers(3, size=n_samples)] + 0.1 * rng.standard_normal((n_samples, 3))
    return X, np.zeros(3), 2.0


def make_sparse(n_samples, n_features, n_clusters=5, sparsity=SPARSITY, seed=0):
    """``(X, center, radius)``: ``sparsity``-sparse rows with entries in [0, 1]."""
    rng = np.random.default_rng([seed, n_features])
    supports = np.array([rng.choice(n_features, sparsity, replace=False)
                         for _ in range(n_clusters)])
    labels = rng.integers(n_clusters, size=n_samples)
    values = rng.uniform(0.3, 1.0, size=(n_clusters, sparsity))[labels]
    values = np.clip(values + 0.2 * rng.standard_normal(values.shape), 0.0, 1.0)
    X = np.zeros((n_samples, n_features))
    np.put_along_axis(X, supports[labels], values, axis=1)
    return X, np.zeros(n_features), math.sqrt(sparsity)


# ---------------------------------------------------------------------------
# Baselines built from the papers' descriptions
# ---------------------------------------------------------------------------


def gridding(X, n_clusters, *, epsilon, center, radius, rng):
    r"""Su et al. (2016)'s uniform-grid k-means (UGkM): ``(centers, events)``.

    The box :math:`[c - \Lambda, c + \Lambda]^d` is cut into
    :math:`m = \lceil (n\varepsilon/10)^{2/(2+d)}\rceil` equal intervals per
    axis (:math:`M = m^d` cells, Su et al.'s choice), rows clipped into the
    box. The vector of cell counts changes by at most 2 in L1 when one row is
    replaced (n is public under replace-one), so one Laplace release of scale
    :math:`2/\varepsilon` per cell is epsilon-DP. The centres are weighted
    k-means on the cell centres with the noisy counts clipped at 0, a
    post-processing.
    """
    n_samples, n_features = X.shape
    per_axis = math.ceil((n_samples * epsilon / 10.0) ** (2.0 / (2.0 + n_features)))
    low = center - radius
    cells = np.floor((X - low) / (2 * radius) * per_axis).astype(int)
    cells = np.clip(cells, 0, per_axis - 1)
    flat = np.ravel_multi_index(cells.T, (per_axis,) * n_features)
    counts = np.bincount(flat, minlength=per_axis**n_features)
    noisy, event = laplace_mechanism(counts, sensitivity=2.0, epsilon=epsilon, rng=rng,
                                     label="gridding/cell_counts")
    weights = np.maximum(noisy, 0.0)
    occupied = np.flatnonzero(weights)
    if occupied.size < n_clusters:  # noise left too few cells: the grid's own centres
        occupied = np.argsort(noisy)[-n_clusters:]
        weights[occupied] = 1.0
    index = np.array(np.unravel_index(occupied, (per_axis,) * n_features)).T
    points = low + (index + 0.5) * (2 * radius / per_axis)
    seed = int(rng.integers(2**31))
    fitted = KMeans(n_clusters, n_init=1, random_state=seed).fit(
        points, sample_weight=weights[occupied])
    return fitted.cluster_centers_, [event]


def kvariates_seeding(X, n_clusters, *, epsilon, center, radius, rng):
    r"""k-variates++-style private seeding, worst-case calibrated: ``(centers, events)``.

    Round j samples a row by :math:`D^2` sampling against the centres
    released so far (uniformly in round 1) and releases it plus
    :math:`\mathrm{Lap}(b)^d`, :math:`b = 2\sqrt d\Lambda/\varepsilon_0`,
    :math:`\varepsilon_0 = \varepsilon/k`, projected onto the ball.

    Privacy: the output density of a round is a mixture
    :math:`\sum_i w_i f(y - x_i)` of Laplace densities centred at rows of
    the ball, with weights depending on the data. For any two rows
    :math:`f(y - x)/f(y - x') \le e^{\|x - x'\|_1/b} \le
    e^{2\sqrt d\Lambda/b} = e^{\varepsilon_0}`, so any two such mixtures,
    hence the round's outputs on *any* two data sets, are within
    :math:`e^{\varepsilon_0}`: the Laplace mechanism's argument with
    :math:`2\sqrt d\Lambda` (the ball's L1 diameter) as the sensitivity of
    "the sampled row". The rounds compose to epsilon (basic, adaptive), and
    the projection is post-processing.
    """
    rows = _project_onto_ball(X - center, 0.0, radius)
    epsilon_round = epsilon / n_clusters
    sensitivity = 2.0 * math.sqrt(X.shape[1]) * radius
    centers, events = np.empty((0, X.shape[1])), []
    for round_ in range(n_clusters):
        if len(centers):
            weights = nearest_centers(rows, centers)[1]
            weights = weights / weights.sum() if weights.sum() > 0 else None
        else:
            weights = None
        sampled = rows[rng.choice(len(rows), p=weights)]
        noisy, event = laplace_mechanism(sampled, sensitivity=sensitivity, epsilon=epsilon_round,
                                         rng=rng, label=f"kvariates/seed_{round_ + 1}")
        centers = np.vstack([centers, _project_onto_ball(noisy, 0.0, radius)])
        events.append(event)
    return centers + center, events


# ---------------------------------------------------------------------------
# Methods: fit(X, k, epsilon, center, radius, seed) -> centres
# ---------------------------------------------------------------------------


def _estimator(cls, **params):
    def fit(X, k, epsilon, center, radius, seed):
        estimator = cls(k, epsilon=epsilon, data_radius=radius, data_center=center,
                        random_state=seed, accountant=BudgetAccountant(), **params)
        estimator.fit(X)
        assert estimator.privacy_spent_["epsilon"] <= epsilon * (1 + 1e-9)
        return estimator.cluster_centers_
    return fit


def _function(function, **params):
    def fit(X, k, epsilon, center, radius, seed):
        centers, events = function(X, k, epsilon=epsilon, center=center, radius=radius,
                                   rng=np.random.default_rng(seed), **params)
        assert math.fsum(event.cost()[0] for event in events) <= epsilon * (1 + 1e-9)
        return centers
    return fit


HIGHDIM = _estimator(PrivateHighDimKMeans)
DPLLOYD = {"dplloyd20": _function(dp_lloyd, n_iter=20), "dplloyd5": _function(dp_lloyd, n_iter=5)}
SMALL3D_METHODS = {
    "highdim": HIGHDIM, **DPLLOYD,
    "sample_aggregate": _estimator(SampleAggregateStableKMeans, delta=DELTA),
    "gridding": _function(gridding),
    "kvariates": _function(kvariates_seeding),
}
EPS_METHODS = {
    "highdim": HIGHDIM,
    "highdim_gauss": _estimator(PrivateHighDimKMeans, sum_mechanism="gaussian", delta=DELTA),
    **DPLLOYD,
}
KMEDIAN_METHODS = {
    "highdim_kmedian": _estimator(PrivateHighDimKMedian),
    "highdim_kmedian_1median": _estimator(PrivateHighDimKMedian, recovery="one_median",
                                          delta=DELTA),
    "dplloyd5": DPLLOYD["dplloyd5"],
}
SPARSE_METHODS = {
    "highdim": HIGHDIM,
    "highdim_sparse": _estimator(PrivateHighDimKMeans, recovery="sparse", sparsity=SPARSITY,
                                 coord_bound=1.0),
}


# ---------------------------------------------------------------------------
# Costs and the protocol
# ---------------------------------------------------------------------------


def kmedian_cost(X, centers):
    """Sum of distances to the nearest centre."""
    return float(np.sqrt(nearest_centers(X, np.asarray(centers, dtype=float))[1]).sum())


def weiszfeld_refine(X, centers, n_iter=10):
    """Non-private k-medians: ``n_iter`` steps of assignment and one Weiszfeld update per cluster."""
    centers = np.array(centers, dtype=float)
    for _ in range(n_iter):
        labels, sq = nearest_centers(X, centers)
        weights = 1.0 / np.maximum(np.sqrt(sq), 1e-12)
        for j in range(len(centers)):
            mask = labels == j
            if mask.any():
                centers[j] = weights[mask] @ X[mask] / weights[mask].sum()
    return centers


def run_cell(experiment, setting, X, center, radius, k, epsilon, methods, seeds, loss="kmeans"):
    """Every method of ``methods`` on one cell: one row per method and seed."""
    cost = kmedian_cost if loss == "kmedian" else kmeans_cost
    rows = []
    for seed in seeds:
        start = time.perf_counter()
        reference = KMeans(k, init="k-means++", n_init=1, random_state=seed).fit(X).cluster_centers_
        ref_seconds = time.perf_counter() - start
        if loss == "kmedian":
            reference = weiszfeld_refine(X, reference)
        ref_cost = cost(X, reference)
        base = {"experiment": experiment, "setting": setting, "n": len(X), "d": X.shape[1],
                "k": k, "epsilon": epsilon, "seed": seed, "loss": loss}
        rows.append({**base, "method": "reference", "cost": ref_cost, "cost_ratio": 1.0,
                     "seconds": ref_seconds})
        for name, fit in methods.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                start = time.perf_counter()
                centers = fit(X, k, epsilon, center, radius, seed)
                seconds = time.perf_counter() - start
            value = cost(X, centers)
            rows.append({**base, "method": name, "cost": value, "cost_ratio": value / ref_cost,
                         "seconds": seconds})
    return rows


def protocol_rows(quick, progress=None, experiments=EXPERIMENTS):
    """Every run of the chosen experiments; ``progress(rows)`` after every cell."""
    p = PROTOCOLS[quick]
    seeds = range(p["runs"])
    rows = []
    X, center, radius = make_small3d(p["n_small3d"])
    for epsilon in p["epsilons"] if "small3d" in experiments else ():
        rows += run_cell("small3d", "d=3 k=3", X, center, radius, 3, epsilon, SMALL3D_METHODS,
                         seeds)
        print(f"  small3d eps={epsilon} done", flush=True)
        progress and progress(rows)
    X, center, radius = make_dataset("synthetic784", p["n_eps"])
    for epsilon in p["epsilons"] if "eps_sweep" in experiments else ():
        rows += run_cell("eps_sweep", "synthetic784 k=10", X, center, radius, 10, epsilon,
                         EPS_METHODS, seeds)
        print(f"  eps_sweep eps={epsilon} done", flush=True)
        progress and progress(rows)
    X, center, radius = make_dataset("mixture64", p["n_kmedian"])
    for k in p["kmedian_ks"] if "kmedian" in experiments else ():
        rows += run_cell("kmedian", f"mixture64 k={k}", X, center, radius, k, EPSILON,
                         KMEDIAN_METHODS, seeds, loss="kmedian")
        print(f"  kmedian k={k} done", flush=True)
        progress and progress(rows)
    for n_features in p["sparse_ds"] if "sparse" in experiments else ():
        X, center, radius = make_sparse(p["n_sparse"], n_features)
        rows += run_cell("sparse", f"s={SPARSITY} d={n_features}", X, center, radius, 5, EPSILON,
                         SPARSE_METHODS, seeds)
        print(f"  sparse d={n_features} done", flush=True)
        progress and progress(rows)
    return rows


def summarize(rows):
    """Median and range of the cost ratio and the median seconds per cell and method."""
    groups = {}
    for row in rows:
        key = (row["experiment"], row["setting"], row["k"], row["epsilon"], row["method"])
        groups.setdefault(key, []).append(row)
    summary = []
    for (experiment, setting, k, epsilon, method), group in groups.items():
        median, low, high = spread(row["cost_ratio"] for row in group)
        summary.append({"experiment": experiment, "setting": setting, "n": group[0]["n"],
                        "d": group[0]["d"], "k": k, "epsilon": epsilon, "loss": group[0]["loss"],
                        "method": method, "runs": len(group), "cost_ratio": median,
                        "cost_ratio_min": low, "cost_ratio_max": high,
                        "seconds": statistics.median(row["seconds"] for row in group)})
    return summary


def _plots(summary):
    def pick(experiment):
        return [row for row in summary if row["experiment"] == experiment]

    plot_lines("highdim_paper_small3d", pick("small3d"), x="epsilon", y="cost_ratio",
               group="method", xlabel="epsilon", ylabel="k-means cost / k-means++ cost",
               title="Balcan et al. R1: 3-D, k = 3", logx=True, logy=True,
               band=("cost_ratio_min", "cost_ratio_max"))
    plot_lines("highdim_paper_eps", pick("eps_sweep"), x="epsilon", y="cost_ratio",
               group="method", xlabel="epsilon", ylabel="k-means cost / k-means++ cost",
               title="synthetic784 (MNIST-sized), k = 10", logx=True, logy=True,
               band=("cost_ratio_min", "cost_ratio_max"))
    plot_lines("highdim_paper_kmedian", pick("kmedian"), x="k", y="cost_ratio", group="method",
               xlabel="k", ylabel="k-median cost / non-private k-medians",
               title="mixture64: the k-median variant, eps = 1", logx=True,
               band=("cost_ratio_min", "cost_ratio_max"))
    plot_lines("highdim_paper_sparse", pick("sparse"), x="d", y="cost_ratio", group="method",
               xlabel="d", ylabel="k-means cost / k-means++ cost",
               title=f"{SPARSITY}-sparse rows, k = 5, eps = 1: sparse recovery", logx=True,
               logy=True, band=("cost_ratio_min", "cost_ratio_max"))


def _kept_rows(experiments):
    """The committed runs of the experiments not run now (``highdim_paper_runs.csv``)."""
    path = result_path("highdim_paper_runs", "csv")
    if set(experiments) == set(EXPERIMENTS) or not path.exists():
        return []
    with path.open(newline="") as handle:
        return [{key: _parse(value) for key, value in row.items()}
                for row in csv.DictReader(handle) if row["experiment"] not in experiments]


def _write(rows, kept=()):
    """Write the CSVs and plots of ``rows`` plus ``kept``; return the summary."""
    rows = list(kept) + rows
    summary = summarize(rows)
    write_csv("highdim_paper_runs", rows)
    write_csv("highdim_paper", summary)
    _plots(summary)
    return summary


@writes_results
def run(quick, experiments=EXPERIMENTS):
    """Run the experiments, write the CSVs and plots; return the summary rows (without the reference).

    Only ``experiments`` run; the committed runs of the others are kept.
    """
    kept = _kept_rows(experiments)
    rows = protocol_rows(quick, lambda rows: _write(rows, kept), experiments)
    summary = _write(rows, kept)
    columns = ["experiment", "setting", "k", "epsilon", "method", "runs", "cost_ratio",
               "cost_ratio_min", "cost_ratio_max", "seconds"]
    return [{column: row[column] for column in columns}
            for row in summary if row["method"] != "reference"]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="2 runs, smaller sets (default)")
    size.add_argument("--full", action="store_true", help="5 runs, the paper's sizes")
    parser.add_argument("--experiments", nargs="+", choices=EXPERIMENTS, default=EXPERIMENTS,
                        help="run only these (the others' committed runs are kept)")
    args = parser.parse_args(argv)
    print_table(run(not args.full, args.experiments))


if __name__ == "__main__":
    main()
