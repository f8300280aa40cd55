r"""FederatedPrivateKMeans: FedDP-KMeans (Scott, Lampert & Saulpic, ICML 2025) for scikit-learn."""

import math
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import pairwise_distances_argmin_min
from sklearn.utils import check_array
from sklearn.utils.validation import has_fit_parameter, validate_data

from skdpcluster.averaging import _project_onto_ball
from skdpcluster.averaging._common import project_into_ball
from skdpcluster.cluster._base import (
    PrivateFit,
    PrivateFitPlan,
    _BasePrivateClusterer,
    _fit_scope,
    _reject_fit_params,
)
from skdpcluster.cluster._federated_init import (
    DEFAULT_INIT_SPLIT,
    INIT_ROUNDS,
    INIT_STEPS,
    LLOYD_GAUSSIAN_SHARE,
    SENSITIVITY_FACTOR,
    STEPS,
    ChunkedFederatedExecutor,
    FederatedExecutor,
    _fit_centers,
    baseline_init,
    build_shards,
    clip_rows,
    dask_client,
    feddp_init,
    federated_lloyd,
    plan_budget,
    price_events,
)
from skdpcluster.utils._compat import HasMethods, Interval, StrOptions, fit_context
from skdpcluster.utils._data import dask_rows_from_input, is_dask_collection
from skdpcluster.utils._docstrings import shared_params
from skdpcluster.utils._progress import phase
from skdpcluster.utils._warnings import silenced_warnings, warn_user

__all__ = ["FederatedPrivateKMeans"]

#: FedDP-Lloyds steps of ``n_lloyd_iter="auto"`` after an initialisation that uses no client data.
BASELINE_LLOYD_ITER = 3
_SERVER_INITS = ("feddp", "server_kmeans++", "server_lloyds")
_INITS = (*_SERVER_INITS, "sphere_packing")


@dataclass(frozen=True)
class _FitInputs:
    """The validated data of one fit: client rows, their client ids and the public server rows."""

    X: np.ndarray
    client_ids: np.ndarray | None
    server: np.ndarray | None
    dtype: np.dtype = np.dtype(np.float64)


def _canonical(centers):
    """Rows in lexicographic order (DESIGN.md, privacy rule 2)."""
    return centers[np.lexsort(centers.T[::-1])]


