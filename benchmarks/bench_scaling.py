r"""Scaling: every private estimator against scikit-learn ``KMeans(n_init=1)``, n = 10^4 ... 10^7.

What it measures
----------------
For every estimator of the library that clusters (stable k-means and
k-median, high-dimensional k-means and k-median, k-tuple, sample-and-aggregate,
federated, Gaussian mixture, local model) and every n, the fit time and
the peak traced memory of the private fit and of scikit-learn's
``KMeans(n_clusters=10, n_init=1)`` on the same array, in this process, one
after the other (issue #17). Only ratios *private / scikit-learn* are
reported, so the machine cancels out (``DESIGN.md``, "Speed and scale").

* Data: :func:`~skdpcluster.datasets.make_separated_mixture`, d = 10,
  k = 10, unit Gaussians at :math:`\pm 10^4 e_i` (separated enough for
  every estimator's private test to pass at k = 10), with the public bound
  :math:`\Lambda = 10^4 + 8\sqrt d` given to the estimators that take one.
* Estimators: their defaults at epsilon = 1 (delta = 1e-6 where used).
  ``KTupleClusterer`` needs 1963 blocks of at least k rows, so it starts
  at n = 2·10^4. ``PrivateGaussianMixture`` (k = 10 components) needs more
  rows than the quick sizes give for its tuple path; its ``status`` column
  says which path ran. ``FederatedPrivateKMeans`` runs with one row per
  client (its default) and ``LocalPrivateStableKMeans`` with its defaults:
  the local model's fit includes every user's randomizer.
* Time budget (``--minutes``): before each cell the time of its
  ``repeat + 1`` private and scikit-learn fits is predicted from the
  previous size (linear in n, times 1.25); a cell that would not end
  within the budget is skipped and written as such (``status="skipped"``),
  so a long run always ends with what it measured.
* Times: the median of ``repeat`` (5) runs, the private fit and
  scikit-learn's alternating; peak memory: one more run of each under
  :func:`tracemalloc` (:func:`benchmarks._common.measure`: NumPy and
  Python allocations, the input array not counted).
* Slope: least-squares slope of log time (and log peak memory) against
  log n, per estimator and for scikit-learn, and the slope of the private
  time between the two largest sizes (``slope_time_top``).

Outputs: ``scaling.csv`` (one row per estimator and n, with the machine's
load average; rewritten after every row), ``scaling_slopes.csv`` and
``scaling.png`` (time and peak-memory ratios against n); ``--full`` writes
``scaling_full.csv``, ``scaling_slopes_full.csv`` and so on instead. The machine is shared: the load average is recorded with
every row; ratios measured in one process are meaningful, absolute
seconds are not.

Usage::

    python -m benchmarks.bench_scaling --quick   # n = 1e4 ... 1e6 (a few minutes)
    python -m benchmarks.bench_scaling --full    # n = 1e4 ... 1e7 (an hour or more)
    python -m benchmarks.bench_scaling --full --minutes 50 --only stable_kmeans ktuple
"""

import argparse
import math
import os
import statistics
import time
import warnings

from sklearn.cluster import KMeans

from benchmarks._common import measure, plot_lines, print_table, write_csv, writes_results
from benchmarks.bench_speed import growth_exponent
from skdpcluster import (
    BudgetAccountant,
    FederatedPrivateKMeans,
    KTupleClusterer,
    PrivateGaussianMixture,
    PrivateHighDimKMeans,
    PrivateHighDimKMedian,
    PrivateStableKMeans,
    PrivateStableKMedian,
    SampleAggregateStableKMeans,
)
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.local import LocalPrivateStableKMeans

__all__ = ["ESTIMATORS", "QUICK_ESTIMATORS", "compare", "make_data", "predicted_seconds", "run",
           "slopes"]

N_CLUSTERS = N_FEATURES = 10
SEPARATION = 1e4
QUICK_SIZES = (10_000, 100_000, 1_000_000)
FULL_SIZES = QUICK_SIZES + (10_000_000,)
REPEAT = 5


