r"""KTupleClusterer: private k-tuple clustering (Cohen et al., ICML 2021) as a scikit-learn estimator."""

import math
import warnings
from numbers import Integral, Real

import numpy as np
from sklearn.base import clone
from sklearn.cluster import KMeans
from sklearn.metrics import pairwise_distances_argmin
from sklearn.utils.validation import validate_data

from skdpcluster._tuples import allocate_blocks, generate_tuples_of_rows
from skdpcluster.accountant import BudgetAccountant
from skdpcluster.cluster._base import PrivateFit, PrivateFitPlan, _BasePrivateClusterer, _restore_on_error
from skdpcluster.exceptions import InsufficientDataError
from skdpcluster.mechanisms import PrivacyEvent
from skdpcluster.ktuple import min_tuples
from skdpcluster.averaging import _project_onto_ball
from skdpcluster.ktuple._framework import canonical_order, check_tuple_parameters, conditioning_event
from skdpcluster.ktuple.averages import AVERAGES_SEPARATION, per_cluster_budget, private_k_averages
from skdpcluster.ktuple.located import (
    locate,
    locate_and_average,
    min_located_tuples,
    plan_located_budget,
    unspent_events,
    zcdp_composite_event,
)
from skdpcluster.ktuple.noisy_centers import _check_modes as check_noisy_centers_modes
from skdpcluster.ktuple.noisy_centers import default_separation, private_k_noisy_centers
from skdpcluster.ktuple.partition import _outer_ell, compute_m_eps1
from skdpcluster.utils._compat import HasMethods, Interval, StrOptions, fit_context

__all__ = ["KTupleClusterer"]

#: Rows per tuple that ``n_tuples="auto"`` aims for with ``method="averages"``
#: (the paper's "about 15 k samples" per tuple, spec §10.1).
AVERAGES_ROWS_PER_CLUSTER = 15
#: Resolution of the private averages relative to the data radius when ``r_min=None``.
DEFAULT_R_MIN_FRACTION = 1e-4
#: Rows per cluster in one block that ``n_tuples="auto"`` aims for with ``method="located"``.
LOCATED_ROWS_PER_CLUSTER = 5
#: Core steps on the raw rows after ``method="located"``, and their radius factor (1/3, as
#: :class:`~skdpcluster.PrivateStableKMeans`).
LOCATED_CORE_STEPS, LOCATED_CORE_RADIUS_FACTOR = 2, 1.0 / 3.0


