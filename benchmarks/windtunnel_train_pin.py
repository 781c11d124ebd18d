"""Pin of ``windtunnel.train`` before a refactor: every number a few small runs produce, timings aside.

    .venv/bin/python benchmarks/windtunnel_train_pin.py write before.json   # on the old code
    .venv/bin/python benchmarks/windtunnel_train_pin.py write after.json    # on the new code
    cmp before.json after.json                                              # bitwise equal, or the refactor moved

Six configurations (bijection and HMM; transformer, MLP, LSTM, prefix MLP; softmax and sigmoid loss), each run
straight through with a run directory (metrics.json, the checkpoint's weights), stopped at step 30 and resumed, and
without a directory; plus the message of a run that diverges. Floats are written with ``repr`` precision, so one
ulp of change shows. ``--planted`` scales the learning rate by (1 + 1e-12): the pin must differ (a check that can
fail). Used for issue 26's flat ``train.py`` (a629ca0): equal before and after, different with ``--planted``.
One torch thread, CPU, about 20 s.
"""

import argparse
import importlib
import json
import tempfile
from pathlib import Path
from typing import Any

import torch

from implicit_em.windtunnel.config import WindTunnelConfig

SMALL: dict[str, Any] = {
    "steps": 60,
    "batch_size": 16,
    "eval_every": 20,
    "eval_size": 64,
    "checkpoint_every": 25,
    "warmup_steps": 10,
    "n_layers": 1,
    "n_heads": 2,
    "d_model": 16,
    "d_ff": 32,
    "device": "cpu",
}
HMM: dict[str, Any] = {"task": "hmm", "n_obs": 8, "test_lengths": (12,)}
CASES: dict[str, dict[str, Any]] = {
    "bij-tr": {"task": "bijection", "n_symbols": 6},
    "bij-tr-sig": {"task": "bijection", "n_symbols": 6, "loss": "sigmoid"},
    "bij-mlp": {"task": "bijection", "n_symbols": 6, "model": "mlp"},
    "hmm-tr": HMM,
    "hmm-lstm": {**HMM, "model": "lstm"},
    "hmm-pmlp": {**HMM, "model": "prefix_mlp", "loss": "sigmoid"},
}
TIMING = {"elapsed_s", "cpu_s", "wall_s", "loadavg_start", "loadavg_end", "versions"}


def _strip(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _strip(v) for k, v in x.items() if k not in TIMING}
    if isinstance(x, list):
        return [_strip(v) for v in x]
    return x


def pin(planted: bool = False) -> dict[str, Any]:
    """Every non-timing number of the six configurations' runs, and the divergence message."""
    train_module = importlib.import_module("implicit_em.windtunnel.train")  # the package rebinds `train`
    if planted:
        rate = train_module.learning_rate
        train_module.learning_rate = lambda step, config: rate(step, config) * (1 + 1e-12)
    train = train_module.train
    out: dict[str, Any] = {}
    for name, kw in CASES.items():
        cfg = WindTunnelConfig(**SMALL, **kw)
        with tempfile.TemporaryDirectory() as d:
            train(cfg, d, progress=False)
            out[name] = _strip(json.loads((Path(d) / "metrics.json").read_text()))
            state = torch.load(Path(d) / "checkpoint.pt", weights_only=True)
            out[name]["weights"] = {k: v.double().flatten().tolist() for k, v in state["model"].items()}
        with tempfile.TemporaryDirectory() as d:
            train(cfg, d, progress=False, stop_after=30)
            train(cfg, d, progress=False)
            out[name]["resumed"] = _strip(json.loads((Path(d) / "metrics.json").read_text()))
        r = train(cfg, None, progress=False)
        final = {k: v.to_dict() for k, v in r.metrics.items()}
        out[name]["nodir"] = _strip({"final": final, "history": r.history, "steps": r.steps_done, "extra": r.extra})
    try:
        train(WindTunnelConfig(**{**SMALL, "lr": 1e6, "grad_clip": 1e9}, **CASES["bij-tr"]), None, progress=False)
        out["diverge"] = "did not diverge"
    except FloatingPointError as e:
        out["diverge"] = f"{type(e).__name__}: {e}"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=["write"])
    parser.add_argument("path", type=Path)
    parser.add_argument("--planted", action="store_true", help="scale the learning rate by 1 + 1e-12")
    args = parser.parse_args()
    torch.set_num_threads(1)
    args.path.write_text(json.dumps(pin(args.planted), sort_keys=True))
    print(f"wrote {args.path}")


if __name__ == "__main__":
    main()
