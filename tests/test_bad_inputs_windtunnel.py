"""The wind tunnel's bad-input battery (issue 11): one row per call a user might make, in the format of
``tests/_battery.py``.

Bad settings of :class:`WindTunnelConfig` raise ``ValueError`` (a bad value) or ``TypeError`` (a wrong type) that
names the setting; the command line prints one line naming the option and exits 2. A checkpoint that cannot be
trusted or read is refused with its path and how to start over; a run whose loss stops being finite stops with
the step and the loss. The rows that must keep working train every task, model and loss at tiny sizes.
"""

import contextlib
import io
import json
import math
import os
import signal
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from _battery import Case, ids
from implicit_em.windtunnel.__main__ import main
from implicit_em.windtunnel.config import LOSSES, MODELS, TASKS, WindTunnelConfig
from implicit_em.windtunnel.train import TrainResult, train

INF, NAN = float("inf"), float("nan")


def _tiny(**kw: Any) -> Callable[[], WindTunnelConfig]:
    return lambda: WindTunnelConfig.tiny(**kw)


def _fit(config: WindTunnelConfig) -> TrainResult:
    return train(config, None, progress=False)


def _finite_run(result: TrainResult) -> bool:
    numbers = [v for m in result.metrics.values() for v in (m.kl, m.entropy_mae_per_sample)]
    return result.complete and all(math.isfinite(x) for x in numbers)


def _strict_json(path: Path) -> Any:
    def refuse(token: str) -> None:
        raise ValueError(f"{token} is not JSON")

    return json.loads(path.read_text(), parse_constant=refuse)


def _fit_on_disk(config: WindTunnelConfig) -> dict[str, Any]:
    """Train into a fresh directory; return metrics.json read as strict JSON, and the checkpoint's step."""
    with tempfile.TemporaryDirectory() as d:
        train(config, d, progress=False)
        out = _strict_json(Path(d) / "metrics.json")
        out["checkpoint_step"] = torch.load(Path(d) / "checkpoint.pt", weights_only=True)["step"]
        return out


def _cli(*argv: str) -> tuple[int, list[str]]:
    """Run the command line in-process: its exit code and the lines it wrote to stderr."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            code = main(list(argv))
        except SystemExit as exit_:  # argparse's own errors
            code = int(exit_.code or 0)
    return code, err.getvalue().strip().splitlines()


def _cli_train(*options: str) -> tuple[int, list[str]]:
    with tempfile.TemporaryDirectory() as d:
        return _cli("train", "--preset", "tiny", "--out", d, "--no-progress", "--steps", "2", *options)


def _exits_2_naming(word: str) -> Callable[[tuple[int, list[str]]], bool]:
    """The CLI exited 2, and its last stderr line is an error naming ``word``."""
    return lambda out: out[0] == 2 and bool(out[1]) and "error" in out[1][-1] and word in out[1][-1]


def _one_line_exit(code: int, word: str) -> Callable[[tuple[int, list[str]]], bool]:
    """The CLI wrote exactly one stderr line, naming ``word``, and exited ``code`` (no traceback)."""
    return lambda out: out[0] == code and len(out[1]) == 1 and word in out[1][0]


def _last_line_exit(code: int, word: str) -> Callable[[tuple[int, list[str]]], bool]:
    """The CLI exited ``code`` and its last stderr line (after any progress log) names ``word``."""
    return lambda out: out[0] == code and bool(out[1]) and word in out[1][-1] and "Traceback" not in "".join(out[1])


# ---------------------------------------------------------------------------------------------- run directories


def _with_run_dir(prepare: Callable[[Path], None], config: WindTunnelConfig) -> Callable[[], Any]:
    def call() -> Any:
        with tempfile.TemporaryDirectory() as d:
            prepare(Path(d))
            return train(config, d, progress=False)

    return call


def _truncate(run_dir: Path) -> None:
    train(WindTunnelConfig.tiny(steps=3), run_dir, progress=False)
    data = (run_dir / "checkpoint.pt").read_bytes()
    (run_dir / "checkpoint.pt").write_bytes(data[: len(data) // 3])


def _three_steps(run_dir: Path) -> None:
    train(WindTunnelConfig.tiny(steps=3), run_dir, progress=False)


def _run_dir_is_a_file() -> TrainResult:
    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "f").write_text("")
        return train(WindTunnelConfig.tiny(steps=2), Path(d) / "f", progress=False)


class _RunsCode:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return exec, ("raise SystemExit('the crafted checkpoint ran code')",)


def _crafted(run_dir: Path) -> None:
    torch.save({"config": WindTunnelConfig.tiny(steps=3).to_dict(), "payload": _RunsCode()}, run_dir / "checkpoint.pt")


def _resume_is_exact() -> bool:
    """Stop between evaluations, resume: history (train_loss included) and weights equal a straight run's."""
    c = WindTunnelConfig.tiny(steps=12, checkpoint_every=5, eval_every=4)
    with tempfile.TemporaryDirectory() as d:
        straight = train(c, Path(d) / "a", progress=False)
        train(c, Path(d) / "b", progress=False, stop_after=6)
        resumed = train(c, Path(d) / "b", progress=False)
        w = [torch.load(Path(d) / r / "checkpoint.pt", weights_only=True)["model"] for r in "ab"]
    strip = [
        [{k: v for k, v in h.items() if k not in ("elapsed_s", "cpu_s")} for h in r.history]
        for r in (straight, resumed)
    ]
    return strip[0] == strip[1] and all(torch.equal(w[0][k], w[1][k]) for k in w[0])


