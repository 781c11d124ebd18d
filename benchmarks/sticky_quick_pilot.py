"""Pilot for a cheaper *quick* sticky testbed (issue 26: the quick audit within 3 minutes on a 2-core machine).

Declared before it ran (this file is committed first). The quick runs of ``advantage_ablation`` (5 testbed fits
a seed: arms A-D and the other-window-label control) and ``sticky_manifold`` (3 paired inits and 1 shuffled-label
model) train the testbed's quick recipe (2 layers, T = 32, batch 64, 2,000 steps: about 40 s a fit on a loaded
slot of this machine), which alone costs more than the 3-minute audit can give them. This pilot looks for a
cheaper recipe on which arm A still passes both of the testbed's gates with a margin.

- What is trained: arm A only (the exact gradient, :func:`implicit_em.windtunnel.sticky.fit` with its own Adam,
  warm-up 50, cosine to 0), on pilot seeds 100, 101, 102 (disjoint from the deciding seeds 0-4; the chain's means,
  the init and the streams from the pilot seed). No ablation arm, no read-out, no shuffled control is trained or
  read: the recipe is chosen on arm A's gates and on wall time alone.
- Margin: at every pilot seed, the final held-out KL / no-context KL <= 0.085 (the tracking bar is 0.1) and the
  last-fifth drop <= 0.5 x the plateau allowance (the gate is 1 x).
- Candidates, in a declared cost order (layers x T x batch x steps, relative to the quick recipe's 1 = 2 x 32 x 64
  x 2,000), the chain unchanged (stay 0.9, noise 3, 8 symbols, 20 features), d_model 32, 2 heads, d_ff 64, lr 1e-2:
  L1 T16 B64 1000 (1/8); L1 T32 B64 1000, L1 T16 B64 2000, L2 T16 B64 1000, L1 T32 B32 2000 (1/4 each); L1 T32
  B64 1500 (3/8); L2 T16 B64 2000 (1/2).
- Rule: the first candidate in that order that meets the margin at every pilot seed, if a fit of it costs at most
  10 s on a loaded slot (mean over the pilot seeds; advantage_ablation needs 5 fits a seed in about 50 s). If none
  does, the quick testbed stays the quick recipe and the 3-minute goal is reported as not met.

Outcome (run at 30db58d, two candidates at a time on the two one-thread slots of this 2-core machine, so at load 2;
``benchmarks/results/sticky_quick_pilot.jsonl``): KL / no-context at seeds 100, 101, 102 (bar 0.1, margin 0.085),
drop / allowance (bar 1, margin 0.5), mean seconds a fit:
L1 T16 B64 1000: 0.128, 0.137, 0.134 / 0.79, 0.89, 0.86 (6.2 s); L1 T32 B64 1000: 0.126, 0.138, 0.120 / 0.86, 0.94,
0.88 (11.2 s); L1 T16 B64 2000: 0.101, 0.102, 0.103 / 0.68, 0.64, 0.64 (14.3 s); L2 T16 B64 1000: 0.118, 0.131,
0.118 / 0.87, 0.89, 1.00 (11.6 s); L1 T32 B32 2000: 0.124, 0.116, 0.116 / 0.79, 0.99, 0.99 (14.2 s); L1 T32 B64
1500: 0.107, 0.105, 0.099 / 0.62, 0.73, 0.70 (15.5 s); L2 T16 B64 2000: 0.079, 0.090, 0.083 / 0.79, 0.77, 0.78
(20.3 s). No candidate meets the margin; the only one that meets the bare gates at every seed (L2 T16 B64 2000)
misses the drop margin and costs twice the cap; the one within the cap (L1 T16 B64 1000) misses the tracking bar by
30%. By the rule the quick testbed stays the quick recipe (about 42 s a fit at load 2).

usage: python benchmarks/sticky_quick_pilot.py CANDIDATE[,CANDIDATE...]   (names as above, e.g. L1T16B64S1000)
prints one JSON line per candidate and seed.
"""

import dataclasses
import json
import re
import sys
import time

from implicit_em.audit.core import torch_threads
from implicit_em.windtunnel.sticky import StickyTestbed, fit, plateau_drop

SEEDS = (100, 101, 102)


def testbed(name: str, seed: int) -> StickyTestbed:
    """The candidate ``name`` (L<layers>T<length>B<batch>S<steps>) with the pilot seed's chain means."""
    match = re.fullmatch(r"L(\d+)T(\d+)B(\d+)S(\d+)", name)
    if match is None:
        raise SystemExit(f"bad candidate {name!r}: expected L<layers>T<length>B<batch>S<steps>")
    layers, length, batch, steps = map(int, match.groups())
    return dataclasses.replace(
        StickyTestbed(), n_layers=layers, length=length, batch_size=batch, steps=steps, means_seed=seed
    )


def main() -> None:
    with torch_threads(1):
        for name in sys.argv[1].split(","):
            for seed in SEEDS:
                tb = testbed(name, seed)
                eval_batch = tb.eval_batch(seed)
                start = time.perf_counter()
                res = fit(tb, tb.model(seed), seed, eval_batch=eval_batch)
                wall = time.perf_counter() - start
                bar = tb.tracking_bar(eval_batch)
                ratio = res.kl_history[-1] / tb.no_context_kl_bits(eval_batch)
                drop = plateau_drop(res.kl_history, tb.plateau_window) / tb.plateau_bar(eval_batch)
                margin = ratio <= 0.085 and drop <= 0.5
                print(json.dumps({"candidate": name, "seed": seed, "kl_over_nc": round(ratio, 4),
                                  "drop_over_allowance": round(drop, 3), "margin": margin,
                                  "gates": ratio <= 0.1 and drop <= 1.0, "wall_s": round(wall, 1),
                                  "bar_bits": round(bar, 4)}), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
