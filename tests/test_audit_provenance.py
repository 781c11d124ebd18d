"""The code hash covers what runs: prose never invalidates a record, a change of behaviour invalidates exactly the
claims that run it."""

import shutil
from pathlib import Path

import pytest

import implicit_em
from implicit_em.audit import EXPERIMENTS, provenance

_PACKAGE = Path(implicit_em.__file__).parent


@pytest.fixture(scope="module")
def hashes_now() -> dict[str, str | None]:
    return {e.name: provenance.code_hash(provenance.code_files(e.run.__module__, _PACKAGE)) for e in EXPERIMENTS}


def _copy(tmp_path: Path) -> Path:
    root = tmp_path / "implicit_em"
    shutil.copytree(_PACKAGE, root, ignore=shutil.ignore_patterns("__pycache__"))
    return root


def _hashes(root: Path) -> dict[str, str | None]:
    return {e.name: provenance.code_hash(provenance.code_files(e.run.__module__, root)) for e in EXPERIMENTS}


def test_the_installed_package_hashes_as_its_copy(hashes_now: dict[str, str | None]) -> None:
    assert all(h is not None for h in hashes_now.values())
    assert hashes_now == {e.name: provenance.code_hash(provenance.code_files(e.run.__module__)) for e in EXPERIMENTS}


def test_prose_never_changes_a_hash(tmp_path: Path, hashes_now: dict[str, str | None]) -> None:
    """Docstrings, comments, blank lines, reformatting and export lists of every audited file: no hash moves."""
    root = _copy(tmp_path)
    for path in sorted(root.rglob("*.py")):
        text = path.read_text()
        text = text.replace('"""', '"""Edited prose. ', 1)  # the module docstring (or the first docstring)
        text = "# a new comment\n\n" + text.replace("\n\n\n", "\n\n\n# another comment\n\n")
        text = text.replace("__all__ = [", '__all__ = ["an_added_name", ', 1)
        path.write_text(text)
    assert _hashes(root) == hashes_now


def _change(root: Path, module: str, old: str, new: str) -> None:
    path = root.joinpath(*module.split(".")[1:]).with_suffix(".py")
    text = path.read_text()
    assert text.count(old) == 1, f"{old!r} is not one line of {path}"
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize(
    ("module", "old", "new"),
    [
        # one character of a testbed's arithmetic line: the one-head setting's logged steps
        ("implicit_em.audit.testbeds.one_head", "if step % log_every == 0", "if step % log_every == 1"),
        # one character of a library line: the open-set law's sign
        (
            "implicit_em.laws",
            "return -open_set_responsibilities(d, null_distance, dim=dim)",
            "return +open_set_responsibilities(d, null_distance, dim=dim)",
        ),
    ],
)
def test_a_change_of_behaviour_invalidates_exactly_the_claims_that_run_it(
    tmp_path: Path, hashes_now: dict[str, str | None], module: str, old: str, new: str
) -> None:
    root = _copy(tmp_path)
    runs_it = {e.name for e in EXPERIMENTS if module in provenance.code_files(e.run.__module__, _PACKAGE)}
    assert runs_it, f"no claim runs {module}: the case tests nothing"
    assert runs_it != {e.name for e in EXPERIMENTS}, "every claim runs it: the case cannot show 'exactly'"
    _change(root, module, old, new)
    after = _hashes(root)
    assert {name for name in after if after[name] != hashes_now[name]} == runs_it


def test_code_text_keeps_arithmetic_and_drops_prose() -> None:
    base = 'def f(x):\n    """Doc."""\n    return x + 1  # one\n'
    assert provenance.code_text(base) == provenance.code_text('def f(x):\n    """Other doc."""\n    return (x+1)\n')
    assert provenance.code_text(base) != provenance.code_text('def f(x):\n    """Doc."""\n    return x + 2\n')
    assert provenance.code_text('def f():\n    """Only a docstring."""\n') == provenance.code_text(
        "def f():\n    pass\n"
    )


def test_a_claims_hash_holds_its_own_code_and_no_other_claims() -> None:
    """The registry imports every claim; a claim's hash must not follow it (``from implicit_em.audit import seeds``
    executes ``implicit_em/audit/__init__.py``, which only re-exports)."""
    for e in EXPERIMENTS:
        files = provenance.code_files(e.run.__module__, _PACKAGE)
        claims = {name for name in files if name.startswith("implicit_em.audit.claims.")}
        assert claims == {e.run.__module__}, e.name
        assert "implicit_em.audit" not in files and "implicit_em.audit.testbeds" not in files
