r"""Private clustering in high dimensions (Balcan, Dick, Liang, Mou & Zhang, ICML 2017).

:class:`PrivateHighDimKMeans` and :class:`PrivateHighDimKMedian` implement
Algorithm 4 of the paper (``spec/balcan_highdim.md``) with the spec's
corrections: a Gaussian random projection to :math:`p = O(\log n)`
dimensions, private candidate centres from randomly shifted recursive cube
partitions (Algorithms 1-2), private local search by swaps (Algorithm 3),
and private recovery of the centres in the original space by noisy means
(or Algorithm 5 for s-sparse data), followed by noisy Lloyd steps. The fit
is pure epsilon-DP by default and needs no separation: it is the library's
general-purpose method for data that is not an easy instance.

:func:`highdim_fallback_centers` runs the same pipeline as a function, and
:class:`HighDimInitializer` wraps it in the initializer protocol of
:mod:`skdpcluster.cluster._stable_init`, so that the stable estimators can
spend a remaining budget on it after a failed easy-instance test.
"""

import math
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from numbers import Integral, Real

import numpy as np
from sklearn.utils.validation import check_array

from skdpcluster.averaging import _project_onto_ball, private_count
from skdpcluster.averaging._common import project_into_ball, rows_outside_ball
from skdpcluster.cluster._base import PrivateFit, PrivateFitPlan, _BasePrivateClusterer
from skdpcluster.cluster._federated_init import clip_rows
from skdpcluster.cluster._highdim_candidates import (
    DistanceRows,
    cap_candidates,
    initial_slots,
    private_candidates,
    private_local_swap,
    projected_rows,
    projection_matrix,
    swap_sample,
)
from skdpcluster.cluster._highdim_recovery import (
    CELL_FACTOR,
    noisy_means_of_sums,
    one_median_clusters,
    sparse_means_of_sums,
    sparsify_rows,
)
from skdpcluster.cluster._one_cluster import fit_one_cluster, plan_one_cluster
from skdpcluster.cluster._stable_init import cell_sums, nearest_centers, nearest_costs
from skdpcluster.mechanisms import exponential_mechanism
from skdpcluster.utils import check_random_state
from skdpcluster.utils._compat import Interval, StrOptions, single_threaded
from skdpcluster.utils._docstrings import shared_params
from skdpcluster.utils._progress import phase

__all__ = [
    "HighDimBudget",
    "HighDimInitializer",
    "PrivateHighDimKMeans",
    "PrivateHighDimKMedian",
    "highdim_fallback_centers",
]

#: Budget parts are shaved by this factor so that float rounding of the split
#: never makes the sum exceed the request.
_SAFETY = 1.0 - 1e-12
_SPLIT_KEYS = ("count", "candidates", "swap", "means", "select")
#: Default budget fractions of epsilon (totals over all trials; spec §5.2).
_PRACTICAL_SPLIT = {"count": 0.01, "candidates": 0.29, "swap": 0.2, "means": 0.5}
_PRACTICAL_SELECT = 0.1
#: The paper's Algorithm 4: eps/(6T) candidates, eps/(6T) localswap, eps/(24T) count and
#: eps/(24T) sum per trial, eps/3 for the final selection (3 eps / 4 in all), plus our
#: row count.
_PAPER_SPLIT = {"count": 0.01, "candidates": 1 / 6, "swap": 1 / 6, "means": 1 / 12, "select": 1 / 3}


# ---------------------------------------------------------------------------
# Budget
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class HighDimBudget:
    """The named budget of one fit (never a positional tuple; STYLE.md §6, anti-pattern A).

    Attributes
    ----------
    count : float
        Epsilon of the noisy number of rows (it sets the public-looking
        hyperparameters p, depth and gamma, so the exact n is never used).
    candidates, swap : float
        Epsilon of Algorithm 2 and of Algorithm 3 in **each** trial.
    mean_step, mean_step_delta : float
        (epsilon, delta) of **each** noisy-mean step (recovery and every
        refinement step); delta is 0 unless a Gaussian or 1-median step is used.
    select : float
        Epsilon of the final choice between trials (0 with one trial).
    n_trials, n_mean_steps : int
        Trials of Algorithm 4, and noisy-mean steps per trial (1 + refinements).
    """

    count: float
    candidates: float
    swap: float
    mean_step: float
    mean_step_delta: float
    select: float
    n_trials: int
    n_mean_steps: int

    @classmethod
    def from_fractions(cls, fractions, epsilon, delta, n_trials, n_mean_steps):
        """Split ``epsilon`` by ``fractions`` (totals over trials), ``delta`` over mean steps."""
        eps = {key: _SAFETY * fractions.get(key, 0.0) * epsilon for key in _SPLIT_KEYS}
        steps = n_trials * n_mean_steps
        return cls(eps["count"], eps["candidates"] / n_trials, eps["swap"] / n_trials,
                   eps["means"] / steps, _SAFETY * delta / steps, eps["select"], n_trials,
                   n_mean_steps)

    def cost(self):
        """``(epsilon, delta)`` of the whole fit by basic composition."""
        per_trial = self.candidates + self.swap + self.n_mean_steps * self.mean_step
        epsilon = math.fsum([self.count, self.select, self.n_trials * per_trial])
        return epsilon, self.n_trials * self.n_mean_steps * self.mean_step_delta

    def as_dict(self):
        return asdict(self)


@dataclass(frozen=True)
class HighDimSettings:
    """Hyperparameters of one fit, resolved from the noisy row count (private, post-processing)."""

    proj_dim: int
    proj_radius: float
    n_shifts: int
    n_levels: int
    level_epsilon: float
    gamma: float
    n_swap_iter: int
    max_candidates: int | None
    init: str
    n_samples: float


def _log2_ceil(value):
    return max(1, math.ceil(math.log2(value)))


#: The "auto" values of each profile, as functions of (k, n, d, beta); n is the noisy count.
_PROFILE_RULES = {
    "practical": {
        "proj_dim": lambda k, n, d, beta: min(d, max(2, math.floor(math.log(n) / 2))),
        "n_shifts": lambda k, n, d, beta: 3,
        "max_depth": lambda k, n, d, beta: min(6, _log2_ceil(n)),
        "n_swap_iter": lambda k, n, d, beta: 3,
        "max_candidates": lambda k, n, d, beta: min(2000, math.ceil(50 * k * math.log(n))),
        "init": "noisy_counts",
        "n_trials": lambda beta: 1,
        "n_refine_iter": 1,
    },
    "paper": {
        "proj_dim": lambda k, n, d, beta: math.ceil(8 * math.log(n)),
        "n_shifts": lambda k, n, d, beta: math.ceil(27 * k * math.log(n / beta)),
        "max_depth": lambda k, n, d, beta: max(1, math.floor(math.log2(n))),
        "n_swap_iter": lambda k, n, d, beta: math.ceil(100 * k * math.log(n / beta)),
        "max_candidates": lambda k, n, d, beta: None,
        "init": "uniform",
        "n_trials": lambda beta: math.ceil(2 * math.log(1 / beta)),
        "n_refine_iter": 0,
    },
}


