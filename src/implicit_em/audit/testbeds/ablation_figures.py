"""The ablation arms' figure, drawn from a run's metrics alone (``<task>_<name>_<quantity>_per_seed`` lists and the
means over replicates): per setting, the held-out KL per arm, the residual signature, the training curves, and on
the sticky testbed ``sticky_manifold``'s two read-out measures; and the signature measures' validation (each
measure against the KL in tracking bars, over the inits and arms of every replicate)."""

from typing import Any

from implicit_em.audit.plots import pyplot

__all__ = ["figure", "validation_figure"]

TASKS = ("bijection", "sticky", "onehead")
TITLES = {"bijection": "bijection", "sticky": "sticky testbed", "onehead": "one head (cannot represent the filter)"}
ARMS = ("A", "B", "C", "D")


def _kl_panel(ax: Any, m: dict[str, Any], task: str, labels: dict[str, str], fraction: float) -> None:
    """Held-out KL per arm: a bar at the mean over replicates, a dot per replicate; the no-context and tracking bars."""
    for i, name in enumerate(("init", *ARMS)):
        kls = m[f"{task}_{name}_kl_per_seed"]
        ax.plot([i] * len(kls), kls, "o", color=f"C{i}", alpha=0.7)
        ax.bar(i, m[f"{task}_{name}_kl"], color=f"C{i}", alpha=0.3)
    ax.axhline(m[f"{task}_no_context_kl"], color="k", ls="--", lw=1, label="no-context predictor")
    ax.axhline(fraction * m[f"{task}_no_context_kl"], color="k", ls=":", lw=1, label="tracking bar")
    ax.set_yscale("log")
    ax.set_xticks(range(1 + len(ARMS)), ["random init", *(labels[a] for a in ARMS)], fontsize=8)
    ax.set(ylabel="held-out KL(Bayes ‖ model), bits", title=f"{TITLES[task]}\nposterior error (dots: seeds)")
    ax.legend(fontsize=8)


def _signature_panel(ax: Any, m: dict[str, Any], task: str, labels: dict[str, str]) -> None:
    """PC1 share against |ρ| of PC1 with the Bayes entropy, per replicate and arm."""
    for i, name in enumerate(("init", *ARMS)):
        ax.plot(m[f"{task}_{name}_pc1_per_seed"], m[f"{task}_{name}_rho_per_seed"], "o", color=f"C{i}",
                label="random init" if name == "init" else labels[name])  # fmt: skip
    ax.set(xlabel="PC1 share", ylabel="|Spearman ρ| of PC1 with the Bayes entropy", xlim=(0, 1), ylim=(0, 1),
           title=f"{TITLES[task]}\nvalue-manifold signature")  # fmt: skip
    ax.legend(fontsize=8)


def _curve_panel(ax: Any, m: dict[str, Any], task: str, labels: dict[str, str], fraction: float) -> None:
    """Each arm's held-out KL curve per replicate against the fraction of training."""
    for i, arm in enumerate(ARMS, start=1):
        for k, h in enumerate(m[f"{task}_{arm}_kl_history_per_seed"]):
            ax.plot([(j + 1) / len(h) for j in range(len(h))], h, color=f"C{i}", alpha=0.6, lw=1,
                    label=labels[arm] if k == 0 else None)  # fmt: skip
    ax.axhline(fraction * m[f"{task}_no_context_kl"], color="k", ls=":", lw=1, label="tracking bar")
    ax.set_yscale("log")
    ax.set(xlabel="fraction of training", ylabel="held-out KL, bits", title=f"{TITLES[task]}\ntraining curves")
    ax.legend(fontsize=8)


