"""Pilot for advantage_ablation's sticky manifold read-out (issue 25; not deciding): arm A (exact gradient) only, on
pilot seeds disjoint from the deciding seeds 0-4. Reads what the declared read-out costs and what arm A scores:
``sticky_manifold``'s two measures (context read-out, first-layer value PCs pulled back; mean cos² of the principal
angles to the span of the centred symbol means) on the seed's init, on extra random inits (the init spread) and on
arm A after the quick (2,000 steps) or full (3,000 steps) testbed budget. No ablation arm is trained here.

usage: python benchmarks/advantage_ablation_manifold_pilot.py quick|full SEED N_EXTRA_INITS
"""

import json
import sys
import time

from implicit_em.audit.claims import advantage_ablation as aa
from implicit_em.audit.claims import sticky_manifold as sm
from implicit_em.audit.testbeds.ablation import ablated_sticky
from implicit_em.audit.testbeds.sticky_manifold import symbol_mean_basis, transformer_scores
from implicit_em.windtunnel.sticky import fit

size, seed, n_extra = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
cfg = aa.Config.full() if size == "full" else aa.Config.quick()
tb = cfg.testbed()
held = tb.eval_batch(seed)
basis = symbol_mean_basis(tb.means)
queries = sm.Config().queries()
out: dict[str, object] = {"size": size, "seed": seed, "queries": queries}
t0 = time.perf_counter()
model = ablated_sticky(tb.model(seed), "exact", perm_seed=40_000 + seed)
out["init"] = transformer_scores(model, basis, held.x, queries)
out["readout_s"] = time.perf_counter() - t0
t0 = time.perf_counter()
out["extra_inits"] = [transformer_scores(tb.model(60_000 + 100 * seed + j), basis, held.x, queries)
                      for j in range(n_extra)]  # fmt: skip
out["extra_inits_s"] = time.perf_counter() - t0
t0 = time.perf_counter()
res = fit(tb, model, seed, eval_batch=held)
out["fit_s"] = time.perf_counter() - t0
out["A_kl"] = res.kl_history[-1]
out["A_track_ratio"] = res.kl_history[-1] / tb.no_context_kl_bits(held)
out["A"] = transformer_scores(model, basis, held.x, queries)
print(json.dumps(out, indent=1))
