"""Train a tiny transformer with the attention probe and the Monitor; print the law residuals and the
two-timescale curve (how fast attention patterns move compared with values, arXiv 2512.22473).

The task is next-symbol prediction on a sticky Markov chain over 8 symbols (the chain of 2512.22473, with
tokens instead of Gaussian inputs). Every ``probe_every`` steps a full-mode probe runs a forward and backward
pass on a fixed probe batch (its gradients are discarded), checks the routing and value laws, and records the
relative change of the attention patterns, the values and W_V since the previous probe. Training steps carry
a summary-mode probe (per-head entropy and law residuals of the first sequence of each batch, no T x S
tensors).

    .venv/bin/python examples/probe_transformer.py            # 300 steps, about a minute on 2 CPU cores
    .venv/bin/python examples/probe_transformer.py --quick    # a few seconds
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from implicit_em.diagnostics import Monitor
from implicit_em.probes import AttentionProbe, attention


@dataclass(frozen=True)
class Config:
    steps: int = 300  # training steps
    probe_every: int = 20  # full-mode probe on the fixed batch every this many steps
    symbols: int = 8  # states of the sticky Markov chain
    stay: float = 0.3  # probability of staying on the same symbol
    seq: int = 32  # sequence length
    batch: int = 32
    d_model: int = 32
    heads: int = 2
    layers: int = 2
    lr: float = 3e-3
    seed: int = 0
    out: str = "runs/probe_transformer/log.jsonl"

    @classmethod
    def quick(cls) -> Config:
        return cls(steps=12, probe_every=4, seq=12, batch=8, d_model=16)


def transition_matrix(cfg: Config) -> Tensor:
    """Sticky ring: `stay` on the diagonal, the rest in proportion to 1 / circular distance."""
    k = cfg.symbols
    i = torch.arange(k)
    gap = (i[None] - i[:, None]).abs()
    distance = torch.minimum(gap, k - gap).to(torch.float64)
    off = torch.where(distance > 0, 1.0 / distance.clamp_min(1), torch.zeros_like(distance))
    return cfg.stay * torch.eye(k, dtype=torch.float64) + (1 - cfg.stay) * off / off.sum(1, keepdim=True)


def sample(cfg: Config, transitions: Tensor, generator: torch.Generator) -> Tensor:
    states = torch.randint(0, cfg.symbols, (cfg.batch,), generator=generator)
    rows = [states]
    for _ in range(cfg.seq):
        rows.append(torch.multinomial(transitions[rows[-1]], 1, generator=generator).squeeze(1))
    return torch.stack(rows, dim=1)  # (B, seq + 1)


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)

    def forward(self, x: Tensor) -> Tensor:
        b, t, c = x.shape
        q, k, v = self.qkv(x).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)  # (B, H, T, c/H)
        return self.out(attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, d_model: int, heads: int) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, heads)
        self.mlp = nn.Sequential(nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TinyTransformer(nn.Module):
    def __init__(self, cfg: Config) -> None:
        super().__init__()
        self.embed = nn.Embedding(cfg.symbols, cfg.d_model)
        self.position = nn.Parameter(0.02 * torch.randn(cfg.seq, cfg.d_model))
        self.blocks = nn.ModuleList(Block(cfg.d_model, cfg.heads) for _ in range(cfg.layers))
        self.head = nn.Linear(cfg.d_model, cfg.symbols)

    def forward(self, tokens: Tensor) -> Tensor:
        x = self.embed(tokens) + self.position[: tokens.shape[1]]
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def loss_of(model: nn.Module, tokens: Tensor) -> Tensor:
    logits = model(tokens[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


def w_v_of(model: TinyTransformer) -> dict[str, Tensor]:
    """W_V of each block (the third slice of the fused qkv projection), keyed by probe site."""
    out = {}
    for i, block in enumerate(model.blocks):
        assert isinstance(block, Block)
        weight = block.attn.qkv.weight
        out[f"blocks.{i}.attn"] = weight[2 * weight.shape[1] :]
    return out


def run(cfg: Config) -> Monitor:
    torch.manual_seed(cfg.seed)
    generator = torch.Generator().manual_seed(cfg.seed)
    transitions = transition_matrix(cfg).float()
    model = TinyTransformer(cfg)
    optimiser = torch.optim.AdamW(model.parameters(), lr=cfg.lr)
    probe_batch = sample(cfg, transitions, generator)
    floor = -(transitions * transitions.log()).sum(1).mean().item()  # conditional entropy (nats)
    monitor = Monitor(cfg.out)
    summary_probe = AttentionProbe(model, mode="summary")
    for step in range(cfg.steps + 1):
        if step % cfg.probe_every == 0:
            with AttentionProbe(model, mode="full") as probe:
                loss_of(model, probe_batch).backward()
            monitor.log_attention(step, probe, w_v=w_v_of(model))
            optimiser.zero_grad(set_to_none=True)
        if step == cfg.steps:
            break
        with summary_probe:
            loss = loss_of(model, sample(cfg, transitions, generator))
            loss.backward()
        optimiser.step()
        optimiser.zero_grad(set_to_none=True)
        monitor.log(step, loss=loss, loss_floor=floor, **{k: v for k, v in summary_probe.cache.items()})
    monitor.close()
    return monitor


def report(monitor: Monitor, cfg: Config) -> None:
    probes = [r for r in monitor.records if "hopfield" in r]
    print(f"law residuals over {len(probes)} full probes (max |autograd - law|, float32):")
    for law in ("routing_law", "value_law", "hopfield"):
        print(f"  {law:12s} {max(r[law] for r in probes):.3e}")
    losses = [r for r in monitor.records if "loss" in r]
    first, last = losses[0]["loss"], losses[-1]["loss"]
    print(f"training loss {first:.3f} -> {last:.3f} nats (Bayes floor {losses[-1]['loss_floor']:.3f})")
    print("two-timescale curve (relative change per probe interval, mean over layers):")
    print(f"  {'step':>5} {'attention':>10} {'values':>10} {'W_V':>10} {'ratio':>8}")
    sites = [f"blocks.{i}.attn" for i in range(cfg.layers)]
    for r in probes:
        if f"{sites[0]}.timescale_ratio" not in r:
            continue
        mean = {
            name: sum(r[f"{s}.{name}"] for s in sites) / len(sites)
            for name in ("attention_change", "value_change", "w_v_change", "timescale_ratio")
        }
        print(
            f"  {r['step']:>5} {mean['attention_change']:>10.4f} {mean['value_change']:>10.4f} "
            f"{mean['w_v_change']:>10.4f} {mean['timescale_ratio']:>8.2f}"
        )
    print(f"log: {cfg.out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few steps, for tests")
    parser.add_argument("--out", type=str, default=None, help="JSON-lines log path")
    args = parser.parse_args()
    cfg = Config.quick() if args.quick else Config()
    if args.out is not None:
        cfg = Config(**{**cfg.__dict__, "out": args.out})
    report(run(cfg), cfg)


if __name__ == "__main__":
    main()
