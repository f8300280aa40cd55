r"""The shared privacy accountant: a ledger of spends with a ceiling.

One :class:`BudgetAccountant` can be shared by many estimators and fits. It
keeps its identity through :func:`sklearn.base.clone`, so every fit of a
``GridSearchCV(..., n_jobs=1)`` is charged to the same ledger.

Composition
-----------
``total()`` reports the tightest of the valid composition rules it knows:

* **basic** (sequential) composition: :math:`\varepsilon = \sum_i \varepsilon_i`,
  :math:`\delta = 1 - \prod_i (1 - \delta_i)` (which is at most
  :math:`\sum_i\delta_i`; with ``slack > 0`` see below). It holds for
  privacy parameters chosen adaptively (Rogers, Roth, Ullman & Vadhan 2016,
  the basic filter);
* with ``slack > 0``, also the **advanced filter** of Whitehouse, Ramdas,
  Rogers & Wu (2023, "Fully-adaptive composition in differential privacy",
  the filter for approximate DP that matches advanced composition):

  .. math::

      \varepsilon = \sqrt{2\log(1/\tilde\delta)\textstyle\sum_i\varepsilon_i^2}
          + \sum_i \frac{\varepsilon_i(e^{\varepsilon_i}-1)}{2},
      \qquad \delta = \tilde\delta + \sum_i\delta_i,

  with :math:`\tilde\delta` = ``slack``. The drift term
  :math:`\varepsilon_i(e^{\varepsilon_i}-1)/2` is at least the
  :math:`\varepsilon_i^2/2` of their filter's stopping rule, so the rule
  used here stops no later than theirs. The ceiling is checked spend by spend,
  so the accountant is a privacy *filter*: every fit may choose its
  ``(epsilon, delta)`` after seeing earlier releases. The advanced bounds of
  Dwork, Rothblum & Vadhan (2010) and Kairouz, Oh & Viswanath (2017) need the
  parameters to be fixed in advance and are not used. The filter's guarantee
  is the ceiling ``(epsilon, delta)`` itself, which is why ``slack > 0``
  needs a finite epsilon ceiling.

  A spend is accepted when the smaller of the two epsilons, with the delta
  :math:`\tilde\delta + \sum_i\delta_i`, is within the ceiling; this is
  what ``total()`` reports. A ledger kept within the ceiling by basic
  composition has privacy loss at most its sum of epsilons outside the
  events of the :math:`\delta_i`; one kept within it by the filter, outside
  those events and the filter's failure event, of probability at most
  :math:`\tilde\delta`. Since either rule may accept a spend, the slack is
  reserved from the delta ceiling for both, and the guarantee of the whole
  sequence is the ceiling.

Neighbouring relations
----------------------
Every entry records the neighbouring relation its guarantee holds under
(``LedgerEntry.neighbouring``), and the accountant composes under one
relation. With ``neighbouring=None`` (the default) that is the relation of
its first spend, and a spend under another relation is refused with a
ValueError before anything is spent. Set it to convert instead:

* on a replace-one accountant, an entry proven under add/remove only is
  charged by group privacy for a group of two, since replacing a row is
  removing it and adding another: :math:`(2\varepsilon, (1 + e^{\varepsilon})\delta)`
  (Dwork & Roth 2014, Theorem 2.2 for the pure part; the :math:`\delta`
  term follows by applying the definition along the two steps:
  :math:`P \le e^{\varepsilon}(e^{\varepsilon}P'' + \delta) + \delta`);
* on an add/remove accountant, an entry proven under replace-one only (the
  number of rows treated as public) has no add/remove guarantee and is
  refused with a ValueError before anything is spent.

Privacy units
-------------
Every entry also records the unit its guarantee protects
(``LedgerEntry.privacy_unit``): ``"sample"`` (neighbouring datasets differ
in one row; every estimator but ``FederatedPrivateKMeans(privacy_unit=
"client")``) or ``"client"`` (they differ in all rows of one client), and
the accountant composes for one unit. With ``privacy_unit=None`` (the
default) that is the unit of its first spend, and a spend for another unit
is refused with a ValueError before anything is spent. Set it to convert
instead:

* on a sample-level accountant (``privacy_unit="sample"``), a client-level
  entry is charged for one row. A client holds the row, so changing one row
  (replacing it, or adding or removing it in an existing client) changes one
  client's data and keeps the clients' number: it is replacing that client.
  So a client-level replace-one entry holds at the same cost for sample-level
  replace-one, and a client-level add/remove entry, by group privacy for the
  group of two that a replacement of a client is (as above), at
  :math:`(2\varepsilon, (1 + e^{\varepsilon})\delta)` under either
  sample-level relation (a row added as a new client of its own, or
  removed with its client, is one client added or removed, at
  :math:`(\varepsilon, \delta)`: the group of two is the worst case). A
  client-level replace-one entry has no sample-level add/remove guarantee
  (a row may be a client of its own, and the number of clients is treated
  as public) and is refused on an add/remove accountant, as a sample-level
  replace-one entry is. The conversion assumes that neighbouring datasets
  keep every row's client (``client_ids`` is public, position by
  position); if a replaced row may move to another client, two clients
  change, and a client-level replace-one entry is worth
  :math:`(2\varepsilon, (1 + e^{\varepsilon})\delta)` for one row, a
  client-level add/remove one up to a group of four.
* on a client-level accountant (``privacy_unit="client"``), a sample-level
  entry has no client-level guarantee (one client holds many rows) and is
  refused with a ValueError before anything is spent.

The two settings combine: the unit is converted first, then the relation,
and a client-level entry on a sample-level accountant costs
:math:`(\varepsilon, \delta)` under replace-one if it holds under
replace-one, :math:`(2\varepsilon, (1 + e^{\varepsilon})\delta)` under
either relation if it holds under add/remove, and is refused under
add/remove if it holds under replace-one (never :math:`4\varepsilon`: the
group of two is counted once). With ``neighbouring=None`` the entries' own
relations must still agree.

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
:meth:`~BudgetAccountant.reserve` and :meth:`~BudgetAccountant.spend`. Two
fits with the same noise stream draw the same noise, whatever their
estimator classes (with ``n_clusters=1`` several classes release the same
private mean from it), so that the difference of the two releases is free of
noise. A generator has two sources of noise, and each has its own
fingerprint: its bit generator's state (direct draws) and its seed sequence
with its spawn counter (``Generator.spawn`` children, which do not depend on
the state). A fit repeats noise when *either* fingerprint is in the ledger,
so a Generator moved by a direct draw still repeats the children that a fit
on a copy of it spawned (review R1-1). A fit records only the sources it
drew from (:func:`drawn_noise_key`; the clusterers' fits spawn, that of
``PrivateStandardScaler`` draws directly): a source a fit did not use is
still fresh, so fits one after another on one Generator are not repeats. An
int seed gives every fit a new generator from the seed, so two fits with one
int seed are a repeat, whatever they draw. The accountant compares the
streams alone (the part of the fingerprint after the owner's name) and warns
(:class:`NoiseReuseWarning`), or refuses with ``on_repeated_noise="raise"``.
:meth:`~BudgetAccountant.reserve` records the streams atomically with the
check, so two concurrent fits with one seed cannot both pass it; the
reservation is released if the fit ends without spending. A spend that pays
for several streams (a search charged up front by
``skdpcluster.model_selection.fit_search_charged``, whose seeded fits and
private choice each draw some) passes a tuple of fingerprints, and its entry
records them all. A ledger saved before review R1-1 holds one fingerprint
per fit, of the state and the spawn counter together;
:func:`noise_fingerprint` still computes it, so such a ledger notices the
same repeats as before.

The default accountant
----------------------
``with acc:`` makes ``acc`` the default accountant of the current context
inside the block: the stack of blocks is held in a
:class:`contextvars.ContextVar`, so each thread and each asyncio task has its
own, and a copy of a context made inside a block (``asyncio.to_thread``, a
task created in the block, :func:`contextvars.copy_context`) holds that block
too. :meth:`~BudgetAccountant.set_default` sets the process-wide default below
every block. A block is open while any context holds it. A thread or task
with no block of its own while one is open elsewhere (a worker thread of a
threaded search started in a ``with`` block, for example) cannot tell which
accountant it is meant to charge, so :meth:`~BudgetAccountant.default`
refuses there with a ValueError, before anything is spent: pass
``accountant=`` explicitly.

``__exit__`` closes the block in the current context only: a copy that exits
it leaves it open in the context it was copied from. In a context without a
block of the accountant (a ``with`` in a generator resumed in another thread,
for example) it raises ValueError and leaves the block open where it was
entered, unless an exception is propagating, which then goes on unchanged.
The set of open blocks holds them by weak reference, so a block is forgotten
once no context holds it any more: a block entered by a bare ``__enter__``
and never exited stops counting when its thread or task ends, or when its
copied context is dropped. A context that is still referenced keeps its
blocks open: a finished :class:`asyncio.Task` that is still referenced (or,
from Python 3.14, a :class:`threading.Thread` object), a saved copy of a
context, or a context in a reference cycle until the garbage collector frees
it. Every access of the package to the set is under a lock; the weak
references' own removals are single atomic set operations.
"""

