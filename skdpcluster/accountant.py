r"""The shared privacy accountant: a ledger of spends with a ceiling.

One :class:`BudgetAccountant` can be shared by many estimators and fits. It
keeps its identity through :func:`sklearn.base.clone`, so every fit of a
``GridSearchCV(..., n_jobs=1)`` is charged to the same ledger.

Composition
-----------
``total()`` reports the tightest of the valid composition theorems it knows:

* **basic** (sequential) composition: :math:`\varepsilon = \sum_i \varepsilon_i`,
  :math:`\delta = 1 - \prod_i (1 - \delta_i)` (which is at most
  :math:`\sum_i\delta_i`; Kairouz, Oh & Viswanath 2017, Theorem 3.5 with the
  first term of the minimum);
* with ``slack > 0``, also the **advanced** heterogeneous bounds of Kairouz,
  Oh & Viswanath (2017, Theorem 3.5), which include the Dwork, Rothblum &
  Vadhan (2010) bound as one term:

  .. math::

      \varepsilon = \sum_i \frac{(e^{\varepsilon_i}-1)\varepsilon_i}{e^{\varepsilon_i}+1}
          + \min\left\{\sqrt{2\textstyle\sum_i\varepsilon_i^2\log(1/\tilde\delta)},\;
            \sqrt{2\textstyle\sum_i\varepsilon_i^2
            \log\left(e + \sqrt{\textstyle\sum_i\varepsilon_i^2}/\tilde\delta\right)}\right\},
      \qquad \delta = 1 - (1-\tilde\delta)\prod_i(1-\delta_i),

  with :math:`\tilde\delta` = ``slack``. The advanced total is used when its
  epsilon is smaller than the basic one.

Spends are all-or-nothing: :meth:`spend` checks the new total against the
ceiling under a lock and raises :class:`BudgetExceededError` before anything
is recorded.
"""

import json
import math
import threading
from dataclasses import asdict, dataclass, field

from skdpcluster.exceptions import BudgetExceededError
from skdpcluster.mechanisms import PrivacyEvent
from skdpcluster.utils._validation import check_epsilon_delta

__all__ = ["BudgetAccountant", "LedgerEntry"]

# Budget splits are computed in floating point; a split that sums to the
# ceiling mathematically may exceed it by a few ulps. This relative tolerance
# absorbs that rounding and nothing more.
_RELATIVE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class LedgerEntry:
    """One charge to a :class:`BudgetAccountant`.

    Parameters
    ----------
    epsilon, delta : float
        The privacy guarantee charged.
    label : str
        Who spent it (for example ``"KTupleClusterer.fit"``).
    events : tuple of PrivacyEvent
        The mechanism-level releases behind the charge, for audit.
    """

    epsilon: float
    delta: float
    label: str = ""
    events: tuple = field(default=(), compare=False)

    def to_dict(self):
        """Return a JSON-serialisable dict."""
        data = asdict(self)
        data["events"] = [event.to_dict() for event in self.events]
        return data

    @classmethod
    def from_dict(cls, data):
        """Rebuild an entry from :meth:`to_dict` output."""
        events = tuple(PrivacyEvent.from_dict(event) for event in data.get("events", ()))
        return cls(float(data["epsilon"]), float(data["delta"]), data.get("label", ""), events)


def _basic_total(entries):
    epsilon = math.fsum(entry.epsilon for entry in entries)
    log_keep = math.fsum(math.log1p(-entry.delta) for entry in entries)
    return epsilon, -math.expm1(log_keep)


def _advanced_total(entries, slack):
    """Kairouz, Oh & Viswanath (2017), Theorem 3.5 (heterogeneous), plus DRV10."""
    epsilons = [entry.epsilon for entry in entries]
    drift = math.fsum(math.tanh(eps / 2.0) * eps for eps in epsilons)  # (e^e - 1) e / (e^e + 1)
    squares = math.fsum(eps * eps for eps in epsilons)
    drv = math.sqrt(2.0 * squares * math.log(1.0 / slack))
    kov = math.sqrt(2.0 * squares * math.log(math.e + math.sqrt(squares) / slack))
    log_keep = math.log1p(-slack) + math.fsum(math.log1p(-entry.delta) for entry in entries)
    return drift + min(drv, kov), -math.expm1(log_keep)