def _level_epsilon_and_gamma(profile, eps_candidates, n_shifts, n_levels, p, n, beta, factor):
    r"""Per-level epsilon and the activation threshold gamma (spec §2.1, §5.2).

    * practical: :math:`\varepsilon_1 = \varepsilon_{cand}/(RL)` and
      :math:`\gamma = b\ln(2^{p-1} n L R/\beta)` with :math:`b = \Delta/\varepsilon_1`,
      so that the expected number of activated empty cubes is at most
      :math:`\beta` (union bound over :math:`L R n 2^p` children);
    * paper: :math:`\varepsilon_1 = \varepsilon_{cand}/(2R\log_2 n)` and
      :math:`\gamma = 20\,b\ln(nR/\beta)` (Algorithms 1-2, with the paper's
      :math:`\delta/T` read as :math:`\beta/R`); a user ``max_depth`` above
      :math:`2\log_2 n` divides by :math:`RL` instead, so that the R L levels
      never cost more than :math:`\varepsilon_{cand}`.
    """
    if profile == "paper":
        level_epsilon = eps_candidates / (n_shifts * max(2.0 * math.log2(n), n_levels, 1.0))
        return level_epsilon, 20.0 * factor / level_epsilon * math.log(n * n_shifts / beta)
    level_epsilon = eps_candidates / (n_shifts * n_levels)
    log_children = (p - 1) * math.log(2.0) + math.log(n * n_levels * n_shifts / beta)
    return level_epsilon, factor / level_epsilon * log_children


# ---------------------------------------------------------------------------
# The estimators
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _Data:
    """Rows in memory, centred at ``data_center`` and made to satisfy the public bounds.

    The passes of a trial are its methods; ``ChunkedData``
    (:mod:`~skdpcluster.cluster._highdim_chunked`) makes them map-reduces
    over Dask chunks.

    ``row_map`` is the per-row map onto the bounds of the raw rows ``raw``; the mapped copy
    :attr:`X` is made on first use, after the first trial's partition
    (which projects the raw rows block by block), so the two are never
    stored together at that partition's memory peak. When the map changes no
    row (:func:`_same_rows`), :attr:`X` is ``raw`` itself: ``raw`` must then
    not change while the fit runs.
    """

    raw: np.ndarray
    row_map: object
    radius: float

    @cached_property
    def X(self):
        """The mapped rows (one copy of the data)."""
        return self.row_map(self.raw)

    @cached_property
    def sq_norms(self):
        """Squared row norms, computed on first use (after the first trial's partition peak)."""
        return np.einsum("ij,ij->i", self.X, self.X)

    @property
    def n_features(self):
        return self.raw.shape[1]

    def project(self, matrix, clip_radius):
        """The projected rows (:func:`projected_rows`, the row map applied block by block)."""
        return projected_rows(self.raw, matrix, clip_radius, row_map=self.row_map,
                              row_radius=self.radius)

    @staticmethod
    def swap_rows(Y, centers, power, n_noisy, rng):
        """Distances of the swap sample to ``centers``, and the partition by chosen slots."""
        distances = DistanceRows(Y, centers, power)
        return swap_sample(distances, n_noisy, rng), distances.nearest

    def cluster_sums(self, labels, n_clusters):
        return cell_sums(self.X, labels, n_clusters)

    def nearest_labels(self, centers):
        return nearest_centers(self.X, centers, self.sq_norms)[0]

    def costs(self, center_sets, power):
        r""":math:`\sum_i \min_j \|x_i - z_j\|^q` of every set of centres."""
        return [float(np.sum(nearest_costs(self.X, centers, power,
                                           nearest_centers(self.X, centers, self.sq_norms))))
                for centers in center_sets]

    def training_labels(self, centers):
        """The nearest of ``centers`` for every raw row (``labels_``)."""
        return nearest_centers(self.raw, centers)[0]


class _ClipRows:
    """Per-row map: rows centred at ``center`` and projected onto B(0, ``radius``) (picklable)."""

    def __init__(self, center, radius):
        self.center, self.radius = center, radius

    def __call__(self, rows):
        return clip_rows(rows, self.center, self.radius)  # one copy of the rows, clipped in place

    def changes_nothing(self, rows):
        """Whether :meth:`__call__` gives ``rows`` back bit for bit.

        It does when the centre is the origin (:math:`x - 0 = x`) and
        :func:`clip_rows` leaves every row (the test of
        :func:`~skdpcluster.averaging._common.rows_outside_ball`).
        """
        if np.any(self.center) or rows.dtype != np.float64 or not rows.flags.c_contiguous:
            return False
        return not len(rows_outside_ball(rows, np.einsum("ij,ij->i", rows, rows), self.radius))


def _same_rows(rows):
    """The per-row map of rows that already satisfy the bounds: the rows themselves (no copy)."""
    return rows


class _SparseRows:
    """Per-row map onto the sparse model (Algorithm 5), then onto B(0, ``radius``) (picklable)."""

    def __init__(self, center, sparsity, coord_bound, radius):
        self.center, self.sparsity, self.coord_bound, self.radius = (
            center, sparsity, coord_bound, radius)

    def __call__(self, rows):
        rows = sparsify_rows(rows - self.center, self.sparsity, self.coord_bound)  # a new array
        project_into_ball(rows, self.radius)  # exact norms <= radius
        return rows


def _store_parameters(estimator, parameters):
    """``__init__`` stores its parameters unchanged (scikit-learn's convention), nothing else."""
    for name, value in parameters.items():
        if name not in ("self", "__class__"):
            setattr(estimator, name, value)


def _canonical(centers):
    """Rows in lexicographic order (DESIGN.md, privacy rule 2)."""
    return centers[np.lexsort(centers.T[::-1])]


