import _thread
import asyncio
import contextvars
import copy
import json
import math
import pickle
import threading
import time
import warnings

import numpy as np
import pytest
from sklearn.base import BaseEstimator, clone

from skdpcluster import (
    BudgetAccountant,
    BudgetExceededError,
    DetachedAccountantError,
    FederatedPrivateKMeans,
    KTupleClusterer,
    NoiseReuseError,
    NoiseReuseWarning,
    PrivateGaussianMixture,
    PrivateHighDimKMeans,
    PrivateStableKMeans,
)
from skdpcluster.accountant import LedgerEntry, drawn_noise_key, noise_fingerprint
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.exceptions import PrivateStepFailedWarning
from skdpcluster.mechanisms import PrivacyEvent
from skdpcluster.preprocessing import PrivateStandardScaler


def test_ceiling_is_enforced_before_recording():
    acc = BudgetAccountant(epsilon=1.0, delta=1e-6)
    acc.spend(0.6, 5e-7, label="a")
    with pytest.raises(BudgetExceededError, match=r"remaining is \(epsilon=0.4"):
        acc.spend(0.5, 0.0)
    with pytest.raises(BudgetExceededError, match="delta"):
        acc.check(0.1, 6e-7)
    assert len(acc.ledger) == 1
    assert acc.total() == (0.6, pytest.approx(5e-7))
    acc.spend(0.4, 5e-7)  # exactly the remainder fits
    eps, delta = acc.remaining()
    assert eps == pytest.approx(0.0, abs=1e-12) and delta == pytest.approx(5e-7**2, rel=1e-3)


def test_basic_composition_total_by_hand():
    acc = BudgetAccountant()
    for eps, delta in [(0.1, 1e-6), (0.25, 0.0), (1.0, 2e-6)]:
        acc.spend(eps, delta)
    eps, delta = acc.total()
    assert eps == pytest.approx(1.35)
    assert delta == pytest.approx(1 - (1 - 1e-6) * (1 - 2e-6), rel=1e-12)
    assert delta <= 3e-6


def _filter_statistic(epsilons, slack):
    """Whitehouse, Ramdas, Rogers & Wu (2023)'s advanced filter, with the drift eps (e^eps - 1) / 2."""
    squares = math.fsum(eps * eps for eps in epsilons)
    drift = math.fsum(eps * (math.exp(eps) - 1) / 2 for eps in epsilons)
    return math.sqrt(2 * math.log(1 / slack) * squares) + drift


def test_advanced_filter_used_when_tighter():
    slack = 1e-6
    acc = BudgetAccountant(epsilon=0.6, slack=slack)
    for _ in range(100):
        acc.spend(0.01, 0.0)
    eps, delta = acc.total()
    assert eps == pytest.approx(_filter_statistic([0.01] * 100, slack), rel=1e-12)
    assert eps == pytest.approx(0.5307, abs=5e-5)  # the auditor's figure (RA-10); basic gives 1.0
    assert delta == pytest.approx(slack)


def test_advanced_filter_replaces_the_fixed_parameter_bounds():
    """Review RA-10: with slack > 0 the accountant applied Kairouz-Oh-Viswanath (2017) / DRV (2010)
    advanced composition, which needs the privacy parameters fixed in advance, to spends it accepts
    one by one (a privacy filter). Under a ceiling of 0.49 it accepted 100 spends of 0.01 (KOV total
    0.4849); the filter of Whitehouse et al. (2023) accepts only as many as keep its statistic
    within the ceiling."""
    slack, ceiling = 1e-6, 0.49
    acc = BudgetAccountant(epsilon=ceiling, slack=slack)
    accepted = 0
    for _ in range(100):
        try:
            acc.spend(0.01, 0.0)
        except BudgetExceededError:
            break
        accepted += 1
    expected = max(k for k in range(1, 101) if _filter_statistic([0.01] * k, slack) <= ceiling)
    assert accepted == expected < 100
    assert acc.total()[0] == pytest.approx(_filter_statistic([0.01] * expected, slack), rel=1e-12)
    with pytest.raises(ValueError, match="slack.*finite epsilon ceiling"):
        BudgetAccountant(slack=1e-6)  # the filter guarantees its target: there must be one


def test_advanced_filter_delta_adds_up_the_deltas():
    """The filter's delta is slack + sum(delta_i) (Whitehouse et al. 2023), not 1 - (1 - slack) prod(1 - delta_i)."""
    acc = BudgetAccountant(epsilon=0.6, delta=1e-3, slack=1e-6)
    for _ in range(100):
        acc.spend(0.01, 1e-6)
    assert acc.total() == (pytest.approx(_filter_statistic([0.01] * 100, 1e-6), rel=1e-12),
                           pytest.approx(1e-6 + 100 * 1e-6, rel=1e-12))


def test_remaining_is_what_spend_accepts_with_slack():
    """Review RA (minor): with slack > 0, remaining() said 0.1151 was left after 100 x 0.01 under
    0.6 (the ceiling minus the total), and a spend of that size was refused."""
    acc = BudgetAccountant(epsilon=0.6, delta=1e-5, slack=1e-6)
    for _ in range(100):
        acc.spend(0.01, 0.0)
    eps_left, delta_left = acc.remaining()
    assert eps_left > 0 and delta_left == pytest.approx(1e-5 - 1e-6)
    assert eps_left < 0.6 - acc.total()[0]  # the statistic grows faster than the new epsilon
    for too_much in (0.6 - acc.total()[0], eps_left * (1 + 1e-6)):
        with pytest.raises(BudgetExceededError):
            acc.check(too_much, 0.0)
    acc.spend(eps_left, 0.0)  # exactly what remaining() reports is accepted
    assert 0.6 * (1 - 1e-11) <= acc.total()[0] <= 0.6


def test_basic_composition_kept_when_advanced_is_looser():
    acc = BudgetAccountant(epsilon=3.0, slack=1e-6)
    acc.spend(1.0, 0.0)
    acc.spend(1.0, 0.0)
    assert acc.total() == (2.0, 1e-6)  # the filter's statistic would be 9.15; its slack is reserved


def test_invalid_spends_and_ceilings():
    acc = BudgetAccountant()
    for eps, delta in [(0, 0), (-1, 0), (1, -0.1), (1, 1.0), (float("nan"), 0)]:
        with pytest.raises(ValueError):
            acc.spend(eps, delta)
    assert acc.ledger == []
    with pytest.raises(ValueError, match="slack"):
        BudgetAccountant(delta=1e-6, slack=1e-3)
    with pytest.raises(ValueError, match="epsilon"):
        BudgetAccountant(epsilon=0)


def test_concurrent_spends_give_exact_total():
    acc = BudgetAccountant(epsilon=8.0)

    def worker():
        for _ in range(1000):
            acc.spend(0.001, 0.0)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(acc.ledger) == 8000
    assert acc.total()[0] == pytest.approx(8.0, rel=1e-12)
    with pytest.raises(BudgetExceededError):
        acc.spend(0.001, 0.0)


def test_concurrent_spends_never_overshoot_the_ceiling():
    acc = BudgetAccountant(epsilon=1.0)
    refused = []

    def worker():
        for _ in range(500):
            try:
                acc.spend(0.001, 0.0)
            except BudgetExceededError:
                refused.append(1)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(acc.ledger) == 1000 and len(refused) == 3000


class _Holder(BaseEstimator):
    def __init__(self, accountant=None):
        self.accountant = accountant


def test_an_empty_accountant_is_truthy():
    """Regression: an empty accountant was falsy, so `accountant or default` replaced it."""
    assert BudgetAccountant()


def test_clone_keeps_the_same_accountant():
    acc = BudgetAccountant(epsilon=3.0)
    assert clone(acc) is acc
    assert clone(_Holder(accountant=acc)).accountant is acc