def _interrupt_then_resume() -> bool:
    """SIGINT mid-run: KeyboardInterrupt reaches the caller, a checkpoint is kept, and resuming is exact."""
    c = WindTunnelConfig.tiny(steps=100_000, checkpoint_every=50_000, eval_every=50_000)
    with tempfile.TemporaryDirectory() as d:
        timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT))
        timer.start()
        try:
            train(c, Path(d) / "a", progress=False)
            return False  # the interrupt was swallowed
        except KeyboardInterrupt:
            pass
        finally:
            timer.join()
        at = torch.load(Path(d) / "a" / "checkpoint.pt", weights_only=True)["step"]
        a = train(c, Path(d) / "a", progress=False, stop_after=at + 3)
        b = train(c, Path(d) / "b", progress=False, stop_after=at + 3)
        wa, wb = (torch.load(Path(d) / r / "checkpoint.pt", weights_only=True)["model"] for r in "ab")
    return 0 < at and a.steps_done == b.steps_done == at + 3 and all(torch.equal(wa[k], wb[k]) for k in wa)


# ---------------------------------------------------------------------------------------------- the table

_CONFIG_ERRORS = [
    # optimisation (finding 4: `--lr inf`, `--grad-clip nan` trained into NaN metrics and exited 0)
    Case("lr inf", _tiny(lr=INF), ValueError, r"^lr must be .*finite.*got inf"),
    Case("lr nan", _tiny(lr=NAN), ValueError, r"^lr must be .*got nan"),
    Case("lr 0", _tiny(lr=0.0), ValueError, r"^lr must be .*> 0.*got 0"),
    Case("lr negative", _tiny(lr=-1e-3), ValueError, r"^lr must be"),
    Case("min_lr nan", _tiny(min_lr=NAN), ValueError, r"^min_lr must be"),
    Case("min_lr negative", _tiny(min_lr=-1.0), ValueError, r"^min_lr must be"),
    Case("min_lr above lr", _tiny(lr=1e-3, min_lr=1e-2), ValueError, r"^min_lr .*<= lr"),
    Case("grad_clip nan", _tiny(grad_clip=NAN), ValueError, r"^grad_clip must be .*got nan"),
    Case("grad_clip 0", _tiny(grad_clip=0.0), ValueError, r"^grad_clip must be .*> 0"),
    Case("grad_clip negative", _tiny(grad_clip=-1.0), ValueError, r"^grad_clip must be"),
    Case("grad_clip inf (not JSON)", _tiny(grad_clip=INF), ValueError, r"^grad_clip must be .*finite"),
    Case("weight_decay negative", _tiny(weight_decay=-0.1), ValueError, r"^weight_decay must be"),
    Case("weight_decay inf", _tiny(weight_decay=INF), ValueError, r"^weight_decay must be .*finite"),
    Case("lr a string", _tiny(lr="1e-3"), TypeError, r"^lr must be a (real )?number, got '1e-3'"),
    # model sizes (finding 4: n_heads 0 was a ZeroDivisionError, d_model 0 an unpacking error)
    Case("n_heads 0", _tiny(n_heads=0), ValueError, r"^n_heads must be >= 1, got 0"),
    Case("n_heads negative", _tiny(n_heads=-2), ValueError, r"^n_heads must be >= 1"),
    Case("d_model 0", _tiny(d_model=0), ValueError, r"^d_model must be >= 1, got 0"),
    Case(
        "d_model not divisible by n_heads", _tiny(d_model=30, n_heads=4), ValueError, r"d_model \(30\).*n_heads \(4\)"
    ),
    Case("d_ff 0", _tiny(d_ff=0), ValueError, r"^d_ff must be >= 1"),
    Case("n_layers negative", _tiny(n_layers=-1), ValueError, r"^n_layers must be >= 0"),
    Case("n_heads a float", _tiny(n_heads=2.0), TypeError, r"^n_heads must be an integer, got 2\.0"),
    # the schedule and evaluation
    Case("steps 0", _tiny(steps=0), ValueError, r"^steps must be >= 1, got 0"),
    Case("steps negative", _tiny(steps=-5), ValueError, r"^steps must be >= 1, got -5"),
    Case("steps fractional", _tiny(steps=2.5), TypeError, r"^steps must be an integer, got 2\.5"),
    Case("steps a bool", _tiny(steps=True), TypeError, r"^steps must be an integer, got True"),
    Case("steps a string", _tiny(steps="10"), TypeError, r"^steps must be an integer, got '10'"),
    Case("batch_size 0", _tiny(batch_size=0), ValueError, r"^batch_size must be >= 1"),
    Case("batch_size negative", _tiny(batch_size=-1), ValueError, r"^batch_size must be >= 1"),
    Case("warmup_steps negative", _tiny(warmup_steps=-1), ValueError, r"^warmup_steps must be >= 0"),
    Case("eval_every 0", _tiny(eval_every=0), ValueError, r"^eval_every must be >= 1"),
    Case("eval_size 0", _tiny(eval_size=0), ValueError, r"^eval_size must be >= 1"),
    Case("checkpoint_every 0", _tiny(checkpoint_every=0), ValueError, r"^checkpoint_every must be >= 1"),
    Case("seed negative", _tiny(seed=-1), ValueError, r"^seed must be >= 0 and < \d+, got -1"),
    Case("seed too large", _tiny(seed=2**64), ValueError, r"^seed must be"),
    Case("eval_seed a float", _tiny(eval_seed=1.5), TypeError, r"^eval_seed must be an integer"),
    # the task
    Case("unknown task", _tiny(task="copy"), ValueError, r"^task must be one of .*'copy'"),
    Case("unknown model", _tiny(model="cnn"), ValueError, r"^model must be one of .*'cnn'"),
    Case("unknown loss", _tiny(loss="hinge"), ValueError, r"^loss must be one of .*'hinge'"),
    Case("task not a string", _tiny(task=1), ValueError, r"^task must be one of .*got 1"),
    Case("n_symbols 1", _tiny(n_symbols=1), ValueError, r"^n_symbols must be >= 2, got 1"),
    Case("n_obs 0", _tiny(task="hmm", n_obs=0), ValueError, r"^n_obs must be >= 1, got 0"),
    Case("test_lengths has 0", _tiny(task="hmm", test_lengths=(6, 0)), ValueError, r"^test_lengths .*>= 1.*0"),
    Case("test_lengths a string", _tiny(test_lengths="30"), TypeError, r"^test_lengths must be a tuple of integers"),
    Case("replacement a string", _tiny(replacement="yes"), TypeError, r"^replacement must be a bool, got 'yes'"),
    # where it runs
    Case("threads 0", _tiny(threads=0), ValueError, r"^threads must be None or >= 1, got 0"),
    Case("device unknown", _tiny(device="gpu0"), ValueError, r"^device must be .*'gpu0'"),
    Case("device empty", _tiny(device=""), ValueError, r"^device must be"),
    # the constructors around the dataclass
    Case(
        "preset with an unknown setting", lambda: WindTunnelConfig.quick(learning_rate=1e-3), TypeError, "learning_rate"
    ),
    Case(
        "from_dict with an unknown key",
        lambda: WindTunnelConfig.from_dict({"lr": 1e-3, "depth": 2}),
        ValueError,
        r"unknown .*'depth'",
    ),
    Case(
        "train given a dict",
        lambda: train({"steps": 2}, None, progress=False),
        TypeError,
        r"^config must be a WindTunnelConfig",
    ),
    Case(
        "train stop_after negative",
        lambda: train(WindTunnelConfig.tiny(), None, False, -1),
        ValueError,
        r"^stop_after must be",
    ),
]