class _PrivateHighDimBase(_BasePrivateClusterer):
    """Plan, trials and selection shared by the k-means and k-median estimators.

    Subclasses set ``_POWER`` (2: k-means, 1: k-median) and ``_RECOVERIES``.
    """

    _parameter_constraints: dict = {
        **{name: rule for name, rule in _BasePrivateClusterer._parameter_constraints.items()
           if name != "on_failure"},
        # delta = 0 is allowed: the default fit (Laplace sums) is pure epsilon-DP.
        "delta": [Interval(Real, 0, 1, closed="left")],
        "beta": [Interval(Real, 0, 1, closed="neither")],
        "profile": [StrOptions({"practical", "paper"})],
        "proj_dim": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "proj_clip_factor": [Interval(Real, 0, None, closed="neither")],
        "n_shifts": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "max_depth": [StrOptions({"auto"}), Interval(Integral, 1, 62, closed="both")],
        "gamma": [StrOptions({"auto"}), Interval(Real, 0, None, closed="neither")],
        "max_candidates": [StrOptions({"auto"}), None, Interval(Integral, 1, None, closed="left")],
        "init": [StrOptions({"auto", "uniform", "noisy_counts"})],
        "n_swap_iter": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "n_trials": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "n_refine_iter": [StrOptions({"auto"}), Interval(Integral, 0, None, closed="left")],
        "budget_split": [None, dict],
        "sum_mechanism": [StrOptions({"laplace", "gaussian"})],
        "neighbouring": [StrOptions({"replace_one", "add_remove"})],
    }
    _POWER = 2
    _RECOVERIES = ("mean",)
    _FITTED_ATTRIBUTES = _BasePrivateClusterer._FITTED_ATTRIBUTES + (
        "budget_", "candidate_depth_", "n_candidates_", "n_samples_noisy_", "projection_dim_",
        "selected_trial_", "settings_")
    #: Dask input: every pass is a map-reduce (:mod:`~skdpcluster.cluster._highdim_chunked`).
    _CHUNKED_INPUT = True

    def _check_n_clusters(self):
        """k = 1 is allowed: a private mean (or 1-median), see :meth:`_plan_one_cluster`."""

    def _plan_one_cluster(self, X):
        """``n_clusters=1``: the private mean (k-median: 1-median) on the whole budget, or ``None``.

        ``None`` (Algorithm 4 with one centre) for ``recovery="sparse"``, whose
        bound is the sparse one. :mod:`~skdpcluster.cluster._one_cluster` spends
        delta: ``delta=0`` is refused there, before any randomness.
        """
        if self.n_clusters != 1 or self.recovery == "sparse":
            return None
        attributes = {"n_samples_noisy_": None, "settings_": None, "projection_dim_": None,
                      "n_candidates_": [], "candidate_depth_": [], "selected_trial_": None,
                      "budget_": None}
        return plan_one_cluster(self, X, "mean" if self._POWER == 2 else "median", attributes)

    # -- public plan ----------------------------------------------------------------
    def _auto(self, name):
        """The parameter's value, or the profile's rule for it when ``"auto"``."""
        value = getattr(self, name)
        if isinstance(value, str) and value == "auto":
            return _PROFILE_RULES[self.profile][name]
        return value

    def _n_trials(self):
        value = self._auto("n_trials")
        return value(self.beta) if callable(value) else value

    def _fractions(self, n_trials):
        """Validated budget fractions (of epsilon, totals over trials)."""
        if self.budget_split is not None:
            return _check_split(self.budget_split, n_trials)
        if self.profile == "paper":
            return dict(_PAPER_SPLIT) if n_trials > 1 else {**_PAPER_SPLIT, "select": 0.0}
        if n_trials == 1:
            return dict(_PRACTICAL_SPLIT)
        scaled = {key: (1.0 - _PRACTICAL_SELECT) * value for key, value in _PRACTICAL_SPLIT.items()}
        return {**scaled, "select": _PRACTICAL_SELECT}

    def _uses_delta(self):
        return self.sum_mechanism == "gaussian" or self.recovery == "one_median"

    def _bounds_delta(self):
        """Delta for the private bound only if the fit spends delta: the default stays pure DP."""
        return self.delta if self._uses_delta() or self.n_clusters == 1 else 0.0

    def _check_options(self, n_features):
        """Combinations of parameters that the constraints cannot express."""
        if self.delta == 0 and self._uses_delta():
            raise ValueError(
                f"delta=0: sum_mechanism={self.sum_mechanism!r} with recovery={self.recovery!r} "
                "spends delta; pass delta > 0, or use sum_mechanism='laplace' with "
                "recovery='mean' for a pure epsilon-DP fit."
            )
        if self.recovery not in self._RECOVERIES:
            raise ValueError(f"recovery must be one of {self._RECOVERIES} for "
                             f"{type(self).__name__}, got recovery={self.recovery!r}.")
        if self.recovery == "sparse":
            _check_sparse_options(self.sparsity, self.coord_bound, self.sparse_eta, n_features)
        if self.recovery in ("sparse", "one_median") and self.sum_mechanism != "laplace":
            raise ValueError(f"sum_mechanism={self.sum_mechanism!r} applies to recovery='mean' "
                             f"only, got recovery={self.recovery!r}.")

    def _check_chunked_options(self):
        """The options that read the rows in memory, refused on Dask input before any randomness."""
        name = type(self).__name__
        if self.recovery == "one_median":
            raise ValueError(
                f"{name}: recovery='one_median' does not run on Dask input (its gradient descent "
                "reads the rows in memory); use recovery='mean', or pass X.compute() if it fits "
                "in memory.")
        if self.n_clusters == 1 and self._POWER == 2 and self.recovery != "sparse":
            raise ValueError(
                f"{name}(n_clusters=1) releases a private mean that needs the rows in memory; on "
                "Dask input use n_clusters >= 2, PrivateStableKMeans(n_clusters=1), or pass "
                "X.compute() if it fits in memory.")

    def _plan(self, X):
        n_features = X.shape[1]
        self._check_options(n_features)
        if hasattr(X, "map_reduce"):
            self._check_chunked_options()
        one_cluster = self._plan_one_cluster(X)
        if one_cluster is not None:
            return one_cluster
        n_trials = self._n_trials()
        n_mean_steps = 1 + self._auto("n_refine_iter")
        budget = HighDimBudget.from_fractions(
            self._fractions(n_trials), self.epsilon, self.delta if self._uses_delta() else 0.0,
            n_trials, n_mean_steps)
        center = self._resolve_center(n_features)
        radius, unproven = self._resolve_bounds(X, center)
        if not self.proj_clip_factor * radius >= self._MIN_DATA_RADIUS:
            # The projected ball's squared scores and clipped rows underflow (review R11 L3: a
            # zero sensitivity or NaN rows inside the private step, a charged failure).
            raise ValueError(
                f"proj_clip_factor={self.proj_clip_factor!r} times the data bound "
                f"{float(radius):.3g} is below 2**-500: the projected rows' ball underflows. Use a "
                "proj_clip_factor near 1 (a theory-safe one is about 1 to 3).")
        plan = PrivateFitPlan(budget.cost(), {"center": center, "radius": radius, "budget": budget},
                              {"data_radius_": radius, "budget_": budget.as_dict()}, unproven)
        if self.verbose:
            print(f"[{type(self).__name__}] plan: budget={budget}")
        return plan

    def _max_data_radius(self):
        r"""The local search stores the points in float32: :math:`2\Lambda_p` must fit (any n).

        The distances and their sums are float64 (:math:`(2\Lambda_p)^2 n`
        stays finite below the shared :math:`10^{100}`); the limit does not
        depend on the number of rows, which is private under add/remove.
        """
        float32_max = float(np.finfo(np.float32).max)
        return min(self._MAX_DATA_RADIUS, float32_max / (4.0 * self.proj_clip_factor))

    def _needs_radius(self, data):
        """Sparse recovery takes its bound from ``coord_bound`` (no private bound is needed)."""
        return self.recovery != "sparse"

    def _resolve_bounds(self, X, center):
        r"""L2 radius :math:`\Lambda`; sparse: :math:`\min(\Lambda, \sqrt s\,\Lambda_\infty)`.

        Returns the radius and the plan's ``unproven`` dict (see ``_resolve_radius``).
        Sparse recovery without ``data_radius`` uses :math:`\sqrt s\,\Lambda_\infty`;
        ``"data"`` takes the exact bound as the other recoveries do (review R7, L2:
        it failed on ``float("data")``).
        """
        if self.recovery != "sparse":
            return self._resolve_radius(X, center)
        sparse_radius = math.sqrt(self.sparsity) * float(self.coord_bound)
        if self.data_radius is None:
            return self._checked_radius(sparse_radius), {}
        radius, unproven = self._resolve_radius(X, center)
        return self._checked_radius(min(sparse_radius, radius)), unproven

    # -- private part -------------------------------------------------------------------
    def _prepare(self, X, center, radius):
        """The rows with their per-row map: in memory (:class:`_Data`) or chunked (Dask)."""
        if self.recovery == "sparse":
            row_map = _SparseRows(center, self.sparsity, float(self.coord_bound), radius)
        else:
            row_map = _ClipRows(center, radius)
            if not hasattr(X, "map_reduce") and row_map.changes_nothing(X):
                row_map = _same_rows  # a copy of the data less (issue #17)
        if hasattr(X, "map_reduce"):
            from skdpcluster.cluster._highdim_chunked import ChunkedData

            return ChunkedData(X, row_map, radius)
        return _Data(X, row_map, radius)

    def _fit_private(self, X, plan, rng):
        # Every product is a block of a few thousand rows times p, k or d columns: one BLAS
        # thread is 4-15x faster than two on a loaded 2-core machine (measured), and the
        # values do not depend on the number of threads.
        with single_threaded():
            return self._fit_private_one_thread(X, plan, rng)

    def _fit_private_one_thread(self, X, plan, rng):
        if "one_cluster" in plan.values:
            return fit_one_cluster(self, X, plan, rng)
        center, budget = plan.values["center"], plan.values["budget"]
        data = self._prepare(X, center, plan.values["radius"])
        count_rng, select_rng, *trial_rngs = rng.spawn(2 + budget.n_trials)
        n_noisy, count_event = private_count(X.shape[0], epsilon=budget.count, rng=count_rng)
        settings = self._settings(max(n_noisy, 2.0), X.shape[1], data.radius, budget)
        phase("trials (candidates, local swap, recovery, refinement)", trials=budget.n_trials)
        trials = [self._trial(data, settings, budget, trial_rng) for trial_rng in trial_rngs]
        phase("selection")
        chosen, select_events = self._select_trial(data, trials, budget.select, select_rng)
        events = [count_event.with_label("highdim/n_samples")]
        for trial in trials:
            events += trial["events"]
        centers = _canonical(trials[chosen]["centers"] + center)
        attributes = {
            "labels_": data.training_labels(centers),
            "n_samples_noisy_": float(n_noisy),
            "settings_": self._public_settings(settings, plan),
            "projection_dim_": settings.proj_dim,
            "n_candidates_": [trial["n_candidates"] for trial in trials],
            "candidate_depth_": [trial["max_depth"] for trial in trials],
            "selected_trial_": chosen,
        }
        return PrivateFit(centers, True, events + select_events, attributes=attributes)

    @staticmethod
    def _public_settings(settings, plan):
        """``settings_``: the projection radius is hidden (nan) when the radius came from the data."""
        public = asdict(settings)
        if "data_radius_" in plan.unproven:
            public["proj_radius"] = math.nan
        return public

    def _settings(self, n, n_features, radius, budget):
        """Hyperparameters from the noisy count ``n`` and the profile (spec §5.2)."""
        k, beta = self.n_clusters, self.beta
        values = {name: (rule(k, n, n_features, beta) if callable(rule) else rule)
                  for name in ("proj_dim", "n_shifts", "max_depth", "n_swap_iter", "max_candidates",
                               "init") for rule in [self._auto(name)]}
        p = min(values["proj_dim"], n_features)
        level_epsilon, gamma = _level_epsilon_and_gamma(
            self.profile, budget.candidates, values["n_shifts"], values["max_depth"], p, n, beta,
            CELL_FACTOR[self.neighbouring])
        return HighDimSettings(
            p, self.proj_clip_factor * radius, values["n_shifts"], values["max_depth"],
            level_epsilon, gamma if self.gamma == "auto" else float(self.gamma),
            values["n_swap_iter"], values["max_candidates"], values["init"], n)

    def _trial(self, data, settings, budget, rng):
        """One trial of Algorithm 4: project, candidates, local swap, recovery and refinement."""
        project_rng, candidate_rng, swap_rng, mean_rng, sample_rng = rng.spawn(5)
        labels, events, info = self._partition(
            data, settings, budget, (project_rng, candidate_rng, swap_rng, sample_rng))
        centers, mean_events = self._recover_and_refine(
            data, labels, _reclaim(budget, events["candidates"]), mean_rng)
        return {"centers": centers,
                "events": events["candidates"] + events["swap"] + mean_events, **info}

    def _partition(self, data, settings, budget, rngs):
        """The trial's partition of the rows: projection, candidates and local swap (Algs. 1-3).

        ``rngs``: the generators of the projection, the candidates, the swaps
        and the swap sample. The projected rows and their distances to the
        candidates live in this call only, so they are freed before the
        recovery passes over ``data``.
        """
        project_rng, candidate_rng, swap_rng, sample_rng = rngs
        Y = data.project(projection_matrix(data.n_features, settings.proj_dim, project_rng),
                         settings.proj_radius)
        candidates, events, info = private_candidates(
            Y, radius=settings.proj_radius, n_shifts=settings.n_shifts,
            n_levels=settings.n_levels, level_epsilon=settings.level_epsilon,
            gamma=settings.gamma, count_sensitivity=CELL_FACTOR[self.neighbouring],
            root_weight=settings.n_samples, neighbouring=self.neighbouring,
            rng=candidate_rng)
        candidates = cap_candidates(candidates, settings.max_candidates, self.n_clusters + 1,
                                    settings.proj_radius, candidate_rng)
        candidates, start = initial_slots(candidates, self.n_clusters, settings.init, swap_rng)
        sample, partition = data.swap_rows(Y, candidates.centers, self._POWER,
                                           settings.n_samples, sample_rng)
        del Y  # the distances' float32 points replace it: one fewer n x p array at the peak
        slots, swap_events, _ = private_local_swap(
            sample, start, n_iter=settings.n_swap_iter, epsilon=budget.swap,
            sensitivity=(2.0 * settings.proj_radius) ** self._POWER,
            neighbouring=self.neighbouring, rng=swap_rng)
        return (partition(slots), {"candidates": events, "swap": swap_events},
                {"n_candidates": len(candidates.centers), "max_depth": info["max_depth"]})

    def _recover(self, data, labels, budget, rng, label):
        common = {"epsilon": budget.mean_step, "neighbouring": self.neighbouring, "rng": rng,
                  "label": label}
        if self.recovery == "one_median":  # in memory only (refused on Dask by _plan)
            return one_median_clusters(data.X, labels, self.n_clusters,
                                       delta=budget.mean_step_delta, radius=data.radius, **common)
        sums, counts = data.cluster_sums(labels, self.n_clusters)
        if self.recovery == "sparse":
            return sparse_means_of_sums(
                sums, counts, coord_bound=float(self.coord_bound), sparsity=self.sparsity,
                eta=self.sparse_eta, **common)
        return noisy_means_of_sums(sums, counts, delta=budget.mean_step_delta, radius=data.radius,
                                   mechanism=self.sum_mechanism, **common)

    def _recover_and_refine(self, data, labels, budget, rng):
        r"""Recovery on the projected-space partition, then noisy Lloyd (SuLQ) steps in R^d.

        The recovered centres are shrunk towards the ball's centre by
        :meth:`NoisyMeans.shrunk`; a refined centre replaces the previous one
        only where its noisy count makes the expected noise displacement at
        most half the radius. Both are post-processing; every centre is
        projected onto :math:`B(0, \Lambda)`.
        """
        result = self._recover(data, labels, budget, rng, "highdim/recovery")
        centers, events = result.shrunk(data.radius), list(result.events)
        for step in range(budget.n_mean_steps - 1):
            labels = data.nearest_labels(centers)
            result = self._recover(data, labels, budget, rng, f"highdim/refine_{step + 1}")
            centers = np.where(result.accepted(data.radius)[:, None], result.centers, centers)
            events += result.events
        return _project_onto_ball(centers, 0.0, data.radius), events

    def _select_trial(self, data, trials, epsilon, rng):
        r"""Final choice between trials: exponential mechanism on :math:`-L(Z^{(t)})` in R^d.

        Rows and centres lie in :math:`B(0, \Lambda)`, so the loss has
        sensitivity :math:`(2\Lambda)^q` (:math:`4\Lambda^2` for k-means,
        :math:`2\Lambda` for k-median; spec A4).
        """
        if len(trials) == 1:
            return 0, []
        losses = data.costs([t["centers"] for t in trials], self._POWER)
        index, event = exponential_mechanism(
            -np.asarray(losses), epsilon=epsilon, sensitivity=(2.0 * data.radius) ** self._POWER,
            rng=rng, label="highdim/select_trial", neighbouring=self.neighbouring)
        return index, [event]


