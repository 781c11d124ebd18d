"""Does ``fitter="gd"`` at its defaults reach EM's optimum on small real data? (issue 14, part 2)

Protocol (fixed before the table below was produced; see "How it was chosen"):

- Data: scikit-learn's bundled sets (no download): iris (K = 3), wine (K = 3), breast cancer (K = 2) and digits
  reduced to 10 dimensions by a PCA fitted on the training split (K = 10); full covariance, raw units.
- Splits: ``train_test_split(test_size=0.3, random_state=seed)`` for seeds 0..4 (``--seeds``).
- gd: ``GaussianMixture(K, fitter="gd", n_init=3, random_state=seed)``, every other argument at its default.
- The reference, "EM's optimum": batch EM run to its fixed point (tol 1e-8, max_iter 10,000, no
  split-and-merge, ``reg_covar=1e-10``) from each of the three starts gd itself drew (recorded inside gd's fit),
  the best start by training likelihood kept, as ``n_init`` keeps it. Same starts, so a gap is optimisation,
  not start luck; reg_covar 1e-10 because gd maximises the exact likelihood, with no covariance floor, and on
  breast cancer the default floor 1e-6 exceeds the smallest covariance eigenvalues (~1e-7): EM's fixed point
  there is a regularised one (shown as "EM, reg 1e-6": gd is then *ahead* on training and behind on held-out).
- Also shown: EM at the library's defaults with ``n_init=3, random_state=seed, split_merge=0`` (the issue's
  reference: equal to scikit-learn's ``GaussianMixture(K, n_init=3)``), which stops at tol = 1e-3 on its lower
  bound and so short of its own optimum, and whose second and third starts differ from gd's (gd's first start
  seeds its shuffling generator from the same random state).
- Gaps, in nats per row, reference minus gd: held-out (mean log-likelihood of the held-out rows) and training.
  "EM polish gain": the training likelihood EM (tol 1e-8) still gains from gd's end: ~0 means gd ended at a
  fixed point of EM, i.e. a stationary point of the likelihood.
- Rule: pass when, on every split of every data set, held-out gap <= 0.01 and training gap <= 0.01 against
  EM's optimum (a negative gap is gd ahead). Reported: median and max over splits, gd's ``n_iter_`` and seconds.
- Different local optima: when |training gap| > 0.01 the two ended in different optima although they started
  from the same three points; the row is flagged ``other optimum`` (with the polish gain saying whether gd's
  end is stationary) and still counts against the rule when gd is the worse one. Nothing is dropped.
- Control that can fail: ``--old`` runs gd as it was before this change (``fit_gd``'s own defaults: one pass
  per epoch, one scalar scale, the last iterate), which must show the issue's shortfall in the same table.

Since gd has reg_covar's penalty (issue 14, third session; ``_gd._reg_covar_backward``): gd at its defaults
now climbs the same regularised objective as EM with ``reg_covar=1e-6``, whose stationary points are EM's fixed
points at that reg_covar, no longer the unfloored likelihood the rule's reference climbs. The rule is kept as it
was written (so breast cancer, where the 1e-6 binds, fails it by construction: gd is regularised, the reference
is not); the matched references are shown beside it, unchanged in definition: "EM, reg 1e-6" from gd's own
starts, and the issue's "EM at defaults". Added with it (information only, not in the rule): "EM polish gain,
reg 1e-6", the training likelihood EM at reg_covar = 1e-6 still gains from gd's end (~0: gd is stationary for
the objective it climbs).

Since issue 14's fourth session the estimator's gd stops at the first plateau after one learning-rate halving
(``lr_halvings=1`` in ``GradientDescent.schedule``; three before, and still three under ``--old``). The protocol,
the rule and the references are unchanged; docs/mixture.md shows the table under both schedules.

How it was chosen: exploratory runs (not kept) showed EM at tol 1e-3 stopping short of its optimum (gd then
"beats" EM on training and, on breast cancer, loses on held-out by over-fitting *more*), and that EM's starts
after the first are not gd's; hence EM's optimum from gd's own starts is the rule's reference.

    flock /tmp/implicit-em-heavy.lock .venv/bin/python benchmarks/gd_convergence.py            # new gd
    flock /tmp/implicit-em-heavy.lock .venv/bin/python benchmarks/gd_convergence.py --old      # the control

Results: benchmarks/results/gd_convergence.json (``--old``: gd_convergence_old.json) and a markdown table.
"""

import argparse
import json
import statistics
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

DATASETS = {"iris": 3, "wine": 3, "breast_cancer": 2, "digits_pca10": 10}
TOL = 0.01  # nats per row