if not torch.cuda.is_available():
    _CONFIG_ERRORS.append(
        Case(
            "device cuda without CUDA",
            lambda: _fit(WindTunnelConfig.tiny(steps=1, device="cuda")),
            ValueError,
            r"device 'cuda'.*not available",
        )
    )

_RUN_ERRORS = [
    # finding 2: the resume ran whatever a crafted checkpoint pickled
    Case(
        "crafted checkpoint refused",
        _with_run_dir(_crafted, WindTunnelConfig.tiny(steps=3)),
        ValueError,
        r"checkpoint\.pt.*refus",
    ),
    # finding 3: OSError / EOFError without the file's name
    Case(
        "empty checkpoint",
        _with_run_dir(lambda d: (d / "checkpoint.pt").write_bytes(b""), WindTunnelConfig.tiny(steps=3)),
        ValueError,
        r"checkpoint\.pt.*delete it",
    ),
    Case(
        "truncated checkpoint",
        _with_run_dir(_truncate, WindTunnelConfig.tiny(steps=3)),
        ValueError,
        r"checkpoint\.pt.*delete it",
    ),
    Case(
        "checkpoint of another config",
        _with_run_dir(_three_steps, WindTunnelConfig.tiny(steps=4)),
        ValueError,
        r"checkpoint\.pt .*different configuration",
    ),
    Case("run_dir is a file", _run_dir_is_a_file, ValueError, r"^run_dir .* is not a directory"),
    # finding 5: a huge lr trained into NaN (now: a clear stop naming the step and the loss)
    Case(
        "lr 1e30 diverges",
        lambda: _fit(WindTunnelConfig.tiny(lr=1e30, warmup_steps=0)),
        FloatingPointError,
        r"step \d+.*loss",
    ),
    Case(
        "lr 1e6 diverges",
        lambda: _fit(WindTunnelConfig.tiny(lr=1e6, warmup_steps=0, steps=50)),
        FloatingPointError,
        r"step \d+.*loss",
    ),
]