def _reclaim(budget, candidate_events):
    r"""The trial's budget with the candidates' unspent epsilon moved to its mean steps.

    Levels whose parents are all inactive are never run, so the candidates
    may spend less than ``budget.candidates``. The remainder is split evenly
    over the mean steps that follow. The amounts are chosen from earlier
    private outputs and their total is fixed, so pure-DP basic composition
    still bounds the fit (a privacy filter: Rogers, Roth, Ullman & Vadhan
    2016); the ledger records what each release actually spent.
    """
    spent = math.fsum(event.cost()[0] for event in candidate_events)
    unspent = max(0.0, budget.candidates - spent)
    return replace(budget, mean_step=budget.mean_step + unspent / budget.n_mean_steps)


def _check_split(split, n_trials):
    """A user ``budget_split``: known keys, finite fractions >= 0 summing to at most 1."""
    values = list(split.values())
    if set(split) - set(_SPLIT_KEYS) or not all(
            isinstance(v, Real) and math.isfinite(v) and v >= 0 for v in values):
        raise ValueError(f"budget_split must map keys among {list(_SPLIT_KEYS)} to finite "
                         f"fractions >= 0, got {split!r}.")
    if math.fsum(values) > 1.0 + 1e-9:
        raise ValueError(f"budget_split fractions must sum to at most 1, got {math.fsum(values)}.")
    needed = [key for key in ("count", "candidates", "swap", "means") if split.get(key, 0) <= 0]
    if needed:
        raise ValueError(f"budget_split needs fractions > 0 for {needed}, got {split!r}.")
    if (split.get("select", 0) > 0) != (n_trials > 1):
        raise ValueError(f"budget_split 'select' must be > 0 exactly when n_trials > 1 "
                         f"(n_trials={n_trials}), got {split!r}.")
    return {key: float(value) for key, value in split.items()}


