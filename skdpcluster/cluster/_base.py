"""Template-method base class shared by the private clustering estimators.

``fit`` does, in order: validate the parameters (declared as data in
``_parameter_constraints``) and the input; build a public *plan* (everything
that depends only on public values, such as the number of rows; too few rows
raise here); check the plan's cost against the accountant; create the random
generator; run ``_fit_private``; charge the accountant with the events the fit
actually spent; and only then set the fitted attributes. A fit that raises
leaves the accountant and the previous fitted state unchanged.

A new estimator writes ``_plan``, ``_fit_private`` and its constraints.
"""

import math
from dataclasses import dataclass, field, replace
from numbers import Integral, Real

import numpy as np
from sklearn.base import (
    BaseEstimator,
    ClassNamePrefixFeaturesOutMixin,
    ClusterMixin,
    TransformerMixin,
    clone,
)
from sklearn.exceptions import NotFittedError
from sklearn.metrics import pairwise_distances_argmin_min
from sklearn.metrics.pairwise import euclidean_distances
from sklearn.utils.validation import check_is_fitted, validate_data

from skdpcluster.accountant import BudgetAccountant, drawn_noise_key, noise_fingerprint
from skdpcluster.bounds import BOUNDS_SHARE, GRID_RANGE, RADIUS_SAFETY, plan_bounds, release_bounds
from skdpcluster.exceptions import (
    DetachedAccountantError,
    NotSeparatedError,
    NotSeparatedWarning,
    PrivacyAccountingError,
    PrivacyLeakWarning,
    PrivateStepFailedWarning,
    UtilityWarning,
)
from skdpcluster.mechanisms import PrivacyEvent
from skdpcluster.utils import check_random_state
from skdpcluster.utils._compat import Interval, StrOptions, fit_context
from skdpcluster.utils._data import (
    check_dask_predict_input,
    dask_rows_from_input,
    is_dask_collection,
)
from skdpcluster.utils._progress import fit_progress, phase
from skdpcluster.utils._warnings import collected_warnings, warn_user

__all__ = ["PrivateFit", "PrivateFitPlan"]


@dataclass
class PrivateFitPlan:
    """Public decisions of a fit, made before any randomness.

    Attributes
    ----------
    cost : (float, float)
        The (epsilon, delta) the fit will charge at most.
    values : dict
        Public values the private fit needs (for example ``n_tuples``,
        ``data_radius``); the ones named in ``attributes`` are also stored as
        fitted attributes.
    attributes : dict
        Fitted attributes decided by the plan.
    unproven : dict
        ``{name: reason}`` for every value of the plan that was computed from
        the data (with a :class:`PrivacyLeakWarning`) instead of being public.
        The fit then reports ``privacy_spent_["proven"] = False``, its ledger
        holds a zero-cost ``"unproven"`` event listing the reasons (the other
        events lose their sensitivity, scale and details, which could reveal
        the value), and a fitted attribute with that ``name`` is stored as
        ``nan``, never as the exact data-derived value (or a value computed
        from it).
    """

    cost: tuple
    values: dict = field(default_factory=dict)
    attributes: dict = field(default_factory=dict)
    unproven: dict = field(default_factory=dict)


@dataclass
class PrivateFit:
    """What ``_fit_private`` returns: the release and its price.

    ``rho`` is the zCDP of the releases the fit composed in zCDP (reported
    as ``privacy_spent_["rho"]``), ``None`` when none were. ``warnings``
    holds the ``(message, category)`` of warnings the private step computed
    from released and public values: :meth:`_PrivateFitMixin._report_after_fit`
    gives them once the fit is committed.
    """

    centers: np.ndarray | None
    success: bool
    events: list
    proven: bool = True
    attributes: dict = field(default_factory=dict)
    rho: float | None = None
    step_failed: bool = False
    status: str | None = None
    warnings: list = field(default_factory=list)

    def spent(self):
        """Basic composition of the events."""
        return (
            math.fsum(event.cost()[0] for event in self.events),
            math.fsum(event.cost()[1] for event in self.events),
        )


def _mark_unproven(events, unproven):
    """The events of a fit whose plan used data-derived values, redacted, and one marker event.

    A noise scale or sensitivity calibrated to a data-derived bound would
    reveal that bound exactly, so ``sensitivity``, ``scale`` and ``details``
    are dropped; the costs stay. The zero-cost ``"unproven"`` event says why
    the fit is not proven private and which fitted attributes are hidden.
    """
    if not unproven:
        return list(events)
    redacted = [
        replace(event, sensitivity=None, scale=None,
                details={"redacted": "calibrated to a data-derived bound"})
        for event in events
    ]
    marker = PrivacyEvent(
        "unproven", 0.0, 0.0, label="unproven/data_derived_public_values",
        details={"proven": False, "reasons": sorted(set(unproven.values())),
                 "hidden_attributes": sorted(name for name in unproven if name.endswith("_"))},
    )
    return redacted + [marker]


