r"""Speed: ``KTupleClusterer.fit`` against scikit-learn ``KMeans(n_init=1)`` on the same data.

What it measures
----------------
Both estimators run in this process, one after the other, on the same
array; every number is a ratio *private / scikit-learn*, so the machine
cancels out (``DESIGN.md``, "Speed and scale"). The private estimator runs
with its defaults: ``KTupleClusterer(n_clusters=10)`` with ``method="auto"``
(the located method on these data), ``epsilon=1``, ``delta=1e-6``,
``data_radius=None`` (a private bound), ``n_tuples="auto"``, the batched
``KMeans(init="k-means++", n_init=1)`` per block and ``n_jobs=None``.
The reference is ``KMeans(n_clusters=10, n_init=1)`` (k-means++ seeding,
Lloyd, scikit-learn's OpenMP threads).

* **Headline** (``speed.csv``): n = 10^6 rows (``--full``; 2·10^5 with
  ``--quick``), d = 10, k = 10, on two data sets from
  :func:`~skdpcluster.datasets.make_separated_mixture`, means ``±R e_i``:

  - ``R = 10^4``, well separated, where the private test passes
    (``status`` = success): the fit does all its work, noise and labels
    included. This is the row to quote;
  - ``R = 32``, the papers' smallest separation, the harder case (the
    ``status`` column says whether the private test passed: with the
    ``noisy_centers`` default of 2026-11-21 it failed, Delta = 3711 needing
    tuples far tighter than ~50 rows per cluster give; the located
    default passes, at a higher cost).

  For the separated data the row also splits the private fit into tuple
  generation (``tuples_s``: ``generate_tuples``, batched path), the private
  aggregation on those tuples (``aggregate_s``: ``fit_tuples``) and the rest
  (``rest_s``: validation and the non-private ``labels_``; a difference of
  best times, so it can come out slightly negative), and times the
  per-block tuple generation (one scikit-learn ``KMeans`` fit per block,
  ``per_block_s``; ``batched_speedup`` = per-block / batched).
* **Scaling** (``speed_scaling.csv``, ``speed_scaling.png``): the same
  comparison on the separated data for n from 2·10^4 to 10^6
  (``--quick``) or 10^7 (``--full``), and the fitted growth exponents (the
  slope of log time, and of log peak memory, against log n) of both
  estimators. The located default takes one tuple per 50 rows at k = 10
  (at least its minimum number; ``n_tuples`` and ``rows_per_tuple`` are in
  the table). A size whose extrapolated peak memory exceeds the budget
  (``--max-gib``) is skipped and listed
  with ``status`` = ``skipped``.

Times are the best of ``repeat`` plain runs; peak memory comes from one
more run under :func:`tracemalloc` (:func:`benchmarks._common.measure`):
Python and NumPy allocations made during the fit (the input array is not
counted), not compiled libraries' private buffers.

How to read the output
----------------------
``time_ratio`` and ``memory_ratio`` above 1 mean the private fit is slower
or allocates more than scikit-learn's. ``slope_*`` near 1 is linear
growth; a private slope below scikit-learn's at small n reflects the
fixed per-tuple costs (the partition test and the per-block random numbers do
not grow with n). Timings on a shared machine are indicative.

Usage::

    python -m benchmarks.bench_speed --quick   # n = 2e5 headline, curve to 1e6 (under a minute)
    python -m benchmarks.bench_speed --full    # n = 1e6 headline, curve to 1e7 if memory allows
"""

import argparse
import math
import time
import warnings

import numpy as np
import sklearn
from sklearn.cluster import KMeans

from benchmarks._common import measure, plot_lines, print_table, write_csv, writes_results
from skdpcluster import BudgetAccountant, KTupleClusterer
from skdpcluster.ktuple._tuples import generate_tuples
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.exceptions import NotSeparatedWarning

__all__ = ["breakdown", "compare", "growth_exponent", "headline", "make_data", "run", "scaling"]

N_CLUSTERS = N_FEATURES = 10
#: R of the headline data on which the private test passes at k = 10.
WELL_SEPARATED = 10_000.0
#: The papers' smallest R (make_separated_mixture's default); the test fails at k = 10.
PAPER_SEPARATION = 32.0
QUICK_SIZES = (20_000, 50_000, 100_000, 200_000, 500_000, 1_000_000)
FULL_SIZES = QUICK_SIZES + (2_000_000, 5_000_000, 10_000_000)


def make_data(n_samples, separation, n_clusters=N_CLUSTERS, n_features=N_FEATURES, seed=0):
    """The benchmark mixture: ``n_clusters`` standard Gaussians at ``±separation e_i``."""
    return make_separated_mixture(
        n_samples, n_clusters, n_features, separation=separation, random_state=seed
    )[0]


