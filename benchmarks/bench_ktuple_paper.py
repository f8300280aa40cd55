r"""Paper reproduction: sample complexity of the k-tuple clusterers (Cohen et al., ICML 2021, §5).

What it measures
----------------
The experiments of the paper's Figures 5-7, with the protocol of
``spec/cohen_ktuple.md`` §10.5:

* **PrivatekNoisyCenters** (``KTupleClusterer(method="noisy_centers")``), at
  the minimal admissible number of tuples: the number of *samples per
  tuple* ``s`` needed for the fit to separate the mixture in at least 19 of
  20 independent runs (a success rate of at least ``1 - beta``), and the
  smallest ``s`` with at least half of the runs successful (the 50 % point).
* **PrivatekAverages** (``method="averages"``), with ``15 k`` samples per
  tuple as in the paper: the number of *tuples* needed, same criteria.

Settings (spec §10.1; eps = 1, delta = e^-28, beta = 0.05 throughout):

* Test1 (Figure 5): d = 1, k = 2, R in {32, 64, 128, 256, 512};
* Test2 (Figure 6): d = 4, k in {2, 4, 6, 8}, R = 512 k;
* Test3 (Figure 7): k = 2, d in {4, 8, 12, 16}, R = 256 sqrt(d);
* every figure plots both algorithms (paper §5: "We compared the two
  algorithms in terms of the sample complexity"; "The graphs show the main
  bottleneck of Algorithm PrivatekAverages"), so each setting is run with
  PrivatekAverages too (``Lambda = 2^10 k sqrt(d)``, ``r_min = 0.1``). Its
  search starts at spec §10.3's d = 1, k = 2 prediction scaled by ``k d / 2``
  (the paper's "O(kd) tuples"): 4.8e6 to 1.9e7 tuples in Test2 and Test3,
  1.4e8 to 2.3e9 samples per run, above :data:`MAX_SAMPLES`, so those rows
  record that no grid point was run (empty ``max_size``);
* Naive (paper §5, spec §10.5): every sample of Test1's mixture at R = 512
  released with Gaussian noise (:func:`naive_run`), then
  ``GaussianMixture(n_components=2)``, at 1e4 ... 1e8 samples (the paper: it
  "failed even when we used 100M samples"). One run at 1e8 needs about 15 GB
  of memory (peak resident 15.3 GB measured, about 150 bytes per sample).

The data is a uniform mixture of k standard spherical Gaussians with means
``{±R e_i}`` (:func:`~skdpcluster.datasets.make_separated_mixture`). One run
draws ``n_tuples * s`` fresh samples and fits :class:`KTupleClusterer` on
them: the estimator cuts them at random into ``n_tuples`` disjoint blocks
of ``s`` rows, runs ``KMeans(init="k-means++", n_init=1)`` on every block
(the batched path) and releases k centres privately. This is the paper's
"each k-tuple from its own fresh samples". The run **succeeds** (§10.1)
when the private test passed and there is a bijection between the
components and the released centres such that *every* sample used is
nearest to the centre of its own component. Every run has its own seed,
a function of the setting, the grid point and the run number only, so any
row of the tables can be re-run on its own.

Two privacy configurations (``mode``):

* ``corrected``: the library defaults, provably (eps, delta)-DP:
  ``accounting="corrected"`` (5019 tuples), ``lambda_mechanism="log_laplace"``,
  ``gaussian_calibration="analytic_joint"``
  (``spec/cohen_ktuple_review.md``).
* ``paper``: the paper's reproduction mode, ``accounting="paper"`` (4296
  tuples, the minimum of the printed Definitions 4.1 and 4.4),
  ``lambda_mechanism="paper"``, ``gaussian_calibration="classical"``. Not
  proven private (the review); the paper's reported 3781 tuples cannot be
  derived from its printed formulas (spec §10.4) and the estimator refuses it.

The search walks a geometric grid (factor sqrt(2)) from
a starting guess (the spec's prediction where there is one) until it has
bracketed both the 95 % and the 50 % point, assuming the success rate grows
with the searched size. A grid point stops early once its run count decides
both criteria (e.g. two failures and half the runs successful), so the
``runs`` column of the grid table may be below the nominal count.

How to read the output
----------------------
``benchmarks/results/ktuple_paper.csv``, one row per setting and mode:

* ``searched``: ``samples_per_tuple`` (NoisyCenters) or ``n_tuples``
  (Averages); ``size_95`` and ``size_50`` are its smallest grid values from
  which on every grid point run had at least 19/20 (``--quick``: all of the
  runs), or at least half of the runs, successful; ``total_95`` is the
  samples of one run at ``size_95``. An empty ``size_95`` means the search
  stopped at ``MAX_SAMPLES`` samples per run first; ``max_size`` is the
  largest grid value it ran; ``runs`` the nominal runs per grid point.
* ``spec_low``/``spec_high``: spec §10.3's prototype prediction for the
  same quantity ([PROTO]; made with the paper's formulas at 4296 tuples
  and at least 7/8 successes, or 5/6-6/6 for Averages), shown beside both
  modes; empty where the spec has none. Both modes search the same grid.
* ``allowed_bad``: the fraction of tuples the private test may leave
  unpartitioned (its pass threshold ``(m/eps2) log(m/beta_TP)`` over
  ``n_tuples``); ``noise_to_gap``: the released centres' noise relative to
  their spacing (:func:`~skdpcluster.ktuple.noisy_centers.noise_to_gap_ratio`).
  Both explain why the modes need different ``s``.
* ``test_floor``: the share of runs whose private test fails even on
  perfectly agreeing tuples (:func:`failure_floor`; :data:`FLOOR_RUNS`
  fits). It is the test's own part of the ``beta`` budget, about 2 % in both
  modes, and no sample size removes it: with a failure rate p a grid point
  passes 19/20 with probability at most ``(1 - p)^20 + 20 p (1 - p)^19``
  (about 0.94 at p = 0.02), and 10/10 with ``(1 - p)^10`` (about 0.82). So ``size_95``
  is uncertain by about one grid step and the ``runs`` column matters;
  ``size_50`` is steadier.

``ktuple_paper_grid.csv`` lists every grid point run: ``successes`` of
``runs``, ``test_passed`` (the runs whose private test passed, so
``test_passed - successes`` failed only in the noisy release) and the
wall ``seconds``. One PNG per figure of the paper plots ``total_95``, the
samples of one run, of both algorithms in both modes against the figure's
abscissa: ``ktuple_paper.png`` (Test1, Figure 5, against R, with the spec's
predictions), ``ktuple_paper_test2.png`` (Figure 6, against k) and
``ktuple_paper_test3.png`` (Figure 7, against d);
``ktuple_paper_rates.png`` shows Test1's NoisyCenters success rate along the
grid and ``ktuple_paper_averages.png`` the Averages success rate against the
number of tuples.

``ktuple_paper_naive.csv``: the naive baseline per sample size, its
successes (both fitted means within R/2 of the truth), the runs whose means
merely separate the samples (met by symmetry, see :func:`naive_run`), the
median distance of the fitted means from the truth in units of R, the noise
sigma and the wall seconds per run.

Run counts (:data:`FULL_RUNS`): ``--full`` uses 10 runs per grid point (5 at
R = 32, 3 for PrivatekAverages, whose fits take about a minute each at 10^6
tuples on one free core), so ``size_95`` means "all runs"; ``--runs 20``
gives the spec's 19/20. Results are written after every setting, and
``--tests``, ``--methods``, ``--modes`` and ``--values`` (R, k or d: the
figure's abscissa) rerun the settings they all allow and keep the other
settings' committed rows.

Usage::

    python -m benchmarks.bench_ktuple_paper --quick   # Test1, R in {128, 512}, 10 runs (1-2 min)
    python -m benchmarks.bench_ktuple_paper --full    # everything (hours on 2 cores)
    python -m benchmarks.bench_ktuple_paper --full --tests Test2 Test3   # some, keep the rest
    python -m benchmarks.bench_ktuple_paper --full --tests Test1 --methods averages --values 32 64
"""

