"""Shared by the report tests: a small valid PNG, and a run folder whose results exercise every part of the page."""

import json
import struct
import zlib
from pathlib import Path
from typing import Any


def png(width: int, height: int) -> bytes:
    """A valid grey PNG of ``width`` x ``height`` pixels (what a browser can decode, unlike a bare signature)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + b"\xc0" * width for _ in range(height))
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def criterion(metric: str, measured: float, comparison: str, threshold: float, passed: bool) -> dict[str, Any]:
    return {"metric": metric, "comparison": comparison, "threshold": threshold, "measured": measured, "passed": passed}


def results(command: list[str] | None = None) -> dict[str, Any]:
    """Two experiments: one SUPPORTED with TeX in its claim and a wide figure, one REFUTED with a failed criterion."""
    theorem = {
        "name": "theorem1",
        "title": "Theorem 1: responsibilities are gradients",
        "claim": "the gradient satisfies $\\partial L/\\partial d_{j}=-r_{j}$ for $W_{Q}$",
        "source": "paper §4.1",
        "verdict": "SUPPORTED",
        "summary": "holds to round-off",
        "seconds": 1.5,
        "metrics": {"max_residual_float64": 2.5e-13, "rows_per_case": 256, "brand_new_metric_key": 3},
        "metric_info": {  # as the claim declared them; brand_new_metric_key is not declared
            "max_residual_float64": {"label": "max |∂L/∂d + r|, float64", "unit": "absolute", "note": ""},
            "rows_per_case": {"label": "rows per case", "unit": "count", "note": ""},
        },
        "criteria": [criterion("max |∂L/∂d + r| (eps units)", 1.0, "<=", 16.0, True)],
        "figures": ["figures/theorem1.png"],
        "config": {"seed": 0, "rows": 256},
    }
    escape = {
        "name": "open_set",
        "title": "The closed world",
        "verdict": "REFUTED",
        "summary": "the null component does not beat 1 − max r",
        "metrics": {"auroc_gain_null_mean": -0.1},
        "criteria": [
            criterion("C2: AUROC gain of r₀", -0.1, ">=", 0.05, False),
            criterion("accuracy gap", 0.006, "<", 0.02, True),
        ],
    }
    prov: dict[str, Any] = {"implicit_em": "0.1.0", "commit": "0123456789abcdef", "dirty": True}
    if command is not None:
        prov["command"] = command
    env = {"torch": "2.13.0", "numpy": "2.4", "python": "3.11.7", "torch_threads": 1, "date": "2026-12-01 17:54 UTC"}
    return {
        "size": "quick",
        "seed": 3,
        "provenance": prov,
        "environment": env,
        "experiments": {"theorem1": theorem, "open_set": escape},
    }


def run_folder(tmp_path: Path, command: list[str] | None = None) -> Path:
    run = tmp_path / "run"
    (run / "figures").mkdir(parents=True)
    (run / "figures" / "theorem1.png").write_bytes(png(1600, 40))
    (run / "results.json").write_text(json.dumps(results(command)))
    return run
