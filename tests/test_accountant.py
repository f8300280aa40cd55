import json
import math
import pickle
import threading

import pytest
from sklearn.base import BaseEstimator, clone

from skdpcluster import BudgetAccountant, BudgetExceededError
from skdpcluster.mechanisms import PrivacyEvent


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


def test_advanced_composition_used_when_tighter():
    slack = 1e-6
    acc = BudgetAccountant(slack=slack)
    for _ in range(100):
        acc.spend(0.01, 0.0)
    eps, delta = acc.total()
    drift = 100 * 0.01 * (math.exp(0.01) - 1) / (math.exp(0.01) + 1)
    squares = 100 * 0.01**2
    expected = drift + min(
        math.sqrt(2 * squares * math.log(1 / slack)),
        math.sqrt(2 * squares * math.log(math.e + math.sqrt(squares) / slack)),
    )
    assert eps == pytest.approx(expected, rel=1e-12)
    assert eps < 0.6  # against 1.0 for basic composition
    assert delta == pytest.approx(slack)


def test_basic_composition_kept_when_advanced_is_looser():
    acc = BudgetAccountant(slack=1e-6)
    acc.spend(1.0, 0.0)
    acc.spend(1.0, 0.0)
    assert acc.total() == (2.0, 0.0)


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


def test_pickle_keeps_ledger_and_is_independent():
    acc = BudgetAccountant(epsilon=1.0)
    acc.spend(0.5, 0.0, label="x")
    copy = pickle.loads(pickle.dumps(acc))
    assert copy.ledger == acc.ledger and copy is not acc
    copy.spend(0.5, 0.0)
    assert len(acc.ledger) == 1  # spending on the copy never touches the original


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
