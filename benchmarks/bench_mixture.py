"""PrivateGaussianMixture: the paper's naive baseline, and parameter error against n.

Two experiments (``spec/cohen_ktuple.md`` §9 and §10):

1. **Separation** (d = 1, k = 2, unit Gaussians at +-512, equal weights; spec
   §10.1-§10.2). The naive baseline of the paper adds Gaussian noise to every
   row, calibrated so that releasing the row is (epsilon, delta)-DP when rows
   lie in [-Lambda, Lambda] with Lambda = 2048 (L2 sensitivity 2 Lambda; the
   analytic calibration of Balle & Wang, which is valid at epsilon = 1 and
   adds less noise than the classical one of §10.5), then fits scikit-learn's
   ``GaussianMixture(2)``. Ours is ``PrivateGaussianMixture(2)`` with its
   defaults. A run *separates* the components when the spec's success
   criterion (§10.1) holds on every training row: each row is nearest to the
   released mean of its own component, and the two means are distinct. The
   paper reports the naive method failing even at 1e8 rows.
2. **Error against n** for d in {2, 10}, k in {2, 4}: a mixture with unequal
   weights and scales (means +-R e_i, R = 1024 for k = 2 and 2048 for k = 4).
   Reported: the largest mean error ``max_j ||mu_hat_j - mu_j||``, the largest
   relative covariance error ``max_j ||Sigma_hat_j - Sigma_j||_2 / ||Sigma_j||_2``,
   the total-variation error of the weights ``(1/2) sum_j |w_hat_j - w_j|``,
   and the held-out mean log-likelihood minus that of a non-private
   ``GaussianMixture(k)`` fitted on the same rows, plus the fit time relative
   to that ``GaussianMixture``. Components are matched by the Hungarian
   algorithm on the mean distances. Failed private tests count as failures
   (no errors).

Privacy: epsilon = 1, delta = 1e-6 for every method.

Usage::

    python -m benchmarks.bench_mixture --quick   # a few minutes on 2 cores
    python -m benchmarks.bench_mixture --full    # the full grid (about an hour)

Writes ``benchmarks/results/mixture_separation.csv``, ``mixture_errors.csv``
and their PNG plots.
"""

import argparse
import time
import warnings

import numpy as np
from scipy.optimize import linear_sum_assignment
from sklearn.mixture import GaussianMixture

from benchmarks._common import plot_lines, print_table, spread, write_csv, writes_results
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.exceptions import InsufficientDataError, NotSeparatedWarning
from skdpcluster.mechanisms import analytic_gaussian_sigma
from skdpcluster.mixture._gaussian_mixture import PrivateGaussianMixture

EPSILON, DELTA = 1.0, 1e-6
NAIVE_RADIUS = 2048.0  # Lambda of the naive baseline (spec §10.5)
SEPARATION_R = 512.0
OURS_N = {True: (10_000, 15_000, 20_000, 30_000, 50_000, 100_000),
          False: (10_000, 15_000, 20_000, 30_000, 50_000, 100_000, 300_000, 1_000_000)}
NAIVE_N = {True: (10_000, 100_000, 1_000_000), False: (10_000, 100_000, 1_000_000, 10_000_000)}
SEPARATION_REPEATS = {True: 3, False: 10}
ERROR_N = {True: (30_000, 100_000, 300_000, 1_000_000),
           False: (10_000, 30_000, 100_000, 300_000, 1_000_000)}
ERROR_REPEATS = {True: 1, False: 3}
SHAPES = ((2, 2), (2, 4), (10, 2), (10, 4))  # (d, k)
WEIGHTS = {2: (0.3, 0.7), 4: (0.1, 0.2, 0.3, 0.4)}
SCALES = {2: (1.0, 2.0), 4: (1.0, 1.5, 2.0, 0.5)}
RADIUS = {2: 1024.0, 4: 2048.0}
TEST_ROWS = 20_000


# -- experiment 1: separation ---------------------------------------------------