def _check_sparse_options(sparsity, coord_bound, eta, n_features):
    if not (isinstance(sparsity, Integral) and 1 <= sparsity <= n_features):
        raise ValueError(f"recovery='sparse' needs an integer sparsity in [1, n_features="
                         f"{n_features}], got sparsity={sparsity!r}.")
    if not (isinstance(coord_bound, Real) and math.isfinite(coord_bound) and coord_bound > 0):
        raise ValueError(f"recovery='sparse' needs a public coord_bound > 0 (the bound on "
                         f"|x_r|), got coord_bound={coord_bound!r}.")
    if not (isinstance(eta, Real) and 0 < eta < 1):
        raise ValueError(f"sparse_eta must lie in (0, 1), got sparse_eta={eta!r}.")


_SHARED_PARAMETERS = r"""
    epsilon : float, default=1.0
        Privacy parameter of the whole fit, > 0. With the default
        ``sum_mechanism="laplace"`` the fit is pure epsilon-DP.
    delta : float, default=1e-6
        In (0, 1). Spent only by ``sum_mechanism="gaussian"`` (or the
        k-median ``recovery="one_median"``), which make the fit
        (epsilon, delta)-DP, and by ``n_clusters=1`` (the private mean or
        1-median of :mod:`skdpcluster.averaging`); otherwise
        ``privacy_spent_["delta"]`` is 0, the private bound of
        ``data_radius=None`` included.
    beta : float, default=0.05
        Failure probability of the utility analysis: the union bound behind
        ``gamma="auto"`` (expected number of activated empty cubes at most
        beta) and, in the paper profile, the number of trials
        :math:`\lceil 2\ln(1/\beta)\rceil` and the log factors. Never
        affects privacy.
    profile : {"practical", "paper"}, default="practical"
        What every ``"auto"`` parameter resolves to (spec §5.2), as
        ``"practical"`` (default) | ``"paper"`` (Algorithms 1-4), with
        :math:`\tilde n` the noisy number of rows:

        * ``proj_dim`` p: :math:`\max(2, \lfloor\ln\tilde n/2\rfloor)` |
          :math:`\lceil 8\ln\tilde n\rceil` (both at most d);
        * ``n_shifts`` R: 3 | :math:`\lceil 27k\ln(\tilde n/\beta)\rceil`;
        * ``max_depth`` L: :math:`\min(6, \lceil\log_2\tilde n\rceil)` |
          :math:`\lfloor\log_2\tilde n\rfloor`;
        * level epsilon :math:`\varepsilon_1`: :math:`\varepsilon_{cand}/(RL)` |
          :math:`\varepsilon_{cand}/(2R\log_2\tilde n)`;
        * ``gamma``: :math:`b\ln(2^{p-1}\tilde nLR/\beta)` (at most beta
          activated empty cubes expected) | :math:`20b\ln(\tilde nR/\beta)`;
        * ``max_candidates``: :math:`\min(2000, \lceil 50k\ln\tilde n\rceil)` |
          no cap;
        * ``init``: ``"noisy_counts"`` | ``"uniform"``;
        * ``n_swap_iter`` T: 3 | :math:`\lceil 100k\ln(\tilde n/\beta)\rceil`;
        * ``n_trials``: 1 | :math:`\lceil 2\ln(1/\beta)\rceil`;
        * ``n_refine_iter``: 1 | 0;
        * budget split (fractions of epsilon): count .01, candidates .29,
          swap .2, means .5 (with several trials: select .1 and the rest
          times .9) | count .01, candidates 1/6, swap 1/6, means 1/12,
          select 1/3 (the paper's 3/4 of epsilon plus the count).

        :math:`b = \Delta/\varepsilon_1` is the Laplace scale of a level
        (:math:`\Delta` = 2 under replace-one, 1 under add/remove). The paper's
        constants are vacuous at realistic sizes (gamma exceeds n, the local
        search is a random walk; spec §2.7): use ``"paper"`` for accounting
        and reproduction only. The practical values are the spec's (after
        the paper's experiments and the authors' code) except three, chosen
        on the 64-Gaussian mixture of ``benchmarks/bench_highdim.py``
        (d = 100, n = 100 000, k in {4, 16, 64}) and on 8 well separated
        Gaussians (d = 100, n = 50 000, k = 8), 3-4 seeds each: T = 3
        instead of :math:`\min(\max(k, 5), 20)` (fewer, stronger rounds:
        as good on the mixture, 2-3x less local-search time), the local
        search's share .2 instead of .1 (on the 8 Gaussians, add/remove,
        median cost 1.25x instead of 2.0x the k-means++ cost; unchanged on
        the mixture at k = 16, within 7 % at k = 64) and the
        ``"noisy_counts"`` start (an extension; 1-2 % better than uniform).
    proj_dim : int or "auto", default="auto"
        Projected dimension p of the Gaussian random projection
        :math:`y = Gx/\sqrt p` (the spec's scaling, A3); ``p >= n_features``
        skips the projection.
    proj_clip_factor : float, default=1.0
        Projected rows are clipped to :math:`B(0, f\Lambda)`. A theory-safe
        choice is :math:`f = \sqrt{(p + 2\sqrt{pt} + 2t)/p}` with
        :math:`t = \ln(n/\beta)` (Laurent-Massart), which clips no row with
        probability :math:`1 - \beta`.
    n_shifts : int or "auto", default="auto"
        Randomly shifted partitions R (Algorithm 2).
    max_depth : int or "auto", default="auto"
        Levels L of noisy decisions of each partition (Algorithm 1).
    gamma : float or "auto", default="auto"
        Activation threshold of a cube: activated iff
        :math:`m + \mathrm{Lap}(b) > \gamma`. Privacy holds for any gamma.
    max_candidates : int, None or "auto", default="auto"
        Cap on the candidates, sampled by noisy count (post-processing);
        ``None`` keeps all of them.
    init : {"auto", "uniform", "noisy_counts"}, default="auto"
        Start of the local search: k i.i.d. uniform candidates (Algorithm 3)
        or k-means++ seeding on the candidates weighted by their noisy
        counts (an extension; post-processing).
    n_swap_iter : int or "auto", default="auto"
        Rounds T of the local search (Algorithm 3).
    n_trials : int or "auto", default="auto"
        Independent trials of Algorithm 4; with more than one, the final
        centres are chosen by an exponential mechanism on their cost.
    n_refine_iter : int or "auto", default="auto"
        Noisy Lloyd (SuLQ) steps after the recovery (the paper's experiments
        use 8, the authors' code 3; one step is the best trade-off at the
        default budget, spec §5.2).
    budget_split : dict, default=None
        Fractions of epsilon (totals over all trials) for the keys
        ``"count"``, ``"candidates"``, ``"swap"``, ``"means"`` (split evenly
        over the 1 + ``n_refine_iter`` mean steps) and ``"select"`` (> 0
        exactly when there are several trials); they must sum to at most 1.
        ``None`` uses the profile's split.
    sum_mechanism : {"laplace", "gaussian"}, default="laplace"
        Noise of the cluster sums in the recovery: pure-DP Laplace with the
        :math:`\sqrt d` the paper misses (fix A5), or the Gaussian mechanism
        (L2 sensitivity, (epsilon, delta)-DP), much better for large d.
    neighbouring : {"replace_one", "add_remove"}, default="replace_one"
        Relation the noise is calibrated to. ``"replace_one"`` doubles the
        sensitivities of the disjoint counts and sums (a replaced row leaves
        one cell and enters another); since the exact number of rows is never
        used (the hyperparameters come from a noisy count and every mean
        divides by a noisy count), the fit is then private under add/remove
        as well. ``"add_remove"`` uses the smaller sensitivities and holds
        under add/remove only.
    data_radius : float, "data" or None, default=None
        Public bound :math:`\Lambda`: rows are projected onto
        :math:`B(\mathrm{data\_center}, \Lambda)` (a per-row map).
        {private_bound}
        The error of the noisy means grows linearly with it: give a tight
        public bound.
        With ``"data"`` the exact bound is used but not stored (``data_radius_``
        and ``settings_["proj_radius"]`` are ``nan``) and ``privacy_spent_["proven"]`` is False.
    data_center : array-like of shape (n_features,), default=None
        Public centre of that ball; ``None`` means the origin.
    {accountant}
    {random_state}
    n_jobs : int, default=None
        Unused: the fit is vectorised NumPy in one process. Present so that
        the estimator can replace the library's other estimators in a
        pipeline or a search.
    {verbose}
"""