def test_json_round_trip_keeps_ledger():
    acc = BudgetAccountant(epsilon=2.0, delta=1e-5, slack=1e-7)
    event = PrivacyEvent("laplace", 0.5, 0.0, 1.0, 2.0, label="count")
    acc.spend(0.5, 0.0, label="fit", events=[event])
    acc.spend(0.25, 1e-6)
    restored = BudgetAccountant.from_json(acc.to_json())
    assert (restored.epsilon, restored.delta, restored.slack) == (2.0, 1e-5, 1e-7)
    assert restored.ledger == acc.ledger
    assert restored.ledger[0].events == (event,)
    assert restored.total() == acc.total()
    unbounded = BudgetAccountant.from_json(BudgetAccountant().to_json())
    assert math.isinf(unbounded.epsilon)
    json.loads(acc.to_json())  # plain JSON


@pytest.mark.parametrize("make_copy", [lambda a: pickle.loads(pickle.dumps(a)), copy.deepcopy, copy.copy],
                         ids=["pickle", "deepcopy", "copy"])
def test_unpickled_copy_keeps_the_ledger_and_refuses_to_spend(make_copy):
    """Regression (issue #12, item 1): a copy spent silently on a ledger nobody reads."""
    acc = BudgetAccountant(epsilon=1.0)
    acc.spend(0.5, 0.0, label="x")
    duplicate = make_copy(acc)
    assert duplicate is not acc and duplicate.ledger == acc.ledger and duplicate.detached
    for attempt in (lambda: duplicate.spend(0.1, 0.0), lambda: duplicate.check(0.1, 0.0)):
        with pytest.raises(DetachedAccountantError, match="fit_search_charged.*from_json"):
            attempt()
    assert len(duplicate.ledger) == 1 and len(acc.ledger) == 1
    assert isinstance(DetachedAccountantError("x"), BudgetExceededError)
    acc.spend(0.1, 0.0)  # the original is unaffected
    restored = BudgetAccountant.from_json(duplicate.to_json())  # restoring on purpose re-attaches
    assert not restored.detached
    restored.spend(0.5, 0.0)
    assert restored.total()[0] == pytest.approx(1.0)


@pytest.fixture(scope="module")
def small_data():
    return make_separated_mixture(2000, n_clusters=2, n_features=1, separation=512, random_state=0)[0]


def _fast(**params):
    """A KTupleClusterer that releases on ``small_data`` in milliseconds.

    A huge epsilon, and a tiny beta: with the default beta=0.05 about 5% of seeds fail the
    private test on this data; with beta=1e-6 none of 300 seeds did.
    """
    return KTupleClusterer(n_clusters=2, epsilon=1e5, delta=0.1, beta=1e-6, fallback_share=0.0, **params)


def test_unpickled_estimator_with_default_accountant_refuses_to_fit(small_data):
    """Regression (issue #12, item 1): an unpickled estimator spent on its process's default accountant."""
    acc = BudgetAccountant()
    with acc:
        fitted = _fast(random_state=None).fit(small_data)
        assert len(acc.ledger) == 1
        for restored in (pickle.loads(pickle.dumps(fitted)), copy.deepcopy(_fast())):
            with pytest.raises(DetachedAccountantError, match="fit_search_charged"):
                restored.fit(small_data)
        assert len(acc.ledger) == 1
        assert np.array_equal(restored_predictions := pickle.loads(pickle.dumps(fitted)).predict(small_data),
                              fitted.predict(small_data)) and restored_predictions.size
        clone(pickle.loads(pickle.dumps(fitted))).fit(small_data)  # a clone is a fresh estimator
        pickle.loads(pickle.dumps(fitted)).set_params(accountant=acc).fit(small_data)
    assert len(acc.ledger) == 3


def test_same_seed_on_one_accountant_warns(small_data):
    """Regression (issue #12, item 8): two fits with one seed drew identical noise, silently."""
    acc = BudgetAccountant()
    first = _fast(accountant=acc, random_state=3).fit(small_data)
    with pytest.warns(NoiseReuseWarning, match="KTupleClusterer.*random_state=None"):
        second = _fast(accountant=acc, random_state=3).fit(small_data + 5.0)
    # The reason for the warning: the difference of the two releases is exactly the shift.
    assert np.allclose(second.cluster_centers_ - first.cluster_centers_, 5.0)
    assert len(acc.ledger) == 2 and acc.ledger[0].noise_key == acc.ledger[1].noise_key is not None
    with pytest.warns(NoiseReuseWarning):  # the saved ledger keeps the fingerprints
        _fast(accountant=BudgetAccountant.from_json(acc.to_json()), random_state=3).fit(small_data)


@pytest.mark.filterwarnings("ignore::skdpcluster.NotSeparatedWarning")  # the mixture's release is not the point
def test_distinct_streams_do_not_warn(small_data):
    acc = BudgetAccountant()
    generator = np.random.default_rng(11)
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoiseReuseWarning)
        for random_state in (1, 2, None, None, generator, generator):  # a Generator advances
            _fast(accountant=acc, random_state=random_state).fit(small_data)
        PrivateGaussianMixture(2, epsilon=300.0, delta=0.1, accountant=acc, random_state=12).fit(
            np.column_stack([small_data[:, 0], small_data[::-1, 0]]))
    assert len(acc.ledger) == 7
    assert [entry.noise_key is None for entry in acc.ledger] == [False, False, True, True, False, False, False]


def test_repeated_noise_can_be_refused_before_any_spend(small_data):
    acc = BudgetAccountant(on_repeated_noise="raise")
    fitted = _fast(accountant=acc, random_state=5).fit(small_data)
    centers = fitted.cluster_centers_.copy()
    with pytest.raises(NoiseReuseError, match="same random_state"):
        fitted.fit(small_data + 1.0)
    assert len(acc.ledger) == 1 and np.array_equal(fitted.cluster_centers_, centers)
    with pytest.raises(ValueError, match="on_repeated_noise"):
        BudgetAccountant(on_repeated_noise="ignore")
    assert BudgetAccountant.from_json(acc.to_json()).on_repeated_noise == "raise"


def _saved(**changes):
    data = {"epsilon": 1.0, "delta": 1e-5, "slack": 0.0,
            "ledger": [{"epsilon": 0.9, "delta": 0.0, "label": "fit", "events": []}]}
    data.update(changes)
    return json.dumps(data)


@pytest.mark.parametrize("text, match", [
    (_saved(ledger=[{"epsilon": 0.9, "delta": 0.0}, {"epsilon": -0.9, "delta": 0.0}]),
     r"ledger\[1\].*epsilon"),
    (_saved(ledger=[{"epsilon": float("nan"), "delta": 0.0}]), r"ledger\[0\].*epsilon"),
    (_saved(ledger=[{"epsilon": 0.1, "delta": 1.0}]), r"ledger\[0\].*delta"),
    (_saved(ledger=[{"epsilon": "0.1", "delta": 0.0}]), r"ledger\[0\].*epsilon"),
    (_saved(ledger=[{"epsilon": 0.1}]), r"ledger\[0\].*delta"),
    (_saved(ledger=[{"epsilon": 0.1, "delta": 0.0, "refund": True}]), r"ledger\[0\].*refund"),
    (_saved(ledger=[{"epsilon": 0.1, "delta": 0.0, "label": 3}]), r"ledger\[0\].*label"),
    (_saved(ledger=[{"epsilon": 0.1, "delta": 0.0, "events": [{"mechanism": "laplace", "epsilon": -1}]}]),
     r"ledger\[0\].*events\[0\]\.epsilon"),
    (_saved(ledger=[{"epsilon": 0.1, "delta": 0.0, "events": [{"mechanism": "laplace", "epsilon": 1e400}]}]),
     r"events\[0\]\.epsilon"),
    (_saved(ledger=[{"epsilon": 0.6, "delta": 0.0}, {"epsilon": 0.6, "delta": 0.0}]), "over its ceiling"),
    (_saved(ledger={"epsilon": 0.1}), "ledger"),
    (_saved(epsilon=-1.0), "epsilon"),
    (_saved(delta=2.0), "delta"),
    (_saved(slack=-0.1), "slack"),
    ("{}", "lacks.*delta.*epsilon.*ledger.*slack"),
    ("[]", "JSON object"),
    (json.dumps({"epsilon": 1.0, "delta": 1e-5, "ledger": []}), "slack"),
    ("not json", "JSON"),
])
def test_from_json_validates_every_field(text, match):
    """Regression (issue #12, item 9): a saved ledger with a negative entry refunded the budget."""
    with pytest.raises(ValueError, match=match):
        BudgetAccountant.from_json(text)