#: Noise of a released centre, as a fraction of the data bound, above which a fit warns.
UTILITY_NOISE_FRACTION = 0.1


def _reject_fit_params(estimator, fit_params):
    """Refuse extra fit arguments such as ``sample_weight``, before anything is spent."""
    if fit_params:
        raise ValueError(
            f"{type(estimator).__name__}.fit does not accept {sorted(fit_params)}: weighted rows "
            "are not supported (the privacy analysis gives every row weight one, so a weight "
            "would change the sensitivity). Repeat or drop rows instead, or fit without weights."
        )


def _random_state_constraint():
    return [None, Interval(Integral, 0, None, closed="left"), np.random.Generator]


class ReleasedRadius(float):
    """A ``data_radius`` released by the private bound (``data_radius=None``), not the user's.

    The inner fit of :meth:`_PrivateFitMixin._plan_and_run` gets it as its
    public ``data_radius``; a parameter value (not an attribute) so that it
    survives :func:`sklearn.base.clone` into the copies the inner fit makes
    (the cost estimate's, the fallback split's): checks that refuse a user's
    bound move a released one instead (re-review V3: a ``_radius_released``
    attribute was lost on clone, and ``KTupleClusterer(estimate_cost=True,
    r_min=0.01)`` was refused naming a radius the user never gave).
    """

    __slots__ = ()