def naive_sigma():
    """Per-row noise that makes releasing a row in [-Lambda, Lambda] (eps, delta)-DP."""
    return analytic_gaussian_sigma(2 * NAIVE_RADIUS, EPSILON, DELTA)


def separates(means, X, y, centers):
    """Spec §10.1 on every row, and every released mean within R/2 of its component's mean.

    The second condition rules out a lucky split: ``GaussianMixture(2)`` on
    an almost Gaussian cloud puts its two means symmetrically about the
    centre, which partitions the rows correctly without learning anything.
    """
    if means is None:
        return False
    sorted_means = np.sort(means[:, 0])
    component = np.argmin(np.abs(sorted_means[:, None] - centers[None, :, 0]), axis=1)
    if component[0] == component[1]:
        return False
    predicted = component[(X[:, 0] > sorted_means.mean()).astype(np.intp)]
    accurate = np.abs(sorted_means - centers[component, 0]).max() <= SEPARATION_R / 2
    return bool(accurate and np.array_equal(predicted, y))


def fit_naive(X, seed):
    rng = np.random.default_rng(seed)
    noisy = X + rng.normal(0.0, naive_sigma(), size=X.shape)
    return GaussianMixture(2, random_state=seed).fit(noisy).means_


def fit_ours(X, seed):
    try:
        gm = PrivateGaussianMixture(2, epsilon=EPSILON, delta=DELTA, random_state=seed).fit(X)
    except InsufficientDataError:
        return None
    return gm.means_


def separation_rows(quick):
    rows = []
    methods = (("ours", fit_ours, OURS_N[quick]), ("naive", fit_naive, NAIVE_N[quick]))
    for method, fit, grid in methods:
        for n in grid:
            outcomes, seconds = [], []
            for seed in range(SEPARATION_REPEATS[quick]):
                X, y, centers = make_separated_mixture(n, n_clusters=2, n_features=1,
                                                       separation=SEPARATION_R, random_state=seed,
                                                       return_centers=True)
                start = time.perf_counter()
                means = fit(X, seed)
                seconds.append(time.perf_counter() - start)
                outcomes.append(separates(means, X, y, centers))
            rows.append(dict(method=method, n_samples=n, repeats=len(outcomes),
                             success_rate=float(np.mean(outcomes)), median_s=spread(seconds)[0]))
            print(f"  separation {method:>5} n={n:>9}: success {np.mean(outcomes):.2f}", flush=True)
    return rows


def smallest_separating_n(rows, method):
    """Smallest n from which every larger n tried also succeeded in every run."""
    mine = sorted((r for r in rows if r["method"] == method), key=lambda r: r["n_samples"])
    answer = None
    for row in reversed(mine):
        if row["success_rate"] < 1.0:
            break
        answer = row["n_samples"]
    return answer


# -- experiment 2: error against n ------------------------------------------------