class _Forged:
    """Unpickles as ``cls`` with a chosen state, as a tampered pickle file would."""

    def __init__(self, cls, state):
        self.cls, self.state = cls, state

    def __reduce__(self):
        return object.__new__, (self.cls,), self.state


def test_unpickling_validates_every_field():
    """Regression (issue #12, item 9): __setstate__ trusted its input."""
    good = BudgetAccountant(epsilon=1.0)
    good.spend(0.9, 0.0)
    state = good.__getstate__()
    for bad, match in [
        ({**state, "entries": [LedgerEntry(0.9, 0.0), _Forged(LedgerEntry, {"epsilon": -0.9, "delta": 0.0,
                                                                            "label": "", "events": ()})]},
         "epsilon"),
        ({**state, "entries": [LedgerEntry(0.9, 0.0), LedgerEntry(0.9, 0.0)]}, "over its ceiling"),
        ({**state, "slack": 2.0}, "slack"),
        ({key: value for key, value in state.items() if key != "slack"}, "slack"),
        ({**state, "entries": ["not an entry"]}, "ledger"),
    ]:
        with pytest.raises(ValueError, match=match):
            pickle.loads(pickle.dumps(_Forged(BudgetAccountant, bad)))
    restored = pickle.loads(pickle.dumps(good))
    assert restored.ledger == good.ledger and restored.total() == good.total()


def test_ledger_entry_validates_its_fields():
    """Regression (issue #12, item 9): LedgerEntry and from_dict accepted a negative epsilon."""
    for build in (lambda: LedgerEntry(-0.9, 0.0), lambda: LedgerEntry.from_dict({"epsilon": -0.9, "delta": 0}),
                  lambda: LedgerEntry(0.1, float("inf")), lambda: LedgerEntry(0.1, 0.0, events=("x",))):
        with pytest.raises(ValueError):
            build()
    with pytest.raises(ValueError, match="JSON object"):
        LedgerEntry.from_dict([0.1, 0.0])


def test_empty_ledger_reports_zero_not_minus_zero():
    """Regression (issue #12, item 10): an empty ledger printed delta=-0."""
    acc = BudgetAccountant()
    assert math.copysign(1.0, acc.total()[1]) == 1.0
    assert "-0" not in repr(acc) and "spent=(0, 0)" in repr(acc)


def test_slack_is_reserved_from_the_delta_ceiling():
    """Review RA-10: with slack > 0 either rule (basic or the filter) may accept a spend, so the
    filter's failure probability, slack, is in the delta whichever epsilon is smaller. (Issue #12,
    item 10 had basic composition accept (0.01, 1e-8) x 100 under (2.0, 1e-6) with slack = 1e-6,
    leaving no room for the slack of a filter that may have accepted earlier spends.)"""
    acc = BudgetAccountant(epsilon=2.0, delta=1e-6, slack=1e-6)
    with pytest.raises(BudgetExceededError, match="delta"):
        acc.spend(0.01, 1e-8)
    acc.spend(0.01, 0.0)
    assert acc.total() == (0.01, 1e-6)
    roomy = BudgetAccountant(epsilon=2.0, delta=1e-5, slack=1e-6)  # here the advanced total fits
    for _ in range(100):
        roomy.spend(0.01, 1e-8)
    assert roomy.total()[0] < 0.6 and roomy.total()[1] == pytest.approx(1e-6 + 1e-6, rel=1e-3)


def test_default_accountant_and_context_manager():
    base = BudgetAccountant.default()
    assert BudgetAccountant.default() is base
    outer, inner = BudgetAccountant(), BudgetAccountant()
    with outer as entered:
        assert entered is outer and BudgetAccountant.default() is outer
        with inner:
            assert BudgetAccountant.default() is inner
        assert BudgetAccountant.default() is outer
    assert BudgetAccountant.default() is base
    replacement = BudgetAccountant(epsilon=5.0)
    try:
        assert replacement.set_default() is replacement
        assert BudgetAccountant.default() is replacement
        with outer:
            assert BudgetAccountant.default() is outer
        assert BudgetAccountant.default() is replacement
    finally:
        base.set_default()
    assert BudgetAccountant.default() is base


def test_context_manager_is_restored_after_an_exception():
    base = BudgetAccountant.default()
    acc = BudgetAccountant()
    with pytest.raises(RuntimeError):
        with acc:
            raise RuntimeError("boom")
    assert BudgetAccountant.default() is base


# -- review RA: the noise guard across classes and threads, default accountants, relations ----------

@pytest.fixture(scope="module")
def one_cluster_pair():
    """D and D' (row 0 replaced, inside the public ball of radius 5), as in the auditor's scripts."""
    rng = np.random.default_rng(0)
    data = rng.normal(size=(1000, 3))
    neighbour = data.copy()
    neighbour[0] = [2.5, -2.5, 1.0]
    return data, neighbour


def _one_cluster(cls, accountant, random_state, **params):
    return cls(n_clusters=1, epsilon=1.0, delta=1e-6, data_radius=5.0, accountant=accountant,
               random_state=random_state, **params)


def test_same_stream_in_another_class_is_a_repeat(one_cluster_pair):
    """Review RA-3: the guard compared noise within one estimator class, but with n_clusters=1
    PrivateStableKMeans and PrivateHighDimKMeans release the same private mean from one stream:
    the second release equalled the first exactly on D and never on D' (a perfect distinguisher),
    accepted even with on_repeated_noise='raise'."""
    data, _ = one_cluster_pair
    apart = [_one_cluster(cls, BudgetAccountant(), 7).fit(data).cluster_centers_
             for cls in (PrivateStableKMeans, PrivateHighDimKMeans)]
    assert np.array_equal(*apart)  # the reason: one stream, the same noise
    acc = BudgetAccountant(10.0, 1e-3, on_repeated_noise="raise")
    _one_cluster(PrivateStableKMeans, acc, 7).fit(data)
    second = _one_cluster(PrivateHighDimKMeans, acc, 7)
    with pytest.raises(NoiseReuseError, match="PrivateStableKMeans was already charged.*PrivateHighDimKMeans"):
        second.fit(data)
    assert len(acc.ledger) == 1 and not hasattr(second, "cluster_centers_")
    warned = BudgetAccountant(10.0, 1e-3)
    _one_cluster(PrivateStableKMeans, warned, 7).fit(data)
    with pytest.warns(NoiseReuseWarning, match="same noise stream"):
        _one_cluster(PrivateHighDimKMeans, warned, 7).fit(data)


