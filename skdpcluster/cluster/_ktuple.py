r"""KTupleClusterer: private k-tuple clustering (Cohen et al., ICML 2021) as a scikit-learn estimator."""

import math
from dataclasses import replace
from numbers import Integral, Real

import numpy as np
from sklearn.base import clone
from sklearn.cluster import KMeans
from sklearn.utils.validation import validate_data

from skdpcluster.ktuple._tuples import (
    allocate_blocks,
    generate_tuples_of_rows,
    replace_bad_tuples,
)
from skdpcluster.accountant import BudgetAccountant
from skdpcluster.cluster._base import PrivateFit, PrivateFitPlan, _BasePrivateClusterer, _fit_scope
from skdpcluster.cluster._cost_estimate import COST_KEYS, CostEstimateMixin
from skdpcluster.cluster._one_cluster import fit_one_cluster, plan_one_cluster, resolved_r_min
from skdpcluster.exceptions import InsufficientDataError, UtilityWarning
from skdpcluster.mechanisms import PrivacyEvent
from skdpcluster.utils._warnings import collected_warnings, warn_user
from skdpcluster.ktuple import min_tuples
from skdpcluster.averaging import _project_onto_ball
from skdpcluster.ktuple._framework import (
    canonical_order,
    check_tuple_parameters,
    clamp_to_float_range,
    conditioning_event,
)
from skdpcluster.ktuple.averages import (
    AVERAGES_SEPARATION,
    cluster_points_needed,
    per_cluster_budget,
    private_k_averages,
)
from skdpcluster.ktuple.located import (
    locate_and_average,
    min_located_tuples,
    plan_located_budget,
    refine_on_rows,
    zcdp_composite_event,
)
from skdpcluster.ktuple.noisy_centers import _check_modes as check_noisy_centers_modes
from skdpcluster.ktuple.noisy_centers import (
    _check_log_gap_resolution,
    default_separation,
    noise_to_gap_ratio,
    private_k_noisy_centers,
    separation_for_noise_to_gap_ratio,
)
from skdpcluster.ktuple.partition import _outer_ell, compute_m_eps1
from skdpcluster.utils._compat import HasMethods, Interval, StrOptions, fit_context, single_threaded
from skdpcluster.utils._docstrings import shared_params
from skdpcluster.utils._progress import phase
from skdpcluster.utils._threads import fit_threads, ordered_map

__all__ = ["KTupleClusterer"]

#: Rows per tuple that ``n_tuples="auto"`` aims for with ``method="averages"``
#: (the paper's "about 15 k samples" per tuple, spec §10.1).
AVERAGES_ROWS_PER_CLUSTER = 15
#: Rows per cluster in one block that ``n_tuples="auto"`` aims for with ``method="located"``.
LOCATED_ROWS_PER_CLUSTER = 5
#: Share of (epsilon, delta) that ``fallback_share="auto"`` reserves for the general method with
#: the paper's methods (``"located"`` on rows reserves nothing: see :class:`_GeneralMethodOnRows`).
AUTO_FALLBACK_SHARE = 0.1
#: Above this public noise-to-gap ratio
#: (:func:`~skdpcluster.ktuple.noisy_centers.noise_to_gap_ratio`) ``"noisy_centers"`` warns
#: before spending: the noise of a released centre is more than half its distance to the
#: nearest other centre, so the centres may swap or merge.
NOISE_TO_GAP_LIMIT = 0.5
#: Blocks of :data:`~skdpcluster.cluster._stable_init.CHUNK_ROWS` rows per part of the
#: training labels (:func:`_labels_or_none`), the unit of work of one thread.
_LABEL_BLOCKS = 16