def _manifold_panel(ax: Any, m: dict[str, Any], labels: dict[str, str]) -> None:
    """Both of sticky_manifold's measures per replicate and arm, the extra random inits and the other-window-label
    control, against the aligned bar."""
    spread_r = [v for per in m["sticky_init_spread_readout_per_seed"] for v in per]
    spread_v = [v for per in m["sticky_init_spread_value_per_seed"] for v in per]
    ax.plot(spread_r, spread_v, ".", color="0.6", label="extra random inits")
    for i, name in enumerate(("init", *ARMS)):
        ax.plot(m[f"sticky_{name}_readout_per_seed"], m[f"sticky_{name}_value_per_seed"], "o", color=f"C{i}",
                alpha=0.8, label="random init" if name == "init" else labels[name])  # fmt: skip
    ax.plot(m["sticky_shuffled_readout_per_seed"], m["sticky_shuffled_value_per_seed"], "kx",
            label="other-window labels")  # fmt: skip
    bar = m["sticky_aligned_threshold"]
    ax.axvline(bar, color="k", alpha=0.4, lw=2)
    ax.axhline(bar, color="k", alpha=0.4, lw=2, label=f"aligned ({bar:.3f})")
    ax.set(xlim=(0, 1.05), ylim=(0, 1.05), xlabel="context read-out: mean cos² to span(μ)",
           ylabel="value PCs (layer 1, pulled back): mean cos² to span(μ)",
           title="sticky testbed\nmanifold read-out (sticky_manifold's measures)")  # fmt: skip
    ax.legend(fontsize=7)


def figure(m: dict[str, Any], labels: dict[str, str], fraction: float) -> Any:
    """Rows: bijection, sticky testbed, one head; columns: KL, signature, training curves, read-out (sticky only).
    ``labels`` names the arms; ``fraction`` is the tracking bar's share of the no-context KL."""
    plt = pyplot()
    fig, axes = plt.subplots(len(TASKS), 4, figsize=(20, 4 * len(TASKS)))
    for row, task in enumerate(TASKS):
        _kl_panel(axes[row, 0], m, task, labels, fraction)
        _signature_panel(axes[row, 1], m, task, labels)
        if task == "onehead":
            axes[row, 2].axis("off")
        else:
            _curve_panel(axes[row, 2], m, task, labels, fraction)
        if task == "sticky":
            _manifold_panel(axes[row, 3], m, labels)
        else:
            axes[row, 3].axis("off")
    fig.tight_layout()
    return fig


def _validation_panel(ax: Any, m: dict[str, Any], task: str, measures: dict[str, tuple[str, float]],
                      fraction: float, limit: float) -> None:  # fmt: skip
    """Each measure of ``task`` (name: (label, aligned bar)) against KL / tracking bar, per replicate and model."""
    floors = m[f"{task}_no_context_kl_per_seed"]
    names = ("init", *ARMS)
    for j, (x, (label, bar)) in enumerate(measures.items()):
        for i, name in enumerate(names):
            kl = [k / (fraction * f) for k, f in zip(m[f"{task}_{name}_kl_per_seed"], floors, strict=True)]
            ax.plot(kl, m[f"{task}_{name}_{x}_per_seed"], "os"[j], color=f"C{i}", alpha=0.8, mfc="none" if j else None,
                    label=f"{'random init' if name == 'init' else 'arm ' + name}" if j == 0 else None)  # fmt: skip
        ax.axhline(bar, color=f"0.{3 + 3 * j}", lw=1, ls="--", label=f"{label}: aligned ({bar:.3f}); {'os'[j]}")
    ax.axvline(limit, color="r", lw=1, label=f"{limit:g} tracking bars (nothing aligned beyond)")
    ax.axvline(1.0, color="k", ls=":", lw=1, label="tracking bar")
    ax.set_xscale("log")
    rho = ", ".join(f"{label} ρ {m[f'{task}_validation_{x}_rho']:.2f}" for x, (label, _) in measures.items())
    ax.set(xlabel="held-out KL / tracking bar", ylabel="measure", title=f"{TITLES[task]}: measure against KL\n{rho}")
    ax.legend(fontsize=7)


def validation_figure(m: dict[str, Any], fraction: float, limit: float, margin: float, rho_min: float) -> Any:
    """The validation's figure: per task, its signature measures against the KL in tracking bars (a measure that
    ranks models by what they infer rises as the KL falls and is not aligned right of ``limit``)."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(14, 5))
    thr = m["sticky_aligned_threshold"]
    sticky = {"readout": ("context read-out", thr), "value": ("value PCs", thr)}
    bijection = {"pc1": ("PC1 share", m["bijection_init_pc1"] + margin),
                 "rho": ("|ρ| with the entropy", max(rho_min, m["bijection_init_spearman_abs"] + margin))}  # fmt: skip
    _validation_panel(axes[0], m, "sticky", sticky, fraction, limit)
    _validation_panel(axes[1], m, "bijection", bijection, fraction, limit)
    fig.tight_layout()
    return fig
