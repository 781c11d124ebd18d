"""Public or private, visibly: what a user may import says so in ``__all__``, internals are underscored, and the
docs name only paths that import.

A module is public when no part of its dotted name starts with an underscore (``implicit_em.mixture``), private
otherwise (``implicit_em.mixture._stats``, ``implicit_em.windtunnel.__main__``), as in scikit-learn
(``sklearn.mixture`` public, ``sklearn.mixture._gaussian_mixture`` private). Every public module lists exactly its
public names in ``__all__``: each exists, none is underscored, and every function and class the module defines
without an underscore is among them.
"""

import ast
import importlib
import inspect
import pkgutil
import re
from pathlib import Path
from types import ModuleType

import pytest

import implicit_em

_PACKAGE_DIR = Path(implicit_em.__file__).resolve().parent  # src/implicit_em
_REPO = _PACKAGE_DIR.parents[1]

#: The public modules. A new public module, or a module made private, changes this list on purpose.
PUBLIC_MODULES = [
    "implicit_em",
    "implicit_em.audit",
    "implicit_em.audit.claims",
    "implicit_em.audit.claims.advantage_ablation",
    "implicit_em.audit.claims.attention_law",
    "implicit_em.audit.claims.bayes_necessity",
    "implicit_em.audit.claims.correntropy_robustness",
    "implicit_em.audit.claims.cross_entropy_regime",
    "implicit_em.audit.claims.foundations",
    "implicit_em.audit.claims.gd_vs_em_step",
    "implicit_em.audit.claims.mixing_weight_escape",
    "implicit_em.audit.claims.normalisation_as_volume",
    "implicit_em.audit.claims.normalisation_necessity",
    "implicit_em.audit.claims.open_set",
    "implicit_em.audit.claims.same_optimum",
    "implicit_em.audit.claims.specialisation",
    "implicit_em.audit.claims.sticky_manifold",
    "implicit_em.audit.claims.sticky_sculpting",
    "implicit_em.audit.claims.theorem1",
    "implicit_em.audit.claims.two_timescale",
    "implicit_em.audit.claims.volume_collapse",
    "implicit_em.audit.core",
    "implicit_em.audit.metrics",
    "implicit_em.audit.plots",
    "implicit_em.audit.provenance",
    "implicit_em.audit.runner",
    "implicit_em.audit.seeds",
    "implicit_em.audit.stats",
    "implicit_em.audit.summaries",
    "implicit_em.audit.testbeds",
    "implicit_em.audit.testbeds.ablation",
    "implicit_em.audit.testbeds.ablation_arms",
    "implicit_em.audit.testbeds.ablation_figures",
    "implicit_em.audit.testbeds.ablation_metrics",
    "implicit_em.audit.testbeds.attention",
    "implicit_em.audit.testbeds.classifier",
    "implicit_em.audit.testbeds.escape",
    "implicit_em.audit.testbeds.five_clusters",
    "implicit_em.audit.testbeds.gradient_em",
    "implicit_em.audit.testbeds.identities",
    "implicit_em.audit.testbeds.manifold",
    "implicit_em.audit.testbeds.manifold_validation",
    "implicit_em.audit.testbeds.measured",
    "implicit_em.audit.testbeds.mixture_classes",
    "implicit_em.audit.testbeds.mixture_ends",
    "implicit_em.audit.testbeds.mixture_paths",
    "implicit_em.audit.testbeds.one_head",
    "implicit_em.audit.testbeds.ood",
    "implicit_em.audit.testbeds.ring_outliers",
    "implicit_em.audit.testbeds.sticky_fits",
    "implicit_em.audit.testbeds.sticky_manifold",
    "implicit_em.audit.testbeds.two_timescale",
    "implicit_em.audit.testbeds.two_timescale_companion",
    "implicit_em.audit.testbeds.unnormalised",
    "implicit_em.audit.testbeds.volume_arms",
    "implicit_em.cli",
    "implicit_em.diagnostics",
    "implicit_em.diagnostics.lightning",
    "implicit_em.distances",
    "implicit_em.experiments",
    "implicit_em.gaussian",
    "implicit_em.laws",
    "implicit_em.mixture",
    "implicit_em.objectives",
    "implicit_em.probes",
    "implicit_em.probes.attention",
    "implicit_em.report",
    "implicit_em.windtunnel",
    "implicit_em.windtunnel.config",
    "implicit_em.windtunnel.metrics",
    "implicit_em.windtunnel.models",
    "implicit_em.windtunnel.plots",
    "implicit_em.windtunnel.sticky",
    "implicit_em.windtunnel.tasks",
    "implicit_em.windtunnel.train",
]


def _is_public(name: str) -> bool:
    return not any(part.startswith("_") for part in name.split("."))


def _all_modules() -> list[str]:
    """Every module of the package, found on disk (``walk_packages`` imports packages, never plain modules)."""
    found = {"implicit_em"}
    found.update(info.name for info in pkgutil.walk_packages(implicit_em.__path__, "implicit_em."))
    return sorted(found)


