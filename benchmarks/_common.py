"""Shared helpers of the benchmarks: timing, memory, CSV, plots and tables."""

import csv
import functools
import statistics
import time
import tracemalloc
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"

__all__ = ["RESULTS", "measure", "plot_lines", "print_table", "result_path", "spread",
           "write_csv", "writes_results"]

#: Suffix of the results files' names while a benchmark runs (:func:`writes_results`):
#: ``"_full"`` in a ``--full`` run, else empty.
_suffix = ""


def writes_results(run):
    """Decorator of a benchmark's ``run(quick, ...)``: a ``--full`` run writes ``NAME_full.*``.

    Quick and full runs of a benchmark then never write the same file: the
    committed tables of a full protocol (hours) survive a quick run (minutes),
    and each is read back by the mode that wrote it (:func:`result_path`).
    """
    @functools.wraps(run)
    def wrapper(quick, *args, **kwargs):
        global _suffix
        previous, _suffix = _suffix, "" if quick else "_full"
        try:
            return run(quick, *args, **kwargs)
        finally:
            _suffix = previous
    return wrapper


def result_path(name, extension, quick=None):
    """``results/NAME.EXT``, or ``results/NAME_full.EXT`` for a ``--full`` run.

    ``quick=None``: the mode of the run in progress (quick outside any run).
    """
    suffix = _suffix if quick is None else ("" if quick else "_full")
    return RESULTS / f"{name}{suffix}.{extension}"


def measure(function, *args, **kwargs):
    """Run ``function`` once; return ``(result, wall seconds, peak traced MiB)``.

    Peak memory is what ``tracemalloc`` sees: Python and NumPy allocations
    (NumPy reports its buffers to tracemalloc), not compiled libraries' own.
    """
    tracemalloc.start()
    start = time.perf_counter()
    try:
        result = function(*args, **kwargs)
        seconds = time.perf_counter() - start
        peak = tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()
    return result, seconds, peak


def spread(values):
    """``(median, min, max)`` of a non-empty sequence."""
    values = list(values)
    return statistics.median(values), min(values), max(values)


def write_csv(name, rows):
    """Write ``rows`` (dicts with the same keys) to ``result_path(name, "csv")``; return the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = result_path(name, "csv")
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def plot_lines(name, rows, *, x, y, group, xlabel, ylabel, title, logx=False, logy=False,
               band=None):
    """One line per value of ``group``; ``band=(low_key, high_key)`` shades min-max. Returns the path or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"  (matplotlib not installed: no plot for {name}; pip install '.[bench]')")
        return None
    figure, axes = plt.subplots(figsize=(6.4, 4.2))
    for key in dict.fromkeys(row[group] for row in rows):
        series = sorted((row for row in rows if row[group] == key), key=lambda row: row[x])
        xs = [row[x] for row in series]
        axes.plot(xs, [row[y] for row in series], marker="o", label=str(key))
        if band:
            axes.fill_between(xs, [row[band[0]] for row in series], [row[band[1]] for row in series],
                              alpha=0.2)
    axes.set(xlabel=xlabel, ylabel=ylabel, title=title)
    if logx:
        axes.set_xscale("log")
    if logy:
        axes.set_yscale("log")
    axes.grid(True, alpha=0.3)
    axes.legend(title=group, fontsize="small")
    figure.tight_layout()
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = result_path(name, "png")
    figure.savefig(path, dpi=120)
    plt.close(figure)
    return path


def print_table(rows, columns=None):
    """Print ``rows`` as an aligned text table."""
    if not rows:
        return
    columns = columns or list(rows[0])

    def cell(value):
        if isinstance(value, float):
            return f"{value:.4g}"
        return str(value)

    widths = {c: max(len(c), *(len(cell(r.get(c, ""))) for r in rows)) for c in columns}
    print("  ".join(c.rjust(widths[c]) for c in columns))
    for row in rows:
        print("  ".join(cell(row.get(c, "")).rjust(widths[c]) for c in columns))