class _PrivateFitMixin:
    """The check-then-commit fit template, shared by every private estimator.

    Subclasses provide ``_parameter_constraints``, ``_plan`` and
    ``_fit_private``; ``_check_n_clusters`` is a hook run after the data is
    validated.
    """

    # -- the template -----------------------------------------------------------
    @fit_context(prefer_skip_nested_validation=True)
    def fit(self, X, y=None, **fit_params):
        """Fit privately and charge the accountant.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data. The number of rows is public under replace-one
            neighbours (the default); under add/remove, nothing but the
            refusal of fewer than 2 rows depends on it. The
            estimators whose ``_CHUNKED_INPUT`` is True also accept a
            :class:`dask.array.Array` (or a dask dataframe of numeric
            columns) with known chunk sizes: every pass over the rows is then
            a map-reduce of per-chunk statistics (the guide's "Fitting out
            of core on Dask").
        y : Ignored
            Not used, present for API consistency.
        **fit_params : dict
            Refused with a ValueError (``sample_weight`` included): the
            privacy analysis gives every row weight one.

        Returns
        -------
        self : object
            Fitted estimator.
        """
        with _fit_scope(self):
            _reject_fit_params(self, fit_params)
            X, dtype = self._validated_training_input(X)
            self._check_n_clusters()
            self._warn_if_noise_dominates(*X.shape)
            self._commit(*self._plan_and_run(X))
            self._cast_release(dtype)
        self._report_after_fit()
        return self

    def _report_after_fit(self):
        """The warnings about a committed fit, from its released attributes (every fit template).

        Given after the fit's restore-on-error scope, so that a warning made an
        error (``-W error``, ``setup.cfg``) leaves the charged fit in place:
        given inside the safety net, the private-step warning escaped before
        the spend and a failure charged nothing (review R3-1); inside the
        scope, it restored an earlier fit beside the new charge (review R4-1).
        The ledger's ``"private_step_failed"`` events include those of nested
        fits, whose own warnings their caller silences (review R4-2). The
        warnings the private step computed from the released bound come next
        (review R7, M1).
        """
        ledger = getattr(self, "privacy_ledger_", None) or ()
        deferred = vars(self).pop("_deferred_warnings", ())
        if any(event.mechanism == "private_step_failed" for event in ledger):
            warn_user(
                f"{type(self).__name__}: a private step raised on this data after its "
                "randomness was drawn ('private_step_failed' in privacy_ledger_): what it would "
                "have released was not, and its whole planned budget was charged. The failure is "
                "not covered by the privacy proof (proven=False). Please report it: the private "
                "step should handle this data.",
                PrivateStepFailedWarning,
            )
        for message, category in deferred:
            warn_user(message, category)
        self._warn_after_fit()

    def _warn_after_fit(self):
        """Utility warnings from the fitted, released attributes (a hook; none by default).

        Called once the fit is committed, outside its restore-on-error scope: a
        warning turned into an error (``-W error``) then leaves the charged
        fit in place rather than discarding a release that was paid for.
        """

    #: Whether ``fit`` accepts Dask input (its passes go through :mod:`skdpcluster.utils._data`).
    _CHUNKED_INPUT = False

    def _validated_training_input(self, X):
        """The validated rows (float64 array, or Dask rows) and the dtype of the release.

        Dask input is refused, before anything is spent, by estimators whose
        passes do not go through :mod:`skdpcluster.utils._data` yet, and with
        ``data_radius="data"`` (the exact bound is not computed out of core).
        """
        name = type(self).__name__
        if hasattr(X, "map_reduce") and self._CHUNKED_INPUT:
            # Rows validated by an enclosing fit (a nested fallback fit): nothing to read again.
            self.n_features_in_ = X.shape[1]
            return X, np.dtype(np.float64)
        if not is_dask_collection(X):
            X = validate_data(self, X, dtype=[np.float64, np.float32], ensure_min_samples=2)
            return np.asarray(X, dtype=np.float64), X.dtype
        if not self._CHUNKED_INPUT:
            raise ValueError(
                f"{name}.fit does not accept Dask input yet (issue #20); PrivateStableKMeans, "
                "PrivateStableKMedian, KTupleClusterer, FederatedPrivateKMeans, "
                "PrivateGaussianMixture, PrivateHighDimKMeans and PrivateHighDimKMedian do (the "
                "guide's 'Fitting out of core on Dask'). Pass X.compute() if it fits in memory.")
        if getattr(self, "data_radius", None) == "data":
            raise ValueError(
                f"{name}: data_radius='data' is not supported on Dask input; pass a public "
                "data_radius, or data_radius=None for a private bound.")
        rows = dask_rows_from_input(X, estimator=self)
        dtype = np.dtype(np.float32) if rows.dtype == np.float32 else np.dtype(np.float64)
        return rows, dtype

    def _cast_release(self, dtype):
        """Store the released parameters in the input's dtype (a hook; float64 by default)."""

    # -- honest utility signal (public values only) ----------------------------------
    #: The fraction of the bound falls as ``n_samples ** -_NOISE_RATE``: 1 in the central
    #: model (a noisy sum over n/k rows), 1/2 in the local model (every row randomized).
    _NOISE_RATE = 1.0

    def _noise_fraction(self, n_samples, n_features):
        r"""Public estimate of the noise of one released centre, as a fraction of the bound.

        A centre is a noisy mean of about :math:`n/k` rows of a ball of radius
        :math:`\Lambda`; the noise of each coordinate's sum has scale about
        :math:`2\Lambda/\varepsilon`, so the centre's error is about
        :math:`2\Lambda k\sqrt d/(\varepsilon n)`: the fraction
        :math:`2k\sqrt d/(\varepsilon n)` of the bound, whatever the bound.
        An order of magnitude, not a bound: each method's constants differ.
        """
        return 2.0 * self._n_centres() * math.sqrt(n_features) / (self.epsilon * n_samples)

    def _n_centres(self):
        """Released centres: ``n_clusters``, ``n_components``, or one (a scaler's mean)."""
        return getattr(self, "n_clusters", None) or getattr(self, "n_components", 1)

    def _row_count_is_public(self):
        """Whether the number of rows is public: under replace-one neighbours (rows, not clients)."""
        return getattr(self, "neighbouring", "replace_one") == "replace_one"

    def _warn_if_noise_dominates(self, n_samples, n_features):
        """Warn (:class:`UtilityWarning`) before spending when the centres will be close to random.

        The estimate reads the number of rows, so it is given only where that
        number is public (:meth:`_row_count_is_public`): under add/remove
        neighbours (or client-level privacy) the warning would tell whether
        n is below a threshold, a release outside the ledger (review RC-01).
        """
        if not self._row_count_is_public():
            return
        fraction = self._noise_fraction(n_samples, n_features)
        if fraction <= UTILITY_NOISE_FRACTION:
            return
        with np.errstate(over="ignore"):  # at a tiny epsilon no float64 count of rows suffices
            needed = float(n_samples * np.float64(fraction / UTILITY_NOISE_FRACTION)
                           ** (1.0 / self._NOISE_RATE))
        rows = (f"About {math.ceil(needed)} rows" if math.isfinite(needed)
                else "More rows than float64 counts")
        warn_user(
            f"{type(self).__name__}: with {n_samples} rows, epsilon={self.epsilon}, "
            f"{self._n_centres()} centres and {n_features} features, the noise of each released "
            f"centre is at least about {fraction:.0%} of the data bound (a public estimate); the "
            f"centres may be close to random. {rows} (or a larger epsilon) bring it below "
            f"{UTILITY_NOISE_FRACTION:.0%}.",
            UtilityWarning,
        )

    def _check_n_clusters(self):
        if self.n_clusters < 2:
            raise ValueError(
                f"n_clusters={self.n_clusters}: {type(self).__name__} needs n_clusters >= 2 (the "
                "separation of a clustering is defined between pairs of centres); for one cluster "
                "use a private mean, skdpcluster.averaging.private_average."
            )

    def _run(self, data, plan, private_step=None):
        """Check the budget, draw the generator, run the private step and charge the accountant."""
        accountant = self._resolve_accountant()
        noise_key = noise_fingerprint(type(self).__name__, self.random_state)
        relation, unit = self._neighbouring(), self._privacy_unit()
        # The noise stream is reserved with the check, atomically, and released if no spend follows.
        with accountant.reserve(*plan.cost, noise_key=noise_key, neighbouring=relation,
                                privacy_unit=unit):
            rng = check_random_state(self.random_state)
            with fit_progress(self):
                result = self._run_private_step(private_step or self._fit_private, data, plan, rng)
            spent = result.spent()
            if not (spent[0] <= plan.cost[0] * (1 + 1e-9) and spent[1] <= plan.cost[1] * (1 + 1e-9)):
                raise RuntimeError(
                    f"internal accounting error: the fit spent {spent}, more than planned {plan.cost}."
                )
            # Only the sources the fit drew from are recorded: an unused one is still fresh (R1-1).
            accountant.spend(*spent, label=f"{type(self).__name__}.fit", events=result.events,
                             noise_key=drawn_noise_key(noise_key, rng), neighbouring=relation,
                             privacy_unit=unit)
        return plan, result, spent

    def _run_private_step(self, private_step, data, plan, rng):
        """Run the private step; a raise becomes a charged, unproven failure; mark unproven plans.

        Once ``rng`` exists, no data-dependent exception may escape a fit
        (the raise itself would be a free, exact distinguisher between
        neighbours). Private steps handle the data values they can meet at
        their source; this is the last line of defence.
        """
        try:
            result = private_step(data, plan, rng)
        except PrivacyAccountingError:
            raise  # a defect of the code (an overspending component), whatever the data
        except Exception:  # noqa: BLE001 - any escaping exception would leak; see the docstring
            result = self._failed_private_step(plan)
        result.events = _mark_unproven(result.events, plan.unproven)
        # An event marked unproven (a reproduction mode, or a nested fit's failed step)
        # makes the whole fit unproven.
        marked = any(event.details.get("proven", True) is False for event in result.events)
        result.proven = result.proven and not marked
        return result

    def _failed_private_step(self, plan):
        """Release nothing and charge the whole planned cost (a public value) as one event.

        Neither the exception nor its message (which may quote data values)
        is shown or kept; :meth:`_report_after_fit` warns, with a fixed text,
        once the fit is committed.
        """
        event = PrivacyEvent(
            "private_step_failed", float(plan.cost[0]), float(plan.cost[1]),
            label=f"{type(self).__name__}/private_step_failed",
            neighbouring=self._neighbouring(),
            details={"reason": "the private step raised; the planned cost is charged in full",
                     "proven": False, "privacy_unit": self._privacy_unit()},
        )
        # Nothing of an earlier fit may pass for this fit's release, and a failed first fit has
        # the attributes of a failed refit (review R3-6).
        kept = {"n_features_in_", "feature_names_in_", *plan.attributes}
        fitted = {*self._FITTED_ATTRIBUTES,
                  *(name for name in vars(self) if name.endswith("_") and not name.startswith("_"))}
        stale = {name: None for name in fitted if name not in kept}
        return PrivateFit(None, False, [event], proven=False, step_failed=True,
                          attributes={**stale, **self._failure_attributes(plan)})

    #: The fitted attributes of a release, besides ``status_`` and ``privacy_*`` (a hook): a fit
    #: whose private step failed sets those its plan does not to ``None``.
    _FITTED_ATTRIBUTES = ()

    def _failure_attributes(self, plan):
        """Fitted attributes of a fit whose private step failed, besides ``None`` (a hook)."""
        return {}

    #: Entries of fitted dict attributes computed from the bound (``{attribute: keys}``):
    #: hidden with it when the bound is data-derived (a hook; review RA-7).
    _BOUND_DERIVED_ENTRIES = {}

    def _commit(self, plan, result, spent):
        # A data-derived public value is used by the private step, but never stored exactly,
        # nor any value computed from it (e.g. the located grid width, 2 data_radius sqrt(2)^-j).
        hidden = {name: np.nan for name in plan.unproven if name.endswith("_")}
        # The centre of the bound is this fit's: the released one (data_radius=None), else the
        # public data_center or the origin, never an earlier fit's (review R7, L1); None after
        # a failed private step, first fit or refit (review R3-6).
        public_center = {"data_center_": None if result.step_failed
                         else self._resolve_center(self.n_features_in_)}
        attributes = {**public_center, **plan.attributes, **result.attributes, **hidden}
        if plan.unproven:
            for name, keys in self._BOUND_DERIVED_ENTRIES.items():
                if isinstance(attributes.get(name), dict):
                    attributes[name] = {**attributes[name],
                                        **{key: np.nan for key in keys if key in attributes[name]}}
        for name, value in attributes.items():
            setattr(self, name, value)
        self.status_ = result.status or ("success" if result.success else "failure")
        self.privacy_spent_ = {"epsilon": spent[0], "delta": spent[1], "proven": result.proven}
        if result.rho is not None:
            self.privacy_spent_["rho"] = result.rho
        self.privacy_ledger_ = list(result.events)
        deferred = list(result.warnings)
        outcome = self._outcome_message(result)
        if outcome is not None and getattr(self, "on_failure", "warn") == "raise":
            for message, category in deferred:  # the bound's warnings before the documented raise
                warn_user(message, category)
            raise NotSeparatedError(outcome)  # the scope puts the previous fit back
        if outcome is not None:
            # Given after the scope with the others: inside it, made an error (-W error), it put
            # the previous fit back beside the new charge (review R9, M2).
            deferred.append((outcome, NotSeparatedWarning))
        self._deferred_warnings = deferred  # given by _report_after_fit

    def _outcome_message(self, result):
        """The message of a failed private test or a fallback release; ``None`` for a success."""
        if not (result.success or result.step_failed):
            return self._failure_message()
        if self.status_ == "fallback":
            return self._fallback_message()
        return None

    def _failure_message(self):
        return (
            f"{type(self).__name__}: the private easy-instance test failed (status_='failure'); "
            "nothing was released. The data may not be well separated, or there may be too "
            "little data per tuple. The budget of the test was spent."
        )

    def _fallback_message(self):
        return (
            f"{type(self).__name__}: the main method did not run or its private test failed "
            "(status_='fallback'); centres were released by the general method on the reserved "
            "share of the budget. fallback_info_ says why."
        )

    def _resolve_accountant(self):
        """The ``accountant`` parameter, or the process default; refused for an unpickled instance.

        An instance re-created by unpickling (a worker process of a parallel
        search, ``copy.deepcopy``, a saved model) with ``accountant=None``
        would otherwise charge the default accountant of whatever process it
        lands in, which nobody reads.
        """
        if self.accountant is not None:
            return self.accountant
        if getattr(self, "_unpickled", False):
            raise DetachedAccountantError(
                f"this {type(self).__name__} was re-created by unpickling (a worker process of a "
                "parallel search, copy.deepcopy, or a saved model) and has accountant=None: its "
                "spends would go to the default accountant of this process and never reach yours. "
                "Pass accountant= explicitly, use sklearn.base.clone(estimator) in the process "
                "that owns the ledger, or charge a process-parallel search up front with "
                "skdpcluster.model_selection.fit_search_charged."
            )
        return BudgetAccountant.default()

    def __setstate__(self, state):
        """Unpickle, marking the instance so that it never spends silently on a default accountant."""
        super().__setstate__(state)
        self._unpickled = True

    # -- public bounds ------------------------------------------------------------
    def _resolve_center(self, n_features):
        if self.data_center is None:
            return np.zeros(n_features)
        center = np.asarray(self.data_center, dtype=float).reshape(-1)
        if center.shape != (n_features,) or not np.all(np.isfinite(center)):
            raise ValueError(
                f"data_center must be a finite vector of length n_features={n_features}, "
                f"got shape {center.shape}."
            )
        return center

    def _resolve_radius(self, X, center):
        r"""Public bound Lambda: a numeric ``data_radius``, or (``"data"``) computed from X.

        ``data_radius=None`` never reaches this method when the fit uses a
        bound: :meth:`_plan_and_run` releases the bound privately first and
        plans a clone with it. What is left is the explicit ``"data"`` choice
        (and ``fit_tuples`` without a bound), which warns.

        Returns
        -------
        radius : float
            The bound the private step uses.
        unproven : dict
            ``{}`` for a public ``data_radius``; else ``{"data_radius_":
            reason}``, for :attr:`PrivateFitPlan.unproven`: the exact bound
            :math:`\max_i\|x_i - c\|` is a data value, so the fit is not
            proven private, and ``data_radius_`` is stored as ``nan``.
        """
        if self._public_radius_given():
            return self._checked_radius(float(self.data_radius)), {}
        reason = (
            f"{type(self).__name__}: data_radius={self.data_radius!r}, so the bound was computed "
            "from the data; the result is not differentially private with respect to it. Pass a "
            "public data_radius (and data_center), or leave data_radius=None to estimate the "
            "bound privately, to keep the guarantee."
        )
        warn_user(reason, PrivacyLeakWarning)
        with np.errstate(over="ignore"):
            radius = float(np.max(np.linalg.norm(X - center, axis=1))) or 1.0
        return self._checked_radius(radius), {"data_radius_": reason}

    def _public_radius_given(self):
        """Whether ``data_radius`` is a number given by the user (not ``None`` or ``"data"``)."""
        return self.data_radius is not None and not isinstance(self.data_radius, str)

    def _radius_is_users(self):
        """Whether ``data_radius`` is the user's number (not the released bound of an inner fit)."""
        return self._public_radius_given() and not isinstance(self.data_radius, ReleasedRadius)

    #: Above this bound on the data the squared distances and sums of the private steps
    #: can overflow float64 (``(2 Lambda)^2 n`` must stay finite).
    _MAX_DATA_RADIUS = 1e100

    def _max_data_radius(self):
        """The largest bound whose arithmetic cannot overflow (the same for any number of rows)."""
        return self._MAX_DATA_RADIUS

    #: Below this bound the rounding margins of the row-exact decisions
    #: (:func:`~skdpcluster.cluster._stable_init.rounding_margin`) and of the
    #: clipping into the ball (:func:`~skdpcluster.averaging._common.rows_outside_ball`)
    #: underflow, and their proofs no longer hold.
    _MIN_DATA_RADIUS = 2.0**-500

    def _checked_radius(self, radius):
        """Refuse, before any randomness, a bound whose arithmetic would overflow or underflow.

        Inside the private step such an overflow would end the fit in an
        exception (or, with the safety net, in a charged failure).
        """
        if not radius >= self._MIN_DATA_RADIUS:
            raise ValueError(
                f"data_radius={radius!r} is below 2**-500 (about {self._MIN_DATA_RADIUS:.3g}), "
                f"where the rounding bounds of {type(self).__name__}'s private steps underflow; "
                "rescale X (and data_center) so that its norms are larger."
            )
        limit = self._max_data_radius()
        if not radius <= limit:
            source = ("data_radius" if self._public_radius_given()
                      else f"data_radius={self.data_radius!r}: the largest norm of X - data_center, which")
            raise ValueError(
                f"{source} is above {limit:.3g}, where the distances of "
                f"{type(self).__name__} overflow; rescale X (and data_center) so that its "
                "norms are smaller, and pass a public data_radius."
            )
        return radius

    # -- private bounds (data_radius=None) ---------------------------------------------
    def _plan_and_run(self, data):
        """Plan and run the fit; with ``data_radius=None``, first release the bound privately.

        The fit is then the composition of :func:`skdpcluster.bounds.private_bounds` on
        the share ``_BOUNDS_SHARE`` of (epsilon, delta) and of
        the estimator's own fit, on the rest, with the released centre and radius as
        its public ``data_center`` and ``data_radius`` (a clone, so no parameter of
        ``self`` changes). The clone is planned before any randomness at both ends of
        the public radius grid, so no error can depend on the released radius.

        Warnings are never given inside the private step: made errors (``-W
        error``), they would end a charged fit in an unproven failure (review
        R7, M1). A warning both trial plans give does not depend on the radius
        (the mixture's ``sigma_min=None`` leak warning, say): it is given here,
        before the spend, so that a :class:`PrivacyLeakWarning` made an error
        refuses the fit as it does with a public ``data_radius``. The plan at
        the released bound and the bound's own utility warning are recorded
        and given by :meth:`_report_after_fit` (public and released values only).
        """
        if not (self.data_radius is None and self._needs_radius(data)):
            return self._run(data, self._plan(data))
        budget, center = plan_bounds(*self._bounds_rows(data).shape, self.epsilon,
                                     self._bounds_delta(), share=self._BOUNDS_SHARE,
                                     center=self.data_center, neighbouring=self._neighbouring())
        inner = clone(self).set_params(epsilon=self.epsilon - budget.cost[0],
                                       delta=self.delta - budget.cost[1])
        # Trial plans print nothing (verbose=0): the fit runs neither (review R9, L4).
        trial = clone(inner).set_params(**({"verbose": 0} if "verbose" in inner.get_params()
                                           else {}))
        (low, low_warnings), (high, high_warnings) = [
            self._plan_inner(trial, data, RADIUS_SAFETY * radius, center) for radius in GRID_RANGE]
        given = [note for note in low_warnings if note in high_warnings]
        for message, category in given:
            warn_user(message, category)
        cost = (budget.cost[0] + max(low.cost[0], high.cost[0]),
                budget.cost[1] + max(low.cost[1], high.cost[1]))
        plan = PrivateFitPlan(cost, {"inner": inner, "bounds_budget": budget, "center": center,
                                     "given_warnings": given})
        return self._run(data, plan, self._fit_private_with_bounds)

    def _neighbouring(self):
        """The neighbouring relation of the fit (estimators without the parameter: replace-one)."""
        return getattr(self, "neighbouring", "replace_one")

    def _privacy_unit(self):
        """The unit the fit's guarantee protects, for the accountant: one row (a hook)."""
        return "sample"

    #: Share of (epsilon, delta) spent on the bound when ``data_radius=None``.
    _BOUNDS_SHARE = BOUNDS_SHARE

    def _bounds_delta(self):
        """The delta the bound may take its share of (a hook: a pure-DP fit gives none)."""
        return self.delta

    def _needs_radius(self, data):
        """Whether the fit uses ``data_radius`` (a hook: k-tuple ``noisy_centers`` does not)."""
        return True

    def _bounds_rows(self, data):
        """The rows whose bound is estimated (a hook for inputs that are not an array)."""
        return data

    @staticmethod
    def _plan_inner(inner, data, radius, center):
        """Plan ``inner`` with a bound; return the plan and its warnings, recorded, not given.

        Returns
        -------
        plan : PrivateFitPlan
        warnings : list of (str, type)
            The message and category of every warning the plan gave.
        """
        inner.set_params(data_radius=ReleasedRadius(radius), data_center=center)
        with collected_warnings() as caught:  # not the process-wide filters: thread-safe
            plan = inner._plan(data)
        return plan, caught

    def _fit_private_with_bounds(self, data, plan, rng):
        """Release the bound, then run the fit on the rest of the budget with it as public."""
        bounds_rng, fit_rng = rng.spawn(2)
        inner, budget = plan.values["inner"], plan.values["bounds_budget"]
        phase("bound estimation")
        (center, radius), events, degraded = release_bounds(
            self._bounds_rows(data), budget=budget, rng=bounds_rng, center=plan.values["center"],
            neighbouring=self._neighbouring(),
            warn_context=f" of {type(self).__name__} (spent epsilon={budget.cost[0]:.3g}, "
                         f"delta={budget.cost[1]:.3g})")
        inner_plan, plan_warnings = self._plan_inner(inner, data, radius, center)
        deferred = [] if degraded is None else [(degraded, UserWarning)]
        deferred += [note for note in plan_warnings if note not in plan.values["given_warnings"]]
        # Data-derived values of the inner plan (e.g. the mixture's sigma bounds) make the
        # whole fit unproven: the safety net and ``_commit`` read the outer plan.
        plan.unproven.update(inner_plan.unproven)
        result = inner._fit_private(data, inner_plan, fit_rng)
        attributes = {**inner_plan.attributes, **result.attributes, "data_radius_": radius,
                      "data_center_": center}
        # ``rho`` stays the inner fit's zCDP composite: the bound is charged in (epsilon, delta).
        return PrivateFit(result.centers, result.success, events + list(result.events),
                          proven=result.proven, attributes=attributes, rho=result.rho,
                          status=result.status, warnings=deferred + list(result.warnings))



