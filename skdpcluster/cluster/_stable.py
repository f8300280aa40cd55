r"""Private clustering of stable instances (Shechner 2021; Shechner, Sheffet & Stemmer 2020).

:class:`PrivateStableKMeans` is Algorithm Private-Stable-k-Means of the
thesis (Section 4; ``spec/shechner_stable.md`` §3.1) in the practical form of
spec §9.5: a private initializer B, ball-restricted ("core") Lloyd steps
with centred and scaled noisy sums, then a private choice between the
candidates. :class:`PrivateStableKMedian` is Algorithm Private-Stable-k-median
(Section 5; spec §4.2, §9.7): a private 1-median per Voronoi cell of B, then
the same choice.

Both account in zCDP (spec §9.4) and report the (epsilon, delta) actually
guaranteed; every noisy release goes through :mod:`skdpcluster.mechanisms`
or :mod:`skdpcluster.averaging`.
"""

import functools
import itertools
import math
from dataclasses import dataclass, field, replace
from numbers import Integral, Real

import numpy as np
from scipy import optimize

from skdpcluster.averaging import _project_onto_ball, private_one_medians_of_rows
from skdpcluster.averaging._common import rows_outside_ball, scale_into_ball
from skdpcluster.averaging.one_median import (
    MAX_STEP_SCALE,
    cell_order,
    one_medians_of_sorted,
    sorted_by_cell,
)
from skdpcluster.cluster._base import PrivateFit, PrivateFitPlan, _BasePrivateClusterer
from skdpcluster.cluster._cost_estimate import COST_KEYS, CostEstimateMixin
from skdpcluster.cluster._highdim import HighDimInitializer
from skdpcluster.cluster._ktuple import KTupleClusterer
from skdpcluster.cluster._one_cluster import fit_one_cluster, plan_one_cluster
from skdpcluster.cluster._stable_init import (
    CHUNK_ROWS,
    GridInitializer,
    KTupleInitializer,
    PublicCenters,
    add_cell_sums,
    center_gaps,
    core_sq_radii,
    core_terms,
    lloyd_step,
    nearest_centers,
    nearest_costs,
    noisy_cell_sums,
    random_ball_points,
    within_radii,
)
from skdpcluster.exceptions import PrivacyAccountingError, UtilityWarning
from skdpcluster.mechanisms import (
    _MAX_ANALYTIC_EPSILON,
    _SMALLEST_NORMAL,
    PrivacyEvent,
    _log_gaussian_delta,
    analytic_gaussian_sigma,
    exponential_mechanism,
    zcdp_rho_for_dp,
    zcdp_to_dp,
)
from skdpcluster.utils._compat import HasMethods, Interval, StrOptions, single_threaded
from skdpcluster.utils._data import DaskRows, cached_statistic
from skdpcluster.utils._docstrings import shared_params
from skdpcluster.utils._progress import phase
from skdpcluster.utils._threads import fit_threads, ordered_map
from skdpcluster.utils._warnings import warn_user

__all__ = ["PrivateStableKMeans", "PrivateStableKMedian"]

#: zCDP budgets are shaved by this factor so that float rounding of the splits
#: can never push the converted epsilon above the request.
_RHO_SAFETY = 1.0 - 1e-10
_PRIVACY_MODELS = ("zcdp", "dp", "public")
#: Margin of the rows suggested by the heavy-cell utility warnings over the bare threshold
#: (:meth:`_PrivateStableBase._heavy_cell_need`): a cluster can straddle a cell boundary of the
#: (randomly shifted) grid and split its count. Measured at k = d = 4, epsilon = 1, radius 20
#: (seeds 0 and 1): PrivateStableKMeans on ``benchmarks/bench_stable.py``'s mixture had 2 and 2
#: heavy cells at 1x (10^3 rows; 6.7 and 9.3 x scikit-learn's cost), 4 and 4 at 2x (2.9 and
#: 2.1 x), 7 and 6 at 4x (1.01 x); SampleAggregateStableKMeans on ``benchmarks/bench_local.py``'s
#: had 2 and 1 at 1x (2e5 rows; 4.7 and 8.1 x), 4 and 4 at 2x (1.003 and 1.93 x). Enough heavy
#: cells are needed, not always sufficient.
HEAVY_CELL_MARGIN = 2.0
#: Blocks of ``CHUNK_ROWS`` rows per run of :meth:`_ClippedData.nearest` on threads.
NEAREST_RUN_BLOCKS = 16


# ---------------------------------------------------------------------------
# Budget
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class StableBudget:
    r"""The named budget of one fit (never a positional tuple; STYLE.md §6, anti-pattern A).

    Attributes
    ----------
    initializer : dict
        What the initializer gets: ``{"rho": ...}`` (zCDP initializers),
        ``{"epsilon": ..., "delta": ...}`` (``"dp"`` initializers, composed
        with the rest by basic composition) or ``{}`` (public centres).
    rho_fallback : float
        zCDP share reserved for the grid initializer when a fallible
        initializer fails; it goes to the refinement when it succeeds.
    rho_refine, rho_lloyd, rho_select : float
        zCDP shares of the core steps (or medians), of the optional full
        Lloyd step and of the selection.
    rho_total : float
        The zCDP budget of everything but a ``"dp"`` initializer.
    delta_zcdp : float
        The delta at which ``rho_total`` is converted to (epsilon, delta).
    """

    initializer: dict
    rho_fallback: float
    rho_refine: float
    rho_lloyd: float
    rho_select: float
    rho_total: float
    delta_zcdp: float

    def as_dict(self):
        """Plain dict, for the ``budget_`` attribute."""
        return {"initializer": dict(self.initializer), "rho_fallback": self.rho_fallback,
                "rho_refine": self.rho_refine, "rho_lloyd": self.rho_lloyd,
                "rho_select": self.rho_select, "rho_total": self.rho_total,
                "delta_zcdp": self.delta_zcdp}


def plan_budget(privacy_model, fractions, epsilon, delta):
    r"""Split (epsilon, delta) into the named budget of a fit (spec §9.4).

    ``fractions`` has keys ``init``, ``fallback``, ``refine``, ``lloyd`` and
    ``select`` summing to 1.

    * ``"zcdp"`` and ``"public"`` initializers: the whole fit is
      :math:`\rho`-zCDP with :math:`\rho = (\sqrt{\log(1/\delta) + \varepsilon}
      - \sqrt{\log(1/\delta)})^2` (the inverse of Bun & Steinke 2016,
      Proposition 1.3), split by the fractions; public centres give their
      ``init`` and ``fallback`` shares to the other parts in proportion.
    * ``"dp"`` initializers get :math:`(f\varepsilon, f\delta)` with
      :math:`f` the ``init`` fraction; the rest of the fit is
      :math:`\rho'`-zCDP for :math:`((1-f)\varepsilon, (1-f)\delta)` and the
      two compose by basic composition (spec §9.4, "a user-supplied
      initializer").
    """
    rho_parts = {name: fractions[name] for name in ("fallback", "refine", "lloyd", "select")}
    if privacy_model == "dp":
        share = fractions["init"]
        initializer = {"epsilon": share * epsilon, "delta": share * delta}
        delta_zcdp = delta - initializer["delta"]
        rho_total = zcdp_rho_for_dp(epsilon - initializer["epsilon"], delta_zcdp) * _RHO_SAFETY
    else:
        delta_zcdp = delta
        rho_total = zcdp_rho_for_dp(epsilon, delta) * _RHO_SAFETY
        if privacy_model == "zcdp":
            rho_parts["init"] = fractions["init"]
        else:
            rho_parts["fallback"] = 0.0
    scale = rho_total / math.fsum(rho_parts.values())
    rho = {name: part * scale for name, part in rho_parts.items()}
    # Every release splits its part among a few steps or levels: a part below the smallest
    # normal float could round to 0 there, inside the private step, a charged failure (or a
    # ZeroDivisionError; review R10 M1: epsilon = delta = 1e-220).
    if not all(part >= _SMALLEST_NORMAL for name, part in rho.items() if rho_parts[name] > 0):
        raise ValueError(
            f"epsilon={epsilon!r} and delta={delta!r} are too small: the zCDP budget of a part "
            f"of the fit ({min(rho.values()):.3g}) is below the smallest normal float64.")
    if privacy_model == "zcdp":
        initializer = {"rho": rho["init"]}
    elif privacy_model == "public":
        initializer = {}
    return StableBudget(initializer, rho["fallback"], rho["refine"], rho["lloyd"],
                        rho["select"], rho_total, delta_zcdp)


def _zcdp_total_event(events, delta, neighbouring):
    """The composite event: zCDP releases composed (Bun & Steinke 2016, Lemma 2.3) and converted."""
    rho = math.fsum(event.rho for event in events)
    return PrivacyEvent(
        "zcdp_composition", zcdp_to_dp(rho, delta), delta, rho=rho, label="stable/zcdp_total",
        neighbouring=neighbouring,
        details={"composition": "zcdp", "conversion": "Bun & Steinke 2016, Proposition 1.3",
                 "n_releases": len(events)},
    )


def _as_zcdp_event(event, rho, **details):
    """An event whose cost is carried by the zCDP composite: epsilon = delta = 0, its rho kept."""
    return replace(event, epsilon=0.0, delta=0.0, rho=float(rho),
                   details={**event.details, **details, "accounted_in": "stable/zcdp_total"})


#: What the ``stable/medians`` event copies from the event of the 1-medians' call.
_MEDIAN_CALL_DETAILS = ("n_iter", "first_step", "schedule_length", "step_scale", "rho_count",
                        "rho_per_step", "count_sensitivity", "gradient_sensitivity",
                        "count_scale", "gradient_scale", "releases")