@shared_params
class FederatedPrivateKMeans(_BasePrivateClusterer):
    r"""FedDP-KMeans: differentially private federated k-means with server-side data.

    Scott, Lampert & Saulpic (ICML 2025), Algorithms 1 (FedDP-Init) and 2
    (FedDP-Lloyds); ``spec/feddp_kmeans.md``. The rows of ``X`` are held by
    clients (``client_ids``); the server holds public data
    :math:`Q` = ``X_server`` that may be small and out of distribution. The
    server only ever sees noisy sums over clients of client statistics
    (central DP with a trusted aggregator or secure aggregation, spec §1.1).
    Rows are first projected onto the public ball
    :math:`B(c, \Delta)` (``data_center``, ``data_radius``) and centred at c.

    **FedDP-Init** (``init="feddp"``, three rounds; spec §2):

    1. *Projection.* :math:`\widehat{PP^\top} = \sum_j X_j^\top X_j + E`,
       E symmetric Gaussian with L2 sensitivity :math:`\Delta^2` under
       add/remove, :math:`\sqrt2\Delta^2` under replace-one (the corrected
       sensitivity of spec §8.4-1); :math:`V_k` holds its top
       :math:`p = \min(k, d)` eigenvectors (skipped, and its budget given to
       the other steps, when :math:`k \ge d`).
    2. *Server weights.* :math:`\hat w_q = \sum_j |\{x \in X_j : q =
       \arg\min_{q'}\|V_k^\top(x - q')\|\}| + \mathrm{Lap}(1/\varepsilon_2)`
       for every :math:`q \in Q` (L1 sensitivity 1 under add/remove,
       :math:`\mathrm{Lap}(2/\varepsilon_2)` under replace-one). Points with :math:`\hat w_q <`
       ``min_server_weight`` are dropped (if fewer than k remain, the k
       heaviest are kept with weights floored at 1e-9), and
       ``base_estimator`` runs weighted k-means on :math:`QV_k`, giving
       projected centres :math:`\xi_r`.
    3. *Lift.* Rows are assigned by projected distance to :math:`\xi_r`;
       :math:`\hat m_r = \sum x + N(0, \sigma_3^2 I_d)` (sensitivity
       :math:`\Delta` under add/remove, :math:`2\Delta` under replace-one),
       :math:`\hat n_r = |S_r| + \mathrm{Lap}(1/\varepsilon_{3L})` (twice the
       scale under replace-one)
       and :math:`\nu_r = \hat m_r / \max(\hat n_r, 1)`, projected onto the
       data ball; where :math:`\hat n_r < \max(1, 3 b_{3L})` the lifted
       :math:`V_k\xi_r` is used instead (free post-processing).

    **FedDP-Lloyds** (``n_lloyd_iter`` = T rounds; spec §3): rows are
    assigned by full distance and each centre moves to its noisy mean, with
    :math:`(\varepsilon_{4G}/T, \delta_4/T)` Gaussian sums and
    :math:`\mathrm{Lap}(T/\varepsilon_{4L})` counts per round (the paper's
    §3.2 text; its Algorithm 2 box has an extra factor T, spec §8.4-3), at
    the add/remove sensitivities :math:`\Delta` and 1; under replace-one
    (the default ``neighbouring``) both are doubled.

    **Guarantee** (Theorem 1 with the deltas added, spec §1.4): the fit is
    :math:`(\varepsilon, \delta)`-DP with
    :math:`\varepsilon = \varepsilon_1 + \varepsilon_2 + \varepsilon_{3G} +
    \varepsilon_{3L} + \varepsilon_{4G} + \varepsilon_{4L}` and
    :math:`\delta` the sum of the Gaussian releases' deltas, under the
    relation of ``neighbouring`` for the unit of ``privacy_unit``.
    ``accounting="pld"`` certifies the same releases by the privacy loss
    distribution accountant (as the paper's experiments do) and raises
    every step's epsilon until the PLD total reaches the request. The
    number of rows and of clients is never used except for shapes.

    Parameters
    ----------
    n_clusters : int, default=8
        Number of clusters k. ``n_clusters=1`` is the private mean: one
        FedDP-Lloyd round from the public ``data_center`` (one Voronoi cell:
        every row), i.e. the clients' clipped sum, released once by the
        Gaussian mechanism, and count, released once by the Laplace mechanism
        (by default half of epsilon each, all of delta to the sum;
        ``budget_split``'s ``"lloyd_sums"`` and ``"lloyd_counts"`` set the
        shares), and their ratio (``init_="mean"``, ``n_lloyd_iter_=1``; ``init``
        and ``n_lloyd_iter`` are not used, and ``X_server`` only for the bound:
        with ``data_radius=None`` its radius about ``data_center`` is
        :math:`\Delta`, as for more clusters, so the rows outside it are
        projected onto it; without ``X_server`` the bound is released
        privately). At
        ``privacy_unit="client"`` it is the mean of the clients' clipped
        contributions: a client's sum and count are scaled by one factor so
        that they stay within ``client_clip["lloyd_sums"]`` (default: the
        radius) and ``client_clip["lloyd_counts"]`` (default 1), so with the
        defaults every client weighs about as much as one row, and the noise
        is that of a mean over the number of clients, not of rows; raise
        ``client_clip`` (the noise grows with it) for clients with many rows.
    epsilon : float, default=1.0
        Privacy parameter of the whole fit.
    delta : float, default=1e-6
        Privacy parameter of the whole fit, in (0, 1).
    privacy_unit : {"sample", "client"}, default="sample"
        The unit of privacy (spec §1.2). ``"sample"``: neighbouring
        datasets differ in one row (data-point level); the sensitivities are
        those of one row of norm at most :math:`\Delta`. ``"client"``: they
        differ in all rows of one client; every client's statistic is scaled
        to the bound of ``client_clip`` before the sum (paper App. G.4);
        it needs ``client_ids`` (a ValueError before any spend without
        them: every row would be its own client, and a client of many rows
        would be protected only row by row; spec §8.1). The accountant's
        entry records the unit (``LedgerEntry.privacy_unit``; see
        :class:`~skdpcluster.BudgetAccountant`'s ``privacy_unit``).
    neighbouring : {"replace_one", "add_remove"}, default="replace_one"
        ``"add_remove"`` is the paper's relation (one unit added or removed).
        ``"replace_one"`` calibrates to the replace-one sensitivities (x2,
        and :math:`\sqrt2` for the second moment), which also give the
        guarantee under add/remove, as the library's other estimators.
    init : str or array-like of shape (n_clusters, n_features), default="feddp"
        ``"feddp"``: FedDP-Init. The paper's baselines (§5), all followed by
        FedDP-Lloyds with the whole budget: ``"server_kmeans++"`` (k-means++
        seeding on ``X_server``), ``"server_lloyds"`` (``base_estimator`` on
        ``X_server``), ``"sphere_packing"`` (data-independent, Su et al.
        2017, in the data ball). An array gives public initial centres.
        Without ``X_server``, ``"feddp"`` falls back to
        ``"sphere_packing"`` with a ``UserWarning`` (the server baselines
        raise).
    n_lloyd_iter : int or "auto", default="auto"
        T, the FedDP-Lloyds rounds. ``"auto"``: 0 after FedDP-Init (the
        paper's Pareto-optimal runs used T = 0 in 61-100% of cases, Tables
        4-5) and 3 after an initialisation that uses no client data.
    budget_split : dict, default=None
        Fractions of epsilon per release, keys among ``"projection"``,
        ``"weights"``, ``"sums"``, ``"counts"`` (FedDP-Init steps 1, 2, 3G,
        3L) and ``"lloyd_sums"``, ``"lloyd_counts"`` (FedDP-Lloyds, all
        rounds together); normalised over the releases the fit makes, and
        every one of them needs a positive share. ``None``: the paper's App.
        H.1 rule, (0.2, 0.2, 0.45, 0.15) at sample level and
        (0.35, 0.1, 0.45, 0.1) at client level, times
        :math:`3/(3 + T)`, and :math:`T/(3 + T)` for FedDP-Lloyds (an equal
        share per round of communication) split evenly between sums and
        counts.
    client_clip : dict, default=None
        ``privacy_unit="client"`` only: the per-client contribution bound of
        every release (the sensitivity under add/remove), same keys as
        ``budget_split``. ``"projection"`` bounds
        :math:`\|X_j^\top X_j\|_F`, ``"weights"`` the L1 norm
        :math:`n_j` of a client's histogram, and for ``"sums"``/``"counts"``
        (and the Lloyd pair) a client's sums and counts are scaled by one
        factor :math:`\min(1, C_s/\|M_j\|_F, C_c/n_j)`, so its means are
        not biased by the clipping. Missing keys default to the bound of one
        row: :math:`\Delta^2, 1, \Delta, 1, \Delta, 1`. Every bound lies in
        the range of ``data_radius``, [2**-500, 1e100] ([2**-1000, 1e200]
        for ``"projection"``), and a fit whose sensitivities or noise scales
        are not finite positive floats is refused (ValueError, before any
        spend).
    min_server_weight : float, default=5.0
        Server points with a lower noisy weight are left out of the weighted
        k-means (the reference code's filter, spec §2 step 7).
    accounting : {"basic", "pld"}, default="basic"
        ``"basic"``: sequential composition of the events. ``"pld"``: the
        PLD accountant of the optional ``dp-accounting`` package (``pip
        install dp-accounting``); without it, a ``UserWarning`` and basic
        composition.
    calibration : {"analytic", "classical"}, default="analytic"
        Gaussian calibration: Balle & Wang (2018), as the reference code, or
        the classical bound (epsilon < 1 per release only).
    base_estimator : estimator, default=None
        Non-private clusterer for the public server points; it must accept
        ``sample_weight`` and expose ``cluster_centers_``; its
        ``n_clusters`` and ``random_state`` are set per fit. ``None`` uses
        ``KMeans(n_init=10)`` (spec §8.4-5).
    data_radius : float, "data" or None, default=None
        Public bound :math:`\Delta` on :math:`\|x - c\|`; rows outside are
        projected onto the ball. ``None``: the radius of ``X_server`` around
        c (public; the paper's choice, §5.1; a ValueError before any spend
        when every server row is at c), or, without ``X_server``, a
        centre and a radius released privately on 10% of (epsilon, delta)
        (:mod:`skdpcluster.bounds`; ``privacy_unit="sample"`` only), stored in
        ``data_center_`` and ``data_radius_``. ``"data"``: the radius of
        ``X``, with a :class:`PrivacyLeakWarning`.
        With ``"data"`` the exact bound is used but not stored (``data_radius_``
        is ``nan``) and ``privacy_spent_["proven"]`` is False. At most 1e100.
    data_center : array-like of shape (n_features,), default=None
        Public centre c of the data ball; ``None`` means the origin (the
        paper's uncentred second moment).
    executor : {"joblib", "dask"}, default="joblib"
        Where the client statistics run: joblib (in process when
        ``n_jobs=None``; any :func:`joblib.parallel_config` backend), or the
        running ``distributed.Client``, the shards held by its workers as
        futures for all rounds. The result does not depend on it.
    accountant : BudgetAccountant, default=None
        Charged once per fit with ``privacy_spent_``; ``None`` uses the
        default one.
    random_state : None, int or numpy.random.Generator, default=None
        ``None`` draws fresh OS entropy; an int or a Generator makes the fit
        reproducible.
    n_jobs : int, default=None
        joblib workers (threads) over the shards.
    {verbose}

    Attributes
    ----------
    cluster_centers_ : ndarray of shape (n_clusters, n_features)
        The released centres, rows in lexicographic order. A differentially
        private release.
    initial_centers_ : ndarray of shape (n_clusters, n_features)
        The centres before FedDP-Lloyds, lexicographic order (private).
    components_ : ndarray of shape (n_clusters, n_features) or None
        :math:`V_k^\top`, the private top-k subspace (``None`` when step 1
        did not run).
    projected_centers_ : ndarray of shape (n_clusters, min(n_clusters, n_features)) or None
        :math:`\xi`, the weighted k-means centres in the subspace (private).
    server_weights_ : ndarray of shape (n_server,) or None
        :math:`\hat w_q`, the noisy weights of the server points (private).
    server_mask_ : ndarray of bool of shape (n_server,) or None
        The server points kept for the weighted k-means.
    low_count_clusters_ : dict
        ``{"init": indices, "lloyd": [indices per round]}``: clusters whose
        noisy count was too low, which kept their fallback centre.
    init_ : str
        The initialisation used (``"public"`` for an array).
    n_lloyd_iter_ : int
        T used.
    n_rounds_ : int
        Rounds of client communication.
    budget_ : dict
        The resolved calibration: per release, its mechanism, (epsilon,
        delta) per use, sensitivity, noise scale and uses (public).
    data_radius_ : float
        The bound :math:`\Delta` used (private when ``data_radius=None``; ``nan`` with ``data_radius="data"``).
    {data_center_}
    status_ : str
        ``"success"``: centres are always released; ``"failure"`` only when the private step failed (a
        :class:`~skdpcluster.exceptions.PrivateStepFailedWarning`; nothing released).
    labels_ : ndarray of shape (n_samples,)
        Nearest released centre of every training row. **Not private**: a
        function of the training data, outside the DP guarantee.
    privacy_spent_ : dict
        ``{"epsilon", "delta", "proven"}`` charged to the accountant; never
        more than requested.
    privacy_ledger_ : list of PrivacyEvent
        Every release. With ``accounting="pld"`` the releases carry zero
        cost and a final ``"pld_composition"`` event carries the total.
    n_features_in_ : int
        Number of features seen during fit.
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
        Names of features seen during fit, when ``X`` has string column names.

    See Also
    --------
    skdpcluster.cluster._federated_init : The client statistics and server steps.

    References
    ----------
    J. Scott, C. H. Lampert, D. Saulpic. Differentially Private Federated
    k-Means Clustering with Server-Side Data. ICML 2025 (arXiv 2506.05408).

    Examples
    --------
    >>> import numpy as np
    >>> from skdpcluster.cluster._federated import FederatedPrivateKMeans
    >>> rng = np.random.default_rng(0)
    >>> means = np.array([[-5.0, 0.0], [5.0, 0.0]])
    >>> X = np.vstack([m + rng.normal(size=(20_000, 2)) for m in means])
    >>> clients = rng.integers(0, 50, size=len(X))
    >>> X_server = np.vstack([means + rng.normal(size=(2, 2)), rng.uniform(-8, 8, (20, 2))])
    >>> est = FederatedPrivateKMeans(n_clusters=2, epsilon=1.0, data_radius=10.0,
    ...                              random_state=0)
    >>> est = est.fit(X, client_ids=clients, X_server=X_server)
    >>> np.round(est.cluster_centers_)
    array([[-5., -0.],
           [ 5., -0.]])
    >>> est.privacy_spent_["epsilon"] <= 1.0
    True
    """

    _parameter_constraints: dict = {
        **{name: rule for name, rule in _BasePrivateClusterer._parameter_constraints.items()
           if name != "on_failure"},
        "privacy_unit": [StrOptions({"sample", "client"})],
        "neighbouring": [StrOptions({"replace_one", "add_remove"})],
        "init": [StrOptions(set(_INITS)), "array-like"],
        "n_lloyd_iter": [StrOptions({"auto"}), Interval(Integral, 0, None, closed="left")],
        "budget_split": [None, dict],
        "client_clip": [None, dict],
        "min_server_weight": [Interval(Real, None, None, closed="neither")],
        "accounting": [StrOptions({"basic", "pld"})],
        "calibration": [StrOptions({"analytic", "classical"})],
        "base_estimator": [None, HasMethods(["fit"])],
        "executor": [StrOptions({"joblib", "dask"})],
    }
    _FITTED_ATTRIBUTES = _BasePrivateClusterer._FITTED_ATTRIBUTES + (
        "budget_", "components_", "init_", "initial_centers_", "low_count_clusters_",
        "n_lloyd_iter_", "n_rounds_", "projected_centers_", "server_mask_", "server_weights_")

    def __init__(
        self,
        n_clusters=8,
        *,
        epsilon=1.0,
        delta=1e-6,
        privacy_unit="sample",
        neighbouring="replace_one",
        init="feddp",
        n_lloyd_iter="auto",
        budget_split=None,
        client_clip=None,
        min_server_weight=5.0,
        accounting="basic",
        calibration="analytic",
        base_estimator=None,
        data_radius=None,
        data_center=None,
        executor="joblib",
        accountant=None,
        random_state=None,
        n_jobs=None,
        verbose=0,
    ):
        _store_parameters(self, locals())

    # -- the template, with the federated inputs ------------------------------------
    @fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, *, client_ids=None, X_server=None, **fit_params):
        """Fit privately on the clients' rows and charge the accountant.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            The clients' rows (private). A :class:`dask.array.Array` (or a
            dask dataframe) is read chunk by chunk: every round is one
            map-reduce of the clients' statistics over the chunks, whatever
            ``executor`` says.
        y : Ignored
            Not used, present for API consistency.
        client_ids : array-like of shape (n_samples,) or "chunks", default=None
            The client of every row (any hashable values). ``None``: every
            row is its own client, at ``privacy_unit="sample"`` only (at
            client level, a ValueError before any spend). On Dask input only
            ``None`` and ``"chunks"`` (every chunk of rows is one client,
            e.g. one device or site per partition) are accepted.
        X_server : array-like of shape (n_server, n_features), default=None
            Public server-side data (no privacy cost); needed by
            ``init="feddp"`` and the server baselines. With a
            ``data_radius`` given, rows outside the ball
            B(``data_center``, ``data_radius``) are projected onto it, as the
            clients' are.
        **fit_params : dict
            Refused with a ValueError (``sample_weight`` included): the
            privacy analysis gives every row weight one.

        Returns
        -------
        self : FederatedPrivateKMeans
            The fitted estimator. Invalid input raises before anything is
            spent, and leaves a previous fit in place.
        """
        with _fit_scope(self):
            _reject_fit_params(self, fit_params)
            data = self._validated_inputs(X, client_ids, X_server)
            self._warn_if_noise_dominates(*data.X.shape)
            self._commit(*self._plan_and_run(data))
            self._cast_release(data.dtype)
        self._report_after_fit()
        return self

    def _validated_inputs(self, X, client_ids, X_server):
        if self.privacy_unit == "client" and client_ids is None:
            raise ValueError(
                "privacy_unit='client' needs client_ids (the client of every row, or 'chunks' "
                "on Dask input): without them every row is its own client, so a client with "
                "many rows would be protected only row by row. Pass client_ids, or use "
                "privacy_unit='sample'.")
        if is_dask_collection(X):
            return self._validated_dask_inputs(X, client_ids, X_server)
        X = validate_data(self, X, dtype=[np.float64, np.float32], ensure_min_samples=2)
        dtype = X.dtype
        X = np.asarray(X, dtype=np.float64)
        return _FitInputs(X, _check_client_ids(client_ids, len(X)),
                          _check_server(X_server, X.shape[1]), dtype)

    def _validated_dask_inputs(self, X, client_ids, X_server):
        """Dask rows (validated in one pass, before any randomness) and their client structure."""
        if not (client_ids is None or (isinstance(client_ids, str) and client_ids == "chunks")):
            raise ValueError(
                "on Dask input, client_ids must be None (every row is a client) or 'chunks' "
                "(every chunk of rows is one client); rechunk X so that each client's rows form "
                f"one chunk. Got {type(client_ids).__name__}.")
        if self.data_radius == "data":
            raise ValueError("data_radius='data' is not supported on Dask input; pass a public "
                             "data_radius, or data_radius=None for a private bound.")
        rows = dask_rows_from_input(X, estimator=self)
        dtype = np.dtype(np.float32) if rows.dtype == np.float32 else np.dtype(np.float64)
        return _FitInputs(rows, client_ids, _check_server(X_server, rows.shape[1]), dtype)

    def _executor(self, data, center, radius):
        """The engine of the rounds: the in-memory shards, or one shard per Dask chunk."""
        if hasattr(data.X, "map_reduce"):
            return ChunkedFederatedExecutor(data.X, center, radius,
                                            chunk_is_client=data.client_ids == "chunks")
        rows = clip_rows(data.X, center, radius)
        return FederatedExecutor(build_shards(rows, data.client_ids), self.executor, self.n_jobs)

    def _check_n_clusters(self):
        """Any k >= 1: k-means with one cluster is a private mean (:meth:`_resolve_one_cluster`)."""

    def _resolve_one_cluster(self, data, center):
        r"""``(init, public centres, n_lloyd)``; for ``n_clusters=1``, the one-round private mean.

        With one cluster the Voronoi cell of any centre is every row, so one
        FedDP-Lloyd round from the public centre :math:`\mu` is the private
        mean: the clients' clipped sum and count, released once each by the
        round's mechanisms (Gaussian sum, Laplace count; by default half of
        epsilon each and all of delta to the sum) at the privacy unit's
        sensitivity (one row, or one client's clipped contribution,
        ``client_clip``); the mean is their ratio (post-processing). No
        initialisation is used, and the server data only for the bound
        (``data_radius=None``).
        """
        if self.n_clusters == 1:
            return "public", np.zeros((1, data.X.shape[1])), 1
        init, public_centers = self._resolve_init(data.server, data.X.shape[1], center)
        return init, public_centers, self._resolved_lloyd_iter(init)

    # -- public plan ----------------------------------------------------------------
    def _plan(self, data):
        n_features = data.X.shape[1]
        center = self._resolve_center(n_features)
        init, public_centers, n_lloyd = self._resolve_one_cluster(data, center)
        radius, unproven = self._resolve_federated_radius(data, center)
        active = self._active_steps(init, n_lloyd, min(self.n_clusters, n_features) < n_features)
        unit_bounds = self._unit_bounds(radius)
        budget = self._budget(active, n_lloyd, unit_bounds)
        server = self._server_rows(data.server, center, radius)
        estimator = self._server_estimator(init, server)
        if self.executor == "dask" and not hasattr(data.X, "map_reduce"):
            dask_client()
        values = {"center": center, "radius": radius, "init": init, "public": public_centers,
                  "server": server,
                  "n_lloyd": n_lloyd, "budget": budget, "estimator": estimator,
                  "client_bounds": unit_bounds if self.privacy_unit == "client" else {}}
        attributes = {"data_radius_": radius, "n_lloyd_iter_": n_lloyd,
                      "init_": "mean" if self.n_clusters == 1 else init,
                      "budget_": budget.as_dict()}
        shown = budget.as_dict()
        if unproven:  # the budget's sensitivities and scales are multiples of the radius
            unproven["budget_"] = unproven["data_radius_"]
            shown["steps"] = {step: {key: value for key, value in release.items()
                                     if key not in ("sensitivity", "scale")}
                              for step, release in shown["steps"].items()}
        if self.verbose:  # what budget_ shows: no exact radius (review R8 L4)
            hidden = " (sensitivities and scales hidden: data-derived)" if unproven else ""
            print(f"[{type(self).__name__}] plan: init={init}, T={n_lloyd}, budget={shown}{hidden}")
        return PrivateFitPlan(budget.total, values, attributes, unproven)

    def _resolve_init(self, server, n_features, center):
        """The initialisation's name and, for an array, the public centres (centred)."""
        init = self.init
        if isinstance(init, str):
            if init in _SERVER_INITS and server is None:
                if init != "feddp":
                    raise ValueError(f"init={init!r} runs on the server's data: pass X_server.")
                warn_user(
                    f"{type(self).__name__}: no X_server was given, so init='feddp' falls back "
                    "to the data-independent 'sphere_packing' initialisation followed by "
                    "FedDP-Lloyds with the whole budget. Pass public server-side data as "
                    "X_server for FedDP-Init.", UserWarning)
                return "sphere_packing", None
            if init != "sphere_packing" and len(server) < self.n_clusters:
                raise ValueError(f"X_server has {len(server)} rows; init={init!r} needs at least "
                                 f"n_clusters={self.n_clusters}.")
            return init, None
        centers = np.asarray(init, dtype=float)
        if centers.shape != (self.n_clusters, n_features) or not np.all(np.isfinite(centers)):
            raise ValueError(
                f"init as an array must hold finite public centres of shape (n_clusters, "
                f"n_features) = ({self.n_clusters}, {n_features}), got shape {centers.shape}.")
        return "public", centers - center

    def _row_count_is_public(self):
        """Rows are public in number only at sample level under replace-one (review RC-01).

        At client level one client (any number of rows) is added, removed or
        replaced: the number of rows is private under either relation.
        """
        return self.privacy_unit == "sample" and super()._row_count_is_public()

    def _privacy_unit(self):
        """The accountant's unit: ``privacy_unit`` (``"client"`` needs ``client_ids``, so it is true)."""
        return self.privacy_unit

    def _needs_radius(self, data):
        """The public server data gives the bound when there is some (no private bound then).

        The private bound is proven for one row (``privacy_unit="sample"``); a client
        holds many rows, so ``privacy_unit="client"`` needs a public ``data_radius``.
        """
        if data.server is not None:
            return False
        if self.privacy_unit == "client":
            raise ValueError(
                "data_radius=None estimates the bound privately per row, which does not protect "
                "a whole client: with privacy_unit='client', pass a public data_radius (and "
                "data_center), or public server-side rows as X_server.")
        return True

    def _bounds_rows(self, data):
        return data.X

    def _resolve_federated_radius(self, data, center):
        """Delta: the parameter, else the public server radius, else the data's (leak warning).

        A server with no spread about ``data_center`` (radius 0) is refused
        before any randomness: the exact radius of the private rows is never
        used unless ``data_radius="data"`` asks for it (review RC-02).

        Returns the radius and the plan's ``unproven`` dict (see ``_resolve_radius``).
        """
        if self.data_radius is None and data.server is not None:
            radius = _largest_norm(data.server - center)
            if radius > self._max_data_radius():
                shown = f"{radius:.3g}" if math.isfinite(radius) else "beyond the float64 range"
                raise ValueError(
                    f"X_server's largest norm about data_center, {shown}, is above "
                    f"{self._max_data_radius():.3g}, where the distances of "
                    f"{type(self).__name__} overflow; rescale X and X_server (and data_center), "
                    "or pass a public data_radius.")
            if radius == 0:
                raise ValueError(
                    "X_server has no spread about data_center (every server row is at the "
                    "centre), so it gives no bound on the clients' rows; pass a public "
                    "data_radius, or server rows with spread as X_server.")
            if radius < self._MIN_DATA_RADIUS:
                raise ValueError(
                    f"X_server's largest norm about data_center, {radius:.3g}, is below 2**-500 "
                    f"(about {self._MIN_DATA_RADIUS:.3g}), where the rounding bounds of "
                    f"{type(self).__name__}'s private steps underflow; rescale X and X_server "
                    "(and data_center), or pass a public data_radius.")
            return self._checked_radius(radius), {}
        return self._resolve_radius(data.X, center)

    def _resolved_lloyd_iter(self, init):
        if self.n_lloyd_iter == "auto":
            return 0 if init == "feddp" else BASELINE_LLOYD_ITER
        if self.n_lloyd_iter == 0 and init != "feddp":
            raise ValueError(f"n_lloyd_iter=0 with init={init!r} would use no client data; set "
                             "n_lloyd_iter >= 1.")
        return int(self.n_lloyd_iter)

    @staticmethod
    def _active_steps(init, n_lloyd, project):
        """The releases this fit makes, in protocol order."""
        steps = [s for s in INIT_STEPS if s != "projection" or project] if init == "feddp" else []
        return steps + (["lloyd_sums", "lloyd_counts"] if n_lloyd else [])

    def _default_split(self, n_lloyd):
        lloyd_share = n_lloyd / (n_lloyd + INIT_ROUNDS)
        split = {step: share * (1.0 - lloyd_share)
                 for step, share in DEFAULT_INIT_SPLIT[self.privacy_unit].items()}
        split["lloyd_sums"] = lloyd_share * LLOYD_GAUSSIAN_SHARE
        split["lloyd_counts"] = lloyd_share * (1.0 - LLOYD_GAUSSIAN_SHARE)
        return split

    def _shares(self, active, n_lloyd):
        """Fractions of epsilon of the active releases, normalised (named, never positional)."""
        split = self._default_split(n_lloyd) if self.budget_split is None else self.budget_split
        _check_step_dict(split, "budget_split", allow_zero=True)
        missing = [step for step in active if not split.get(step, 0) > 0]
        if missing:
            raise ValueError(f"budget_split={split!r} gives no share to {missing}, which this fit "
                             f"releases (the releases of this fit: {active}).")
        total = math.fsum(split[step] for step in active)
        return {step: split[step] / total for step in active}

    def _unit_bounds(self, radius):
        """Add/remove sensitivity of every release: one row's (sample level) or the client clip."""
        one_row = {"projection": radius**2, "weights": 1.0, "sums": radius, "counts": 1.0,
                   "lloyd_sums": radius, "lloyd_counts": 1.0}
        if self.privacy_unit == "sample":
            if self.client_clip is not None:
                raise ValueError("client_clip is used with privacy_unit='client' only.")
            return one_row
        clip = {} if self.client_clip is None else self.client_clip
        _check_step_dict(clip, "client_clip", allow_zero=False)
        for step, bound in clip.items():
            # The bounds data_radius has (squared for the second moment), so that nothing overflows.
            power = 2 if step == "projection" else 1
            low, high = self._MIN_DATA_RADIUS**power, self._MAX_DATA_RADIUS**power
            if not low <= bound <= high:
                raise ValueError(
                    f"client_clip[{step!r}]={bound!r} is outside [{low:.3g}, {high:.3g}] (the "
                    f"range of data_radius{'**2' if power == 2 else ''}), where the sensitivities "
                    "and noise scales underflow or overflow; rescale X and the clip bounds.")
        return {**one_row, **{step: float(bound) for step, bound in clip.items()}}

    def _budget(self, active, n_lloyd, unit_bounds):
        if self.accounting == "pld" and self.calibration != "analytic":
            raise ValueError("accounting='pld' calibrates with the analytic Gaussian mechanism; "
                             "use calibration='analytic'.")
        column = 0 if self.neighbouring == "add_remove" else 1
        sensitivities = {step: unit_bounds[step] * SENSITIVITY_FACTOR[step][column]
                         for step in active}
        counts = {step: n_lloyd if step.startswith("lloyd") else 1 for step in active}
        arguments = (self._shares(active, n_lloyd), float(self.epsilon), float(self.delta),
                     sensitivities, counts)
        budget = self._calibrated(*arguments, accounting=self.accounting)
        if budget is None:
            warn_user(f"{type(self).__name__}: accounting='pld' needs the optional package "
                      "dp-accounting (pip install dp-accounting); using basic composition.",
                      UserWarning)
            budget = self._calibrated(*arguments, accounting="basic")
        return budget

    def _calibrated(self, *arguments, accounting):
        """:func:`plan_budget`, refusing (ValueError, before any randomness) a release whose
        sensitivity or noise scale is not a finite positive number (review R8 L5): the public
        parameters are beyond what float64 calibrates."""
        message = (f"epsilon={self.epsilon!r}, delta={self.delta!r} and the sensitivities "
                   "(data_radius, client_clip) give noise that float64 cannot calibrate{}: every "
                   "sensitivity and noise scale must be a finite positive number; use a moderate "
                   "epsilon (and rescale X).")
        try:
            budget = plan_budget(*arguments, calibration=self.calibration, accounting=accounting)
        except (OverflowError, ZeroDivisionError) as error:
            raise ValueError(message.format(f" ({error})")) from error
        bad = [step for step, release in getattr(budget, "releases", {}).items()
               if not (0 < release.sensitivity < math.inf and 0 < release.scale < math.inf)]
        if bad:
            raise ValueError(message.format(f" for {bad}"))
        return budget

    def _server_rows(self, server, center, radius):
        """The public server rows centred at c and, with a ``data_radius`` given, in the ball.

        A given radius bounds the clients' rows, not the server's: a server
        row outside B(0, ``data_radius``) is projected onto it (a public map
        of public data), so that no server row can overflow the distances or
        put a centre outside the ball (review R8 L2). With
        ``data_radius=None`` the ball is the server's own and holds them.
        Rows whose difference with ``data_center`` overflows are refused.
        """
        if server is None:
            return None
        with np.errstate(over="ignore", invalid="ignore"):
            rows = server - center
        if not np.all(np.isfinite(rows)):
            raise ValueError("X_server - data_center overflows the float64 range; rescale X and "
                             "X_server (and data_center).")
        if self.data_radius is not None:
            project_into_ball(rows, radius)
        return rows

    def _server_estimator(self, init, server):
        """The server's clusterer, checked before any randomness on the public ``X_server``.

        For the inits that use it (``"feddp"``, ``"server_lloyds"``), a clone
        is fit on the public server rows, in the shape FedDP-Init gives it
        (their first ``min(k, d)`` centred coordinates, weighted, for
        ``"feddp"``): an estimator that cannot return k centres (no
        ``cluster_centers_``, as DBSCAN or MeanShift) is refused here, not
        after the budget is spent (review RC-07). The default ``KMeans``
        needs no trial. ``server`` is :meth:`_server_rows`.
        """
        if self.base_estimator is None:
            return KMeans(n_init=10)
        estimator = self.base_estimator
        if init not in ("feddp", "server_lloyds"):
            return estimator
        weighted = init == "feddp"
        if weighted and not has_fit_parameter(estimator, "sample_weight"):
            raise ValueError(f"base_estimator {estimator!r} must accept sample_weight in fit: "
                             "FedDP-Init clusters the server points weighted by their noisy "
                             "counts.")
        points = server
        if weighted:
            points = points[:, :min(self.n_clusters, points.shape[1])]
        try:
            with silenced_warnings():  # a trial: a third-party fit, on the shared silence
                _fit_centers(estimator, self.n_clusters, points, 0,
                             np.ones(len(points)) if weighted else None)
        except Exception as error:  # public data, before any randomness: refuse, naming it
            raise ValueError(
                f"base_estimator {estimator!r} cannot cluster the server points: it must take "
                "n_clusters and expose cluster_centers_ of shape (n_clusters, n_features) after "
                f"fit (a trial fit on X_server raised {type(error).__name__}: {error}); use a "
                "k-means-like estimator such as sklearn.cluster.KMeans.") from error
        return estimator

    # -- private part -----------------------------------------------------------------
    def _fit_private(self, data, plan, rng):
        values = plan.values
        center, radius, server = values["center"], values["radius"], values["server"]
        init_rng, lloyd_rng = rng.spawn(2)
        common = {"budget": values["budget"], "bounds": values["client_bounds"], "radius": radius,
                  "neighbouring": self.neighbouring}
        with self._executor(data, center, radius) as executor:
            phase("initialisation", init=values["init"])
            initial, events, info = self._initial_centers(executor, server, values, common,
                                                          data.X.shape[1], init_rng)
            phase("FedDP-Lloyds", rounds=values["n_lloyd"])
            centers, lloyd_events, lloyd_low = federated_lloyd(
                executor, initial, n_iter=values["n_lloyd"], rng=lloyd_rng, **common)
        centers = _canonical(centers + center)
        attributes = {
            "initial_centers_": _canonical(initial + center),
            "components_": info.get("components_"),
            "projected_centers_": info.get("projected_centers_"),
            "server_weights_": info.get("server_weights_"),
            "server_mask_": info.get("server_mask_"),
            "low_count_clusters_": {"init": info.get("init_low_count_", np.array([], dtype=int)),
                                    "lloyd": lloyd_low},
            "n_rounds_": executor.n_rounds,
            "labels_": _nearest_labels(data.X, centers),
        }
        if self.n_clusters == 1:  # the one round is the private mean: the ledger says so
            lloyd_events = [e.with_label(e.label.replace("/lloyd_1/", "/mean/"))
                            for e in lloyd_events]
        ledger = price_events(events + lloyd_events, values["budget"], self.neighbouring,
                              self.privacy_unit)
        return PrivateFit(centers, True, ledger, attributes=attributes)

    def _initial_centers(self, executor, server, values, common, n_features, rng):
        """FedDP-Init, a baseline or the public centres: ``(centres, events, info)``, centred."""
        init = values["init"]
        if init == "feddp":
            return feddp_init(executor, server, n_clusters=self.n_clusters,
                              min_weight=self.min_server_weight, estimator=values["estimator"],
                              rng=rng, **common)
        if init == "public":
            return _project_onto_ball(values["public"], 0.0, values["radius"]), [], {}
        centers = baseline_init(init, server, n_clusters=self.n_clusters, n_features=n_features,
                                radius=values["radius"], estimator=values["estimator"], rng=rng)
        return centers, [], {}


