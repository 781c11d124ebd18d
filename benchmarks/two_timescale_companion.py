"""two_timescale's companion setting outside the audit, one inner seed per call (the literal protocol costs about
40 minutes a seed on one loaded core), then the readings of the seeds trained:

    nice -n 19 .venv/bin/python benchmarks/two_timescale_companion.py train DIR --inner 0   # ... --inner 4
    .venv/bin/python benchmarks/two_timescale_companion.py read DIR                         # DIR/metrics.json

``train`` writes DIR/inner<I>.pt (the stack of that inner seed under run seed ``--seed``, default 0: the streams
the audit's full run at seed 0 draws for its inner seed I); ``--length`` and ``--steps`` shrink the setting (the
pilot: ``--length 500``). ``read`` merges every DIR/inner*.pt and records what the claim records under
``companion_`` (the rule's thresholds from ``two_timescale.Config``). One torch thread.
"""

import argparse
import dataclasses
import json
from pathlib import Path

import torch

from implicit_em.audit.claims.two_timescale import Config
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.testbeds import two_timescale_companion as ttc
from implicit_em.audit.testbeds.two_timescale import Trajectories


def _companion(args: argparse.Namespace) -> ttc.Companion:
    return dataclasses.replace(Config.full().companion, length=args.length, steps=args.steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("train", "read"))
    parser.add_argument("dir", type=Path)
    parser.add_argument("--inner", type=int, default=0, help="the inner seed to train")
    parser.add_argument("--seed", type=int, default=0, help="the run's seed the streams derive from")
    parser.add_argument("--length", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=1000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    cfg, c = Config.full(), _companion(args)
    args.dir.mkdir(parents=True, exist_ok=True)
    if args.mode == "train":
        out = ttc.train(c, args.seed, [args.inner], cfg.snap_every, cfg.loss_every, cfg.ema_steps)
        saved = {**out, "traj": dataclasses.asdict(out["traj"]), "companion": dataclasses.asdict(c)}
        saved["inner"] = args.inner
        torch.save(saved, args.dir / f"inner{args.inner}.pt")  # tensors, numbers and strings: loads weights_only
        print(f"inner seed {args.inner}: {out['wall_s']:.0f} s")
        return
    files = sorted(args.dir.glob("inner*.pt"), key=lambda p: int(p.stem.removeprefix("inner")))
    parts = [torch.load(p, weights_only=True) for p in files]
    parts = [{**p, "traj": Trajectories(**p["traj"])} for p in parts]
    c = ttc.Companion(**{**parts[0]["companion"], "multipliers": tuple(parts[0]["companion"]["multipliers"]),
                         "displacements": tuple(parts[0]["companion"]["displacements"])})  # fmt: skip
    out = {**parts[0], **ttc.merge(parts)}
    m = Metrics()
    m.put("companion_inner_seeds", [p["inner"] for p in parts], "seed ids", "inner seeds read")
    ttc.put(m, ttc.readings(out, c, cfg.rule.ratio, cfg.rule.reach_tol, cfg.rule.n_se), out, c)
    (args.dir / "metrics.json").write_text(json.dumps(dict(m), indent=1))
    print(ttc.summary(m, c))


if __name__ == "__main__":
    main()
