r"""The ablation arms' numbers declared and described: the metrics of :func:`~.ablation_arms.summarise`,
:func:`~.ablation_arms.manifold_summary` and the per-replicate records, each with its unit and label (where they are
measured, so the report never guesses), and the sentences that describe one setting's arms.

Keys: ``<task>_<name>_<quantity>`` (means over replicates), ``..._sd`` (sample sds), ``..._per_seed`` (one entry per
replicate); task one of ``bijection``, ``sticky``, ``onehead``; name ``init`` (the random init), an arm ``A``-``D``,
``shuffled`` (the other-window-label control) or ``init_spread`` (the extra random inits).

:func:`put_validation` validates each task's signature measures on the models the ablation trains (the audit's
rule: a measure that summarises a model must rank models by what they infer before it decides): over every
replicate's random init and arms A-D (and the sticky testbed's other-window-label models), Spearman's ρ of the
measure with −KL, and the highest KL, in tracking bars (``learned_fraction`` x the replicate's no-context KL), at
which a model reads aligned (the bar the task's signature criteria use). The statistics and their bars are
``sticky_manifold``'s (:func:`~.manifold_validation.validity`, :class:`~.manifold_validation.Validation`).
"""

from typing import Any

from implicit_em.audit.metrics import Metrics
from implicit_em.audit.testbeds.ablation_arms import ARMS, MEASURES
from implicit_em.audit.testbeds.manifold_validation import validity

__all__ = [
    "LABELS",
    "NAME_LABEL",
    "QUANTITY",
    "TASK_LABEL",
    "describe",
    "manifold_line",
    "put_manifold",
    "put_per_seed",
    "put_summary",
    "put_validation",
]

ONEHEAD = "onehead"
TASKS = ("bijection", "sticky")
LABELS = {"A": "A exact", "B": "B zero", "C": "C no baseline", "D": "D permuted"}

TASK_LABEL = {"bijection": "bijection task", "sticky": "sticky testbed", ONEHEAD: "one-head sticky setting"}
NAME_LABEL = {"init": "random init", **{a: f"arm {a}" for a in ARMS}, "shuffled": "other-window-label control",
              "init_spread": "extra random inits"}  # fmt: skip
QUANTITY = {
    "kl": ("held-out KL(Bayes ‖ model)", "bits"),
    "pc1": ("PC1 share", "fraction"),
    "pc12": ("PC1+PC2 share", "fraction"),
    "participation_ratio": ("participation ratio", "components"),
    "spearman_abs": ("|Spearman ρ| of PC1 with the Bayes entropy", "correlation"),
    "rho": ("|Spearman ρ| of PC1 with the Bayes entropy", "correlation"),
    "readout": ("context read-out, mean cos² to span(μ)", "mean cos²"),
    "value": ("value PCs, mean cos² to span(μ)", "mean cos²"),
    "final_loss": ("final training loss", "nats"),
    "plateau_drop": ("last-fifth held-out KL drop", "bits"),
    "plateau_change": ("relative last-fifth held-out KL drop", "relative"),
    "kl_history": ("held-out KL curve", "bits"),
}


def put_summary(m: Metrics, t: str, res: dict[str, float]) -> None:
    """The keys of :func:`summarise` under ``<task>_``: means and sds over replicates, ratios, gate numbers."""
    task = TASK_LABEL[t]
    m.put(f"{t}_no_context_kl", res["no_context_kl"], "bits", f"{task}: no-context predictor's KL (mean)")
    for name in ("init", *ARMS):
        for q in ("kl", "pc1", "pc12", "participation_ratio", "spearman_abs"):
            words, unit = QUANTITY[q]
            m.put(f"{t}_{name}_{q}", res[f"{name}_{q}"], unit, f"{task}, {NAME_LABEL[name]}: {words} (mean)")
            m.put(f"{t}_{name}_{q}_sd", res[f"{name}_{q}_sd"], unit, f"{task}, {NAME_LABEL[name]}: {words} (sd)")
    for arm in ("B", "C", "D"):
        m.put(f"{t}_{arm}_over_A_kl", res[f"{arm}_over_A_kl"], "ratio", f"{task}: KL_{arm} / KL_A (means)")
        m.put(f"{t}_{arm}_qk_change", res[f"{arm}_qk_change"], "absolute", f"{task}: arm {arm}'s max |Δ W_Q, W_K|")
    if "A_track_ratio_max" in res:
        m.put(f"{t}_A_track_ratio_max", res["A_track_ratio_max"], "ratio",
              f"{task}: worst replicate's KL_A / no-context KL (tracking gate)")  # fmt: skip
        m.put(f"{t}_A_plateau_drop_max", res["A_plateau_drop_max"], "bits",
              f"{task}: worst replicate's last-fifth KL drop of arm A")  # fmt: skip
        m.put(f"{t}_A_plateau_in_bars_max", res["A_plateau_in_bars_max"], "ratio",
              f"{task}: worst replicate's last-fifth KL drop of arm A / plateau allowance (gate)")  # fmt: skip
        m.put(f"{t}_A_plateau_change_max", res["A_plateau_change_max"], "relative",
              f"{task}: worst replicate's relative last-fifth KL drop of arm A")  # fmt: skip