class KTupleClusterer(_BasePrivateClusterer):
    r"""Differentially private k-tuple clustering (Cohen et al., ICML 2021).

    The rows are split at random into ``n_tuples`` disjoint blocks; a
    non-private ``base_estimator`` is fitted on every block and its k centres
    form one k-tuple. The tuples are combined privately:

    * ``method="located"`` (issue #13; :mod:`skdpcluster.ktuple.located`):
      locate the k groups of tuple points on a private grid (AboveThreshold
      chooses the width, a thresholded Gaussian histogram the cells), then
      one private Lloyd step and two ball-restricted core steps of
      :class:`~skdpcluster.PrivateStableKMeans` on the raw rows (on
      :meth:`fit_tuples`, clipped Gaussian averages of the tuple points
      instead). Noise scales with the cluster, not the domain: it needs
      about :math:`\tau \approx 150`-:math:`350` tuples
      (:func:`~skdpcluster.ktuple.located.min_located_tuples`) and groups
      of tuple points that fit in grid cells far apart, and the public
      ``data_radius``.

    The paper's methods first run a private test (PrivateTestPartition,
    Figure 2) that almost all tuples agree, i.e. that they are partitioned
    by Delta-far balls; if so:

    * ``method="noisy_centers"``: PrivatekNoisyCenters (Figure 4) releases the
      centres of one agreeing tuple with Gaussian noise proportional to a
      private estimate of their spacing. Needs few tuples (the minimum
      :func:`~skdpcluster.ktuple.min_tuples`) but very well separated tuples
      (about :math:`2\Delta + 2`-far, with :math:`\Delta` in the hundreds).
    * ``method="averages"``: PrivatekAverages (Figure 3) averages each cluster
      of tuple points privately (Proposition 2.9). Needs only 16-far tuples
      but many of them (about :math:`5\cdot 10^5\,k\,d`).

    Each row affects one block, so a replace-one change of the data changes
    one tuple, and the guarantee of the tuple algorithm carries over to the
    rows.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters k. The tuple path needs k >= 2; ``n_clusters=1``
        (with the fallback on) runs the fallback on the whole budget, a
        private mean (``status_="fallback"``).
    method : {"auto", "located", "noisy_centers", "averages"}, default="auto"
        The private aggregation of the tuples. ``"auto"`` is ``"located"``
        when ``data_radius`` is given and ``"noisy_centers"`` (which needs no
        bound) otherwise, so that the default fit never computes a bound from
        the data. ``benchmarks/bench_ktuple_practical.py``: with the public
        radius, ``"located"`` passes where ``"noisy_centers"`` fails (k = 4,
        d = 4, means 10·e_i apart, n = 10^4).
    epsilon : float, default=1.0
        Privacy parameter of the whole fit.
    delta : float, default=1e-6
        Privacy parameter of the whole fit, in (0, 1).
    beta : float, default=0.05
        Failure probability of the private test on well-separated data.
    base_estimator : estimator, default=None
        Non-private clusterer cloned per block, with ``n_clusters`` (or
        ``n_components``) set to ``n_clusters``; it must expose
        ``cluster_centers_`` or ``means_`` after ``fit``. ``None`` uses
        ``KMeans(init="k-means++", n_init=1)``, solved by a fast batched path.
    n_tuples : int or "auto", default="auto"
        Number of blocks. ``"auto"`` uses the minimum admissible number for
        ``"noisy_centers"``, ``max(minimum, n_samples // (15 k))`` for
        ``"averages"``, and for ``"located"`` ``n_samples // (5 k)`` (5
        rows per cluster in a block) within ``[min_located_tuples,
        n_samples // k]``; fewer rows raise :class:`InsufficientDataError`.
    separation : float, default=None
        Delta of ``"noisy_centers"`` (> 6); ignored by ``"located"``. ``None``
        uses the paper's
        :math:`(10/\varepsilon)\,k\log(k/\delta)\sqrt{\log(k/\beta)}`.
        ``"averages"`` always uses 7.
    data_radius : float, default=None
        Public bound Lambda on ``||x - data_center||``, used by
        ``"located"`` and ``"averages"`` (rows outside are projected onto the
        ball). ``None`` (the default) releases a centre and a radius privately
        on 10% of (epsilon, delta) (:mod:`skdpcluster.bounds`), stored in
        ``data_center_`` and ``data_radius_``; ``"data"`` computes the exact
        bound from the data (not private: a
        :class:`~skdpcluster.exceptions.PrivacyLeakWarning`, the bound is used
        but not stored, ``data_radius_`` is ``nan``, and
        ``privacy_spent_["proven"]`` is False). :meth:`fit_tuples` keeps the
        exact bound of the tuples for ``None`` (with the warning). At most 1e100.
    data_center : array-like of shape (n_features,), default=None
        Public centre of the data ball; ``None`` means the origin.
    r_min : float, default=None
        Resolution of ``"averages"``; ``None`` means ``1e-4 * data_radius``.
    accounting : {"corrected", "paper"}, default="corrected"
        ``"corrected"`` uses the ell for which Claim 4.5 is proven;
        ``"paper"`` reproduces Definition 4.4 and then ``privacy_spent_``
        reports the larger delta that can actually be proven.
    lambda_mechanism : {"log_laplace", "paper"}, default="log_laplace"
        See :func:`~skdpcluster.ktuple.noisy_centers.private_k_noisy_centers`;
        ``"paper"`` is a reproduction mode whose privacy is not proven (its
        measured loss exceeds the nominal epsilon; review, finding 4): it is
        refused unless ``allow_unproven=True``.
    gaussian_calibration : {"analytic_joint", "classical"}, default="analytic_joint"
        Noise calibration of ``"noisy_centers"``.
    allow_unproven : bool, default=False
        A reproduction switch: ``True`` allows ``lambda_mechanism="paper"``
        (with ``method="noisy_centers"``). The fit then charges the nominal
        cost, marks the events of that step ``details["proven"] = False``,
        reports ``privacy_spent_["proven"] = False`` and emits an
        :class:`~skdpcluster.exceptions.UnprovenPrivacyWarning`. Never use it
        with an accountant whose total must be a guarantee.
    fallback_share : "auto" or float in [0, 1), default="auto"
        Share of (epsilon, delta) reserved for the general method,
        :class:`~skdpcluster.PrivateStableKMeans` (on the same bound), run
        when the tuple path's private test fails (``status_="fallback"``).
        The share is decided from public values and charged whatever the
        outcome (on success as an unused ``"fallback_share_unused"`` event),
        so the charge never depends on the test. When ``n_samples`` is too
        small for the tuple path at its share (a public fact), or
        ``n_clusters=1``, the whole budget goes to the fallback instead of
        raising :class:`~skdpcluster.InsufficientDataError`;
        ``fallback_info_`` then says how many rows the tuple path needs.
        ``"auto"``: no reserved share when the tuple path can run on the
        whole budget (a failed test then releases nothing,
        ``status_="failure"``: a reserved 10% measurably hurts the tuple path
        near its smallest n), the whole budget to the fallback when it
        cannot. ``0`` turns the fallback off: too few rows then raise.
    on_failure : {"warn", "raise"}, default="warn"
        When the private test fails: ``"warn"`` releases the fallback
        (``status_="fallback"``) or, with ``fallback_share=0``, sets
        ``status_="failure"`` and ``cluster_centers_=None``, and emits a
        :class:`NotSeparatedWarning`; ``"raise"`` raises
        :class:`NotSeparatedError` and leaves the previous fitted state.
        Either way the budget is charged.
    accountant : BudgetAccountant, default=None
        Charged with what every fit spends; ``None`` uses the default one.
    random_state : None, int or numpy.random.Generator, default=None
        ``None`` draws fresh OS entropy; an int or Generator makes the fit
        reproducible.
    n_jobs : int, default=None
        Parallel jobs for the blocks (joblib; any backend, including Dask).
    verbose : int, default=0
        Print the public plan when > 0.

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features) or None
        The private centres, rows in lexicographic order; ``None`` after a
        failed test. A differentially private release.
    status_ : {"success", "fallback", "failure"}
        ``"success"``: the private test passed (for ``"located"``: every
        step found k groups) and the tuple path released; ``"fallback"``:
        the tuple path could not run (too few rows) or its test failed, and
        the fallback released; ``"failure"``: nothing released
        (``fallback_share=0`` only). A private release.
    fallback_info_ : dict or None
        After ``status_="fallback"``: ``"reason"`` (public text),
        ``"share"`` of the budget it ran on and ``"stable_status"`` of
        the fallback fit; ``None`` otherwise.
    method_ : str
        The method used (``"auto"`` resolved).
    located_info_ : dict or None
        ``"located"`` only: the released grid ``width``, the number of
        released cells, the dimension of the location space and the
        ``failed_step`` (``None`` after a success). Private releases.
    labels_ : ndarray of shape (n_samples,)
        Nearest released centre of every training row (-1 after a failure).
        **Not private**: a function of the training data.
    n_tuples_ : int
        Number of tuples used.
    m_, ell_ : int, float
        Public parameters of the test (Definitions 4.1 and 4.4); ``None``
        and ``nan`` for ``"located"``.
    separation_ : float
        The Delta used.
    data_radius_ : float
        The bound used by ``"averages"`` (private when ``data_radius=None``;
        ``nan`` for ``"noisy_centers"``).
    data_center_ : ndarray of shape (n_features,)
        The centre of the bound, set only when ``data_radius=None`` released
        it (private; the origin when the rows were too few to locate it).
        With ``"data"`` the exact bound is used but not stored (``data_radius_``
        is ``nan``) and ``privacy_spent_["proven"]`` is False. At most 1e100.
    privacy_spent_ : dict
        ``{"epsilon", "delta", "proven"}`` charged to the accountant; never
        more than requested in the default modes.
    privacy_ledger_ : list of PrivacyEvent
        Every release and theorem-level cost of the fit.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during fit, when ``X`` has string column names.

    See Also
    --------
    skdpcluster.ktuple.min_tuples : Minimum number of tuples for a budget.

    References
    ----------
    E. Cohen, H. Kaplan, Y. Mansour, U. Stemmer, E. Tsfadia. Differentially-Private
    Clustering of Easy Instances. ICML 2021.

    Examples
    --------
    >>> from skdpcluster import KTupleClusterer
    >>> from skdpcluster.datasets import make_separated_mixture
    >>> X, y = make_separated_mixture(2_000_000, n_clusters=2, n_features=1,
    ...                               separation=512, random_state=0)
    >>> est = KTupleClusterer(n_clusters=2, epsilon=1.0, delta=1e-6, random_state=0).fit(X)
    >>> est.status_
    'success'
    >>> est.privacy_spent_["epsilon"] <= 1.0
    True
    """

    #: ``fit`` accepts Dask input: tuples from blocks inside the chunks, row passes map-reduced.
    _CHUNKED_INPUT = True

    _parameter_constraints: dict = {
        **_BasePrivateClusterer._parameter_constraints,
        "method": [StrOptions({"auto", "located", "noisy_centers", "averages"})],
        "beta": [Interval(Real, 0, 1, closed="neither")],
        "base_estimator": [None, HasMethods(["fit"])],
        "n_tuples": [StrOptions({"auto"}), Interval(Integral, 1, None, closed="left")],
        "separation": [None, Interval(Real, 6, None, closed="neither")],
        "r_min": [None, Interval(Real, 0, None, closed="neither")],
        "accounting": [StrOptions({"corrected", "paper"})],
        "lambda_mechanism": [StrOptions({"log_laplace", "paper"})],
        "gaussian_calibration": [StrOptions({"analytic_joint", "classical"})],
        "allow_unproven": ["boolean"],
        "fallback_share": [StrOptions({"auto"}), Interval(Real, 0, 1, closed="left")],
    }

    def __init__(
        self,
        n_clusters=8,
        *,
        method="auto",
        epsilon=1.0,
        delta=1e-6,
        beta=0.05,
        base_estimator=None,
        n_tuples="auto",
        separation=None,
        data_radius=None,
        data_center=None,
        r_min=None,
        accounting="corrected",
        lambda_mechanism="log_laplace",
        gaussian_calibration="analytic_joint",
        allow_unproven=False,
        fallback_share="auto",
        on_failure="warn",
        accountant=None,
        random_state=None,
        n_jobs=None,
        verbose=0,
    ):
        self.n_clusters = n_clusters
        self.method = method
        self.epsilon = epsilon
        self.delta = delta
        self.beta = beta
        self.base_estimator = base_estimator
        self.n_tuples = n_tuples
        self.separation = separation
        self.data_radius = data_radius
        self.data_center = data_center
        self.r_min = r_min
        self.accounting = accounting
        self.lambda_mechanism = lambda_mechanism
        self.gaussian_calibration = gaussian_calibration
        self.allow_unproven = allow_unproven
        self.fallback_share = fallback_share
        self.on_failure = on_failure
        self.accountant = accountant
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    def _check_n_clusters(self):
        """k = 1 is allowed when the fallback is on: the whole budget then goes to it."""
        if self.fallback_share == 0:
            super()._check_n_clusters()

    # -- public plan --------------------------------------------------------------
    def _method(self):
        """``method`` with ``"auto"`` resolved: ``"located"``.

        ``"located"`` needs a bound Lambda: a public ``data_radius``, or with
        ``data_radius=None`` the bound released privately first
        (:mod:`skdpcluster.bounds`).
        """
        if self.method != "auto":
            return self.method
        return "located"

    def _resolved_separation(self):
        if self._method() == "averages":
            return AVERAGES_SEPARATION
        if self.separation is not None:
            return float(self.separation)
        return default_separation(self.n_clusters, self.epsilon, self.delta, self.beta)

    def _resolved_n_tuples(self, n_samples):
        if self.n_tuples != "auto":
            return int(self.n_tuples)
        if self._method() == "located":
            minimum = min_located_tuples(self.n_clusters, self.epsilon, self.delta, on_rows=True)
            wanted = n_samples // (LOCATED_ROWS_PER_CLUSTER * self.n_clusters)
            return min(max(minimum, wanted), n_samples // self.n_clusters)
        minimum = min_tuples(self.epsilon, self.delta, self.beta, self.accounting)
        if self._method() == "averages":
            return max(minimum, n_samples // (AVERAGES_ROWS_PER_CLUSTER * self.n_clusters))
        return minimum

    def _cost(self, n_tuples):
        """The (epsilon, delta) the fit charges: the request, or the proven one in "paper" accounting."""
        if self.accounting == "corrected":
            return float(self.epsilon), float(self.delta)
        m, eps1 = compute_m_eps1(n_tuples, self.epsilon / 2, self.delta / 4, self.beta / 2)
        paper = conditioning_event(self.delta, {"m": m, "eps1": eps1}, "paper")
        return self.epsilon + paper.epsilon, self.delta / 4 + paper.delta

    def _check_unproven_modes(self):
        """Refuse a mode whose privacy is not proven unless ``allow_unproven=True`` (review, finding 4)."""
        if (self.method == "noisy_centers" and self.lambda_mechanism == "paper"
                and not self.allow_unproven):
            raise ValueError(
                "lambda_mechanism='paper' reproduces Figure 4 of Cohen et al. (2021) as printed; "
                "its privacy is not proven (its measured loss exceeds the nominal epsilon, see "
                "the k-tuple review, finding 4), so it would overspend any accountant it is "
                "charged to. Use lambda_mechanism='log_laplace' (the default), or set "
                "allow_unproven=True to reproduce the paper (the fit then reports proven=False)."
            )

    def _check_aggregation_parameters(self, n_tuples):
        """The aggregation's own checks of public values, run here so that they raise before any
        randomness (inside the private step they would end the fit as a charged failure)."""
        if self.method == "averages":
            ell_value = _outer_ell(n_tuples, self.epsilon, self.delta, self.beta, self.accounting)
            per_cluster_budget(self.epsilon, self.delta, self.n_clusters, ell_value)
        else:
            check_noisy_centers_modes(self.lambda_mechanism, self.gaussian_calibration,
                                      self.n_clusters, self.epsilon)

    def _plan_tuples(self, n_tuples, n_features):
        """Checks and attributes shared by ``fit`` and ``fit_tuples`` (public values only)."""
        self._check_unproven_modes()
        if self._method() == "located":
            return self._plan_located(n_tuples, n_features)
        separation = self._resolved_separation()
        shape_probe = np.zeros((n_tuples, self.n_clusters, 1))
        check_tuple_parameters(
            shape_probe, self.epsilon, self.delta, self.beta, separation, self.accounting
        )
        self._check_aggregation_parameters(n_tuples)
        center = self._resolve_center(n_features)
        m, _ = compute_m_eps1(n_tuples, self.epsilon / 2, self.delta / 4, self.beta / 2)
        attributes = {
            "n_tuples_": n_tuples,
            "m_": m,
            "ell_": _outer_ell(n_tuples, self.epsilon, self.delta, self.beta, self.accounting),
            "separation_": separation,
            "located_info_": None,
            "method_": self._method(),
        }
        return PrivateFitPlan(self._cost(n_tuples), {"center": center}, attributes)

    def _plan_located(self, n_tuples, n_features):
        """The public plan of ``method="located"``: enough tuples for its histogram threshold."""
        needed = min_located_tuples(self.n_clusters, self.epsilon, self.delta, on_rows=True)
        if n_tuples < needed:
            raise InsufficientDataError(
                f"method='located' needs at least {needed} tuples at n_clusters="
                f"{self.n_clusters}, epsilon={self.epsilon}, delta={self.delta} (below that no "
                f"cluster can pass the histogram threshold), got {n_tuples}; with n_tuples='auto' "
                f"that is at least {needed * self.n_clusters} rows. Use more data or a larger "
                "epsilon/delta."
            )
        attributes = {"n_tuples_": n_tuples, "m_": None, "ell_": np.nan, "separation_": np.nan,
                      "method_": "located"}
        cost = (float(self.epsilon), float(self.delta))
        return PrivateFitPlan(cost, {"center": self._resolve_center(n_features)}, attributes)

    def _plan(self, X):
        """The public plan: the tuple path on ``1 - fallback_share`` and the fallback on the rest.

        Which parts run is decided from public values only: when ``n_samples``
        is too small for the tuple path at its share of the budget, the
        whole budget goes to the fallback (:class:`PrivateStableKMeans`).
        """
        share, reason = self._resolved_fallback_share(X)
        if share == 0.0:
            plan = self._plan_tuple_path(X)
            plan.attributes["fallback_info_"] = None
            return plan
        main = clone(self).set_params(epsilon=(1.0 - share) * self.epsilon,
                                      delta=(1.0 - share) * self.delta, fallback_share=0.0)
        if share >= 1.0:
            main, main_plan = None, None
        elif self.n_clusters < 2:
            main, main_plan, share = None, None, 1.0
            reason = ("n_clusters=1: the tuple path separates pairs of centres; one cluster is "
                      "the general method's private mean")
        else:
            try:
                main_plan = main._plan_tuple_path(X)
            except InsufficientDataError as error:
                main, main_plan, share, reason = None, None, 1.0, str(error)
        radius = None
        if main_plan is not None and np.isfinite(main_plan.values["data_radius"]):
            radius = main_plan.values["data_radius"]
        elif self._public_radius_given():
            radius = float(self.data_radius)
        fallback = plan_fallback(X, self.n_clusters, share * self.epsilon, share * self.delta,
                                 radius, self.data_center, self.n_jobs)
        cost = (share * self.epsilon, share * self.delta)
        if main_plan is not None:
            cost = (main_plan.cost[0] + cost[0], main_plan.cost[1] + cost[1])
            attributes = dict(main_plan.attributes)
        else:
            attributes = {"n_tuples_": 0, "m_": None, "ell_": np.nan, "separation_": np.nan,
                          "located_info_": None, "method_": self._method(),
                          "data_radius_": fallback.data_radius if fallback.data_radius else np.nan}
        values = {"main": main, "main_plan": main_plan, "fallback": fallback,
                  "fallback_reason": reason, "fallback_share": share}
        unproven = {} if main_plan is None else dict(main_plan.unproven)
        return PrivateFitPlan(cost, values, attributes, unproven)

    def _resolved_fallback_share(self, X):
        """``fallback_share`` with ``"auto"`` resolved from public values, and the reason a
        fallback would run."""
        reason = "the private test of the tuple path failed"
        if self.fallback_share != "auto":
            return float(self.fallback_share), reason
        if self.n_clusters < 2:
            return 1.0, ("n_clusters=1: the tuple path separates pairs of centres; one cluster "
                         "is the general method's private mean")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a probe: the real plan warns
                clone(self).set_params(fallback_share=0.0)._plan_tuple_path(X)
        except InsufficientDataError as error:
            return 1.0, str(error)
        return 0.0, reason

    def _plan_tuple_path(self, X):
        n_samples, n_features = X.shape
        n_tuples = self._resolved_n_tuples(n_samples)
        needed = n_tuples * self.n_clusters
        if n_samples < needed:
            raise InsufficientDataError(
                f"X has {n_samples} rows, but KTupleClusterer needs at least n_tuples * n_clusters "
                f"= {n_tuples} * {self.n_clusters} = {needed} rows (each of the {n_tuples} blocks "
                f"must hold >= {self.n_clusters} rows) at epsilon={self.epsilon}, "
                f"delta={self.delta}, beta={self.beta}."
            )
        if hasattr(X, "chunk_rows"):  # Dask rows: the blocks must fit inside the chunks
            allocate_blocks(X.chunk_rows, n_tuples, self.n_clusters)
        plan = self._plan_tuples(n_tuples, n_features)
        self._plan_radius(plan, X)
        if self.verbose:
            print(f"[KTupleClusterer] plan: {plan.attributes}, cost={plan.cost}")
        return plan

    def _needs_radius(self, data):
        """``"located"`` and ``"averages"`` use the bound (``"noisy_centers"`` skips private bounds)."""
        return self._method() in ("averages", "located")

    def _plan_radius(self, plan, X):
        center = plan.values["center"]
        if self._method() in ("averages", "located"):
            radius, unproven = self._resolve_radius(X, center)
            r_min = self.r_min if self.r_min is not None else DEFAULT_R_MIN_FRACTION * radius
            plan.unproven.update(unproven)
        else:
            radius, r_min = np.nan, np.nan
        plan.values.update(data_radius=radius, r_min=r_min)
        plan.attributes.update(data_radius_=radius)

    # -- private part -------------------------------------------------------------------
    def _base_estimator(self):
        if self.base_estimator is None:
            return KMeans(n_clusters=self.n_clusters, init="k-means++", n_init=1)
        return clone(self.base_estimator)

    def _fit_private(self, X, plan, rng):
        """The tuple path (if planned), then the fallback on its reserved share if needed."""
        if "fallback" not in plan.values:
            return self._fit_tuple_path(X, plan, rng)
        main_rng, fallback_rng = rng.spawn(2)
        main, main_plan = plan.values["main"], plan.values["main_plan"]
        if main is not None:
            result = main._fit_tuple_path(X, main_plan, main_rng)
            if result.success:
                return self._with_unused_share(result, plan)
        centers, fallback_events, fallback_status, proven = run_fallback(
            plan.values["fallback"], X, fallback_rng)
        events = ([] if main is None else list(result.events)) + fallback_events
        info = {"reason": plan.values["fallback_reason"], "share": plan.values["fallback_share"],
                "stable_status": fallback_status}
        attributes = {"labels_": self._training_labels(X, centers), "fallback_info_": info}
        if main is not None:
            attributes["located_info_"] = result.attributes.get("located_info_")
        released = centers is not None
        return PrivateFit(centers, released, events, proven=proven, attributes=attributes,
                          status="fallback" if released else "failure")

    @staticmethod
    def _with_unused_share(result, plan):
        """The tuple path's release, charged with the reserved share too."""
        result.events = list(result.events) + [unused_share_event(plan.values["fallback"],
                                                                  "KTupleClusterer")]
        result.rho = None
        result.attributes["fallback_info_"] = None
        return result

    def _fit_tuple_path(self, X, plan, rng):
        tuple_rng, noise_rng = rng.spawn(2)
        tuples = generate_tuples_of_rows(
            X, self._base_estimator(), self.n_clusters, plan.attributes["n_tuples_"],
            rng=tuple_rng, n_jobs=self.n_jobs,
        )
        result = self._aggregate(tuples, plan, noise_rng, rows=X)
        result.attributes["labels_"] = self._training_labels(X, result.centers)
        return result

    def _aggregate(self, tuples, plan, rng, rows=None):
        """The private aggregation of ``method``; ``rows`` (the raw data) only refine "located"."""
        if self._method() == "located":
            return self._aggregate_located(tuples, plan, rng, rows)
        center = plan.values["center"]
        common = dict(epsilon=self.epsilon, delta=self.delta, beta=self.beta, rng=rng,
                      accounting=self.accounting)
        if self._method() == "averages":
            result = private_k_averages(
                tuples - center, data_radius=plan.values["data_radius"],
                r_min=plan.values["r_min"], **common,
            )
        else:
            result = private_k_noisy_centers(
                tuples - center, separation=plan.attributes["separation_"],
                lambda_mechanism=self.lambda_mechanism,
                gaussian_calibration=self.gaussian_calibration, **common,
            )
        centers = None if result.centers is None else result.centers + center
        return PrivateFit(centers, result.success, result.events, proven=result.proven)

    def _aggregate_located(self, tuples, plan, rng, rows):
        """Locate (:mod:`skdpcluster.ktuple.located`), then average the tuples or refine on ``rows``."""
        center, radius = plan.values["center"], plan.values["data_radius"]
        budget = plan_located_budget(self.epsilon, self.delta, on_rows=rows is not None)
        if rows is None:
            result = locate_and_average(tuples - center, data_radius=radius, budget=budget,
                                        rng=rng)
            centers, events, public = result.centers, result.events, result.public
        else:
            centers, events, public = _locate_then_refine_on_rows(
                tuples - center, rows, center, radius, budget, rng)
        events.append(zcdp_composite_event(events, budget.delta_zcdp))
        centers = None if centers is None else canonical_order(centers) + center
        return PrivateFit(centers, centers is not None, events, rho=events[-1].rho,
                          attributes={"located_info_": public})

    @staticmethod
    def _training_labels(X, centers):
        if hasattr(X, "map_rows"):  # Dask rows: a lazy Dask array
            return X.map_rows(_labels_or_none, centers, dtype=np.intp)
        return _labels_or_none(X, centers)

    # -- precomputed tuples ---------------------------------------------------------------
    @fit_context(prefer_skip_nested_validation=True)
    def fit_tuples(self, tuples):
        """Fit on precomputed k-tuples instead of raw rows.

        Parameters
        ----------
        tuples : array-like of shape (n_tuples, n_clusters, n_features)
            One k-tuple of centres per block of data; neighbouring datasets
            must differ in at most one tuple for the guarantee to hold.
            ``n_tuples`` is ignored (the number of given tuples is used);
            ``data_radius=None`` computes the bound from the tuples.

        Returns
        -------
        self : object
        """
        with _restore_on_error(self):
            super()._check_n_clusters()  # no fallback without rows: k >= 2
            tuples = np.asarray(tuples, dtype=np.float64)
            if tuples.ndim != 3 or tuples.shape[1] != self.n_clusters:
                raise ValueError(
                    f"tuples must have shape (n_tuples, n_clusters={self.n_clusters}, "
                    f"n_features), got shape {tuples.shape}."
                )
            if not np.all(np.isfinite(tuples)):
                raise ValueError("tuples contain NaN or infinite values.")
            n_tuples, _, n_features = tuples.shape
            plan = self._plan_tuples(n_tuples, n_features)
            self._plan_radius(plan, tuples.reshape(-1, n_features))
            validate_data(self, tuples[:, 0, :], reset=True)
            self._commit(*self._run(tuples, plan, self._fit_private_tuples))
        return self

    def _fit_private_tuples(self, tuples, plan, rng):
        result = self._aggregate(tuples, plan, rng)
        result.attributes["labels_"] = np.empty(0, dtype=np.intp)
        return result


def _labels_or_none(X, centers):
    """Nearest centre of every row; -1 everywhere when nothing was released."""
    if centers is None:
        return np.full(X.shape[0], -1, dtype=np.intp)
    return pairwise_distances_argmin(X, centers).astype(np.intp)  # chunked: bounded memory


def plan_fallback(X, n_clusters, epsilon, delta, data_radius, data_center, n_jobs):
    """The general method run on a reserved share: :class:`PrivateStableKMeans` (public plan).

    Its bound is the tuple path's (public, or released privately before);
    ``data_radius=None`` (``"noisy_centers"`` without a bound) makes it
    release its own bound privately. Planned here, on public values, so that
    an input it cannot handle raises before any randomness.
    """
    from skdpcluster.cluster._stable import PrivateStableKMeans  # noqa: PLC0415 (import cycle)

    fallback = PrivateStableKMeans(n_clusters=n_clusters, epsilon=epsilon, delta=delta,
                                   data_radius=data_radius, data_center=data_center, n_jobs=n_jobs)
    fallback._check_n_clusters()
    probe = clone(fallback).set_params(data_radius=data_radius or 1.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probe._plan(X)
    return fallback


def run_fallback(fallback, X, rng):
    """Fit the planned fallback on its own ledger: (centres, events, its status, proven)."""
    fitted = clone(fallback).set_params(accountant=BudgetAccountant(), random_state=rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the caller's status says what happened
        fitted.fit(X)
    return (fitted.cluster_centers_, list(fitted.privacy_ledger_), fitted.status_,
            fitted.privacy_spent_["proven"])


def unused_share_event(fallback, owner):
    """The reserved share after the main method released: charged (unused) all the same, so
    that the charge never depends on the outcome of the private test."""
    return PrivacyEvent("fallback_share_unused", float(fallback.epsilon), float(fallback.delta),
                        label=f"{owner}/fallback_share_unused",
                        details={"reason": "reserved for the fallback; charged whatever the "
                                           "outcome of the private test"})


def _locate_then_refine_on_rows(tuples, X, center, radius, budget, rng):
    r"""Steps 1-2 of "located" on the tuples, then private Lloyd and core steps on the raw rows.

    After the location (:func:`~skdpcluster.ktuple.located.locate`), the
    rows are assigned to the nearest located centre *in the location space*
    and the cells are averaged (one DP-Lloyd step: sums of
    :math:`x/\Lambda` over disjoint cells, L2 sensitivities 2 and
    :math:`\sqrt 2` under replace-one,
    :func:`~skdpcluster.cluster._stable_init.noisy_cell_sums`), then
    :data:`LOCATED_CORE_STEPS` ball-restricted core steps of
    :class:`~skdpcluster.PrivateStableKMeans` follow; each of the
    :math:`1 +` :data:`LOCATED_CORE_STEPS` steps gets an equal share of
    ``budget.rho_rows``. The rows also made the tuples: the row steps compose
    sequentially with the tuple steps (replace-one of a row changes one tuple
    and one row). A failed step charges the budget it did not use.

    Returns
    -------
    centers : ndarray of shape (k, d) or None
        In coordinates centred at ``center``.
    events : list of PrivacyEvent
    public : dict
    """
    # Imported here: cluster._stable imports this module (its k-tuple initializer).
    from skdpcluster.cluster._stable import clipped_rows, core_step
    from skdpcluster.cluster._stable_init import noisy_cell_sums

    locate_rng, rows_rng = rng.spawn(2)
    location = locate(tuples, data_radius=radius, budget=budget, rng=locate_rng)
    events = location.events + unspent_events(location.events, budget)
    rho_step = budget.rho_rows / (1 + LOCATED_CORE_STEPS)
    if location.centers is None:
        return None, events + [_unused_rows_event(budget.rho_rows)], location.public
    data = clipped_rows(X, center, radius)
    sums, counts = data.map_reduce(_located_cell_sums, location.projection, location.centers)
    noisy = noisy_cell_sums(sums / radius, counts, rho=rho_step, neighbouring="replace_one",
                            rng=rows_rng, label="located/lloyd_step")
    events += noisy.events
    if not np.all(noisy.accepted()):
        location.public["failed_step"] = "lloyd_step"
        return None, events + [_unused_rows_event(budget.rho_rows - rho_step)], location.public
    centers = _project_onto_ball(radius * noisy.means(), 0.0, radius)
    caps = [None] * (LOCATED_CORE_STEPS - 1) + [_cluster_scale(location, *X.shape)]
    for step, cap in enumerate(caps):
        centers, _, noisy = core_step(
            data, centers, radius_factor=LOCATED_CORE_RADIUS_FACTOR, rho=rho_step,
            neighbouring="replace_one", rng=rows_rng, label=f"located/core_step_{step}",
            max_radii=cap,
        )
        events += noisy.events
    return centers, events, location.public


def _located_cell_sums(chunk, projection, centers):
    """Sums and counts of a chunk's rows per cell of the nearest located centre (location space)."""
    from skdpcluster.cluster._stable_init import cell_sums, nearest_centers

    points = chunk.X if projection is None else chunk.X @ projection.T
    labels, _ = nearest_centers(points, centers)
    return cell_sums(chunk.X, labels, len(centers))


def _cluster_scale(location, n_samples, n_features):
    r"""A ball that holds a cluster's rows, from released and public values only.

    At the released width :math:`w` most tuple points of a group share a grid
    cell, so their spread per axis is at most about :math:`w`; a tuple point
    is the mean of about :math:`R = n/(T k)` rows of its cluster (public), so
    the rows spread about :math:`w\sqrt{R}` per axis and lie within
    :math:`w\sqrt{R}\,(\sqrt d + 3)`. The last core step's radius is capped
    there, which shrinks its noise when the clusters are far apart.
    """
    n_tuples, k = location.public["n_tuples"], len(location.centers)
    rows_per_cluster = max(n_samples // n_tuples, k) / k
    return location.width * math.sqrt(rows_per_cluster) * (math.sqrt(n_features) + 3.0)


def _unused_rows_event(rho):
    return PrivacyEvent("unused_budget", 0.0, 0.0, rho=rho, label="located/rows_unused_budget")
