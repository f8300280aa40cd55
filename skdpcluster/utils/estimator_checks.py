"""Checks every private estimator of skdpcluster must pass, beyond scikit-learn's own.

scikit-learn's ``check_estimator`` fits on small unstructured data, where a
private estimator's easy-instance test rightly fails and its fallback releases
(``status_="fallback"``). These checks run on data where the estimator's main
method releases, and test what
matters for privacy: the ledger stays within the request for several
dimensions (and every zCDP release is charged by a composite event), invalid input spends nothing and changes nothing, ``clone`` keeps
the shared accountant, a seed reproduces a fit, pickling never re-spends, and
the scikit-learn behaviours (pickle, float32 input, idempotence, predict not
changing the estimator) hold on a successful fit.

Use :func:`dp_checks` to get ``(check, name)`` pairs, or call a check
directly with ``check(estimator, X)``: ``estimator`` unfitted and configured
so that fitting it on ``X`` succeeds, ``X`` an array of shape
(n_samples, n_features).
"""

import math
import pickle

import joblib
import numpy as np
from sklearn.base import clone

from skdpcluster.accountant import BudgetAccountant
from skdpcluster.exceptions import DetachedAccountantError
from skdpcluster.mechanisms import zcdp_to_dp

__all__ = [
    "EXPECTED_FAILED_CHECKS",
    "check_dp_clone_keeps_accountant",
    "check_dp_fit_does_not_change_params",
    "check_dp_float32_input",
    "check_dp_invalid_input_spends_nothing",
    "check_dp_ledger_within_budget",
    "check_dp_pickle_round_trip",
    "check_dp_predict_does_not_change_state",
    "check_dp_same_seed_same_fit",
    "dp_checks",
    "expected_failed_checks",
]


def _with_accountant(estimator, accountant=None, seed=0):
    return clone(estimator).set_params(accountant=accountant or BudgetAccountant(), random_state=seed)


def _released(estimator):
    """The private release of a fit, as one array (centres, or mixture parameters)."""
    for name in ("cluster_centers_", "means_"):
        value = getattr(estimator, name, None)
        if value is not None:
            return np.asarray(value)
    raise AssertionError(f"{type(estimator).__name__} released nothing (status_={estimator.status_!r}).")


def _zcdp_rho_totals(ledger):
    """(rho of the releases priced in zCDP only, rho charged by the ``"zcdp_composition"`` events).

    A zCDP release is recorded with ``epsilon = delta = 0`` and its rho; its
    cost reaches (epsilon, delta) only through a composite event that
    composes the rhos (Bun & Steinke 2016, Lemma 2.3) and converts the total
    (Proposition 1.3). Events that cost (epsilon, delta) themselves and
    merely also state a rho are charged already and not counted.
    """
    released = math.fsum(event.rho * event.count for event in ledger
                         if event.rho and event.mechanism != "zcdp_composition" and event.cost() == (0.0, 0.0))
    charged = math.fsum(event.rho * event.count for event in ledger
                        if event.mechanism == "zcdp_composition")
    return released, charged


def _check_zcdp_charged(ledger):
    """Every zCDP release is covered by the composite events' rho, converted at no discount (review RA-9)."""
    released, charged = _zcdp_rho_totals(ledger)
    assert released <= charged * (1 + 1e-9), f"zCDP releases of rho {released!r} charged only {charged!r}"
    for event in ledger:
        if event.mechanism == "zcdp_composition":
            assert event.epsilon >= zcdp_to_dp(event.rho, event.delta) * (1 - 1e-9), (
                f"{event.label}: rho {event.rho!r} at delta {event.delta!r} converted to epsilon "
                f"{event.epsilon!r}, below Bun & Steinke's {zcdp_to_dp(event.rho, event.delta)!r}")


