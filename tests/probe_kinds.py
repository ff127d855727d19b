"""Kinds a test declares for itself, found by the registry as a module of `aijobs.kinds` would be.

The registry looks a kind up by importing `aijobs.kinds.<name with _>`; a probe is a module put
in `sys.modules` under that name for the test's duration (never on disk, so `declared()`, which
lists the package's folder, and every other test are unaffected).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from aijobs.kinds.base import Kind, Tuning
from aijobs.kinds.registry import module_name


def text_kind(name: str, **fields: Any) -> Kind:
    """A small text kind on the local provider (and Nova Lite on Bedrock), changed by `fields`."""
    values: dict[str, Any] = {
        "name": name,
        "capability": "text",
        "description": f"probe kind {name}",
        "models": {"bedrock": "us.amazon.nova-lite-v1:0", "local": "local-text-1"},
        "system": "Answer briefly.",
    }
    return Kind(**{**values, **fields})


@contextmanager
def declared(*kinds: Kind) -> Iterator[None]:
    """Declare `kinds` while the block runs."""
    names = [f"aijobs.kinds.{module_name(kind.name)}" for kind in kinds]
    clashes = [name for name in names if name in sys.modules]
    if clashes:
        raise ValueError(f"a probe kind would hide a real one: {clashes}")
    for name, kind in zip(names, kinds, strict=True):
        module = ModuleType(name)
        module.KIND = kind  # type: ignore[attr-defined]
        sys.modules[name] = module
    try:
        yield
    finally:
        for name in names:
            sys.modules.pop(name, None)


__all__ = ["Tuning", "declared", "text_kind"]
