"""The ``implicit-em`` command: a thin layer over the library.

``implicit-em demo`` measures, for each regime of the paper, the gradient law by autograd and prints the residual.
``implicit-em audit`` runs the claims audit (quick sizes by default) and writes its HTML report; ``implicit-em
report DIR`` rewrites the report of a run folder. ``implicit-em fit`` and ``predict`` fit a Gaussian mixture to
the user's own data file and label rows with it (``_cli_fit.py``).

Exit status: 0 on success; 1 when an experiment ended in ERROR; 2 on a usage error or a run folder that cannot be
used (a corrupt ``results.json``, an unwritable ``--out``), with one line on stderr saying what is wrong and no
traceback; 130 (SIGINT) or 143 (SIGTERM) when the audit was interrupted, after saving the experiments finished
before it (the same command resumes).
"""

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import torch

from implicit_em import _cli_fit, _cli_probe
from implicit_em._cli_args import positive_int, seed
from implicit_em.distances import gaussian_energies
from implicit_em.laws import constrained_law, lse_law, mixture_nll_law, routing_law, volume_law
from implicit_em.objectives import (
    constrained_cross_entropy,
    correntropy,
    independent_sigmoid_bce,
    lse,
    mixture_nll,
)

__all__ = ["Inputs", "LawCheck", "demo", "law_checks", "main"]

#: How a demo row builds its inputs in a dtype: autograd's gradient, and the keyword arguments of the law function.
Inputs = Callable[[torch.dtype], tuple[torch.Tensor, dict[str, Any]]]


@dataclass(frozen=True)
class LawCheck:
    """One row of the demo: a regime, its objective, the gradient law (its text, how to build its inputs, and the
    function of :mod:`implicit_em.laws` that predicts the gradient); ``residual`` measures max |autograd − law|."""

    regime: str
    objective: str
    law: str
    inputs: Inputs
    predicted: Callable[..., torch.Tensor]
    relative: bool = False

    def residual(self, dtype: torch.dtype) -> torch.Tensor:
        """max |autograd − law| in ``dtype`` (divided by max |law| when ``relative``), a 0-dim tensor."""
        grad, args = self.inputs(dtype)
        expected = self.predicted(**args)
        residual = (grad - expected).abs().amax()
        return residual / expected.abs().amax() if self.relative else residual


def _autograd(loss: Callable[..., torch.Tensor], x: torch.Tensor, *args: Any) -> torch.Tensor:
    """Autograd's gradient of loss(x, *args).sum() at a fresh leaf copy of x."""
    leaf = x.detach().clone().requires_grad_(True)
    with torch.enable_grad():
        (grad,) = torch.autograd.grad(loss(leaf, *args).sum(), leaf)
    return grad


def _volume_inputs(dtype: torch.dtype, n: int = 64, k: int = 5, d: int = 4) -> tuple[torch.Tensor, dict[str, Any]]:
    """∂L/∂W by autograd for L = Σ_i log Σ_j exp(−e_j(x_i)), full whitenings, and the volume law's arguments."""
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, d, generator=g, dtype=torch.float64).to(dtype)
    means = torch.randn(k, d, generator=g, dtype=torch.float64).to(dtype)
    w = (torch.randn(k, d, d, generator=g, dtype=torch.float64) + 3 * torch.eye(d, dtype=torch.float64)).to(dtype)
    w.requires_grad_(True)
    energies = gaussian_energies(x, means, w, "full")
    (grad,) = torch.autograd.grad(lse(energies).sum(), w)
    r = torch.softmax(-energies.detach(), -1)  # (N, K)
    return grad, {"x": x, "means": means, "whitening": w.detach(), "r": r}


def _routing_inputs(dtype: torch.dtype, t: int = 12, s: int = 12, e: int = 8) -> tuple[torch.Tensor, dict[str, Any]]:
    """∂ℓ/∂s by autograd for one softmax attention head, ℓ = Σ probe·o + ½‖o‖², and the routing law's arguments."""
    g = torch.Generator().manual_seed(2)
    scores = torch.randn(t, s, generator=g, dtype=torch.float64).to(dtype).requires_grad_(True)
    v = torch.randn(s, e, generator=g, dtype=torch.float64).to(dtype)
    probe = torch.randn(t, e, generator=g, dtype=torch.float64).to(dtype)
    alpha = torch.softmax(scores, -1)
    out = alpha @ v
    loss = (out * probe).sum() + 0.5 * out.square().sum()
    (grad,) = torch.autograd.grad(loss, scores)
    u = (probe + out).detach()  # ∂ℓ/∂o
    return grad, {"weights": alpha.detach(), "value": v, "upstream": u}