def load(name: str, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The training and held-out rows of one split (digits: PCA to 10 dimensions fitted on the training rows)."""
    from sklearn import datasets
    from sklearn.decomposition import PCA
    from sklearn.model_selection import train_test_split

    loader = {
        "iris": datasets.load_iris,
        "wine": datasets.load_wine,
        "breast_cancer": datasets.load_breast_cancer,
        "digits_pca10": datasets.load_digits,
    }[name]
    x = loader().data.astype(np.float64)
    train, test = train_test_split(x, test_size=0.3, random_state=seed)
    if name == "digits_pca10":
        pca = PCA(10, random_state=0).fit(train)
        train, test = pca.transform(train), pca.transform(test)
    return train, test


def use_old_gd() -> None:
    """Make the estimator run gd as before this change: ``fit_gd`` with its own defaults (bitwise the old fit)."""
    from implicit_em.mixture._fitting import REGISTRY

    REGISTRY["gd"].schedule = {}  # type: ignore[attr-defined]


def fit_gd_recording_starts(train: np.ndarray, k: int, seed: int) -> tuple[Any, list[Any], float]:
    """gd at its defaults (n_init=3) and the initial parameters of each of its starts."""
    from implicit_em.mixture import GaussianMixture, _starts

    starts: list[Any] = []
    original = _starts.Starts.initial_params

    def recording(self: Any) -> Any:
        params = original(self)
        starts.append(params)
        return params

    _starts.Starts.initial_params = recording  # type: ignore[method-assign]
    try:
        t0 = time.perf_counter()
        gd = GaussianMixture(k, fitter="gd", n_init=3, random_state=seed).fit(train)
        seconds = time.perf_counter() - t0
    finally:
        _starts.Starts.initial_params = original  # type: ignore[method-assign]
    return gd, starts, seconds


def em_from(train: np.ndarray, k: int, weights: Any, means: Any, covariances: Any, reg_covar: float = 1e-10) -> Any:
    """Batch EM to its fixed point (tol 1e-8) from the given parameters, no split-and-merge."""
    from implicit_em.mixture import GaussianMixture

    return GaussianMixture(
        k,
        reg_covar=reg_covar,
        tol=1e-8,
        max_iter=10_000,
        split_merge=0,
        weights_init=np.asarray(weights, dtype=np.float64),
        means_init=np.asarray(means, dtype=np.float64),
        precisions_init=np.linalg.inv(np.asarray(covariances, dtype=np.float64)),
    ).fit(train)


def one_split(name: str, k: int, seed: int) -> dict[str, Any]:
    from implicit_em.mixture import GaussianMixture

    train, test = load(name, seed)
    gd, starts, seconds = fit_gd_recording_starts(train, k, seed)
    optima = [em_from(train, k, p.weights.numpy(), p.means.numpy(), p.covariances.numpy()) for p in starts]
    em_opt = max(optima, key=lambda m: m.score(train))
    floored = [em_from(train, k, p.weights.numpy(), p.means.numpy(), p.covariances.numpy(), 1e-6) for p in starts]
    em_reg = max(floored, key=lambda m: m.score(train))
    em_default = GaussianMixture(k, n_init=3, random_state=seed, split_merge=0).fit(train)
    polished = em_from(train, k, gd.weights_, gd.means_, gd.covariances_)
    polished_reg = em_from(train, k, gd.weights_, gd.means_, gd.covariances_, 1e-6)
    row: dict[str, Any] = {
        "dataset": name,
        "k": k,
        "seed": seed,
        "n_train": len(train),
        "gd": {"train": gd.score(train), "heldout": gd.score(test), "n_iter": int(gd.n_iter_), "seconds": seconds},
        "gd_converged": bool(gd.converged_),
        "em_optimum": {"train": em_opt.score(train), "heldout": em_opt.score(test), "n_iter": int(em_opt.n_iter_)},
        "em_default": {"train": em_default.score(train), "heldout": em_default.score(test)},
        "em_reg_1e-6": {"train": em_reg.score(train), "heldout": em_reg.score(test)},
        "em_polish_gain": polished.score(train) - gd.score(train),
        "em_polish_gain_reg_1e-6": polished_reg.score(train) - gd.score(train),
    }
    for ref in ("em_optimum", "em_default", "em_reg_1e-6"):
        row[f"heldout_gap_{ref}"] = row[ref]["heldout"] - row["gd"]["heldout"]
        row[f"train_gap_{ref}"] = row[ref]["train"] - row["gd"]["train"]
    gap_h, gap_t = row["heldout_gap_em_optimum"], row["train_gap_em_optimum"]
    row["under_optimised"] = row["em_polish_gain"] > TOL  # EM still climbs from gd's end: not stationary
    row["other_optimum"] = abs(gap_t) > TOL and not row["under_optimised"]  # both stationary, different optima
    row["passes"] = gap_h <= TOL and gap_t <= TOL
    return row


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in DATASETS:
        mine = [r for r in rows if r["dataset"] == name]
        if not mine:
            continue
        entry: dict[str, Any] = {"splits": len(mine), "passes": all(r["passes"] for r in mine)}
        for key in ("heldout_gap_em_optimum", "train_gap_em_optimum", "heldout_gap_em_default", "train_gap_em_default"):
            vals = [r[key] for r in mine]
            entry[key] = {"median": statistics.median(vals), "max": max(vals)}
        entry["em_polish_gain_max"] = max(r["em_polish_gain"] for r in mine)
        entry["em_polish_gain_reg_1e-6_max"] = max(r["em_polish_gain_reg_1e-6"] for r in mine)
        entry["gd_n_iter_median"] = statistics.median(r["gd"]["n_iter"] for r in mine)
        entry["gd_seconds_median"] = statistics.median(r["gd"]["seconds"] for r in mine)
        entry["other_optimum_splits"] = [r["seed"] for r in mine if r["other_optimum"]]
        entry["under_optimised_splits"] = [r["seed"] for r in mine if r["under_optimised"]]
        entry["heldout_gap_em_reg_1e-6"] = {
            "median": statistics.median(r["heldout_gap_em_reg_1e-6"] for r in mine),
            "max": max(r["heldout_gap_em_reg_1e-6"] for r in mine),
        }
        out[name] = entry
    out["passes"] = all(e["passes"] for e in out.values() if isinstance(e, dict))
    return out


def table(summary: dict[str, Any], label: str) -> str:
    head = (
        f"| {label} | held-out gap to EM's optimum (median / max) | training gap (median / max) | held-out gap "
        "to EM at defaults (median / max) | held-out gap to EM, reg 1e-6 (median / max) | EM polish gain (max) | "
        "EM polish gain, reg 1e-6 (max) | "
        "n_iter_ (median) | seconds (median) | other optimum (seeds) | under-optimised (seeds) | pass |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for name in DATASETS:
        e = summary.get(name)
        if e is None:
            continue
        h, t, d = e["heldout_gap_em_optimum"], e["train_gap_em_optimum"], e["heldout_gap_em_default"]
        g = e["heldout_gap_em_reg_1e-6"]
        lines.append(
            f"| {name} | {h['median']:+.4f} / {h['max']:+.4f} | {t['median']:+.4f} / {t['max']:+.4f} | "
            f"{d['median']:+.4f} / {d['max']:+.4f} | {g['median']:+.4f} / {g['max']:+.4f} | "
            f"{e['em_polish_gain_max']:.1e} | {e['em_polish_gain_reg_1e-6_max']:.1e} | "
            f"{e['gd_n_iter_median']:g} | {e['gd_seconds_median']:.2f} | "
            f"{e['other_optimum_splits'] or '-'} | {e['under_optimised_splits'] or '-'} | "
            f"{'yes' if e['passes'] else 'NO'} |"
        )
    return head + "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--datasets", default=",".join(DATASETS))
    p.add_argument("--old", action="store_true", help="gd as before this change (the control)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")  # ConvergenceWarning of the old gd, RegCovarWarning: the table says it
    if args.old:
        use_old_gd()
    rows = []
    for name in args.datasets.split(","):
        for seed in range(args.seeds):
            rows.append(one_split(name, DATASETS[name], seed))
            r = rows[-1]
            print(
                f"{name} seed {seed}: held-out gap {r['heldout_gap_em_optimum']:+.4f}, training gap "
                f"{r['train_gap_em_optimum']:+.4f}, polish {r['em_polish_gain']:.1e}, n_iter {r['gd']['n_iter']}, "
                f"{r['gd']['seconds']:.2f} s",
                flush=True,
            )
    summary = summarise(rows)
    label = "gd before (--old)" if args.old else "gd"
    name = "gd_convergence_old.json" if args.old else "gd_convergence.json"
    out = args.out or Path(__file__).parent / "results" / name
    config = {"seeds": args.seeds, "datasets": args.datasets, "old": args.old, "threads": args.threads, "tol": TOL}
    out.write_text(json.dumps({"config": config, "summary": summary, "rows": rows}, indent=1) + "\n")
    print(table(summary, label))
    print(f"rule (every split: both gaps <= {TOL}): {'PASS' if summary['passes'] else 'FAIL'}; wrote {out}")


if __name__ == "__main__":
    main()
