"""skdpcluster benchmarks: accuracy, privacy cost and speed, side by side with the alternatives.

Run everything with ``python -m benchmarks --quick`` (minutes on 2 cores) or
``--full``. Every benchmark module ``bench_<name>.py`` defines
``run(quick: bool) -> list[dict]``: it writes ``benchmarks/results/<name>.csv``
(and PNG plots when matplotlib is installed) and returns its headline rows for
the summary table. Each module also runs on its own with
``python -m benchmarks.bench_<name> [--quick]``.
"""