import argparse
import contextlib
import csv
import functools
import math
import time
import warnings
from dataclasses import dataclass

import numpy as np
from scipy.stats import chi2
from sklearn.mixture import GaussianMixture

from benchmarks._common import plot_lines, print_table, result_path, write_csv, writes_results
from skdpcluster import BudgetAccountant, KTupleClusterer
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.exceptions import (
    NotSeparatedWarning,
    PrivacyLeakWarning,
    UnprovenPrivacyWarning,
)
from skdpcluster.ktuple import compute_m_eps1, min_tuples
from skdpcluster.ktuple.noisy_centers import default_separation, noise_to_gap_ratio
from skdpcluster.mechanisms import gaussian_mechanism

__all__ = [
    "MODES",
    "Setting",
    "failure_floor",
    "naive_run",
    "naive_rows",
    "run",
    "run_once",
    "search",
    "separates",
    "settings",
    "success_count",
]

EPSILON, DELTA, BETA = 1.0, math.exp(-28), 0.05
SEED = 20210718
#: Estimator parameters of the two privacy configurations.
MODES = {
    "corrected": {"accounting": "corrected"},
    "paper": {
        "accounting": "paper", "lambda_mechanism": "paper", "gaussian_calibration": "classical",
        "allow_unproven": True,
    },
}
#: Samples per tuple of PrivatekAverages, per cluster ("about 15 k samples", spec §10.1).
AVERAGES_ROWS_PER_CLUSTER = 15
#: Spec §10.3 [PROTO]: samples per tuple for >= 7/8 successes, Test1 at 4296 tuples.
SPEC_TEST1 = {512: (40, 40), 256: (160, 160), 128: (700, 700), 64: (2800, 2800), 32: (8000, 11000)}
#: Spec §10.3 [PROTO]: tuples PrivatekAverages needs at d=1, k=2, R=64 (paper formulas).
SPEC_AVERAGES = (1.1e6, 1.3e6)
#: No run draws more samples than this (memory: about 50 bytes per sample at peak).
MAX_SAMPLES = 120_000_000
#: Ratio of neighbouring grid points (spec §10.5).
GRID_STEP = math.sqrt(2.0)
#: Runs per grid point with ``--full``. The spec's protocol asks for 20 (19/20 successes);
#: on a 2-core machine shared with other jobs the committed run used 10 (so ``size_95``
#: means 10 of 10), 5 at R = 32 (about 5e7 samples per fit) and 3 for PrivatekAverages
#: (about 1e6 tuples per fit; the spec's prototype used 6). ``--runs 20`` restores it.
FULL_RUNS, FULL_RUNS_R32, AVERAGES_RUNS = 10, 5, 3
#: Fits of :func:`failure_floor` per mode (about +-0.7 % on a 2 % floor).
FLOOR_RUNS = 400
#: The naive baseline (paper §5, spec §10.5): Test1's mixture at R = 512, clipped to
#: [-Lambda, Lambda] with Lambda = 2048, one Gaussian-mechanism release of every sample.
NAIVE_SEPARATION, NAIVE_RADIUS = 512.0, 2048.0
#: Sample sizes of the naive baseline, and its runs per size.
NAIVE_SIZES = {True: (10**4, 10**5), False: (10**4, 10**5, 10**6, 10**7, 10**8)}
NAIVE_RUNS = 3
#: From this size on the naive baseline runs once (minutes per fit on a shared machine).
NAIVE_ONE_RUN_FROM = 10**7
#: The experiments ``--tests`` can choose.
TESTS = ("Test1", "Test2", "Test3", "Naive")
_QUIET = (NotSeparatedWarning, PrivacyLeakWarning, UnprovenPrivacyWarning)


