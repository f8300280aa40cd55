r"""Dask: a private fit on data that does not fit the workers' memory (issue #20).

What it measures
----------------
:class:`~skdpcluster.PrivateStableKMeans` (defaults: grid initializer, the
private bound ``data_radius=None``, epsilon = 1, delta = 1e-6) fitted on a
:class:`dask.array.Array` on a :class:`distributed.LocalCluster` of worker
*processes* with one thread and a ``memory_limit`` each, with 1 and then 2
workers; and dask-ml's non-private ``KMeans(n_clusters=10, max_iter=10)``
(``k-means||``) on the same cluster and data with 2 workers, where dask-ml is
installed (``max_iter=10`` and one cluster size only, to fit the time budget:
at 2·10^6 rows and 400 MiB per worker its default run took over 270 s and was
killed for memory).

* Data: n rows of d = 10 features, a mixture of k = 10 unit Gaussians at
  :math:`\pm 10 e_i` (i < 5), *generated chunk-wise* on the workers
  (``map_blocks``, a seed per chunk) and written to disk chunk by chunk
  (``dask.array.to_npy_stack`` in a temporary folder), then read back
  memory-mapped (``from_npy_stack``) by every pass: the data is never held
  whole anywhere. ``--quick`` (the default) n = 1.2·10^7 (0.96 GB = 916 MiB of
  float64, chunks of 10^5 rows) against 600 MiB per worker (an idle worker
  process with the library imported already holds about 280 MiB of it, so
  the data is larger than one worker's limit and than what two workers have
  left; at 450 MiB a worker went over 95 % of its limit and was restarted), ``--full`` n = 2·10^8
  (16 GB) against 1 GiB per worker. The quick size is what finishes in
  about 20 minutes on 2 cores shared with other users (at a load average
  of 20, a worker process got about 5-10 % of a core; regenerating the
  rows at every pass instead of reading them was too slow for that).
* Fit time: wall seconds of ``fit`` (the private fit's validation pass
  included).
* Workers are never paused (``distributed.worker.memory.pause: False``:
  the memory-mapped chunks count in the RSS, and pausing at 80 % of the
  limit stalled the fit), but a worker above 95 % of its limit is still
  restarted, which fails a fit (``KilledWorker``, reported in ``status``).
* Peak memory per worker: the largest resident set size (RSS) of each
  worker process, sampled every 0.5 s during the fit (``Client.run`` of
  ``psutil``), baseline included; ``idle_worker_MiB`` is that baseline
  (a worker with Python, NumPy, scikit-learn, distributed and skdpcluster
  imported, before the fit).
* Quality on a subsample: the first 10^6 rows, computed in memory: the
  k-means cost per row of the Dask fit's centres, of an in-memory
  ``PrivateStableKMeans`` fit on the subsample alone (same parameters), of
  dask-ml's centres, each divided by the cost of scikit-learn's
  ``KMeans(n_clusters=10, n_init=1)`` fitted on the subsample.

Outputs: ``dask.csv`` (one row per method and number of workers, with the
load average of the machine) and ``dask.png`` (fit time against workers).
The machine is shared (2 cores for several users): absolute seconds are
noisy; the scaling from 1 to 2 workers is bounded by the cores the others
leave.

Usage::

    python -m benchmarks --only dask            # quick: n = 2e7 (about 10-15 minutes)
    python -m benchmarks.bench_dask --full      # n = 2e8
"""

import argparse
import logging
import os
import tempfile
import threading
import time
import warnings

import numpy as np
from sklearn.cluster import KMeans

from benchmarks._common import plot_lines, print_table, write_csv, writes_results
from skdpcluster import BudgetAccountant, PrivateStableKMeans

