"""``python -m skdpcluster.demo``: the library at work, end to end.

Fits every estimator on a built-in synthetic mixture and prints the privacy
spent, the accuracy against the truth and against non-private scikit-learn,
then shows the shared accountant and the mechanisms underneath. Run with
``--seed`` to change the randomness.
"""

import argparse

import time

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import adjusted_rand_score
from sklearn.mixture import GaussianMixture

from skdpcluster import (
    BudgetAccountant,
    BudgetExceededError,
    FederatedPrivateKMeans,
    KTupleClusterer,
    PrivateGaussianMixture,
    PrivateHighDimKMeans,
    PrivateStableKMeans,
    PrivateStableKMedian,
    SampleAggregateStableKMeans,
)
from skdpcluster.datasets import make_separated_mixture
from skdpcluster.local import LocalPrivateStableKMeans
from skdpcluster.mechanisms import (
    analytic_gaussian_sigma,
    classical_gaussian_sigma,
    exponential_mechanism,
    gaussian_mechanism,
    laplace_mechanism,
)


def _section(title):
    print(f"\n== {title} " + "=" * max(0, 70 - len(title)))


def _kmeans_cost(X, centers):
    return float(np.sum(np.min(((X[:, None, :] - centers[None]) ** 2).sum(axis=-1), axis=1)))


def report_fit(name, estimator, X, y, seconds, reference):
    """One line: what was released privately, its budget, ARI and k-means cost against scikit-learn."""
    spent = estimator.privacy_spent_
    budget = f"eps={spent['epsilon']:.3g} delta={spent['delta']:.2g}"
    if getattr(estimator, "status_", "success") != "success":
        print(f"{name:>22}: {budget}, private test failed: nothing released (status_="
              f"{estimator.status_!r}); the budget is spent either way")
        return
    ari = adjusted_rand_score(y, estimator.predict(X))
    cost_ratio = _kmeans_cost(X, estimator.cluster_centers_) / _kmeans_cost(X, reference.cluster_centers_)
    print(
        f"{name:>22}: private centres, {budget}  ARI={ari:.4f}  "
        f"cost/sklearn={cost_ratio:.4f}  fit {seconds:.2f} s"
    )


def demo_estimators(seed, accountant):
    """The private k-means estimators on a stable instance, then the paper's k-tuple setting."""
    demo_stable(seed, accountant)
    _section("k-tuple clustering of a separated mixture (k=2, d=1, means +-512, n=400 000)")
    X, y = make_separated_mixture(400_000, n_clusters=2, n_features=1, separation=512,
                                  random_state=seed)
    start = time.perf_counter()
    reference = KMeans(n_clusters=2, n_init=1, random_state=seed).fit(X)
    print(f"{'sklearn KMeans':>22}: non-private reference, fit {time.perf_counter() - start:.2f} s")
    # One seed per fit charged to the shared accountant: never the same noise twice.
    for offset, (name, method) in enumerate([("KTupleClusterer", "auto"),
                                             ("paper's NoisyCenters", "noisy_centers")], start=2):
        start = time.perf_counter()
        ktuple = KTupleClusterer(n_clusters=2, method=method, epsilon=1.0, delta=1e-6,
                                 accountant=accountant, random_state=seed + offset).fit(X)
        report_fit(name, ktuple, X, y, time.perf_counter() - start, reference)
    print(f"{'':>22}  (NoisyCenters, Cohen et al. Fig. 4, releases one tuple plus noise of sd ~ 0.16 x "
          "the centre gap: the partition is exact, the centres are not; the default 'located' "
          "method averages the tuples and refines on the rows)")


def demo_stable(seed, accountant):
    """Stable k-means / k-median, k-tuple and the general-purpose high-dimensional method on k=4, d=4."""
    _section("Private k-means of a stable instance (k=4, d=4, means 10 sd apart, n=200 000)")
    X, y = make_separated_mixture(200_000, n_clusters=4, n_features=4, separation=10 / 2**0.5,
                                  random_state=seed)
    start = time.perf_counter()
    reference = KMeans(n_clusters=4, n_init=10, random_state=seed).fit(X)
    print(f"{'sklearn KMeans':>22}: non-private reference, fit {time.perf_counter() - start:.2f} s")
    # One seed per fit on the shared accountant, whatever the class (seed + 1..3 are used below).
    for offset, (name, estimator) in enumerate([
        ("PrivateStableKMeans", PrivateStableKMeans(n_clusters=4)),
        ("PrivateStableKMedian", PrivateStableKMedian(n_clusters=4)),
        ("KTupleClusterer", KTupleClusterer(n_clusters=4)),
        ("PrivateHighDimKMeans", PrivateHighDimKMeans(n_clusters=4)),
    ], start=4):
        start = time.perf_counter()
        estimator.set_params(epsilon=1.0, delta=1e-6, data_radius=20.0, accountant=accountant,
                             random_state=seed + offset).fit(X)
        report_fit(name, estimator, X, y, time.perf_counter() - start, reference)
    start = time.perf_counter()
    default = PrivateStableKMeans(n_clusters=4, accountant=accountant, random_state=seed + 1).fit(X)
    report_fit("... no data_radius", default, X, y, time.perf_counter() - start, reference)
    print(f"{'':>22}  (without a public bound, 10% of the budget releases a private centre "
          f"and radius first: data_radius_={default.data_radius_:.1f})")