def _radius(n_features):
    """The public bound on the rows' norms given to the estimators."""
    return SEPARATION + 8.0 * math.sqrt(n_features)


def _bounded(estimator):
    """``factory(n_clusters, n_features, seed)``: ``estimator``, defaults, public bound."""
    return lambda k, d, seed: estimator(k, data_radius=_radius(d), random_state=seed,
                                        accountant=BudgetAccountant())


#: name -> (factory(n_clusters, n_features, seed), smallest n it can fit); the issue's
#: four first, so that a --minutes budget reaches them first at n = 1e7
ESTIMATORS = {
    "stable_kmeans": (_bounded(PrivateStableKMeans), 1),
    "stable_kmedian": (_bounded(PrivateStableKMedian), 1),
    "highdim_kmeans": (_bounded(PrivateHighDimKMeans), 1),
    "ktuple": (lambda k, d, seed: KTupleClusterer(
        k, random_state=seed, accountant=BudgetAccountant()), 20_000),
    "highdim_kmedian": (_bounded(PrivateHighDimKMedian), 1),
    "sample_aggregate": (_bounded(SampleAggregateStableKMeans), 1),
    "federated_kmeans": (_bounded(FederatedPrivateKMeans), 1),
    "gaussian_mixture": (_bounded(PrivateGaussianMixture), 1),
    "local_stable_kmeans": (_bounded(LocalPrivateStableKMeans), 1),
}
#: The estimators of ``--quick`` (the README's rows); ``--full`` runs them all.
QUICK_ESTIMATORS = ("stable_kmeans", "stable_kmedian", "highdim_kmeans", "ktuple")


def make_data(n_samples, n_clusters=N_CLUSTERS, n_features=N_FEATURES, seed=0):
    """The benchmark mixture: unit Gaussians at ``±SEPARATION e_i``."""
    return make_separated_mixture(n_samples, n_clusters, n_features, separation=SEPARATION,
                                  random_state=seed)[0]


