"""Command line: ``implicit-em windtunnel {train,oracle,summarize} ...`` (or ``python -m implicit_em.windtunnel``).

Examples::

    python -m implicit_em.windtunnel train --preset quick --task bijection --n-symbols 20 --out runs/bij20
    python -m implicit_em.windtunnel train --preset quick --task hmm --threads 2 --out runs/hmm
    python -m implicit_em.windtunnel train --preset full --task bijection --out runs/bij20-full   # GPU sizes
    python -m implicit_em.windtunnel oracle --n-symbols 20
    python -m implicit_em.windtunnel summarize runs/bij20 runs/hmm --out benchmarks/results/windtunnel_quick.json

Every field of :class:`~implicit_em.windtunnel.config.WindTunnelConfig` is an option (``--field-name VALUE``);
those given override the preset, and ``--help`` shows each preset's value; a true/false field is a flag
(``--replacement`` / ``--no-replacement``; ``--replacement false`` also works). Running ``train`` again with the
same options and ``--out`` resumes (also after a kill or Ctrl-C: the run stops at a step boundary, saves, and exits
130). A bad setting prints one line naming it and exits 2, as does an unreadable checkpoint; a run whose loss stops
being finite prints the step and exits 1.
"""

import argparse
import dataclasses
import json
import logging
import sys
import typing
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_PRESET_NAMES = ("full", "quick", "tiny")  # WindTunnelConfig's class methods; importing it imports torch


def _presets() -> dict[str, Any]:
    from implicit_em.windtunnel.config import WindTunnelConfig

    return {name: getattr(WindTunnelConfig, name) for name in _PRESET_NAMES}


def _parse_bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _parse_ints(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x.strip())


def _parse_optional_int(text: str) -> int | None:
    return None if text.lower() == "none" else int(text)


def _field_parser(annotation: Any) -> Any:
    if annotation is bool:
        return _parse_bool
    if annotation in (int, float, str):
        return annotation
    if typing.get_origin(annotation) is tuple:
        return _parse_ints
    return _parse_optional_int  # int | None


def summarize_run(run_dir: Path) -> dict[str, Any]:
    """The small summary of a run directory: config, final metrics without curves, timing, load, oracle."""
    m = json.loads((run_dir / "metrics.json").read_text())
    final = {name: {k: v for k, v in f.items() if k != "curves"} for name, f in m["final"].items()}
    keep = (
        "n_params",
        "reference_transformer_params",
        "steps_done",
        "complete",
        "wall_s",
        "cpu_s",
        "threads",
        "device",
    )
    out = {"config": m["config"], "final": final, **{k: m.get(k) for k in keep}}
    out.update(oracle=m.get("oracle"), loadavg_start=m.get("loadavg_start"), loadavg_end=m.get("loadavg_end"))
    out["versions"] = m.get("versions")
    return out


_PROG = "python -m implicit_em.windtunnel"


def _preset_values(name: str) -> str:
    """``quick 20, full 64, tiny 8``, or ``20 in every preset``: what each preset sets the field to."""
    values = {preset: getattr(make(), name) for preset, make in sorted(_presets().items())}
    if len(set(map(repr, values.values()))) == 1:
        return f"{next(iter(values.values()))!r} in every preset"
    return ", ".join(f"{preset} {value!r}" for preset, value in values.items())


def build_parser(prog: str = _PROG, train_options: bool = True) -> argparse.ArgumentParser:
    """The command's parser. ``train_options=False`` leaves out ``train``'s options, one per field of the config
    (whose module imports torch): enough for ``--help``, ``oracle``, ``summarize`` and a wrong command name."""
    parser = argparse.ArgumentParser(prog=prog, description="Train and read the Bayesian wind tunnels.")
    sub = parser.add_subparsers(dest="command", required=True)
    tr = sub.add_parser("train", help="train a model on a wind tunnel and write a run directory")
    if train_options:
        _add_train_options(tr)
    summ = sub.add_parser("summarize", help="collect the final numbers of run directories into one JSON file")
    summ.add_argument("run_dirs", nargs="+")
    summ.add_argument("--out", required=True)
    orc = sub.add_parser("oracle", help="print the no-context oracle (entropy MAE, bits) of bijection tasks")
    orc.add_argument("--n-symbols", type=int, default=20)
    return parser