def test_saved_noise_keys_are_compared_by_stream():
    """A ledger saved with another owner's name in front of the same stream is still a repeat."""
    key = noise_fingerprint("KTupleClusterer", 3)
    acc = BudgetAccountant(on_repeated_noise="raise")
    acc.spend(0.1, 0.0, noise_key=key)
    restored = BudgetAccountant.from_json(acc.to_json())
    with pytest.raises(NoiseReuseError, match="KTupleClusterer was already charged"):
        restored.check(0.1, noise_key=noise_fingerprint("PrivateGaussianMixture", 3))
    restored.check(0.1, noise_key=noise_fingerprint("KTupleClusterer", 4))


def test_reserved_stream_is_a_repeat_until_released():
    """Review RA-4: the stream was recorded only at spend, so two fits under way at once both passed."""
    acc = BudgetAccountant(epsilon=1.0, on_repeated_noise="raise")
    key = noise_fingerprint("A", 0)
    with acc.reserve(0.5, noise_key=key):
        with pytest.raises(NoiseReuseError, match="a fit of A is under way"):
            acc.reserve(0.5, noise_key=noise_fingerprint("B", 0))
        with pytest.raises(NoiseReuseError):
            acc.check(0.5, noise_key=key)
    assert acc.ledger == []
    with acc.reserve(0.5, noise_key=key):  # released: a fit that never spent leaves no trace
        acc.spend(0.5, noise_key=key)
    with pytest.raises(NoiseReuseError, match="already charged"):  # spent: the ledger keeps it
        acc.reserve(0.1, noise_key=key)
    with pytest.raises(BudgetExceededError), acc.reserve(0.4, noise_key=noise_fingerprint("A", 1)):
        acc.spend(0.6)  # refused inside the reservation (a budget race): the stream is released
    with acc.reserve(0.4, noise_key=noise_fingerprint("A", 1)):
        pass


def test_a_spend_can_record_several_noise_streams():
    """Re-review V1-6: a search charged up front pays for the streams of all its seeded components
    in one entry; every one is a repeat afterwards, in a saved or pickled ledger too, and a
    reservation marks and releases them all."""
    keys = noise_fingerprint("PrivateStableKMeans", 1) + noise_fingerprint("KTupleClusterer", 2)
    acc = BudgetAccountant(on_repeated_noise="raise")
    with acc.reserve(0.5, noise_key=keys):
        with pytest.raises(NoiseReuseError, match="a fit of KTupleClusterer is under way"):
            acc.check(0.1, noise_key=noise_fingerprint("A", 2))
        acc.spend(0.5, label="search", noise_key=keys)
    assert acc._reserved == {}
    restored = BudgetAccountant.from_json(acc.to_json())
    assert json.loads(acc.to_json())["ledger"][0]["noise_key"] == list(keys)
    for holder in (acc, restored, pickle.loads(pickle.dumps(acc))):
        assert holder.ledger[0].noise_key == keys
    for seed, owner in ((1, "PrivateStableKMeans"), (2, "KTupleClusterer")):
        with pytest.raises(NoiseReuseError, match=f"{owner} was already charged"):
            restored.check(0.1, noise_key=noise_fingerprint("A", seed))
    restored.check(0.1, noise_key=noise_fingerprint("A", 3))
    for bad in ((), ("a", 1), ["a"]):
        with pytest.raises(ValueError, match="noise_key must be"):
            LedgerEntry(0.1, 0.0, noise_key=bad)


def test_noise_fingerprint_has_one_fingerprint_per_source():
    """Review R1-1: direct draws move only the state's fingerprint, spawns only the children's."""
    generator = np.random.default_rng(0)
    before = noise_fingerprint("A", generator)
    assert before == noise_fingerprint("A", 0) == noise_fingerprint("A", np.random.SeedSequence(0))
    generator.random()
    moved = noise_fingerprint("A", generator)
    assert moved[0] != before[0] and moved[1] == before[1]
    assert drawn_noise_key(before, generator) == before[:1]
    generator.spawn(1)
    assert noise_fingerprint("A", generator)[1:] != moved[1:]
    assert noise_fingerprint("A", generator)[0] == moved[0]
    assert drawn_noise_key(moved, generator) == moved[1:2]
    assert drawn_noise_key(noise_fingerprint("A", generator), generator) is None  # drew nothing
    assert noise_fingerprint("A", None) is None and drawn_noise_key(None, generator) is None


@pytest.mark.parametrize("on_repeated_noise", ["raise", "warn"])
def test_a_generator_moved_by_a_direct_draw_still_repeats_its_spawned_noise(small_data,
                                                                            on_repeated_noise):
    """Review R1-1: the fingerprint hashed a Generator's state and spawn counter together, but fits
    draw from spawned children, whose seeds depend on the seed sequence alone. A fit on a clone (a
    copy of the Generator), a direct draw on the Generator, then a fit on it: a new fingerprint,
    identical noise, accepted even with on_repeated_noise='raise'."""
    generator = np.random.default_rng(2026)
    acc = BudgetAccountant(on_repeated_noise=on_repeated_noise)
    estimator = _fast(accountant=acc, random_state=generator)
    first = clone(estimator).fit(small_data)
    generator.permutation(10)  # the state moves, the spawn counter does not
    if on_repeated_noise == "raise":
        with pytest.raises(NoiseReuseError, match="KTupleClusterer was already charged"):
            estimator.fit(small_data)
        assert len(acc.ledger) == 1 and not hasattr(estimator, "cluster_centers_")
    else:
        with pytest.warns(NoiseReuseWarning, match="same noise stream"):
            estimator.fit(small_data)
        # The reason: the same children, so the same noise and the same release.
        assert np.array_equal(estimator.cluster_centers_, first.cluster_centers_)


def _scaler(**params):
    """A PrivateStandardScaler for ``small_data``: its fit draws directly and never spawns."""
    return PrivateStandardScaler(epsilon=1.0, data_radius=600.0, **params)


def test_fits_one_after_another_on_one_generator_are_not_repeats(small_data):
    """A fit records only the sources it drew from (review R1-1's fix): a clusterer only spawns and
    leaves the Generator's state as it was, PrivateStandardScaler only draws directly and leaves
    the spawn counter, so the next fit on the same Generator draws fresh noise and is accepted."""
    generator = np.random.default_rng(5)
    acc = BudgetAccountant(on_repeated_noise="raise")
    scaler = _scaler(accountant=acc, random_state=generator)
    clusterer = _fast(accountant=acc, random_state=generator)
    recorded = []
    for estimator in (scaler, clusterer, clusterer, scaler, scaler, clusterer):
        before = noise_fingerprint(type(estimator).__name__, generator)
        estimator.fit(small_data)
        recorded.append(before[:1] if estimator is scaler else before[1:2])
    assert [entry.noise_key for entry in acc.ledger] == recorded


def test_an_int_seed_is_one_stream_whatever_the_fit_draws(small_data):
    """Int seeds keep their rule after review R1-1: every fit starts a new Generator from the seed,
    so a second fit with seed 0 is a repeat, whether the fits draw directly or spawn."""
    acc = BudgetAccountant(on_repeated_noise="raise")
    _scaler(accountant=acc, random_state=0).fit(small_data)
    for repeat in (_scaler(accountant=acc, random_state=0),
                   _fast(accountant=acc, random_state=0)):
        with pytest.raises(NoiseReuseError, match="PrivateStandardScaler was already charged"):
            repeat.fit(small_data)
    _fast(accountant=acc, random_state=1).fit(small_data)
    with pytest.raises(NoiseReuseError, match="KTupleClusterer was already charged"):
        _fast(accountant=acc, random_state=np.random.default_rng(1)).fit(small_data)
    assert len(acc.ledger) == 2