_SHARED_ATTRIBUTES = r"""
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        The released centres, rows in lexicographic order. A differentially
        private release.
    labels_ : ndarray of shape (n_samples,)
        Index of the nearest released centre of every training row.
        **Not private**: a function of the training data, outside the DP
        guarantee; release it only if that is acceptable.
    status_ : {"success", "failure"}
        Centres are always released (the method needs no easy instance);
        ``"failure"`` only when the private step failed (a
        :class:`~skdpcluster.exceptions.PrivateStepFailedWarning`; nothing released).
    n_samples_noisy_ : float
        The noisy number of rows :math:`\tilde n` (private) that set the
        hyperparameters.
    settings_ : dict
        The resolved hyperparameters (p, R, L, level epsilon, gamma, T, cap,
        init); functions of :math:`\tilde n`, hence private.
    projection_dim_ : int
        The projected dimension p used.
    n_candidates_ : list of int
        Number of candidates of every trial (private).
    candidate_depth_ : list of int
        Deepest activated cube of every trial (private).
    selected_trial_ : int
        The trial whose centres were released.
    budget_ : dict
        The resolved budget (:class:`HighDimBudget`, public).
    data_radius_ : float
        The L2 bound :math:`\Lambda` used (private when ``data_radius=None``; ``nan`` with ``data_radius="data"``).
    {data_center_}
    privacy_spent_ : dict
        ``{"epsilon", "delta", "proven"}`` charged to the accountant, never
        more than requested; ``delta`` is 0 in the pure-DP default.
    privacy_ledger_ : list of PrivacyEvent
        Every release; their basic-composition sum is ``privacy_spent_``.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during fit, when ``X`` has string column names.
"""

_ALGORITHM = r"""
    A trial of Algorithm 4 (``spec/balcan_highdim.md`` §2.4 with fixes A2-A9):

    1. rows are clipped to :math:`B(c, \Lambda)`, centred, and projected to
       :math:`y = Gx/\sqrt p`, clipped to :math:`B(0, \Lambda_p)`;
    2. **candidates** (Algorithms 1-2): R randomly shifted roots
       :math:`v + [-2\Lambda_p, 2\Lambda_p]^p`; each active cube is halved
       along every axis and a child is activated iff its count plus
       :math:`\mathrm{Lap}(b)` exceeds :math:`\gamma`, for L levels; the
       centres of all activated cubes, projected onto the ball, are the
       candidates (empty cubes by an exact binomial draw, so the
       :math:`2^p` children are never enumerated);
    3. **local swap** (Algorithm 3): T rounds of an exponential mechanism
       over (slot, candidate) swaps with score :math:`-L(Z')` and
       sensitivity :math:`\Delta_L`, then one more to pick an iterate; the
       loss is summed over a Poisson sample of the rows, each kept with
       probability :math:`\min(1, m/\tilde n)` by public coins
       (:math:`m = 2^{16}`; an extension for speed that leaves the
       sensitivity unchanged,
       :func:`~skdpcluster.cluster._highdim_candidates.swap_sample`);
    4. **recovery**: the partition of the projected rows by the chosen
       centres is lifted back: noisy sums and counts in :math:`\mathbb{R}^d`,
       the noisy means shrunk towards the ball's centre by
       :math:`\Lambda^2/(\Lambda^2 + e_j^2)` (:math:`e_j` the expected noise
       norm of mean j; post-processing); then ``n_refine_iter`` noisy Lloyd
       steps.

    **Privacy** (pure :math:`\varepsilon`-DP by basic composition, under
    ``neighbouring``): a noisy row count (1 % of epsilon), per trial the
    candidates (one Laplace histogram per level over disjoint cubes, R L
    levels of :math:`\varepsilon_1`), the local search (T + 1 exponential
    mechanisms of :math:`\varepsilon_{swap}/(T+1)`), each mean step (Laplace
    counts and sums over disjoint clusters, L1 sensitivity
    :math:`\sqrt d\,\Lambda` per row for the sum), and the selection between
    trials (sensitivity :math:`(2\Lambda)^q`). ``privacy_ledger_`` lists
    them; their sum is at most epsilon.

    **Runtime** :math:`O(nd p + RLnp + T|C|\min(n, m) + (1 + \text{refine})\,ndk)` per
    trial with :math:`|C|` capped by ``max_candidates`` and memory
    :math:`O(nd + nk)` plus fixed-size blocks (spec §5.4).
"""


