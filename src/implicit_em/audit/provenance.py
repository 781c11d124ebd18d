"""Where a result came from: the hash of its resolved config, the hash of the code it ran, and the git state.

- config hash: sha256 of the canonical JSON (sorted keys, no spaces) of the resolved ``Config``;
- code hash: sha256 over what runs in the experiment's module and in every ``implicit_em`` module it imports,
  followed transitively through their import statements (read with :mod:`ast`, nothing is executed). What runs
  is a file's syntax tree with its docstrings, other bare string statements and ``__all__`` removed
  (:func:`code_text`), so a docstring, a comment, a reformat or an export list never invalidates a record, and
  any change of behaviour (an operator, a constant, a call) does.
  An import names the module it imports: ``from implicit_em.mixture import _stats`` brings in
  ``mixture/__init__.py`` and ``mixture/_stats.py``, never ``implicit_em/__init__.py`` nor the audit's
  ``__init__`` files (the registry and its folders), which only re-export and would otherwise pull in the whole
  library or every claim (``from implicit_em.audit import seeds``). So a change
  to the library code an experiment uses changes its code hash, and a change elsewhere (another experiment,
  the registry, the report) does not;
- git state: the commit of the checkout holding the package's sources and whether those sources differ from it
  (``None`` when the package is not a tracked file of a git checkout, e.g. an installed wheel).
"""

import ast
import hashlib
import json
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from implicit_em.audit.core import _jsonable

__all__ = [
    "HASH_SCHEME",
    "code_files",
    "code_hash",
    "code_text",
    "config_dict",
    "config_hash",
    "git_state",
]

_PACKAGE = "implicit_em"
_ROOT = Path(__file__).resolve().parents[1]  # src/implicit_em
# packages whose __init__ only re-exports (the library's top level, the audit's registry and its folders): importing
# a name through them runs nothing a claim depends on, so they are not hashed (else every claim would hash every
# other: `from implicit_em.audit import seeds` executes the registry)
_REEXPORTS = ("implicit_em", "implicit_em.audit", "implicit_em.audit.claims", "implicit_em.audit.testbeds")


def config_dict(cfg: Any) -> dict[str, Any]:
    """The resolved config as JSON-ready values (tuples become lists)."""
    return dict(_jsonable(asdict(cfg)))


def config_hash(cfg: Any) -> str:
    """sha256 of the canonical JSON of the resolved config; raises TypeError if a field is not JSON-able."""
    text = json.dumps(config_dict(cfg), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _module_file(name: str, root: Path = _ROOT) -> Path | None:
    """The source file of ``implicit_em`` module ``name`` under ``root`` (the package folder), or None if the name
    is not a module (an attribute)."""
    parts = name.split(".")
    if parts[0] != _PACKAGE or name in _REEXPORTS:  # a package that only re-exports: `from implicit_em import x`
        return None
    base = root.joinpath(*parts[1:])
    for path in (base / "__init__.py", base.with_suffix(".py")):
        if path.is_file():
            return path
    return None


def _imported_names(path: Path, module: str) -> set[str]:
    """Every module name the import statements of ``path`` (module ``module``) may name, at any depth."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: from .x import y
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{node.module}" if node.module else anchor
            else:
                base = node.module or ""
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # the alias may be a submodule
    return names


#: Names the code hash of a record was computed with; a record of another scheme is rerun on resume.
HASH_SCHEME = "ast-v1"


def code_text(source: str | bytes, filename: str = "<source>") -> str:
    """The part of ``source`` that runs, as text: :func:`ast.dump` of its syntax tree without docstrings, bare
    string statements or ``__all__`` assignments (comments and formatting are not in the tree)."""
    tree = ast.parse(source, filename=filename)
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if not isinstance(body, list):
            continue
        kept = [stmt for stmt in body if not (_is_prose(stmt) or _is_export_list(stmt))]
        node.body = kept or [ast.Pass()]  # type: ignore[attr-defined]
    return ast.dump(tree, annotate_fields=True, include_attributes=False)


def _is_prose(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def _is_export_list(stmt: ast.stmt) -> bool:
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(stmt, ast.AnnAssign) else []
    return any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets)


def code_files(module: str, root: Path | None = None) -> dict[str, str]:
    """sha256 of what runs (:func:`code_text`) in each source file that experiment module ``module`` runs: its own
    file and the ``implicit_em`` modules it imports, transitively. Keys are module names; empty if the module has
    no source file. ``root``: the package folder to read (default: the installed package's, where ``module`` was
    imported from)."""
    if root is None:
        mod = sys.modules.get(module)
        start = getattr(mod, "__file__", None)
        path = Path(start) if start is not None and Path(start).is_file() else None
        root = _ROOT
    else:
        path = _module_file(module, root)
    if path is None:
        return {}
    files: dict[str, str] = {}
    todo = [(module, path)]
    while todo:
        name, path = todo.pop()
        if name in files:
            continue
        files[name] = hashlib.sha256(code_text(path.read_bytes(), str(path)).encode()).hexdigest()
        for imported in sorted(_imported_names(path, name)):
            found = _module_file(imported, root)
            if found is not None and imported not in files:
                todo.append((imported, found))
    return dict(sorted(files.items()))


def code_hash(files: dict[str, str]) -> str | None:
    """One sha256 over the per-file hashes of :func:`code_files` (None when there is no source to hash)."""
    if not files:
        return None
    return hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", str(_ROOT), *args], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def git_state() -> dict[str, Any] | None:
    """``{"commit": sha, "dirty": bool}`` for the checkout holding the package's sources, or None when they are
    not tracked by git (an installed package; a site-packages folder inside some other repository does not count).
    ``dirty``: a tracked file of the package differs from the commit, or an untracked, unignored file is there."""
    if _git("ls-files", "--error-unmatch", "__init__.py") is None:
        return None
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--", ".")
    if commit is None or status is None:
        return None
    return {"commit": commit.strip(), "dirty": bool(status.strip())}