def test_a_ledger_saved_with_one_fingerprint_per_fit_still_notices_repeats(small_data):
    """Ledgers saved before review R1-1's fix hold one fingerprint per fit, of the state and the
    spawn counter together: a fit with that seed, or on an equal Generator, is still a repeat."""
    saved = json.dumps({"epsilon": "inf", "delta": 1.0, "slack": 0.0, "on_repeated_noise": "raise",
                        "ledger": [{"epsilon": 1.0, "delta": 0.0, "label": "KTupleClusterer.fit",
                                    "noise_key": _SEED_3_BEFORE_R1_1}]})
    for restored in (BudgetAccountant.from_json(saved),
                     BudgetAccountant.from_json(BudgetAccountant.from_json(saved).to_json())):
        for seed in (3, np.random.default_rng(3)):
            with pytest.raises(NoiseReuseError, match="KTupleClusterer was already charged"):
                _fast(accountant=restored, random_state=seed).fit(small_data)
        _fast(accountant=restored, random_state=4).fit(small_data)
        assert len(restored.ledger) == 2


#: noise_fingerprint("KTupleClusterer", 3) before review R1-1's fix (commit 225244e).
_SEED_3_BEFORE_R1_1 = ("KTupleClusterer:"
                       "445f53ebf6e8b3f1ff1abf621bf2c261168ddf69c9dc881e46e702a21e337901")