def _medians_event(call, rho, epsilon, delta, n_cells, neighbouring):
    r"""The ledger's ``stable/medians`` event: the 1-medians' call, charged as ``rho``.

    ``call`` is the event of the one call of
    :func:`~skdpcluster.averaging.private_one_medians` on all the cells with
    a domain (``None`` when no cell has one: nothing is released);
    (``joint_epsilon``, ``joint_delta``) = (``epsilon``, ``delta``) is what
    that call was given for all cells together (:func:`one_median_privacy`
    of ``rho``), ``call_rho`` its zCDP (at most ``rho``, the charge, which
    does not depend on the outcome). Its sensitivity, scale and the
    per-release details are copied.
    """
    details = {"cells": n_cells, "composition": "parallel: disjoint Voronoi cells, one joint "
               "Gaussian mechanism per release (spec §9.3, §9.7)",
               "joint_epsilon": epsilon, "joint_delta": delta,
               "accounted_in": "stable/zcdp_total"}
    if call is None:
        return PrivacyEvent("private_one_median", 0.0, 0.0, rho=rho, label="stable/medians",
                            neighbouring=neighbouring,
                            details={**details, "releases": "none: no cell has a domain"})
    details.update({key: call.details[key] for key in _MEDIAN_CALL_DETAILS
                    if key in call.details}, call_rho=call.rho)
    return PrivacyEvent("private_one_median", 0.0, 0.0, call.sensitivity, call.scale,
                        rho=max(call.rho, rho), label="stable/medians",
                        neighbouring=neighbouring, details=details)


def _gaussian_rho(epsilon, delta):
    sigma = analytic_gaussian_sigma(1.0, epsilon, delta)
    return 1.0 / (2.0 * sigma * sigma)


def one_median_privacy(rho):
    r"""An (epsilon, delta) at which :func:`~skdpcluster.averaging.private_one_median` spends <= rho.

    That primitive takes (epsilon, delta) and spends the zCDP
    :math:`\mu^2/2` of the Gaussian mechanism that is exactly
    (epsilon, delta)-DP at sensitivity 1. Here :math:`\delta' =
    \min(10^{-6}, 0.01\sqrt\rho)` (small enough for a solution to exist, as
    :math:`\rho \to \pi\delta'^2` when :math:`\varepsilon \to 0`) and
    :math:`\varepsilon'` solves :math:`\delta(\sigma, \varepsilon') = \delta'`
    for the noise :math:`\sigma = 1/\sqrt{2\rho}` of the target (Balle & Wang
    2018, Theorem 8; Brent's method on :math:`\log\varepsilon'`, a few
    evaluations of the closed form where a bisection over the calibration
    took 50 calibrations, 3 ms of a fit; issue #17), then is lowered by
    factors :math:`1 - 10^{-12}` until its :math:`\rho` does not exceed the
    target.

    Returns
    -------
    (float, float)
    """
    delta = min(1e-6, 0.01 * math.sqrt(rho))
    sigma, target = 1.0 / math.sqrt(2.0 * rho), math.log(delta)

    def excess(log_epsilon):  # decreasing: a larger epsilon needs a smaller delta
        return _log_gaussian_delta(sigma, 1.0, math.exp(log_epsilon)) - target

    low, high = -10.0, 1.0
    while excess(low) < 0:
        low -= 10.0
    while excess(high) > 0:
        high += 2.0
    # Capped at the largest epsilon the calibration takes (a smaller epsilon spends less rho):
    # a huge budget raised inside the private step (review R10 M1: epsilon=1e18).
    epsilon = min(math.exp(optimize.brentq(excess, low, high, xtol=1e-14, rtol=1e-14)),
                  _MAX_ANALYTIC_EPSILON)
    while _gaussian_rho(epsilon, delta) > rho:
        epsilon *= 1.0 - 1e-12
    return epsilon, delta


