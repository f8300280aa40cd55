r"""Private standard scaling (per-feature mean and standard deviation as DP releases)."""

import math
from numbers import Integral, Real

import numpy as np
from sklearn.base import BaseEstimator, OneToOneFeatureMixin, TransformerMixin
from sklearn.pipeline import make_pipeline
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted, validate_data

from skdpcluster.accountant import BudgetAccountant
from skdpcluster.averaging._common import project_into_ball
from skdpcluster.cluster._base import PrivateFit, PrivateFitPlan, _PrivateFitMixin, _random_state_constraint
from skdpcluster.mechanisms import gaussian_mechanism, gaussian_sigma
from skdpcluster.utils._compat import Interval, StrOptions
from skdpcluster.utils._docstrings import shared_params

__all__ = ["PrivateStandardScaler", "make_private_pipeline"]

#: Default output bound per feature: transformed rows are clipped to norm ``3 * sqrt(n_features)``.
OUTPUT_RADIUS_PER_SQRT_FEATURE = 3.0
#: Share of the scaler's (epsilon, delta) spent on its bound when ``data_radius=None``.
SCALER_BOUNDS_SHARE = 0.5
#: Smallest released standard deviation, relative to the bound's radius (public).
_MIN_SCALE = 1e-6
#: The second pass clips standardized rows to norm ``4 * sqrt(n_features)``.
_Z_RADIUS_PER_SQRT_FEATURE = 4.0
#: L2 sensitivity of the joint release of the scaled first and second moments (replace-one).
_MOMENTS_SENSITIVITY = math.sqrt(2.0)


def _noisy_moments(rows, radius, epsilon, delta, rng):
    r"""Per-feature mean and second moment of ``rows`` (in :math:`B(0, \Lambda)`) by one Gaussian release.

    A row :math:`y` contributes :math:`a = y / (2\Lambda)` (norm at most 1/2)
    and :math:`b = y^{\odot 2} / (\sqrt 2 \Lambda^2)` (non-negative, norm at
    most :math:`\|y\|^2/(\sqrt2\Lambda^2) \le 1/\sqrt 2`). Replacing one row
    changes :math:`\sum a` by at most 1 and :math:`\sum b` by at most 1 (two
    vectors of the non-negative orthant), so the concatenation has L2
    sensitivity :math:`\sqrt 2`.
    """
    n_samples, n_features = rows.shape
    scaled = np.concatenate([rows.sum(axis=0) / (2.0 * radius),
                             np.einsum("ij,ij->j", rows, rows) / (math.sqrt(2.0) * radius**2)])
    noisy, event = gaussian_mechanism(scaled, sensitivity=_MOMENTS_SENSITIVITY, epsilon=epsilon,
                                      delta=delta, rng=rng, label="scaler/moments")
    mean = noisy[:n_features] * 2.0 * radius / n_samples
    second = noisy[n_features:] * math.sqrt(2.0) * radius**2 / n_samples
    return mean, second, event


def _moments_pass(rows, radius, epsilon, delta, rng):
    """Released per-feature mean and variance of ``rows`` in :math:`B(0, \\Lambda)`.

    The variance is floored at the noise level of the second moment (a public
    value), so a feature whose variance the noise swamps is scaled down, never
    blown up; the second pass of :meth:`PrivateStandardScaler._fit_private`
    then measures it on the standardized scale.
    """
    mean, second, event = _noisy_moments(rows, radius, epsilon, delta, rng)
    sigma = event.scale * math.sqrt(2.0) * radius**2 / rows.shape[0]
    return mean, np.maximum(second - mean**2, max(sigma, (_MIN_SCALE * radius) ** 2)), event