class _FirstSpendWaits(BudgetAccountant):
    """Pins the timing only: the first spend waits until the test lets it go (the fit path is the real one)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.waiting, self.go = threading.Event(), threading.Event()

    def spend(self, *args, **kwargs):
        if not self.waiting.is_set():
            self.waiting.set()
            self.go.wait(60)
        super().spend(*args, **kwargs)


def test_concurrent_fits_with_one_seed_are_refused(one_cluster_pair):
    """Review RA-4: two fits with random_state=0 on D and D', the second started while the first was
    between its check and its spend, both passed with on_repeated_noise='raise' (2 entries, 1 stream)."""
    data, neighbour = one_cluster_pair
    acc = _FirstSpendWaits(10.0, 1e-3, on_repeated_noise="raise")
    first = _one_cluster(PrivateStableKMeans, acc, 0)
    thread = threading.Thread(target=first.fit, args=(data,))
    thread.start()
    try:
        assert acc.waiting.wait(60)  # the first fit has drawn its noise and waits to spend
        second = _one_cluster(PrivateStableKMeans, acc, 0)
        with pytest.raises(NoiseReuseError, match="under way"):
            second.fit(neighbour)
    finally:
        acc.go.set()
        thread.join()
    assert len(acc.ledger) == 1 and hasattr(first, "cluster_centers_")
    assert not hasattr(second, "cluster_centers_")


def test_failed_fit_releases_its_stream(one_cluster_pair):
    """A fit refused at its spend (another fit took the budget meanwhile) leaves its stream free."""
    data, _ = one_cluster_pair
    acc = _FirstSpendWaits(1.5, 1e-3, on_repeated_noise="raise")
    first = _one_cluster(PrivateStableKMeans, acc, 0)
    errors = []
    thread = threading.Thread(target=lambda: errors.append(pytest.raises(BudgetExceededError, first.fit, data)))
    thread.start()
    try:
        assert acc.waiting.wait(60)
        _one_cluster(PrivateStableKMeans, acc, 1).fit(data)  # takes the budget the first one checked
    finally:
        acc.go.set()
        thread.join()
    assert errors and len(acc.ledger) == 1
    assert acc._reserved == {}
    acc.check(0.5, noise_key=noise_fingerprint("PrivateStableKMeans", 0))  # seed 0 never spent


def test_with_block_is_the_default_of_its_own_thread_only(one_cluster_pair):
    """Review RA-5: with-blocks were process-wide: a fit inside thread A's `with acc_a:` (accountant=None)
    was charged to acc_b, which thread B had entered meanwhile."""
    data, _ = one_cluster_pair
    acc_a, acc_b = BudgetAccountant(5.0, 1e-3), BudgetAccountant(5.0, 1e-3)
    a_entered, b_entered, a_done = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def thread_a():
        with acc_a:
            a_entered.set()
            b_entered.wait(60)
            seen["a"] = BudgetAccountant.default()
            _one_cluster(PrivateStableKMeans, None, None).fit(data)
            a_done.set()

    def thread_b():
        a_entered.wait(60)
        with acc_b:
            b_entered.set()
            seen["b"] = BudgetAccountant.default()
            a_done.wait(60)

    threads = [threading.Thread(target=thread_a), threading.Thread(target=thread_b)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert seen == {"a": acc_a, "b": acc_b}
    assert len(acc_a.ledger) == 1 and acc_b.ledger == []
    assert len(BudgetAccountant._open_blocks) == 0


def test_a_thread_without_a_block_refuses_while_another_thread_has_one():
    """A worker thread started inside another thread's block cannot see it: it refuses rather than
    charge the process default (which would under-report what the block's accountant sees)."""
    acc, inside, leave = BudgetAccountant(), threading.Event(), threading.Event()

    def holder():
        with acc:
            inside.set()
            leave.wait(60)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert inside.wait(60)
        with pytest.raises(ValueError, match="Pass accountant= explicitly"):
            BudgetAccountant.default()
        with acc:  # a block of this thread's own is unambiguous
            assert BudgetAccountant.default() is acc
    finally:
        leave.set()
        thread.join()
    assert BudgetAccountant.default() is not acc


def test_a_block_left_open_by_a_thread_that_ended_does_not_stick():
    """Re-review V1-7: a block entered in a thread that then ended and "exited" from the main thread
    kept the process-wide count at 1, so default() refused in every thread for good. The exit from
    the wrong thread is refused, and the block is forgotten because its thread has ended."""
    base, acc = BudgetAccountant.default(), BudgetAccountant()
    thread = threading.Thread(target=acc.__enter__)
    thread.start()
    thread.join()
    del thread  # from Python 3.14 a Thread object keeps the context its target ran in
    assert BudgetAccountant.default() is base  # before: ValueError, "another thread is inside one"
    with pytest.raises(ValueError, match="has no open 'with' block of this accountant"):
        acc.__exit__(None, None, None)
    assert BudgetAccountant.default() is base and len(BudgetAccountant._open_blocks) == 0


def test_a_block_exited_from_another_thread_stays_open_while_its_thread_runs():
    """The guarantee of review RA-5 holds through a wrong exit: while the thread that entered a block
    runs, its block is its default and threads without a block refuse; its own exit closes it."""
    acc, inside, leave, seen = BudgetAccountant(), threading.Event(), threading.Event(), {}

    def holder():
        acc.__enter__()
        inside.set()
        leave.wait(60)
        seen["default"] = BudgetAccountant.default()
        acc.__exit__(None, None, None)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert inside.wait(60)
        with pytest.raises(ValueError, match="entered in another thread"):
            acc.__exit__(None, None, None)
        with pytest.raises(ValueError, match="Pass accountant= explicitly"):
            BudgetAccountant.default()
    finally:
        leave.set()
        thread.join()
    assert seen["default"] is acc
    assert BudgetAccountant.default() is not acc and len(BudgetAccountant._open_blocks) == 0


def _enter_in_a_task(acc):
    async def task():
        acc.__enter__()

    async def main():
        await asyncio.create_task(task())

    asyncio.run(main())


def _enter_in_a_foreign_thread(acc):
    entered = threading.Event()

    def foreign():
        acc.__enter__()
        entered.set()

    _thread.start_new_thread(foreign, ())
    assert entered.wait(60)
    for _ in range(600):  # until the thread's state (and its context) is gone: no join here
        if len(BudgetAccountant._open_blocks) == 0:
            break
        time.sleep(0.1)


@pytest.mark.parametrize("entered_by", [
    _enter_in_a_task,
    lambda acc: contextvars.copy_context().run(acc.__enter__),
    _enter_in_a_foreign_thread,
], ids=["asyncio_task", "dropped_context", "foreign_thread"])
def test_a_block_no_context_holds_any_more_is_forgotten(entered_by):
    """Review R1-5: a block entered by a bare __enter__ in an asyncio task that ended, in a copied
    context that was dropped, or in a thread started by _thread.start_new_thread (whose
    _DummyThread stays alive) made default() refuse in every thread without a block, for good."""
    base, acc = BudgetAccountant.default(), BudgetAccountant()
    entered_by(acc)
    assert len(BudgetAccountant._open_blocks) == 0
    assert BudgetAccountant.default() is base  # before: ValueError, "another thread is inside one"
    with pytest.raises(ValueError, match="has no open 'with' block of this accountant"):
        acc.__exit__(None, None, None)


def test_a_copied_context_that_exits_a_block_leaves_it_open_in_the_original():
    """Review R1-6: asyncio.to_thread runs in a copy of the context, which holds the caller's block;
    its __exit__ discarded the block from the process-wide set while the caller was still inside
    it, so a thread without a block was charged to the process default instead of refusing."""
    base, acc, seen = BudgetAccountant.default(), BudgetAccountant(), {}

    def block_less():
        try:
            seen["block-less"] = BudgetAccountant.default()
        except ValueError as exc:
            seen["block-less"] = exc

    async def main():
        with acc:
            await asyncio.to_thread(acc.__exit__, None, None, None)  # closes it in the copy only
            seen["caller"] = BudgetAccountant.default()
            thread = threading.Thread(target=block_less)
            thread.start()
            thread.join()

    asyncio.run(main())
    assert seen["caller"] is acc
    assert isinstance(seen["block-less"], ValueError), seen  # before: the process default, base
    assert BudgetAccountant.default() is base and len(BudgetAccountant._open_blocks) == 0


def test_an_exception_propagating_through_a_block_of_another_thread_is_not_replaced():
    """Review R1-4: a generator holding `with acc:` around a yield, entered in the main thread, had
    an exception thrown into it from another thread: __exit__ replaced it with its ValueError."""
    base, acc = BudgetAccountant.default(), BudgetAccountant()

    def holding():
        with acc:
            yield

    generator, raised = holding(), []
    next(generator)  # the block is entered in the main thread

    def throw():
        try:
            generator.throw(KeyboardInterrupt())
        except BaseException as exc:  # noqa: BLE001 - the test reports what came out
            raised.append(exc)

    thread = threading.Thread(target=throw)
    thread.start()
    thread.join()
    try:
        assert [type(exc) for exc in raised] == [KeyboardInterrupt]  # before: ValueError
        assert BudgetAccountant.default() is acc  # the block stays open where it was entered
    finally:
        acc.__exit__(None, None, None)
    assert BudgetAccountant.default() is base


def test_mixed_relations_are_refused_by_default(one_cluster_pair):
    """Review RA-6: an add/remove fit and a replace-one fit at epsilon 1 each were accepted under a
    ceiling of 2 (total 2.0), but under replace-one the add/remove fit costs 2 epsilon (3.0 in all),
    and under add/remove the replace-one fit has no guarantee."""
    data, _ = one_cluster_pair
    acc = BudgetAccountant(2.0, 1e-5)
    _one_cluster(PrivateStableKMeans, acc, 1, neighbouring="add_remove").fit(data)
    assert acc.total() == (acc.ledger[0].epsilon, acc.ledger[0].delta)  # one relation: face value
    replace_one = _one_cluster(KTupleClusterer, acc, 2)
    with pytest.raises(ValueError, match="this spend holds under replace_one neighbours.*ledger holds "
                                         "add_remove.*neighbouring='replace_one'"):
        replace_one.fit(data)
    assert len(acc.ledger) == 1 and not hasattr(replace_one, "cluster_centers_")
    assert acc._reserved == {}


def test_replace_one_accountant_charges_add_remove_fits_by_group_privacy(one_cluster_pair):
    data, _ = one_cluster_pair
    acc = BudgetAccountant(2.0, 1e-5, neighbouring="replace_one")
    _one_cluster(PrivateStableKMeans, acc, 1, neighbouring="add_remove").fit(data)
    replace_one = _one_cluster(KTupleClusterer, acc, 2)
    with pytest.raises(BudgetExceededError):
        replace_one.fit(data)
    assert len(acc.ledger) == 1 and not hasattr(replace_one, "cluster_centers_")
    entry = acc.ledger[0]
    assert entry.neighbouring == "add_remove"
    assert acc.total() == (pytest.approx(2 * entry.epsilon, rel=1e-12),
                           pytest.approx((1 + math.exp(entry.epsilon)) * entry.delta, rel=1e-12))


def test_add_remove_accountant_refuses_replace_one_spends(one_cluster_pair):
    data, _ = one_cluster_pair
    acc = BudgetAccountant(10.0, 1e-3, neighbouring="add_remove")
    _one_cluster(PrivateStableKMeans, acc, 1, neighbouring="add_remove").fit(data)
    assert acc.total() == (acc.ledger[0].epsilon, acc.ledger[0].delta)
    replace_one = _one_cluster(PrivateStableKMeans, acc, 2)
    with pytest.raises(ValueError, match="replace-one neighbours only.*neighbouring='add_remove'"):
        replace_one.fit(data)
    assert len(acc.ledger) == 1 and not hasattr(replace_one, "cluster_centers_")
    with pytest.raises(ValueError, match="neighbouring"):
        BudgetAccountant(neighbouring="replace")


def test_the_process_default_takes_either_relation():
    """Fits with accountant=None of both relations share the process default, which converts."""
    previous = BudgetAccountant._base_default
    try:
        BudgetAccountant._base_default = None
        base = BudgetAccountant.default()
        assert base.neighbouring == "replace_one" and math.isinf(base.epsilon)
    finally:
        BudgetAccountant._base_default = previous


def test_group_privacy_conversion_by_hand():
    acc = BudgetAccountant(neighbouring="replace_one")
    acc.spend(0.5, 1e-6, neighbouring="add_remove")
    acc.spend(0.25, 0.0, neighbouring="add_remove")
    acc.spend(0.1, 2e-6)
    eps, delta = acc.total()
    assert eps == pytest.approx(2 * 0.5 + 2 * 0.25 + 0.1, rel=1e-12)
    assert delta == pytest.approx(1 - (1 - (1 + math.exp(0.5)) * 1e-6) * (1 - 2e-6), rel=1e-12)
    assert LedgerEntry(800.0, 1e-300, neighbouring="add_remove").group_cost("replace_one") == (1600.0, 1.0)


def test_json_keeps_relations_and_loads_old_ledgers_as_replace_one():
    acc = BudgetAccountant(epsilon=3.0, delta=1e-5, neighbouring="add_remove")
    acc.spend(0.5, 1e-6, label="fit", neighbouring="add_remove")
    restored = BudgetAccountant.from_json(acc.to_json())
    assert restored.neighbouring == "add_remove" and restored.ledger == acc.ledger
    assert restored.ledger[0].neighbouring == "add_remove"
    assert pickle.loads(pickle.dumps(acc)).neighbouring == "add_remove"
    old = BudgetAccountant.from_json(_saved())  # saved before the field existed
    assert old.neighbouring is None and old.ledger[0].neighbouring == "replace_one"
    with pytest.raises(ValueError, match="saved ledger.*replace-one neighbours only"):
        BudgetAccountant.from_json(_saved(neighbouring="add_remove"))  # an old replace-one entry
    mixed = BudgetAccountant(neighbouring="replace_one")
    mixed.spend(0.5, 0.0, neighbouring="add_remove")
    mixed.spend(0.5, 0.0)
    assert BudgetAccountant.from_json(mixed.to_json()).total() == (1.5, 0.0)
    unconverted = json.loads(mixed.to_json())
    del unconverted["neighbouring"]
    with pytest.raises(ValueError, match="saved ledger.*do not add up"):
        BudgetAccountant.from_json(json.dumps(unconverted))
    old_entry = pickle.loads(pickle.dumps(_Forged(LedgerEntry, {"epsilon": 0.5, "delta": 0.0, "label": "",
                                                                "events": ()})))  # an old pickle
    assert old_entry.neighbouring == "replace_one" and old_entry.noise_key is None


def test_an_old_entry_of_an_add_remove_fit_loads_as_add_remove():
    """Re-review V1: an entry saved before entries recorded their relation loaded as replace-one
    even when its events state add/remove, so a replace-one ledger charged the add/remove fit
    at epsilon instead of 2 epsilon (1.0 shown where 2.5 was spent under replace-one)."""
    X = np.random.default_rng(0).normal(size=(2000, 2)) + np.repeat([[-5, 0], [5, 0]], 1000, axis=0)
    acc = BudgetAccountant()
    PrivateStableKMeans(2, data_radius=20.0, neighbouring="add_remove", random_state=1,
                        accountant=acc).fit(X)
    data = json.loads(acc.to_json())
    data.pop("neighbouring")
    for entry in data["ledger"]:
        entry.pop("neighbouring")  # the format before the field existed
    old = BudgetAccountant.from_json(json.dumps(data))
    assert old.ledger[0].neighbouring == "add_remove"
    converted = BudgetAccountant.from_json(json.dumps({**data, "neighbouring": "replace_one"}))
    assert converted.total()[0] == pytest.approx(2.0)
    state = {"epsilon": 1.0, "delta": 1e-6, "label": "", "events": acc.ledger[0].events}
    assert pickle.loads(pickle.dumps(_Forged(LedgerEntry, state))).neighbouring == "add_remove"


def test_a_numpy_integer_seed_is_the_same_stream_as_the_python_int():
    """Re-review V1: random_state=np.int64(0) and 0 draw the same noise but got different
    fingerprints (numpy 2's repr of the entropy), so on_repeated_noise='raise' let both fits
    through with identical releases."""
    X = np.random.default_rng(0).normal(size=(2000, 2)) + np.repeat([[-5, 0], [5, 0]], 1000, axis=0)
    acc = BudgetAccountant(on_repeated_noise="raise")
    PrivateStableKMeans(2, data_radius=20.0, random_state=0, accountant=acc).fit(X)
    with pytest.raises(NoiseReuseError):
        PrivateStableKMeans(2, data_radius=20.0, random_state=np.int64(0), accountant=acc).fit(X)
    assert len(acc.ledger) == 1


def test_units_are_composed_by_hand_for_every_relation():
    """Review R8 M1: the accountant composed a client-level and a sample-level spend by relation
    alone. A client-level entry holds for one row at its cost when it holds under replace-one, at
    the group-of-two cost (2 eps, (1 + e^eps) delta) under either relation when it holds under
    add/remove; a replace-one one has no add/remove guarantee; a sample-level entry has none for
    a client."""
    group = (2 * 0.5, (1 + math.exp(0.5)) * 1e-6)
    expected = {("replace_one", "replace_one"): (0.5, 1e-6), ("add_remove", "replace_one"): group,
                ("add_remove", "add_remove"): group, ("replace_one", "add_remove"): None}
    for (own, relation), cost in expected.items():
        entry = LedgerEntry(0.5, 1e-6, neighbouring=own, privacy_unit="client")
        assert entry.group_cost(own) == (0.5, 1e-6)  # its own unit: unchanged
        if cost is None:
            with pytest.raises(ValueError, match="replace-one neighbours only"):
                entry.group_cost(relation, "sample")
        else:
            assert entry.group_cost(relation, "sample") == pytest.approx(cost, rel=1e-12)
        with pytest.raises(ValueError, match="protects one row.*privacy_unit='client'"):
            LedgerEntry(0.5, 1e-6, neighbouring=own).group_cost(relation, "client")
    for relation in (None, "replace_one", "add_remove"):  # the accountant's own relation too
        acc = BudgetAccountant(neighbouring=relation, privacy_unit="sample")
        acc.spend(0.5, 1e-6, neighbouring="add_remove", privacy_unit="client")
        acc.spend(0.25, 0.0, neighbouring="add_remove")  # a sample-level one: 0.5 on replace-one
        sample = 0.5 if relation == "replace_one" else 0.25
        assert acc.total() == pytest.approx((1.0 + sample, group[1]), rel=1e-12)
    with pytest.raises(ValueError, match="privacy_unit"):
        BudgetAccountant(privacy_unit="row")
    with pytest.raises(ValueError, match="privacy_unit"):
        LedgerEntry(0.5, 0.0, privacy_unit="person")


@pytest.mark.parametrize("unit", [None, "sample", "client"])
def test_a_spend_for_another_unit_is_refused_before_anything_is_spent(unit):
    acc = BudgetAccountant(epsilon=10.0, privacy_unit=unit)
    first = "sample" if unit == "sample" else "client"
    acc.spend(1.0, 0.0, label="first", privacy_unit=first)
    other = "client" if first == "sample" else "sample"
    if unit == "sample":  # converted: replace-one client entry at its own cost
        acc.spend(1.0, 0.0, label="second", privacy_unit=other)
        assert acc.total() == (2.0, 0.0)
        return
    match = "do not add up" if unit is None else "protects one row"
    for attempt in (lambda: acc.check(1.0, privacy_unit=other),
                    lambda: acc.reserve(1.0, noise_key=noise_fingerprint("A", 0), privacy_unit=other),
                    lambda: acc.spend(1.0, 0.0, label="second", privacy_unit=other)):
        with pytest.raises(ValueError, match=match):
            attempt()
    assert [e.label for e in acc.ledger] == ["first"] and acc._reserved == {}
    assert acc.total() == (1.0, 0.0)


def test_json_and_pickle_keep_units_and_load_old_ledgers_as_sample():
    acc = BudgetAccountant(epsilon=3.0, delta=1e-5, privacy_unit="sample")
    acc.spend(0.5, 1e-6, label="fit", neighbouring="add_remove", privacy_unit="client")
    restored = BudgetAccountant.from_json(acc.to_json())
    assert restored.privacy_unit == "sample" and restored.ledger == acc.ledger
    assert restored.ledger[0].privacy_unit == "client" and restored.total() == acc.total()
    copied = pickle.loads(pickle.dumps(acc))
    assert copied.privacy_unit == "sample" and copied.ledger[0].privacy_unit == "client"
    old = BudgetAccountant.from_json(_saved())  # saved before the field existed
    assert old.privacy_unit is None and old.ledger[0].privacy_unit == "sample"
    with pytest.raises(ValueError, match="privacy_unit='client', but.*ledger holds privacy_unit='sample'"):
        old.spend(0.05, 0.0, privacy_unit="client")
    mixed = json.loads(acc.to_json())
    del mixed["privacy_unit"]
    mixed["ledger"].append({"epsilon": 0.1, "delta": 0.0, "neighbouring": "add_remove"})  # sample
    mixed = BudgetAccountant.from_json(json.dumps(mixed))  # converted for one row (review R9 M1)
    assert mixed.privacy_unit == "sample" and mixed.total()[0] == pytest.approx(1.0 + 0.1)
    state = {"epsilon": 0.5, "delta": 0.0, "label": "", "events": (), "noise_key": None,
             "neighbouring": "replace_one"}
    assert pickle.loads(pickle.dumps(_Forged(LedgerEntry, state))).privacy_unit == "sample"
    old_state = {"epsilon": 1.0, "delta": 1.0, "slack": 0.0, "on_repeated_noise": "warn",
                 "neighbouring": None, "entries": [LedgerEntry(0.5, 0.0)]}  # an old pickle
    assert pickle.loads(pickle.dumps(_Forged(BudgetAccountant, old_state))).privacy_unit is None


def _old_client_level_ledger():
    """The JSON of a client-level add/remove federated fit, as saved before ledgers had units."""
    rng = np.random.default_rng(0)
    X = np.vstack([m + rng.normal(size=(300, 2)) for m in ([-5, 0], [5, 0])])
    acc = BudgetAccountant(epsilon=4.0, delta=1e-5)
    FederatedPrivateKMeans(n_clusters=2, epsilon=1.0, delta=1e-6, data_radius=10.0,
                           privacy_unit="client", neighbouring="add_remove", init="sphere_packing",
                           random_state=0, accountant=acc).fit(X, client_ids=rng.integers(0, 40, len(X)))
    data = json.loads(acc.to_json())
    del data["privacy_unit"], data["ledger"][0]["privacy_unit"]  # the format before 96badc3
    return acc, data


def test_an_old_entry_of_a_client_level_fit_loads_as_client_level():
    """Review R9 M1: an entry saved before entries recorded their unit loaded as 'sample' even
    when its events state privacy_unit='client', so a sample-level add/remove ledger charged the
    client-level add/remove fit at epsilon instead of (2 eps, (1 + e^eps) delta)."""
    acc, data = _old_client_level_ledger()
    group = (2.0, (1 + math.exp(1.0)) * 1e-6)
    as_sample = {**data, "privacy_unit": "sample", "neighbouring": "add_remove"}
    old = BudgetAccountant.from_json(json.dumps(as_sample))
    assert old.ledger[0].privacy_unit == "client"
    assert old.total() == pytest.approx(group, rel=1e-12)
    old.spend(1.0, 0.0, neighbouring="add_remove")  # a sample-level fit is added at its cost
    assert old.total()[0] == pytest.approx(3.0)
    state = {name: getattr(acc.ledger[0], name)
             for name in ("epsilon", "delta", "label", "events", "noise_key", "neighbouring")}
    entry = pickle.loads(pickle.dumps(_Forged(LedgerEntry, state)))  # an old pickle
    assert entry.privacy_unit == "client"
    assert entry.group_cost("add_remove", "sample") == pytest.approx(group, rel=1e-12)
    assert BudgetAccountant.from_json(json.dumps(data)).privacy_unit is None  # one unit: unchanged


def test_an_old_ledger_of_both_units_loads_for_one_row():
    """Review R9 M1: an accountant saved before it recorded a unit composed a client-level fit
    and sample-level ones together; it loads as privacy_unit='sample' (the only unit all its
    entries protect), with the client-level add/remove fit at the group-of-two cost, and a
    ceiling that cost exceeds is refused saying why."""
    acc, data = _old_client_level_ledger()
    data["ledger"].append({"epsilon": 0.5, "delta": 0.0, "neighbouring": "add_remove"})
    old = BudgetAccountant.from_json(json.dumps(data))
    assert old.privacy_unit == "sample" and [e.privacy_unit for e in old.ledger] == ["client", "sample"]
    assert old.total() == pytest.approx((2.5, (1 + math.exp(1.0)) * 1e-6), rel=1e-12)
    state = {"epsilon": 4.0, "delta": 1e-5, "slack": 0.0, "neighbouring": None,
             "entries": old.ledger}  # an old pickle of the accountant
    assert pickle.loads(pickle.dumps(_Forged(BudgetAccountant, state))).privacy_unit == "sample"
    with pytest.raises(ValueError, match="over its ceiling.*client-level add/remove fit at epsilon"):
        BudgetAccountant.from_json(json.dumps({**data, "epsilon": 2.0}))


@pytest.mark.parametrize("unit, relation", [("client", "replace_one"), ("client", None),
                                            (None, "add_remove"), (None, None)])
def test_remaining_and_an_over_budget_spend_with_slack_for_another_unit_or_relation(unit, relation):
    """Review R9 L1: with slack > 0, remaining() probed with a sample-level replace-one spend,
    which client-level and add/remove ledgers refuse: it raised ValueError, and so did an
    over-budget spend (its BudgetExceededError message calls remaining())."""
    spent = {"privacy_unit": "client" if unit == "client" or relation is None else "sample",
             "neighbouring": "replace_one" if relation == "replace_one" else "add_remove"}
    acc = BudgetAccountant(epsilon=2.0, delta=1e-3, slack=1e-6, privacy_unit=unit,
                           neighbouring=relation)
    acc.spend(1.5, 1e-6, **spent)
    eps_left, delta_left = acc.remaining()
    assert 0 < eps_left <= 0.5 and delta_left == pytest.approx(1e-3 - 2e-6)
    with pytest.raises(BudgetExceededError, match="remaining is"):
        acc.spend(1.0, 1e-6, label="second", **spent)
    assert len(acc.ledger) == 1
    acc.spend(eps_left, 0.0, **spent)  # what remaining() reports is accepted


def test_the_process_default_takes_either_unit():
    previous = BudgetAccountant._base_default
    try:
        BudgetAccountant._base_default = None
        assert BudgetAccountant.default().privacy_unit == "sample"
    finally:
        BudgetAccountant._base_default = previous


def test_an_old_failed_federated_entry_loads_as_client_level():
    """Review R11 M1: a failed fit's only event, 'private_step_failed', stated no unit, so the
    entry of a failed client-level add/remove federated fit, saved before entries recorded
    their unit, loaded as sample-level: charged epsilon, not 2 epsilon, on a sample-level
    ledger. Such an entry now loads as client-level, and failed steps record their unit."""
    failed = PrivacyEvent("private_step_failed", 1.0, 1e-6,
                          label="FederatedPrivateKMeans/private_step_failed",
                          neighbouring="add_remove",
                          details={"reason": "the private step raised", "proven": False})
    old = {"epsilon": 1.0, "delta": 1e-6, "label": "FederatedPrivateKMeans.fit",
           "events": [failed.to_dict()], "neighbouring": "add_remove"}  # no privacy_unit
    ledger = {"epsilon": 10.0, "delta": 1e-3, "slack": 0.0, "neighbouring": "add_remove",
              "privacy_unit": "sample", "ledger": [old]}
    loaded = BudgetAccountant.from_json(json.dumps(ledger))
    assert loaded.ledger[0].privacy_unit == "client"
    assert loaded.total() == pytest.approx((2.0, (1 + math.exp(1.0)) * 1e-6), rel=1e-12)
    other = {**old, "label": "PrivateStableKMeans.fit",
             "events": [{**failed.to_dict(), "label": "PrivateStableKMeans/private_step_failed"}]}
    assert LedgerEntry.from_dict(other).privacy_unit == "sample"  # no client level there


@pytest.mark.private_step_failure
def test_a_failed_step_records_its_unit_and_relation(monkeypatch):
    def draw_and_raise(self, data, plan, rng):
        rng.normal()
        raise ValueError("a stand-in for a data-dependent defect")

    monkeypatch.setattr(FederatedPrivateKMeans, "_fit_private", draw_and_raise)
    rng = np.random.default_rng(0)
    X = np.vstack([m + rng.normal(size=(300, 2)) for m in ([-5, 0], [5, 0])])
    est = FederatedPrivateKMeans(n_clusters=2, data_radius=10.0, privacy_unit="client",
                                 neighbouring="add_remove", init="sphere_packing", random_state=0,
                                 accountant=BudgetAccountant())
    with pytest.warns(PrivateStepFailedWarning):
        est.fit(X, client_ids=rng.integers(0, 40, len(X)))
    (event,) = est.privacy_ledger_
    assert event.neighbouring == "add_remove" and event.details["privacy_unit"] == "client"