def _fit_ktuple(X, n_clusters, seed):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotSeparatedWarning)
        return KTupleClusterer(n_clusters, random_state=seed, accountant=BudgetAccountant()).fit(X)


def _fit_kmeans(X, n_clusters, seed):
    return KMeans(n_clusters, n_init=1, random_state=seed).fit(X)


def _best_time(function, *args, repeat=1):
    """``(result, best wall seconds)`` over ``repeat`` runs."""
    seconds = []
    for _ in range(repeat):
        start = time.perf_counter()
        result = function(*args)
        seconds.append(time.perf_counter() - start)
    return result, min(seconds)


def _timed(function, *args, repeat=1):
    """``(result, best seconds, peak MiB)``: plain runs for the time, one traced run for memory."""
    result, seconds = _best_time(function, *args, repeat=repeat)
    peak = measure(function, *args)[2]
    return result, seconds, peak


def compare(X, n_clusters=N_CLUSTERS, repeat=1, seed=0):
    """One row: time and peak memory of both fits on ``X``, and their ratios."""
    estimator, ktuple_s, ktuple_mib = _timed(_fit_ktuple, X, n_clusters, seed, repeat=repeat)
    _, kmeans_s, kmeans_mib = _timed(_fit_kmeans, X, n_clusters, seed, repeat=repeat)
    n_samples, n_features = X.shape
    return {
        "n_samples": n_samples, "n_features": n_features, "n_clusters": n_clusters,
        "n_tuples": estimator.n_tuples_, "rows_per_tuple": n_samples // estimator.n_tuples_,
        "status": estimator.status_, "ktuple_s": ktuple_s, "kmeans_s": kmeans_s,
        "time_ratio": ktuple_s / kmeans_s, "ktuple_mib": ktuple_mib, "kmeans_mib": kmeans_mib,
        "memory_ratio": ktuple_mib / kmeans_mib,
    }


def breakdown(X, n_tuples, n_clusters=N_CLUSTERS, repeat=1, seed=0, per_block=True):
    """Where the private fit's time goes, and the batched vs per-block tuple generation.

    Returns a dict with ``tuples_s`` (batched ``generate_tuples``, as in
    ``fit``), ``aggregate_s`` (``fit_tuples`` on those tuples: the partition
    test and the noisy release), ``per_block_s`` (one scikit-learn fit per
    block; NaN when ``per_block`` is False) and ``batched_speedup``.
    """

    def tuples(method):
        return generate_tuples(
            X, KMeans(n_clusters=n_clusters, init="k-means++", n_init=1), n_clusters, n_tuples,
            rng=np.random.default_rng(seed), method=method,
        )

    def aggregate(tuples):
        estimator = KTupleClusterer(n_clusters, random_state=seed, accountant=BudgetAccountant())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NotSeparatedWarning)
            return estimator.fit_tuples(tuples)

    batched, tuples_s = _best_time(tuples, "batched", repeat=repeat)
    aggregate_s = _best_time(aggregate, batched, repeat=repeat)[1]
    per_block_s = _best_time(tuples, "per_block")[1] if per_block else math.nan
    return {"tuples_s": tuples_s, "aggregate_s": aggregate_s, "per_block_s": per_block_s,
            "batched_speedup": per_block_s / tuples_s}


def growth_exponent(rows, key):
    """Slope of ``log rows[key]`` against ``log n_samples`` (least squares)."""
    sizes = np.log([row["n_samples"] for row in rows])
    values = np.log([row[key] for row in rows])
    return float(np.polyfit(sizes, values, 1)[0]) if len(rows) > 1 else math.nan


def _skipped(n_samples, predicted_gib, budget_gib):
    print(f"  n={n_samples}: skipped, predicted peak {predicted_gib:.1f} GiB > --max-gib "
          f"{budget_gib:g}")
    return {"n_samples": n_samples, "status": "skipped",
            "note": f"predicted peak {predicted_gib:.1f} GiB > {budget_gib:g} GiB"}