def _exported(name: str, module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    return list(names or [])


def _public_definitions(module: ModuleType) -> set[str]:
    """Functions and classes the module's own source defines at top level without a leading underscore."""
    tree = ast.parse(Path(inspect.getfile(module)).read_text())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in tree.body if isinstance(node, kinds) and not node.name.startswith("_")}


def test_the_public_modules_are_the_listed_ones() -> None:
    assert [name for name in _all_modules() if _is_public(name)] == PUBLIC_MODULES


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_public_module_has_all(name: str) -> None:
    assert isinstance(getattr(importlib.import_module(name), "__all__", None), list | tuple)


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_lists_exactly_the_public_names(name: str) -> None:
    module = importlib.import_module(name)
    exported = _exported(name, module)
    assert exported and all(isinstance(n, str) for n in exported)
    assert len(set(exported)) == len(exported), f"{name}.__all__ repeats a name"
    assert [n for n in exported if not hasattr(module, n)] == [], f"{name}.__all__ names what does not exist"
    assert [n for n in exported if n.startswith("_")] == [], f"{name}.__all__ exports an underscored name"
    unlisted = sorted(_public_definitions(module) - set(exported))
    assert unlisted == [], f"{name} defines {unlisted} without an underscore but leaves them out of __all__"


def test_check_catches_an_unlisted_definition(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The definition check is not vacuous: a module defining ``g`` with ``__all__ = ["f"]`` is reported."""
    (tmp_path / "fake_public_mod.py").write_text('__all__ = ["f"]\n\ndef f(): ...\n\ndef g(): ...\n\ndef _h(): ...\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("fake_public_mod")
    assert _public_definitions(module) - set(_exported("fake_public_mod", module)) == {"g"}


# ---- the docs ------------------------------------------------------------------------------------------------

_DOCS = [*sorted((_REPO / "docs").glob("*.md")), _REPO / "README.md"]
_DOTTED = re.compile(r"\bimplicit_em(?:\.[A-Za-z_]\w*)+")
_FROM_IMPORT = re.compile(r"^[ \t]*from[ \t]+(implicit_em[\w.]*)[ \t]+import[ \t]+([\w, \t]+)$", re.M)
#: File paths as the docs write them: from the repository root, or from src/implicit_em for the package's folders.
_PATH = re.compile(
    r"(?<![\w/.-])((?:src/implicit_em|benchmarks|examples|tests|mixture|probes|diagnostics|windtunnel|report"
    r"|audit|experiments)/[\w*./-]*\.py)\b"
)
_PACKAGE_FOLDERS = ("mixture/", "probes/", "diagnostics/", "windtunnel/", "report/", "audit/", "experiments/")


def _resolves(dotted: str) -> bool:
    """Whether ``a.b.c`` imports: the longest prefix that is a module, then attributes for the rest."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        candidate = ".".join(parts[:i])
        try:
            obj: object = importlib.import_module(candidate)
        except ModuleNotFoundError as error:
            if error.name is None or not candidate.startswith(error.name):
                raise  # a dependency of an existing module is missing: not a question of the path
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _path_exists(path: str) -> bool:
    base = _PACKAGE_DIR if path.startswith(_PACKAGE_FOLDERS) else _REPO
    return any(base.glob(path)) if "*" in path else (base / path).is_file()


@pytest.mark.parametrize("doc", _DOCS, ids=lambda p: p.name)
def test_docs_name_only_importable_modules_and_names(doc: Path) -> None:
    text = doc.read_text()
    assert [name for name in sorted(set(_DOTTED.findall(text))) if not _resolves(name)] == []
    bad_imports = [
        f"from {module} import {name}"
        for module, names in _FROM_IMPORT.findall(text)
        for name in (n.split(" as ")[0].strip() for n in names.split(","))
        if name and not _resolves(f"{module}.{name}")
    ]
    assert bad_imports == []


@pytest.mark.parametrize("doc", _DOCS, ids=lambda p: p.name)
def test_docs_name_only_existing_files(doc: Path) -> None:
    paths = sorted(set(_PATH.findall(doc.read_text())))
    assert [path for path in paths if not _path_exists(path)] == []


def test_source_docstrings_name_only_importable_modules_and_names() -> None:
    """The same check on the library's own docstrings and comments (cross-references such as
    ``:func:`~implicit_em.mixture._em.fit_em```)."""
    stale = {
        f"{path.relative_to(_PACKAGE_DIR)}: {name}"
        for path in sorted(_PACKAGE_DIR.rglob("*.py"))
        for name in _DOTTED.findall(path.read_text())
        if not _resolves(name)
    }
    assert sorted(stale) == []


def test_docs_checks_are_not_vacuous() -> None:
    assert _resolves("implicit_em.probes.attention.attend") and _resolves("implicit_em.mixture.GaussianMixture")
    assert not _resolves("implicit_em.mixture.em") and not _resolves("implicit_em.probes.attention.shadow")
    assert _path_exists("mixture/_stats.py") and _path_exists("tests/test_mixture_*.py")
    assert not _path_exists("mixture/distributed.py")
    assert _PATH.findall("one `all_reduce` (`mixture/_distributed.py`), see benchmarks/gmm_vs_peers.py.") == [
        "mixture/_distributed.py",
        "benchmarks/gmm_vs_peers.py",
    ]