@shared_params
class PrivateStandardScaler(_PrivateFitMixin, OneToOneFeatureMixin, TransformerMixin, BaseEstimator):
    r"""Standardize features with a differentially private mean and standard deviation.

    Two passes, each on half of (epsilon, delta) (basic composition). Pass 1:
    the rows are projected onto a ball :math:`B(c, \Lambda)`; their per-feature
    sums and sums of squares (centred at :math:`c`) are released together by
    one analytic Gaussian mechanism (Balle & Wang 2018) of L2 sensitivity
    :math:`\sqrt 2` in units of :math:`(2\Lambda, \sqrt2\Lambda^2)` under
    replace-one neighbours (the number of rows is public), giving a mean
    :math:`m_1` and a variance :math:`v_1` floored at the noise level of the
    second moment. Pass 2: the same release on the rows
    :math:`(x - m_1)/\sqrt{v_1}`, projected onto
    :math:`B(0, 4\sqrt d)`, whose noise no longer depends on :math:`\Lambda`
    (a feature with a variance far below :math:`\Lambda^2` is measured on
    its own scale). ``mean_`` and ``scale_`` combine the two
    (post-processing). With ``data_radius=None``
    the ball is itself released first by
    :func:`skdpcluster.bounds.private_bounds` on half of the budget
    (``SCALER_BOUNDS_SHARE``; the estimators spend 10%), since the bound is
    half of the scaler's work. The fit is charged to ``accountant`` and recorded in
    ``privacy_ledger_``.

    ``transform`` clips every output row to the public norm
    ``output_radius_``, so a clustering estimator after this scaler can use
    ``data_radius=output_radius_`` and ``data_center=None`` (the origin)
    without looking at the data: see :func:`make_private_pipeline`.

    .. warning::
       Only this scaler is private. scikit-learn's ``StandardScaler`` (or any
       other non-private step) before a private estimator leaks the data's
       mean and scale through the transformed rows, and nothing in the
       estimator can detect it. Use this scaler in its place.

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy budget of the fit (> 0).
    delta : float, default=1e-6
        In (0, 1).
    data_radius : float, "data" or None, default=None
        Public bound :math:`\Lambda` on ``||x - data_center||``; ``None``
        releases it privately, ``"data"`` computes it from the data (not
        private, with a :class:`~skdpcluster.exceptions.PrivacyLeakWarning`).
    data_center : array-like of shape (n_features,), default=None
        Public centre :math:`c`; ``None`` is the origin when ``data_radius``
        is given, and released privately when ``data_radius=None``.
    output_radius : float, default=None
        Public bound on the norm of the transformed rows (rows beyond it are
        projected onto the ball). ``None`` means ``3 * sqrt(n_features)``.
    accountant : BudgetAccountant, default=None
        Ledger charged by ``fit``; ``None`` uses the default accountant.
    random_state : None, int or numpy.random.Generator, default=None
        ``None`` draws fresh OS entropy.

    Attributes
    ----------
    mean_ : ndarray of shape (n_features,)
        Private release.
    scale_ : ndarray of shape (n_features,)
        Private release (post-processing of the same release).
    var_ : ndarray of shape (n_features,)
        ``scale_ ** 2``.
    output_radius_ : float
        Public bound on the norm of every row ``transform`` returns.
    data_radius_ : float
        The bound used: released privately when ``data_radius=None``, else
        the public ``data_radius`` (``nan`` with ``"data"``).
    {data_center_}
    n_features_in_ : int
    feature_names_in_ : ndarray of shape (`n_features_in_`,)
    privacy_spent_ : dict
        ``{"epsilon", "delta", "proven"}`` of the fit.
    privacy_ledger_ : list of PrivacyEvent
    status_ : str
        ``"success"`` (the scaler has no private test); ``"failure"`` only
        when the private step failed (a
        :class:`~skdpcluster.exceptions.PrivateStepFailedWarning`; nothing
        released).

    Examples
    --------
    >>> import numpy as np
    >>> from skdpcluster.preprocessing import PrivateStandardScaler
    >>> X = np.random.default_rng(0).normal(5.0, 2.0, size=(50_000, 2))
    >>> scaler = PrivateStandardScaler(epsilon=1.0, random_state=0).fit(X)
    >>> np.round(scaler.mean_, 1), np.round(scaler.scale_, 1)
    (array([5., 5.]), array([2., 2.]))
    >>> float(np.linalg.norm(scaler.transform(X), axis=1).max()) <= scaler.output_radius_
    True
    """

    _parameter_constraints: dict = {
        "epsilon": [Interval(Real, 0, None, closed="neither")],
        "delta": [Interval(Real, 0, 1, closed="neither")],
        "data_radius": [None, StrOptions({"data"}), Interval(Real, 0, None, closed="neither")],
        "data_center": [None, "array-like"],
        "output_radius": [None, Interval(Real, 0, None, closed="neither")],
        "accountant": [None, BudgetAccountant],
        "random_state": _random_state_constraint(),
    }

    def __init__(self, *, epsilon=1.0, delta=1e-6, data_radius=None, data_center=None,
                 output_radius=None, accountant=None, random_state=None):
        self.epsilon = epsilon
        self.delta = delta
        self.data_radius = data_radius
        self.data_center = data_center
        self.output_radius = output_radius
        self.accountant = accountant
        self.random_state = random_state

    #: The bound is half of a scaler's work: half of (epsilon, delta) when ``data_radius=None``.
    _BOUNDS_SHARE = SCALER_BOUNDS_SHARE
    _FITTED_ATTRIBUTES = ("data_radius_", "mean_", "output_radius_", "scale_", "var_")

    def _check_n_clusters(self):
        """A scaler has no clusters."""

    def _plan(self, X):
        n_features = X.shape[1]
        center = self._resolve_center(n_features)
        radius, unproven = self._resolve_radius(X, center)
        output_radius = (OUTPUT_RADIUS_PER_SQRT_FEATURE * math.sqrt(n_features)
                         if self.output_radius is None else float(self.output_radius))
        # The passes' calibration (public: its sensitivity is fixed), refused here rather than
        # inside the private step, where it was a charged failure (review R10 M1: epsilon > 2e17).
        gaussian_sigma(_MOMENTS_SENSITIVITY, self.epsilon / 2.0, self.delta / 2.0)
        return PrivateFitPlan((float(self.epsilon), float(self.delta)),
                              {"center": center, "radius": radius},
                              {"data_radius_": radius, "output_radius_": output_radius},
                              unproven=unproven)

    def _fit_private(self, X, plan, rng):
        """Two passes on half of (epsilon, delta) each: raw moments in the ball, then standardized."""
        center, radius = plan.values["center"], plan.values["radius"]
        epsilon, delta = self.epsilon / 2.0, self.delta / 2.0
        rows = X - center  # centred first: no rounding at the scale of |center| (review R7)
        project_into_ball(rows, radius)  # every row's exact norm <= radius
        mean, var, first = _moments_pass(rows, radius, epsilon, delta, rng)
        shift, scale = center + mean, np.sqrt(var)
        z_radius = _Z_RADIUS_PER_SQRT_FEATURE * math.sqrt(X.shape[1])
        z_rows = (X - shift) / scale
        project_into_ball(z_rows, z_radius)
        z_mean, z_var, second = _moments_pass(z_rows, z_radius, epsilon, delta, rng)
        attributes = {"mean_": shift + scale * z_mean, "var_": var * z_var,
                      "scale_": scale * np.sqrt(z_var)}
        return PrivateFit(None, True, [first, second], attributes=attributes)

    def transform(self, X):
        """Standardize ``X`` with the released statistics and clip rows to ``output_radius_``.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)

        Returns
        -------
        X_new : ndarray of shape (n_samples, n_features)
            Rows of exact norm at most ``output_radius_``: every row is
            projected by :func:`~skdpcluster.averaging._common.project_into_ball`,
            the fit's own clipping, so a row whose standardization
            overflows goes to the sphere along its signs (review RD-1: the
            radial scaling gave NaN for it, and exceeded the radius by an
            ulp on half of the projected rows).
        """
        check_is_fitted(self, "mean_")
        if self.mean_ is None:
            raise NotFittedError(
                f"{type(self).__name__} released no statistics: its private step failed "
                "(status_='failure'; privacy_ledger_ says so). Fit it again.")
        X = validate_data(self, X, dtype=[np.float64, np.float32], reset=False)
        with np.errstate(over="ignore"):
            standardized = (X - self.mean_) / self.scale_
        project_into_ball(standardized, self.output_radius_)
        return standardized

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.allow_nan = False
        tags.transformer_tags.preserves_dtype = ["float64"]
        return tags


