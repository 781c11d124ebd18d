"""Where a result came from: the hash of its resolved config, the hash of the code it ran, and the git state.

- config hash: sha256 of the canonical JSON (sorted keys, no spaces) of the resolved ``Config``;
- code hash: sha256 over the source files of the experiment's module and of every ``implicit_em`` module it
  imports, followed transitively through their import statements (read with :mod:`ast`, nothing is executed).
  An import names the module it imports: ``from implicit_em.mixture import _stats`` brings in
  ``mixture/__init__.py`` and ``mixture/_stats.py``, never ``implicit_em/__init__.py`` (whose re-exports
  would otherwise pull in the whole library, e.g. through ``from implicit_em import gaussian``). So a change
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

from implicit_em.experiments._base import _jsonable

_PACKAGE = "implicit_em"
_ROOT = Path(__file__).resolve().parents[1]  # src/implicit_em


def config_dict(cfg: Any) -> dict[str, Any]:
    """The resolved config as JSON-ready values (tuples become lists)."""
    return dict(_jsonable(asdict(cfg)))


def config_hash(cfg: Any) -> str:
    """sha256 of the canonical JSON of the resolved config; raises TypeError if a field is not JSON-able."""
    text = json.dumps(config_dict(cfg), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def _module_file(name: str) -> Path | None:
    """The source file of ``implicit_em`` module ``name``, or None if the name is not a module (an attribute)."""
    parts = name.split(".")
    if parts[0] != _PACKAGE or len(parts) == 1:  # the top level only re-exports: `from implicit_em import x`
        return None
    base = _ROOT.joinpath(*parts[1:])
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


def code_files(module: str) -> dict[str, str]:
    """sha256 of each source file that experiment module ``module`` runs: its own file and the ``implicit_em``
    modules it imports, transitively. Keys are module names; empty if the module has no source file."""
    mod = sys.modules.get(module)
    start = getattr(mod, "__file__", None)
    if start is None or not Path(start).is_file():
        return {}
    files: dict[str, str] = {}
    todo = [(module, Path(start))]
    while todo:
        name, path = todo.pop()
        if name in files:
            continue
        files[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        for imported in sorted(_imported_names(path, name)):
            found = _module_file(imported)
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