class _BasePrivateClusterer(
    _PrivateFitMixin, ClassNamePrefixFeaturesOutMixin, TransformerMixin, ClusterMixin, BaseEstimator
):
    """Base class of the centre-based private clusterers: the common parameters and prediction."""

    _parameter_constraints: dict = {
        # k >= 2 is checked in `_check_n_clusters`, after the data, so that a
        # one-row input gets scikit-learn's "1 sample" error first.
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "epsilon": [Interval(Real, 0, None, closed="neither")],
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "data_radius": [None, StrOptions({"data"}), Interval(Real, 0, None, closed="neither")],
        "data_center": [None, "array-like"],
        "on_failure": [StrOptions({"warn", "raise"})],
        "accountant": [None, BudgetAccountant],
        "random_state": _random_state_constraint(),
        "n_jobs": [None, Integral],
        "verbose": ["verbose"],
    }
    _FITTED_ATTRIBUTES = ("cluster_centers_", "labels_", "data_radius_")

    def _commit(self, plan, result, spent):
        self.cluster_centers_ = result.centers
        super()._commit(plan, result, spent)

    def _cast_release(self, dtype):
        """Released centres in the input's dtype (float32 input keeps float32, like KMeans).

        Centres beyond float32's range (float32 rows with a public
        ``data_radius`` above about 3.4e38) stay float64: cast, they were
        released as +-inf. Post-processing of the released values.
        """
        if self.cluster_centers_ is not None:
            with np.errstate(over="ignore"):
                cast = self.cluster_centers_.astype(dtype, copy=False)
            if np.all(np.isfinite(cast)):
                self.cluster_centers_ = cast

    # -- prediction -----------------------------------------------------------------
    def _validated_input_and_centers(self, X):
        """Validate ``X`` against the fit, then return it with the released centres.

        A Dask input is returned as a Dask array (chunked along the rows only).
        """
        check_is_fitted(self, "status_")
        if is_dask_collection(X):
            return check_dask_predict_input(X, self), self._released_centers()
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        return X, self._released_centers()

    def _released_centers(self):
        if self.cluster_centers_ is None:
            raise NotFittedError(
                f"{type(self).__name__} released no centres: its private test failed "
                "(status_='failure'). Fit on better separated or more data."
            )
        return self.cluster_centers_

    def predict(self, X):
        """Index of the nearest released centre for each row.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n_samples, n_features)

        Returns
        -------
        labels : ndarray of shape (n_samples,)
            A lazy Dask array (``map_blocks``) for a Dask input.
        """
        X, centers = self._validated_input_and_centers(X)
        if is_dask_collection(X):
            return X.map_blocks(_nearest_index, centers, drop_axis=1, dtype=np.intp)
        return _nearest_index(X, centers)

    def transform(self, X):
        """Euclidean distance of each row to every released centre.

        Parameters
        ----------
        X : array-like or dask.array.Array of shape (n_samples, n_features)

        Returns
        -------
        distances : ndarray of shape (n_samples, n_clusters)
            A lazy Dask array (``map_blocks``) for a Dask input.
        """
        X, centers = self._validated_input_and_centers(X)
        if is_dask_collection(X):
            return X.map_blocks(euclidean_distances, centers,
                                chunks=(X.chunks[0], (len(centers),)),
                                dtype=np.result_type(X.dtype, centers.dtype, np.float32))
        return euclidean_distances(X, centers)

    #: Exponent of the distance in the clustering cost: 2 for k-means, 1 for k-median.
    _POWER = 2

    def score(self, X, y=None):
        """Negative clustering cost of ``X`` against the released centres (higher is better).

        The k-means cost (sum of squared distances to the nearest centre), or
        the k-median cost (sum of distances) for the k-median estimators.
        Non-private: computed on whatever ``X`` is passed.

        Returns
        -------
        score : float
        """
        return -float(np.sum(self.transform(X).min(axis=1) ** self._POWER))

    @property
    def _n_features_out(self):
        return self.n_clusters

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.transformer_tags.preserves_dtype = ["float64", "float32"]
        return tags


