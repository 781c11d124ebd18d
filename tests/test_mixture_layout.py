"""The map of ``mixture/`` (issue 26 §3): ``mixture/__init__.py``'s docstring names every module of the package,
so a reader joining the project finds each one from there; a module added without a line there fails here."""

import re
from pathlib import Path

import implicit_em.mixture as mixture


def test_the_package_docstring_names_every_module() -> None:
    modules = {p.stem for p in Path(mixture.__file__).parent.glob("_*.py") if p.stem != "__init__"}
    named = set(re.findall(r"``(_[a-z_]+)``", mixture.__doc__ or ""))
    assert len(modules) >= 18  # the glob sees the package (a wrong folder would pass the subset check below)
    assert modules - named == set(), "modules of implicit_em.mixture missing from its docstring's map"
    assert named - modules == set(), "the map names modules that do not exist"
