"""The declared job kinds: every module of this package that defines `KIND` is one.

A kind named `image-generate` lives in `aijobs/kinds/image_generate.py` (hyphens become
underscores), so looking one kind up imports only its own module: a consumer serves one kind and
never loads the others' code. Listing them all (synth, the API's OpenAPI document, the test
suite's contract) reads the package's folder. Workflow kinds (a job split into child jobs) are
declared in aijobs/workflows/ and listed by aijobs/workflows/registry.py.
"""

from __future__ import annotations

import pkgutil
from functools import cache
from importlib import import_module
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aijobs.kinds.base import Kind

#: Modules of the kinds package that are not kinds (`aijobs new-kind` refuses these names).
NOT_KIND_MODULES = frozenset({"base", "context", "registry", "run"})


def module_name(kind: str) -> str:
    return kind.replace("-", "_")


@cache
def declared() -> tuple[str, ...]:
    """The names of every declared kind, sorted (each module's `KIND.name`)."""
    folder = str(Path(__file__).parent)
    names = []
    for info in pkgutil.iter_modules([folder]):
        if info.name in NOT_KIND_MODULES or info.name.startswith("_"):
            continue
        definition = getattr(import_module(f"aijobs.kinds.{info.name}"), "KIND", None)
        if definition is None:
            continue
        if module_name(definition.name) != info.name:
            raise ValueError(
                f"aijobs/kinds/{info.name}.py declares kind {definition.name!r}: "
                f"name the file {module_name(definition.name)}.py"
            )
        names.append(definition.name)
    return tuple(sorted(names))


def queued() -> tuple[str, ...]:
    """The declared kinds that run on a queue (every kind but the synchronous ones, `classify`)."""
    return tuple(name for name in declared() if not require(name).sync)


def kind(name: str) -> Kind | None:
    """The declaration of kind `name` (importing only its module); None if no module declares it."""
    if not name or module_name(name) in NOT_KIND_MODULES or not module_name(name).isidentifier():
        return None
    try:
        module = import_module(f"aijobs.kinds.{module_name(name)}")
    except ModuleNotFoundError as error:
        if error.name == f"aijobs.kinds.{module_name(name)}":
            return None
        raise
    definition: Kind | None = getattr(module, "KIND", None)
    if definition is None or definition.name != name:
        return None
    return definition


def require(name: str) -> Kind:
    found = kind(name)
    if found is None:
        raise KeyError(f"no kind {name!r} is declared (aijobs/kinds/{module_name(name)}.py)")
    return found
