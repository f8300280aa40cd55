"""Run Google's DP LSH clustering in its own virtual environment and return JSON results.

Google's ``learning/clustering`` (github.com/google/differential-privacy) is
not on PyPI and pins ``numpy~=1.21`` (NumPy < 2), so it cannot share the
benchmark process. Point the environment variable ``SKDP_GOOGLE_CLUSTERING``
at a copy of it: the repository root, its ``learning`` folder or
``learning/clustering`` itself (:func:`locate` accepts all three).
:func:`run_google_clustering` saves the data as ``.npy`` files, runs this very
file with the Python of a separate virtual environment
(``benchmarks/.venv-google/``, created once by :func:`ensure_venv` with
NumPy < 2, SciPy, scikit-learn 1.5, absl-py and dp-accounting; ignored by git
through a ``.gitignore`` inside it), with ``learning`` on ``PYTHONPATH``, and
reads back one JSON record per run: adjusted Rand index against the labels
given, k-means cost, fit time and the centres.

Google's code takes a public radius about the origin (rows are clipped to
it) and draws all its randomness from the global ``np.random``; the worker
subtracts the public centre first and seeds ``np.random`` with each run's
seed, so runs are reproducible. Its ``result.labels`` and ``result.loss`` are
not private; the worker recomputes both from the released centres.

The worker half (``python _google.py --worker DIR``) uses only the standard
library at import time, so the same file serves both environments.

Example::

    from benchmarks._google import locate, run_google_clustering
    learning = locate()            # None when SKDP_GOOGLE_CLUSTERING is unset or wrong
    runs = run_google_clustering(X, 4, epsilon=1.0, delta=1e-6, center=c, radius=20.0,
                                 random_states=range(5), y=y, learning=learning)
"""

import json
import os
import sys
import time
from pathlib import Path

__all__ = ["ENV_VAR", "VENV_DIR", "ensure_venv", "locate", "run_google_clustering"]

ENV_VAR = "SKDP_GOOGLE_CLUSTERING"
VENV_DIR = Path(__file__).resolve().parent / ".venv-google"
#: What the environment holds (``learning/requirements.txt`` at b5b0286).
REQUIREMENTS = ("numpy<2", "scipy>=1.7,<1.14", "scikit-learn>=1.5,<1.6", "absl-py>=1.0",
                "dp-accounting>=0.4")


def locate(path=None):
    """The ``learning`` folder holding the ``clustering`` package, or ``None`` (reason printed).

    Parameters
    ----------
    path : str or Path, default=None
        Repository root, ``learning`` or ``learning/clustering``; ``None``
        reads the environment variable ``SKDP_GOOGLE_CLUSTERING``.
    """
    path = path if path is not None else os.environ.get(ENV_VAR)
    if not path:
        print(f"  Google's LSH clustering skipped: set {ENV_VAR} to a copy of "
              "google/differential-privacy (or its learning/clustering folder)")
        return None
    path = Path(path).expanduser().resolve()
    for learning in (path, path / "learning", path.parent):
        if (learning / "clustering" / "clustering_algorithm.py").is_file():
            return learning
    print(f"  Google's LSH clustering skipped: {ENV_VAR}={path} holds no "
          "learning/clustering/clustering_algorithm.py")
    return None


def ensure_venv(folder=VENV_DIR, *, quiet=True):
    """Create (once) the environment with Google's requirements; return its Python."""
    from benchmarks._diffprivlib import ensure_venv as ensure_any_venv

    return ensure_any_venv(folder, quiet=quiet, requirements=REQUIREMENTS)


def run_google_clustering(X, n_clusters, *, epsilon, delta, center, radius, random_states,
                          learning, y=None, timeout=3600):
    """Run ``clustering.private_lsh_clustering`` once per seed, in Google's environment.

    Parameters
    ----------
    X : ndarray of shape (n_samples, n_features)
    n_clusters : int
    epsilon, delta : float
        The target of Google's calibration.
    center : ndarray of shape (n_features,)
        Public centre, subtracted before the call (Google's ball is about the origin).
    radius : float
        Google's public radius (rows beyond it are clipped by Google's code).
    random_states : iterable of int
        One run per seed (``np.random.seed(seed)`` before it).
    learning : Path
        The folder returned by :func:`locate`.
    y : ndarray of shape (n_samples,), default=None
        Labels for the adjusted Rand index (``nan`` without them).
    timeout : float, default=3600
        Seconds the subprocess may take.

    Returns
    -------
    list of dict
        Per seed: ``seed``, ``ari``, ``cost`` (k-means cost of the released
        centres on X), ``seconds`` and ``centers`` (in X's coordinates).
    """
    import numpy as np

    from benchmarks._diffprivlib import run_worker

    params = {"n_clusters": int(n_clusters), "epsilon": float(epsilon),
              "delta": float(delta), "radius": float(radius),
              "center": np.broadcast_to(center, X.shape[1]).astype(float).tolist(),
              "random_states": [int(s) for s in random_states]}
    return run_worker(ensure_venv(), Path(__file__), X, y, params, timeout=timeout,
                      env={**os.environ, "PYTHONPATH": str(learning)})


# ---------------------------------------------------------------------------
# Worker: runs under Google's environment
# ---------------------------------------------------------------------------


def _worker_main(folder):
    import warnings

    import numpy as np
    from _diffprivlib import kmeans_cost  # this file's folder is on sys.path in the worker
    from absl import logging
    from clustering import clustering_algorithm, clustering_params
    from sklearn.metrics import adjusted_rand_score

    logging.set_verbosity(logging.ERROR)
    folder = Path(folder)
    params = json.loads((folder / "params.json").read_text())
    X = np.load(folder / "X.npy")
    y = np.load(folder / "y.npy") if (folder / "y.npy").exists() else None
    center = np.asarray(params["center"], dtype=float)
    data = clustering_params.Data(X - center, params["radius"])
    privacy = clustering_params.DifferentialPrivacyParam(params["epsilon"], params["delta"])
    results = []
    for seed in params["random_states"]:
        np.random.seed(seed)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            start = time.perf_counter()
            result = clustering_algorithm.private_lsh_clustering(params["n_clusters"], data,
                                                                 privacy)
            seconds = time.perf_counter() - start
        centers = np.asarray(result.centers, dtype=float) + center
        c_sq = (centers**2).sum(axis=1)
        labels = np.argmin(c_sq[None, :] - 2.0 * X @ centers.T, axis=1)
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
        learning = locate(sys.argv[1] if len(sys.argv) > 1 else None)
        print(f"python {ensure_venv()}  # Google environment ready; learning={learning}")
