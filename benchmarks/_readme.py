"""Regenerate the "Results" section of README.rst from ``benchmarks/results``.

The section sits between the comment lines ``.. begin-results`` and
``.. end-results``; everything between them is replaced (notes kept by hand
go after ``.. end-results``). The headline table is
the utility comparison of the stable-k-means benchmark (our estimators against
diffprivlib's DP-Lloyd, relative to non-private scikit-learn KMeans), followed
by the fit time ratios of the scaling benchmark and one line per other
benchmark from the runner's summary. Times are quoted only as ratios to
scikit-learn's in the same run.
"""

import csv
import datetime
import subprocess
from pathlib import Path

from benchmarks._common import result_path

README = Path(__file__).resolve().parent.parent / "README.rst"
BEGIN, END = ".. begin-results", ".. end-results"
HEADLINE_COLUMNS = [
    ("method", "method"), ("n", "n"), ("share", "share of runs on target"), ("ari_min", "ARI (min)"),
    ("cost_ratio_median", "cost / sklearn (median)"), ("cost_ratio_max", "cost / sklearn (max)"),
]


def _cell(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if number.is_integer() and abs(number) < 1e12:
        return f"{int(number):,}"
    return f"{number:.6g}"


def _list_table(header, rows):
    lines = [".. list-table::", "   :header-rows: 1", ""]
    for row in [header, *rows]:
        lines.append("   * - " + "\n     - ".join(_cell(value) for value in row))
    return lines


#: Rows per other benchmark in the README's list (the CSV files have them all).
OTHER_ROWS_PER_BENCHMARK = 3


def _stable_rows(quick):
    path = result_path("stable_summary", "csv", quick)
    if not path.exists():
        return []
    with path.open() as handle:
        return list(csv.DictReader(handle))


def scaling_lines(quick=True):
    """Fit time ratios to ``KMeans(n_init=1)`` from ``scaling.csv`` (never absolute seconds)."""
    path = result_path("scaling", "csv", quick)
    if not path.exists():
        return []
    with path.open() as handle:
        rows = list(csv.DictReader(handle))
    lines = ["Fit time / scikit-learn ``KMeans(n_init=1)`` time, same process, median of 5 "
             "(``bench_scaling``, d = 10, k = 10):", ""]
    for name in dict.fromkeys(row["estimator"] for row in rows):
        ratios = ", ".join(f"{float(r['n_samples']):.0e}: {float(r['time_ratio']):.2f} x"
                           for r in rows if r["estimator"] == name)
        lines.append(f"* **{name}**: {ratios}")
    return lines + [""]


def headline_lines(rows):
    """The headline table (from ``stable_summary.csv``) as RST lines, or a note if it is missing."""
    if not rows:
        return ["(Run ``python -m benchmarks --only stable`` to produce the headline table.)"]
    header = [title for _, title in HEADLINE_COLUMNS]
    body = [[row.get(key, "") for key, _ in HEADLINE_COLUMNS] for row in rows]
    return _list_table(header, body)


def _commit():
    """The checkout's short commit hash (``"unknown"`` outside a git checkout)."""
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=README.parent,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def update_readme(summary, quick):
    """Rewrite the marked section of README.rst; ``summary`` is the runner's list of headline rows."""
    text = README.read_text()
    if BEGIN not in text or END not in text:
        print(f"  README.rst has no {BEGIN} / {END} markers; not updated")
        return
    today = datetime.date.today().isoformat()
    mode = "--quick" if quick else "--full"
    stable = _stable_rows(quick)
    runs = stable[0]["runs"] if stable else "?"
    lines = [
        BEGIN, "",
        f"Measured on {today} by ``python -m benchmarks {mode}`` at commit {_commit()} (2 cores).",
        "Private k-means of a well-separated mixture (k = 4, d = 4, unit-variance clusters",
        f"at least 10 standard deviations apart, epsilon = 1, delta = 1e-6, {runs} runs per row;",
        "``--full`` runs 20 and n = 10^6 too); the target is ARI >= 0.99 and k-means cost",
        "<= 1.01 x non-private scikit-learn ``KMeans``.",
        "``doc/benchmarks.rst`` explains every benchmark; all tables are in ``benchmarks/results/``.",
        "", *headline_lines(stable), "", *scaling_lines(quick),
    ]
    others = [row for row in summary if row.get("benchmark") != "stable"]
    if others:
        lines += ["Other headline numbers (first rows of each benchmark's summary):", ""]
        for name in dict.fromkeys(row["benchmark"] for row in others):
            for row in [r for r in others if r["benchmark"] == name][:OTHER_ROWS_PER_BENCHMARK]:
                details = ", ".join(f"{k}={_cell(v)}" for k, v in row.items() if k != "benchmark")
                lines.append(f"* **{name}**: {details}")
        lines.append("")
    curve = result_path("stable_curve_n", "png", quick)
    if curve.exists():
        lines += [f".. image:: benchmarks/results/{curve.name}",
                  "   :alt: ARI and cost ratio against n for the private estimators and DP-Lloyd", ""]
    lines.append(END)
    head, rest = text.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    README.write_text(head + "\n".join(lines) + tail)
    print(f"  updated the Results section of {README}")