@dataclass(frozen=True)
class Setting:
    """One experiment: a mixture, an algorithm and a privacy mode; the searched size is free."""

    test: str
    n_clusters: int
    n_features: int
    separation: float
    mode: str
    method: str = "noisy_centers"

    @property
    def searched(self):
        return "n_tuples" if self.method == "averages" else "samples_per_tuple"

    def n_tuples(self, size):
        """Tuples of a run at grid value ``size``: the minimum, or ``size`` for Averages."""
        if self.method == "averages":
            return int(size)
        return min_tuples(EPSILON, DELTA, BETA, MODES[self.mode]["accounting"])

    def rows_per_tuple(self, size):
        if self.method == "averages":
            return AVERAGES_ROWS_PER_CLUSTER * self.n_clusters
        return int(size)

    def estimator(self, n_tuples, rng):
        """The estimator of one run; a fresh accountant, so the default ledger does not grow."""
        extra = {}
        if self.method == "averages":
            radius = 2.0**10 * self.n_clusters * math.sqrt(self.n_features)
            extra = {"data_radius": radius, "r_min": 0.1}
        return KTupleClusterer(
            self.n_clusters, method=self.method, epsilon=EPSILON, delta=DELTA, beta=BETA,
            n_tuples=n_tuples, random_state=rng, accountant=BudgetAccountant(),
            fallback_share=0.0,  # the paper's methods on the whole budget, as published
            **MODES[self.mode], **extra,
        )

    def key(self):
        """Integers that identify the setting in the seeds."""
        return (self.n_clusters, self.n_features, round(self.separation * 1000),
                list(MODES).index(self.mode), int(self.method == "averages"))

    def spec_prediction(self):
        """``(low, high)`` of spec §10.3 for ``size_95``, or ``(None, None)``.

        The prediction was made with the paper's formulas; it is shown beside
        both modes, and both modes search the same grid around it.
        """
        if self.method == "averages":
            known = (self.n_clusters, self.n_features, self.separation) == (2, 1, 64)
            return SPEC_AVERAGES if known else (None, None)
        if self.test == "Test1":
            return SPEC_TEST1.get(int(self.separation), (None, None))
        return None, None

    def start(self):
        """Where the search begins: the spec's prediction, or a rough model of the test.

        The model: a tuple point estimates its mean from ``s/k`` samples, two
        tuples' points differ by about ``N(0, (2k/s) I_d)``, and the test needs
        that within the ball radius ``D/Delta`` (D the closest pair of means)
        for nearly all tuples; the factor 2.25 fits spec §10.3 at R = 512.
        PrivatekAverages: the spec's d = 1, k = 2 prediction scaled by ``k d / 2``
        (the paper's "O(kd) tuples", whatever R).
        """
        low, high = self.spec_prediction()
        if low is not None:
            return math.sqrt(low * high)
        if self.method == "averages":
            scale = self.n_clusters * self.n_features / 2
            return scale * math.sqrt(SPEC_AVERAGES[0] * SPEC_AVERAGES[1])
        k, d = self.n_clusters, self.n_features
        gap = (2.0 if k == 2 else math.sqrt(2.0)) * self.separation
        radius = gap / default_separation(k, EPSILON, DELTA, BETA)
        return max(5.0 * k, 2.25 * 2 * k * chi2.ppf(0.95, d) / radius**2)

    def describe(self, n_tuples):
        """Public quantities that explain the results: the test's slack and the release noise."""
        m, _ = compute_m_eps1(n_tuples, EPSILON / 2, DELTA / 4, BETA / 2)
        threshold = (4 * m / EPSILON) * math.log(2 * m / BETA)  # (m/eps2) log(m/beta) of the test
        ratio = math.nan
        if self.method == "noisy_centers":
            modes = {key: value for key, value in MODES[self.mode].items()
                     if key not in ("accounting", "allow_unproven")}
            separation = default_separation(self.n_clusters, EPSILON, DELTA, BETA)
            ratio = noise_to_gap_ratio(self.n_clusters, EPSILON, DELTA, separation, **modes)
        return {"allowed_bad": threshold / n_tuples, "noise_to_gap": ratio}


