r"""The companion's literal EM-like protocol as a setting of ``two_timescale`` (reported, not deciding).

The companion (Agarwal, Dalal & Misra, arXiv 2512.22473 §5.2; notes §B) trains one causal head (W_Q, W_K 20x10,
W_V 20x15, W_O 15x8, no positions, no residual, init N(0, 0.1²)) on **one** sequence of the sticky chain
(:class:`~implicit_em.windtunnel.tasks.StickyMarkovTask` defaults: 8 symbols, stay 0.3, noise 1, T = 2000), full
batch, SGD lr 0.01 for 1,000 steps, against an "EM-like" arm, "the same gradients with lr 0.1 on W_V only", and
reports that the arm reaches SGD's final loss "≈2.3× sooner (5 seeds)".

Per inner seed i one stack of runs from one initialisation (:func:`run_names`): the baseline; its data-order twin
(the same initialisation on a second sequence draw: one sequence has no other data order); one arm per group
(W_V, W_O, W_Q/W_K) and multiplier (x2, x5, x10), that group's rate times the multiplier. The trajectories are
read as in :mod:`~implicit_em.audit.testbeds.two_timescale` (:func:`~.two_timescale.train_stack`: averaged
weights, τ of A and V on a held-out probe sequence, the speed-up to the baseline's final probe loss), τ at 50, 75
and 90% of the displacement, each censored at its own drift step (that fraction of the summed rate spent). Beside
it, the companion's own reading (:func:`companion_reading`): the training loss of the raw weights, the threshold
the seeds' mean final SGD loss, the speed-up 1,000 / the mean over seeds of the steps to it.

Why reported only: on this chain x_t all but names y_{t-1} (means ~6 noise SDs apart), so the no-context
predictor is within about 0.001 bits of Bayes; a baseline cannot be asked to track the posterior to a tenth of
that, and the ordering this setting shows is of a head learning the emission map, not the filter.
"""

import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from jaxtyping import Float
from torch import Tensor

from implicit_em.audit import provenance, seeds
from implicit_em.audit.core import Context
from implicit_em.audit.metrics import Metrics
from implicit_em.audit.testbeds import two_timescale as tt
from implicit_em.audit.testbeds.one_head import INIT_STD, no_context_posterior
from implicit_em.audit.testbeds.one_head import stack_inits as head_inits
from implicit_em.windtunnel.metrics import kl_bits
from implicit_em.windtunnel.tasks import StickyMarkovTask, StickySequence

__all__ = [
    "GROUP_OF",
    "Companion",
    "companion_reading",
    "group_multipliers",
    "head_logits",
    "merge",
    "put",
    "readings",
    "run_names",
    "state",
    "streams",
    "summary",
    "train",
    "train_seed",
]

GROUP_OF = {"W_Q": "W_Q/W_K", "W_K": "W_Q/W_K", "W_V": "W_V", "W_O": "W_O"}  # the weight groups of the head


@dataclass(frozen=True)
class Companion:
    """The companion's literal setting (defaults) and what is read of it."""

    length: int = 2000  # StickyMarkovTask's default T: "one sequence of T = 2000 steps"
    stay: float = 0.3  # its default stay probability
    noise: float = 1.0  # its default emission noise
    lr: float = 0.01  # "SGD lr 0.01 on all parameters"
    steps: int = 1000  # "for 1000 steps"
    multipliers: tuple[float, ...] = (2.0, 5.0, 10.0)  # the referee's sweep, each group separately
    displacements: tuple[float, ...] = (0.5, 0.75, 0.9)  # τ read at 50, 75 and 90% of the displacement
    probe_rows: int = 32  # query rows of the probe sequence whose attention weights are snapshotted
    reported: float = 2.3  # "EM-like reaches SGD's final loss ≈2.3x sooner"
    em_like: float = 10.0  # the EM-like arm: "lr 0.1 on W_V only", W_V x10

    @classmethod
    def quick(cls) -> "Companion":
        """A smoke size (it cannot decide, and is reported only at any size): T = 200, 200 steps, x10 only."""
        return cls(length=200, steps=200, multipliers=(10.0,))


def run_names(multipliers: tuple[float, ...]) -> list[str]:
    """The runs of one inner seed: the baseline, its data-order twin (a second sequence), then the arms."""
    return ["baseline", "twin", *tt.arm_names(multipliers)]


