"""Run diffprivlib's ``KMeans`` (DP-Lloyd) in its own virtual environment and return JSON results.

diffprivlib does not import under scikit-learn 1.9, so it cannot share the
benchmark process. :func:`run_diffprivlib_kmeans` saves the data as ``.npy``
files, runs this very file with the Python of a separate virtual environment
(``benchmarks/.venv-diffprivlib/``, created once by :func:`ensure_venv` with
``diffprivlib`` and ``scikit-learn<1.9``, and ignored by git through a
``.gitignore`` inside it) and reads back one JSON record per run: adjusted
Rand index against the labels given, k-means cost, fit time and the centres.

The worker half of this file (``python _diffprivlib.py --worker DIR``) uses
only the standard library at import time, NumPy, scikit-learn and diffprivlib
inside :func:`_worker_main`, so the same file serves both environments.

Example::

    from benchmarks._diffprivlib import run_diffprivlib_kmeans
    runs = run_diffprivlib_kmeans(X, 4, epsilon=1.0, bounds=(-40.0, 40.0),
                                  random_states=range(5), y=y)
    runs[0]["ari"], runs[0]["cost"], runs[0]["seconds"]
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

__all__ = ["VENV_DIR", "ensure_venv", "run_diffprivlib_kmeans"]

VENV_DIR = Path(__file__).resolve().parent / ".venv-diffprivlib"
#: What the environment holds; changing this list rebuilds it.
REQUIREMENTS = ("diffprivlib>=0.6,<0.7", "scikit-learn<1.9")
_MARKER = "skdpcluster-requirements.json"
_CHUNK_ROWS = 65536


def _venv_python(folder):
    return folder / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_venv(folder=VENV_DIR, *, quiet=True, requirements=REQUIREMENTS):
    """Create (once) the environment with ``requirements`` (diffprivlib's by default); return its Python.

    The environment is built in a temporary sibling folder and renamed into
    place when complete, so an interrupted build is never mistaken for a
    cached one; a ``.gitignore`` containing ``*`` keeps it out of git.
    """
    folder = Path(folder)
    marker = folder / _MARKER
    if marker.exists() and json.loads(marker.read_text()) == list(requirements):
        return _venv_python(folder)
    building = folder.with_name(f"{folder.name}.building-{os.getpid()}")
    shutil.rmtree(building, ignore_errors=True)
    venv.EnvBuilder(with_pip=True, clear=True).create(building)
    (building / ".gitignore").write_text("*\n")
    command = [str(_venv_python(building)), "-m", "pip", "install", "--disable-pip-version-check",
               *(["--quiet"] if quiet else []), *requirements]
    print(f"  creating {folder.name}: pip install {' '.join(requirements)} (once)", flush=True)
    subprocess.run(command, check=True)
    (building / _MARKER).write_text(json.dumps(list(requirements)))
    shutil.rmtree(folder, ignore_errors=True)
    building.rename(folder)
    return _venv_python(folder)


def run_diffprivlib_kmeans(X, n_clusters, *, epsilon, bounds, random_states, y=None,
                           timeout=3600):
    """Fit ``diffprivlib.models.KMeans`` once per seed, in the diffprivlib environment.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    n_clusters : int
    epsilon : float
        diffprivlib's pure epsilon (it has no delta).
    bounds : tuple
        diffprivlib's public ``bounds=(lower, upper)``, scalars or arrays of
        length ``n_features``. Pass the same public knowledge the private
        estimators get (for a ball of radius Lambda about c: ``(c - Lambda,
        c + Lambda)``).
    random_states : iterable of int
        One fit per seed.
    y : ndarray of shape (n_samples,), default=None
        Labels for the adjusted Rand index (``nan`` without them).
    timeout : float, default=3600
        Seconds the subprocess may take.

    Returns
    -------
    list of dict
        Per seed: ``seed``, ``ari`` (of ``predict(X)`` against ``y``),
        ``cost`` (k-means cost of the released centres on X), ``seconds``
        (the ``fit`` alone) and ``centers`` (list of lists).
    """
    import numpy as np

    lower, upper = bounds
    params = {"n_clusters": int(n_clusters), "epsilon": float(epsilon),
              "bounds": [np.broadcast_to(lower, X.shape[1]).tolist(),
                         np.broadcast_to(upper, X.shape[1]).tolist()],
              "random_states": [int(s) for s in random_states]}
    return run_worker(ensure_venv(), Path(__file__), X, y, params, timeout=timeout)


def run_worker(python, script, X, y, params, *, timeout, env=None):
    """Run ``python script --worker DIR`` on ``X``, ``y`` and ``params``; return its results.

    ``DIR`` (temporary) holds ``X.npy``, ``y.npy`` (when ``y`` is given) and
    ``params.json``; the worker writes ``results.json`` there. Shared by the
    anchors that run in environments of their own (this file and
    ``_google.py``).
    """
    import numpy as np

    with tempfile.TemporaryDirectory(prefix="anchor-") as folder:
        folder = Path(folder)
        np.save(folder / "X.npy", np.ascontiguousarray(X, dtype=np.float64))
        if y is not None:
            np.save(folder / "y.npy", np.asarray(y))
        (folder / "params.json").write_text(json.dumps(params))
        subprocess.run([str(python), str(Path(script).resolve()), "--worker", str(folder)],
                       check=True, timeout=timeout, env=env)
        return json.loads((folder / "results.json").read_text())


# ---------------------------------------------------------------------------
# Worker: runs under the diffprivlib environment
# ---------------------------------------------------------------------------


def kmeans_cost(np, X, centers):
    """k-means cost of ``centers`` on ``X`` in row chunks (``np``: the worker's NumPy)."""
    total = 0.0
    c_sq = (centers**2).sum(axis=1)
    for start in range(0, len(X), _CHUNK_ROWS):
        chunk = X[start:start + _CHUNK_ROWS]
        d2 = (chunk**2).sum(axis=1)[:, None] - 2.0 * chunk @ centers.T + c_sq[None, :]
        total += float(np.maximum(d2.min(axis=1), 0.0).sum())
    return total


def _worker_main(folder):
    import warnings

    import numpy as np
    from diffprivlib.models import KMeans
    from sklearn.metrics import adjusted_rand_score

    folder = Path(folder)
    params = json.loads((folder / "params.json").read_text())
    X = np.load(folder / "X.npy")
    y = np.load(folder / "y.npy") if (folder / "y.npy").exists() else None
    bounds = tuple(np.asarray(b, dtype=float) for b in params["bounds"])
    results = []
    for seed in params["random_states"]:
        model = KMeans(n_clusters=params["n_clusters"], epsilon=params["epsilon"],
                       bounds=bounds, random_state=seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            model.fit(X)
            seconds = time.perf_counter() - start
            labels = model.predict(X)
        centers = np.asarray(model.cluster_centers_, dtype=float)
        results.append({
            "seed": seed,
            "ari": float(adjusted_rand_score(y, labels)) if y is not None else float("nan"),
            "cost": kmeans_cost(np, X, centers),
            "seconds": seconds,
            "centers": centers.tolist(),
        })
    (folder / "results.json").write_text(json.dumps(results))


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        _worker_main(sys.argv[2])
    else:
        print(f"python {ensure_venv()}  # diffprivlib environment ready")