def settings(quick):
    """The experiments of one benchmark run (spec §10.1), each in both modes.

    Every figure plots both algorithms (paper §5: "We compared the two
    algorithms in terms of the sample complexity"), so the full run has a
    PrivatekAverages setting beside every PrivatekNoisyCenters one. Test2's
    and Test3's Averages settings start at the paper's constant (about
    ``SPEC_AVERAGES`` per two ``k d``), above :data:`MAX_SAMPLES` samples per
    run: their rows record that no grid point fitted (empty ``max_size``).
    """
    if quick:
        mixtures = [("Test1", 2, 1, r) for r in (128, 512)]
    else:
        mixtures = (
            [("Test1", 2, 1, r) for r in (512, 256, 128, 64, 32)]  # the slowest last
            + [("Test2", k, 4, 512 * k) for k in (2, 4, 6, 8)]
            + [("Test3", 2, d, 256 * math.sqrt(d)) for d in (4, 8, 12, 16)]
        )
    methods = ("noisy_centers",) if quick else ("noisy_centers", "averages")
    return [Setting(*mixture, mode, method)
            for method in methods for mixture in mixtures for mode in MODES]


def selected(setting, tests=None, methods=None, modes=None, values=None):
    """Whether ``setting`` passes the command line's filters (None: no filter).

    ``values`` are the figure's abscissae: R for Test1, k for Test2, d for Test3.
    """
    value = {"Test2": setting.n_clusters, "Test3": setting.n_features}.get(
        setting.test, setting.separation)
    return all(chosen is None or item in chosen for item, chosen in (
        (setting.test, tests), (setting.method, methods), (setting.mode, modes), (value, values)))


# One run and one grid point ---------------------------------------------------


@contextlib.contextmanager
def _quiet():
    """Silence the warnings every failed or reproduction-mode fit emits."""
    with warnings.catch_warnings():
        for category in _QUIET:
            warnings.simplefilter("ignore", category)
        yield


