r"""The stable k-median's 1-median schedule: warm start (the default) against the whole schedule.

What it measures
----------------
:class:`~skdpcluster.PrivateStableKMedian` with ``gd_warm_start=True`` runs
the second half of the T = 50 step schedule from the initial centres
(25 passes over the rows; :func:`~skdpcluster.averaging.one_median.descent_schedule`)
and with ``False`` all 50 steps (spec §9.7; issue #17). For every setting
and seed, both fits on the same data with the same seed, and the excess
k-median cost of their 1-medians (``candidate_centers_["median"]``, the
candidate the schedule changes) over the mixture's true means:
:math:`\mathrm{cost}(C)/\mathrm{cost}(\mu) - 1`.

* Data: :func:`~skdpcluster.datasets.make_separated_mixture` (unit
  Gaussians at :math:`\pm s\, e_i`), the public bound
  :math:`\Lambda = s + 8\sqrt d`; ``median_domain="local"`` (the default).
* Settings ``(n, d, k, epsilon, s)``: the full run's six, 8 seeds each;
  ``--quick`` the first three with 4 seeds.
* The time of each fit is printed too (the fit's wall time in this
  process; the warm start's point is half the gradient passes).

Outputs: ``median_schedule.csv`` (one row per setting and schedule: mean
and largest excess cost, median fit seconds) and ``median_schedule.png``.

Usage::

    python -m benchmarks.bench_median_schedule --quick   # about a minute
    python -m benchmarks.bench_median_schedule --full    # about 4 minutes
"""

import argparse
import math
import statistics
import time
import warnings

import numpy as np

from benchmarks._common import plot_lines, print_table, write_csv, writes_results
from skdpcluster import BudgetAccountant, PrivateStableKMedian
from skdpcluster.datasets import make_separated_mixture

__all__ = ["SETTINGS", "excess_cost", "run"]

#: (n_samples, n_features, n_clusters, epsilon, separation) of the full run.
SETTINGS = (
    (100_000, 2, 4, 1.0, 100.0),
    (20_000, 10, 10, 1.0, 30.0),
    (100_000, 10, 10, 1.0, 100.0),
    (20_000, 10, 10, 0.3, 100.0),
    (5_000, 10, 4, 1.0, 30.0),
    (50_000, 3, 6, 1.0, 50.0),
)
SCHEDULES = {"warm": True, "whole": False}


def k_median_cost(X, centers, block=20_000):
    """:math:`\\sum_x \\min_j \\|x - c_j\\|`, in blocks of rows."""
    return math.fsum(
        float(np.sqrt(((X[start:start + block, None, :] - centers[None]) ** 2).sum(-1))
              .min(axis=1).sum())
        for start in range(0, len(X), block))


def excess_cost(X, means, setting, warm_start, seed):
    """Excess k-median cost of the 1-medians over the true ``means``, and the fit's seconds."""
    _, n_features, n_clusters, epsilon, separation = setting
    estimator = PrivateStableKMedian(
        n_clusters, epsilon=epsilon, data_radius=separation + 8.0 * math.sqrt(n_features),
        gd_warm_start=warm_start, random_state=seed, accountant=BudgetAccountant())
    start = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the grid's utility warnings: judged here by the cost
        estimator.fit(X)
    seconds = time.perf_counter() - start
    medians = estimator.candidate_centers_["median"]
    return k_median_cost(X, medians) / k_median_cost(X, means) - 1.0, seconds


@writes_results
def run(quick):
    """Both schedules on every setting; write the CSV and the plot; return the rows."""
    settings, seeds = (SETTINGS[:3], 4) if quick else (SETTINGS, 8)
    rows = []
    for index, setting in enumerate(settings):
        n_samples, n_features, n_clusters, epsilon, separation = setting
        X, _, means = make_separated_mixture(n_samples, n_clusters, n_features,
                                             separation=separation, random_state=0,
                                             return_centers=True)
        for name, warm_start in SCHEDULES.items():
            results = [excess_cost(X, means, setting, warm_start, seed) for seed in range(seeds)]
            excess = [value for value, _ in results]
            rows.append({
                "setting": index, "n_samples": n_samples, "n_features": n_features,
                "n_clusters": n_clusters, "epsilon": epsilon, "separation": separation,
                "schedule": name, "seeds": seeds, "mean_excess_cost": statistics.fmean(excess),
                "max_excess_cost": max(excess),
                "median_fit_s": statistics.median(seconds for _, seconds in results)})
            print_table(rows[-1:])
    write_csv("median_schedule", rows)
    plot_lines("median_schedule", rows, x="setting", y="mean_excess_cost", group="schedule",
               xlabel="setting (SETTINGS index)", ylabel="mean excess k-median cost",
               title="1-median schedule: warm start against the whole schedule")
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="three settings, 4 seeds (default)")
    size.add_argument("--full", action="store_true", help="six settings, 8 seeds")
    run(quick=not parser.parse_args(argv).full)


if __name__ == "__main__":
    main()