def put_manifold(m: Metrics, res: dict[str, float], checks: dict[str, float]) -> None:
    """The keys of :func:`manifold_summary` and of the read-out's identities, under ``sticky_``."""
    m.put("sticky_chance", res["chance"], "mean cos²", "sticky testbed: a random subspace's mean cos² (chance)")
    m.put("sticky_aligned_threshold", res["aligned_threshold"], "mean cos²", "sticky testbed: the aligned bar")
    m.put("sticky_n_shuffled", res["n_shuffled"], "count", "sticky testbed: other-window-label control models")
    for x in MEASURES:
        words = QUANTITY[x][0]
        for name in ("init", *ARMS, "shuffled"):
            for sfx, what in (("", "mean"), ("_sd", "sd")):
                m.put(f"sticky_{name}_{x}{sfx}", res[f"{name}_{x}{sfx}"], "mean cos²",
                      f"sticky testbed, {NAME_LABEL[name]}: {words} ({what})")  # fmt: skip
        for sfx in ("mean", "sd"):
            m.put(f"sticky_init_spread_{x}_{sfx}", res[f"init_spread_{x}_{sfx}"], "mean cos²",
                  f"sticky testbed, extra random inits: {words} ({sfx})")  # fmt: skip
        for arm in ARMS:
            for sfx, what in (("", "mean"), ("_sd", "sd")):
                m.put(f"sticky_{arm}_{x}_gain{sfx}", res[f"{arm}_{x}_gain{sfx}"], "mean cos²",
                      f"sticky testbed, arm {arm}: {words}, gain over the replicate's init ({what})")  # fmt: skip
    planted = {"planted_in": "planted model reading span(μ)", "planted_out": "planted model reading its complement"}
    for key, words in planted.items():
        for x in MEASURES:
            m.put(f"sticky_{key}_{x}", checks[f"{key}_{x}"], "mean cos²", f"sticky testbed, {words}: "
                  f"{QUANTITY[x][0]} (identity)")  # fmt: skip
    m.put("sticky_bayes_readout", checks["bayes_readout"], "mean cos²",
          "sticky testbed, the exact Bayes filter: context read-out, mean cos² to span(μ) (identity)")  # fmt: skip


def put_per_seed(m: Metrics, runs: dict[str, Any], floors: dict[str, list[float]], sticky: list[dict]) -> None:
    """Per-replicate lists (one entry per replicate, in order)."""
    for x in MEASURES:
        for name in ("init", *ARMS):
            m.put(f"sticky_{name}_{x}_per_seed", [r[x] for r in runs["sticky"][name]], "mean cos²",
                  f"sticky testbed, {NAME_LABEL[name]}: {QUANTITY[x][0]}, per replicate")  # fmt: skip
        m.put(f"sticky_init_spread_{x}_per_seed", [[r[x] for r in s["init_spread"]] for s in sticky], "mean cos²",
              f"sticky testbed, extra random inits: {QUANTITY[x][0]}, per replicate")  # fmt: skip
        m.put(f"sticky_shuffled_{x}_per_seed", [s["shuffled"][x] for s in sticky if "shuffled" in s], "mean cos²",
              f"sticky testbed, other-window-label control: {QUANTITY[x][0]}, per model")  # fmt: skip
    m.put("sticky_shuffled_kl_per_seed", [s["shuffled"]["kl"] for s in sticky if "shuffled" in s], "bits",
          "sticky testbed, other-window-label control: held-out KL(Bayes ‖ model), per model")  # fmt: skip
    for t in (*TASKS, ONEHEAD):
        for name in ("init", *ARMS):
            for q, key in (("kl", "kl"), ("pc1", "pc1"), ("rho", "spearman_abs")):
                words, unit = QUANTITY[q]
                m.put(f"{t}_{name}_{q}_per_seed", [r[key] for r in runs[t][name]], unit,
                      f"{TASK_LABEL[t]}, {NAME_LABEL[name]}: {words}, per replicate")  # fmt: skip
        qs = ("final_loss",) if t == ONEHEAD else ("final_loss", "plateau_drop", "plateau_change", "kl_history")
        for arm in ARMS:
            for q in qs:
                words, unit = QUANTITY[q]
                m.put(f"{t}_{arm}_{q}_per_seed", [r[q] for r in runs[t][arm]], unit,
                      f"{TASK_LABEL[t]}, arm {arm}: {words}, per replicate")  # fmt: skip
    for t in TASKS:
        m.put(f"{t}_no_context_kl_per_seed", floors[t], "bits", f"{TASK_LABEL[t]}: no-context KL, per replicate")