def streams(seed: int, inner: list[int]) -> dict[str, Any]:
    """The random streams, derived from the run's seed by name: per inner seed i its initialisation and its two
    sequences (the baseline's and the twin's); the chain's means (one chain for every inner seed, as the
    companion fixes its embeddings and varies the sequence); the held-out probe sequence."""
    return {
        "init": [seeds.derive(seed, "companion init", i) for i in inner],
        "data": [tuple(seeds.derive(seed, "companion data", i, o) for o in (0, 1)) for i in inner],
        "means": seeds.derive(seed, "companion means"),
        "probe": seeds.derive(seed, "companion probe"),
    }


def head_logits(params: dict[str, Tensor], x: Float[Tensor, "*b t d"]) -> Float[Tensor, "*b t c"]:
    r"""The companion's head, :math:`\mathrm{softmax}(QK^\top/\sqrt{10}) V W_O` with a causal mask: the function of
    :func:`~implicit_em.audit.testbeds.one_head.single_head_logits` through torch's fused kernel (about 15% faster
    at T = 2000, equal to float32 round-off: the tests check it)."""
    q, k, v = x @ params["W_Q"], x @ params["W_K"], x @ params["W_V"]  # (*b, T, 10), (*b, T, 10), (*b, T, 15)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True) @ params["W_O"]  # (*b, T, 8)


def group_multipliers(runs: list[str]) -> dict[str, Tensor]:
    """Per weight, the rate multiplier of each run, (R, 1, 1): an arm "G xm" scales group G's weights by m."""
    out = {}
    for name, group in GROUP_OF.items():
        mult = [float(r.rsplit(" x", 1)[1]) if r.rsplit(" x", 1)[0] == group else 1.0 for r in runs]
        out[name] = torch.tensor(mult).reshape(-1, 1, 1)
    return out


@torch.no_grad()
def state(params: dict[str, Tensor], x: Float[Tensor, "t d"], rows: Tensor) -> dict[str, Tensor]:
    """What is snapshotted, per run (R, ...): ``A`` the attention weights of the query ``rows`` of the probe
    sequence over every key (R, len(rows), T; zero past the row), ``V`` its value vectors (R, T, 15), ``W_V``,
    and ``W_QK`` = W_Q W_Kᵀ (R, 20, 20)."""
    scores = (x[rows] @ params["W_Q"]) @ (x @ params["W_K"]).transpose(1, 2) / math.sqrt(params["W_Q"].shape[-1])
    future = torch.arange(x.shape[0])[None, :] > rows[:, None]  # (rows, T)
    a = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
    return {"A": a, "V": x @ params["W_V"], "W_V": params["W_V"], "W_QK": params["W_Q"] @ params["W_K"].transpose(1, 2)}