@shared_params
class PrivateHighDimKMeans(_PrivateHighDimBase):
    __doc__ = r"""Private k-means in high dimensions (Balcan et al. 2017, Algorithm 4).

    A general-purpose, pure epsilon-DP k-means: no separation or stability
    assumption, polynomial in d, for data that is not an easy instance
    (where :class:`~skdpcluster.KTupleClusterer` and the stable estimators'
    tests fail). Loss :math:`L(Z) = \sum_i \min_j \|x_i - z_j\|^2`; the
    local-search and selection sensitivities are :math:`4\Lambda_p^2` and
    :math:`4\Lambda^2`.
""" + _ALGORITHM + r"""
    With ``recovery="sparse"`` (Algorithm 5) the rows are made s-sparse and
    box-bounded (the ``sparsity`` largest entries kept, clipped to
    ``coord_bound``; per-row maps), the projected steps use the radius
    :math:`\sqrt s\,\Lambda_\infty`, and each centre keeps about
    :math:`2s/\eta` private coordinates, so the additive error grows with
    :math:`s^2\log d` instead of :math:`d^2` (Corollary 2).

    Parameters
    ----------
    {n_clusters}
""" + _SHARED_PARAMETERS + r"""
    recovery : {"mean", "sparse"}, default="mean"
        Recovery of the centres in the original space: noisy means, or the
        sparse recovery of Algorithm 5 (needs ``sparsity`` and
        ``coord_bound``; the data centre should then be 0).
    sparsity : int, default=None
        s, the number of non-zero entries kept per row (``"sparse"`` only).
    coord_bound : float, default=None
        Public bound :math:`\Lambda_\infty` on every entry (``"sparse"`` only).
    sparse_eta : float, default=0.5
        :math:`\eta` of Algorithm 5: :math:`\lceil 2s/\eta\rceil` coordinates
        are kept per centre.

    Attributes
    ----------
""" + _SHARED_ATTRIBUTES + r"""
    See Also
    --------
    PrivateHighDimKMedian : The same pipeline for the k-median loss.
    highdim_fallback_centers : The pipeline as a function, for fallbacks.

    References
    ----------
    M.-F. Balcan, T. Dick, Y. Liang, W. Mou, H. Zhang. Differentially Private
    Clustering in High-Dimensional Euclidean Spaces. ICML 2017.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpcluster.cluster._highdim import PrivateHighDimKMeans
    >>> rng = np.random.default_rng(0)
    >>> means = rng.uniform(-1, 1, size=(4, 50))
    >>> X = means[rng.integers(4, size=20_000)] + 0.1 * rng.standard_normal((20_000, 50))
    >>> est = PrivateHighDimKMeans(n_clusters=4, epsilon=1.0, data_radius=6.0,
    ...                            random_state=0).fit(X)
    >>> est.cluster_centers_.shape
    (4, 50)
    >>> est.privacy_spent_["epsilon"] <= 1.0, est.privacy_spent_["delta"]
    (True, 0.0)
    """

    _parameter_constraints: dict = {
        **_PrivateHighDimBase._parameter_constraints,
        "recovery": [StrOptions({"mean", "sparse"})],
        "sparsity": [None, Interval(Integral, 1, None, closed="left")],
        "coord_bound": [None, Interval(Real, 0, None, closed="neither")],
        "sparse_eta": [Interval(Real, 0, 1, closed="neither")],
    }
    _RECOVERIES = ("mean", "sparse")

    def __init__(
        self,
        n_clusters=8,
        *,
        epsilon=1.0,
        delta=1e-6,
        beta=0.05,
        profile="practical",
        proj_dim="auto",
        proj_clip_factor=1.0,
        n_shifts="auto",
        max_depth="auto",
        gamma="auto",
        max_candidates="auto",
        init="auto",
        n_swap_iter="auto",
        n_trials="auto",
        n_refine_iter="auto",
        budget_split=None,
        sum_mechanism="laplace",
        recovery="mean",
        sparsity=None,
        coord_bound=None,
        sparse_eta=0.5,
        neighbouring="replace_one",
        data_radius=None,
        data_center=None,
        accountant=None,
        random_state=None,
        n_jobs=None,
        verbose=0,
    ):
        _store_parameters(self, locals())


@shared_params
class PrivateHighDimKMedian(_PrivateHighDimBase):
    __doc__ = r"""Private k-median in high dimensions (Balcan et al. 2017, Section 6.2).

    The pipeline of :class:`PrivateHighDimKMeans` for the loss
    :math:`L(Z) = \sum_i \min_j \|x_i - z_j\|`: the same candidates
    (their capture argument does not depend on the loss), the local search
    of Gupta et al. (2010) with sensitivity :math:`2\Lambda_p`, and a final
    selection with sensitivity :math:`2\Lambda`.
""" + _ALGORITHM + r"""
    The recovery is the noisy mean by default: the mean of a cluster is a
    2-approximation of its 1-median (:math:`\|\bar x - m\| \le \frac1n\sum
    \|x_i - m\|`), and it stays pure DP. ``recovery="one_median"`` uses a
    private 1-median per cluster instead (noisy projected gradient descent,
    (epsilon, delta)-DP); the paper's log-concave sampler is not offered
    (its practical samplers give only approximate DP; spec §5.5).

    Parameters
    ----------
    {n_clusters}
""" + _SHARED_PARAMETERS + r"""
    recovery : {"mean", "one_median"}, default="mean"
        Recovery of the centres in the original space (and of each
        refinement step).

    Attributes
    ----------
""" + _SHARED_ATTRIBUTES + r"""
    See Also
    --------
    PrivateHighDimKMeans : The same pipeline for the k-means loss.

    References
    ----------
    M.-F. Balcan, T. Dick, Y. Liang, W. Mou, H. Zhang. Differentially Private
    Clustering in High-Dimensional Euclidean Spaces. ICML 2017.

    Examples
    --------
    >>> import numpy as np
    >>> from skdpcluster.cluster._highdim import PrivateHighDimKMedian
    >>> rng = np.random.default_rng(0)
    >>> means = rng.uniform(-1, 1, size=(4, 50))
    >>> X = means[rng.integers(4, size=20_000)] + 0.1 * rng.standard_normal((20_000, 50))
    >>> est = PrivateHighDimKMedian(n_clusters=4, data_radius=6.0, random_state=0).fit(X)
    >>> est.predict(X[:3]).shape
    (3,)
    """

    _parameter_constraints: dict = {
        **_PrivateHighDimBase._parameter_constraints,
        "recovery": [StrOptions({"mean", "one_median"})],
    }
    _POWER = 1
    _RECOVERIES = ("mean", "one_median")

    def __init__(
        self,
        n_clusters=8,
        *,
        epsilon=1.0,
        delta=1e-6,
        beta=0.05,
        profile="practical",
        proj_dim="auto",
        proj_clip_factor=1.0,
        n_shifts="auto",
        max_depth="auto",
        gamma="auto",
        max_candidates="auto",
        init="auto",
        n_swap_iter="auto",
        n_trials="auto",
        n_refine_iter="auto",
        budget_split=None,
        sum_mechanism="laplace",
        recovery="mean",
        neighbouring="replace_one",
        data_radius=None,
        data_center=None,
        accountant=None,
        random_state=None,
        n_jobs=None,
        verbose=0,
    ):
        _store_parameters(self, locals())



