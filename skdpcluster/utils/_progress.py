"""Progress of long fits (``verbose > 0``): the phases of a fit, their timings, blocks done.

One helper for every estimator: :func:`fit_progress` opens a report around a
fit, and the code marks phase boundaries with :func:`phase` and long loops
with :func:`advance`; without an open report, or with ``verbose=0``, both do
nothing. Nested fits (a fallback, an initializer) open their own report with
their own ``verbose`` (0 by default), so their phases are not repeated.

**Only public values reach a message**: the estimator's class, the names of
the phases, counts the caller passes (integers, such as blocks done or rows,
which the library treats as public) and elapsed times. :func:`phase` and
:func:`advance` refuse anything else, so a data value cannot slip into a log
line. Messages go to the ``"skdpcluster"`` logger at level INFO when logging
is configured to show them, and to ``sys.stderr`` otherwise (as
scikit-learn's ``verbose`` prints).
"""

import contextlib
import contextvars
import logging
import sys
import time
from numbers import Integral

logger = logging.getLogger("skdpcluster")

_CURRENT = contextvars.ContextVar("skdpcluster_progress", default=None)
#: ``advance`` reports at most this often (seconds), plus the last step.
_ADVANCE_INTERVAL = 1.0


class _Report:
    """The open report of one fit: the current phase and its start time."""

    def __init__(self, owner):
        self.owner = owner
        self.started = time.perf_counter()
        self.phase = None
        self.phase_started = self.started
        self.last_advance = self.started

    def emit(self, text):
        message = f"[{self.owner}] {text}"
        if logger.isEnabledFor(logging.INFO) and logger.hasHandlers():
            logger.info(message)
        else:
            print(message, file=sys.stderr, flush=True)

    def end_phase(self, now):
        if self.phase is not None:
            self.emit(f"{self.phase}: done in {now - self.phase_started:.2f} s")


def _public_counts(counts):
    """``name=value`` text of the counts; integers and names only (no data value can pass)."""
    for name, value in counts.items():
        if isinstance(value, bool) or not isinstance(value, (Integral, str)):
            raise TypeError(
                f"progress messages take public counts (int) and names (str) only, got "
                f"{name}={type(value).__name__}."
            )
    return ", ".join(f"{name}={value}" for name, value in counts.items())


@contextlib.contextmanager
def fit_progress(estimator, **counts):
    """Report the phases of ``estimator``'s fit when its ``verbose`` is > 0.

    Parameters
    ----------
    estimator : estimator
        Its ``verbose`` parameter (0 when absent) turns the report on; its
        class name prefixes every message.
    **counts : int or str
        Public facts to print at the start (for example ``n_samples``).
    """
    report = _Report(type(estimator).__name__) if getattr(estimator, "verbose", 0) else None
    token = _CURRENT.set(report)
    if report is not None:
        report.emit(f"fit started ({_public_counts(counts)})" if counts else "fit started")
    try:
        yield
    finally:
        _CURRENT.reset(token)
        if report is not None:
            now = time.perf_counter()
            report.end_phase(now)
            report.emit(f"fit done in {now - report.started:.2f} s")


def phase(name, **counts):
    """End the current phase (with its time) and start ``name`` in the open report, if any."""
    report = _CURRENT.get()
    if report is None:
        return
    detail = _public_counts(counts)
    now = time.perf_counter()
    report.end_phase(now)
    report.phase, report.phase_started = name, now
    report.emit(f"{name}..." + (f" ({detail})" if detail else ""))


def advance(done, total, unit):
    """Report ``done`` of ``total`` ``unit`` in the current phase (at most once a second)."""
    report = _CURRENT.get()
    if report is None:
        return
    _public_counts({"done": done, "total": total, "unit": unit})
    now = time.perf_counter()
    if done < total and now - report.last_advance < _ADVANCE_INTERVAL:
        return
    report.last_advance = now
    report.emit(f"{report.phase or 'fit'}: {done}/{total} {unit} ({100 * done // max(total, 1)}%), "
                f"{now - report.phase_started:.1f} s")