@shared_params
class KTupleClusterer(CostEstimateMixin, _BasePrivateClusterer):
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
      but many of them (about :math:`5\cdot 10^5\,k\,d`; with too few for
      Proposition 2.9's bound a
      :class:`~skdpcluster.exceptions.UtilityWarning` says so before
      anything is spent).

    Each row affects one block, so a replace-one change of the data changes
    one tuple, and the guarantee of the tuple algorithm carries over to the
    rows.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters k. The tuple path needs k >= 2; ``n_clusters=1``
        releases the private average of the rows in the bound's ball
        (:func:`~skdpcluster.averaging.private_average`, Proposition 2.9,
        on the whole budget; ``method_="private_average"``,
        ``status_="success"``).
    method : {"auto", "located", "noisy_centers", "averages"}, default="auto"
        The private aggregation of the tuples. ``"auto"`` is always
        ``"located"``. It needs a bound: with ``data_radius=None`` (the
        default) the bound is first released privately on 10% of (epsilon,
        delta) (:mod:`skdpcluster.bounds`; the ledger starts with its
        events) and the method runs on the rest; ``"noisy_centers"``, which
        needs no bound, runs only when asked for.
        ``benchmarks/bench_ktuple_practical.py``: with the public radius,
        ``"located"`` passes where ``"noisy_centers"`` fails (k = 4, d = 4,
        means 10·e_i apart, n = 10^4).
    {epsilon}
    {delta}
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
        n_samples // k]``. With fewer rows than the tuple path needs, the
        whole budget goes to the fallback (``status_="fallback"``,
        ``fallback_info_`` says how many rows are needed); only with
        ``fallback_share=0`` does the fit raise
        :class:`InsufficientDataError` (before anything is spent).
    separation : float, default=None
        Delta of ``"noisy_centers"`` (> 6); ignored by ``"located"``. ``None``
        uses the paper's
        :math:`(10/\varepsilon)\,k\log(k/\delta)\sqrt{\log(k/\beta)}`.
        ``"averages"`` always uses 7. The noise of ``"noisy_centers"`` grows
        exponentially as Delta decreases: when its public ratio to the gap
        between centres
        (:func:`~skdpcluster.ktuple.noisy_centers.noise_to_gap_ratio`)
        exceeds 1/2, a :class:`~skdpcluster.exceptions.UtilityWarning` names
        the separation that brings it down, before anything is spent.
    data_radius : float, default=None
        Public bound Lambda on ``||x - data_center||``, used by
        ``"located"`` and ``"averages"`` (rows outside are projected onto the
        ball).
        {private_bound}
        With ``"data"`` the exact bound is used but not stored
        (``data_radius_`` is ``nan``) and ``privacy_spent_["proven"]`` is
        False. :meth:`fit_tuples` keeps the
        exact bound of the tuples for ``None`` (with the warning). At most 1e100.
    data_center : array-like of shape (n_features,), default=None
        Public centre of the data ball; ``None`` means the origin.
    r_min : float, default=None
        Resolution of ``"averages"`` (and of the one-cluster average);
        ``None`` means ``1e-4 * data_radius``. It must be in
        ``[2 * data_radius / 2**52, data_radius]``: outside, a public
        ``data_radius`` is refused before anything is spent, and a released
        bound (``data_radius=None``) moves it into the range with a warning.
    accounting : {"corrected", "paper"}, default="corrected"
        ``"corrected"`` uses the ell for which Claim 4.5 is proven;
        ``"paper"`` reproduces Definition 4.4 and then charges the larger
        epsilon and delta that can actually be proven (a ``UserWarning``
        says both before anything is spent).
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
        outcome (on success as an unused ``"fallback_share_unused"`` event,
        after the fallback as one ``"fallback_share"`` event), so the charge
        never depends on the test. When ``n_samples`` is too
        small for the tuple path at its share (a public fact), the whole
        budget goes to the fallback instead of raising
        :class:`~skdpcluster.InsufficientDataError`; ``fallback_info_``
        then says how many rows the tuple path needs.
        ``"auto"``: with ``"located"``, nothing is reserved: when the
        location fails, the general method (the grid initializer of
        :class:`~skdpcluster.PrivateStableKMeans`) runs on the zCDP share
        the row refinement would have spent, at the same cost (a reserved
        10% measurably hurt the tuple path near its smallest n); with the
        paper's methods, 10% (:data:`AUTO_FALLBACK_SHARE`) is reserved; the
        whole budget goes to the fallback when the tuple path cannot run.
        ``0`` turns the fallback off: a failed test releases nothing
        (``status_="failure"``) and too few rows raise.
    estimate_cost : bool, default=False
        Spend 5% of epsilon
        (:data:`~skdpcluster.cluster._cost_estimate.COST_SHARE`, pure DP; the fit gets the
        rest; with ``data_radius=None``, 5% of the epsilon left after the private
        bound, so 4.5% of the whole) on a private estimate of the released centres' clipped
        k-means cost
        (:func:`~skdpcluster.cluster._cost_estimate.private_clipped_cost`), stored in ``quality_``.
        Charged whatever the outcome. ``fit`` only: ``fit_tuples`` has no rows
        and refuses it.
    on_failure : {"warn", "raise"}, default="warn"
        When the private test fails: ``"warn"`` releases the fallback
        (``status_="fallback"``) or, with ``fallback_share=0``, sets
        ``status_="failure"`` and ``cluster_centers_=None``, and emits a
        :class:`NotSeparatedWarning`; ``"raise"`` raises
        :class:`NotSeparatedError` and leaves the previous fitted state.
        Either way the budget is charged.
    {accountant}
    {random_state}
    n_jobs : int, default=None
        Parallel jobs for the blocks (joblib; any backend, including Dask).
        The default ``KMeans`` blocks run on threads unless a joblib backend
        is configured: ``n_jobs=-1`` uses every core. With one job (the
        default) the in-memory passes (private bound, ``KMeans`` blocks,
        refinement on the rows, ``labels_``) run on the threads scikit-learn's
        ``KMeans`` uses (its OpenMP thread count: ``OMP_NUM_THREADS``,
        :func:`threadpoolctl.threadpool_limits`). The release does not
        depend on either.
    {verbose}

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features) or None
        The private centres, rows in lexicographic order; ``None`` after a
        failed test with ``fallback_share=0``. A differentially private release.
    status_ : {"success", "fallback", "failure"}
        ``"success"``: the private test passed (for ``"located"``: every
        step found k groups) and the tuple path released; ``"fallback"``:
        the tuple path could not run (too few rows) or its test failed, and
        the fallback released; ``"failure"``: nothing released
        (``fallback_share=0`` only). A private release.
    fallback_info_ : dict or None
        After ``status_="fallback"``: ``"reason"`` (text from public or
        released values) and ``"share"`` of the budget it ran on; with a
        reserved share, ``"stable_status"`` of the fallback fit; after the
        located method's own share, ``"method"`` (``"grid"``), ``"rho"``,
        ``"share"`` as a share of the zCDP budget and ``"n_heavy_cells"``
        (the grid's released count; below ``n_clusters``, a
        :class:`~skdpcluster.UtilityWarning` after the fit says that some
        centres are filler points). ``None`` otherwise.
    quality_ : dict
        Private quality signals (released values only): ``"test"``
        (``"located"``, ``"partition_test"`` or ``None`` when no test
        ran), ``"test_passed"`` (the released outcome: for ``"located"``,
        AboveThreshold found a width and the thresholded histogram k
        groups), ``"located_width"`` (the released grid width) and, with
        ``estimate_cost=True``, ``"clipped_cost"`` (the noisy
        :math:`\sum_x\min(\min_j\|x-c_j\|^2, \tau)`),
        ``"mean_clipped_cost"`` (divided by the public ``n_samples``),
        ``"cost_clip"`` (:math:`\tau`, from the released centres) and
        ``"cost_noise_scale"`` (the Laplace scale); ``None`` otherwise or
        without centres. A mean clipped cost near ``cost_clip`` means most
        rows are far from every centre.
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
    {data_center_}
    privacy_spent_ : dict
        ``{"epsilon", "delta", "proven"}`` charged to the accountant; never
        more than requested in the default modes. Plus ``"rho"`` when the
        released path composed its releases in zCDP (the
        ``"located/zcdp_total"`` event's ``rho``, ``method="located"``
        without a reserved fallback share).
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
    #: The located grid width is 2 * bound * sqrt(2)**-j: hidden with a data-derived bound.
    _BOUND_DERIVED_ENTRIES = {"located_info_": ("width",), "quality_": ("located_width",)}
    _FITTED_ATTRIBUTES = _BasePrivateClusterer._FITTED_ATTRIBUTES + (
        "ell_", "fallback_info_", "located_info_", "m_", "method_", "n_tuples_", "quality_",
        "separation_")

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
        "estimate_cost": ["boolean"],
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
        estimate_cost=False,
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
        self.estimate_cost = estimate_cost
        self.on_failure = on_failure
        self.accountant = accountant
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose

    def _check_n_clusters(self):
        """k = 1 is allowed (a private mean); :meth:`fit_tuples` still needs k >= 2."""

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

    def _plan_tuples(self, n_tuples, n_features, *, on_rows=True):
        """Checks and attributes shared by ``fit`` and ``fit_tuples`` (public values only).

        ``on_rows=False``: ``"located"`` runs on the tuples only (``fit_tuples``), with the
        budget of :func:`~skdpcluster.ktuple.located.plan_located_budget` on tuples.
        """
        self._check_unproven_modes()
        if self._method() == "located":
            return self._plan_located(n_tuples, n_features, on_rows)
        separation = self._resolved_separation()
        shape_probe = np.zeros((n_tuples, self.n_clusters, 1))
        check_tuple_parameters(
            shape_probe, self.epsilon, self.delta, self.beta, separation, self.accounting
        )
        self._check_aggregation_parameters(n_tuples)
        if self._method() == "noisy_centers":
            _check_log_gap_resolution(separation)  # in the plan: refused before any randomness
            self._warn_if_noise_exceeds_gaps(separation)
        center = self._resolve_center(n_features)
        m, _ = compute_m_eps1(n_tuples, self.epsilon / 2, self.delta / 4, self.beta / 2)
        attributes = {
            "n_tuples_": n_tuples,
            "m_": m,
            "ell_": _outer_ell(n_tuples, self.epsilon, self.delta, self.beta, self.accounting),
            "separation_": separation,
            "located_info_": None,
            "method_": self._method(),
            "fallback_info_": None,  # set by the fit that falls back; fit_tuples never does
        }
        cost = self._cost(n_tuples)
        if self.accounting == "paper":
            warn_user(
                f"KTupleClusterer: accounting='paper' uses the ell of Definition 4.4 as printed, "
                f"for which Claim 4.5 proves epsilon={cost[0]:.6g}, delta={cost[1]:.3g}, not the "
                f"requested epsilon={self.epsilon}, delta={self.delta}: the fit charges the "
                "proven values. Use accounting='corrected' (the default) to stay within the "
                "request.", UserWarning)
        return PrivateFitPlan(cost, {"center": center}, attributes)

    def _warn_if_noise_exceeds_gaps(self, separation):
        """A :class:`UtilityWarning` before spending when the public noise-to-gap ratio of
        ``"noisy_centers"`` exceeds :data:`NOISE_TO_GAP_LIMIT`, naming the separation that
        brings it down (both functions of public values only; audit RE-F3)."""
        modes = (self.lambda_mechanism, self.gaussian_calibration)
        ratio = noise_to_gap_ratio(self.n_clusters, self.epsilon, self.delta, separation, *modes)
        if ratio <= NOISE_TO_GAP_LIMIT:
            return
        needed = separation_for_noise_to_gap_ratio(NOISE_TO_GAP_LIMIT, self.n_clusters,
                                                   self.epsilon, self.delta, *modes)
        warn_user(
            f"KTupleClusterer: method='noisy_centers' at separation={separation:.6g} (the tuple "
            f"path's epsilon={self.epsilon:.6g}, delta={self.delta:.3g}) adds noise of about "
            f"{ratio:.3g} times the gap between the released centres (a public estimate, "
            f"noise_to_gap_ratio): the centres will be close to random even when the test "
            f"passes. separation >= {needed:.6g} brings it to {NOISE_TO_GAP_LIMIT} (the tuples "
            f"must then be that much better separated for the test to pass), or use "
            f"method='located'.", UtilityWarning)

    def _warn_if_averages_lack_points(self, n_tuples, n_features, radius, r_min):
        """A :class:`UtilityWarning` before spending when the clusters of ``"averages"`` hold
        fewer points than Proposition 2.9's bound needs: the centres can then be anywhere in
        the data ball (:func:`~skdpcluster.ktuple.averages.cluster_points_needed`; public or
        released values only; audit RE-F3)."""
        needed = cluster_points_needed(n_tuples, self.n_clusters, n_features, self.epsilon,
                                       self.delta, self.beta, radius, r_min, self.accounting)
        if n_tuples >= needed:
            return
        warn_user(
            f"KTupleClusterer: method='averages' with {n_tuples} tuples: each cluster is averaged "
            f"at the budget epsilon / (4k(ell + 1)) of Theorem 4.9, at which its private average "
            f"(Proposition 2.9) needs at least {needed} points per cluster (one per tuple), so "
            f"the released centres can be as far as the data radius from the cluster means (a "
            f"public estimate). Use about {needed} tuples, a larger epsilon, or method='located'.",
            UtilityWarning)

    def _plan_located(self, n_tuples, n_features, on_rows):
        """The public plan of ``method="located"``: enough tuples for the histogram threshold of
        its budget (refining on the rows, or on the tuples only)."""
        needed = min_located_tuples(self.n_clusters, self.epsilon, self.delta, on_rows=on_rows)
        if n_tuples < needed:
            rows = (f"; with n_tuples='auto' that is at least {needed * self.n_clusters} rows"
                    if on_rows else "")
            raise InsufficientDataError(
                f"method='located' needs at least {needed} tuples at n_clusters="
                f"{self.n_clusters}, epsilon={self.epsilon}, delta={self.delta} (below that no "
                f"cluster can pass the histogram threshold), got {n_tuples}{rows}. Use more "
                f"{'data' if on_rows else 'tuples'} or a larger epsilon/delta."
            )
        attributes = {"n_tuples_": n_tuples, "m_": None, "ell_": np.nan, "separation_": np.nan,
                      "method_": "located", "fallback_info_": None}
        cost = (float(self.epsilon), float(self.delta))
        return PrivateFitPlan(cost, {"center": self._resolve_center(n_features)}, attributes)

    def _plan(self, X):
        """The public plan: the tuple path on ``1 - fallback_share`` and the fallback on the rest.

        Which parts run is decided from public values only: when ``n_samples``
        is too small for the tuple path at its share of the budget, the
        whole budget goes to the fallback (:class:`PrivateStableKMeans`).
        """
        if self.estimate_cost:
            return self._plan_with_cost_estimate(X)
        if self.n_clusters == 1:
            return self._plan_one_cluster(X)
        share, reason = self._resolved_fallback_share(X)
        if share == 0.0:
            plan = self._plan_tuple_path(X)
            plan.values["general_in_share"] = self.fallback_share == "auto"
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

    def _plan_one_cluster(self, X):
        """``n_clusters=1``: the private average of the rows in the bound's ball (public plan,
        :func:`~skdpcluster.cluster._one_cluster.plan_one_cluster`).

        The private average reads the rows in memory: Dask input is refused here, before
        any randomness or budget is spent.
        """
        if hasattr(X, "map_reduce"):
            raise ValueError(
                "KTupleClusterer(n_clusters=1) does not accept Dask input: its private average "
                "needs the rows in memory. Pass X.compute() (if it fits in memory), or use "
                "PrivateStableKMeans(n_clusters=1), which accepts Dask input.")
        attributes = {"n_tuples_": 0, "m_": None, "ell_": np.nan, "separation_": np.nan,
                      "located_info_": None, "method_": "private_average",
                      "fallback_info_": None}
        return plan_one_cluster(self, X, "mean", attributes)

    def _resolved_fallback_share(self, X):
        """``fallback_share`` with ``"auto"`` resolved from public values, and the reason a
        fallback would run.

        ``"auto"``: the whole budget when the tuple path cannot run (too few rows); nothing
        reserved for ``"located"`` on rows (the general method runs on the refinement's share
        when the location fails, :class:`_GeneralMethodOnRows`); :data:`AUTO_FALLBACK_SHARE` for the
        paper's methods, which have no such share.
        """
        reason = "the private test of the tuple path failed"
        if self.fallback_share != "auto":
            return float(self.fallback_share), reason
        try:
            with collected_warnings(ignore=True):  # a probe: the real plan warns
                self._plan_tuple_path(X)  # reads no parameter it could change, fallback_share none
        except InsufficientDataError as error:
            return 1.0, str(error)
        if self._method() == "located":
            return 0.0, reason
        return AUTO_FALLBACK_SHARE, reason

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
        """``"located"``, ``"averages"`` and one cluster use the bound (``"noisy_centers"`` skips
        private bounds)."""
        return self._method() in ("averages", "located") or self.n_clusters == 1

    def _plan_radius(self, plan, X):
        center = plan.values["center"]
        if self._method() in ("averages", "located"):
            radius, unproven = self._resolve_radius(X, center)
            r_min = resolved_r_min(self, self.r_min, radius)
            plan.unproven.update(unproven)
            if self._method() == "averages":
                self._warn_if_averages_lack_points(plan.attributes["n_tuples_"], X.shape[1],
                                                   radius, r_min)
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
        """The release, its private quality signals and (``estimate_cost=True``) its cost."""
        if "cost_main" in plan.values:
            return self._fit_with_cost_estimate(X, plan, rng)
        result = self._fit_release(X, plan, rng)
        result.attributes["quality_"] = {**self._test_outcome(result, plan),
                                         **dict.fromkeys(COST_KEYS)}
        return result

    def _test_outcome(self, result, plan):
        """The private test's released outcome (``quality_``): which test ran and whether it passed.

        ``"located"``: the width search (AboveThreshold) and the thresholded
        histogram found k groups; the paper's methods: PrivateTestPartition
        passed. ``None`` when no test ran (one cluster, or too few rows for the
        tuple path). A function of released values only.
        """
        if "one_cluster" in plan.values or ("main" in plan.values and plan.values["main"] is None):
            return {"test": None, "test_passed": None, "located_width": None}
        located = result.attributes.get("located_info_")
        if located is not None:
            return {"test": "located", "test_passed": located["failed_step"] not in
                    ("width", "locate"), "located_width": located["width"]}
        passed = result.success and (result.status or "success") == "success"
        return {"test": "partition_test", "test_passed": passed, "located_width": None}

    def _fit_release(self, X, plan, rng):
        """The tuple path (if planned), then the fallback on its reserved share if needed."""
        if "one_cluster" in plan.values:
            return fit_one_cluster(self, X, plan, rng)
        if "fallback" not in plan.values:
            return self._fit_tuple_path(X, plan, rng)
        main_rng, fallback_rng = rng.spawn(2)
        main, main_plan = plan.values["main"], plan.values["main_plan"]
        if main is not None:
            result = main._fit_tuple_path(X, main_plan, main_rng)
            if result.success:
                return self._with_unused_share(result, plan)
        phase("fallback")
        centers, fallback_events, fallback_status, proven = run_fallback(
            plan.values["fallback"], X, fallback_rng)
        events = ([] if main is None else list(result.events)) + fallback_share_events(
            plan.values["fallback"], fallback_events, "KTupleClusterer")
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
        phase("tuple generation", blocks=plan.attributes["n_tuples_"])
        tuples = generate_tuples_of_rows(
            X, self._base_estimator(), self.n_clusters, plan.attributes["n_tuples_"],
            rng=tuple_rng, n_jobs=self.n_jobs,
        )
        result = self._aggregate(tuples, plan, noise_rng, rows=X)
        result.attributes["labels_"] = self._training_labels(X, result.centers)
        return result

    def _aggregate(self, tuples, plan, rng, rows=None, fallback_rows=None):
        """The private aggregation of ``method``; ``rows`` (the raw data) only refine "located".

        ``fallback_rows`` (the rows that made ``tuples``; "located" on tuples only): when the
        location fails, the general method runs on them with the averaging's share.
        """
        if self._method() == "located":
            return self._aggregate_located(tuples, plan, rng, rows, fallback_rows)
        center = plan.values["center"]
        common = dict(epsilon=self.epsilon, delta=self.delta, beta=self.beta, rng=rng,
                      accounting=self.accounting)
        # A tuple whose centring overflows (finite rows near the float range against a far
        # public centre) becomes the public bad tuple, a map of that tuple alone: both methods
        # refuse non-finite tuples, which after the randomness was a charged failure that told
        # such a row apart (review R9).
        centred = replace_bad_tuples(tuples - center)
        if self._method() == "averages":
            result = private_k_averages(
                centred, data_radius=plan.values["data_radius"],
                r_min=plan.values["r_min"], **common,
            )
        else:
            result = private_k_noisy_centers(
                centred, separation=plan.attributes["separation_"],
                lambda_mechanism=self.lambda_mechanism,
                gaussian_calibration=self.gaussian_calibration, **common,
            )
        # Shifted back, then clamped: a release at the float range's edge plus a far public
        # centre overflowed to inf after noisy_centers' own clamp (review R6-L1).
        centers = None if result.centers is None else clamp_to_float_range(result.centers + center)
        return PrivateFit(centers, result.success, result.events, proven=result.proven)

    def _aggregate_located(self, tuples, plan, rng, rows, fallback_rows=None):
        """Locate (:mod:`skdpcluster.ktuple.located`), then average the tuples or refine on ``rows``."""

        center, radius = plan.values["center"], plan.values["data_radius"]
        budget = plan_located_budget(self.epsilon, self.delta, on_rows=rows is not None)
        if rows is None:
            phase("location and averages of the tuples")
            stage_two = None
            if fallback_rows is not None:
                stage_two = _GeneralMethodOnRows(fallback_rows, center, radius, tuples.shape[1])
            result = locate_and_average(tuples - center, data_radius=radius, budget=budget,
                                        rng=rng, if_not_located=stage_two)
            centers, events, public = result.centers, result.events, result.public
            fallback = None
            if stage_two is not None and stage_two.rho is not None:
                fallback = _in_share_fallback_info(public, stage_two, budget)
        else:
            stage_two = None
            if plan.values.get("general_in_share", False):
                stage_two = _GeneralMethodOnRows(rows, center, radius, tuples.shape[1])
            centers, events, public = refine_on_rows(
                tuples - center, rows, center=center, data_radius=radius, budget=budget, rng=rng,
                if_not_located=stage_two)
            fallback = None
            if stage_two is not None and stage_two.rho is not None:
                fallback = _in_share_fallback_info(public, stage_two, budget)
        events.append(zcdp_composite_event(events, budget.delta_zcdp))
        centers = None if centers is None else canonical_order(centers) + center
        attributes = {"located_info_": public}
        if fallback is not None:
            attributes["fallback_info_"] = fallback
        return PrivateFit(centers, centers is not None, events, rho=events[-1].rho,
                          attributes=attributes, status="fallback" if fallback else None)

    def _warn_after_fit(self):
        warn_if_general_method_short(self, self.n_clusters)

    @staticmethod
    def _training_labels(X, centers):
        if hasattr(X, "map_rows"):  # Dask rows: a lazy Dask array
            return X.map_rows(_labels_or_none, centers, dtype=np.intp)
        return _labels_or_none(X, centers, fit_threads())

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

        Raises
        ------
        ValueError
            With ``estimate_cost=True``, before any spend: the cost is a sum
            over rows, and there are none.
        """
        with _fit_scope(self):
            super()._check_n_clusters()  # no fallback without rows: k >= 2
            if self.estimate_cost:
                raise ValueError(
                    "KTupleClusterer.fit_tuples: estimate_cost=True estimates the clipped cost "
                    "of the released centres on the rows, and fit_tuples has none (review R7, "
                    "L3: it was silently ignored). Set estimate_cost=False, or fit on the rows."
                )
            tuples = np.asarray(tuples, dtype=np.float64)
            if tuples.ndim != 3 or tuples.shape[1] != self.n_clusters:
                raise ValueError(
                    f"tuples must have shape (n_tuples, n_clusters={self.n_clusters}, "
                    f"n_features), got shape {tuples.shape}."
                )
            if not np.all(np.isfinite(tuples)):
                raise ValueError("tuples contain NaN or infinite values.")
            n_tuples, _, n_features = tuples.shape
            plan = self._plan_tuples(n_tuples, n_features, on_rows=False)
            self._plan_radius(plan, tuples.reshape(-1, n_features))
            validate_data(self, tuples[:, 0, :], reset=True)
            self._commit(*self._run(tuples, plan, self._fit_private_tuples))
        self._report_after_fit()
        return self

    def _fit_private_tuples(self, tuples, plan, rng):
        result = self._aggregate(tuples, plan, rng)
        result.attributes["labels_"] = np.empty(0, dtype=np.intp)
        result.attributes["quality_"] = {**self._test_outcome(result, plan),
                                         **dict.fromkeys(COST_KEYS)}
        return result


def _labels_or_none(X, centers, n_threads=1):
    """Nearest centre of every row; -1 everywhere when nothing was released.

    The stable estimators' chunked kernel
    (:func:`~skdpcluster.cluster._stable_init.nearest_centers`): bounded
    memory, and at k = d = 10 about 4 times faster than
    :func:`~sklearn.metrics.pairwise_distances_argmin` on one thread. Parts of
    :data:`_LABEL_BLOCKS` of its blocks run on ``n_threads`` threads (the
    convention of :mod:`skdpcluster.utils._threads`: each row's label is
    computed in the same block on any number of threads).
    """
    # Imported here: cluster._stable_init imports this module (its k-tuple initializer).
    from skdpcluster.cluster._stable_init import CHUNK_ROWS, nearest_centers  # noqa: PLC0415

    if centers is None:
        return np.full(X.shape[0], -1, dtype=np.intp)
    X = np.asarray(X, dtype=np.float64)
    part_rows = _LABEL_BLOCKS * CHUNK_ROWS
    with single_threaded():  # a block by k centres: BLAS threads only cost
        parts = ordered_map(lambda start: nearest_centers(X[start:start + part_rows], centers)[0],
                            range(0, max(len(X), 1), part_rows), n_threads)
    return np.concatenate(parts)


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
    with collected_warnings(ignore=True):
        probe._plan(X)
    return fallback


def run_fallback(fallback, X, rng):
    """Fit the planned fallback on its own ledger: (centres, events, its status, proven)."""
    fitted = clone(fallback).set_params(accountant=BudgetAccountant(), random_state=rng)
    with collected_warnings(ignore=True):  # the caller's status says what happened
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


def fallback_share_events(fallback, events, owner):
    """The fallback's events, charged as its whole reserved share: the charge of a success.

    The fallback spends at most its share (its zCDP conversion keeps a safety
    margin of :math:`10^{-10}`), so charging the share is an upper bound. Its
    events stay in the ledger as records of cost 0 (their own ``epsilon`` and
    ``delta`` in ``details``, ``"accounted_in"`` the share's event), and one
    ``"fallback_share"`` event charges ``fallback.epsilon`` and
    ``fallback.delta``: the same costs as :func:`unused_share_event` after a
    success, so the charge is the same bits whatever the private test's
    outcome.
    """
    label = f"{owner}/fallback_share"
    records = [replace(event, epsilon=0.0, delta=0.0,
                       details={**event.details, "epsilon": event.epsilon, "delta": event.delta,
                                "accounted_in": label})
               for event in events]
    spent = (math.fsum(event.cost()[0] for event in events),
             math.fsum(event.cost()[1] for event in events))
    return records + [PrivacyEvent(
        "fallback_share", float(fallback.epsilon), float(fallback.delta), label=label,
        details={"reason": "reserved for the fallback and charged whole, as on success",
                 "fallback_spent": spent})]


class _GeneralMethodOnRows:
    r"""Stage 2 of "located" on rows once a step failed: the general method on the clipped rows.

    Called by :func:`~skdpcluster.ktuple.located.refine_on_rows` with the
    zCDP share ``rho`` that the failed location (or Lloyd step) leaves: it
    runs :func:`_general_method` at exactly that ``rho``, a
    :math:`\rho`-zCDP mechanism under replace-one like the refinement it
    replaces. Which of the two runs is a function of released values only
    and both cost the same :math:`\rho`, so the fit's charge does not depend
    on the outcome (adaptive composition, Bun & Steinke 2016, Lemma 2.3; the
    proof in ``doc/ktuple.rst``, "The fallback"). The rows are clipped only
    if it runs; ``rho`` records the share it ran on (``None``: not called) and
    ``n_heavy_cells`` the grid's released number of heavy cells.
    """

    def __init__(self, X, center, radius, n_clusters):
        self.X, self.center, self.radius, self.n_clusters = X, center, radius, n_clusters
        self.rho = self.n_heavy_cells = None

    def __call__(self, rho, rng):
        from skdpcluster.cluster._stable import clipped_rows  # noqa: PLC0415 (import cycle)

        self.rho = rho
        data = clipped_rows(self.X, self.center, self.radius)
        centers, events, self.n_heavy_cells = _general_method(data, self.n_clusters, rho, rng)
        return centers, events


def _general_method(data, n_clusters, rho, rng):
    r"""The general method on clipped rows at exactly ``rho`` zCDP (replace-one).

    ``data`` is :func:`~skdpcluster.cluster._stable.clipped_rows` of the rows, in
    memory or chunked (Dask): every stage of the initializer is one pass.

    :class:`~skdpcluster.cluster._stable_init.GridInitializer` (DP-PCA, a
    private grid coreset and DP-Lloyd, every release a Gaussian mechanism:
    :math:`\rho`-zCDP), its unspent part charged as one event. It needs no
    separation and never fails, so it answers on any input.

    Returns
    -------
    centers : ndarray of shape (n_clusters, d)
        In the coordinates of ``data`` (inside its ball).
    events : list of PrivacyEvent
    n_heavy_cells : int
        The grid's released number of heavy cells: below ``n_clusters``, some
        centres are filler points (reported after the fit, from
        ``fallback_info_``; a warning inside the private step, made an error,
        failed the charged fit: review R2-5).
    """
    from skdpcluster.cluster._stable import _unused_budget_events  # noqa: PLC0415 (import cycle)
    from skdpcluster.cluster._stable_init import GridInitializer  # noqa: PLC0415

    centers, events, info = GridInitializer(warn_few_heavy_cells=False).fit_centers(
        data.initializer_input(), n_clusters, budget={"rho": rho}, data_radius=data.radius,
        neighbouring="replace_one", rng=rng)
    events = [event.with_label(event.label.replace("stable/grid_init", "located/general", 1))
              for event in events]
    events += _unused_budget_events("zcdp", events, {"rho": rho})
    return _project_onto_ball(centers, 0.0, data.radius), events, info["n_heavy_cells"]


def warn_if_general_method_short(estimator, n_centres):
    """Warn when the located method's grid fallback found fewer heavy cells than ``n_centres``.

    From the fitted ``fallback_info_`` (released counts): free. Called after
    the fit (``_warn_after_fit``): the grid's own warning, given inside the
    private step, failed the charged fit when made an error (review R2-5).
    """
    n_heavy = (getattr(estimator, "fallback_info_", None) or {}).get("n_heavy_cells")
    if n_heavy is not None and n_heavy < n_centres:
        warn_user(
            f"{type(estimator).__name__}: the general method of the fallback found {n_heavy} "
            f"heavy grid cells for {n_centres} centres (a function of its released noisy "
            f"counts), so {n_centres - n_heavy} initial centres started as filler points near "
            "data_center, and some released centres are likely still there. More rows or a "
            "larger epsilon would help.", UtilityWarning)


def _in_share_fallback_info(public, general, budget):
    """``fallback_info_`` after the general method (a :class:`_GeneralMethodOnRows` that ran)
    ran on the located method's own share."""
    return {"reason": f"the located method's {public['failed_step']!r} step failed (a private "
                      "outcome); the general method ran on the zCDP share of the step it replaced",
            "share": general.rho / budget.rho_total, "rho": general.rho, "method": "grid",
            "n_heavy_cells": general.n_heavy_cells}