class BudgetAccountant:
    r"""A thread-safe ledger of privacy spends with a ceiling.

    Parameters
    ----------
    epsilon : float, default=inf
        Ceiling on the total epsilon.
    delta : float, default=1.0
        Ceiling on the total delta, in [0, 1].
    slack : float, default=0.0
        The :math:`\tilde\delta` of advanced composition. With ``slack=0``
        only basic composition is used. With ``slack > 0``, ``total()``
        reports the advanced bound whenever its epsilon is smaller; its delta
        then includes ``slack``.

    Examples
    --------
    >>> from skdpcluster import BudgetAccountant
    >>> acc = BudgetAccountant(epsilon=1.0, delta=1e-5)
    >>> acc.spend(0.25, 1e-6, label="first query")
    >>> acc.total()
    (0.25, 1e-06)
    >>> eps, delta = acc.remaining()
    >>> round(eps, 6)
    0.75
    """

    _default_lock = threading.RLock()
    _default_stack = []

    def __init__(self, epsilon=float("inf"), delta=1.0, slack=0.0):
        epsilon, _ = check_epsilon_delta(epsilon, 0.0, allow_infinite_epsilon=True)
        if not (isinstance(delta, (int, float)) and 0 <= delta <= 1):
            raise ValueError(f"delta ceiling must lie in [0, 1], got delta={delta!r}.")
        if not (isinstance(slack, (int, float)) and 0 <= slack < 1):
            raise ValueError(f"slack must lie in [0, 1), got slack={slack!r}.")
        if slack > delta:
            raise ValueError(f"slack={slack!r} cannot exceed the delta ceiling delta={delta!r}.")
        self._epsilon = float(epsilon)
        self._delta = float(delta)
        self._slack = float(slack)
        self._entries = []
        self._lock = threading.RLock()

    # -- read-only configuration -------------------------------------------
    @property
    def epsilon(self):
        """float: the epsilon ceiling."""
        return self._epsilon

    @property
    def delta(self):
        """float: the delta ceiling."""
        return self._delta

    @property
    def slack(self):
        """float: the slack of advanced composition."""
        return self._slack

    @property
    def ledger(self):
        """list of LedgerEntry: a copy of every charge so far."""
        with self._lock:
            return list(self._entries)

    def __repr__(self):
        eps, delta = self.total()
        return (
            f"BudgetAccountant(epsilon={self._epsilon!r}, delta={self._delta!r}, "
            f"slack={self._slack!r}; spent=({eps:.6g}, {delta:.6g}) in {len(self._entries)} entries)"
        )

    # -- composition ----------------------------------------------------------
    def _compose(self, entries):
        basic = _basic_total(entries)
        if self._slack == 0 or not entries:
            return basic
        advanced = _advanced_total(entries, self._slack)
        return advanced if advanced[0] < basic[0] else basic

    def total(self):
        """Total privacy spent, as ``(epsilon, delta)``.

        Basic composition, or the advanced bound of the module docstring when
        ``slack > 0`` and it gives a smaller epsilon.
        """
        with self._lock:
            return self._compose(self._entries)

    def remaining(self):
        """What is left under the ceiling, as ``(epsilon, delta)``.

        Computed as the ceiling minus :meth:`total`; a further spend of exactly
        this much is always accepted under basic composition.
        """
        eps, delta = self.total()
        return max(self._epsilon - eps, 0.0), max(self._delta - delta, 0.0)

    def _fits(self, total):
        eps, delta = total
        eps_ok = eps <= self._epsilon * (1 + _RELATIVE_TOLERANCE)
        delta_ok = delta <= self._delta * (1 + _RELATIVE_TOLERANCE)
        return eps_ok and delta_ok

    def _check_locked(self, entry):
        new_total = self._compose([*self._entries, entry])
        if not self._fits(new_total):
            eps_left, delta_left = self.remaining()
            raise BudgetExceededError(
                f"spending (epsilon={entry.epsilon:.6g}, delta={entry.delta:.6g}) would bring the "
                f"total to (epsilon={new_total[0]:.6g}, delta={new_total[1]:.6g}), over the "
                f"ceiling (epsilon={self._epsilon:.6g}, delta={self._delta:.6g}); remaining is "
                f"(epsilon={eps_left:.6g}, delta={delta_left:.6g}). Lower the estimator's "
                "epsilon/delta or use an accountant with a larger budget."
            )

    @staticmethod
    def _entry(epsilon, delta, label, events):
        epsilon, delta = check_epsilon_delta(epsilon, delta)
        return LedgerEntry(epsilon, delta, "" if label is None else str(label), tuple(events))

    def check(self, epsilon, delta=0.0):
        """Raise :class:`BudgetExceededError` if spending ``(epsilon, delta)`` would exceed the ceiling.

        Nothing is recorded.
        """
        entry = self._entry(epsilon, delta, None, ())
        with self._lock:
            self._check_locked(entry)

    def spend(self, epsilon, delta=0.0, label=None, events=()):
        """Record a spend of ``(epsilon, delta)``, all or nothing.

        Parameters
        ----------
        epsilon, delta : float
            The guarantee to charge.
        label : str, default=None
            Who spent it.
        events : iterable of PrivacyEvent, default=()
            The releases behind the charge, kept for audit.

        Raises
        ------
        BudgetExceededError
            If the new total would exceed the ceiling; nothing is recorded.
        """
        entry = self._entry(epsilon, delta, label, events)
        with self._lock:
            self._check_locked(entry)
            self._entries.append(entry)

    # -- default accountant ------------------------------------------------------
    @classmethod
    def default(cls):
        """Return the process-wide default accountant (created unbounded on first use).

        Inside ``with acc:`` blocks the innermost ``acc`` is the default.
        """
        with cls._default_lock:
            if not cls._default_stack:
                cls._default_stack.append(cls())
            return cls._default_stack[-1]

    def set_default(self):
        """Make this accountant the process-wide default; return it."""
        with self._default_lock:
            if self._default_stack:
                self._default_stack[0] = self
            else:
                self._default_stack.append(self)
        return self

    def __enter__(self):
        with self._default_lock:
            self.default()  # make sure the base default exists below us
            self._default_stack.append(self)
        return self

    def __exit__(self, *exc_info):
        with self._default_lock:
            # Remove the innermost occurrence of self (blocks are properly nested).
            for position in range(len(self._default_stack) - 1, 0, -1):
                if self._default_stack[position] is self:
                    del self._default_stack[position]
                    break
        return False

    # -- scikit-learn, pickle and JSON ---------------------------------------------
    def __sklearn_clone__(self):
        """Return ``self``: clones of an estimator keep sharing this accountant."""
        return self

    def __getstate__(self):
        with self._lock:
            state = self.__dict__.copy()
            state["_entries"] = list(self._entries)
        del state["_lock"]
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._lock = threading.RLock()

    def to_json(self):
        """Serialise the ceiling, slack and ledger to a JSON string."""
        with self._lock:
            data = {
                "epsilon": self._epsilon if math.isfinite(self._epsilon) else "inf",
                "delta": self._delta,
                "slack": self._slack,
                "ledger": [entry.to_dict() for entry in self._entries],
            }
        return json.dumps(data)

    @classmethod
    def from_json(cls, text):
        """Rebuild an accountant from :meth:`to_json` output."""
        data = json.loads(text)
        accountant = cls(float(data["epsilon"]), data["delta"], data["slack"])
        accountant._entries = [LedgerEntry.from_dict(entry) for entry in data["ledger"]]
        return accountant