def separates(labels, y, n_clusters):
    """Spec §10.1's criterion on the nearest-centre ``labels`` of samples of components ``y``.

    True when every component's samples all share one label and no two
    components share a label (a bijection between components and released
    centres). Labels of -1 (no release) never separate.
    """
    if labels.size == 0 or labels.min() < 0:
        return False
    table = np.bincount(y * n_clusters + labels, minlength=n_clusters**2)
    used = table.reshape(n_clusters, n_clusters) > 0
    present = used.any(axis=1)
    return bool(np.all(used[present].sum(axis=1) == 1) and np.all(used.sum(axis=0) <= 1))


def run_once(setting, size, run):
    """One run at grid value ``size``: fresh samples, one private fit.

    Returns
    -------
    passed : bool
        The private test passed (centres were released).
    success : bool
        The released centres separate every sample (spec §10.1).
    """
    data_rng, fit_rng = np.random.default_rng([SEED, *setting.key(), int(size), run]).spawn(2)
    n_tuples = setting.n_tuples(size)
    X, y = make_separated_mixture(
        n_tuples * setting.rows_per_tuple(size), setting.n_clusters, setting.n_features,
        separation=setting.separation, random_state=data_rng,
    )
    estimator = setting.estimator(n_tuples, fit_rng)
    with _quiet():
        estimator.fit(X)
    passed = estimator.status_ == "success"
    return passed, passed and separates(estimator.labels_, y, setting.n_clusters)


def success_count(setting, size, n_runs):
    """``(successes, runs, passed)`` at ``size``, stopping once both criteria are decided.

    The criteria: at least ``ceil(0.95 n_runs)`` successes (19 of 20) and at
    least ``ceil(n_runs / 2)``. ``passed`` counts the runs whose private test
    passed, successful or not.
    """
    targets = (math.ceil(0.95 * n_runs), math.ceil(n_runs / 2))
    successes = passed = 0
    for run in range(n_runs):
        test_passed, success = run_once(setting, size, run)
        successes, passed = successes + success, passed + test_passed
        failures = run + 1 - successes
        if all(successes >= need or failures > n_runs - need for need in targets):
            return successes, run + 1, passed
    return successes, n_runs, passed


@functools.lru_cache
def failure_floor(mode, n_runs):
    """Share of runs whose private test fails on ``n_runs`` sets of perfectly agreeing tuples.

    Every tuple is {0, 1} (d = 1, k = 2), at the minimal number of tuples of
    ``mode``: no tuple is ever unpartitioned, so every failure is the test's
    own noise, its share of the ``beta`` budget (Claim 4.2). No grid point
    can do better.
    """
    n_tuples = min_tuples(EPSILON, DELTA, BETA, MODES[mode]["accounting"])
    tuples = np.broadcast_to(np.array([[0.0], [1.0]]), (n_tuples, 2, 1))
    failures = 0
    for run in range(n_runs):
        estimator = Setting("floor", 2, 1, 1.0, mode).estimator(
            n_tuples, np.random.default_rng([SEED, list(MODES).index(mode), run])
        )
        with _quiet():
            failures += estimator.fit_tuples(tuples).status_ != "success"
    return failures / n_runs


# The search ---------------------------------------------------------------------


def _grid_value(setting, start, step, index):
    """Grid point ``index``, never below the smallest meaningful size."""
    if setting.method == "averages":
        floor = min_tuples(EPSILON, DELTA, BETA, MODES[setting.mode]["accounting"])
    else:
        floor = setting.n_clusters
    return max(round(start * step**index), floor)


def _lowest_of_top_run(rows, key):
    """The first row of the run of rows passing ``key`` that ends at the largest size, or None.

    ``rows`` are sorted by size. Taking the top run, not the smallest passing
    row, makes the result robust to a lucky point below a failing one: the
    success rate is a noisy estimate, and the criterion asks for a size that
    is enough.
    """
    lowest = None
    for row in reversed(rows):
        if not row[key]:
            break
        lowest = row
    return lowest


def _next_index(results):
    """The grid index to run next, or None when both points are bracketed."""
    rows = [results[i] for i in sorted(results)]
    for key in ("pass_95", "pass_50"):
        lowest = _lowest_of_top_run(rows, key)
        if lowest is None:
            return max(results) + 1
        if lowest["index"] - 1 not in results:
            return lowest["index"] - 1
    return None