def train_seed(c: Companion, task: StickyMarkovTask, init_seed: int, data_seeds: tuple[int, ...],
               probe: StickySequence, snap_every: int, loss_every: int,
               ema_steps: float) -> dict[str, Any]:  # fmt: skip
    """One inner seed's stack (:func:`run_names`), full-batch SGD on its own sequence, through
    :func:`~implicit_em.audit.testbeds.two_timescale.train_stack`. Returns ``traj`` (snapshots of the baseline and
    the twin), ``final_train`` the raw weights' training loss after the last step (R,) nats, ``bayes_train`` the
    Bayes predictive's loss on each run's sequence (R,), and ``wall_s``."""
    runs = run_names(c.multipliers)
    seqs = [task.sample(torch.Generator().manual_seed(s)) for s in data_seeds]
    pick = [int(r == "twin") for r in runs]
    x = torch.stack([seqs[i].inputs / c.noise for i in pick]).float()  # (R, T, 20)
    y = torch.stack([seqs[i].targets for i in pick])  # (R, T)
    bayes = torch.stack([-seqs[i].posterior.gather(1, seqs[i].targets[:, None]).log().mean() for i in pick])
    params = head_inits([init_seed], len(runs), INIT_STD)
    xp, post = (probe.inputs / c.noise).float(), probe.posterior
    rows = torch.linspace(0, c.length - 1, min(c.probe_rows, c.length)).round().long()

    def loss(p: dict[str, Tensor], step: int) -> tuple[Tensor, Tensor]:
        ce = F.cross_entropy(head_logits(p, x).transpose(1, 2), y, reduction="none").mean(1)  # (R,)
        return ce, bayes

    def read(p: dict[str, Tensor]) -> tuple[Tensor, Tensor]:
        logp = torch.log_softmax(head_logits(p, xp.expand(len(runs), -1, -1)).double(), dim=-1)  # (R, T, C)
        target = post[None].expand_as(logp)
        return -(target * logp).sum(-1).mean(1), kl_bits(target, logp.exp()).mean(1)

    budget = torch.full((len(runs),), c.steps)
    start = time.perf_counter()
    traj = tt.train_stack(params, group_multipliers(runs), budget, tt.Protocol("sgd", "sgd", c.lr, c.steps), loss,
                          read, lambda p: state(p, xp, rows), torch.tensor([0, 1]), snap_every, loss_every,
                          ema_steps)  # fmt: skip
    with torch.no_grad():
        final = loss(params, c.steps)[0]
    return {"traj": traj, "final_train": final, "bayes_train": bayes, "wall_s": time.perf_counter() - start}


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The inner seeds' stacks as one, runs seed-major (as :func:`~.two_timescale.speed_ups` reads them)."""
    ts = [p["traj"] for p in parts]
    traj = tt.Trajectories(ts[0].steps, {q: torch.cat([t.snaps[q] for t in ts], 1) for q in ts[0].snaps},
                           ts[0].loss_steps, torch.cat([t.probe_ce for t in ts], 1),
                           torch.cat([t.probe_kl for t in ts], 1), torch.cat([t.train_gap for t in ts], 1))  # fmt: skip
    cat = {k: torch.cat([p[k] for p in parts]) for k in ("final_train", "bayes_train")}
    return {"traj": traj, **cat, "wall_s": sum(p["wall_s"] for p in parts)}


def train(c: Companion, seed: int, inner: list[int], snap_every: int, loss_every: int, ema_steps: float,
          ctx: Context | None = None) -> dict[str, Any]:  # fmt: skip
    """Every inner seed's stack, one after another (each stack holds one T x T attention per run), merged; with
    the probe's no-context KL and the setting in words. With ``ctx`` each inner seed's stack is cached in its run
    folder (:meth:`~implicit_em.audit.core.Context.cached`): an interrupted run resumes at the next inner seed."""
    s = streams(seed, inner)
    task = StickyMarkovTask(length=c.length, stay=c.stay, noise=c.noise, means_seed=s["means"])
    probe = task.sample(torch.Generator().manual_seed(s["probe"]))
    code = provenance.code_hash(provenance.code_files(__name__))

    def one(init_seed: int, data_seeds: tuple[int, ...]) -> dict[str, Any]:
        key = {"companion": dataclasses.asdict(c), "seed": seed, "init": init_seed, "data": list(data_seeds),
               "streams": {k: s[k] for k in ("means", "probe")}, "snap_every": snap_every, "loss_every": loss_every,
               "ema_steps": ema_steps, "code": code}  # fmt: skip

        def compute() -> dict[str, Any]:
            part = train_seed(c, task, init_seed, data_seeds, probe, snap_every, loss_every, ema_steps)
            return {**part, "traj": part["traj"].as_dict()}

        part = compute() if ctx is None else ctx.cached("two_timescale_companion", key, compute)
        return {**part, "traj": tt.Trajectories.from_dict(part["traj"])}

    parts = [one(i, d) for i, d in zip(s["init"], s["data"], strict=True)]
    note = (f"the companion's literal setting: StickyMarkovTask defaults (stay {c.stay:g}, noise {c.noise:g}, "
            f"T = {c.length}), one sequence per run, full batch, one head init N(0, {INIT_STD:g}²), SGD lr "
            f"{c.lr:g} for {c.steps} steps")  # fmt: skip
    nc = float(kl_bits(probe.posterior, no_context_posterior(task, probe)).mean())
    return {**merge(parts), "no_context_kl": nc, "minimum_loss": task.minimum_loss(), "note": note}


