"""The ``implicit-em`` command: a thin layer over the library.

``implicit-em demo`` measures, for each regime of the paper, the gradient law by autograd and prints the residual.
``implicit-em audit`` runs the claims audit (quick sizes by default) and writes its HTML report; ``implicit-em
report DIR`` rewrites the report of a run folder. ``implicit-em fit`` and ``predict`` fit a Gaussian mixture to
the user's own data file and label rows with it (``_cli_fit.py``).

Exit status: 0 on success; 1 when an experiment ended in ERROR; 2 on a usage error or a run folder that cannot be
used (a corrupt ``results.json``, an unwritable ``--out``), with one line on stderr saying what is wrong and no
traceback; 130 (SIGINT) or 143 (SIGTERM) when the audit was interrupted, after saving the experiments finished
before it (the same command resumes).

Start-up: this module imports neither torch nor numpy. Arguments are parsed and checked (file names, ``--out``
paths) before any of the library's numerical code is imported, so ``--help`` and a usage error answer at once
(``benchmarks/cli_startup.py`` measures it); the demo's law checks live in ``_cli_demo.py`` and are re-exported
here on first use.
"""

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from implicit_em import _cli_fit, _cli_probe
from implicit_em._cli_args import jobs, positive_int, seed

if TYPE_CHECKING:
    from implicit_em._cli_demo import Inputs, LawCheck, demo, law_checks

__all__ = ["Inputs", "LawCheck", "demo", "law_checks", "main"]

_DEMO_NAMES = ("Inputs", "LawCheck", "demo", "law_checks")


def __getattr__(name: str) -> Any:
    """``demo``, ``law_checks``, ``LawCheck`` and ``Inputs`` from ``_cli_demo``, imported on first use (torch)."""
    if name in _DEMO_NAMES:
        return getattr(importlib.import_module("implicit_em._cli_demo"), name)
    raise AttributeError(f"module 'implicit_em.cli' has no attribute {name!r}")


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
    from implicit_em.audit import EXPERIMENTS, run_audit, select
    from implicit_em.audit.runner import default_out

    if args.list:
        for exp in EXPERIMENTS:
            print(f"{exp.name:<24}{exp.source}")
        return 0
    try:
        select(EXPERIMENTS, args.only)
    except ValueError as err:
        parser.error(f"argument --only: {err}")
    if args.out is None:
        args.out = str(default_out(not args.full, args.seed))
    try:
        state = run_audit(
            args.out,
            quick=not args.full,
            only=args.only,
            force=args.force,
            seed=args.seed,
            threads=args.threads,
            jobs=args.jobs,
        )
    except KeyboardInterrupt as err:
        print(f"{parser.prog}: interrupted: {err}", file=sys.stderr)
        return 143 if str(err).startswith("SIGTERM") else 130
    except (ValueError, TypeError, OSError) as err:  # a corrupt results.json, an --out that is a file or read-only
        return _fail(parser.prog, err)
    from implicit_em.audit.summaries import closing_table, committed_full_records

    exps = state["experiments"]
    full = committed_full_records() if state["size"] != "full" else None
    print(f"\nclaims audit ({state['size']}, seed {state['seed']}), {len(exps)} experiments (summaries: the report)")
    if state["size"] != "full":
        print(f"  {'this run':<10}{'':<24}{'full size, seed 0':<22}(the committed record; * its code differs)")
    print("\n".join(closing_table(state, full)))
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
    size.add_argument(
        "--quick", dest="full", action="store_false",
        help="quick sizes (default): seconds to about five minutes each; all 18 in about 8 minutes with --jobs 2",
    )  # fmt: skip
    size.add_argument(
        "--full", dest="full", action="store_true",
        help="full sizes: seconds to an hour and a half each, two_timescale about 3.5 hours of one core (an "
        "interrupted run resumes where it stopped); all 18 about 8 hours of CPU, about 4 on two cores with --jobs 2",
    )  # fmt: skip
    audit.set_defaults(full=False)
    audit.add_argument(
        "--out",
        default=None,
        help="run folder (default: runs/audit-<size>-seed<seed>); a folder holding a run of another size or seed is "
        "refused unless --force",
    )
    audit.add_argument("--only", type=_names, default=None, help="comma-separated experiment names (default: all)")
    audit.add_argument("--seed", type=seed, default=0, help="the seed field of every experiment's Config (default 0)")
    audit.add_argument(
        "--force",
        action="store_true",
        help="rerun experiments already in the run folder (starts over a corrupt one; a run of another size or seed "
        "there is moved to its previous/ folder)",
    )
    audit.add_argument(
        "--threads", type=positive_int, default=None, help="torch threads (default: 1 quick, torch's full)"
    )
    audit.add_argument(
        "--jobs",
        type=jobs,
        default=1,
        help="worker processes, each running one experiment at a time ('auto': one per CPU; default 1)",
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
        from implicit_em._cli_demo import demo

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