def scaling(sizes, repeat=1, max_gib=2.0, known=None):
    """Rows of the scaling curve on the separated data; ``known`` maps n to a row already run.

    The peak memory of a size is extrapolated linearly from the previous one
    (both fits, plus the data); sizes above ``max_gib`` are skipped.
    """
    rows, known = [], known or {}
    for n_samples in sizes:
        if rows:
            last = rows[-1]
            per_row = (max(last["ktuple_mib"], last["kmeans_mib"]) * 2**20
                       + 8 * N_FEATURES * last["n_samples"]) / last["n_samples"]
            predicted = per_row * n_samples / 2**30
            if predicted > max_gib:
                rows.append(_skipped(n_samples, predicted, max_gib))
                break
        row = known.get(n_samples) or compare(make_data(n_samples, WELL_SEPARATED), repeat=repeat)
        rows.append({**row, "note": ""})
        print(f"  n={n_samples}: ktuple {row['ktuple_s']:.2f} s ({row['status']}), kmeans "
              f"{row['kmeans_s']:.2f} s, ratio {row['time_ratio']:.2f}", flush=True)
    return rows


def _plot(curve):
    long = [{"n_samples": row["n_samples"], "seconds": row[f"{name}_s"], "MiB": row[f"{name}_mib"],
             "estimator": label}
            for row in curve
            for name, label in (("ktuple", "KTupleClusterer"), ("kmeans", "KMeans(n_init=1)"))]
    for name, y, ylabel in (("speed_scaling", "seconds", "fit time (s)"),
                            ("speed_memory", "MiB", "peak traced memory (MiB)")):
        plot_lines(name, long, x="n_samples", y=y, group="estimator", xlabel="n (rows)",
                   ylabel=ylabel, title=f"d={N_FEATURES}, k={N_CLUSTERS}, R={WELL_SEPARATED:g}",
                   logx=True, logy=True)


def headline(n_samples, repeat=1):
    """The headline rows: both data sets, with the breakdown on the separated one."""
    rows = []
    for separation in (WELL_SEPARATED, PAPER_SEPARATION):
        X = make_data(n_samples, separation)
        row = {"separation": separation, **compare(X, repeat=repeat)}
        parts = dict.fromkeys(("tuples_s", "aggregate_s", "rest_s", "per_block_s",
                               "batched_speedup"), "")
        if separation == WELL_SEPARATED:
            parts = breakdown(X, row["n_tuples"], repeat=repeat)
            parts["rest_s"] = row["ktuple_s"] - parts["tuples_s"] - parts["aggregate_s"]
        rows.append({**row, **parts})
    return rows


def _report(rows, curve, slopes):
    print_table(rows, ["separation", "n_samples", "status", "ktuple_s", "kmeans_s", "time_ratio",
                       "ktuple_mib", "kmeans_mib", "memory_ratio"])
    print_table(rows[:1], ["tuples_s", "aggregate_s", "rest_s", "per_block_s", "batched_speedup"])
    print_table(curve, ["n_samples", "rows_per_tuple", "status", "ktuple_s", "kmeans_s",
                        "time_ratio", "ktuple_mib", "kmeans_mib", "memory_ratio", "note"])
    print("growth exponents (log-log slope over n):",
          ", ".join(f"{key[len('slope_'):]} {value:.2f}" for key, value in slopes.items()))


@writes_results
def run(quick, repeat=None, max_gib=None):
    """Run the benchmark; write the CSV and PNG files; return the headline rows."""
    repeat = repeat or 3
    print(f"numpy {np.__version__}, scikit-learn {sklearn.__version__}; best of {repeat} runs")
    compare(make_data(40_000, WELL_SEPARATED))  # warm-up: imports, thread pools
    rows = headline(200_000 if quick else 1_000_000, repeat)
    known = {row["n_samples"]: row for row in rows if row["separation"] == WELL_SEPARATED}
    curve = scaling(QUICK_SIZES if quick else FULL_SIZES, repeat=repeat,
                    max_gib=max_gib or (2.0 if quick else 6.0), known=known)
    measured = [row for row in curve if row["status"] != "skipped"]
    slopes = {f"slope_{key}": growth_exponent(measured, key)
              for key in ("ktuple_s", "kmeans_s", "ktuple_mib", "kmeans_mib")}
    rows = [{**row, **slopes} for row in rows]
    write_csv("speed", rows)
    write_csv("speed_scaling", [{key: row.get(key, "") for key in curve[0]} for row in curve])
    _plot(measured)
    _report(rows, curve, slopes)
    return [{key: row[key] for key in ("separation", "n_samples", "status", "time_ratio",
                                       "memory_ratio", *slopes)} for row in rows]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="n = 1e6 headline, curve to 1e7")
    parser.add_argument("--quick", dest="full", action="store_false", help="n = 2e5 (the default)")
    parser.add_argument("--repeat", type=int, help="timed runs per fit; the best is kept")
    parser.add_argument("--max-gib", type=float, help="memory budget of the scaling curve")
    args = parser.parse_args(argv)
    run(quick=not args.full, repeat=args.repeat, max_gib=args.max_gib)


if __name__ == "__main__":
    main()