def check_dp_ledger_within_budget(estimator, X):
    """The fit's ledger and the accountant's total never exceed the requested (epsilon, delta).

    The ledger's (epsilon, delta) counts a zCDP release only through its
    composite event, so the rhos of the zCDP releases are also checked
    against the composite events' rho and its conversion: a release
    recorded without its charge cannot pass unseen.
    """
    accountant = BudgetAccountant()
    fitted = _with_accountant(estimator, accountant).fit(X)
    epsilon, delta = fitted.epsilon, fitted.delta
    ledger_eps = math.fsum(event.cost()[0] for event in fitted.privacy_ledger_)
    ledger_delta = math.fsum(event.cost()[1] for event in fitted.privacy_ledger_)
    tolerance = 1 + 1e-9
    assert ledger_eps <= epsilon * tolerance and ledger_delta <= delta * tolerance, (ledger_eps, ledger_delta)
    _check_zcdp_charged(fitted.privacy_ledger_)
    assert fitted.privacy_spent_["epsilon"] <= epsilon * tolerance
    assert fitted.privacy_spent_["delta"] <= delta * tolerance
    assert accountant.total() == (fitted.privacy_spent_["epsilon"], fitted.privacy_spent_["delta"])
    assert len(accountant.ledger) == 1  # one charge per fit


def check_dp_invalid_input_spends_nothing(estimator, X):
    """NaN, wrong shapes and bad privacy parameters raise before any spend; state is kept."""
    accountant = BudgetAccountant()
    fitted = _with_accountant(estimator, accountant).fit(X)
    before = (_released(fitted).copy(), fitted.n_features_in_, len(accountant.ledger))
    bad_inputs = [
        (fitted, np.where(np.arange(X.size).reshape(X.shape) == 0, np.nan, X)),
        (fitted, X[:, :, None] if X.ndim == 2 else X),
        (clone(fitted).set_params(epsilon=-1.0), X),
        (clone(fitted).set_params(delta=1.5), X),
    ]
    for target, data in bad_inputs:
        try:
            target.fit(data)
        except ValueError:
            pass
        else:
            raise AssertionError(f"{type(target).__name__}.fit accepted invalid input")
    assert len(accountant.ledger) == before[2], "invalid input was charged"
    assert np.array_equal(_released(fitted), before[0]) and fitted.n_features_in_ == before[1]


def check_dp_clone_keeps_accountant(estimator, X):
    """``clone`` shares the accountant, so every clone's fit is charged to it."""
    accountant = BudgetAccountant()
    original = _with_accountant(estimator, accountant)
    copy = clone(original)
    assert copy.accountant is accountant
    copy.fit(X)
    assert len(accountant.ledger) == 1


def check_dp_same_seed_same_fit(estimator, X):
    """An integer ``random_state`` reproduces the fit exactly; another seed changes it."""
    first = _released(_with_accountant(estimator, seed=7).fit(X))
    second = _released(_with_accountant(estimator, seed=7).fit(X))
    third = _released(_with_accountant(estimator, seed=8).fit(X))
    assert np.array_equal(first, second)
    assert not np.array_equal(first, third)


def check_dp_fit_does_not_change_params(estimator, X):
    """``fit`` stores nothing derived from the data in a parameter."""
    unfitted = _with_accountant(estimator)
    params = {k: v for k, v in unfitted.get_params(deep=False).items() if k != "accountant"}
    unfitted.fit(X)
    after = {k: v for k, v in unfitted.get_params(deep=False).items() if k != "accountant"}
    assert joblib.hash(params) == joblib.hash(after)


def check_dp_pickle_round_trip(estimator, X):
    """Pickled fitted estimators predict identically; loading never spends, and the copy refuses to."""
    accountant = BudgetAccountant()
    fitted = _with_accountant(estimator, accountant).fit(X)
    restored = pickle.loads(pickle.dumps(fitted))
    assert np.array_equal(fitted.predict(X), restored.predict(X))
    assert len(accountant.ledger) == 1
    assert restored.accountant is not accountant  # a copy of the ledger, not a live link
    try:
        restored.fit(X)
    except DetachedAccountantError:
        pass
    else:
        raise AssertionError("a restored estimator spent on a detached copy of its accountant")
    assert np.array_equal(fitted.predict(X), restored.predict(X)), "a refused fit changed the estimator"
    assert len(accountant.ledger) == 1, "a restored estimator charged the original accountant"


