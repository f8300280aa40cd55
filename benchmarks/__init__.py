"""skdpcluster benchmarks: accuracy, privacy cost and speed, side by side with the alternatives.

Run everything with ``python -m benchmarks --quick`` (minutes on 2 cores) or
``--full``. Every benchmark module ``bench_<name>.py`` defines
``run(quick: bool) -> list[dict]``: it writes ``benchmarks/results/<name>.csv``
(and PNG plots when matplotlib is installed; ``<name>_full.csv`` and so on with
``--full``, see :func:`benchmarks._common.writes_results`) and returns its
headline rows for the summary table. Each module also runs on its own with
``python -m benchmarks.bench_<name> [--quick]``.
"""
