"""Pilot for two_timescale's sticky recipe (issue 25): the sticky testbed's Adam baseline ONLY (no multiplier arm,
no τ, ordering or speed-up read), on pilot seeds 1000 x BASE + (0, 1, 2) (BASE 100: 100000-100002, disjoint from
the deciding seeds 0-4), with the experiment's own sampler, schedule (warm-up 50, cosine to 0 at the run's
budget), stacked Adam, averaged weights and probe (``two_timescale._sticky``, ``train_stack``).

One stack per seed and budget B in BUDGETS, all on the seed's first data stream (the baseline's), trained for
max(BUDGETS) steps: a run whose budget is over no longer moves, so run B read at step B is the experiment's
baseline at ``tb_adam_steps`` = B, and run B/2 read at step B is its half-budget twin. Prints per budget the
baseline's KL / no-context KL per seed and, where B/2 is in BUDGETS, the plateau gap (KL(B/2) − KL(B)) /
no-context per seed, and the wall time. ``time`` mode instead times the full run's stack (5 seeds x 6 runs: the
three control runs and the three x10 arms) for 40 steps.

usage: python benchmarks/two_timescale_sticky_pilot.py LAYERS BATCH B1,B2,... [BASE] [time]
"""

import dataclasses
import json
import sys
import time

import torch
import torch.nn.functional as F
from torch import Tensor

from implicit_em.audit.claims import two_timescale as tt
from implicit_em.audit.core import torch_threads
from implicit_em.audit.testbeds.two_timescale import stack_inits, stacked, train_stack
from implicit_em.windtunnel.metrics import kl_bits

layers, batch = int(sys.argv[1]), int(sys.argv[2])
budgets = [int(b) for b in sys.argv[3].split(",")]
base = int(sys.argv[4]) if len(sys.argv) > 4 else 100
timing = len(sys.argv) > 5 and sys.argv[5] == "time"
steps = max(budgets)
cfg = dataclasses.replace(tt.Config.full(), seed=base, tb_layers=layers, tb_batch=batch, tb_adam_steps=steps,
                          n_seeds=5 if timing else 3)  # fmt: skip
torch_threads(1).__enter__()
setting = tt._sticky(cfg)
protocol = cfg.protocol("adam", "sticky")
if timing:
    protocol = dataclasses.replace(protocol, steps=40)
    start = time.perf_counter()
    tt._train(setting, protocol, cfg)
    per_step = (time.perf_counter() - start) / protocol.steps
    print(json.dumps({"layers": layers, "batch": batch, "s_per_step_full_stack": per_step,
                      "est_adam_s": {b: per_step * b for b in budgets}}))  # fmt: skip
    sys.exit(0)

n, nb = cfg.n_seeds, len(budgets)
seeds = [1000 * cfg.seed + i for i in range(n)]
params = {k: v.requires_grad_(True) for k, v in stack_inits([setting.model(s) for s in seeds
                                                             for _ in budgets]).items()}  # fmt: skip
stream = torch.tensor([i for i in range(n) for _ in budgets])
gens = [torch.Generator().manual_seed(7_919 * s + 17) for s in seeds]  # the baseline's stream, as in _train
budget = torch.tensor([b for _ in range(n) for b in budgets])
model0 = setting.model(seeds[0])
logits_fn, probe_fn = stacked(model0, setting.logits, (0,)), stacked(model0, setting.logits, (None,))
x_probe, post_probe = setting.probe


def loss(p: dict[str, Tensor], step: int) -> tuple[Tensor, Tensor]:
    draws = [setting.sample(batch, g) for g in gens]
    x, y, post = (torch.stack([d[j] for d in draws])[stream] for j in range(3))
    z = logits_fn(p, x)
    ce = F.cross_entropy(z.reshape(-1, setting.n_classes), y.reshape(-1), reduction="none")
    bayes = -post.gather(-1, y[..., None]).log().reshape(len(stream), -1).mean(1)
    return ce.reshape(len(stream), -1).mean(1), bayes


def probe(p: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
    logp = torch.log_softmax(probe_fn(p, x_probe).double(), dim=-1)
    post = post_probe[None].expand_as(logp)
    return -(post * logp).sum(-1).mean(dim=(1, 2)), kl_bits(post, logp.exp()).mean(dim=(1, 2))


start = time.perf_counter()
traj = train_stack(params, {k: torch.ones_like(v) for k, v in params.items()}, budget, protocol, loss, probe,
                   lambda p: {}, torch.tensor([0]), steps, 50, cfg.ema_steps)  # fmt: skip
wall = time.perf_counter() - start
nc = setting.no_context_kl
at = {int(s): i for i, s in enumerate(traj.loss_steps)}
kl = traj.probe_kl.reshape(len(traj.loss_steps), n, nb)
out: dict[str, object] = {"layers": layers, "batch": batch, "seeds": seeds, "no_context_kl_bits": nc,
                          "wall_s": round(wall, 1), "runs_in_stack": n * nb}  # fmt: skip
for j, b in enumerate(budgets):
    out[f"ratio@{b}"] = [round(float(v) / nc, 4) for v in kl[at[b], :, j]]
    if b // 2 in budgets:
        h = budgets.index(b // 2)
        out[f"gap@{b}"] = [round(float(kl[at[b], i, h] - kl[at[b], i, j]) / nc, 4) for i in range(n)]
print(json.dumps(out), flush=True)