def companion_reading(train_loss: Tensor, n_seeds: int, runs: list[str]) -> dict[str, Any]:
    """The companion's own reading of its speed-up (``em_vs_sgd_multiseed.py``): the threshold is the mean over
    seeds of the baseline's final training loss; a run's steps are the first step whose training loss (raw
    weights, before that step's update) is below it, all the steps if none; the speed-up is the steps over the
    mean over seeds of the run's steps. ``train_loss`` (steps + 1, n_seeds x len(runs)): each step's loss, then
    the final. Returns per run ``steps`` (per seed) and ``speed_up``."""
    loss = train_loss.reshape(train_loss.shape[0], n_seeds, len(runs))
    threshold = loss[-1, :, runs.index("baseline")].mean()
    below = loss[:-1] < threshold  # (steps, seeds, runs)
    n = below.shape[0]
    first = torch.where(below.any(0), below.double().argmax(0), torch.full(below.shape[1:], float(n)))
    return {"threshold": float(threshold), "steps": {r: first[:, j].tolist() for j, r in enumerate(runs)},
            "speed_up": {r: n / max(float(first[:, j].mean()), 1.0) for j, r in enumerate(runs)}}  # fmt: skip


def _taus(traj: tt.Trajectories, c: Companion, ratio: float) -> dict[str, Any]:
    """Per displacement fraction f: τ_A and τ_V of the baseline and its twin, censored at or after f's drift step
    (f x the steps at a constant rate), and the ordering per seed (:func:`~.two_timescale.ordering`)."""
    proto, out = tt.Protocol("sgd", "sgd", c.lr, c.steps), {}
    for f in c.displacements:
        drift = tt.drift_step(proto, c.steps, f)
        t = {**tt.timescales(traj, drift, f), "drift_step": drift}
        keys = ("tau_A", "twin_tau_A", "tau_V", "twin_tau_V", "censored_A", "censored_V")
        out[f"{100 * f:g}%"] = {**{k: t[k] for k in keys}, "drift_step": drift, "outcomes": tt.ordering(t, ratio)}
    return out


def readings(out: dict[str, Any], c: Companion, ratio: float, reach_tol: float, n_se: float) -> dict[str, Any]:
    """What :func:`put` records of :func:`train`'s output: τ and orderings per displacement fraction; the
    speed-up of every run per seed, the baseline's steps to its own final training loss (+ ``reach_tol`` of its
    fall) over the run's, read every step on the raw weights' full-batch loss (the objective itself, as the
    companion reads it; chosen on the pilot, docs/claims/two_timescale.md), and the same on the held-out probe
    loss of the averaged weights (reported); W_V's specificity per multiplier (``n_se`` SE) and the EM-like arm
    against the reported 2.3, on the training loss; the companion's own reading; the baseline's held-out KL."""
    traj, runs = out["traj"], run_names(c.multipliers)
    n = out["final_train"].numel() // len(runs)
    train_loss = torch.cat([traj.train_gap + out["bayes_train"].double(), out["final_train"].double()[None]])
    su = tt.speed_ups(train_loss, torch.arange(train_loss.shape[0]), n, runs, reach_tol)  # row s: after s steps
    held = tt.speed_ups(traj.probe_ce, traj.loss_steps, n, runs, reach_tol)["speed_up"]
    col = {r: j for j, r in enumerate(runs)}
    em = tt.mean_se(su["speed_up"][:, col[f"W_V x{c.em_like:g}"]])
    kl = traj.probe_kl[-1].reshape(n, len(runs))[:, col["baseline"]]
    return {
        "tau": _taus(traj, c, ratio),
        "speed_up": {r: su["speed_up"][:, j].tolist() for r, j in col.items()},
        "speed_up_mean_se": {r: list(tt.mean_se(su["speed_up"][:, j])) for r, j in col.items()},
        "reach_censored": {r: su["censored"][:, j].tolist() for r, j in col.items()},
        "specificity": {f"x{x:g}": tt.specificity(su["speed_up"], runs, x, n_se) for x in c.multipliers},
        "em_like": list(em), "em_like_minus_reported_se": (em[0] - c.reported) / max(em[1], 1e-12),
        "held_out_mean_se": {r: list(tt.mean_se(held[:, j])) for r, j in col.items()},
        "companion": companion_reading(train_loss, n, runs),
        "baseline_kl_bits": kl.tolist(), "track_ratio": (kl / out["no_context_kl"]).tolist(),
    }  # fmt: skip