import contextvars
import hashlib
import json
import math
import threading
import weakref
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
from skdpcluster.utils._random import check_random_state
from skdpcluster.utils._validation import check_epsilon_delta
from skdpcluster.utils._warnings import warn_user

__all__ = ["BudgetAccountant", "LedgerEntry", "drawn_noise_key", "noise_fingerprint",
           "noise_stream"]

# Budget splits are computed in floating point; a split that sums to the
# ceiling mathematically may exceed it by a few ulps. This relative tolerance
# absorbs that rounding and nothing more.
_RELATIVE_TOLERANCE = 1e-9

#: The neighbouring relations an entry or an accountant can state.
NEIGHBOURING_RELATIONS = ("replace_one", "add_remove")

#: The relation of a spend or a saved entry that does not state one (an entry
#: saved before the field existed): the library's default relation.
DEFAULT_NEIGHBOURING = "replace_one"

#: The privacy units an entry or an accountant can state (module docstring, "Privacy units").
PRIVACY_UNITS = ("sample", "client")

#: The unit of a spend or a saved entry that does not state one (an entry saved before the
#: field existed): one row, the unit of every estimator but a client-level federated fit.
DEFAULT_PRIVACY_UNIT = "sample"


def _check_neighbouring(neighbouring):
    if neighbouring not in NEIGHBOURING_RELATIONS:
        raise ValueError(
            f"neighbouring must be one of {list(NEIGHBOURING_RELATIONS)}, got "
            f"neighbouring={neighbouring!r}.")
    return neighbouring