def _largest_norm(rows):
    """max_i ||rows_i|| without under- or overflow of the squares (scaled by a power of two).

    ``inf`` only when a row's norm, or an entry, is beyond the float64 range.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        peak = float(np.max(np.abs(rows)))
        if peak == 0.0 or not math.isfinite(peak):
            return peak
        exponent = math.frexp(peak)[1]
        return float(np.ldexp(np.max(np.linalg.norm(np.ldexp(rows, -exponent), axis=1)),
                              exponent))


def _nearest_labels(X, centers):
    """Nearest released centre of every row (a lazy Dask array for Dask rows)."""
    if hasattr(X, "map_rows"):
        return X.map_rows(_nearest_labels, centers, dtype=np.intp)
    return pairwise_distances_argmin_min(X, centers)[0].astype(np.intp)


def _store_parameters(estimator, parameters):
    """``__init__`` stores its parameters unchanged (scikit-learn's convention), nothing else."""
    for name, value in parameters.items():
        if name not in ("self", "__class__"):
            setattr(estimator, name, value)


def _check_client_ids(client_ids, n_samples):
    """A 1-d array of n_samples hashable, comparable ids (finite if numeric), or None."""
    if client_ids is None:
        return None
    ids = np.asarray(client_ids)
    if ids.shape != (n_samples,):
        raise ValueError(f"client_ids must have shape (n_samples,) = ({n_samples},), got "
                         f"{ids.shape}.")
    if ids.dtype.kind in "fc" and not np.all(np.isfinite(ids)):
        raise ValueError("client_ids contains NaN or infinity.")
    try:
        np.unique(ids)
    except TypeError as error:
        raise ValueError(f"client_ids must be sortable values of one type: {error}") from None
    return ids


def _check_server(X_server, n_features):
    """Finite float64 server rows with the clients' n_features, or None."""
    if X_server is None:
        return None
    server = check_array(X_server, dtype=np.float64, input_name="X_server")
    if server.shape[1] != n_features:
        raise ValueError(f"X_server has {server.shape[1]} features, but X has {n_features}.")
    return server


def _check_step_dict(mapping, name, *, allow_zero):
    """Keys among the protocol's releases; finite values, >= 0 or > 0."""
    unknown = set(mapping) - set(STEPS)
    ok = all(isinstance(v, Real) and not isinstance(v, bool) and math.isfinite(v)
             and (v >= 0 if allow_zero else v > 0) for v in mapping.values())
    if unknown or not ok:
        sign = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must map keys among {list(STEPS)} to finite numbers {sign}, "
                         f"got {mapping!r}.")