def _nearest_index(X, centers):
    """Index of the nearest centre of every row (``predict``; one block of a Dask array)."""
    return pairwise_distances_argmin_min(X, centers)[0].astype(np.intp)


class _fit_scope:
    """Context manager around a fit: NumPy's floating-point reactions off, state restored on error.

    On an exception, the estimator's fitted attributes are put back as they
    were. Inside, NumPy ignores floating-point conditions
    (``np.errstate(all="ignore")``, carried to the fit's worker threads and
    tasks by :mod:`skdpcluster.utils._errstate`): the fit handles an overflow
    on an extreme row where it occurs (the row is beyond every radius, is
    clipped, or costs the truncation value), and NumPy's ``RuntimeWarning``,
    or under a caller's ``np.seterr(over="raise")`` its exception, would be
    an output that depends on the data.
    """

    def __init__(self, estimator):
        self.estimator = estimator
        self.errstate = np.errstate(all="ignore")

    def __enter__(self):
        self.saved = {k: v for k, v in vars(self.estimator).items() if k.endswith("_")}
        self.errstate.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        self.errstate.__exit__(exc_type, exc, tb)
        if exc_type is not None:
            state = vars(self.estimator)
            for name in [k for k in state if k.endswith("_")]:
                del state[name]
            state.pop("_deferred_warnings", None)  # of the fit that did not commit (review R9, L2)
            state.update(self.saved)
        return False