def check_dp_float32_input(estimator, X):
    """float32 input fits and predicts like float64."""
    fitted = _with_accountant(estimator).fit(X.astype(np.float32))
    assert fitted.predict(X.astype(np.float32)).shape == (X.shape[0],)


def check_dp_predict_does_not_change_state(estimator, X):
    """predict, transform and score leave the fitted estimator unchanged."""
    fitted = _with_accountant(estimator).fit(X)
    state = joblib.hash({k: v for k, v in vars(fitted).items() if k != "accountant"})
    for method in ("predict", "transform", "score", "predict_proba", "score_samples"):
        if hasattr(fitted, method):
            getattr(fitted, method)(X[:50])
    assert joblib.hash({k: v for k, v in vars(fitted).items() if k != "accountant"}) == state


def dp_checks():
    """All checks of this module, as ``(check, name)`` pairs."""
    return [(check, check.__name__) for check in (
        check_dp_ledger_within_budget,
        check_dp_invalid_input_spends_nothing,
        check_dp_clone_keeps_accountant,
        check_dp_same_seed_same_fit,
        check_dp_fit_does_not_change_params,
        check_dp_pickle_round_trip,
        check_dp_float32_input,
        check_dp_predict_does_not_change_state,
    )]


# ---------------------------------------------------------------------------
# scikit-learn checks that a private estimator cannot pass, with the reason.
# ---------------------------------------------------------------------------

_UTILITY_ON_50_POINTS = (
    "DP: check_clustering asserts ARI > 0.4 on 50 points; at epsilon = 1 the noise the private "
    "releases need is of the order of the whole data set at that size (the fit reports that "
    "in its status)."
)
_NO_PUBLIC_BOUND = (
    "DP, local model: every user clips its own row to a public ball before randomizing it, and "
    "no party sees the data to estimate one, so the default data_radius=None refuses every fit "
    "with a ValueError naming data_radius; these checks fit the default instance. With a public "
    "data_radius every check passes (tests/test_common.py)."
)
_LOCAL_FITTING_CHECKS = [
    "check_clustering", "check_dict_unchanged", "check_dont_overwrite_parameters",
    "check_dtype_object", "check_estimators_dtypes", "check_estimators_fit_returns_self",
    "check_estimators_nan_inf", "check_estimators_overwrite_params", "check_estimators_pickle",
    "check_f_contiguous_array_estimator", "check_fit2d_1feature", "check_fit2d_predict1d",
    "check_fit_check_is_fitted", "check_fit_idempotent", "check_fit_score_takes_y",
    "check_methods_sample_order_invariance", "check_methods_subset_invariance",
    "check_n_features_in", "check_n_features_in_after_fitting", "check_pipeline_consistency",
    "check_positive_only_tag_during_fit", "check_readonly_memmap_input",
    "check_transformer_data_not_an_array", "check_transformer_general",
    "check_transformer_preserve_dtypes",
]

#: Expected failures of scikit-learn's common checks at default construction, per estimator
#: class, with the reason. Every other check passes on ``Est()``.
EXPECTED_FAILED_CHECKS = {
    # Passes at default construction (the fallback releases); the suite's tuned instances
    # (epsilon 20-300 on 2 clusters) can release noisier centres.
    "KTupleClusterer": {"check_clustering": _UTILITY_ON_50_POINTS},
    "PrivateGaussianMixture": {"check_clustering": _UTILITY_ON_50_POINTS},
    **dict.fromkeys(["PrivateHighDimKMeans", "PrivateHighDimKMedian"],
                    {"check_clustering": _UTILITY_ON_50_POINTS}),
    "LocalPrivateStableKMeans": dict.fromkeys(_LOCAL_FITTING_CHECKS, _NO_PUBLIC_BOUND),
}


def expected_failed_checks(estimator):
    """The expected failures of :data:`EXPECTED_FAILED_CHECKS` for ``estimator`` (for ``parametrize_with_checks``).

    The local model's entries apply only without a public ``data_radius``.
    """
    name = type(estimator).__name__
    if name == "LocalPrivateStableKMeans" and estimator.data_radius is not None:
        return {}
    return EXPECTED_FAILED_CHECKS.get(name, {})