N_FEATURES, N_CLUSTERS, SEPARATION, SEED = 10, 10, 10.0, 0
MEANS = SEPARATION * np.vstack([np.eye(N_FEATURES)[: N_CLUSTERS // 2],
                                -np.eye(N_FEATURES)[: N_CLUSTERS // 2]])
SETTINGS = {
    True: {"n_rows": 12_000_000, "chunk_rows": 100_000, "memory_limit": "600MiB"},
    False: {"n_rows": 200_000_000, "chunk_rows": 500_000, "memory_limit": "1GiB"},
}
SUBSAMPLE_ROWS = 1_000_000
WORKERS = (1, 2)


def _block(block_id=None, *, chunk_rows):
    """Rows of chunk ``block_id``: a seeded draw, the same at every pass."""
    rng = np.random.default_rng([SEED, block_id[0]])
    labels = rng.integers(N_CLUSTERS, size=chunk_rows)
    return MEANS[labels] + rng.standard_normal((chunk_rows, N_FEATURES))


def chunked_mixture(n_rows, chunk_rows):
    """The mixture as a lazy Dask array generated chunk by chunk (``n_rows`` a multiple)."""
    import dask.array as da

    n_chunks = n_rows // chunk_rows
    return da.map_blocks(_block, chunk_rows=chunk_rows, dtype=float,
                         chunks=((chunk_rows,) * n_chunks, (N_FEATURES,)))


def mixture_on_disk(setting, folder):
    """Generate the mixture chunk by chunk into ``folder``; the memory-mapped Dask array."""
    import dask.array as da

    da.to_npy_stack(folder, chunked_mixture(setting["n_rows"], setting["chunk_rows"]), axis=0)
    return da.from_npy_stack(folder, mmap_mode="r")


def kmeans_cost(X, centers):
    """k-means cost per row of ``X`` against ``centers``."""
    sq = (np.einsum("ij,ij->i", X, X)[:, None] - 2 * X @ centers.T
          + np.einsum("ij,ij->i", centers, centers))
    return float(np.maximum(sq.min(axis=1), 0).mean())


def _worker_rss():
    import psutil

    return psutil.Process().memory_info().rss


class PeakMemory:
    """Samples every worker's RSS in a background thread; ``peaks`` in MiB per worker."""

    def __init__(self, client, interval=0.5):
        self.client, self.interval = client, interval
        self.peaks, self._stop = {}, threading.Event()

    def _sample(self):
        while not self._stop.is_set():
            try:
                for worker, rss in self.client.run(_worker_rss).items():
                    self.peaks[worker] = max(self.peaks.get(worker, 0), rss / 2**20)
            except Exception:  # noqa: BLE001 - a worker restarting; sample again
                pass
            self._stop.wait(self.interval)

    def __enter__(self):
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def _private_fit(X):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fitted = PrivateStableKMeans(N_CLUSTERS, random_state=SEED,
                                     accountant=BudgetAccountant(1.0, 1e-6)).fit(X)
    if fitted.status_ == "failure":  # e.g. a worker killed mid-pass: charged, nothing released
        raise RuntimeError("the private step failed (status_='failure')")
    return fitted.cluster_centers_


def _dask_ml_fit(X):
    from dask_ml.cluster import KMeans as DaskKMeans

    return DaskKMeans(n_clusters=N_CLUSTERS, max_iter=10,
                      random_state=SEED).fit(X).cluster_centers_


def _methods(n_workers):
    methods = {"PrivateStableKMeans": _private_fit}
    if n_workers != WORKERS[-1]:
        return methods
    try:
        import dask_ml  # noqa: F401

        methods["dask_ml.KMeans (non-private)"] = _dask_ml_fit
    except ImportError:
        print("  (dask-ml not installed: no comparison)")
    return methods


def _on_cluster(n_workers, setting, methods, folder):
    """Fit every method on a fresh LocalCluster of ``n_workers`` processes; rows and centres."""
    import dask
    from distributed import Client, LocalCluster

    rows, centers = [], {}
    # The memory-mapped chunks count in a worker's RSS: pausing a worker at 80 % of its limit
    # (distributed's default) stalled the fit for minutes; the limit itself stays enforced.
    with dask.config.set({"distributed.worker.memory.pause": False}), LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True,
                      memory_limit=setting["memory_limit"], dashboard_address=None,
                      silence_logs=logging.ERROR) as cluster, \
            Client(cluster) as client:
        if not os.path.exists(os.path.join(folder, "info")):
            start = time.perf_counter()
            mixture_on_disk(setting, folder)
            print(f"  data written chunk-wise to disk in {time.perf_counter() - start:.1f} s")
        import dask.array as da

        X = da.from_npy_stack(folder, mmap_mode="r")
        idle = max(client.run(_worker_rss).values()) / 2**20
        for name, fit in methods.items():
            with PeakMemory(client) as memory:
                start = time.perf_counter()
                try:
                    centers[name], status = fit(X), "ok"
                except Exception as error:  # noqa: BLE001 - reported in the table
                    centers[name], status = None, f"failed: {type(error).__name__}: {error}"[:80]
                seconds = time.perf_counter() - start
            peaks = sorted(memory.peaks.values())
            rows.append({"method": name, "workers": n_workers, "n_rows": setting["n_rows"],
                         "data_GB": round(setting["n_rows"] * N_FEATURES * 8 / 1e9, 2),
                         "memory_limit": setting["memory_limit"], "fit_s": round(seconds, 1),
                         "peak_worker_MiB": round(max(peaks), 0) if peaks else float("nan"),
                         "idle_worker_MiB": round(idle, 0),
                         "status": status, "load_avg": round(os.getloadavg()[0], 2)})
            print(f"  {name}, {n_workers} worker(s): {seconds:.1f} s, peak worker RSS "
                  f"{rows[-1]['peak_worker_MiB']} MiB, {status}")
    return rows, centers


def _quality(setting, centers_by_method):
    """Cost per row on the in-memory subsample, relative to scikit-learn's KMeans on it."""
    chunk_rows = setting["chunk_rows"]
    subsample = np.vstack([_block((i, 0), chunk_rows=chunk_rows)
                           for i in range(max(1, SUBSAMPLE_ROWS // chunk_rows))])
    reference = KMeans(N_CLUSTERS, n_init=1, random_state=SEED).fit(subsample).cluster_centers_
    base = kmeans_cost(subsample, reference)
    centers = {**centers_by_method,
               "PrivateStableKMeans in memory (subsample)": _private_fit(subsample)}
    return {name: (float("nan") if c is None else round(kmeans_cost(subsample, c) / base, 4))
            for name, c in centers.items()}


@writes_results
def run(quick=True):
    setting = SETTINGS[quick]
    rows, last_centers = [], {}
    with tempfile.TemporaryDirectory(prefix="skdp-bench-dask-") as folder:
        for n_workers in WORKERS:
            cluster_rows, last_centers = _on_cluster(n_workers, setting, _methods(n_workers),
                                                     os.path.join(folder, "X"))
            rows += cluster_rows
    quality = _quality(setting, last_centers)
    for row in rows:
        row["cost_vs_sklearn_subsample"] = quality[row["method"]]
    rows.append({"method": "PrivateStableKMeans in memory (subsample)", "workers": 0,
                 "n_rows": SUBSAMPLE_ROWS,
                 "data_GB": round(SUBSAMPLE_ROWS * N_FEATURES * 8 / 1e9, 2),
                 "memory_limit": "", "fit_s": float("nan"), "peak_worker_MiB": float("nan"),
                 "idle_worker_MiB": float("nan"),
                 "status": "ok", "load_avg": round(os.getloadavg()[0], 2),
                 "cost_vs_sklearn_subsample": quality["PrivateStableKMeans in memory (subsample)"]})
    write_csv("dask", rows)
    plot_lines("dask", [r for r in rows if r["workers"]], x="workers", y="fit_s", group="method",
               xlabel="worker processes (1 thread each)", ylabel="fit time (s)",
               title=f"Fit on {setting['n_rows']:.0e} x {N_FEATURES} rows generated chunk-wise, "
                     f"{setting['memory_limit']} per worker")
    print_table(rows)
    private = [r for r in rows if r["method"] == "PrivateStableKMeans" and r["workers"]]
    return [{"method": r["method"], "workers": r["workers"], "n_rows": r["n_rows"],
             "fit_s": r["fit_s"], "peak_worker_MiB": r["peak_worker_MiB"],
             "cost_vs_sklearn": r["cost_vs_sklearn_subsample"]} for r in private]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--full", action="store_true")
    run(quick=not parser.parse_args().full)