_CLI = [
    Case("cli --lr inf", lambda: _cli_train("--lr", "inf"), check=_one_line_exit(2, "lr must be")),
    Case("cli --grad-clip nan", lambda: _cli_train("--grad-clip", "nan"), check=_one_line_exit(2, "grad_clip")),
    Case("cli --grad-clip inf", lambda: _cli_train("--grad-clip", "inf"), check=_one_line_exit(2, "grad_clip")),
    Case("cli --n-heads 0", lambda: _cli_train("--n-heads", "0"), check=_one_line_exit(2, "n_heads")),
    Case("cli --d-model 0", lambda: _cli_train("--d-model", "0"), check=_one_line_exit(2, "d_model")),
    Case(
        "cli --d-model 30 --n-heads 4",
        lambda: _cli_train("--d-model", "30", "--n-heads", "4"),
        check=_one_line_exit(2, "n_heads"),
    ),
    Case("cli --steps -1", lambda: _cli_train("--steps", "-1"), check=_one_line_exit(2, "steps")),
    Case("cli --batch-size 0", lambda: _cli_train("--batch-size", "0"), check=_one_line_exit(2, "batch_size")),
    Case("cli --eval-every 0", lambda: _cli_train("--eval-every", "0"), check=_one_line_exit(2, "eval_every")),
    Case("cli --threads 0", lambda: _cli_train("--threads", "0"), check=_one_line_exit(2, "threads")),
    Case("cli --device gpu0", lambda: _cli_train("--device", "gpu0"), check=_one_line_exit(2, "device")),
    Case("cli --min-lr above --lr", lambda: _cli_train("--min-lr", "1"), check=_one_line_exit(2, "min_lr")),
    Case(
        "cli --lr 1e30 diverges",
        lambda: _cli_train("--lr", "1e30", "--warmup-steps", "0"),
        check=_last_line_exit(1, "loss"),
    ),
    Case("cli --task copy (argparse)", lambda: _cli_train("--task", "copy"), check=_exits_2_naming("--task")),
    Case("cli --steps abc (argparse)", lambda: _cli_train("--steps", "abc"), check=_exits_2_naming("--steps")),
    Case("cli oracle --n-symbols 1", lambda: _cli("oracle", "--n-symbols", "1"), check=_one_line_exit(2, "n_symbols")),
    Case(
        "cli summarize a missing run",
        lambda: _cli("summarize", "/nonexistent/run", "--out", os.devnull),
        check=_one_line_exit(2, "metrics.json"),
    ),
]