def search(setting, n_runs, step=GRID_STEP, max_samples=MAX_SAMPLES, verbose=True):
    """Grid rows of the search for ``setting`` (see the module docstring).

    No grid point with more than ``max_samples`` samples per run is run; the
    search then stops where it is.
    """
    start, results = setting.start(), {}
    index = 0
    while index is not None:
        size = _grid_value(setting, start, step, index)
        samples = setting.n_tuples(size) * setting.rows_per_tuple(size)
        if samples > max_samples:
            break
        if any(row["size"] == size for row in results.values()):
            break  # the grid has reached its floor
        began = time.perf_counter()
        successes, runs, passed = success_count(setting, size, n_runs)
        need95, need50 = math.ceil(0.95 * n_runs), math.ceil(n_runs / 2)
        results[index] = {
            "index": index, "size": size, "successes": successes, "runs": runs,
            "test_passed": passed,
            "pass_95": successes >= need95, "pass_50": successes >= need50,
            "seconds": time.perf_counter() - began,
        }
        if verbose:
            print(f"  {setting.test} k={setting.n_clusters} d={setting.n_features} "
                  f"R={setting.separation:g} {setting.mode}: {setting.searched}={size}: "
                  f"{successes}/{runs} (test passed {passed}; "
                  f"{results[index]['seconds']:.0f} s)", flush=True)
        index = _next_index(results)
    return [results[i] for i in sorted(results)]


def _smallest(grid, key):
    """The smallest grid value from which on every grid point run passes ``key``, or None."""
    lowest = _lowest_of_top_run(sorted(grid, key=lambda row: row["size"]), key)
    return None if lowest is None else lowest["size"]


def summarize(setting, grid, n_runs, floor=""):
    """The summary row of one setting; ``floor`` is its mode's :func:`failure_floor`.

    ``total_95`` counts the samples of one run at ``size_95``: tuples times
    samples per tuple (NoisyCenters), or tuples times 15 k (Averages).
    """
    size95, size50 = _smallest(grid, "pass_95"), _smallest(grid, "pass_50")
    low, high = setting.spec_prediction()
    n_tuples = setting.n_tuples(size95 or setting.start())
    return {
        "test": setting.test, "method": setting.method, "mode": setting.mode,
        "k": setting.n_clusters, "d": setting.n_features, "R": round(setting.separation, 2),
        "Delta": round(default_separation(setting.n_clusters, EPSILON, DELTA, BETA), 2)
        if setting.method == "noisy_centers" else 7.0,
        "n_tuples": n_tuples if setting.method == "noisy_centers" else "",
        "searched": setting.searched, "size_95": size95 or "", "size_50": size50 or "",
        "total_95": n_tuples * setting.rows_per_tuple(size95) if size95 else "",
        "spec_low": low or "", "spec_high": high or "", "runs": n_runs,
        "max_size": max(row["size"] for row in grid) if grid else "",
        "test_floor": floor if setting.method == "noisy_centers" else "",
        **{key: round(value, 4) for key, value in setting.describe(n_tuples).items()},
    }


# The naive baseline -------------------------------------------------------------


def naive_run(n_samples, run):
    r"""One run of the paper's naive baseline (§5; spec §10.5) on ``n_samples`` samples.

    Every sample of Test1's mixture at R = 512 is clipped to
    :math:`[-\Lambda, \Lambda]` (:math:`\Lambda` = 2048) and released with
    Gaussian noise, one Gaussian-mechanism release of the whole vector (L2
    sensitivity :math:`2\Lambda` under replace-one, analytic calibration at
    eps = 1, delta = e^-28); ``GaussianMixture(n_components=2)`` is fitted to the
    noisy samples, and its two means are the released centres (post-processing).

    The paper calls it a failure without its criterion. Here a run
    **succeeds** when the two means separate every (clean) sample (spec
    §10.1) *and* each lies within R/2 of its true mean: the separation alone
    is met by symmetry (the mixture is symmetric about the centre of the
    clipping interval, so any two means split evenly around 0 separate it,
    however far out they are).

    Returns
    -------
    separated : bool
        The two means separate every (clean) sample (spec §10.1).
    mean_error : float
        The largest distance of a fitted mean from the true mean it is matched to
        (the means sorted), in units of R.
    sigma : float
        The noise standard deviation of every sample.
    """
    data_rng, noise_rng = np.random.default_rng([SEED, 2, int(n_samples), run]).spawn(2)
    X, y = make_separated_mixture(n_samples, 2, 1, separation=NAIVE_SEPARATION,
                                  random_state=data_rng)
    noisy, event = gaussian_mechanism(
        np.clip(X, -NAIVE_RADIUS, NAIVE_RADIUS), sensitivity=2 * NAIVE_RADIUS, epsilon=EPSILON,
        delta=DELTA, rng=noise_rng, label="naive/every_sample")
    means = np.sort(GaussianMixture(2, random_state=run).fit(noisy).means_[:, 0])
    labels = np.argmin(np.abs(X - means), axis=1)
    error = np.max(np.abs(means - [-NAIVE_SEPARATION, NAIVE_SEPARATION])) / NAIVE_SEPARATION
    return separates(labels, y, 2), float(error), event.scale


