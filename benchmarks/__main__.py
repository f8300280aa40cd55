"""``python -m benchmarks [--quick | --full] [--only NAME ...]``: run every benchmark."""

import argparse
import importlib
import pkgutil
import time
from pathlib import Path

from benchmarks._common import RESULTS, print_table, write_csv
from benchmarks._readme import update_readme


def discover():
    """Names of the benchmark modules ``bench_<name>.py`` beside this file."""
    folder = Path(__file__).resolve().parent
    return sorted(m.name[len("bench_"):] for m in pkgutil.iter_modules([str(folder)])
                  if m.name.startswith("bench_"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes (default)")
    size.add_argument("--full", action="store_true", help="the full protocols (hours on 2 cores)")
    parser.add_argument("--only", nargs="+", choices=discover(), help="run only these benchmarks")
    args = parser.parse_args(argv)
    quick = not args.full
    summary = []
    for name in args.only or discover():
        module = importlib.import_module(f"benchmarks.bench_{name}")
        print(f"\n=== {name} ({'quick' if quick else 'full'}) ===")
        start = time.perf_counter()
        headline = module.run(quick=quick)
        print(f"  done in {time.perf_counter() - start:.1f} s")
        summary += [{"benchmark": name, **row} for row in headline]
    print(f"\n=== Summary (CSV and PNG files in {RESULTS}) ===")
    for name in dict.fromkeys(row["benchmark"] for row in summary):
        print_table([row for row in summary if row["benchmark"] == name])
        print()
    if summary:
        write_csv("summary", [{"benchmark": r["benchmark"], "headline": _flatten(r)} for r in summary])
    if not args.only:
        update_readme(summary, quick)


def _flatten(row):
    return "; ".join(f"{k}={v}" for k, v in row.items() if k != "benchmark")


if __name__ == "__main__":
    main()