def _add_train_options(tr: argparse.ArgumentParser) -> None:
    from implicit_em.windtunnel.config import LOSSES, MODELS, TASKS, WindTunnelConfig

    tr.add_argument("--preset", choices=_PRESET_NAMES, default="quick")
    tr.add_argument("--out", required=True, help="run directory (resumes if it holds a checkpoint)")
    tr.add_argument("--no-progress", action="store_true", help="no progress bar")
    hints = typing.get_type_hints(WindTunnelConfig)
    choices = {"task": TASKS, "model": MODELS, "loss": LOSSES}
    for f in dataclasses.fields(WindTunnelConfig):
        option = "--" + f.name.replace("_", "-")
        presets = _preset_values(f.name)
        if hints[f.name] is bool:  # a flag; an explicit true/false value is accepted too
            tr.add_argument(option, dest=f.name, nargs="?", const=True, type=_parse_bool, default=None,
                            help=f"set it (or give true/false); presets: {presets}")  # fmt: skip
            tr.add_argument("--no-" + option[2:], dest=f.name, action="store_const", const=False, help="unset it")
            continue
        tr.add_argument(
            option,
            dest=f.name,
            type=_field_parser(hints[f.name]),
            choices=choices.get(f.name),
            default=None,
            help=f"presets: {presets}",
        )


def _error(command: str, message: str, code: int, prog: str = _PROG) -> int:
    """One line on stderr, no traceback, and the exit code (2: a bad argument or run directory; 1: a failed run)."""
    print(f"{prog} {command}: error: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None, prog: str = _PROG) -> int:
    """Run a command; exit code 0 on success, 2 for a bad argument or run directory, 1 when training diverges.

    An interrupt (Ctrl-C, SIGTERM) is not caught here: ``train`` saves at a step boundary and re-raises
    KeyboardInterrupt, which reaches the caller (the ``__main__`` guard turns it into exit status 130).
    """
    given = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in given if not a.startswith("-")), None)
    args = build_parser(prog, train_options=command == "train").parse_args(given)
    if args.command == "oracle":
        from implicit_em.windtunnel.tasks import BijectionTask

        try:
            tasks = {r: BijectionTask(args.n_symbols, replacement=r) for r in (False, True)}
        except ValueError as e:
            return _error("oracle", str(e), 2, prog)
        out = {f"replacement={r}": task.no_context_mae() for r, task in tasks.items()}
        print(json.dumps({"n_symbols": args.n_symbols, "no_context_entropy_mae_bits": out}, indent=2))
        return 0
    if args.command == "summarize":
        missing = [d for d in args.run_dirs if not (Path(d) / "metrics.json").is_file()]
        if missing:
            return _error("summarize", f"no metrics.json in {missing} (not finished run directories?)", 2, prog)
        runs = {Path(d).name: summarize_run(Path(d)) for d in args.run_dirs}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(runs, indent=2) + "\n")
        print(f"wrote {args.out} ({len(runs)} runs)")
        return 0
    from tqdm.contrib.logging import logging_redirect_tqdm

    from implicit_em.windtunnel.config import WindTunnelConfig
    from implicit_em.windtunnel.train import CheckpointError, NonFiniteLossError, _check_run_inputs, train

    overrides = {
        f.name: getattr(args, f.name) for f in dataclasses.fields(WindTunnelConfig) if getattr(args, f.name) is not None
    }
    try:
        config = _presets()[args.preset](**overrides)
        _check_run_inputs(config, args.out, None)
    except (TypeError, ValueError) as e:  # the config's checks name the setting; the option is --setting-name
        return _error("train", str(e), 2, prog)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        with logging_redirect_tqdm():  # log lines through tqdm.write, above the progress bar instead of through it
            result = train(config, args.out, progress=not args.no_progress)
    except CheckpointError as e:
        return _error("train", str(e), 2, prog)
    except NonFiniteLossError as e:
        return _error("train", str(e), 1, prog)
    summary = {name: {k: v for k, v in m.to_dict().items() if k != "curves"} for name, m in result.metrics.items()}
    report = {"run_dir": str(args.out), "steps": result.steps_done, "n_params": result.n_params, "final": summary}
    report.update({k: result.extra[k] for k in ("oracle", "wall_s", "cpu_s")})
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # train already saved a checkpoint at a step boundary and logged how to resume
        sys.exit(130)
