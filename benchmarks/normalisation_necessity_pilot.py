"""Pilot of ``normalisation_necessity``'s sampled-label HMM (issue 25 §6): the softmax arm ALONE at full size.

Re-runs the pilot recorded in the experiment's module docstring: the softmax transformer on the sampled-state HMM
(full size's network, optimiser and 2-state HMM with K = 8) at pilot seeds 100-102, disjoint from the deciding
seeds 0-2, with the evaluation set of seed 100; at 1,600 steps (seeds 100, 101) and 3,200 steps (seeds 100-102).
It prints, per run, the two gates the verdict reads and nothing else: the final KL against the tracking bar
(0.1 x the no-context floor) and the KL drop over the last quarter against the plateau tolerance (0.2 x the bar).
No other arm runs, so nothing here can be chosen on a comparison.

    heavy .venv/bin/python benchmarks/normalisation_necessity_pilot.py OUT.json
"""

import dataclasses
import json
import sys
import time
from typing import Any

import torch

from implicit_em.audit.claims import normalisation_necessity as nn_
from implicit_em.audit.testbeds.unnormalised import build_arm_model, train_arm

PLAN = ((1600, (100, 101)), (3200, (100, 101, 102)))  # (steps, pilot seeds)


def main(out_path: str) -> None:
    out: dict[str, Any] = {}
    for steps, seeds in PLAN:
        cfg = dataclasses.replace(nn_.Config.full(), seed=100, hmm_sampled_steps=steps)
        task = nn_._task(cfg, "hmm_sampled")
        eval_batch = task.sample(cfg.eval_size, torch.Generator().manual_seed(10_000 + cfg.seed))
        floor = nn_._floors(task, eval_batch)["floor_kl"]
        bar = cfg.learned_fraction * floor
        for seed in seeds:
            start = time.perf_counter()
            wcfg = nn_._windtunnel_config(cfg, "hmm_sampled", "softmax", seed)
            model = build_arm_model("transformer", task, wcfg)
            run = train_arm(model, task, wcfg, eval_batch, nn_._eval_steps(steps, cfg.n_curve_points))
            late = run.kl[run.steps.index(nn_._three_quarters(steps))]
            record = {
                "steps": steps, "seed": seed, "floor_kl": floor, "bar": bar,
                "plateau_tol": cfg.plateau_fraction * bar, "kl": run.final.kl, "kl_at_three_quarters": late,
                "drop": late - run.final.kl, "tracks": run.final.kl <= bar,
                "plateaued": late - run.final.kl <= cfg.plateau_fraction * bar,
                "curve": [list(p) for p in zip(run.steps, run.kl, strict=True)],
                "seconds": time.perf_counter() - start,
            }  # fmt: skip
            out[f"{steps}-{seed}"] = record
            print(json.dumps(record), flush=True)
    with open(out_path, "w") as f:
        json.dump(out, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