def put_validation(m: Metrics, learned_fraction: float, margin: float, rho_min: float) -> None:
    """``<task>_validation_<x>_rho`` and ``..._aligned_kl_max_in_bars`` per task and signature measure ``x`` over
    the models of every replicate (module docstring; reads the ``_per_seed`` lists). Aligned: the sticky read-out's
    bar; on the bijection the signature's own, PC1 share >= init's + ``margin``, |ρ| >= max(``rho_min``, init's +
    ``margin``)."""
    thr = m["sticky_aligned_threshold"]
    bars = {"sticky": dict.fromkeys(MEASURES, thr), "bijection": {"pc1": m["bijection_init_pc1"] + margin,
            "rho": max(rho_min, m["bijection_init_spearman_abs"] + margin)}}  # fmt: skip
    for task, aligned in bars.items():
        _put_validity(m, task, aligned, learned_fraction)


def _put_validity(m: Metrics, task: str, aligned: dict[str, float], learned_fraction: float) -> None:
    names = ("init", *ARMS)
    floors = m[f"{task}_no_context_kl_per_seed"]
    kl = [k / (learned_fraction * f) for n in names for k, f in zip(m[f"{task}_{n}_kl_per_seed"], floors, strict=True)]
    if task == "sticky":  # the other-window-label models, each on its replicate's floor (the first ones)
        kl += [k / (learned_fraction * f) for k, f in zip(m["sticky_shuffled_kl_per_seed"], floors, strict=False)]
    for x, bar in aligned.items():
        scores = [v for n in names for v in m[f"{task}_{n}_{x}_per_seed"]]
        scores += m[f"sticky_shuffled_{x}_per_seed"] if task == "sticky" else []
        stats = validity(kl, scores, bar, 0)
        words = QUANTITY[x][0]
        m.put(f"{task}_validation_{x}_rho", stats["rho"], "correlation", f"{TASK_LABEL[task]}, validation: "
              f"Spearman ρ of the {words} with −KL (inits and arms, every replicate)")  # fmt: skip
        m.put(f"{task}_validation_{x}_aligned_kl_max_in_bars", stats["aligned_kl_max_in_bars"], "ratio",
              f"{TASK_LABEL[task]}, validation: highest KL / tracking bar of a model aligned on the {words} "
              f"(aligned: >= {bar:.3g})")  # fmt: skip


def describe(task: str, m: dict[str, Any], outcome: str, n_seeds: int) -> str:
    """One task's numbers in words; a spread only where there are two seeds or more (one seed has none)."""
    spread = n_seeds >= 2
    arms = "; ".join(
        f"{LABELS[a]} {m[f'{a}_kl']:.4f}"
        + (f" ± {m[f'{a}_kl_sd']:.4f}" if spread else "")
        + ("" if a == "A" else f" ({m[f'{a}_over_A_kl']:.2f}× A)")
        + f", PC1 {m[f'{a}_pc1']:.2f}, |ρ| {m[f'{a}_spearman_abs']:.2f}"
        for a in ARMS
    )
    gates = (
        f"; arm A's worst seed: KL/no-context {m['A_track_ratio_max']:.3f}, last-fifth drop "
        f"{m['A_plateau_in_bars_max']:.2f} of the plateau allowance"
        if "A_track_ratio_max" in m
        else ""
    )
    return (
        f"{task} [{outcome}]: KL in bits ({'mean ± sd over seeds' if spread else 'one seed'}) {arms}; "
        f"random init KL {m['init_kl']:.3f}, PC1 "
        f"{m['init_pc1']:.2f}, |ρ| {m['init_spearman_abs']:.2f}; no-context {m['no_context_kl']:.3f}{gates}"
    )


def manifold_line(m: dict[str, Any], outcome: str) -> str:
    """The sticky half's signature: ``sticky_manifold``'s two measures per arm (means over replicates)."""
    arms = "; ".join(
        f"{LABELS[a]} {m[f'{a}_readout']:.3f} / {m[f'{a}_value']:.3f}"
        + (f" ({m[f'{a}_manifold']})" if a in ("A", "B", "D") else "")
        for a in ARMS
    )
    return (
        f"sticky manifold read-out [{outcome}] (sticky_manifold's measures, mean cos² of the principal angles to the "
        f"span of the centred symbol means, context read-out / value PCs, means over seeds; aligned at >= "
        f"{m['aligned_threshold']:.3f}, chance {m['chance']:.2f}): random init {m['init_readout']:.3f} / "
        f"{m['init_value']:.3f} (sd over the extra random inits {m['init_spread_readout_sd']:.3f} / "
        f"{m['init_spread_value_sd']:.3f}); {arms}; other-window labels (control, {m['n_shuffled']:.0f} model(s)) "
        f"{m['shuffled_readout']:.3f} / {m['shuffled_value']:.3f}"
    )