def _check_privacy_unit(privacy_unit):
    if privacy_unit not in PRIVACY_UNITS:
        raise ValueError(
            f"privacy_unit must be one of {list(PRIVACY_UNITS)}, got privacy_unit={privacy_unit!r}.")
    return privacy_unit


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
    noise_key : str, tuple of str or None
        The fingerprints of the noise the charge paid for: those of the
        sources a fit drew from (:func:`drawn_noise_key`), or of every stream
        of a search charged up front by ``fit_search_charged`` (a JSON list
        in :meth:`to_dict`); a single fingerprint in ledgers saved before
        review R1-1; ``None`` for fresh OS entropy.
    neighbouring : {"replace_one", "add_remove"}, default="replace_one"
        The neighbouring relation under which ``(epsilon, delta)`` holds. An
        entry saved before this field existed loads as ``"add_remove"`` when
        every one of its events states add/remove, else as ``"replace_one"``,
        the library's default relation.
    privacy_unit : {"sample", "client"}, default="sample"
        The unit whose change the guarantee covers: one row, or all rows of
        one client. An entry saved before this field existed loads as
        ``"client"`` when one of its events states that unit in its
        ``details`` (a fit of ``FederatedPrivateKMeans(privacy_unit=
        "client")``, whose events have always said so) or when it is a failed
        ``FederatedPrivateKMeans`` step that does not say (it may have been
        client-level), else as ``"sample"``.
    """

    epsilon: float
    delta: float
    label: str = ""
    events: tuple = field(default=(), compare=False)
    noise_key: str | tuple | None = None
    neighbouring: str = DEFAULT_NEIGHBOURING
    privacy_unit: str = DEFAULT_PRIVACY_UNIT

    def __post_init__(self):
        epsilon, delta = check_epsilon_delta(self.epsilon, self.delta)
        object.__setattr__(self, "epsilon", epsilon)
        object.__setattr__(self, "delta", delta)
        if not isinstance(self.label, str):
            raise ValueError(f"label must be a str, got label={self.label!r}.")
        events_ok = isinstance(self.events, tuple) and all(isinstance(e, PrivacyEvent) for e in self.events)
        if not events_ok:
            raise ValueError(f"events must be a tuple of PrivacyEvent, got events={self.events!r}.")
        keys = self.noise_key if isinstance(self.noise_key, tuple) else (self.noise_key,)
        if not (self.noise_key is None or (keys and all(isinstance(key, str) for key in keys))):
            raise ValueError("noise_key must be a str, a non-empty tuple of str or None, got "
                             f"noise_key={self.noise_key!r}.")
        _check_neighbouring(self.neighbouring)
        _check_privacy_unit(self.privacy_unit)

    def __setstate__(self, state):
        """Unpickle with the same validation as the constructor."""
        if not isinstance(state, dict):
            raise ValueError(f"a pickled LedgerEntry must hold a dict, got {type(state).__name__}.")
        # Pickles made before ``noise_key``, ``neighbouring`` and ``privacy_unit`` existed lack them.
        _check_keys(state, required=_ENTRY_FIELDS - set(_ENTRY_DEFAULTS), allowed=_ENTRY_FIELDS,
                    what="a pickled LedgerEntry")
        for name in _ENTRY_FIELDS:
            object.__setattr__(self, name, state.get(name, _ENTRY_DEFAULTS.get(name)))
        self.__post_init__()  # the events are checked before they are read
        if "neighbouring" not in state:
            object.__setattr__(self, "neighbouring", _relation_of_events(self.events))
        if "privacy_unit" not in state:
            object.__setattr__(self, "privacy_unit", _unit_of_events(self.events))

    def group_cost(self, neighbouring, privacy_unit=None):
        r"""``(epsilon, delta)`` of this entry under the relation ``neighbouring``.

        An add/remove guarantee under replace-one is the group-privacy
        guarantee for a group of two, since a replacement is a removal and an
        addition: :math:`(2\varepsilon, (1 + e^{\varepsilon})\delta)`, capped
        at ``delta = 1`` (Dwork & Roth 2014, Theorem 2.2, for the pure part).
        A replace-one guarantee has no add/remove counterpart: ValueError.

        With ``privacy_unit`` (``None``: the entry's own), the unit is
        converted first (module docstring, "Privacy units"): a client-level
        entry holds for one row, at its own cost under replace-one when it
        holds under replace-one (a row changed in its client is that client
        replaced), and at the group-of-two cost under either relation when
        it holds under add/remove (a client replaced is a client removed and
        one added). A sample-level entry has no client-level guarantee:
        ValueError.
        """
        if privacy_unit is not None and privacy_unit != self.privacy_unit:
            if privacy_unit == "client":  # a sample-level entry
                raise ValueError(_SAMPLE_ON_CLIENT.format(label=self.label or "this spend"))
            if self.neighbouring == "add_remove":  # one row changed: a client replaced
                return self.group_cost("replace_one")
        if self.neighbouring == neighbouring:
            return self.epsilon, self.delta
        if neighbouring == "replace_one":  # an add/remove entry
            if self.delta == 0.0:
                return 2.0 * self.epsilon, 0.0
            # log((1 + e^eps) delta), capped at log 1 before exp so that nothing overflows.
            log_delta = math.log(self.delta) + self.epsilon + math.log1p(math.exp(-self.epsilon))
            return 2.0 * self.epsilon, math.exp(min(log_delta, 0.0))
        raise ValueError(_REPLACE_ONE_ON_ADD_REMOVE.format(label=self.label or "this spend"))

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
        noise_key = data.get("noise_key")
        noise_key = tuple(noise_key) if isinstance(noise_key, list) else noise_key  # several streams
        return cls(data["epsilon"], data["delta"], data.get("label", ""), events, noise_key,
                   data.get("neighbouring", _relation_of_events(events)),
                   data.get("privacy_unit", _unit_of_events(events)))


def _relation_of_events(events):
    """The relation of an entry saved before entries recorded one: that of its events.

    ``"add_remove"`` when every event states it (an add/remove fit of an
    estimator offering that relation), else the library's default
    ``"replace_one"`` (re-review V1: loading every old entry as replace-one
    charged an add/remove fit at epsilon instead of 2 epsilon on a replace-one
    ledger).
    """
    relations = {getattr(event, "neighbouring", None) for event in events}
    return "add_remove" if relations == {"add_remove"} else DEFAULT_NEIGHBOURING


def _unit_of_events(events):
    """The unit of an entry saved before entries recorded one: that of its events.

    ``"client"`` when an event states it in its ``details`` (every event of
    a ``FederatedPrivateKMeans(privacy_unit="client")`` fit does, since that
    estimator exists), else ``"sample"`` (review R9 M1: loading every old
    entry as ``"sample"`` charged a client-level add/remove fit at epsilon
    instead of 2 epsilon on a sample-level ledger).
    """
    client = any(isinstance(event.details, Mapping) and event.details.get("privacy_unit") == "client"
                 for event in events)
    return "client" if client or any(map(_unstated_federated_failure, events)) else (
        DEFAULT_PRIVACY_UNIT)


def _unstated_federated_failure(event):
    """Whether ``event`` is a failed ``FederatedPrivateKMeans`` step saved without its unit.

    Such an event was the whole ledger entry of a failed fit, which may have
    been client-level: it loads as client-level, which costs at least as
    much on a sample-level ledger (review R11 M1: loaded as sample-level, a
    failed client-level add/remove fit was charged epsilon, not 2 epsilon).
    Failed steps record their unit since.
    """
    details = event.details if isinstance(event.details, Mapping) else {}
    return (event.mechanism == "private_step_failed" and "privacy_unit" not in details
            and str(event.label).startswith("FederatedPrivateKMeans"))


_ENTRY_FIELDS = frozenset(f.name for f in fields(LedgerEntry))
_ENTRY_DEFAULTS = {"noise_key": None, "neighbouring": DEFAULT_NEIGHBOURING,
                   "privacy_unit": DEFAULT_PRIVACY_UNIT}
_MIXED_RELATIONS = (
    "{label} holds under {new} neighbours, but this accountant's ledger holds {held} spends, and "
    "guarantees under different relations do not add up (a replacement is a removal and an "
    "addition, so an add/remove epsilon is worth 2 epsilon under replace-one). Use one accountant "
    "per relation, or BudgetAccountant(neighbouring='replace_one'), which charges add/remove "
    "spends by group privacy at (2 epsilon, (1 + e^epsilon) delta).")
_REPLACE_ONE_ON_ADD_REMOVE = (
    "{label} holds under replace-one neighbours only (the number of rows is treated as public), "
    "so it has no guarantee under add/remove, the relation of this accountant "
    "(neighbouring='add_remove'). Charge it to a replace-one accountant (the default, which "
    "charges add/remove fits by group privacy at (2 epsilon, (1 + e^epsilon) delta)), or fit "
    "with neighbouring='add_remove' where the estimator offers it.")
_MIXED_UNITS = (
    "{label} holds for privacy_unit={new!r}, but this accountant's ledger holds "
    "privacy_unit={held!r} spends, and guarantees for different units do not add up (a "
    "client-level add/remove epsilon is worth 2 epsilon for one row of a client; a sample-level "
    "epsilon gives no client-level guarantee). Use one accountant per unit, or "
    "BudgetAccountant(privacy_unit='sample'), which charges client-level spends for one row "
    "(add/remove ones by group privacy at (2 epsilon, (1 + e^epsilon) delta)).")
_SAMPLE_ON_CLIENT = (
    "{label} protects one row (privacy_unit='sample'), which gives no guarantee for a client "
    "holding many rows, the unit of this accountant (privacy_unit='client'). Charge it to a "
    "sample-level accountant, or fit with privacy_unit='client' where the estimator offers it.")
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
    """Fingerprints of the noise a fit seeded with ``random_state`` can draw.

    A fit draws its noise from two sources, and either one repeats on its
    own: directly from the generator (fixed by its bit generator's state),
    and from ``Generator.spawn`` children, whose seeds depend only on the
    seed sequence (its entropy, spawn key and spawn counter
    ``n_children_spawned``), whatever the state. Each source gets its own
    fingerprint, so that a fit repeats noise when *either* is in the ledger:
    a Generator moved by a direct draw (a new state) still spawns the
    children an earlier fit on a copy of it spawned (review R1-1). A third
    fingerprint covers both together: the single fingerprint of ledgers saved
    before review R1-1, compared so that they keep working.
    The accountant compares only the stream digests (:func:`noise_stream`):
    fits of different estimator classes with one stream draw the same noise
    too. A fit records only the sources it drew from
    (:func:`drawn_noise_key`).

    Parameters
    ----------
    owner : str
        Who draws the noise (the estimator's class name), for messages only.
    random_state : None, int, numpy.random.SeedSequence or numpy.random.Generator
        As given to the fit. It is not advanced.

    Returns
    -------
    tuple of three str, or None
        ``"owner:sha256-hex"`` of the direct draws, of the spawned children
        and of both together, or ``None`` for ``random_state=None`` (fresh OS
        entropy, never repeated).
    """
    if random_state is None:
        return None
    generator = check_random_state(random_state)
    bit_generator = generator.bit_generator
    # ``seed_seq`` is public from numpy 1.25; ``_seed_seq`` before.
    seed_seq = getattr(bit_generator, "seed_seq", None) or getattr(bit_generator, "_seed_seq", None)
    # Plain ints: ``random_state=np.int64(0)`` and ``0`` draw the same noise, but their
    # entropies' reprs differ under numpy 2 (re-review V1).
    spawned = tuple(_plain_ints(getattr(seed_seq, name, None))
                    for name in ("entropy", "spawn_key", "n_children_spawned"))
    sources = (("direct", bit_generator.state),
               ("spawned", type(bit_generator).__name__, spawned),
               (bit_generator.state, spawned))  # that of ledgers saved before review R1-1
    return tuple(f"{owner}:{hashlib.sha256(repr(source).encode()).hexdigest()}"
                 for source in sources)


def drawn_noise_key(noise_key, generator):
    """The fingerprints of ``noise_key`` whose sources ``generator`` has drawn from since.

    A source counts as drawn from when it has moved: the bit generator's
    state for direct draws, the spawn counter for spawned children. A fit
    records only those, since an unused source is still fresh: a fit that
    only spawns leaves the state where it was, and recording it would make
    the next fit's direct draws on the same Generator look like a repeat.

    Parameters
    ----------
    noise_key : tuple of str or None
        :func:`noise_fingerprint` of the fit's ``random_state``, taken before
        the fit.
    generator : numpy.random.Generator
        The generator the fit drew from (``check_random_state`` of that
        ``random_state``), after the fit.

    Returns
    -------
    tuple of str or None
        The fingerprints of the direct draws and/or of the spawned children,
        or ``None`` when the fit drew nothing or ``noise_key`` is ``None``.
    """
    if noise_key is None:
        return None
    now = noise_fingerprint("", generator)
    drawn = tuple(key for key, key_now in zip(noise_key[:2], now[:2])
                  if noise_stream(key) != noise_stream(key_now))
    return drawn or None


def _plain_ints(value):
    """``value`` with every integer as a Python int (sequences as tuples); ``None`` kept."""
    if value is None:
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    return tuple(_plain_ints(item) for item in value)


def noise_stream(noise_key):
    """The digest of one fingerprint of :func:`noise_fingerprint` (after the owner), or ``None``."""
    return None if noise_key is None else noise_key.rsplit(":", 1)[-1]


def _owned_streams(noise_key):
    """``(owner, stream)`` of every fingerprint in ``noise_key`` (a str, a tuple of them, or None)."""
    keys = () if noise_key is None else (noise_key,) if isinstance(noise_key, str) else noise_key
    return [(key.rsplit(":", 1)[0], noise_stream(key)) for key in keys]


def _delta_from_log_keep(log_keep):
    """``1 - exp(log_keep)``, with ``+ 0.0`` so that an empty ledger reports 0, not -0."""
    return -math.expm1(log_keep) + 0.0


def _basic_total(costs):
    """Basic composition of ``(epsilon, delta)`` pairs: sum of epsilons, ``1 - prod(1 - delta)``."""
    epsilon = math.fsum(eps for eps, _ in costs)
    log_keep = math.fsum(math.log1p(-delta) for _, delta in costs)
    return epsilon, _delta_from_log_keep(log_keep)


def _filter_total(costs, slack):
    r"""The advanced filter's statistic of ``(epsilon, delta)`` pairs (Whitehouse et al. 2023).

    :math:`\sqrt{2\log(1/\tilde\delta)\sum_i\varepsilon_i^2} + \sum_i\varepsilon_i(e^{\varepsilon_i}-1)/2`
    and :math:`\tilde\delta + \sum_i\delta_i`, valid for privacy parameters
    chosen adaptively when every spend is checked against a fixed ceiling
    (a privacy filter). ``expm1`` keeps the drift exact for small epsilons;
    an epsilon so large that it overflows makes the statistic infinite.
    """
    epsilons = [eps for eps, _ in costs]
    try:
        drift = math.fsum(eps * math.expm1(eps) / 2.0 for eps in epsilons)
    except OverflowError:
        drift = math.inf
    spread = math.sqrt(2.0 * math.log(1.0 / slack) * math.fsum(eps * eps for eps in epsilons))
    return spread + drift, math.fsum([slack, *(delta for _, delta in costs)])


class BudgetAccountant:
    r"""A thread-safe ledger of privacy spends with a ceiling.

    Parameters
    ----------
    epsilon : float, default=inf
        Ceiling on the total epsilon.
    delta : float, default=1.0
        Ceiling on the total delta, in [0, 1].
    slack : float, default=0.0
        The :math:`\tilde\delta` of the advanced filter (Whitehouse et al.
        2023; see the module docstring). With ``slack=0`` only basic
        composition is used. With ``slack > 0`` (which needs a finite
        ``epsilon`` ceiling, the filter's target), ``total()`` reports the
        smaller of the basic and the filter's epsilon, with the delta
        ``slack + sum(delta_i)``, and a spend is accepted when that is within
        the ceiling.
    on_repeated_noise : {"warn", "raise"}, default="warn"
        What :meth:`check` and :meth:`reserve` do when a fit would draw the
        same noise as one already in the ledger or under way (the same noise
        stream, whatever the estimator class; see :func:`noise_fingerprint`):
        emit :class:`NoiseReuseWarning`, or raise :class:`NoiseReuseError`
        before any randomness is drawn.
    neighbouring : {None, "replace_one", "add_remove"}, default=None
        The neighbouring relation the ledger composes under. ``None``: the
        relation of its first spend, and a spend under another relation is
        refused (ValueError, before anything is spent). ``"replace_one"``: a
        spend proven under add/remove only is charged at
        :math:`(2\varepsilon, (1+e^{\varepsilon})\delta)` (group privacy).
        ``"add_remove"``: a spend proven under replace-one only is refused.
    privacy_unit : {None, "sample", "client"}, default=None
        The unit the ledger protects. ``None``: the unit of its first spend,
        and a spend for another unit is refused (ValueError, before anything
        is spent). ``"sample"``: a client-level spend is charged for one row
        (at its cost if it holds under replace-one, at
        :math:`(2\varepsilon, (1+e^{\varepsilon})\delta)` if under add/remove;
        module docstring, "Privacy units"). ``"client"``: a sample-level
        spend is refused.

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

    #: The process-wide default (below every ``with`` block), created on first use.
    _base_default = None
    _default_lock = threading.RLock()
    #: The ``with`` blocks (:class:`_Block`) of the current thread or task, innermost last.
    _context_stack = contextvars.ContextVar("skdpcluster_accountant_blocks", default=())
    #: The ``with`` blocks (:class:`_Block`) that some context of the process holds: a block is
    #: dropped from it once no context (of a thread, a task, or a copy) holds it any more.
    _open_blocks = weakref.WeakSet()

    #: Whether a copy made by unpickling may spend. Only the throw-away
    #: accountants of a search that was charged up front in the parent process
    #: (``skdpcluster.model_selection.fit_search_charged``) set this.
    _COPIES_MAY_SPEND = False

    def __init__(self, epsilon=float("inf"), delta=1.0, slack=0.0, *, on_repeated_noise="warn",
                 neighbouring=None, privacy_unit=None):
        self._configure(epsilon, delta, slack, on_repeated_noise, neighbouring, privacy_unit)
        self._detached = False

    def _configure(self, epsilon, delta, slack, on_repeated_noise, neighbouring, privacy_unit):
        """Validate and set the ceiling and options, with an empty ledger."""
        epsilon, _ = check_epsilon_delta(epsilon, 0.0, allow_infinite_epsilon=True)
        if isinstance(delta, bool) or not (isinstance(delta, (int, float)) and 0 <= delta <= 1):
            raise ValueError(f"delta ceiling must lie in [0, 1], got delta={delta!r}.")
        if isinstance(slack, bool) or not (isinstance(slack, (int, float)) and 0 <= slack < 1):
            raise ValueError(f"slack must lie in [0, 1), got slack={slack!r}.")
        if slack > delta:
            raise ValueError(f"slack={slack!r} cannot exceed the delta ceiling delta={delta!r}.")
        if slack > 0 and math.isinf(epsilon):
            raise ValueError(
                f"slack={slack!r} needs a finite epsilon ceiling: the advanced filter (Whitehouse "
                "et al. 2023) guarantees its target, the ceiling. Set epsilon=..., or slack=0.")
        if on_repeated_noise not in ("warn", "raise"):
            raise ValueError(
                "on_repeated_noise must be 'warn' or 'raise', got "
                f"on_repeated_noise={on_repeated_noise!r}."
            )
        self._epsilon = float(epsilon)
        self._delta = float(delta)
        self._slack = float(slack)
        self._on_repeated_noise = on_repeated_noise
        self._neighbouring = None if neighbouring is None else _check_neighbouring(neighbouring)
        self._privacy_unit = None if privacy_unit is None else _check_privacy_unit(privacy_unit)
        self._entries = []
        self._noise_keys = {}  # noise stream -> owner of the first fit that drew it
        self._reserved = {}  # noise stream -> [owner, number of fits under way]
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
        """float: the slack of the advanced filter."""
        return self._slack

    @property
    def on_repeated_noise(self):
        """str: ``"warn"`` or ``"raise"``, see the class parameters."""
        return self._on_repeated_noise

    @property
    def neighbouring(self):
        """str or None: the relation set at construction (``None``: that of the first spend)."""
        return self._neighbouring

    @property
    def privacy_unit(self):
        """str or None: the unit set at construction (``None``: that of the first spend)."""
        return self._privacy_unit

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
        relation = "" if self._neighbouring is None else f", {self._neighbouring}"
        relation += "" if self._privacy_unit is None else f", privacy_unit={self._privacy_unit!r}"
        return (
            f"BudgetAccountant(epsilon={self._epsilon!r}, delta={self._delta!r}, "
            f"slack={self._slack!r}{relation}; spent=({eps:.6g}, {delta:.6g}) in "
            f"{len(self._entries)} entries{detached})"
        )

    # -- composition ----------------------------------------------------------
    def _costs(self, entries):
        """Every entry's ``(epsilon, delta)`` for the ledger's unit and relation; ValueError if it has none.

        The unit is the accountant's ``privacy_unit``, or with ``None`` that
        of the first entry, and then every entry must state it; the relation
        likewise. The unit is converted before the relation
        (:meth:`LedgerEntry.group_cost`).
        """
        unit, held = self._terms(entries)
        for entry in entries:
            if self._privacy_unit is None and entry.privacy_unit != unit:
                raise ValueError(_MIXED_UNITS.format(
                    label=entry.label or "this spend", new=entry.privacy_unit, held=unit))
            if self._neighbouring is None and entry.neighbouring != held:
                raise ValueError(_MIXED_RELATIONS.format(
                    label=entry.label or "this spend", new=entry.neighbouring, held=held))
        return [entry.group_cost(held, unit) for entry in entries]

    def _terms(self, entries):
        """The unit and relation ``entries`` are composed for: the accountant's, else the first entry's."""
        first = entries[0] if entries else None
        unit = self._privacy_unit or (first.privacy_unit if first else DEFAULT_PRIVACY_UNIT)
        relation = self._neighbouring or (first.neighbouring if first else DEFAULT_NEIGHBOURING)
        return unit, relation

    def _compose(self, entries):
        """Basic composition; with ``slack > 0``, the smaller epsilon of basic and the filter, and the filter's delta.

        With ``slack > 0`` the delta is ``slack + sum(delta_i)`` whichever
        epsilon is smaller: the filter's guarantee fails with probability at
        most ``slack`` on top of the ``delta_i``, and since either rule may
        accept a spend, the slack is reserved from the delta ceiling for both.
        """
        costs = self._costs(entries)
        basic = _basic_total(costs)
        if self._slack == 0 or not entries:
            return basic
        advanced = _filter_total(costs, self._slack)
        return min(basic[0], advanced[0]), advanced[1]

    def total(self):
        """Total privacy spent, as ``(epsilon, delta)``, under the accountant's relation.

        Basic composition; with ``slack > 0``, the smaller of the basic and the
        advanced filter's epsilon (module docstring) and the delta
        ``slack + sum(delta_i)``. The guarantee of the filter is the ceiling.
        """
        with self._lock:
            return self._compose(self._entries)

    def remaining(self):
        """What is left under the ceiling, as ``(epsilon, delta)``.

        ``epsilon`` is the largest spend ``(epsilon, 0)`` for the ledger's
        unit and relation (the accountant's, or with ``None`` those of its
        spends) that :meth:`spend` accepts now, and ``delta`` the delta
        ceiling minus ``total()[1]``.
        Under basic composition (``slack=0``) the pair itself is accepted as
        one spend. With ``slack > 0`` each is spendable alone, and the
        epsilon left is found by bisection on the acceptance rule (the
        filter's statistic is not linear in a new spend).
        """
        with self._lock:
            eps, delta = self._compose(self._entries)
            delta_left = max(self._delta - delta, 0.0)
            if self._slack == 0:
                return max(self._epsilon - eps, 0.0), delta_left
            return self._largest_accepted_epsilon(), delta_left

    def _largest_accepted_epsilon(self):
        """The largest epsilon of a spend ``(epsilon, 0)`` that keeps the total within the ceiling.

        The spend is for the ledger's own unit and relation (:meth:`_terms`),
        at its face value (review R9 L1: a sample-level replace-one probe was
        refused by client-level and add/remove ledgers). Without the rounding
        tolerance of :meth:`_fits`, so that :meth:`spend` accepts it;
        acceptance is monotone in epsilon, so bisection finds it.
        """
        unit, relation = self._terms(self._entries)

        def accepted(epsilon):
            if epsilon == 0.0:
                return True
            probe = LedgerEntry(epsilon, 0.0, neighbouring=relation, privacy_unit=unit)
            eps, delta = self._compose([*self._entries, probe])
            return eps <= self._epsilon and delta <= self._delta

        low, high = 0.0, self._epsilon
        if accepted(high):
            return high
        for _ in range(200):  # to a relative 1e-12 of the ceiling: about 40 steps
            if high - low <= 1e-12 * self._epsilon:
                break
            middle = low + (high - low) / 2.0
            low, high = (middle, high) if accepted(middle) else (low, middle)
        return low

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
        new_total = self._compose([*self._entries, entry])  # ValueError for a relation it cannot compose
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
        for owner, stream in _owned_streams(noise_key):
            self._check_stream_locked(owner, stream)

    def _check_stream_locked(self, owner, stream):
        if stream in self._noise_keys:
            earlier = f"{self._noise_keys[stream]} was already charged to this accountant"
        elif stream in self._reserved:
            earlier = f"a fit of {self._reserved[stream][0]} is under way on this accountant"
        else:
            return
        message = (
            f"{earlier} with the same random_state (the same noise stream; for a Generator, "
            "an equal state, or an equal seed sequence and spawn counter, as in a copy of it), "
            f"so this fit of {owner} would draw exactly the same noise: the difference of the "
            "two releases would be free of noise and the accountant's composition would not hold. "
            "Use a different seed for every fit charged to one accountant, or random_state=None."
        )
        if self._on_repeated_noise == "raise":
            raise NoiseReuseError(message)
        warn_user(message, NoiseReuseWarning)

    @staticmethod
    def _entry(epsilon, delta, label, events, noise_key=None, neighbouring=DEFAULT_NEIGHBOURING,
               privacy_unit=DEFAULT_PRIVACY_UNIT):
        return LedgerEntry(epsilon, delta, "" if label is None else str(label), tuple(events), noise_key,
                           neighbouring, privacy_unit)

    def check(self, epsilon, delta=0.0, *, noise_key=None, neighbouring=DEFAULT_NEIGHBOURING,
              privacy_unit=DEFAULT_PRIVACY_UNIT):
        """Raise if spending ``(epsilon, delta)`` would exceed the ceiling; nothing is recorded.

        Parameters
        ----------
        epsilon, delta : float
            The guarantee a fit is about to spend.
        noise_key : str or tuple of str, default=None
            :func:`noise_fingerprint` of the fit's ``random_state`` (one
            fingerprint per source of noise), or the fingerprints of several
            streams (a search charged up front). If the ledger already holds
            one of those streams, or a fit on it is under way
            (:meth:`reserve`), warn (:class:`NoiseReuseWarning`) or raise
            (:class:`NoiseReuseError`) as ``on_repeated_noise`` says.
        neighbouring : {"replace_one", "add_remove"}, default="replace_one"
            The relation under which ``(epsilon, delta)`` holds.
        privacy_unit : {"sample", "client"}, default="sample"
            The unit for which ``(epsilon, delta)`` holds.

        Raises
        ------
        BudgetExceededError
            If the new total would exceed the ceiling.
        DetachedAccountantError
            If this accountant is a copy made by unpickling.
        NoiseReuseError
            With ``on_repeated_noise="raise"``, for a repeated noise stream.
        ValueError
            For a replace-one spend on an add/remove accountant, a spend whose
            relation or unit differs from the ledger's (with ``neighbouring``
            or ``privacy_unit`` None), or a sample-level spend on a
            client-level accountant.
        """
        entry = self._entry(epsilon, delta, None, (), noise_key, neighbouring, privacy_unit)
        with self._lock:
            self._check_locked(entry)
            self._check_noise_locked(noise_key)

    def reserve(self, epsilon, delta=0.0, *, noise_key=None, neighbouring=DEFAULT_NEIGHBOURING,
                privacy_unit=DEFAULT_PRIVACY_UNIT):
        """:meth:`check`, and mark the noise stream(s) as under way, atomically.

        Use it as a context manager around a fit: inside, :meth:`check` and
        :meth:`reserve` with the same stream see a repeat, so two concurrent
        fits with one seed cannot both pass. On exit the mark is removed; a
        fit that spent has its stream in the ledger by then, and a fit that
        ended before spending leaves the accountant as it was.

        Parameters and exceptions are those of :meth:`check`.

        Returns
        -------
        context manager
        """
        entry = self._entry(epsilon, delta, None, (), noise_key, neighbouring, privacy_unit)
        streams = _owned_streams(noise_key)
        with self._lock:
            self._check_locked(entry)
            self._check_noise_locked(noise_key)
            for owner, stream in streams:
                self._reserved.setdefault(stream, [owner, 0])[1] += 1
        return _Reservation(self, [stream for _, stream in streams])

    def _release(self, streams):
        with self._lock:
            for stream in streams:
                mark = self._reserved[stream]
                mark[1] -= 1
                if mark[1] == 0:
                    del self._reserved[stream]

    def spend(self, epsilon, delta=0.0, label=None, events=(), *, noise_key=None,
              neighbouring=DEFAULT_NEIGHBOURING, privacy_unit=DEFAULT_PRIVACY_UNIT):
        """Record a spend of ``(epsilon, delta)``, all or nothing.

        Parameters
        ----------
        epsilon, delta : float
            The guarantee to charge.
        label : str, default=None
            Who spent it.
        events : iterable of PrivacyEvent, default=()
            The releases behind the charge, kept for audit.
        noise_key : str or tuple of str, default=None
            The fingerprints of the noise the spend paid for (for a fit, those
            of the sources it drew from: :func:`drawn_noise_key`), kept so
            that :meth:`check` can notice a repeat. A repeat is recorded
            without complaint here: the spend comes after the noise was drawn,
            and it must not fail for that reason.
        neighbouring : {"replace_one", "add_remove"}, default="replace_one"
            The relation under which ``(epsilon, delta)`` holds; composed
            under the accountant's relation (see the class parameters).
        privacy_unit : {"sample", "client"}, default="sample"
            The unit for which ``(epsilon, delta)`` holds; composed for the
            accountant's unit (see the class parameters).

        Raises
        ------
        BudgetExceededError
            If the new total would exceed the ceiling; nothing is recorded.
        DetachedAccountantError
            If this accountant is a copy made by unpickling.
        ValueError
            As :meth:`check`; nothing is recorded.
        """
        entry = self._entry(epsilon, delta, label, events, noise_key, neighbouring, privacy_unit)
        with self._lock:
            self._check_locked(entry)
            self._entries.append(entry)
            self._record_streams(entry)

    def _record_streams(self, entry):
        """Remember the noise streams ``entry`` paid for, each with the owner that first drew it."""
        for owner, stream in _owned_streams(entry.noise_key):
            self._noise_keys.setdefault(stream, owner)

    # -- default accountant ------------------------------------------------------
    @classmethod
    def default(cls):
        """Return the default accountant of the current thread or task.

        Inside ``with acc:`` blocks of this thread (or asyncio task) the
        innermost ``acc`` is the default; outside them, the process-wide one
        (:meth:`set_default`; on first use, an unbounded accountant with
        ``neighbouring="replace_one"`` and ``privacy_unit="sample"``, which
        takes fits of either relation and unit and charges add/remove and
        client-level ones for one row, by group privacy where needed).

        Raises
        ------
        ValueError
            If this thread or task has no ``with`` block while another context
            holds one (another thread or task inside a block, or a copy of a
            context made inside one): the fit may be meant for that block's
            accountant (a worker thread of a threaded search, for example),
            which this thread cannot see. Pass ``accountant=`` explicitly.
        """
        blocks = cls._context_stack.get()
        if blocks:
            return blocks[-1].accountant
        with cls._default_lock:
            if BudgetAccountant._open_blocks:
                raise ValueError(
                    "no accountant= was given and this thread has no 'with accountant:' block, but "
                    "another thread is inside one: the spend may be meant for that block's "
                    "accountant, which is the default of its own thread only. Pass accountant= "
                    "explicitly (for a threaded search, on the estimator).")
            if BudgetAccountant._base_default is None:
                # Unbounded, under replace-one and for one row, so that fits of either relation
                # and either unit can share it.
                BudgetAccountant._base_default = BudgetAccountant(neighbouring="replace_one",
                                                                  privacy_unit="sample")
            return BudgetAccountant._base_default

    def set_default(self):
        """Make this accountant the process-wide default (below every ``with`` block); return it."""
        with self._default_lock:
            BudgetAccountant._base_default = self
        return self

    def __enter__(self):
        block = _Block(self)
        with self._default_lock:
            self._context_stack.set((*self._context_stack.get(), block))
            BudgetAccountant._open_blocks.add(block)
        return self

    def __exit__(self, *exc_info):
        """Close the innermost block of ``self`` in the current context (thread or task).

        Only the current context's stack changes. A copy of a context made
        inside the block (``asyncio.to_thread``, a task created in it,
        ``contextvars.copy_context``) that exits it leaves it open in the
        context it was copied from, which still counts it (review R1-6). A
        block is forgotten once no context holds it.

        With an exception propagating and no open block of ``self`` here,
        nothing is raised: the exception goes on unchanged (review R1-4), and
        the block stays open where it was entered.

        Raises
        ------
        ValueError
            If the current context has no open block of ``self`` and no
            exception is propagating: it was entered in another thread or task
            (an explicit ``__enter__`` there, or a ``with`` in a generator
            resumed here), whose default it stays until that context exits
            it or is gone.
        """
        with self._default_lock:
            blocks = list(self._context_stack.get())
            mine = [position for position, block in enumerate(blocks) if block.accountant is self]
            if not mine and exc_info[0] is not None:
                return False  # never replace the exception that is propagating
            if not mine:
                raise ValueError(
                    "BudgetAccountant.__exit__: this thread (or asyncio task) has no open 'with' "
                    "block of this accountant; it was entered in another thread or task, whose "
                    "default it is, and only that thread or task can exit it (it is forgotten when "
                    "no thread or task holds it any more). Use 'with accountant:' statements in "
                    "code that is not resumed in another thread, or pass accountant= to the "
                    "estimators.")
            # The other contexts holding the block keep it in _open_blocks.
            blocks.pop(mine[-1])
            self._context_stack.set(tuple(blocks))
        return False

    # -- scikit-learn, pickle and JSON ---------------------------------------------
    def __sklearn_clone__(self):
        """Return ``self``: clones of an estimator keep sharing this accountant."""
        return self

    _STATE_FIELDS = frozenset({"epsilon", "delta", "slack", "on_repeated_noise", "neighbouring",
                               "privacy_unit"})

    def __getstate__(self):
        with self._lock:
            return {
                "epsilon": self._epsilon,
                "delta": self._delta,
                "slack": self._slack,
                "on_repeated_noise": self._on_repeated_noise,
                "neighbouring": self._neighbouring,
                "privacy_unit": self._privacy_unit,
                "entries": list(self._entries),
            }

    def __setstate__(self, state):
        """Unpickle as a detached copy, validating every field as :meth:`from_json` does."""
        if not isinstance(state, dict):
            raise ValueError(
                f"a pickled BudgetAccountant must hold a dict, got {type(state).__name__}.")
        _check_keys(state, required={"epsilon", "delta", "slack", "entries"},
                    allowed=self._STATE_FIELDS | {"entries"}, what="a pickled BudgetAccountant")
        self._configure(state["epsilon"], state["delta"], state["slack"],
                        state.get("on_repeated_noise", "warn"),
                        state.get("neighbouring"), state.get("privacy_unit"))
        self._load_entries(state["entries"], unit_saved="privacy_unit" in state)
        self._detached = not self._COPIES_MAY_SPEND

    def _load_entries(self, entries, *, unit_saved=True):
        """Install a saved ledger after checking its entries and that its total is within the ceiling.

        An accountant saved before accountants recorded a unit
        (``unit_saved=False``) whose entries are for different units (a
        client-level federated fit beside sample-level ones) is loaded with
        ``privacy_unit="sample"``: it composed them all then, and one row is
        the only unit they all protect, so its total is that of the entries
        converted for one row (module docstring, "Privacy units"), rather than
        the sum of their own costs that it was then (review R9 M1).
        """
        if not (isinstance(entries, list) and all(isinstance(e, LedgerEntry) for e in entries)):
            raise ValueError("ledger must be a list of ledger entries.")
        if not unit_saved and len({entry.privacy_unit for entry in entries}) > 1:
            self._privacy_unit = "sample"
        try:
            total = self._compose(entries)
        except ValueError as exc:
            raise ValueError(f"the saved ledger cannot be composed: {exc}") from exc
        if not self._fits(total):
            raise ValueError(
                f"the saved ledger totals (epsilon={total[0]:.6g}, delta={total[1]:.6g}), over its "
                f"ceiling (epsilon={self._epsilon:.6g}, delta={self._delta:.6g}); it is corrupt or "
                "was edited, or (with slack > 0) it was saved by a version that composed with "
                "the advanced composition of fixed parameters, which an adaptive ledger cannot "
                "use: the filter composition reports it above its ceiling, or it was saved "
                "before ledgers recorded the privacy unit and charged a client-level add/remove "
                "fit at epsilon, which is 2 epsilon for one row."
            )
        self._entries = list(entries)
        self._noise_keys = {}
        for entry in entries:
            self._record_streams(entry)

    def to_json(self):
        """Serialise the ceiling, options and ledger to a JSON string."""
        with self._lock:
            data = {
                "epsilon": self._epsilon if math.isfinite(self._epsilon) else "inf",
                "delta": self._delta,
                "slack": self._slack,
                "on_repeated_noise": self._on_repeated_noise,
                "neighbouring": self._neighbouring,
                "privacy_unit": self._privacy_unit,
                "ledger": [entry.to_dict() for entry in self._entries],
            }
        return json.dumps(data)

    @classmethod
    def from_json(cls, text):
        r"""Rebuild an attached accountant from :meth:`to_json` output.

        Every field is validated as :meth:`spend` validates a spend (finite
        ``epsilon > 0`` and ``delta`` in [0, 1) for every entry and event),
        and the ledger's total must be within the ceiling. An entry without
        ``neighbouring`` (saved before the field existed) is loaded as
        ``"add_remove"`` when all its events state add/remove, else as
        ``"replace_one"``, the library's default relation, and an accountant
        without it as ``neighbouring=None`` (the relation of its entries).
        Likewise an entry without ``privacy_unit`` loads as ``"client"`` when
        one of its events states that unit in its ``details`` (or it is a
        failed ``FederatedPrivateKMeans`` step that does not say), else as
        ``"sample"``, and an accountant without it as ``privacy_unit=None``,
        or as ``privacy_unit="sample"`` if its entries are for different
        units: it composed them all then, and one row is the only unit they
        all protect, so this converts them rather than refusing a ledger
        whose total is known (a client-level add/remove entry is then charged
        by group privacy at :math:`(2\varepsilon, (1 + e^{\varepsilon})\delta)`,
        which may bring the total over the ceiling: ValueError).

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
                    allowed=cls._STATE_FIELDS | {"ledger"}, what="a saved accountant")
        epsilon = math.inf if data["epsilon"] == "inf" else data["epsilon"]
        accountant = cls(epsilon, data["delta"], data["slack"],
                         on_repeated_noise=data.get("on_repeated_noise", "warn"),
                         neighbouring=data.get("neighbouring"),
                         privacy_unit=data.get("privacy_unit"))
        if not isinstance(data["ledger"], list):
            raise ValueError(f"ledger must be a list, got ledger={data['ledger']!r}.")
        entries = []
        for position, entry in enumerate(data["ledger"]):
            try:
                entries.append(LedgerEntry.from_dict(entry))
            except ValueError as exc:
                raise ValueError(f"ledger[{position}]: {exc}") from exc
        accountant._load_entries(entries, unit_saved="privacy_unit" in data)
        return accountant


class _Block:
    """One open ``with accountant:`` block of ``accountant``.

    Compared by identity, so that two blocks of one accountant are two blocks.
    Weakly referenced by ``BudgetAccountant._open_blocks``: the contexts
    whose stacks hold it keep it alive.
    """

    __slots__ = ("accountant", "__weakref__")

    def __init__(self, accountant):
        self.accountant = accountant


class _Reservation:
    """What :meth:`BudgetAccountant.reserve` returns: releases the noise streams' marks on exit."""

    def __init__(self, accountant, streams):
        self._accountant, self._streams = accountant, streams

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self._accountant._release(self._streams)
        self._streams = []
        return False
