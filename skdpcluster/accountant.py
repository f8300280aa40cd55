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

  with :math:`\tilde\delta` = ``slack``. Of the two totals, the one with the
  smaller epsilon among those within the ceiling is reported (basic when
  neither is).

Spends are all-or-nothing: :meth:`spend` checks the new total against the
ceiling under a lock and raises :class:`BudgetExceededError` before anything
is recorded.

Copies
------
An accountant re-created by unpickling (``pickle``, ``copy.deepcopy``, a
worker process of joblib's loky or Dask backend) is a *detached copy*: its
ledger can be read, but :meth:`~BudgetAccountant.check` and
:meth:`~BudgetAccountant.spend` raise :class:`DetachedAccountantError`,
because a spend on it would never reach the original ledger.
:meth:`~BudgetAccountant.from_json` restores a saved ledger on purpose and
gives an attached accountant; every field it loads is validated.

Repeated noise
--------------
Fits pass :func:`noise_fingerprint` of their ``random_state`` to
:meth:`~BudgetAccountant.check` and :meth:`~BudgetAccountant.spend`. A second
fit by the same estimator class with the same fingerprint would draw exactly
the same noise, so that the difference of the two releases is free of noise;
the accountant warns (:class:`NoiseReuseWarning`), or refuses with
``on_repeated_noise="raise"``.
"""

import hashlib
import json
import math
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields

import numpy as np

from skdpcluster.exceptions import (
    BudgetExceededError,
    DetachedAccountantError,
    NoiseReuseError,
    NoiseReuseWarning,
)
from skdpcluster.mechanisms import PrivacyEvent
from skdpcluster.utils._validation import check_epsilon_delta
from skdpcluster.utils._warnings import warn_user

__all__ = ["BudgetAccountant", "LedgerEntry", "noise_fingerprint"]

# Budget splits are computed in floating point; a split that sums to the
# ceiling mathematically may exceed it by a few ulps. This relative tolerance
# absorbs that rounding and nothing more.
_RELATIVE_TOLERANCE = 1e-9


@dataclass(frozen=True)
class LedgerEntry:
    """One charge to a :class:`BudgetAccountant`.

    Every field is validated on construction, by :meth:`from_dict` and on
    unpickling, as :meth:`BudgetAccountant.spend` validates a spend.

    Parameters
    ----------
    epsilon, delta : float
        The privacy guarantee charged: finite ``epsilon > 0``, ``delta`` in [0, 1).
    label : str
        Who spent it (for example ``"KTupleClusterer.fit"``).
    events : tuple of PrivacyEvent
        The mechanism-level releases behind the charge, for audit.
    noise_key : str or None
        :func:`noise_fingerprint` of the fit's noise stream, or ``None`` for
        fresh OS entropy.
    """

    epsilon: float
    delta: float
    label: str = ""
    events: tuple = field(default=(), compare=False)
    noise_key: str | None = None

    def __post_init__(self):
        epsilon, delta = check_epsilon_delta(self.epsilon, self.delta)
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "delta", delta)
        if not isinstance(self.label, str):
            raise ValueError(f"label must be a str, got label={self.label!r}.")
        events_ok = isinstance(self.events, tuple) and all(isinstance(e, PrivacyEvent) for e in self.events)
        if not events_ok:
            raise ValueError(f"events must be a tuple of PrivacyEvent, got events={self.events!r}.")
        if not (self.noise_key is None or isinstance(self.noise_key, str)):
            raise ValueError(f"noise_key must be a str or None, got noise_key={self.noise_key!r}.")

    def __setstate__(self, state):
        """Unpickle with the same validation as the constructor."""
        if not isinstance(state, dict):
            raise ValueError(f"a pickled LedgerEntry must hold a dict, got {type(state).__name__}.")
        # Pickles made before ``noise_key`` existed lack it.
        _check_keys(state, required=_ENTRY_FIELDS - {"noise_key"}, allowed=_ENTRY_FIELDS,
                    what="a pickled LedgerEntry")
        for name in _ENTRY_FIELDS:
            object.__setattr__(self, name, state.get(name))
        self.__post_init__()

    def to_dict(self):
        """Return a JSON-serialisable dict."""
        data = asdict(self)
        data["events"] = [event.to_dict() for event in self.events]
        return data

    @classmethod
    def from_dict(cls, data):
        """Rebuild an entry from :meth:`to_dict` output, validating every field.

        Raises
        ------
        ValueError
            Naming the field, for a missing, unknown or invalid field.
        """
        if not isinstance(data, Mapping):
            raise ValueError(f"a ledger entry must be a JSON object, got {type(data).__name__}.")
        _check_keys(data, required={"epsilon", "delta"}, allowed=_ENTRY_FIELDS, what="a ledger entry")
        events = data.get("events", [])
        if not isinstance(events, list):
            raise ValueError(f"events must be a list, got events={events!r}.")
        events = tuple(_event_from_dict(event, position) for position, event in enumerate(events))
        return cls(data["epsilon"], data["delta"], data.get("label", ""), events, data.get("noise_key"))


_ENTRY_FIELDS = frozenset(f.name for f in fields(LedgerEntry))
_EVENT_FIELDS = frozenset(f.name for f in fields(PrivacyEvent))


def _check_keys(data, *, required, allowed, what):
    missing, unknown = sorted(required - set(data)), sorted(set(data) - allowed)
    if missing:
        raise ValueError(f"{what} lacks the field(s) {missing}.")
    if unknown:
        raise ValueError(f"{what} has unknown field(s) {unknown}; allowed are {sorted(allowed)}.")


def _event_from_dict(data, position):
    """A :class:`PrivacyEvent` from its dict, with every cost field checked first."""
    what = f"events[{position}]"
    if not isinstance(data, Mapping):
        raise ValueError(f"{what} must be a JSON object, got {type(data).__name__}.")
    _check_keys(data, required={"mechanism", "epsilon"}, allowed=_EVENT_FIELDS, what=what)
    epsilon, delta = data["epsilon"], data.get("delta", 0.0)
    for name, value, upper in (("epsilon", epsilon, math.inf), ("delta", delta, 1.0)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < upper:
            raise ValueError(f"{what}.{name} must be a finite number in [0, {upper}), got {value!r}.")
    count = data.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"{what}.count must be an integer >= 1, got {count!r}.")
    return PrivacyEvent.from_dict(dict(data))


def noise_fingerprint(owner, random_state):
    """Fingerprint of the noise stream a fit seeded with ``random_state`` will draw.

    The fingerprint covers the generator's state and its seed sequence's
    spawn counter, since fits draw both directly and through
    ``Generator.spawn`` children.

    Parameters
    ----------
    owner : str
        Who draws the noise (the estimator's class name).
    random_state : None, int or numpy.random.Generator
        As given to the fit. It is not advanced.

    Returns
    -------
    str or None
        ``"owner:sha256-hex"``, or ``None`` for ``random_state=None`` (fresh
        OS entropy, never repeated).
    """
    if random_state is None:
        return None
    generator = (random_state if isinstance(random_state, np.random.Generator)
                 else np.random.default_rng(random_state))
    bit_generator = generator.bit_generator
    # ``seed_seq`` is public from numpy 1.25; ``_seed_seq`` before.
    seed_seq = getattr(bit_generator, "seed_seq", None) or getattr(bit_generator, "_seed_seq", None)
    spawned = (getattr(seed_seq, "entropy", None), getattr(seed_seq, "spawn_key", None),
               getattr(seed_seq, "n_children_spawned", None))
    digest = hashlib.sha256(repr((bit_generator.state, spawned)).encode()).hexdigest()
    return f"{owner}:{digest}"


def _delta_from_log_keep(log_keep):
    """``1 - exp(log_keep)``, with ``+ 0.0`` so that an empty ledger reports 0, not -0."""
    return -math.expm1(log_keep) + 0.0


def _basic_total(entries):
    epsilon = math.fsum(entry.epsilon for entry in entries)
    log_keep = math.fsum(math.log1p(-entry.delta) for entry in entries)
    return epsilon, _delta_from_log_keep(log_keep)


def _advanced_total(entries, slack):
    """Kairouz, Oh & Viswanath (2017), Theorem 3.5 (heterogeneous), plus DRV10."""
    epsilons = [entry.epsilon for entry in entries]
    drift = math.fsum(math.tanh(eps / 2.0) * eps for eps in epsilons)  # (e^e - 1) e / (e^e + 1)
    squares = math.fsum(eps * eps for eps in epsilons)
    drv = math.sqrt(2.0 * squares * math.log(1.0 / slack))
    kov = math.sqrt(2.0 * squares * math.log(math.e + math.sqrt(squares) / slack))
    log_keep = math.log1p(-slack) + math.fsum(math.log1p(-entry.delta) for entry in entries)
    return drift + min(drv, kov), _delta_from_log_keep(log_keep)


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
        reports the advanced bound whenever its epsilon is smaller and its
        delta (which includes ``slack``) is within the ceiling.
    on_repeated_noise : {"warn", "raise"}, default="warn"
        What :meth:`check` does when a fit would draw the same noise as one
        already in the ledger (same estimator class, same seed; see
        :func:`noise_fingerprint`): emit :class:`NoiseReuseWarning`, or raise
        :class:`NoiseReuseError` before any randomness is drawn.

    Notes
    -----
    A copy made by unpickling (``pickle``, ``copy.deepcopy``, a worker process
    of a parallel backend) is *detached*: :meth:`check` and :meth:`spend` on
    it raise :class:`DetachedAccountantError`, since the original ledger would
    never see the spend. :func:`sklearn.base.clone` returns the accountant
    itself, so in-process searches and threads share one ledger.

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

    #: Whether a copy made by unpickling may spend. Only the throw-away
    #: accountants of a search that was charged up front in the parent process
    #: (``skdpcluster.model_selection.fit_search_charged``) set this.
    _COPIES_MAY_SPEND = False

    def __init__(self, epsilon=float("inf"), delta=1.0, slack=0.0, *, on_repeated_noise="warn"):
        self._configure(epsilon, delta, slack, on_repeated_noise)
        self._detached = False

    def _configure(self, epsilon, delta, slack, on_repeated_noise):
        """Validate and set the ceiling and options, with an empty ledger."""
        epsilon, _ = check_epsilon_delta(epsilon, 0.0, allow_infinite_epsilon=True)
        if isinstance(delta, bool) or not (isinstance(delta, (int, float)) and 0 <= delta <= 1):
            raise ValueError(f"delta ceiling must lie in [0, 1], got delta={delta!r}.")
        if isinstance(slack, bool) or not (isinstance(slack, (int, float)) and 0 <= slack < 1):
            raise ValueError(f"slack must lie in [0, 1), got slack={slack!r}.")
        if slack > delta:
            raise ValueError(f"slack={slack!r} cannot exceed the delta ceiling delta={delta!r}.")
        if on_repeated_noise not in ("warn", "raise"):
            raise ValueError(
                "on_repeated_noise must be 'warn' or 'raise', got "
                f"on_repeated_noise={on_repeated_noise!r}."
            )
        self._epsilon = float(epsilon)
        self._delta = float(delta)
        self._slack = float(slack)
        self._on_repeated_noise = on_repeated_noise
        self._entries = []
        self._noise_keys = set()
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
    def on_repeated_noise(self):
        """str: ``"warn"`` or ``"raise"``, see the class parameters."""
        return self._on_repeated_noise

    @property
    def detached(self):
        """bool: whether this is a copy made by unpickling, which refuses to spend."""
        return self._detached

    @property
    def ledger(self):
        """list of LedgerEntry: a copy of every charge so far."""
        with self._lock:
            return list(self._entries)

    def __repr__(self):
        eps, delta = self.total()
        detached = ", detached copy" if self._detached else ""
        return (
            f"BudgetAccountant(epsilon={self._epsilon!r}, delta={self._delta!r}, "
            f"slack={self._slack!r}; spent=({eps:.6g}, {delta:.6g}) in {len(self._entries)} entries"
            f"{detached})"
        )

    # -- composition ----------------------------------------------------------
    def _compose(self, entries):
        """The tightest total within the ceiling: advanced if it fits with a smaller epsilon, else basic."""
        basic = _basic_total(entries)
        if self._slack == 0 or not entries:
            return basic
        advanced = _advanced_total(entries, self._slack)
        if self._fits(advanced) and (advanced[0] < basic[0] or not self._fits(basic)):
            return advanced
        return basic

    def total(self):
        """Total privacy spent, as ``(epsilon, delta)``.

        Basic composition, or the advanced bound of the module docstring when
        ``slack > 0`` and it is within the ceiling with a smaller epsilon.
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
        if self._detached:
            raise DetachedAccountantError(
                "this BudgetAccountant is a copy made by unpickling (pickle, copy.deepcopy, or a "
                "worker process of joblib's loky or Dask backend): a spend on it would never reach "
                "the original ledger, so it refuses to spend. For a search with process-parallel "
                "fits, charge it up front with skdpcluster.model_selection.fit_search_charged; "
                "to continue a saved ledger on purpose, restore it with BudgetAccountant.from_json."
            )
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

    def _check_noise_locked(self, noise_key):
        if noise_key is None or noise_key not in self._noise_keys:
            return
        owner = noise_key.split(":", 1)[0]
        message = (
            f"{owner} was already charged to this accountant for a fit with the same random_state, "
            "so this fit would draw exactly the same noise: the difference of the two releases "
            "would be free of noise and the accountant's composition would not hold. Use a "
            "different seed for every fit charged to one accountant, or random_state=None."
        )
        if self._on_repeated_noise == "raise":
            raise NoiseReuseError(message)
        warn_user(message, NoiseReuseWarning)

    @staticmethod
    def _entry(epsilon, delta, label, events, noise_key=None):
        return LedgerEntry(epsilon, delta, "" if label is None else str(label), tuple(events), noise_key)

    def check(self, epsilon, delta=0.0, *, noise_key=None):
        """Raise if spending ``(epsilon, delta)`` would exceed the ceiling; nothing is recorded.

        Parameters
        ----------
        epsilon, delta : float
            The guarantee a fit is about to spend.
        noise_key : str, default=None
            :func:`noise_fingerprint` of the fit's noise stream. If the ledger
            already holds it, warn (:class:`NoiseReuseWarning`) or raise
            (:class:`NoiseReuseError`) as ``on_repeated_noise`` says.

        Raises
        ------
        BudgetExceededError
            If the new total would exceed the ceiling.
        DetachedAccountantError
            If this accountant is a copy made by unpickling.
        NoiseReuseError
            With ``on_repeated_noise="raise"``, for a repeated ``noise_key``.
        """
        entry = self._entry(epsilon, delta, None, (), noise_key)
        with self._lock:
            self._check_locked(entry)
            self._check_noise_locked(noise_key)

    def spend(self, epsilon, delta=0.0, label=None, events=(), *, noise_key=None):
        """Record a spend of ``(epsilon, delta)``, all or nothing.

        Parameters
        ----------
        epsilon, delta : float
            The guarantee to charge.
        label : str, default=None
            Who spent it.
        events : iterable of PrivacyEvent, default=()
            The releases behind the charge, kept for audit.
        noise_key : str, default=None
            :func:`noise_fingerprint` of the noise the spend paid for, kept so
            that :meth:`check` can notice a repeat. A repeat is recorded
            without complaint here: the spend comes after the noise was drawn,
            and it must not fail for that reason.

        Raises
        ------
        BudgetExceededError
            If the new total would exceed the ceiling; nothing is recorded.
        DetachedAccountantError
            If this accountant is a copy made by unpickling.
        """
        entry = self._entry(epsilon, delta, label, events, noise_key)
        with self._lock:
            self._check_locked(entry)
            self._entries.append(entry)
            if noise_key is not None:
                self._noise_keys.add(noise_key)

    # -- default accountant ------------------------------------------------------
    @classmethod
    def default(cls):
        """Return the process-wide default accountant (created unbounded on first use).

        Inside ``with acc:`` blocks the innermost ``acc`` is the default.
        """
        with cls._default_lock:
            if not cls._default_stack:
                cls._default_stack.append(BudgetAccountant())
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
            return {
                "epsilon": self._epsilon,
                "delta": self._delta,
                "slack": self._slack,
                "on_repeated_noise": self._on_repeated_noise,
                "entries": list(self._entries),
            }

    def __setstate__(self, state):
        """Unpickle as a detached copy, validating every field as :meth:`from_json` does."""
        if not isinstance(state, dict):
            raise ValueError(
                f"a pickled BudgetAccountant must hold a dict, got {type(state).__name__}.")
        _check_keys(state, required={"epsilon", "delta", "slack", "entries"},
                    allowed={"epsilon", "delta", "slack", "on_repeated_noise", "entries"},
                    what="a pickled BudgetAccountant")
        self._configure(state["epsilon"], state["delta"], state["slack"],
                        state.get("on_repeated_noise", "warn"))
        self._load_entries(state["entries"])
        self._detached = not self._COPIES_MAY_SPEND

    def _load_entries(self, entries):
        """Install a saved ledger after checking its entries and that its total is within the ceiling."""
        if not (isinstance(entries, list) and all(isinstance(e, LedgerEntry) for e in entries)):
            raise ValueError("ledger must be a list of ledger entries.")
        total = self._compose(entries)
        if not self._fits(total):
            raise ValueError(
                f"the saved ledger totals (epsilon={total[0]:.6g}, delta={total[1]:.6g}), over its "
                f"ceiling (epsilon={self._epsilon:.6g}, delta={self._delta:.6g}); it is corrupt or "
                "was edited."
            )
        self._entries = list(entries)
        self._noise_keys = {entry.noise_key for entry in entries if entry.noise_key is not None}

    def to_json(self):
        """Serialise the ceiling, options and ledger to a JSON string."""
        with self._lock:
            data = {
                "epsilon": self._epsilon if math.isfinite(self._epsilon) else "inf",
                "delta": self._delta,
                "slack": self._slack,
                "on_repeated_noise": self._on_repeated_noise,
                "ledger": [entry.to_dict() for entry in self._entries],
            }
        return json.dumps(data)

    @classmethod
    def from_json(cls, text):
        """Rebuild an attached accountant from :meth:`to_json` output.

        Every field is validated as :meth:`spend` validates a spend (finite
        ``epsilon > 0`` and ``delta`` in [0, 1) for every entry and event),
        and the ledger's total must be within the ceiling.

        Raises
        ------
        ValueError
            Naming the field (``ledger[i].epsilon``, ...), for malformed JSON,
            a missing, unknown or invalid field, or a total over the ceiling.
        """
        try:
            data = json.loads(text)
        except (TypeError, json.JSONDecodeError) as exc:
            raise ValueError(
                f"from_json needs the JSON text of BudgetAccountant.to_json: {exc}") from exc
        if not isinstance(data, dict):
            raise ValueError(f"a saved accountant must be a JSON object, got {type(data).__name__}.")
        _check_keys(data, required={"epsilon", "delta", "slack", "ledger"},
                    allowed={"epsilon", "delta", "slack", "on_repeated_noise", "ledger"},
                    what="a saved accountant")
        epsilon = math.inf if data["epsilon"] == "inf" else data["epsilon"]
        accountant = cls(epsilon, data["delta"], data["slack"],
                         on_repeated_noise=data.get("on_repeated_noise", "warn"))
        if not isinstance(data["ledger"], list):
            raise ValueError(f"ledger must be a list, got ledger={data['ledger']!r}.")
        entries = []
        for position, entry in enumerate(data["ledger"]):
            try:
                entries.append(LedgerEntry.from_dict(entry))
            except ValueError as exc:
                raise ValueError(f"ledger[{position}]: {exc}") from exc
        accountant._load_entries(entries)
        return accountant
