"""Pilot for advantage_ablation's quick bijection budget (issue 25 §1-§2; not deciding): arm A (the exact gradient)
only, on pilot seeds 100-102 (disjoint from the deciding seeds 0-4), on the full size's task (V = 20, keys without
replacement) at reduced budgets. Reads only arm A's held-out KL against the tracking bar and its last-fifth drop
against the plateau allowance, as the full bijection's budget was chosen; no ablation arm (B, C, D) is trained and
no signature is read or printed.

Declared before the pilot ran (the rule that picks the quick budget):

- fixed, the full size's task and optimiser: V = 20 without replacement, 2 heads, d_model 32, d_ff 64, AdamW lr 1e-2
  (weight decay 0), warm-up 50 then cosine to 0; the quick size's held-out set and checkpoints (128 sequences, 20
  checkpoints);
- candidates (layers, batch, steps), in this order (nominal cost layers × batch × steps, ties in the listed order):
  see ``CANDIDATES``;
- a candidate *passes* when at each of seeds 100, 101 and 102 arm A ends at KL <= ``MARGIN`` (0.5) × the tracking
  bar (0.1 × the no-context KL, so <= 0.05 × no-context: a factor 2 under the gate) and its last-fifth drop is <=
  ``MARGIN`` × the plateau allowance (0.25 × the tracking bar): a factor 2 under each of arm A's gates, for the
  deciding seeds' spread (at full size arm A's KL ranged 0.0075-0.0302 bits over seeds 0-4, a factor 4);
- the quick bijection is the first passing candidate in this order; the pilot stops there;
- affordable when four times that candidate's mean arm-A time per seed is <= ``AFFORDABLE_S`` (90 s on one slot), so
  the quick run per seed stays within about a minute of today's (160-231 s, of which the V = 6 bijection 11-20 s);
  if no candidate passes, or the first passing one is not affordable, the quick bijection is not given a V = 20
  budget here (the fallback is to report it, not decide on it).

usage: python benchmarks/advantage_ablation_bijection_pilot.py [SEED ...]   (default 100 101 102)
"""

import dataclasses
import json
import sys
import time

from implicit_em.audit.claims import advantage_ablation as aa

MARGIN = 0.5
AFFORDABLE_S = 90.0
CANDIDATES = [  # (n_layers, batch_size, steps)
    (1, 32, 1000), (1, 32, 1500), (1, 32, 2000), (2, 32, 1000), (1, 64, 1000), (1, 32, 3000), (2, 32, 1500),
    (2, 32, 2000), (1, 64, 2000), (2, 32, 3000), (1, 64, 3000),
]  # fmt: skip

seeds = [int(s) for s in sys.argv[1:]] or [100, 101, 102]
base = dataclasses.replace(aa.Config.quick(), n_symbols=20, warmup_steps=50, eval_size=128, n_checkpoints=20)
for layers, batch, steps in CANDIDATES:
    cfg = dataclasses.replace(base, n_layers=layers, batch_size=batch, steps=steps)
    rows = []
    for seed in seeds:
        t0 = time.perf_counter()
        out = aa._bijection_seed(cfg, seed, arms={"A": "exact"})
        wall = time.perf_counter() - t0
        a, floor = out["A"], out["floor"]["kl"]
        bar = cfg.learned_fraction * floor
        allowance = cfg.plateau_tol * bar
        rows.append({
            "seed": seed, "kl": a["kl"], "track_ratio": a["kl"] / floor, "kl_in_bars": a["kl"] / bar,
            "plateau_drop": a["plateau_drop"], "drop_in_allowances": a["plateau_drop"] / allowance,
            "passes": a["kl"] <= MARGIN * bar and a["plateau_drop"] <= MARGIN * allowance, "wall_s": wall,
            "kl_history": a["kl_history"],
        })  # fmt: skip
        print(json.dumps({"layers": layers, "batch": batch, "steps": steps, **rows[-1]}), flush=True)
    passes = all(r["passes"] for r in rows)
    mean_wall = sum(r["wall_s"] for r in rows) / len(rows)
    print(json.dumps({
        "candidate": [layers, batch, steps], "passes": passes, "mean_wall_s_arm_A": mean_wall,
        "four_arms_s": 4 * mean_wall, "affordable": 4 * mean_wall <= AFFORDABLE_S,
    }), flush=True)  # fmt: skip
    if passes:
        break
