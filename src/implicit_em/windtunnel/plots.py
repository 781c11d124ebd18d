"""The figure of a wind-tunnel run: ``curves.png`` in its run directory."""

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # train.py calls this module; importing it back at run time would be circular
    from implicit_em.windtunnel.train import TrainResult

__all__ = ["plot_curves"]


def plot_curves(result: "TrainResult", path: Path) -> None:
    """Per-position entropy curves, |ΔH| and KL per position (log scale), and the learning curve, one PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(result.metrics)
    fig, axes = plt.subplots(2, n + 1, figsize=(4.2 * (n + 1), 6.5), squeeze=False)
    for i, (name, m) in enumerate(result.metrics.items()):
        c = m.curves
        t = range(1, len(c.entropy_bayes) + 1)
        ax = axes[0, i]
        ax.plot(t, c.entropy_bayes, "k-", lw=2, label="Bayes")
        ax.plot(t, c.entropy_model, "o--", ms=3, label=result.config.model)
        ax.set(title=f"{name}: mean entropy", xlabel="position", ylabel="bits")
        ax.legend()
        ax = axes[1, i]
        ax.semilogy(t, [max(v, 1e-8) for v in c.abs_entropy_error], label="|ΔH| per sample")
        ax.semilogy(t, [max(v, 1e-8) for v in c.kl], label="KL(Bayes‖model)")
        ax.set(title=f"{name}: errors", xlabel="position", ylabel="bits")
        ax.legend()
    if result.history:
        steps = [h["step"] for h in result.history]
        ax = axes[0, n]
        ax.semilogy(steps, [h["entropy_mae_per_sample"] for h in result.history], label="entropy MAE (per sample)")
        ax.semilogy(steps, [max(h["kl"], 1e-8) for h in result.history], label="KL")
        ax.set(title="learning curve (first eval set)", xlabel="step", ylabel="bits")
        ax.legend()
    axes[1, n].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