# ---------------------------------------------------------------------------
# Shared base of the two estimators
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class _ClippedData:
    """Rows centred at ``data_center`` and projected into B(0, Lambda), with their squared norms.

    :meth:`assign` remembers its last results, so the selection reuses the
    assignments the refinement already computed for the same centres.
    ``n_threads`` is the threads of the passes that run on threads
    (:func:`~skdpcluster.utils._threads.fit_threads`; their results do not
    depend on it).
    """

    X: np.ndarray
    sq_norms: np.ndarray
    radius: float
    outside: np.ndarray
    n_threads: int = 1
    _memo: dict = field(default_factory=dict, repr=False, compare=False)
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_rows(cls, X, center, radius):
        """The rows of ``X`` centred and projected; ``X`` itself (no copy) when that changes nothing.

        With the centre at the origin and every row inside the ball, the
        centred, projected rows are the rows bit for bit: the fit reads ``X``
        (C-ordered float64, never written) instead of a copy of it (a copy of
        the data less in memory, issue #17); ``X`` must then not change while
        the fit runs (its squared norms and clipping are decided here).
        """
        unchanged = X.dtype == np.float64 and X.flags.c_contiguous and not np.any(center)
        clipped = X if unchanged else X - center
        sq_norms = np.einsum("ij,ij->i", clipped, clipped)
        outside = rows_outside_ball(clipped, sq_norms, radius)
        if len(outside):
            clipped = X.copy() if clipped is X else clipped
            clipped[outside] = scale_into_ball(clipped[outside], radius)  # exact norms <= radius
            sq_norms[outside] = np.einsum("ij,ij->i", clipped[outside], clipped[outside])
        return cls(clipped, sq_norms, radius, outside)

    def cached(self, key, compute):
        """``compute()`` once per key (:func:`~skdpcluster.utils._data.cached_statistic`)."""
        return cached_statistic(self._cache, key, compute)

    def map_reduce(self, func, *args):
        """``func(self, *args)``: in memory the rows are one chunk (see ``utils/_data.py``)."""
        return func(self, *args)

    @property
    def shape(self):
        return self.X.shape

    def initializer_input(self):
        """What an initializer's ``fit_centers`` receives: the clipped rows as an array."""
        return self.X

    def training_labels(self, X, centers, order, center):
        """Nearest of ``centers[order] + center`` for the raw rows ``X`` (non-private ``labels_``).

        Distances do not change under the translation by ``center``, so only
        the rows moved by the projection onto the ball need a new assignment.
        """
        labels = np.argsort(order)[self.assign(centers)[0]]
        if len(self.outside):
            labels[self.outside] = nearest_centers(X[self.outside], centers[order] + center)[0]
        return labels

    def assign(self, centers):
        """:meth:`nearest` of the rows, memoised for the last few centre sets."""
        key = (centers.shape, centers.tobytes())
        if key not in self._memo:
            if len(self._memo) >= 4:
                self._memo.pop(next(iter(self._memo)))
            self._memo[key] = self.nearest(centers)
        return self._memo[key]

    def nearest(self, centers):
        """``nearest_centers`` of the rows, in runs of whole blocks on ``n_threads`` threads.

        ``nearest_centers`` computes every block of ``CHUNK_ROWS`` rows on its
        own, so runs of whole blocks give the labels and distances of one
        call, on any number of threads. Each run writes its rows of the
        result (runs of at most ``NEAREST_RUN_BLOCKS`` blocks, so a thread
        holds no more than about 1 MiB beside it).
        """
        n_blocks = -(-len(self.X) // CHUNK_ROWS)
        if self.n_threads <= 1 or n_blocks <= 1:
            return nearest_centers(self.X, centers, self.sq_norms)
        labels, sq_distances = np.empty(len(self.X), dtype=np.intp), np.empty(len(self.X))
        n_runs = max(self.n_threads, -(-n_blocks // NEAREST_RUN_BLOCKS))
        bounds = [CHUNK_ROWS * (run * n_blocks // n_runs) for run in range(n_runs + 1)]

        def assign_run(rows):
            labels[rows], sq_distances[rows] = nearest_centers(self.X[rows], centers,
                                                               self.sq_norms[rows])

        ordered_map(assign_run, [slice(*run) for run in itertools.pairwise(bounds)],
                    self.n_threads)
        return labels, sq_distances


class _ClippedChunks:
    """Dask rows centred and projected chunk by chunk: the out-of-core :class:`_ClippedData`.

    Every pass (:meth:`map_reduce`) reads the raw chunks again and builds a
    :class:`_ClippedData` of each where it lives; only per-chunk statistics
    reach the driver.
    """

    def __init__(self, rows, center, radius):
        self.rows = rows.with_chunks(
            functools.partial(_ClippedData.from_rows, center=center, radius=radius))
        self.center, self.radius = center, radius

    @property
    def shape(self):
        return self.rows.shape

    def map_reduce(self, func, *args):
        return self.rows.map_reduce(func, *args)

    def initializer_input(self):
        """The clipped rows as rows of their own, what an in-memory initializer gets as an array.

        A lazy Dask array (every pass clips the raw chunks again), so the
        chunk-aware initializers (``accepts_chunked_rows``) see exactly the
        rows they see in memory, including the k-tuple clusterer's blocks.
        """
        return DaskRows(self.rows.array.map_blocks(_clipped_block, self.center, self.radius,
                                                   dtype=np.float64))

    def training_labels(self, X, centers, order, center):
        """A lazy Dask array of the nearest released centre of every raw row."""
        return X.map_rows(_nearest_labels, centers[order] + center, dtype=np.intp)


def clipped_rows(X, center, radius, n_threads=1):
    """The rows centred at ``center`` and projected into B(0, radius), in memory or chunked.

    ``n_threads``: the threads of the in-memory passes (:class:`_ClippedData`).
    """
    if hasattr(X, "map_reduce"):
        return _ClippedChunks(X, center, radius)
    return replace(_ClippedData.from_rows(X, center, radius), n_threads=n_threads)


def _clipped_block(block, center, radius):
    """One chunk of rows centred and projected, as :meth:`_ClippedData.from_rows` does in memory."""
    return _ClippedData.from_rows(np.asarray(block, dtype=np.float64), center, radius).X


def _nearest_labels(X, centers):
    return nearest_centers(np.asarray(X, dtype=float), centers)[0]


def _store_parameters(estimator, parameters):
    """``__init__`` stores its parameters unchanged (scikit-learn's convention), nothing else."""
    for name, value in parameters.items():
        if name not in ("self", "__class__"):
            setattr(estimator, name, value)


def _canonical_order(centers):
    """Row order that sorts the centres lexicographically (DESIGN.md, privacy rule 2)."""
    return np.lexsort(centers.T[::-1])


def _canonical(centers):
    """Rows in lexicographic order."""
    return centers[_canonical_order(centers)]


class _PrivateStableBase(CostEstimateMixin, _BasePrivateClusterer):
    """Plan, initializer, selection and attributes shared by the two estimators.

    Subclasses set ``_REFINE_KEY``, ``_DEFAULT_SPLIT``, ``_POWER`` (2 for
    k-means, 1 for k-median) and write ``_refine``.
    """

    _parameter_constraints: dict = {
        **{name: rule for name, rule in _BasePrivateClusterer._parameter_constraints.items()
           if name != "on_failure"},
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "initializer": [StrOptions({"grid", "ktuple"}), "array-like", KTupleClusterer,
                        HasMethods(["fit_centers"])],
        "fallback": [StrOptions({"grid", "highdim"})],
        "base_estimator": [None, HasMethods(["fit"])],
        "beta": [Interval(Real, 0, 1, closed="neither")],
        "budget_split": [None, dict],
        "selection": [StrOptions({"truncated", "full", "none"})],
        "neighbouring": [StrOptions({"replace_one", "add_remove"})],
        "estimate_cost": ["boolean"],
    }
    _REFINE_KEY = "core"
    _FITTED_ATTRIBUTES = _BasePrivateClusterer._FITTED_ATTRIBUTES + (
        "budget_", "candidate_centers_", "initial_centers_", "initializer_",
        "initializer_info_", "initializer_status_", "quality_", "selected_")
    _POWER = 2
    _DEFAULT_SPLIT = {"init": 0.6, "core": 0.3, "select": 0.1}

    def _check_n_clusters(self):
        """k = 1 is allowed: a private mean (or 1-median), see :meth:`_plan_one_cluster`."""

    #: The one-cluster statistic of :mod:`skdpcluster.cluster._one_cluster`.
    _ONE_CLUSTER = "mean"

    def _plan_one_cluster(self, X):
        """``n_clusters=1``: the private mean (1-median) on the whole budget, or ``None``.

        ``None`` (the k-cluster path, whose core ball is then the whole
        domain, spec §11, A12) for a mean on Dask input: the private average
        needs the rows in memory. The 1-median runs pass by pass.
        """
        if self.n_clusters != 1 or (self._ONE_CLUSTER == "mean" and hasattr(X, "map_reduce")):
            return None
        # Unused with one cluster, but a wrong initializer is still a clear error before spending.
        self._resolve_initializer(X.shape[1], self._resolve_center(X.shape[1]))
        attributes = {"initial_centers_": None, "candidate_centers_": {}, "initializer_": None,
                      "selected_": f"private_{self._ONE_CLUSTER}", "initializer_status_": None,
                      "initializer_info_": {}, "budget_": None,
                      "quality_": {"test": None, "test_passed": None,
                                   "selected": f"private_{self._ONE_CLUSTER}",
                                   "n_heavy_cells": None, "heavy_cells_short": None,
                                   "rows_suggested": None, **dict.fromkeys(COST_KEYS)}}
        if self._ONE_CLUSTER == "mean":
            attributes.update(core_noisy_counts_=None, core_fallback_=None)
        return plan_one_cluster(self, X, self._ONE_CLUSTER, attributes)

    # -- public plan --------------------------------------------------------------
    def _plan(self, X):
        if self.estimate_cost:
            return self._plan_with_cost_estimate(X)
        one_cluster = self._plan_one_cluster(X)
        if one_cluster is not None:
            return one_cluster
        n_features = X.shape[1]
        center = self._resolve_center(n_features)
        initializer, name = self._resolve_initializer(n_features, center)
        fallible = bool(getattr(initializer, "can_fail", True))
        fractions = self._fractions(initializer.privacy_model, fallible)
        budget = plan_budget(initializer.privacy_model, fractions, self.epsilon, self.delta)
        radius, unproven = self._resolve_radius(X, center)
        if hasattr(X, "map_reduce"):
            self._check_chunked_initializer(initializer, name)
        if isinstance(initializer, KTupleInitializer):
            initializer.check_input(X, self.n_clusters, budget.initializer, radius)
        plan = PrivateFitPlan(
            (float(self.epsilon), float(self.delta)),
            {"center": center, "radius": radius, "initializer": initializer, "budget": budget,
             "n_threads": fit_threads()},
            {"data_radius_": radius, "budget_": budget.as_dict(), "initializer_": name},
            unproven,
        )
        if self.verbose:
            print(f"[{type(self).__name__}] plan: initializer={name}, budget={budget}")
        return plan

    @staticmethod
    def _check_chunked_initializer(initializer, name):
        """Refuse, before any randomness, an initializer that cannot read Dask rows.

        Both fallbacks (the grid and the high-dimensional method) read them.
        """
        if not getattr(initializer, "accepts_chunked_rows", False):
            raise ValueError(
                f"initializer={name!r} does not run on Dask input yet; use initializer='grid', "
                "'ktuple' or public initial centres, or pass X.compute() if it fits in memory.")

    def _resolve_initializer(self, n_features, center):
        """The initializer object and its name; public centres are checked here."""
        init = self.initializer
        ktuple_args = {"base_estimator": self.base_estimator, "beta": self.beta,
                       "n_jobs": self.n_jobs}
        if isinstance(init, str) and init == "grid":
            return GridInitializer(warn_few_heavy_cells=False), "grid"  # see _warn_after_fit
        if isinstance(init, (str, KTupleClusterer)):
            if self.neighbouring != "replace_one":
                raise ValueError("the k-tuple initializer is private under replace-one only; "
                                 "use neighbouring='replace_one'.")
            template = None if isinstance(init, str) else init
            return KTupleInitializer(template, **ktuple_args), "ktuple"
        if hasattr(init, "fit_centers"):
            if getattr(init, "privacy_model", None) not in _PRIVACY_MODELS:
                raise ValueError(
                    f"an initializer object needs a privacy_model in {_PRIVACY_MODELS}, got "
                    f"{getattr(init, 'privacy_model', None)!r} on {type(init).__name__}.")
            return init, type(init).__name__
        centers = np.asarray(init, dtype=float)
        if centers.shape != (self.n_clusters, n_features) or not np.all(np.isfinite(centers)):
            raise ValueError(
                f"initial centres must be a finite array of shape (n_clusters, n_features) = "
                f"({self.n_clusters}, {n_features}), got shape {centers.shape}.")
        return PublicCenters(centers - center), "public"

    def _default_split(self, fallible):
        split = dict(self._DEFAULT_SPLIT)
        if fallible:
            split["fallback"] = split["init"] = split["init"] / 2.0
        return split

    def _allowed_split_keys(self, fallible):
        return set(self._default_split(fallible))

    def _fractions(self, privacy_model, fallible):
        """Validated budget fractions, renamed to the keys of :func:`plan_budget`."""
        split = self._default_split(fallible) if self.budget_split is None else self.budget_split
        allowed = self._allowed_split_keys(fallible)
        unknown = set(split) - allowed
        values = list(split.values())
        if unknown or not all(isinstance(v, Real) and math.isfinite(v) and v >= 0
                              for v in values):
            raise ValueError(
                f"budget_split must map keys among {sorted(allowed)} to finite fractions >= 0, "
                f"got {split!r}.")
        if abs(math.fsum(values) - 1.0) > 1e-6 or split.get(self._REFINE_KEY, 0) <= 0:
            raise ValueError(
                f"budget_split fractions must sum to 1 with {self._REFINE_KEY!r} > 0, got "
                f"{split!r}.")
        if privacy_model != "public" and split.get("init", 0) <= 0:
            raise ValueError("budget_split needs 'init' > 0 for a private initializer.")
        fractions = {"init": 0.0, "fallback": 0.0, "lloyd": 0.0, "select": 0.0,
                     **{k: float(v) for k, v in split.items() if k != self._REFINE_KEY},
                     "refine": float(split[self._REFINE_KEY])}
        if self.selection == "none":
            fractions["refine"] += fractions["select"]
            fractions["select"] = 0.0
        return fractions

    # -- private part -------------------------------------------------------------------
    def _fit_private(self, X, plan, rng):
        """The private fit, with the native thread pools (BLAS, OpenMP) limited to one thread.

        Its passes multiply blocks of rows by a few centres or projection
        vectors: memory-bound products that threads slow down (issue #17: a
        10^6 x 10 by 10 x 3 projection took 0.6 s with two OpenBLAS threads
        and 0.04 s with one on a loaded 2-core machine). The products, hence
        the releases, are the same: the threads split the rows, not the sums.
        The passes that split the rows into public blocks themselves run on
        the threads ``KMeans`` would use, read by :meth:`_plan` before the
        limit (``n_threads``, :func:`~skdpcluster.utils._threads.fit_threads`;
        also for the main fit of ``estimate_cost=True``, which runs inside
        the limit), with the same releases on any number of threads.
        """
        with single_threaded():
            return self._fit_private_steps(X, plan, rng)

    def _fit_private_steps(self, X, plan, rng):
        if "cost_main" in plan.values:
            return self._fit_with_cost_estimate(X, plan, rng)
        if "one_cluster" in plan.values:
            return fit_one_cluster(self, X, plan, rng)
        values = plan.values
        data = clipped_rows(X, values["center"], values["radius"], values["n_threads"])
        init_rng, refine_rng, select_rng = rng.spawn(3)
        phase("initializer", initializer=type(values["initializer"]).__name__)
        start = self._initial_centers(data, values["initializer"], values["budget"], init_rng)
        refine_budget = values["budget"].rho_refine + start["rho_extra"]
        phase("refinement")
        candidates, refine_events, diagnostics = self._refine(
            data, start["centers"], refine_budget, values["budget"], refine_rng)
        phase("selection")
        chosen, select_events = self._select(data, candidates, start["centers"],
                                             values["budget"].rho_select, select_rng)
        zcdp_events = start["zcdp_events"] + refine_events + select_events
        events = start["dp_events"] + zcdp_events
        events.append(
            _zcdp_total_event(zcdp_events, values["budget"].delta_zcdp, self.neighbouring))
        center = values["center"]
        order = _canonical_order(candidates[chosen])
        centers = candidates[chosen][order] + center
        attributes = {
            "initial_centers_": start["centers"] + center,
            "candidate_centers_": {name: c + center for name, c in candidates.items()},
            "selected_": chosen,
            "initializer_status_": start["status"],
            "initializer_info_": start["info"],
            "labels_": data.training_labels(X, candidates[chosen], order, center),
            "quality_": self._quality(start, chosen, values),
            **diagnostics,
        }
        status = "success" if start["status"] == "success" else "fallback"
        return PrivateFit(centers, True, events, attributes=attributes,
                          rho=events[-1].rho, status=status)

    def _quality(self, start, chosen, values):
        """``quality_``: the private test that ran, its released outcome and released values.

        Only released values: the initializer's status (its private test's
        outcome), the exponential mechanism's choice and the number of heavy
        grid cells (a function of the released noisy counts), whether it is
        below ``n_clusters`` and the public rows that would clear the grid's
        threshold (:meth:`_heavy_cell_need`), where the grid ran. The
        selection releases an index, not a cost: there is no noisy cost to
        report.
        """
        initializer = values["initializer"]
        fallible = bool(getattr(initializer, "can_fail", True))
        test = None
        if fallible:
            test = ("ktuple" if isinstance(initializer, KTupleInitializer)
                    else type(initializer).__name__)
        info = start["info"].get("fallback", start["info"])
        n_heavy, rho_grid = info.get("n_heavy_cells"), self._grid_rho(start, values)
        short = rows = None
        if rho_grid is not None:
            short = n_heavy < self.n_clusters
            rows = self._heavy_cell_need(values["center"].size, rho_grid)[2]
        return {"test": test, "test_passed": start["status"] == "success" if fallible else None,
                "selected": chosen, "n_heavy_cells": n_heavy, "heavy_cells_short": short,
                "rows_suggested": rows, **dict.fromkeys(COST_KEYS)}

    # -- honest utility signals of the grid initializer (issue #14) ----------------------
    def _grid_initializes(self):
        """Whether the grid initializer gives B: ``initializer="grid"`` (a public parameter)."""
        return isinstance(self.initializer, str) and self.initializer == "grid"

    def _grid_rho(self, start, values):
        """The zCDP budget the grid initializer ran on in this fit; ``None`` if it did not run."""
        if start["status"] == "fallback_grid":
            return values["budget"].rho_fallback
        if self._grid_initializes():
            return values["budget"].initializer["rho"]
        return None

    def _grid_point_rho(self, rho):
        """The grid's zCDP budget per point it counts, from the grid's budget ``rho`` (a hook)."""
        return rho

    def _grid_points_per_cluster(self, n_samples):
        """Points an average cluster brings to the grid: its :math:`n/k` rows (a hook)."""
        return n_samples / self.n_clusters

    def _rows_for_grid_points(self, points):
        """Rows at which an average cluster brings ``points`` points to the grid (a hook)."""
        return points * self.n_clusters

    def _heavy_cell_need(self, n_features, rho):
        r"""Points a heavy grid cell needs, and the points and rows suggested (public values).

        The noisy counts of the grid initializer (budget ``rho``) must clear
        the threshold :math:`\tau` of
        :meth:`~skdpcluster.cluster._stable_init.GridInitializer.heavy_cell_threshold`
        (spec §9.6 step 3) for a cluster to get a heavy cell of its own; an
        average cluster brings :meth:`_grid_points_per_cluster` points. The
        suggestion is :data:`HEAVY_CELL_MARGIN` times :math:`\tau` points per
        cluster, and the rows that give them (:meth:`_rows_for_grid_points`).

        Returns
        -------
        threshold : float
            :math:`\tau`.
        points : int
            Points per cluster suggested, :math:`\lceil 2\tau\rceil`.
        rows : int
            Rows suggested.
        """
        threshold = GridInitializer().heavy_cell_threshold(
            n_features, self._grid_point_rho(rho), self.neighbouring)
        points = math.ceil(HEAVY_CELL_MARGIN * threshold)
        return threshold, points, self._rows_for_grid_points(points)

    def _warn_if_noise_dominates(self, n_samples, n_features):
        r"""Also warn, before spending, when an average cluster is too small for a heavy grid cell.

        Public values only (the number of rows, public under replace-one
        neighbours: :meth:`_row_count_is_public`, review RC-01), and only
        where the grid initializer runs from the start (not a fallback). The
        suggested epsilon uses that every noise scale of the grid, hence
        :math:`\tau`, is proportional to :math:`\rho^{-1/2}`.
        """
        super()._warn_if_noise_dominates(n_samples, n_features)
        if (self.n_clusters == 1 or not self._grid_initializes()
                or not self._row_count_is_public()):
            return
        budget = plan_budget("zcdp", self._fractions("zcdp", False), self.epsilon, self.delta)
        threshold, points, rows = self._heavy_cell_need(n_features, budget.initializer["rho"])
        per_cluster = self._grid_points_per_cluster(n_samples)
        if per_cluster < threshold:
            epsilon = _two_digits_up(
                zcdp_to_dp(budget.rho_total * (points / per_cluster) ** 2, self.delta))
            warn_user(self._few_grid_points_message(n_samples, per_cluster, threshold, points,
                                                    rows, epsilon), UtilityWarning)

    def _few_grid_points_message(self, n_samples, per_cluster, threshold, points, rows, epsilon):
        """The pre-spend warning's text: too few rows per cluster for the grid (public values)."""
        return (
            f"{type(self).__name__}: with {n_samples} rows and n_clusters={self.n_clusters}, an "
            f"average cluster has about {per_cluster:.0f} rows, fewer than the about "
            f"{threshold:.0f} a cell of the grid initializer needs to clear its noise "
            f"(epsilon={self.epsilon}; a public estimate): initial centres are likely to be "
            "filler points near the centre of the data ball, which the later steps often cannot "
            f"move. About {rows} rows (or epsilon={epsilon:g} with these rows) would help.")

    def _warn_after_fit(self):
        """Warn when the initializer failed or the grid released fewer heavy cells than clusters.

        Both from released attributes (``initializer_status_``, ``quality_``),
        after the fit: inside the private step, a warning made an error failed
        the charged fit (review R3-3). A fit whose private step failed has
        neither (review R2: read unguarded, a first fit's failure raised
        AttributeError after the charge).
        """
        status = getattr(self, "initializer_status_", None)
        if status not in (None, "success"):
            then = {"fallback_grid": "the grid initializer ran on the 'fallback' share",
                    "fallback_highdim": "the high-dimensional method (Balcan et al. 2017) ran "
                                        "on the 'fallback' share",
                    "fallback_random": "with no 'fallback' share, the initial centres are "
                                       "random points"}[status]
            warn_user(f"{type(self).__name__}: the private initializer failed (a private "
                      f"outcome, initializer_status_={status!r}); {then}.", UserWarning)
        if (getattr(self, "quality_", None) or {}).get("heavy_cells_short"):
            warn_user(self._short_grid_message(), UtilityWarning)

    def _short_grid_message(self):
        """The post-fit warning's text, from the fitted (released) ``quality_``."""
        n_heavy, k = self.quality_["n_heavy_cells"], self.n_clusters
        return (
            f"{type(self).__name__}: the grid initializer found {n_heavy} heavy grid cells for "
            f"n_clusters={k} (a function of its released noisy counts), so {k - n_heavy} initial "
            "centres started as filler points near the centre of the data ball, and some of the "
            "released centres are likely still there (quality_['heavy_cells_short']); "
            f"status_={self.status_!r} does not report it (it is about a private test, and the "
            f"grid has none). About {self.quality_['rows_suggested']} rows (or a larger epsilon) "
            "would help.")

    def _fallback_message(self):
        """None: no NotSeparatedWarning; :meth:`_warn_after_fit` names what ran after the fit."""
        return None

    def _fallback_initializer(self):
        """The initializer run on the "fallback" share when a fallible one fails."""
        if self.fallback == "highdim":
            return HighDimInitializer(objective="kmeans" if self._POWER == 2 else "kmedian")
        return GridInitializer(warn_few_heavy_cells=False)  # see _warn_after_fit

    def _initial_centers(self, data, initializer, budget, rng):
        """Run the initializer (and the grid fallback); B projected and in canonical order."""
        k, n_features = self.n_clusters, data.shape[1]
        centers, events, info = self._run_initializer(initializer, data, budget.initializer, rng)
        outcome = {"status": "success", "info": info, "rho_extra": 0.0, "dp_events": [],
                   "zcdp_events": []}
        outcome["dp_events" if initializer.privacy_model == "dp" else "zcdp_events"] += events
        if centers is None and budget.rho_fallback > 0:
            centers, fallback_events, info = self._run_initializer(
                self._fallback_initializer(), data, {"rho": budget.rho_fallback}, rng)
            outcome.update(status=f"fallback_{self.fallback}",
                           info={**outcome["info"], "fallback": info})
            outcome["zcdp_events"] += fallback_events
        elif centers is None:
            centers = random_ball_points(rng, k, n_features, data.radius / 4.0)
            outcome["status"] = "fallback_random"
        else:
            outcome["rho_extra"] = budget.rho_fallback
        outcome["centers"] = _canonical(_project_onto_ball(centers, 0.0, data.radius))
        return outcome

    def _run_initializer(self, initializer, data, budget, rng):
        """Call ``fit_centers`` and check its output and its spend against the protocol."""
        result = initializer.fit_centers(data.initializer_input(), self.n_clusters, budget=budget,
                                         data_radius=data.radius, neighbouring=self.neighbouring,
                                         rng=rng)
        centers, events, info = (*result, {})[:3] if len(result) == 2 else result
        events = list(events)
        _check_initializer_spend(initializer, events, budget)
        events += _unused_budget_events(initializer.privacy_model, events, budget)
        if centers is not None:
            centers = np.asarray(centers, dtype=float)
            if centers.shape != (self.n_clusters, data.shape[1]) or not np.all(
                    np.isfinite(centers)):
                raise RuntimeError(
                    f"{type(initializer).__name__}.fit_centers returned centres of shape "
                    f"{centers.shape}; expected finite ({self.n_clusters}, {data.shape[1]}).")
        return centers, events, dict(info)

    def _truncation(self, initial, radius):
        """tau of the selection: (median gap / 2)^p (truncated) or (2 Lambda)^p (full)."""
        if self.selection == "full":
            return (2.0 * radius) ** self._POWER
        gaps = center_gaps(initial)
        tau = (float(np.median(gaps)) / 2.0) ** self._POWER
        if not (math.isfinite(tau) and tau > 0):
            tau = (radius / self.n_clusters) ** self._POWER
        return tau


    def _select(self, data, candidates, initial, rho, rng):
        r"""Exponential mechanism over the candidates (spec §9.5 ``select``; thesis step 5).

        Utility :math:`u_j = -\sum_x \min(\mathrm{cost}_x(C_j), \tau)`, of
        sensitivity :math:`\tau` under both relations; with
        :math:`\varepsilon_{em} = \sqrt{8\rho}` it is
        :math:`\varepsilon_{em}`-bounded-range, hence :math:`\rho`-zCDP
        (Cesar & Rogers 2021).
        """
        names = list(candidates)
        if self.selection == "none" or rho <= 0:
            return names[-1], []
        tau = self._truncation(initial, data.radius)
        costs = data.map_reduce(_truncated_costs, tuple(candidates.values()), tau, self._POWER)
        utilities = [-float(cost) for cost in costs]
        index, event = exponential_mechanism(
            utilities, epsilon=math.sqrt(8.0 * rho), sensitivity=tau, rng=rng,
            label="stable/selection", neighbouring=self.neighbouring)
        event = _as_zcdp_event(event, rho, zcdp_bound="bounded range, Cesar & Rogers 2021",
                               candidates=names)
        return names[index], [event]


def _median_cells(chunk, initial, compact):
    """The median cell of every row of a chunk: ``compact`` of its nearest initial centre.

    Memoised (:meth:`_ClippedData.assign`): the selection scores the initial
    centres with the same pass. The memo holds 16 bytes a row through the
    medians' steps (at n = 10^6, d = k = 10 with the rows read in place: a
    peak of 104 MiB against 89 MiB, scikit-learn's ``KMeans`` 153 MiB), and
    saves one pass over the rows (issue #17).
    """
    return compact[chunk.assign(initial)[0]]


def _truncated_costs(chunk, candidates, tau, power):
    r""":math:`\sum_x \min(\mathrm{cost}_x(C), \tau)` of a chunk's rows for every candidate C
    (each row's cost by :func:`~skdpcluster.cluster._stable_init.nearest_costs`)."""
    return np.array([
        np.sum(np.minimum(nearest_costs(chunk.X, centers, power, chunk.assign(centers)), tau))
        for centers in candidates])


def _two_digits_up(value):
    """``value`` rounded up to two significant digits (a suggestion that is enough, R2-7)."""
    unit = 10.0 ** (math.floor(math.log10(value)) - 1)
    return math.ceil(value / unit) * unit


def _unused_budget_events(privacy_model, events, budget):
    """Charge the initializer's whole budget, so the ledger never depends on the data.

    An initializer may spend less than it was given, and how much less could
    depend on the data (a branch it took); the fit's guarantee is the
    planned budget either way, so the difference is charged as one more
    event.
    """
    if privacy_model == "zcdp":
        unused = {"rho": budget["rho"] - math.fsum(e.rho for e in events)}
        event = PrivacyEvent("unused_budget", 0.0, 0.0, rho=unused["rho"])
    elif privacy_model == "dp":
        unused = {"epsilon": budget["epsilon"] - math.fsum(e.cost()[0] for e in events),
                  "delta": budget["delta"] - math.fsum(e.cost()[1] for e in events)}
        event = PrivacyEvent("unused_budget", max(unused["epsilon"], 0.0),
                             max(unused["delta"], 0.0))
    else:
        return []
    if all(value <= 1e-12 * budget[name] for name, value in unused.items()):
        return []
    return [event.with_label("stable/initializer_unused_budget")]


def _check_initializer_spend(initializer, events, budget):
    """The protocol's promise: the events spend at most the initializer's budget."""
    model = initializer.privacy_model
    tolerance = 1.0 + 1e-9
    if model == "zcdp":
        ok = all(e.epsilon == 0 and e.delta == 0 and e.rho is not None for e in events) and (
            math.fsum(e.rho for e in events) <= budget["rho"] * tolerance)
    elif model == "dp":
        ok = (math.fsum(e.cost()[0] for e in events) <= budget["epsilon"] * tolerance
              and math.fsum(e.cost()[1] for e in events) <= budget["delta"] * tolerance)
    else:
        ok = not events
    if not ok:
        raise PrivacyAccountingError(
            f"{type(initializer).__name__}.fit_centers spent more than its budget {budget} "
            f"(or reported events outside its privacy_model={model!r}).")


# ---------------------------------------------------------------------------
# k-means
# ---------------------------------------------------------------------------


def core_statistics(data, centers, radius_factor, max_radii=None):
    r"""Noise-free core sums of thesis steps 2-4, centred and scaled (spec §9.5 ``core_step``).

    :math:`\hat D_i = \min_{j\ne i}\|c_i - c_j\|`, :math:`r_i = f\hat D_i`
    (:math:`r_1 = 2\Lambda` when k = 1), core
    :math:`\hat X_i = \{x : \|x - c_i\| \le r_i\}` (disjoint since
    :math:`f < 1/2`, and every such x has :math:`c_i` as nearest centre),
    :math:`S_i = \sum_{x\in\hat X_i}(x - c_i)/r_i` (each term of norm
    :math:`\le 1`, added term by term: :func:`~skdpcluster.cluster._stable_init.core_terms`)
    and :math:`N_i = |\hat X_i|`. The noise-free core average
    is :math:`\bar c_i = c_i + r_i S_i/N_i`. ``max_radii`` (public, or
    released earlier) caps :math:`r_i`; the cores stay disjoint.

    Returns
    -------
    sums : ndarray of shape (n_clusters, n_features)
    counts : ndarray of shape (n_clusters,)
    radii : ndarray of shape (n_clusters,)
    """
    gaps = center_gaps(centers)
    radii = np.where(np.isinf(gaps), 2.0 * data.radius, radius_factor * gaps)
    if max_radii is not None:
        radii = np.minimum(radii, max_radii)
    sums, counts = data.map_reduce(_core_sums, centers, radii)
    return sums / np.where(radii > 0, radii, 1.0)[:, None], counts, radii


def _core_sums(chunk, centers, radii):
    """Per core, the sum of a chunk's :func:`core_terms` (unscaled) and their count.

    A row is in the core of its nearest centre when within its radius
    (:func:`within_radii` at :func:`core_sq_radii`); the terms are computed
    and added block by block of ``CHUNK_ROWS`` rows (no temporary of the
    chunk's size).
    """
    k = len(centers)
    labels, sq_distances = chunk.assign(centers)
    inside = within_radii(chunk.X, centers, labels, sq_distances,
                          core_sq_radii(radii, chunk.X.shape[1])[labels], chunk.sq_norms)
    labels = np.where(inside, labels, k)
    sums, counts = np.zeros((k + 1, chunk.X.shape[1])), np.zeros(k + 1)
    for start in range(0, len(labels), CHUNK_ROWS):
        rows = slice(start, start + CHUNK_ROWS)
        add_cell_sums(core_terms(chunk.X[rows], centers, labels[rows]), labels[rows], sums, counts)
    return sums[:k], counts[:k]


def core_step(data, centers, *, radius_factor, rho, neighbouring, rng, label, max_radii=None):
    r"""One private core step (thesis steps 2-4, spec §9.5): :math:`\rho`-zCDP.

    The core sums and counts of :func:`core_statistics` go through
    :func:`~skdpcluster.cluster._stable_init.noisy_cell_sums` (disjoint
    cores: L2 sensitivities 2 and :math:`\sqrt 2` under replace-one, 1 and 1
    under add/remove). An accepted centre moves to
    :math:`\Pi_{B(0,\Lambda)}(c_i + r_i\,\mathrm{clip}_1(\tilde S_i/\tilde N_i))`;
    the others keep their value (spec §11, A9). The shift
    :math:`\tilde S_i/\tilde N_i` is first shrunk towards 0 by
    :meth:`~skdpcluster.cluster._stable_init.NoisyCells.shrunk_means`
    (James-Stein, post-processing), which changes nothing where the noise
    is small and keeps :math:`c_i` where it dominates.

    Returns
    -------
    centers : ndarray of shape (n_clusters, n_features)
    fallback : ndarray of bool of shape (n_clusters,)
    noisy : NoisyCells
    """
    sums, counts, radii = core_statistics(data, centers, radius_factor, max_radii)
    noisy = noisy_cell_sums(sums, counts, rho=rho, neighbouring=neighbouring, rng=rng,
                            label=label)
    accepted = noisy.accepted() & (radii > 0)
    shift = _project_onto_ball(noisy.shrunk_means(), 0.0, 1.0) * radii[:, None]
    moved = _project_onto_ball(centers + shift, 0.0, data.radius)
    return np.where(accepted[:, None], moved, centers), ~accepted, noisy


_SHARED_DOC = r"""
    {epsilon}
    {delta}
    initializer : {"grid", "ktuple"}, array-like, KTupleClusterer or object, default="grid"
        The private algorithm A that gives the initial centres B:

        * ``"grid"``: :class:`~skdpcluster.cluster._stable_init.GridInitializer`,
          DP-PCA + private grid coreset + DP-Lloyd (spec §9.6), zCDP.
        * ``"ktuple"`` (or a :class:`~skdpcluster.KTupleClusterer` whose
          settings to use): k-tuple clustering of the rows with
          ``base_estimator`` (the reduction of Cohen et al. 2021; spec
          ``cohen_ktuple.md`` §8.4), (epsilon, delta)-DP under replace-one.
          Its private test can fail; the decision to fall back is taken from
          its released ``status_`` and the ``"fallback"`` share of the budget
          is reserved for it: the grid initializer runs with that share
          after a failure, and the share goes to the refinement steps after
          a success, so that both branches spend the same (adaptive
          composition with a fixed budget per branch).
        * an array of shape (n_clusters, n_features) of **public** initial
          centres (original coordinates):
          no budget is spent on them and their ``init`` share goes to the
          other steps.
        * any object following the initializer protocol of
          :mod:`skdpcluster.cluster._stable_init` (``privacy_model`` and
          ``fit_centers``); unless its ``can_fail`` attribute is False it
          may fail like ``"ktuple"`` and gets a ``"fallback"`` share.

        On Dask input, ``"grid"``, ``"ktuple"`` (the blocks inside the chunks,
        as :class:`~skdpcluster.KTupleClusterer` on Dask) and public centres
        run; an object runs if its ``accepts_chunked_rows`` is True.

        The default is ``"grid"``, from ``benchmarks/bench_stable.py`` (k = 4,
        d = 4, unit-variance components whose closest means are 10 standard
        deviations apart, ``data_radius=20``, delta = 1e-6): at epsilon = 1
        the k-tuple test failed in all 80 runs at n = 10^5 and 10^6 (its
        noisy-centres test needs k-tuples about :math:`2\Delta + 2`-far with
        :math:`\Delta` in the thousands), so ``"ktuple"`` always fell back to
        the grid on half the initializer budget; and the smallest n at which
        95 % of the runs reached ARI >= 0.99 and cost <= 1.01 times
        scikit-learn's was 10^4 with ``"grid"`` against 3·10^4 (k-means) or
        10^5 (k-median) with ``"ktuple"``, and 3·10^4 (k-means; 10^4 for
        k-median) against 3·10^5 at epsilon = 0.25. ``"ktuple"`` pays off only on data far more
        separated than this (its test then passes). Those figures are for the paper's
        ``"noisy_centers"``: since issue #13 the k-tuple initializer runs
        ``KTupleClusterer(method="auto")``, which is ``"located"`` here (the radius is
        public); on k = 4, d = 4, means ±10·e_i, n = 10^5 it passed in 20 of 20 runs
        with no fallback (``benchmarks/bench_ktuple_practical.py --full``).
    fallback : {"grid", "highdim"}, default="grid"
        What runs on the reserved ``"fallback"`` share of the budget when a
        fallible initializer (``"ktuple"``) fails its private test: the grid
        initializer, or the general-purpose high-dimensional method of Balcan
        et al. (2017; :class:`~skdpcluster.PrivateHighDimKMeans`) for data
        that is not an easy instance. Which branch runs is decided by the
        initializer's released status; both branches spend the same share, so
        the accounting is unchanged (``"fallback"`` in ``budget_``). Both
        run on Dask input.
    base_estimator : estimator, default=None
        Non-private clusterer of the ``"ktuple"`` initializer (see
        :class:`~skdpcluster.KTupleClusterer`); unused otherwise.
    beta : float, default=0.05
        Failure probability of the ``"ktuple"`` initializer's test; the other
        steps need none (spec §11, A16).
    selection : {"truncated", "full", "none"}, default="truncated"
        Thesis step 5, the private choice between the candidates, as an
        exponential mechanism with utility
        :math:`-\sum_x\min(\mathrm{cost}_x(C), \tau)`:
        ``"truncated"`` uses :math:`\tau = (\mathrm{median}_i\hat D_i(B)/2)^p`
        (spec §9.5; robust, but Theorem 4.3's case 1 then holds only for the
        truncated cost), ``"full"`` uses :math:`\tau = (2\Lambda)^p`, the
        plain cost (the thesis' guarantee), ``"none"`` always outputs the
        refined candidate and gives the ``select`` share to the refinement.
    neighbouring : {"replace_one", "add_remove"}, default="replace_one"
        Relation the noise is calibrated to (spec §9.3). ``"replace_one"``
        calibrates to the larger replace-one sensitivities, and since the
        exact number of rows is never used (every division is by a noisy
        count), the fit is then private under add/remove as well, except
        with the ``"ktuple"`` initializer, which treats the number of rows
        as public (replace-one only), and for k-means with
        ``n_clusters=1``, whose private average divides by the number of
        rows (with ``"add_remove"`` it divides by a noisy count instead).
        ``"add_remove"`` uses the smaller sensitivities and gives the
        guarantee under add/remove only.
    estimate_cost : bool, default=False
        Spend 5% of epsilon
        (:data:`~skdpcluster.cluster._cost_estimate.COST_SHARE`, pure DP;
        the fit gets the rest; with ``data_radius=None``, 5% of the epsilon
        left after the private bound, so 4.5% of the whole) on a private estimate of the released
        centres' clipped cost (k-means: squared distances; k-median:
        distances), stored in ``quality_`` as for
        :class:`~skdpcluster.KTupleClusterer`
        (:func:`~skdpcluster.cluster._cost_estimate.private_clipped_cost`).
        Charged whatever the outcome. ``mean_clipped_cost`` divides by the
        number of rows (public under replace-one; ``None`` under add/remove,
        where the count is private).
    data_radius : float, "data" or None, default=None
        Public bound :math:`\Lambda`: rows are projected onto
        :math:`B(\mathrm{data\_center}, \Lambda)` (a per-row map, so
        neighbours stay neighbours).
        {private_bound}
        With ``"data"`` the exact bound is used but not stored (``data_radius_``
        is ``nan``) and ``privacy_spent_["proven"]`` is False. At most 1e100. A loose bound mostly hurts the
        initializer: the core steps' noise scales with the core radius.
    data_center : array-like of shape (n_features,), default=None
        Public centre of the data ball; ``None`` means the origin when
        ``data_radius`` is given, and a private centre when ``data_radius=None``.
    {accountant}
    random_state : None, int or numpy.random.Generator, default=None
        ``None`` draws fresh OS entropy; an int or a Generator makes the fit
        reproducible (noise and the non-private k-means of the coreset).
    n_jobs : int, default=None
        Parallel jobs of the ``"ktuple"`` initializer's blocks.
    {verbose}
"""

_SHARED_ATTRIBUTES = r"""
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        The released centres (the selected candidate), rows in
        lexicographic order. A differentially private release.
    initial_centers_ : ndarray of shape (n_clusters, n_features)
        B, the initializer's output projected onto the data ball, rows in
        lexicographic order; private (already paid for).
    candidate_centers_ : dict of str to ndarray
        Every candidate of the selection (``"initial"`` and the refined
        ones), rows in the order of ``initial_centers_``; private releases.
    selected_ : str
        Name of the released candidate (the exponential mechanism's output).
    initializer_ : str
        ``"grid"``, ``"ktuple"``, ``"public"`` or the class name of a custom
        initializer.
    initializer_status_ : {"success", "fallback_grid", "fallback_highdim", "fallback_random"}
        Whether the initializer returned centres or the fallback ran
        (decided from the initializer's private output).
    initializer_info_ : dict
        Public diagnostics of the initializer (grid level, heavy cells, ...).
    quality_ : dict
        Private quality signals, released values only: ``"test"``
        (``"ktuple"`` when a fallible initializer's private test ran, else
        ``None``), ``"test_passed"`` (its released outcome, or ``None``),
        ``"selected"`` (the selection's choice; it releases no cost),
        ``"n_heavy_cells"`` (of the grid initializer, from its released
        noisy counts), ``"heavy_cells_short"`` (True when that number is
        below ``n_clusters``: the missing initial centres were filler points
        near the centre of the data ball, the later steps move one only where
        their noisy counts accept it, so some released centres are usually
        still filler points, and a :class:`~skdpcluster.UtilityWarning` says
        so after the fit), ``"rows_suggested"`` (public: the rows at which an
        average cluster clears the grid's noise threshold twice over) and the
        ``estimate_cost`` keys of :class:`~skdpcluster.KTupleClusterer`
        (``None`` unless ``estimate_cost=True``). The grid keys are ``None``
        when the estimator's own grid did not run (``"ktuple"`` that passed,
        public centres, an initializer object, even a ``GridInitializer``,
        one cluster); with the grid fallback they are the fallback's.
    status_ : {"success", "fallback", "failure"}
        Centres are always released: ``"success"`` when the initializer
        returned centres, ``"fallback"`` when it failed and its reserved share
        ran the fallback (``initializer_status_`` says which); ``"failure"``
        only when the private step failed (a
        :class:`~skdpcluster.exceptions.PrivateStepFailedWarning`; nothing released).
        It reports the initializer's private test, which the grid has none
        of: ``"success"`` with ``quality_["heavy_cells_short"]`` means some
        released centres are likely filler points.
    labels_ : ndarray of shape (n_samples,)
        Index of the nearest released centre for every training row.
        **Not private**: a function of the training data, outside the DP
        guarantee; release it only if that is acceptable.
    budget_ : dict
        The resolved budget split (public).
    privacy_spent_ : dict
        ``{"epsilon", "delta", "rho", "proven"}``: the (epsilon, delta)
        guaranteed by the whole fit (never above the request), charged once
        to the accountant, and the zCDP ``rho`` of the releases composed in
        zCDP (the ``"zcdp_composition"`` event's; with ``n_clusters=1`` the
        1-median's, and no ``"rho"`` for the private mean). The private
        bound of ``data_radius=None`` and a k-tuple initializer are charged
        in (epsilon, delta), outside ``rho``.
    privacy_ledger_ : list of PrivacyEvent
        Every release (zCDP releases carry their ``rho`` and zero
        (epsilon, delta)), followed by the composite ``"zcdp_composition"``
        event that converts their total; the basic-composition sum of the
        ledger is ``privacy_spent_``.
    data_radius_ : float
        The bound used (private when ``data_radius=None``; ``nan`` with ``data_radius="data"``).
    {data_center_}
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during fit, when ``X`` has string column names.
"""


@shared_params
class PrivateStableKMeans(_PrivateStableBase):
    __doc__ = r"""Private-Stable-k-Means (Shechner 2021, Section 4; Shechner, Sheffet & Stemmer 2020).

    The practical form of the thesis' algorithm (``spec/shechner_stable.md``
    §3.1, §9.5), differentially private under the relation of
    ``neighbouring``:

    1. A private initializer gives k centres :math:`B` (thesis step 1; see
       ``initializer``), projected onto :math:`B(0, \Lambda)`.
    2. ``n_core_steps`` core steps (thesis steps 2-4): with
       :math:`\hat D_i = \min_{j \ne i}\|c_i - c_j\|` and
       :math:`r_i = f\hat D_i` (``core_radius_factor`` f, the thesis' 1/3),
       the rows within :math:`r_i` of :math:`c_i` form the core
       :math:`\hat X_i`; the cores are disjoint because :math:`f < 1/2`. The
       centred, scaled sums :math:`S_i = \sum_{\hat X_i}(x - c_i)/r_i` and the
       counts :math:`N_i` are released with Gaussian noise (L2 sensitivities 2
       and :math:`\sqrt 2` under replace-one, spec §9.3), and
       :math:`c_i \leftarrow \Pi_{B(0,\Lambda)}(c_i + r_i\,
       \mathrm{clip}_1(\tilde S_i/\tilde N_i))` where the noisy count passes
       the acceptance rule :math:`\tilde N_i \ge \max(3\sigma_c, 1)`,
       :math:`(\sigma_s\sqrt d + \sigma_c)/\tilde N_i \le 1/2` (spec §11, A3),
       else :math:`c_i` stays. Centring at :math:`c_i` makes the noise scale
       with :math:`r_i` rather than :math:`\Lambda`. The noisy shift is
       shrunk towards 0 first (James-Stein, post-processing; it matters only
       where the noise is comparable to the shift).
    3. Optionally (``final_lloyd_step``) one noisy Lloyd step on full Voronoi
       cells, the extra step of the thesis' footnote 13 behind the
       Wasserstein guarantee of Theorem 4.6.
    4. An exponential mechanism chooses between :math:`B` and the refined
       candidates (thesis step 5; see ``selection``).

    **Guarantee** (Lemma 4.1, Lemma 4.2, Theorem 4.3; spec §3.3-§3.5). If X is
    :math:`\phi`-separated (:math:`\mathrm{OPT}_k \le \phi^2\mathrm{OPT}_{k-1}`)
    and :math:`\mathrm{cost}(B) \le w\phi^2\mathrm{OPT}_{k-1}` with
    :math:`\phi^2(w+1)/(1-\phi^2) \le 1/784`, then the core of every cluster
    contains its inner part and lies inside it,
    :math:`X_i^{cor} \subseteq \hat X_i \subseteq X_i^*`, and the noise-free
    core means satisfy :math:`\|\bar c_i - c_i^*\|^2 \le r_i^{*2}\rho/(1-\rho)`
    with :math:`\rho = 100\phi^2/(1-\phi^2)`, so that

    .. math::

        \mathrm{cost}(\hat C) \le \Bigl(1 + \frac{200\phi^2}{1 - 101\phi^2}\Bigr)
            \mathrm{OPT}_k + O\Bigl(\frac{k\Lambda^2\sqrt d}{\varepsilon}
            \ln\frac{dk}{\beta\delta}\Bigr).

    The proven regime is extreme (clusters about :math:`56\sqrt k` radii
    apart, spec §1.8) and cannot be checked privately; the algorithm works
    far outside it on visibly separated data, and the selection is the safety
    net when it does not apply (spec §11, A17-A18).

    **Privacy.** Every release is a Gaussian mechanism
    (:math:`\sigma = \Delta/\sqrt{2\rho}`, :math:`\rho`-zCDP, Bun & Steinke
    2016) or the exponential mechanism (:math:`\varepsilon^2/8`-zCDP, Cesar &
    Rogers 2021); zCDP composes additively and the total :math:`\rho` is
    converted with :math:`\varepsilon = \rho + 2\sqrt{\rho\log(1/\delta)}`.
    The zCDP budget is the largest :math:`\rho` whose conversion is the
    requested (epsilon, delta), split by ``budget_split``; a ``"dp"``
    initializer (``"ktuple"``) gets its share of (epsilon, delta) directly and
    composes with the rest by basic composition. Cores and Voronoi cells are
    disjoint, so each step's k blocks form one Gaussian mechanism. Only
    noisy counts are ever divided by.

    Parameters
    ----------
    {n_clusters}
    {shared}
    budget_split : dict, default=None
        Fractions of the budget, summing to 1, among ``"init"``,
        ``"fallback"`` (fallible initializers only), ``"core"``, ``"lloyd"``
        (with ``final_lloyd_step``) and ``"select"``. ``None`` means
        ``{"init": 0.6, "core": 0.3, "select": 0.1}`` (spec §8.3), with
        ``"init"`` halved into ``"init"`` and ``"fallback"`` for fallible
        initializers, and ``{"init": 0.5, "core": 0.25, "lloyd": 0.15,
        "select": 0.1}`` with ``final_lloyd_step=True``.
    n_core_steps : int, default=2
        Core steps; the thesis uses 1, a second removes the remaining bias of
        the truncated mean towards :math:`b_i` (spec §11, A7).
    core_radius_factor : float, default=1/3
        f in (0, 1/2): the core radius as a fraction of :math:`\hat D_i`
        (the thesis' 1/3). Values of 1/2 or more would break the disjointness
        the accounting relies on.
    final_lloyd_step : bool, default=False
        Add the full-Voronoi noisy Lloyd step of footnote 13 as a third
        candidate (its noise scales with :math:`\Lambda`; it usually costs
        more than the core candidate, spec §8.3 finding 5).

    Attributes
    ----------
    {attributes}
    core_noisy_counts_ : ndarray of shape (n_clusters,)
        Noisy core counts :math:`\tilde N_i` of the last core step, per row
        of ``initial_centers_``; private.
    core_fallback_ : ndarray of bool of shape (n_clusters,)
        True where the last core step kept the previous centre.

    See Also
    --------
    PrivateStableKMedian : The k-median version.
    skdpcluster.KTupleClusterer : Private k-tuple clustering.

    References
    ----------
    M. Shechner. Differentially Private Algorithms for Clustering with
    Stability Assumptions. M.Sc. thesis, Ben-Gurion University, 2021.
    M. Shechner, O. Sheffet, U. Stemmer. Private k-Means Clustering with
    Stability Assumptions. AISTATS 2020.

    Examples
    --------
    >>> from skdpcluster.cluster._stable import PrivateStableKMeans
    >>> from skdpcluster.datasets import make_separated_mixture
    >>> X, y = make_separated_mixture(50_000, n_clusters=4, n_features=4,
    ...                               separation=10, random_state=0)
    >>> est = PrivateStableKMeans(n_clusters=4, epsilon=1.0, delta=1e-6,
    ...                           data_radius=30.0, random_state=0).fit(X)
    >>> est.cluster_centers_.shape
    (4, 4)
    >>> est.privacy_spent_["epsilon"] <= 1.0
    True
    """.replace("{shared}", _SHARED_DOC.strip()).replace("{attributes}", _SHARED_ATTRIBUTES.strip())

    _parameter_constraints: dict = {
        **_PrivateStableBase._parameter_constraints,
        "n_core_steps": [Interval(Integral, 1, None, closed="left")],
        "core_radius_factor": [Interval(Real, 0, 0.5, closed="neither")],
        "final_lloyd_step": ["boolean"],
    }
    _CHUNKED_INPUT = True
    _FITTED_ATTRIBUTES = _PrivateStableBase._FITTED_ATTRIBUTES + ("core_fallback_",
                                                                  "core_noisy_counts_")

    def __init__(
        self,
        n_clusters=8,
        *,
        epsilon=1.0,
        delta=1e-6,
        initializer="grid",
        fallback="grid",
        base_estimator=None,
        beta=0.05,
        budget_split=None,
        n_core_steps=2,
        core_radius_factor=1 / 3,
        final_lloyd_step=False,
        selection="truncated",
        neighbouring="replace_one",
        estimate_cost=False,
        data_radius=None,
        data_center=None,
        accountant=None,
        random_state=None,
        n_jobs=None,
        verbose=0,
    ):
        _store_parameters(self, locals())

    def _default_split(self, fallible):
        if not self.final_lloyd_step:
            return super()._default_split(fallible)
        split = {"init": 0.5, "core": 0.25, "lloyd": 0.15, "select": 0.1}
        if fallible:
            split["fallback"] = split["init"] = 0.25
        return split

    def _refine(self, data, initial, rho_refine, budget, rng):
        """Core steps (and the optional full Lloyd step): the refined candidates."""
        centers, events = initial, []
        rho_step = rho_refine / self.n_core_steps
        for step in range(self.n_core_steps):
            centers, fallback, noisy = core_step(
                data, centers, radius_factor=self.core_radius_factor, rho=rho_step,
                neighbouring=self.neighbouring, rng=rng, label=f"stable/core_{step + 1}")
            events += noisy.events
        candidates = {"initial": initial, "core": centers}
        if self.final_lloyd_step:
            candidates["lloyd"], _, noisy_lloyd = lloyd_step(
                data, centers, data_radius=data.radius, rho=budget.rho_lloyd,
                neighbouring=self.neighbouring, rng=rng, label="stable/final_lloyd")
            events += noisy_lloyd.events
        diagnostics = {"core_noisy_counts_": noisy.counts, "core_fallback_": fallback}
        return candidates, events, diagnostics


# ---------------------------------------------------------------------------
# k-median
# ---------------------------------------------------------------------------


@shared_params
class PrivateStableKMedian(_PrivateStableBase):
    __doc__ = r"""Private-Stable-k-median (Shechner 2021, Section 5): private 1-medians of the cells of B.

    The thesis' algorithm (``spec/shechner_stable.md`` §4.2) in the form of
    spec §9.7, differentially private under the relation of
    ``neighbouring``:

    1. A private initializer gives k centres :math:`B` (the k-means
       initializers are used; spec §11, A21).
    2. The rows are split into the full Voronoi cells :math:`X_{b_i}` of B
       (not balls).
    3. In every cell, a private 1-median by noisy projected gradient descent
       (:func:`~skdpcluster.averaging.private_one_median`, the practical form
       of the thesis' private convex ERM tool, Theorem 5.1 of Bassily, Smith &
       Thakurta 2014): ``gd_iterations`` steps
       :math:`w \leftarrow \Pi_{B(b_i, R_i)}(w - \eta_t \tilde g/\tilde N)`,
       :math:`\eta_t = s R_i/\sqrt{t+1}`, on the domain
       :math:`B(b_i, \hat D_i/2)` (``median_domain="local"``) or
       :math:`B(0, \Lambda)` (``"global"``, the thesis), suffix-averaged;
       :math:`R_i` is the domain's radius and the descent starts at its
       centre. With ``gd_warm_start`` (and the local domain) it runs only
       the second half of the schedule from :math:`b_i`, already near the
       median (:func:`~skdpcluster.averaging.one_median.descent_schedule`).
       The cells are disjoint, so the k gradient sums of a step form one
       Gaussian mechanism (sensitivity 2 under replace-one).
    4. An exponential mechanism chooses between :math:`B` and the medians
       with the (truncated) k-median cost (thesis step 4; ``selection``).

    **Guarantee** (Lemma 5.3; spec §4.3). If X is :math:`\phi`-separated for
    k-median (:math:`\mathrm{OPT}^1_k \le \phi\,\mathrm{OPT}^1_{k-1}`) and
    :math:`\mathrm{cost}^1(B) \le w\,\mathrm{OPT}^1_k`, then

    .. math::

        \mathrm{cost}^1(\hat C) \le \Bigl(1 + \frac{8(w+1)\phi}{1 - (8w+9)\phi}\Bigr)
            \mathrm{OPT}^1_k + \tilde O\Bigl(\frac{k\Lambda\sqrt d}{\varepsilon}\Bigr).

    **Privacy** as for :class:`PrivateStableKMeans`: zCDP throughout (the
    1-median primitive's releases are Gaussian and it reports their zCDP
    :math:`\rho`), converted to (epsilon, delta) once.

    Parameters
    ----------
    {n_clusters}
    {shared}
    budget_split : dict, default=None
        Fractions summing to 1 among ``"init"``, ``"fallback"`` (fallible
        initializers only), ``"median"`` and ``"select"``. ``None`` means
        ``{"init": 0.5, "median": 0.4, "select": 0.1}`` (spec §9.1), with
        ``"init"`` halved into ``"init"`` and ``"fallback"`` for fallible
        initializers.
    gd_iterations : int, default=50
        Length T of every 1-median's step schedule (the gradient steps with
        ``gd_warm_start=False``).
    gd_warm_start : bool, default=True
        With ``median_domain="local"``, run only the steps
        :math:`t \ge \lfloor T/2 \rfloor` of the schedule from :math:`b_i`,
        on the whole budget, and average all but the first quarter of them
        (:func:`~skdpcluster.averaging.one_median.descent_schedule`): the
        initial centre is already near the median, and the first half's
        large steps carry the iterate away from it. Half the passes over the
        rows, at about the same k-median cost (measured:
        ``benchmarks/bench_median_schedule.py``). ``False``: all T steps,
        the second half averaged (spec §9.7). The ``"global"`` domain starts
        at the origin, not near a median, and always runs all T steps, as
        does the one-cell fit of ``n_clusters=1`` (from the centre of the
        data ball).
    gd_step_scale : float, default=0.5
        Step factor s, in (0, 1e6].
    median_domain : {"local", "global"}, default="local"
        ``"local"``: each median lives in :math:`B(b_i, \hat D_i/2)`, starts
        at :math:`b_i` (spec §11, A20), with step radius
        :math:`R_i = \hat D_i/2`; ``"global"``: :math:`B(0, \Lambda)`, the
        thesis' domain, from the origin, with step radius
        :math:`R_i = \Lambda`. Spec §9.7 takes
        :math:`R_i = 2\Lambda` with a start at :math:`b_i`, which can be
        :math:`2\Lambda` from a point of the domain; from the origin no
        point is farther than :math:`\Lambda`, the bound the step size
        :math:`s R_i/\sqrt{t+1}` of projected subgradient descent is
        scaled to.

    Attributes
    ----------
    {attributes}

    See Also
    --------
    PrivateStableKMeans : The k-means version.

    References
    ----------
    M. Shechner. Differentially Private Algorithms for Clustering with
    Stability Assumptions. M.Sc. thesis, Ben-Gurion University, 2021.

    Examples
    --------
    >>> from skdpcluster.cluster._stable import PrivateStableKMedian
    >>> from skdpcluster.datasets import make_separated_mixture
    >>> X, y = make_separated_mixture(50_000, n_clusters=4, n_features=4,
    ...                               separation=10, random_state=0)
    >>> est = PrivateStableKMedian(n_clusters=4, data_radius=30.0,
    ...                            random_state=0).fit(X)
    >>> est.cluster_centers_.shape
    (4, 4)
    >>> est.privacy_spent_["epsilon"] <= 1.0
    True
    """.replace("{shared}", _SHARED_DOC.strip()).replace("{attributes}", _SHARED_ATTRIBUTES.strip())

    _parameter_constraints: dict = {
        **_PrivateStableBase._parameter_constraints,
        "gd_iterations": [Interval(Integral, 1, None, closed="left")],
        "gd_step_scale": [Interval(Real, 0, MAX_STEP_SCALE, closed="right")],
        "gd_warm_start": ["boolean"],
        "median_domain": [StrOptions({"local", "global"})],
    }
    _REFINE_KEY = "median"
    _POWER = 1
    _ONE_CLUSTER = "median"
    _CHUNKED_INPUT = True
    _DEFAULT_SPLIT = {"init": 0.5, "median": 0.4, "select": 0.1}

    def __init__(
        self,
        n_clusters=8,
        *,
        epsilon=1.0,
        delta=1e-6,
        initializer="grid",
        fallback="grid",
        base_estimator=None,
        beta=0.05,
        budget_split=None,
        gd_iterations=50,
        gd_step_scale=0.5,
        gd_warm_start=True,
        median_domain="local",
        selection="truncated",
        neighbouring="replace_one",
        estimate_cost=False,
        data_radius=None,
        data_center=None,
        accountant=None,
        random_state=None,
        n_jobs=None,
        verbose=0,
    ):
        _store_parameters(self, locals())

    @staticmethod
    def _cell_medians(data, cell_labels, **parameters):
        """Private 1-medians of the cells: in memory on the sorted rows, else pass by pass."""
        if not isinstance(data, _ClippedData):
            return private_one_medians_of_rows(data, cell_labels, **parameters)
        counts, order = cell_order(cell_labels(data), len(parameters["centers"]))
        return one_medians_of_sorted(sorted_by_cell(data.X, order, data.n_threads), counts,
                                     n_threads=data.n_threads, **parameters)

    def _median_domains(self, initial, radius):
        """Centre and radius of every cell's domain (public: functions of B and Lambda)."""
        if self.median_domain == "global":
            return np.zeros_like(initial), np.full(len(initial), radius)
        gaps = center_gaps(initial)
        return initial, np.where(np.isinf(gaps), 2.0 * radius, gaps / 2.0)

    def _refine(self, data, initial, rho_refine, budget, rng):
        """Private 1-median of every Voronoi cell of B (spec §9.7 step 3)."""
        epsilon, delta = one_median_privacy(rho_refine)
        domain_centers, domain_radii = self._median_domains(initial, data.radius)
        cells = np.flatnonzero(domain_radii > 0)
        medians, call = initial.copy(), None
        if len(cells):
            compact = np.full(len(initial), len(cells))
            compact[cells] = np.arange(len(cells))
            medians[cells], call = self._cell_medians(
                data, functools.partial(_median_cells, initial=initial, compact=compact),
                centers=domain_centers[cells], radii=domain_radii[cells], epsilon=epsilon,
                delta=delta, rng=rng, n_iter=self.gd_iterations, step_scale=self.gd_step_scale,
                neighbouring=self.neighbouring,
                warm_start=self.gd_warm_start and self.median_domain == "local")
        medians = _project_onto_ball(medians, 0.0, data.radius)
        event = _medians_event(call, rho_refine, epsilon, delta, len(initial), self.neighbouring)
        return {"initial": initial, "median": medians}, [event], {}