def _fit(name, X, n_clusters, seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the k-tuple test's warnings; timed, not judged here
        return ESTIMATORS[name][0](n_clusters, X.shape[1], seed).fit(X)


def _fit_kmeans(X, n_clusters, seed):
    return KMeans(n_clusters, n_init=1, random_state=seed).fit(X)


def _seconds(function, *args):
    start = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - start


def compare(name, X, n_clusters=N_CLUSTERS, repeat=REPEAT, seed=0):
    """One row: median times and peak memory of ``name`` and of ``KMeans(n_init=1)`` on ``X``."""
    private, reference = [], []
    for _ in range(repeat):  # alternate, so that a load change hits both
        estimator, seconds = _seconds(_fit, name, X, n_clusters, seed)
        private.append(seconds)
        reference.append(_seconds(_fit_kmeans, X, n_clusters, seed)[1])
    private_mib = measure(_fit, name, X, n_clusters, seed)[2]
    kmeans_mib = measure(_fit_kmeans, X, n_clusters, seed)[2]
    private_s, kmeans_s = statistics.median(private), statistics.median(reference)
    return {
        "estimator": name, "n_samples": X.shape[0], "status": str(estimator.status_),
        "private_s": private_s, "kmeans_s": kmeans_s, "time_ratio": private_s / kmeans_s,
        "private_mib": private_mib, "kmeans_mib": kmeans_mib,
        "memory_ratio": private_mib / kmeans_mib, "load_1min": os.getloadavg()[0],
    }


def _measured(rows):
    return [row for row in rows if row["status"] != "skipped"]


def slopes(rows):
    """Per estimator (and scikit-learn): log-log slopes of time and peak memory in n.

    ``slope_time`` is the least-squares slope over every size, ``slope_time_top``
    the slope between the two largest: fixed costs flatten the first, and a
    cost that grows faster than n shows in the second.
    """
    out = []
    rows = _measured(rows)
    for name in dict.fromkeys(row["estimator"] for row in rows):
        mine = [row for row in rows if row["estimator"] == name]
        out.append({
            "estimator": name, "n_max": max(row["n_samples"] for row in mine),
            "slope_time": growth_exponent(mine, "private_s"),
            "slope_time_top": growth_exponent(mine[-2:], "private_s"),
            "slope_kmeans_time": growth_exponent(mine, "kmeans_s"),
            "slope_memory": growth_exponent(mine, "private_mib"),
            "max_time_ratio": max(row["time_ratio"] for row in mine),
            "max_memory_ratio": max(row["memory_ratio"] for row in mine),
        })
    return out


def predicted_seconds(previous, n_samples, repeat):
    """Wall time of one cell at ``n_samples`` from the row at a smaller n: linear in n, x 1.25."""
    per_fit = (previous["private_s"] + previous["kmeans_s"]) * n_samples / previous["n_samples"]
    return 1.25 * (repeat + 1) * per_fit


def _skipped(name, n_samples, predicted, left):
    note = f"predicted {predicted:.0f} s > {left:.0f} s left of --minutes"
    return {"estimator": name, "n_samples": n_samples, "status": "skipped", "private_s": "",
            "kmeans_s": "", "time_ratio": "", "private_mib": "", "kmeans_mib": "",
            "memory_ratio": "", "load_1min": os.getloadavg()[0], "note": note}


def _plot(name, rows):
    rows = _measured(rows)
    common = {"x": "n_samples", "group": "estimator", "xlabel": "n (d = 10, k = 10)", "logx": True}
    plot_lines(name, rows, y="time_ratio", ylabel="fit time / KMeans(n_init=1) time",
               title="Private fit time relative to scikit-learn", logy=True, **common)
    plot_lines(f"{name}_memory", rows, y="memory_ratio",
               ylabel="peak traced memory / KMeans(n_init=1)'s",
               title="Private fit peak memory relative to scikit-learn", **common)


@writes_results
def run(quick, repeat=REPEAT, names=None, minutes=None):
    """Measure every estimator at every size; write the CSVs and the plots; return the headline.

    ``minutes``: the time budget of the whole run; cells predicted not to fit
    in what is left are skipped (and written as skipped).
    """
    sizes, prefix = (QUICK_SIZES if quick else FULL_SIZES), "scaling"
    names = names or (QUICK_ESTIMATORS if quick else list(ESTIMATORS))
    deadline = None if minutes is None else time.monotonic() + 60.0 * minutes
    rows, last = [], {}
    for n_samples in sizes:
        X = make_data(n_samples)
        for name in names:
            if n_samples < ESTIMATORS[name][1]:
                continue
            predicted = predicted_seconds(last[name], n_samples, repeat) if name in last else 0.0
            left = math.inf if deadline is None else deadline - time.monotonic()
            if predicted > left:
                rows.append(_skipped(name, n_samples, predicted, left))
            else:
                rows.append({**compare(name, X, repeat=repeat), "note": ""})
                last[name] = rows[-1]
            print_table(rows[-1:])
            write_csv(prefix, [{**rows[0], **row} for row in rows])  # what is measured so far
        del X
    summary = slopes(rows)
    write_csv(f"{prefix}_slopes", summary)
    print_table(summary)
    _plot(prefix, rows)
    return [{**s, **{f"ratio_n{row['n_samples']:.0e}": row["time_ratio"]
                     for row in _measured(rows) if row["estimator"] == s["estimator"]}}
            for s in summary]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="n = 1e4 ... 1e6 (default)")
    size.add_argument("--full", action="store_true", help="n = 1e4 ... 1e7")
    parser.add_argument("--repeat", type=int, default=REPEAT, help="timed runs per cell")
    parser.add_argument("--only", nargs="+", choices=list(ESTIMATORS), help="these estimators")
    parser.add_argument("--minutes", type=float, default=None,
                        help="time budget: skip the cells predicted not to end within it")
    args = parser.parse_args(argv)
    run(quick=not args.full, repeat=args.repeat, names=args.only, minutes=args.minutes)


if __name__ == "__main__":
    main()
