"""The audit's layers: claims -> testbeds -> core, nothing upward, no claim imports another claim."""

import ast
from pathlib import Path

import pytest

import implicit_em

_AUDIT = Path(implicit_em.__file__).parent / "audit"
_CORE = {"core", "metrics", "seeds", "stats", "plots", "provenance"}  # what claims and testbeds may build on


def _audit_imports(path: Path) -> set[str]:
    """The ``implicit_em.audit`` modules ``path`` imports, as names relative to the audit (``claims.theorem1``)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            bases = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        elif isinstance(node, ast.Import):
            bases = [a.name for a in node.names]
        else:
            continue
        for name in bases:
            if name.startswith("implicit_em.audit."):
                found.add(name.removeprefix("implicit_em.audit."))
    return found


def _layer(name: str) -> str:
    head = name.split(".")[0]
    return head if head in {"claims", "testbeds"} else "core" if head in _CORE else head


def _modules(folder: str) -> list[Path]:
    return sorted(p for p in (_AUDIT / folder).glob("*.py") if p.name != "__init__.py")


@pytest.mark.parametrize("path", _modules("claims"), ids=lambda p: p.stem)
def test_a_claim_imports_core_testbeds_and_the_library_only(path: Path) -> None:
    imported = _audit_imports(path)
    assert {n for n in imported if _layer(n) not in {"core", "testbeds"}} == set()


@pytest.mark.parametrize("path", _modules("testbeds"), ids=lambda p: p.stem)
def test_a_testbed_imports_core_other_testbeds_and_the_library_only(path: Path) -> None:
    assert {n for n in _audit_imports(path) if _layer(n) not in {"core", "testbeds"}} == set()


@pytest.mark.parametrize("name", sorted(_CORE))
def test_the_core_imports_nothing_above_it(name: str) -> None:
    assert {n for n in _audit_imports(_AUDIT / f"{name}.py") if _layer(n) != "core"} == set()


def test_the_library_never_imports_the_audit() -> None:
    package = Path(implicit_em.__file__).parent
    below = [p for p in package.rglob("*.py") if not p.is_relative_to(package / "audit")]
    below = [p for p in below if p.parent.name not in {"report", "experiments"} and p.name not in {"cli.py"}]
    offenders = []
    for path in below:
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            offenders += [f"{path.name}: {n}" for n in names if n.startswith("implicit_em.audit")]
    assert offenders == []


def test_the_layer_check_sees_a_claim_importing_a_claim(tmp_path: Path) -> None:
    """The planted violation: the check above would catch it."""
    bad = tmp_path / "bad.py"
    bad.write_text("from implicit_em.audit.claims.theorem1 import Config\nfrom implicit_em.audit import stats\n")
    assert {_layer(n) for n in _audit_imports(bad)} - {"core", "testbeds"} == {"claims"}


def _functions(path: Path) -> dict[str, int]:
    tree = ast.parse(path.read_text())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        f"{n.name}:{n.lineno}": (n.end_lineno or n.lineno) - n.lineno + 1
        for n in ast.walk(tree)
        if isinstance(n, kinds)
    }


@pytest.mark.parametrize("path", _modules("claims"), ids=lambda p: p.stem)
def test_a_claim_reads_in_a_page_or_so(path: Path) -> None:
    """At most 450 lines, no function over 60, and the declaration's parts by their names."""
    assert len(path.read_text().splitlines()) <= 450
    assert {k: v for k, v in _functions(path).items() if v > 60} == {}
    names = {k.split(":")[0] for k in _functions(path)}
    assert {"measure", "criteria", "summary", "run"} <= names


@pytest.mark.parametrize("path", _modules("testbeds"), ids=lambda p: p.stem)
def test_a_testbed_function_fits_on_a_screen(path: Path) -> None:
    assert {k: v for k, v in _functions(path).items() if v > 60} == {}