def naive_rows(sizes, n_runs=NAIVE_RUNS, verbose=True):
    """One row per sample size: successes of ``n_runs`` naive runs (one from
    :data:`NAIVE_ONE_RUN_FROM` samples on) and the wall time per run."""
    rows = []
    for n_samples in sizes:
        runs = n_runs if n_samples < NAIVE_ONE_RUN_FROM else 1
        began = time.perf_counter()
        results = [naive_run(n_samples, run) for run in range(runs)]
        seconds = (time.perf_counter() - began) / runs
        rows.append({"n_samples": n_samples, "separated": sum(r[0] for r in results),
                     "successes": sum(r[0] and r[1] < 0.5 for r in results), "runs": runs,
                     "median_mean_error_R": float(np.median([r[1] for r in results])),
                     "sigma": round(results[0][2], 1), "seconds_per_run": round(seconds, 1)})
        write_csv("ktuple_paper_naive", rows)  # after every size: a cut run keeps its rows
        if verbose:
            print(f"  naive n={n_samples:.0e}: {rows[-1]['successes']}/{runs} "
                  f"(mean error {rows[-1]['median_mean_error_R']:.2f} R; {seconds:.1f} s/run)",
                  flush=True)
    return rows


# Output ---------------------------------------------------------------------------


_NAMES = {"noisy_centers": "NoisyCenters", "averages": "Averages"}
#: The figure of each test: its abscissa (a summary column) and the plot's file name.
_FIGURES = {"Test1": ("R", "ktuple_paper"), "Test2": ("k", "ktuple_paper_test2"),
            "Test3": ("d", "ktuple_paper_test3")}


def _label(setting):
    varying = {"Test1": f"R={setting.separation:g}", "Test2": f"k={setting.n_clusters}",
               "Test3": f"d={setting.n_features}"}[setting.test]
    suffix = " averages" if setting.method == "averages" else ""
    return f"{setting.test} {varying} {setting.mode}{suffix}"


def _spec_totals(rows):
    """Spec §10.3's predictions as samples per run, at the R of the Test1 ``rows``."""
    spec = []
    for row in rows:
        low, high = row["spec_low"], row["spec_high"]
        if low == "" or row["mode"] != "paper":
            continue
        per_tuple = AVERAGES_ROWS_PER_CLUSTER * row["k"] if row["method"] == "averages" else (
            min_tuples(EPSILON, DELTA, BETA, "paper"))
        spec.append({"R": row["R"], "total_95": math.sqrt(low * high) * per_tuple,
                     "curve": f"spec §10.3 {_NAMES[row['method']]} (paper formulas)"})
    return spec


def plot(summary, grid_rows):
    """Write the PNG files described in the module docstring.

    One per figure of the paper (Figures 5-7: both algorithms' samples per
    run against R, k or d) and two success-rate plots.
    """
    for test, (x, name) in _FIGURES.items():
        rows = [{**row, "curve": f"{_NAMES[row['method']]} {row['mode']}"}
                for row in summary if row["test"] == test and row["total_95"] != ""]
        if test == "Test1":
            rows += _spec_totals(rows)
        if rows:
            plot_lines(name, rows, x=x, y="total_95", group="curve", xlabel=x,
                       ylabel="samples per run at size_95 (all runs successful)",
                       title=f"{test} (paper Figure {4 + int(test[-1])}): both algorithms",
                       logx=test == "Test1", logy=True)
    rates = {"ktuple_paper_rates": ("Test1", "noisy_centers"),
             "ktuple_paper_averages": (None, "averages")}
    for name, (test, method) in rates.items():
        rows = [row for row in grid_rows
                if row["method"] == method and test in (None, row["test"])]
        if rows:
            plot_lines(name, rows, x="size", y="rate", group="setting",
                       xlabel=rows[0]["searched"], ylabel="success rate",
                       title=f"{_NAMES[method]}: success rate along the search grid", logx=True)


def _runs(setting, quick, n_runs):
    """Runs per grid point of ``setting`` (see :data:`FULL_RUNS`); ``n_runs`` overrides."""
    if setting.method == "averages":
        return min(n_runs or AVERAGES_RUNS, AVERAGES_RUNS)
    if n_runs:
        return n_runs
    if quick:
        return 10
    return FULL_RUNS_R32 if setting.separation <= 32 else FULL_RUNS