def demo_highdim(seed, accountant):
    """The general-purpose method where no easy-instance test can pass (Balcan et al. 2017)."""
    _section("No easy instance: 64 Gaussians in d=100, k=10, n=60 000 (PrivateHighDimKMeans)")
    rng = np.random.default_rng(seed)
    means = rng.uniform(-1.0, 1.0, size=(64, 100))
    X = means[rng.integers(64, size=60_000)] + 0.15 * rng.standard_normal((60_000, 100))
    start = time.perf_counter()
    reference = KMeans(n_clusters=10, n_init=1, random_state=seed).fit(X)
    base = time.perf_counter() - start
    print(f"{'sklearn KMeans':>22}: non-private k-means++, fit {base:.2f} s")
    # One seed per fit: two fits charged to one accountant must never draw the same noise.
    for offset, (name, params) in enumerate([
        ("pure eps-DP", {}), ("Gaussian sums", {"sum_mechanism": "gaussian", "delta": 1e-6}),
    ]):
        start = time.perf_counter()
        est = PrivateHighDimKMeans(n_clusters=10, epsilon=1.0, data_radius=8.0,
                                   accountant=accountant, random_state=seed + offset,
                                   **params).fit(X)
        seconds, spent = time.perf_counter() - start, est.privacy_spent_
        print(f"{name:>22}: eps={spent['epsilon']:.3g} delta={spent['delta']:.2g}  "
              f"cost/sklearn={-est.score(X) / reference.inertia_:.4f}  "
              f"fit {seconds:.2f} s ({seconds / base:.1f}x sklearn)")


def demo_mixture(seed, accountant):
    """Learn a separated 2-D Gaussian mixture privately, next to scikit-learn's GaussianMixture."""
    _section("Private Gaussian mixture (k=2, d=2, means +-512, weights 0.3/0.7, n=400 000)")
    X, _ = make_separated_mixture(400_000, n_clusters=2, n_features=2, separation=512,
                                  weights=[0.3, 0.7], random_state=seed)
    X_test, _ = make_separated_mixture(20_000, n_clusters=2, n_features=2, separation=512,
                                       weights=[0.3, 0.7], random_state=seed + 1)
    start = time.perf_counter()
    reference = GaussianMixture(n_components=2, random_state=seed).fit(X)
    print(f"{'sklearn GaussianMixture':>24}: non-private, fit {time.perf_counter() - start:.2f} s, "
          f"held-out log-likelihood {reference.score(X_test):.4f}")
    start = time.perf_counter()
    gm = PrivateGaussianMixture(n_components=2, epsilon=1.0, delta=1e-6, accountant=accountant,
                                random_state=seed).fit(X)
    seconds, spent = time.perf_counter() - start, gm.privacy_spent_
    if gm.status_ != "success":
        print(f"{'PrivateGaussianMixture':>24}: private test failed; spent eps={spent['epsilon']:.3g}")
        return
    print(f"{'PrivateGaussianMixture':>24}: eps={spent['epsilon']:.3g} delta={spent['delta']:.2g}, "
          f"fit {seconds:.2f} s, held-out log-likelihood {gm.score(X_test):.4f}")
    for j in np.argsort(gm.means_[:, 0]):
        mean = ", ".join(f"{v:.3f}" for v in gm.means_[j])
        print(f"{'':>24}  w={gm.weights_[j]:.4f}  mean=[{mean}]  "
              f"cov diag={np.round(np.diag(gm.covariances_[j]), 3)}")


def demo_federated(seed, accountant):
    """FedDP-KMeans: clients' rows, public out-of-distribution server rows, one noisy sum per round."""
    _section("Federated k-means with server-side data (FedDP-KMeans; 100 clients, k=5, d=20)")
    rng = np.random.default_rng(seed)
    means = rng.uniform(-4, 4, size=(5, 20))
    y = rng.integers(5, size=50_000)
    X = means[y] + rng.normal(size=(50_000, 20))
    clients = rng.integers(100, size=len(X))
    X_server = np.vstack([means + rng.normal(size=means.shape), rng.uniform(-6, 6, (50, 20))])
    reference = KMeans(n_clusters=5, n_init=1, random_state=seed).fit(X)
    start = time.perf_counter()
    fed = FederatedPrivateKMeans(n_clusters=5, epsilon=0.5, delta=1e-6, accountant=accountant,
                                 random_state=seed).fit(X, client_ids=clients, X_server=X_server)
    report_fit("FederatedPrivateKMeans", fed, X, y, time.perf_counter() - start, reference)


