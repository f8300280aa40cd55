r"""LDP-Stable-k-Means (Shechner 2021, Section 6; ``spec/shechner_stable.md`` §5.3, §9.8).

:class:`LocalPrivateStableKMeans` simulates the protocol: every row is
randomized by its own user with :func:`~skdpcluster.local.user_randomizer`,
and the server only sees reports (:func:`~skdpcluster.local.server_aggregate`).
"""

import math
from numbers import Integral, Real

import numpy as np

from skdpcluster.averaging import _project_onto_ball
from skdpcluster.cluster._base import PrivateFit, PrivateFitPlan, _BasePrivateClusterer
from skdpcluster.cluster._stable import _canonical, _canonical_order, _store_parameters
from skdpcluster.cluster._stable_init import (
    GRID_CORESET_ERROR,
    GridInitializer,
    NoisyCells,
    center_gaps,
    nearest_centers,
)
from skdpcluster.exceptions import UtilityWarning
from skdpcluster.local._ldp import (
    AVERAGE_GAUSSIAN_SHARE,
    MAX_REPORT_FLOATS,
    AverageRound,
    BallRegions,
    CostRound,
    GridRegions,
    _frequency_noise_scale,
    average_report_size,
    simulate_round,
)
from skdpcluster.mechanisms import PrivacyEvent, _check_rr_resolution
from skdpcluster.utils._compat import Interval
from skdpcluster.utils._docstrings import shared_params
from skdpcluster.utils._progress import phase
from skdpcluster.utils._warnings import warn_user

__all__ = ["LocalPrivateStableKMeans"]

#: The rounds of the protocol, in order; each user takes part in exactly one.
ROUNDS = ("init", "core", "select")
#: Default shares of the users per round (spec §9.8).
DEFAULT_GROUPS = {"init": 0.45, "core": 0.45, "select": 0.10}


def split_users(n_users, fractions, rng):
    """Disjoint user groups of public sizes ``floor(f n)``, members drawn by public randomness.

    Returns
    -------
    dict of str to ndarray of int
        Row indices of every round's users (the last round gets the rest).
    """
    order = rng.permutation(n_users)
    sizes = [int(math.floor(fractions[name] * n_users)) for name in ROUNDS[:-1]]
    bounds = np.cumsum([0, *sizes, n_users - sum(sizes)])
    return {name: order[bounds[i]:bounds[i + 1]] for i, name in enumerate(ROUNDS)}


def random_projection(n_features, dim, rng):
    """A public, data-independent orthonormal basis of a random ``dim``-dimensional subspace."""
    if dim >= n_features:
        return np.eye(n_features)
    basis, _ = np.linalg.qr(rng.standard_normal((n_features, dim)))
    return basis


def heavy_cell_threshold(sigma_sum, sigma_count, n_cells, n_features):
    """Noisy count a grid cell of the init round must exceed to be kept (public).

    Above the count's noise over ``n_cells`` cells, and above the count at
    which the cell's coreset point has noise ``GRID_CORESET_ERROR`` of the
    bound, ``sigma_sum * sqrt(d) / count``; at least 1.
    """
    return max(sigma_count * (math.sqrt(2.0 * math.log(n_cells)) + 2.0),
               sigma_sum * math.sqrt(n_features) / GRID_CORESET_ERROR, 1.0)