def _parse(value):
    """A CSV cell back as an int, a float or the string."""
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def _identity(row):
    """The setting of a summary or grid row: test, method, mode, k, d and R."""
    return (row["test"], row["method"], row["mode"], int(row["k"]), int(row["d"]),
            round(float(row["R"]), 2))


def merge_results(name, rows, keep_old):
    """``rows`` plus, if ``keep_old``, the rows of ``results/<name>.csv`` of the settings
    ``rows`` do not cover.

    ``keep_old=False`` (everything was run) keeps no old row. So
    ``--tests Test1 --values 32`` refreshes Test1's rows at R = 32 and leaves
    the others as committed.
    """
    path = result_path(name, "csv")
    if not keep_old or not path.exists():
        return rows
    new = {_identity(row) for row in rows}
    with path.open(newline="") as handle:
        old = [{key: _parse(value) for key, value in row.items()} for row in csv.DictReader(handle)]
    return [row for row in old if _identity(row) not in new] + rows


def _grid_table(setting, grid):
    return [{"setting": _label(setting), "test": setting.test, "method": setting.method,
             "mode": setting.mode, "k": setting.n_clusters, "d": setting.n_features,
             "R": round(setting.separation, 2), "searched": setting.searched,
             "size": row["size"], "successes": row["successes"], "runs": row["runs"],
             "test_passed": row["test_passed"], "rate": row["successes"] / row["runs"],
             "seconds": round(row["seconds"], 1)}
            for row in grid]


def _write_results(summary, grid_rows, keep_old):
    summary = merge_results("ktuple_paper", summary, keep_old)
    grid_rows = merge_results("ktuple_paper_grid", grid_rows, keep_old)
    write_csv("ktuple_paper", summary)
    if grid_rows:
        write_csv("ktuple_paper_grid", grid_rows)
    plot(summary, grid_rows)


@writes_results
def run(quick, n_runs=None, tests=None, methods=None, modes=None, values=None):
    """Run the protocol; write the CSV and PNG files; return the summary rows.

    ``tests`` (names of :data:`TESTS`), ``methods``, ``modes`` and ``values``
    (see :func:`selected`) run only the settings they all allow and keep the
    committed rows of the others; the naive baseline runs with no filter or
    with ``"Naive"`` in ``tests``.
    """
    filters = (tests, methods, modes, values)
    keep_old = any(chosen is not None for chosen in filters)
    summary, grid_rows = [], []
    for setting in settings(quick):
        if not selected(setting, *filters):
            continue
        runs = _runs(setting, quick, n_runs)
        grid = search(setting, runs)
        floor = (failure_floor(setting.mode, FLOOR_RUNS)
                 if setting.method == "noisy_centers" else "")
        summary.append(summarize(setting, grid, runs, floor))
        grid_rows += _grid_table(setting, grid)
        _write_results(summary, grid_rows, keep_old)  # after every setting: a cut run keeps them
    if not keep_old or "Naive" in (tests or ()):
        print_table(naive_rows(NAIVE_SIZES[quick]))
    columns = ["test", "method", "mode", "k", "d", "R", "n_tuples", "searched", "size_95",
               "size_50", "total_95", "spec_low", "spec_high", "allowed_bad", "noise_to_gap",
               "test_floor"]
    print_table(summary, columns)
    return [{column: row[column] for column in columns} for row in summary]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", action="store_true", help="Test1-3 and Averages (hours)")
    parser.add_argument("--quick", dest="full", action="store_false",
                        help="Test1 at R in {128, 512} (the default)")
    parser.add_argument("--runs", type=int, help="runs per grid point (default 10; --full: "
                        "5 at R = 32, at most 3 for Averages)")
    parser.add_argument("--tests", nargs="+", choices=TESTS,
                        help="run only these experiments (the other rows stay as committed)")
    parser.add_argument("--methods", nargs="+", choices=list(_NAMES),
                        help="run only these algorithms (the other rows stay as committed)")
    parser.add_argument("--modes", nargs="+", choices=list(MODES),
                        help="run only these privacy modes (the other rows stay as committed)")
    parser.add_argument("--values", nargs="+", type=float,
                        help="run only these abscissae: R (Test1), k (Test2), d (Test3)")
    args = parser.parse_args(argv)
    run(quick=not args.full, n_runs=args.runs, tests=args.tests, methods=args.methods,
        modes=args.modes, values=args.values)


if __name__ == "__main__":
    main()