# ---------------------------------------------------------------------------
# Fallback for the stable estimators
# ---------------------------------------------------------------------------

_OBJECTIVES = {"kmeans": PrivateHighDimKMeans, "kmedian": PrivateHighDimKMedian}


def highdim_fallback_centers(X, n_clusters, *, epsilon, data_radius, data_center=None, rng,
                             objective="kmeans", neighbouring="replace_one", **params):
    r"""Private centres by the high-dimensional pipeline, for a fallback: ``(centers, events)``.

    Runs exactly what :class:`PrivateHighDimKMeans` (``objective="kmeans"``)
    or :class:`PrivateHighDimKMedian` (``"kmedian"``) does in ``fit``, with
    the same validation, but charges no accountant: the caller commits the
    returned events with the rest of its fit. Meant for the stable
    estimators: when their easy-instance test fails (a private outcome),
    the budget reserved for the fallback goes here, on the same full data.

    **Accounting.** With the default settings the call is pure
    ``epsilon``-DP under ``neighbouring``: the basic-composition sum of
    ``events`` is at most ``epsilon`` and their delta is 0 (1 % of epsilon
    buys a noisy row count, so the exact n is never used and the call is
    also private under add/remove when calibrated for replace-one).
    Branching on a released test outcome is adaptive composition, so the
    caller's total is its test's cost plus ``epsilon``; charging the
    fallback's share even when it does not run keeps the ledger
    data-independent. Under zCDP accounting, pure :math:`\varepsilon`-DP
    implies :math:`\varepsilon^2/2`-zCDP (Bun & Steinke 2016, Proposition
    1.4): pass ``epsilon = sqrt(2 * rho)`` to spend at most ``rho``, or use
    :class:`HighDimInitializer`, which does this.

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features) or DaskRows
        All the rows (at least 2); Dask rows (:mod:`skdpcluster.utils._data`,
        already validated) are read by map-reduces.
    n_clusters : int
    epsilon : float
        Budget of the call, > 0.
    data_radius : float
        Public bound :math:`\Lambda` (required: a fallback must not read it
        from the data).
    data_center : array-like of shape (n_features,), default=None
        Public centre of the ball; ``None`` means the origin.
    rng : numpy.random.Generator
        The only source of randomness.
    objective : {"kmeans", "kmedian"}, default="kmeans"
    neighbouring : {"replace_one", "add_remove"}, default="replace_one"
    **params
        Any other parameter of the estimator (``profile``,
        ``n_refine_iter``, ``sum_mechanism``, ...); ``delta`` is spent only
        by the options that say so.

    Returns
    -------
    centers : ndarray of shape (n_clusters, n_features)
        In the coordinates of ``X``, rows in lexicographic order.
    events : list of PrivacyEvent

    Raises
    ------
    ValueError
        On invalid input or parameters, before any randomness is drawn.
    TypeError
        If ``rng`` is not a :class:`numpy.random.Generator`.
    """
    if objective not in _OBJECTIVES:
        raise ValueError(f"objective must be one of {sorted(_OBJECTIVES)}, got {objective!r}.")
    if data_radius is None:
        raise ValueError("highdim_fallback_centers needs a public data_radius.")
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {rng!r}.")
    estimator = _OBJECTIVES[objective](
        n_clusters, epsilon=epsilon, data_radius=data_radius, data_center=data_center,
        neighbouring=neighbouring, **params)
    estimator._validate_params()
    if not hasattr(X, "map_reduce"):  # Dask rows (a stable estimator's fallback) pass as they are
        X = check_array(X, dtype=np.float64, ensure_min_samples=2)
    plan = estimator._plan(X)
    result = estimator._fit_private(X, plan, rng)
    return result.centers, result.events


class HighDimInitializer:
    r"""The high-dimensional pipeline as an initializer of the stable estimators.

    Follows the protocol of :mod:`skdpcluster.cluster._stable_init`
    (``privacy_model`` and ``fit_centers``), so that
    :class:`~skdpcluster.cluster._stable.PrivateStableKMeans` can use it as
    its initializer or as the fallback after a failed test.

    * ``privacy_model="zcdp"``: a budget ``{"rho": rho}`` runs the pure-DP
      pipeline with :math:`\varepsilon = \sqrt{2\rho}`. Every event
      :math:`e` (an :math:`\varepsilon_e`-DP release used ``count`` times)
      is reported with epsilon = delta = 0 and
      :math:`\rho_e = \mathrm{count}\cdot\varepsilon_e^2/2` (Bun & Steinke
      2016, Proposition 1.4, and composition, Lemma 2.3), so the sum of the
      rhos is at most :math:`(\sum \mathrm{count}\,\varepsilon_e)^2/2 \le \rho`.
    * ``privacy_model="dp"``: a budget ``{"epsilon", "delta"}`` is passed on;
      the events are pure DP (delta 0).

    Parameters
    ----------
    objective : {"kmeans", "kmedian"}, default="kmeans"
    privacy_model : {"zcdp", "dp"}, default="zcdp"
    params : dict, default=None
        Other estimator parameters (pure-DP ones only).
    """

    #: A general-purpose method always releases centres: no fallback share is reserved for it.
    can_fail = False
    #: ``fit_centers`` reads Dask rows by map-reduces (:mod:`~skdpcluster.cluster._highdim_chunked`).
    accepts_chunked_rows = True

    def __init__(self, objective="kmeans", privacy_model="zcdp", params=None):
        if privacy_model not in ("zcdp", "dp"):
            raise ValueError(f"privacy_model must be 'zcdp' or 'dp', got {privacy_model!r}.")
        self.objective = objective
        self.privacy_model = privacy_model
        self.params = dict(params or {})

    def fit_centers(self, X, n_clusters, *, budget, data_radius, neighbouring, rng):
        """Private centres of ``X`` (rows in B(0, data_radius)): ``(centers, events)``."""
        if self.params.get("sum_mechanism", "laplace") != "laplace" or self.params.get(
                "recovery") == "one_median":
            raise ValueError("HighDimInitializer needs the pure-DP settings (Laplace sums, "
                             f"no 1-median), got params={self.params!r}.")
        zcdp = self.privacy_model == "zcdp"
        epsilon = math.sqrt(2.0 * budget["rho"]) if zcdp else budget["epsilon"]
        centers, events = highdim_fallback_centers(
            X, n_clusters, epsilon=epsilon, data_radius=data_radius, rng=check_random_state(rng),
            objective=self.objective, neighbouring=neighbouring, **self.params)
        if zcdp:
            events = [_as_zcdp(event) for event in events]
        return centers, events


def _as_zcdp(event):
    """A pure-DP event as its zCDP cost: rho = count * eps^2 / 2, epsilon = delta = 0."""
    return replace(event, epsilon=0.0, delta=0.0, count=1, rho=event.count * event.epsilon**2 / 2.0,
                   details={**event.details, "pure_epsilon": event.epsilon, "uses": event.count,
                            "zcdp_bound": "Bun & Steinke 2016, Proposition 1.4"})