_FITS = [
    *[
        Case(
            f"fit {task}/{model}/{loss} steps 1",
            lambda t=task, m=model, lo=loss: _fit(WindTunnelConfig.tiny(task=t, model=m, loss=lo, steps=1)),
            check=_finite_run,
        )
        for task in TASKS
        for model in MODELS
        for loss in LOSSES
    ],
    Case(
        "fit batch_size 1 eval_size 1",
        lambda: _fit(WindTunnelConfig.tiny(steps=2, batch_size=1, eval_size=1)),
        check=_finite_run,
    ),
    Case(
        "fit warmup 0, min_lr == lr",
        lambda: _fit(WindTunnelConfig.tiny(steps=2, warmup_steps=0, min_lr=1e-3)),
        check=_finite_run,
    ),
    Case(
        "fit grad_clip 1e30 (no clipping)",
        lambda: _fit(WindTunnelConfig.tiny(steps=2, grad_clip=1e30)),
        check=_finite_run,
    ),
    Case("fit n_layers 0", lambda: _fit(WindTunnelConfig.tiny(steps=2, n_layers=0)), check=_finite_run),
    Case("fit replacement", lambda: _fit(WindTunnelConfig.tiny(steps=2, replacement=True)), check=_finite_run),
    Case(
        "fit hmm no test_lengths",
        lambda: _fit(WindTunnelConfig.tiny(task="hmm", steps=2, test_lengths=())),
        check=_finite_run,
    ),
    Case(
        "fit numpy integers and floats",
        lambda: _fit(WindTunnelConfig.tiny(steps=np.int64(2), lr=np.float32(1e-3), replacement=np.bool_(False))),
        check=lambda r: _finite_run(r) and (type(r.config.steps), type(r.config.lr)) == (int, float),
    ),
    Case(
        "fit int lr",
        lambda: WindTunnelConfig.tiny(lr=1, min_lr=0),
        check=lambda c: isinstance(c.lr, float) and c.lr == 1.0,
    ),
    Case(
        "test_lengths list becomes a tuple",
        _tiny(task="hmm", test_lengths=[6, 8]),
        check=lambda c: c.test_lengths == (6, 8),
    ),
    Case(
        "from_dict round trip",
        lambda: WindTunnelConfig.from_dict(WindTunnelConfig.tiny().to_dict()),
        check=lambda c: c == WindTunnelConfig.tiny(),
    ),
    Case(
        "fit on disk is strict JSON",
        lambda: _fit_on_disk(WindTunnelConfig.tiny(task="hmm", steps=3, loss="sigmoid")),
        check=lambda m: m["complete"] and m["checkpoint_step"] == 3,
    ),
    Case("cli train tiny steps 2", lambda: _cli_train(), check=lambda out: out[0] == 0),
    Case("cli train --grad-clip 1e30", lambda: _cli_train("--grad-clip", "1e30"), check=lambda out: out[0] == 0),
    # finding 1: the running train_loss survives a resume (bitwise)
    Case("resume is exact, train_loss included", _resume_is_exact, check=bool),
    # finding 6 (the in-process half; the SIGKILL child process is in test_windtunnel_faults.py)
    Case("sigint re-raised, resume exact", _interrupt_then_resume, check=bool),
]

CASES = [*_CONFIG_ERRORS, *_RUN_ERRORS, *_CLI, *_FITS]


@pytest.mark.parametrize("case", CASES, ids=ids(CASES))
def test_battery(case: Case) -> None:
    case.check_it()


def test_battery_counts() -> None:
    """The table's size, for the report: clear errors (raised, or a CLI exit with one line) and fits."""
    errors = len(_CONFIG_ERRORS) + len(_RUN_ERRORS) + len(_CLI)
    assert all(c.kind == "error" for c in [*_CONFIG_ERRORS, *_RUN_ERRORS])
    cuda = int(torch.cuda.is_available())  # the "device cuda without CUDA" row exists only without CUDA
    assert (len(CASES), errors, len(_FITS)) == (107 - cuda, 76 - cuda, 31)
