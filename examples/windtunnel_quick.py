"""Train a small transformer on bijection elimination and measure it in bits against the exact posterior.

    python examples/windtunnel_quick.py            # about 20 s on 2 CPU cores (V = 10, 1500 steps)

The full quick setting (V = 20, about 10 minutes on 2 idle cores) is
``python -m implicit_em.windtunnel train --preset quick --task bijection --out runs/bij20``.
"""

from implicit_em.windtunnel import BijectionTask, WindTunnelConfig, train


def main() -> None:
    config = WindTunnelConfig.quick(task="bijection", n_symbols=10, steps=1500, eval_every=500, threads=2)
    result = train(config, run_dir="runs/example-bij10")
    m = result.metrics["eval"]
    floor = BijectionTask(10).no_context_mae()
    print(f"per-sample entropy MAE {m.entropy_mae_per_sample:.4f} bits (no-context floor {floor:.3f})")
    print(f"mean-curve entropy MAE {m.entropy_mae_mean_curve:.4f} bits, KL(Bayes||model) {m.kl:.4f} bits")
    print("run directory: runs/example-bij10 (config.json, metrics.json, curves.png)")


if __name__ == "__main__":
    main()