def put(m: Metrics, r: dict[str, Any], out: dict[str, Any], c: Companion) -> None:
    """The readings into ``m`` under ``companion_``."""
    w = "companion's literal setting (reported): "

    def p(k: str, value: Any, unit: str, label: str) -> None:
        m.put(f"companion_{k}", value, unit, w + label)

    p("note", out["note"], "text", "setting")
    for q, z in (("A", "attention A"), ("V", "values V")):
        for k, words in (("tau", "τ"), ("twin_tau", "data-order twin: τ"), ("censored", "censored")):
            key = k.replace("tau", f"tau_{q}") if k != "censored" else f"censored_{q}"
            unit = "yes/no" if k == "censored" else "steps"
            p(key, {f: t[key] for f, t in r["tau"].items()}, unit, f"{words} of {z}, per displacement fraction")
    p("drift_step", {f: t["drift_step"] for f, t in r["tau"].items()}, "steps", "drift step per fraction")
    p("outcomes", {f: t["outcomes"] for f, t in r["tau"].items()}, "verdict", "ordering per seed and fraction")
    p("speed_up", r["speed_up"], "ratio", "speed-up per run and seed (training loss, raw weights)")
    p("speed_up_mean_se", r["speed_up_mean_se"], "[mean, SE]", "speed-up per run over seeds")
    p("held_out_speed_up_mean_se", r["held_out_mean_se"], "[mean, SE]",
      "speed-up on the held-out probe loss (averaged weights), over seeds")  # fmt: skip
    p("reach_censored", r["reach_censored"], "yes/no", "never reached the target, per run")
    spec = r["specificity"]
    p("specific", {x: s["specific"] for x, s in spec.items()}, "yes/no", "W_V-specific, per multiplier")
    p("gain_mean_se", {x: list(s["gain"]) for x, s in spec.items()}, "[mean, SE]", "speed-up(W_V) − 1")
    p("vs_W_O_mean_se", {x: list(s["vs_W_O"]) for x, s in spec.items()}, "[mean, SE]", "W_V − W_O speed-up")
    p("vs_W_QK_mean_se", {x: list(s["vs_W_Q/W_K"]) for x, s in spec.items()}, "[mean, SE]",
      "W_V − W_Q/W_K speed-up")  # fmt: skip
    p("em_like_speed_up", r["em_like"], "[mean, SE]", f"EM-like arm (W_V x{c.em_like:g}): speed-up")
    p("reported_speed_up", c.reported, "ratio", "the companion's reported speed-up")
    p("em_like_minus_reported_se", r["em_like_minus_reported_se"], "s.e. units", "(EM-like − reported) / SE")
    p("reading_threshold_nats", r["companion"]["threshold"], "nats", "companion's reading: mean final SGD loss")
    p("reading_steps", r["companion"]["steps"], "steps", "companion's reading: steps to it, per run and seed")
    p("reading_speed_up", r["companion"]["speed_up"], "ratio", "companion's reading: steps / mean steps to it")
    p("no_context_kl_bits", out["no_context_kl"], "bits", "no-context KL(Bayes ‖ p(y_t | x_t)) on the probe")
    p("baseline_kl_bits", r["baseline_kl_bits"], "bits", "baseline: held-out KL(Bayes ‖ model)")
    p("track_ratio", r["track_ratio"], "ratio", "baseline KL / no-context KL (not a gate here)")
    p("minimum_loss_nats", out["minimum_loss"], "nats", "the chain's minimum loss (row entropy of A)")
    p("final_train_nats", out["final_train"].tolist(), "nats", "final training loss per run (seed-major)")
    p("wall_s", out["wall_s"], "s", "wall time")


def summary(m: Metrics, c: Companion) -> str:
    """One sentence: the orderings per fraction, the x10 speed-ups, the specificity and the reported 2.3."""
    x = f"x{c.em_like:g}"
    su = {g: m["companion_speed_up_mean_se"][f"{g} {x}"] for g in tt.GROUPS}
    orders = ", ".join(f"{f}: {o.count('supports')} support, {o.count('fails')} fail" for f, o in
                       m["companion_outcomes"].items())  # fmt: skip
    return (
        f"companion's literal setting (reported): ordering per seed {orders}; speed-up {x}: "
        + ", ".join(f"{g} {v[0]:.2f} ± {v[1]:.2f}" for g, v in su.items())
        + f" ({'W_V-specific' if m['companion_specific'][x] else 'not W_V-specific'}; reported {c.reported:g}, "
        f"the companion's reading {m['companion_reading_speed_up'][f'W_V {x}']:.2f})"
    )