def _is_private_clusterer(step):
    return hasattr(step, "data_radius") and hasattr(step, "data_center") and not isinstance(
        step, PrivateStandardScaler)


def make_private_pipeline(*steps, n_features, accountant=None, **kwargs):
    """A :func:`sklearn.pipeline.make_pipeline` whose private steps share one bound and one ledger.

    Every step after a :class:`PrivateStandardScaler` whose ``data_radius`` is
    ``None`` gets ``data_radius`` = the scaler's public output bound and
    ``data_center=None`` (the origin), so it spends nothing on a bound; with
    ``accountant`` given, every step that has an ``accountant`` parameter is
    charged to it. The steps are configured in place (as ``make_pipeline``
    uses them), and every value set is public: ``n_features`` and the
    scaler's parameters.

    Parameters
    ----------
    *steps : estimators
    n_features : int
        The number of input features (public), which fixes the default
        ``output_radius`` of the scaler.
    accountant : BudgetAccountant, default=None
        Shared ledger of every private step.
    **kwargs
        Passed to :func:`sklearn.pipeline.make_pipeline` (``memory``, ``verbose``).

    Returns
    -------
    sklearn.pipeline.Pipeline
    """
    if not (isinstance(n_features, Integral) and n_features >= 1):
        raise ValueError(f"n_features must be an integer >= 1, got n_features={n_features!r}.")
    bound = None
    for step in steps:
        if accountant is not None and "accountant" in step.get_params(deep=False):
            step.set_params(accountant=accountant)
        if isinstance(step, PrivateStandardScaler):
            bound = step.output_radius
            if bound is None:
                bound = OUTPUT_RADIUS_PER_SQRT_FEATURE * math.sqrt(n_features)
        elif bound is not None and _is_private_clusterer(step) and step.data_radius is None:
            step.set_params(data_radius=float(bound), data_center=None)
    return make_pipeline(*steps, **kwargs)