def demo_local(seed, accountant):
    """The local model (every user randomizes its own row) and sample-and-aggregate, at n = 1e6."""
    _section("Local model and sample-and-aggregate (k=4, d=4, means 10 sd apart, n=1 000 000)")
    X, y = make_separated_mixture(1_000_000, n_clusters=4, n_features=4, separation=10 / 2**0.5,
                                  random_state=seed)
    reference = KMeans(n_clusters=4, n_init=3, random_state=seed).fit(X)
    for offset, (name, estimator) in enumerate([
        ("LocalPrivateStableKMeans", LocalPrivateStableKMeans(n_clusters=4, epsilon=4.0)),
        ("SampleAggregate (eps=1)", SampleAggregateStableKMeans(n_clusters=4, epsilon=1.0)),
    ]):
        start = time.perf_counter()
        estimator.set_params(data_radius=20.0, accountant=accountant,
                             random_state=seed + offset).fit(X)  # one seed per fit
        report_fit(name, estimator, X, y, time.perf_counter() - start, reference)
    print(f"{'':>22}  local: eps=4 *per user*; 3 rounds (init, core, select), each user in one "
          "round")
    print(f"{'':>22}  sends one report. Noise grows like sqrt(n): far more rows than the central "
          "model.")


def demo_mechanisms(rng, accountant):
    """Release a count, a mean and an argmax on a small synthetic table."""
    _section("Mechanisms on a synthetic salary table (n = 10 000, values in [0, 200])")
    salaries = np.clip(rng.lognormal(mean=3.8, sigma=0.4, size=10_000), 0, 200)
    noisy_count, count_event = laplace_mechanism(
        salaries.size, sensitivity=1.0, epsilon=0.1, rng=rng, label="count"
    )
    # Mean over a public n: swap sensitivity 200 / n of the sum / n.
    noisy_mean, mean_event = gaussian_mechanism(
        salaries.mean(), sensitivity=200 / salaries.size, epsilon=0.3, delta=1e-6, rng=rng,
        label="mean",
    )
    bands = np.histogram(salaries, bins=[0, 25, 50, 75, 100, 200])[0]
    band, band_event = exponential_mechanism(
        bands.astype(float), epsilon=0.1, sensitivity=1.0, rng=rng, label="most common band"
    )
    for event, true, noisy in [
        (count_event, salaries.size, noisy_count),
        (mean_event, salaries.mean(), noisy_mean),
        (band_event, int(np.argmax(bands)), band),
    ]:
        accountant.spend(event.epsilon, event.delta, label=event.label, events=[event])
        print(
            f"{event.label:>18}: true {true:10.3f}  released {noisy:10.3f}  "
            f"({event.mechanism}, eps={event.epsilon:g}, delta={event.delta:g})"
        )
    sigma_a = analytic_gaussian_sigma(1.0, 0.5, 1e-6)
    sigma_c = classical_gaussian_sigma(1.0, 0.5, 1e-6)
    print(
        f"Gaussian noise at (eps=0.5, delta=1e-6): analytic sigma {sigma_a:.3f} vs classical "
        f"{sigma_c:.3f} ({100 * (1 - sigma_a / sigma_c):.0f}% less noise)"
    )


def demo_accountant(accountant):
    """Show the ledger, the total and a refused spend."""
    _section("Shared accountant")
    for entry in accountant.ledger:
        print(f"  {entry.label:>18}: eps={entry.epsilon:g}, delta={entry.delta:g}")
    eps, delta = accountant.total()
    eps_left, delta_left = accountant.remaining()
    print(f"  total spent: eps={eps:.4g}, delta={delta:.3g}; remaining eps={eps_left:.4g}, "
          f"delta={delta_left:.3g}")
    try:
        accountant.spend(1.0, 0.0, label="one query too many")
    except BudgetExceededError as error:
        print(f"  refused: {error}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    demo_estimators(args.seed, BudgetAccountant())
    demo_highdim(args.seed, BudgetAccountant())
    demo_mixture(args.seed, BudgetAccountant())
    demo_federated(args.seed, BudgetAccountant())
    demo_local(args.seed, BudgetAccountant())
    accountant = BudgetAccountant(epsilon=1.0, delta=1e-5)
    demo_mechanisms(rng, accountant)
    demo_accountant(accountant)


if __name__ == "__main__":
    main()