def _largest_grid_size(n_features, dim):
    """Largest g whose init report, ``g**dim * n_features + 1`` floats, is within the cap."""
    g = int(((MAX_REPORT_FLOATS - 1) // n_features) ** (1.0 / dim))
    while average_report_size((g + 1) ** dim, n_features) <= MAX_REPORT_FLOATS:
        g += 1
    while g > 0 and average_report_size(g**dim, n_features) > MAX_REPORT_FLOATS:
        g -= 1
    return g


def _status(core_fallback):
    """``"fallback"`` when the core round accepted no region (released values decide it)."""
    return "fallback" if np.all(core_fallback) else "success"


def _per_user_guarantee(round_events):
    """One user's (epsilon, delta): the largest basic composition of one round's report."""
    costs = [(math.fsum(e.epsilon for e in events), math.fsum(e.delta for e in events))
             for events in round_events.values()]
    return max(c[0] for c in costs), max(c[1] for c in costs)


@shared_params
class LocalPrivateStableKMeans(_BasePrivateClusterer):
    r"""LDP-Stable-k-Means (Shechner 2021, Section 6): stable k-means in the local model.

    A simulation of the thesis' protocol (``spec/shechner_stable.md``
    §5.3) in the practical form of spec §9.8. Every row is a user who
    randomizes its own row (:func:`~skdpcluster.local.user_randomizer`); the
    server sees reports only (:func:`~skdpcluster.local.server_aggregate`).
    The users are split by public randomness into three disjoint groups,
    one per round, so that **every user sends exactly one message**:

    1. **init** (``groups["init"]`` of the users): LDP-AVG over a public grid
       of ``grid_size**p`` cells (:math:`p = \min(d, 3)`) in a public random
       projection; the server keeps the cells whose oracle count clears the
       noise, forms coreset points :math:`\Lambda\tilde S_c/\tilde n_c` and
       clusters them (weighted k-means++, post-processing): centres B.
    2. **core** (``groups["core"]``): LDP-AVG over the public balls
       :math:`R_i = B(b_i, f\hat D_i)`, :math:`\hat D_i = \min_{j\ne i}
       \|b_i - b_j\|` (thesis steps 2-4, centred and scaled as in
       :class:`~skdpcluster.PrivateStableKMeans`); an accepted region moves
       to :math:`b_i + r_i\,\mathrm{clip}_1(\tilde S_i/\tilde N_i)`: Ĉ.
    3. **select** (``groups["select"]``): each user reports its clipped
       cost difference :math:`\mathrm{clip}_{[-\tau,\tau]}(\mathrm{cost}_x(\hat C)
       - \mathrm{cost}_x(B))` with Gaussian noise; the server releases Ĉ if the
       noisy sum is at most 0, else B (thesis step 5).

    The protocol has **3 rounds** of interaction (``n_rounds_``): B must be
    public before round 2 and Ĉ before round 3 (sequential interactivity).

    **Privacy (local model, per user).** In LDP-AVG a user sends a block
    vector with Gaussian noise, :math:`(\varepsilon/2, \delta)`-DP in its row
    (L2 sensitivity 2, analytic calibration), and its region index by
    randomized response at :math:`\varepsilon/2`; the selection report is
    one Gaussian release at :math:`(\varepsilon, \delta)` (sensitivity
    :math:`2\tau`). Each user sends one report of one round, so every user's
    whole view is :math:`(\varepsilon, \delta)`-DP in its own row, whatever
    the other users and the server do (thesis Definition 6.1): the protocol is
    :math:`(\varepsilon, \delta)`-LDP. The rounds are not composed: they
    concern disjoint users. Because a replaced row changes one report only,
    the released centres are also :math:`(\varepsilon, \delta)`-DP in the
    central replace-one sense, and that is what the ``accountant`` is
    charged, once. This differs from the central estimators: there a trusted
    curator sees the rows; here nobody does, and the price is noise of order
    :math:`\sqrt n` instead of O(1) in the sums.

    **Guarantee** (Theorem 6.5, Corollary 6.6, Theorem 6.7): with an LDP
    initializer of approximation :math:`(v, t)`,
    :math:`\mathrm{cost}(C') \le (1 + O(\phi^2))\mathrm{OPT}_k + O(vt +
    (k\Lambda^2\sqrt{dn}/\varepsilon)\ln(dk/(\beta\delta)))`. The additive
    term grows like :math:`\sqrt n`, so the local model needs far more rows
    than the central one (spec §9.8: about :math:`10^7`-:math:`10^8` at
    :math:`\varepsilon = 1`, fewer for large :math:`\varepsilon`).

    **Deviations from the thesis.** The initializer is an LDP grid coreset
    in a public random projection (the thesis' Stemmer LDP k-means is
    impractical; spec §11, A24); the users are split into groups (A22); the
    frequency oracle is randomized response over the k + 1 regions. The
    thesis mentions a k-median version through LDP convex optimisation
    (Feldman et al.) without giving it, so there is no LDP k-median here.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters k (>= 1). ``n_clusters=1`` is the local private
        mean: one LDP-AVG round of all users over the data ball
        (``n_rounds_=1``, ``selected_="mean"``, ``initial_centers_=None``),
        each user sending one :math:`(\varepsilon, \delta)`-DP report.
    epsilon : float, default=1.0
        Each user's privacy parameter (local model), > 0.
    delta : float, default=1e-6
        Each user's delta, in (0, 1).
    data_radius : float
        Public bound :math:`\Lambda`: every user clips its row to
        :math:`B(\text{data\_center}, \Lambda)`. Required: in the local model
        no party sees the data, so nobody could compute it.
    data_center : array-like of shape (n_features,), default=None
        Public centre of the data ball; ``None`` means the origin.
    groups : dict, default=None
        Shares of the users per round, keys ``"init"``, ``"core"``,
        ``"select"`` summing to 1; ``None`` means ``{"init": 0.45, "core":
        0.45, "select": 0.10}`` (spec §9.8).
    grid_size : int, default=4
        Cells per axis of the init round's grid. An init report has
        ``grid_size**min(d, 3) * d + 1`` floats; above
        ``skdpcluster.local._ldp.MAX_REPORT_FLOATS`` (2**18) the fit is
        refused before any randomness, naming the largest allowed value (in
        d = 3, 44). The same cap bounds a core report, ``n_clusters * d + 1``.
    core_radius_factor : float, default=1/3
        f in (0, 1/2) of the core balls (the thesis' 1/3).
    accountant : BudgetAccountant, default=None
        Charged (epsilon, delta) once per fit; ``None`` uses the default.
    random_state : None, int or numpy.random.Generator, default=None
        Simulates the users' and the public randomness.
    {verbose}

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        The released centres, rows in lexicographic order.
    initial_centers_ : ndarray of shape (n_clusters, n_features)
        B, from the init round.
    candidate_centers_ : dict of str to ndarray
        ``"initial"`` (B) and ``"core"`` (Ĉ), rows in the order of B.
    selected_ : str
        ``"initial"`` or ``"core"``: the selection round's outcome.
    core_fallback_ : ndarray of bool of shape (n_clusters,)
        True where the core round kept :math:`b_i` (noisy count too small).
    n_rounds_ : int
        Rounds of interaction: 3.
    rounds_ : list of dict
        Per round: name, number of users (public) and one user's
        (epsilon, delta).
    status_ : {"success", "fallback", "failure"}
        ``"fallback"`` when the core round accepted none of its regions
        (every ``core_fallback_`` True; k = 1: the mean's noisy count failed
        its acceptance rule): the released centres are then B, unmoved (with
        fewer heavy grid cells than k, filler points near ``data_center``),
        or ``data_center`` for k = 1, and a
        :class:`~skdpcluster.NotSeparatedWarning` says so. A function of
        released noisy values, so free to report. ``"failure"`` only when a
        private step raised.
    quality_ : dict
        Released facts of the fit: ``"selected"`` (as ``selected_``),
        ``"n_heavy_cells"`` (heavy grid cells of the init round, a function
        of its noisy counts; ``None`` for k = 1), ``"heavy_cells_short"``
        (fewer than k: some initial centres are filler points) and
        ``"n_core_accepted"`` (core regions whose noisy mean was accepted).
    labels_ : ndarray of shape (n_samples,)
        Nearest released centre of every training row. **Not private**, and
        not something a real server could compute.
    privacy_spent_ : dict
        ``{"epsilon", "delta", "proven", "model"}``: each user's guarantee
        (``model="local, per user"``), which is also the central guarantee.
    privacy_ledger_ : list of PrivacyEvent
        One user's reports of every round (zero cost each, their per-user
        (epsilon, delta) in ``details``), then the ``"local_per_user"`` event
        carrying the per-user guarantee.
    data_center_ : ndarray of shape (n_features,) or None
        The public ``data_center`` (the origin when it is ``None``); ``None``
        after a fit whose private step failed (``"private_step_failed"`` in
        ``privacy_ledger_``), first fit or refit.
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)

    See Also
    --------
    skdpcluster.PrivateStableKMeans : The central-model algorithm.

    References
    ----------
    M. Shechner. Differentially Private Algorithms for Clustering with
    Stability Assumptions. M.Sc. thesis, Ben-Gurion University, 2021, §6.

    Examples
    --------
    >>> from skdpcluster.local import LocalPrivateStableKMeans
    >>> from skdpcluster.datasets import make_separated_mixture
    >>> X, _ = make_separated_mixture(200_000, n_clusters=2, n_features=2,
    ...                               separation=20, random_state=0)
    >>> est = LocalPrivateStableKMeans(n_clusters=2, epsilon=2.0, data_radius=30.0,
    ...                                random_state=0).fit(X)
    >>> est.n_rounds_, est.privacy_spent_["epsilon"]
    (3, 2.0)
    """

    _parameter_constraints: dict = {
        **{name: rule for name, rule in _BasePrivateClusterer._parameter_constraints.items()
           if name not in ("on_failure", "n_jobs")},
        "groups": [None, dict],
        "grid_size": [Interval(Integral, 2, None, closed="left")],
        "core_radius_factor": [Interval(Real, 0, 0.5, closed="neither")],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        epsilon=1.0,
        delta=1e-6,
        data_radius=None,
        data_center=None,
        groups=None,
        grid_size=4,
        core_radius_factor=1 / 3,
        accountant=None,
        random_state=None,
        verbose=0,
    ):
        _store_parameters(self, locals())

    #: Every row is randomized: the noise of a centre falls as ``1 / sqrt(n)``.
    _NOISE_RATE = 0.5

    #: No party sees a raw row, so nothing may score rows centrally
    #: (``fit_search_charged`` refuses a private choice over this estimator).
    _LOCAL_MODEL = True
    _FITTED_ATTRIBUTES = _BasePrivateClusterer._FITTED_ATTRIBUTES + (
        "candidate_centers_", "core_fallback_", "initial_centers_", "n_rounds_", "quality_",
        "rounds_", "selected_")

    def _noise_fraction(self, n_samples, n_features):
        r"""Public estimate of a released centre's noise, as a fraction of :math:`\Lambda`.

        From the public values only (n, d, k, epsilon, delta, the group
        shares, ``grid_size``, ``core_radius_factor``) and the real per-user
        noise :math:`\sigma` of a block vector (:attr:`AverageRound.sigma`,
        16.1 at epsilon = 1, delta = 1e-6; audit RB-05: the estimate used
        :math:`2/\varepsilon`, 8 times less). A cluster has about
        :math:`n_r/k` users of a round of :math:`n_r` users, and the
        largest of

        * *init*: :math:`0.3\,t/(n_{init}/k)`, with t the heavy-cell
          threshold of :func:`heavy_cell_threshold` for the noise of
          :math:`n_{init}` reports. When the sums' noise decides t, this is
          :math:`k\sigma\sqrt{d/n_{init}}`, the noise of the coreset point
          of a cell holding a whole cluster; above 0.3
          (``GRID_CORESET_ERROR``) not even that cell is heavy and the
          initial centres are filler points;
        * *core*: :math:`2f\,k\sigma\sqrt{d/n_{core}}`, the noise of a core
          mean of radius at most :math:`2f\Lambda`;
        * *one cluster*: :math:`\sigma\sqrt{d/n}`, the noise of the mean of
          all users over the data ball.

        An order of magnitude, not a bound. On the local benchmark
        (k = d = 4, default groups) it is 0.61 and 0.19 at n = 1e5 and 1e6,
        epsilon = 1 (cost 9.4 and 7.9 times the optimum), 0.096 at 4e6
        (1.44), and 0.053 at n = 1e6, epsilon = 4 (1.06).
        """
        # An epsilon too small for the index reports is refused first, by name (its
        # frequency-noise scale divides by p - q = 0: re-review V2).
        self._check_index_resolution(n_features)
        public_round = AverageRound("estimate", None, float(self.epsilon), float(self.delta),
                                    None, None)
        sigma, k = public_round.sigma, self.n_clusters
        if k == 1:
            return sigma * math.sqrt(n_features / n_samples)
        groups = self._groups()
        n_init, n_core = (max(math.floor(groups[name] * n_samples), 1) for name in ("init", "core"))
        n_cells = self.grid_size ** min(n_features, 3)
        threshold = heavy_cell_threshold(
            sigma * math.sqrt(n_init),
            _frequency_noise_scale(n_init, n_cells + 1, public_round.oracle_epsilon), n_cells,
            n_features)
        init = GRID_CORESET_ERROR * threshold / (n_init / k)
        core = 2.0 * self.core_radius_factor * k * sigma * math.sqrt(n_features / n_core)
        return max(init, core)

    def _check_n_clusters(self):
        """k = 1 is allowed: one LDP-AVG round of all users, see :meth:`_fit_one_cluster`."""

    # -- public plan --------------------------------------------------------------
    def _groups(self):
        groups = DEFAULT_GROUPS if self.groups is None else self.groups
        values = list(groups.values())
        if (set(groups) != set(ROUNDS)
                or not all(isinstance(v, Real) and math.isfinite(v) and v > 0 for v in values)
                or abs(math.fsum(values) - 1.0) > 1e-6):
            raise ValueError(
                f"groups must map each of {list(ROUNDS)} to a share > 0, the shares summing to "
                f"1, got groups={groups!r}.")
        return {name: float(groups[name]) for name in ROUNDS}

    def _needs_radius(self, data):
        """No central bound: a bound released from the pooled rows would not be local DP."""
        return False

    def _plan(self, X):
        if not self._public_radius_given():
            raise ValueError(
                f"{type(self).__name__} needs a public data_radius (and data_center): in the "
                "local model every user clips its own row to that ball, and no party sees the "
                "data to compute a bound. Pass data_radius=<a public bound on ||x - center||>.")
        center = self._resolve_center(X.shape[1])
        radius = self._checked_radius(float(self.data_radius))
        if self.n_clusters > 1:
            self._check_report_sizes(X.shape[1])
        self._check_index_resolution(X.shape[1])
        groups = {"mean": 1.0} if self.n_clusters == 1 else self._groups()
        plan = PrivateFitPlan(
            (float(self.epsilon), float(self.delta)),
            {"center": center, "radius": radius, "groups": groups},
            {"data_radius_": radius, "n_rounds_": len(groups)},
        )
        if self.verbose:
            print(f"[{type(self).__name__}] plan: {plan.values['groups']}")
        return plan

    def _check_index_resolution(self, n_features):
        """Refuse, before any randomness, an epsilon too small for the region-index reports.

        Each report's region index is randomized response at ``epsilon / 2``
        over the round's regions and "outside"
        (:func:`~skdpcluster.mechanisms.randomized_response`), which refuses
        an epsilon below about ``m * 2**-47``; inside the fit that refusal
        came after the block vectors' noise (a charged failure).
        """
        n_values = [2] if self.n_clusters == 1 else [
            self.grid_size**min(n_features, 3) + 1, self.n_clusters + 1]
        oracle_epsilon = (1.0 - AVERAGE_GAUSSIAN_SHARE) * float(self.epsilon)
        try:
            for m in n_values:
                _check_rr_resolution(oracle_epsilon, m)
        except ValueError:
            raise ValueError(
                f"epsilon={self.epsilon!r} is too small for the region-index reports "
                f"(randomized response at epsilon / 2 over up to {max(n_values)} values, whose "
                "53-bit draws cannot resolve it); use a larger epsilon.") from None

    def _check_report_sizes(self, n_features):
        """Refuse, before any randomness, reports above ``_ldp.MAX_REPORT_FLOATS`` floats.

        An init report has ``grid_size**min(d, 3) * d + 1`` floats and a core
        report ``n_clusters * d + 1``, all public; the simulation holds a
        batch of at least 64 of them (audit RB-03: ``grid_size=200`` in
        d = 3 asked for 12 GB and failed inside the private step).
        """
        dim = min(n_features, 3)
        if average_report_size(self.grid_size**dim, n_features) > MAX_REPORT_FLOATS:
            largest = _largest_grid_size(n_features, dim)
            fix = (f"use grid_size <= {largest}" if largest >= 2 else
                   f"no grid fits {n_features} features: reduce the dimension first (a public "
                   "projection)")
            raise ValueError(
                f"grid_size={self.grid_size}: each init-round user would send "
                f"grid_size**{dim} * {n_features} + 1 floats, above the cap of "
                f"{MAX_REPORT_FLOATS} floats per report; {fix}.")
        if average_report_size(self.n_clusters, n_features) > MAX_REPORT_FLOATS:
            raise ValueError(
                f"n_clusters={self.n_clusters}: each core-round user would send n_clusters * "
                f"{n_features} + 1 floats, above the cap of {MAX_REPORT_FLOATS} floats per "
                f"report; use n_clusters <= {(MAX_REPORT_FLOATS - 1) // n_features}.")

    # -- the protocol ---------------------------------------------------------------
    def _fit_private(self, X, plan, rng):
        if self.n_clusters == 1:
            return self._fit_one_cluster(X, plan, rng)
        values = plan.values
        public_rng, *round_rngs = rng.spawn(4)
        users = split_users(len(X), values["groups"], public_rng)
        common = {"epsilon": float(self.epsilon), "delta": float(self.delta),
                  "data_center": values["center"], "data_radius": values["radius"]}
        phase("round 1: init", users=len(users["init"]))
        initial, n_heavy, init_events = self._init_round(X[users["init"]], common, public_rng,
                                                         round_rngs[0])
        phase("round 2: core", users=len(users["core"]))
        core, fallback, core_events = self._core_round(X[users["core"]], initial, common,
                                                       round_rngs[1])
        phase("round 3: select", users=len(users["select"]))
        chosen, select_events = self._select_round(X[users["select"]], initial, core, common,
                                                   round_rngs[2])
        round_events = {"init": init_events, "core": core_events, "select": select_events}
        candidates = {"initial": initial, "core": core}
        order = _canonical_order(candidates[chosen])
        center = values["center"]
        attributes = {
            "initial_centers_": initial + center,
            "candidate_centers_": {name: c + center for name, c in candidates.items()},
            "selected_": chosen,
            "core_fallback_": fallback,
            "rounds_": [{"name": name, "n_users": len(users[name]),
                         "epsilon": math.fsum(e.epsilon for e in round_events[name]),
                         "delta": math.fsum(e.delta for e in round_events[name])}
                        for name in ROUNDS],
            "labels_": np.argsort(order)[nearest_centers(X - center, candidates[chosen])[0]],
            "quality_": {"selected": chosen, "n_heavy_cells": n_heavy,
                         "heavy_cells_short": n_heavy < self.n_clusters,
                         "n_core_accepted": int(np.count_nonzero(~fallback))},
        }
        return PrivateFit(candidates[chosen][order] + center, True,
                          self._ledger(round_events), attributes=attributes,
                          status=_status(fallback))

    def _fit_one_cluster(self, X, plan, rng):
        r"""k = 1: the local private mean, one LDP-AVG round of all users (thesis Claim 6.4).

        Every user sends one LDP-AVG report over the single public region
        :math:`B(\mu, \Lambda)` (the data ball, so no row is outside it): its
        scaled offset :math:`(x - \mu)/\Lambda` as a noisy block vector and
        its region index by randomized response, :math:`(\varepsilon,
        \delta)`-DP in its row as in the k-cluster rounds. The server
        releases :math:`\mu + \Lambda\,\mathrm{clip}_1(\tilde S/\tilde N)`,
        or :math:`\mu` when the noisy count fails the acceptance rule
        (post-processing). One round, one report per user.
        """
        values = plan.values
        common = {"epsilon": float(self.epsilon), "delta": float(self.delta),
                  "data_center": values["center"], "data_radius": values["radius"]}
        phase("round 1: mean", users=len(X))
        origin = np.zeros((1, X.shape[1]))
        mean, fallback, events = self._core_round(X, origin, common, rng, name="mean",
                                                  radii=np.array([values["radius"]]))
        attributes = {
            "initial_centers_": None, "candidate_centers_": {"mean": mean + values["center"]},
            "selected_": "mean", "core_fallback_": fallback,
            "rounds_": [{"name": "mean", "n_users": len(X),
                         "epsilon": math.fsum(e.epsilon for e in events),
                         "delta": math.fsum(e.delta for e in events)}],
            "labels_": np.zeros(len(X), dtype=np.intp),
            "quality_": {"selected": "mean", "n_heavy_cells": None, "heavy_cells_short": None,
                         "n_core_accepted": int(np.count_nonzero(~fallback))},
        }
        return PrivateFit(mean + values["center"], True, self._ledger({"mean": events}),
                          attributes=attributes, status=_status(fallback))

    def _ledger(self, round_events):
        """One report per round at zero cost, then the per-user guarantee (the fit's charge)."""
        events = [PrivacyEvent(
            event.mechanism, 0.0, 0.0, event.sensitivity, event.scale, label=event.label,
            details={**event.details, "per_user_epsilon": event.epsilon,
                     "per_user_delta": event.delta, "round": name,
                     "accounted_in": "local/per_user_guarantee"})
            for name, round_list in round_events.items() for event in round_list]
        epsilon, delta = _per_user_guarantee(round_events)
        events.append(PrivacyEvent(
            "local_per_user", epsilon, delta, label="local/per_user_guarantee",
            details={"model": "local model, per user",
                     "composition": "each user sends one report in one round; reports of "
                                    "different users are independent (disjoint groups)",
                     "rounds": list(round_events)}))
        return events

    def _init_round(self, X, common, public_rng, rng):
        """Round 1: LDP-AVG over a public grid; server-side coreset clustering gives B.

        Returns B, the number of heavy cells (a function of the released noisy
        counts) and one report's events.
        """
        n_features, radius = X.shape[1], common["data_radius"]
        projection = random_projection(n_features, min(n_features, 3), public_rng)
        public_round = AverageRound("init", GridRegions(projection, self.grid_size, radius),
                                    **common)
        estimate, events = simulate_round(X, public_round, rng)
        threshold = heavy_cell_threshold(estimate.sigma_sum, estimate.sigma_count,
                                         len(estimate.counts), n_features)
        heavy = estimate.counts > threshold
        weights = estimate.counts[heavy]
        points = _project_onto_ball(radius * estimate.sums[heavy] / weights[:, None], 0.0,
                                    radius)
        # Too few heavy cells is reported after the fit from the released count (_warn_after_fit,
        # _fallback_message): a warning inside the round, made an error, failed a charged fit.
        centers = GridInitializer(warn_few_heavy_cells=False)._cluster_coreset(
            points, weights, self.n_clusters, radius, rng)
        return _canonical(_project_onto_ball(centers, 0.0, radius)), int(heavy.sum()), events

    def _core_round(self, X, initial, common, rng, name="core", radii=None):
        """Round 2: LDP-AVG over the balls B(b_i, f D_i) (or public ``radii``); accepted regions
        move to their mean."""
        if radii is None:
            gaps = center_gaps(initial)
            radii = np.where(np.isinf(gaps), 2.0 * common["data_radius"],
                             self.core_radius_factor * gaps)
        public_round = AverageRound(name, BallRegions(initial, radii), **common)
        estimate, events = simulate_round(X, public_round, rng)
        noisy = NoisyCells(estimate.sums, estimate.counts, estimate.sigma_sum,
                           estimate.sigma_count, [])
        accepted = noisy.accepted() & (radii > 0)
        shift = _project_onto_ball(noisy.means(), 0.0, 1.0) * radii[:, None]
        moved = _project_onto_ball(initial + shift, 0.0, common["data_radius"])
        return np.where(accepted[:, None], moved, initial), ~accepted, events

    def _select_round(self, X, initial, core, common, rng):
        """Round 3: noisy sum of clipped cost differences; Ĉ if it is at most 0, else B."""
        tau = (float(np.median(center_gaps(initial))) / 2.0) ** 2
        if not (math.isfinite(tau) and tau > 0):
            tau = (common["data_radius"] / self.n_clusters) ** 2
        public_round = CostRound("select", core, initial, tau, **common)
        estimate, events = simulate_round(X, public_round, rng)
        return ("core" if estimate.total <= 0 else "initial"), events

    def _commit(self, plan, result, spent):
        super()._commit(plan, result, spent)
        self.privacy_spent_["model"] = "local, per user"

    def _warn_after_fit(self):
        """Warn when the init round's released heavy cells are fewer than the clusters.

        Only for ``status_="success"``: a fallback says it in its own warning
        (:meth:`_fallback_message`). A function of released noisy counts: free.
        """
        quality = getattr(self, "quality_", None) or {}
        if quality.get("heavy_cells_short") and self.status_ == "success":
            n_heavy, k = quality["n_heavy_cells"], self.n_clusters
            warn_user(
                f"{type(self).__name__}: the init round found {n_heavy} heavy grid cells for "
                f"n_clusters={k} (a function of its released noisy counts), so {k - n_heavy} "
                "initial centres started as filler points near data_center, and some released "
                "centres are likely still there (quality_['heavy_cells_short']). The local model "
                "needs many more users, or a larger epsilon.", UtilityWarning)

    def _fallback_message(self):
        """Say that no core region was accepted: the released centres are B (or mu), unmoved."""
        quality = self.quality_
        if self.n_clusters == 1:
            what = ("the noisy count of the mean round failed its acceptance rule: the released "
                    "centre is data_center")
        else:
            what = (f"the core round accepted none of the {self.n_clusters} regions: the released "
                    f"centres are the init round's B, from {quality['n_heavy_cells']} heavy grid "
                    f"cells for n_clusters={self.n_clusters}"
                    + (" (the others are filler points near data_center)"
                       if quality["heavy_cells_short"] else ""))
        return (f"{type(self).__name__}: {what} (status_='fallback', a function of released "
                "noisy values). The local model needs many more users, or a larger epsilon.")