def law_checks(n: int = 256, k: int = 10) -> tuple[LawCheck, ...]:
    """The regimes of the paper with their gradient laws, as checks runnable in any dtype."""

    def distances(dtype: torch.dtype) -> torch.Tensor:
        return (torch.randn(n, k, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * 3).to(dtype)

    targets = torch.randint(0, k, (n,), generator=torch.Generator().manual_seed(3))
    log_w = torch.log_softmax(torch.randn(k, generator=torch.Generator().manual_seed(4), dtype=torch.float64), 0)

    def on_distances(loss: Callable[..., torch.Tensor], *args: Any, **law_args: Any) -> Inputs:
        """Inputs of a distance regime: autograd of loss(d, *args) at d, and the law's arguments d and law_args."""

        def build(dtype: torch.dtype) -> tuple[torch.Tensor, dict[str, Any]]:
            d = distances(dtype)
            return _autograd(loss, d, *args), {"d": d, **law_args}

        return build

    def unsupervised(dtype: torch.dtype) -> tuple[torch.Tensor, dict[str, Any]]:
        return on_distances(mixture_nll, log_w.to(dtype), log_weights=log_w.to(dtype))(dtype)

    def ce_smoothed(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return constrained_cross_entropy(x, y, label_smoothing=0.1)

    def sigmoid_control(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return independent_sigmoid_bce(-x, y)

    def correntropy_control(x: torch.Tensor) -> torch.Tensor:
        return -correntropy(x, 1.0)

    return (
        LawCheck("LSE (Thm 1)", "L = log Σ_j exp(−d_j)", "∂L/∂d_j = −r_j", on_distances(lse), lse_law),
        LawCheck(
            "unsupervised (§4.1)", "L⁻ = −log Σ_j π_j exp(−d_j)", "∂L⁻/∂d_j = +r_j", unsupervised, mixture_nll_law
        ),
        LawCheck(
            "volume term (§3.4)",
            "e_j = ½‖W_j(x−μ_j)‖² − log|det W_j|",
            "∂L/∂W_j = r_j (W_j^−T − z_j (x−μ_j)ᵀ) (relative)",
            _volume_inputs,
            volume_law,
            relative=True,
        ),
        LawCheck(
            "constrained (§4.3)",
            "ℓ = d_y + log Σ_k exp(−d_k)",
            "∂ℓ/∂d_k = 1[k=y] − r_k",
            on_distances(constrained_cross_entropy, targets, target=targets),
            constrained_law,
        ),
        LawCheck(
            "constrained, smoothed",
            "ℓ = −Σ_k t_k log softmax(−d)_k, ε = 0.1",
            "∂ℓ/∂d_k = t_k − r_k",
            on_distances(ce_smoothed, targets, target=targets, label_smoothing=0.1),
            constrained_law,
        ),
        LawCheck(
            "conditional (§4.2)",
            "o_i = Σ_j softmax(s_i)_j v_j",
            "∂ℓ/∂s_ij = α_ij (b_ij − E_α[b_i])",
            _routing_inputs,
            routing_law,
        ),
        LawCheck(
            "control: sigmoid BCE",
            "ℓ = Σ_k BCE(σ(−d_k), 1[k=y])",
            "no law: residual vs 1[k=y] − r_k",
            on_distances(sigmoid_control, targets, target=targets),
            constrained_law,
        ),
        LawCheck(
            "control: correntropy",
            "L = −Σ_j (1 − exp(−d_j²/σ²))",
            "no law: residual vs −r_j",
            on_distances(correntropy_control),
            lse_law,
        ),
    )


def demo() -> int:
    """Print each regime's objective, its gradient law and the residual measured by autograd."""
    print("implicit-em: the gradient laws of the paper, measured by autograd")
    print("(max |autograd − law| over a batch of 256 rows, K = 10; the controls have no such law)\n")
    header = f"{'regime':<24}{'objective':<40}{'gradient law':<48}{'float64':>10}{'float32':>10}"
    print(header)
    print("-" * len(header))
    for check in law_checks():
        r64, r32 = (float(check.residual(dt)) for dt in (torch.float64, torch.float32))
        print(f"{check.regime:<24}{check.objective:<40}{check.law:<48}{r64:>10.1e}{r32:>10.1e}")
    print(
        "\nThe laws hold to rounding error (about 1e-16 in float64, 1e-7 in float32); the unnormalised controls"
        "\nmiss them by O(1): their gradients are not responsibilities."
    )
    return 0


class _Parser(argparse.ArgumentParser):
    """argparse with a one-line error: ``implicit-em audit: error: ... (see --help)`` and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _names(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",")]
    if not any(names):
        raise argparse.ArgumentTypeError(f"names no experiment: {text!r}")
    if not all(names):
        raise argparse.ArgumentTypeError(f"has an empty name: {text!r} (comma-separated names)")
    return names


def _fail(prog: str, err: BaseException) -> int:
    """One line on stderr for an error the user can fix, and exit status 2."""
    print(f"{prog}: error: {err}", file=sys.stderr)
    return 2


def _audit(args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    from implicit_em.experiments import EXPERIMENTS, run_audit, select

    if args.list:
        for exp in EXPERIMENTS:
            print(f"{exp.name:<24}{exp.source}")
        return 0
    try:
        select(EXPERIMENTS, args.only)
    except ValueError as err:
        parser.error(f"argument --only: {err}")
    try:
        state = run_audit(
            args.out, quick=not args.full, only=args.only, force=args.force, seed=args.seed, threads=args.threads
        )
    except KeyboardInterrupt as err:
        print(f"{parser.prog}: interrupted: {err}", file=sys.stderr)
        return 143 if str(err).startswith("SIGTERM") else 130
    except (ValueError, TypeError, OSError) as err:  # a corrupt results.json, an --out that is a file or read-only
        return _fail(parser.prog, err)
    exps = state["experiments"]
    print(f"\nclaims audit ({state['size']}, seed {state['seed']}), {len(exps)} experiments:")
    for e in exps.values():
        print(f"  {e['verdict']:<10}{e['name']:<24}{e['summary']}")
    print(f"\nreport: {Path(args.out) / 'report.html'}")
    return 1 if any(e["verdict"] == "ERROR" for e in exps.values()) else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``implicit-em`` console script.

    A reader that closes the pipe early (``implicit-em demo | head``) ends the command quietly with status 141
    (128 + SIGPIPE, what a shell reports for a process SIGPIPE stopped), not a traceback; stdout is pointed at
    os.devnull first so that the interpreter's final flush cannot raise again (Python's documented recipe)."""
    try:
        return _main(argv)
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141


def _main(argv: Sequence[str] | None) -> int:
    from implicit_em import __version__

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["windtunnel"]:  # its own parser, so that `implicit-em windtunnel train --help` shows its options
        from implicit_em.windtunnel.__main__ import main as windtunnel

        try:
            return windtunnel(argv[1:], prog="implicit-em windtunnel")
        except KeyboardInterrupt:  # train saved a checkpoint at a step boundary and logged how to resume
            return 130
    parser = _Parser(prog="implicit-em", description="The implicit-em command: a thin layer over the library.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("windtunnel", help="train and read the Bayesian wind tunnels (implicit-em windtunnel --help)")
    sub.add_parser("demo", help="measure the gradient law of every regime and print the residuals")
    audit = sub.add_parser(
        "audit",
        help="run the claims audit: results.json, figures and report.html in --out (interrupt and rerun to resume)",
    )
    size = audit.add_mutually_exclusive_group()
    size.add_argument("--quick", dest="full", action="store_false", help="quick sizes, seconds each (default)")
    size.add_argument("--full", dest="full", action="store_true", help="full sizes (minutes each)")
    audit.set_defaults(full=False)
    audit.add_argument("--out", default="runs/audit", help="run folder (default: runs/audit)")
    audit.add_argument("--only", type=_names, default=None, help="comma-separated experiment names (default: all)")
    audit.add_argument("--seed", type=seed, default=0, help="the seed field of every experiment's Config (default 0)")
    audit.add_argument(
        "--force", action="store_true", help="rerun experiments already in the run folder (starts over a corrupt one)"
    )
    audit.add_argument(
        "--threads", type=positive_int, default=None, help="torch threads (default: 1 quick, torch's full)"
    )
    audit.add_argument("--list", action="store_true", help="list the experiments and exit")
    report = sub.add_parser("report", help="(re)write report.html of an audit run folder")
    report.add_argument("run_dir")
    _cli_fit.add_parsers(sub)
    _cli_probe.add_parser(sub)
    args = parser.parse_args(argv)
    if args.command == "probe":
        return _cli_probe.run(args)
    code = _cli_fit.run(args)
    if code is not None:
        return code
    if args.command == "demo":
        return demo()
    if args.command == "audit":
        return _audit(args, audit)
    if args.command == "report":
        from implicit_em.report import write_report

        try:
            print(write_report(args.run_dir))
        except (ValueError, OSError) as err:  # ResultsError is a ValueError; OSError: report.html not writable
            return _fail(report.prog, err)
        return 0
    parser.error(f"unknown command {args.command!r}")  # pragma: no cover - argparse rejects it first
    return 2


if __name__ == "__main__":
    sys.exit(main())