def mixture_data(n, d, k, seed):
    means = np.zeros((k, d))
    for j in range(k):  # +-R e_1, +-R e_2 (spec §10.1 layout)
        means[j, j // 2] = RADIUS[k] * (1 if j % 2 == 0 else -1)
    X, y = make_separated_mixture(n, means=means, scales=SCALES[k], weights=WEIGHTS[k],
                                  random_state=seed)
    return X, y, means


def parameter_errors(gm, means, k, d):
    distance = np.linalg.norm(gm.means_[:, None] - means[None], axis=-1)
    released, truth = linear_sum_assignment(distance)
    full = np.asarray(gm.covariances_)
    true_cov = np.array(SCALES[k])[truth, None, None] ** 2 * np.eye(d)
    cov_error = np.linalg.norm(full[released] - true_cov, ord=2, axis=(1, 2)) / true_cov[:, 0, 0]
    return dict(
        mean_error=float(distance[released, truth].max()),
        cov_rel_error=float(cov_error.max()),
        weights_tv=float(0.5 * np.abs(gm.weights_[released] - np.array(WEIGHTS[k])[truth]).sum()),
    )


def error_row(n, d, k, seed):
    X, _, means = mixture_data(n, d, k, seed)
    X_test, _, _ = mixture_data(TEST_ROWS, d, k, seed + 1000)
    start = time.perf_counter()
    gm = PrivateGaussianMixture(k, epsilon=EPSILON, delta=DELTA, random_state=seed)
    try:
        gm.fit(X)
    except InsufficientDataError:
        return dict(status="too_few_rows")
    ours_s = time.perf_counter() - start
    start = time.perf_counter()
    reference = GaussianMixture(k, random_state=seed).fit(X)
    reference_s = time.perf_counter() - start
    if gm.status_ != "success":
        return dict(status="failure", time_ratio=ours_s / reference_s)
    return dict(status="success", **parameter_errors(gm, means, k, d),
                loglik_gap=gm.score(X_test) - reference.score(X_test),
                time_ratio=ours_s / reference_s)


def error_rows(quick):
    rows = []
    for (d, k), n in ((shape, n) for shape in SHAPES for n in ERROR_N[quick]):
        runs = [error_row(n, d, k, seed) for seed in range(ERROR_REPEATS[quick])]
        ok = [r for r in runs if r["status"] == "success"]
        row = dict(d=d, k=k, shape=f"d={d}, k={k}", n_samples=n, runs=len(runs),
                   success_rate=len(ok) / len(runs))
        for key in ("mean_error", "cov_rel_error", "weights_tv", "loglik_gap"):
            row[key] = float(np.median([r[key] for r in ok])) if ok else float("nan")
        ratios = [r["time_ratio"] for r in runs if "time_ratio" in r]
        row["time_ratio"] = float(np.median(ratios)) if ratios else float("nan")
        rows.append(row)
        print(f"  errors d={d:>2} k={k} n={n:>9}: success {row['success_rate']:.2f}, "
              f"mean {row['mean_error']:.3g}, cov {row['cov_rel_error']:.3g}, "
              f"tv {row['weights_tv']:.3g}, ll gap {row['loglik_gap']:.3g}", flush=True)
    return rows


# -- driver ------------------------------------------------------------------------


@writes_results
def run(quick=True):
    """Run both experiments; write CSV and PNG files; return the headline rows."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotSeparatedWarning)  # failures are counted, not shown
        separation = separation_rows(quick)
        errors = error_rows(quick)
    write_csv("mixture_separation", separation)
    write_csv("mixture_errors", errors)
    plot_lines("mixture_separation", separation, x="n_samples", y="success_rate", group="method",
               xlabel="n (rows)", ylabel="share of runs that separate",
               title="d=1, k=2, means +-512: ours vs noise-then-GaussianMixture", logx=True)
    finite = [r for r in errors if r["success_rate"] > 0]
    for key, label in (("mean_error", "max_j ||mu_hat_j - mu_j||"),
                       ("cov_rel_error", "max_j relative spectral error")):
        plot_lines(f"mixture_{key}", finite, x="n_samples", y=key, group="shape", xlabel="n (rows)",
                   ylabel=label, title=f"PrivateGaussianMixture, eps={EPSILON}, delta={DELTA}",
                   logx=True, logy=True)
    largest = max(ERROR_N[quick])
    headline = [dict(experiment="separate +-512 (d=1, k=2)", setting=method,
                     smallest_n=smallest_separating_n(separation, method),
                     largest_n_tried=max(r["n_samples"] for r in separation
                                         if r["method"] == method))
                for method in ("ours", "naive")]
    headline += [dict(experiment=f"errors at n={largest}", setting=r["shape"],
                      success_rate=r["success_rate"], mean_error=r["mean_error"],
                      cov_rel_error=r["cov_rel_error"], weights_tv=r["weights_tv"],
                      loglik_gap=r["loglik_gap"], time_ratio=r["time_ratio"])
                 for r in errors if r["n_samples"] == largest]
    return headline


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small grid (default)")
    size.add_argument("--full", action="store_true", help="the full grid")
    args = parser.parse_args()
    headline = run(quick=not args.full)
    print_table([row for row in headline if "smallest_n" in row])
    print()
    print_table([row for row in headline if "mean_error" in row])


if __name__ == "__main__":
    main()
