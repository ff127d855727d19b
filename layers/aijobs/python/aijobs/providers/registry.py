"""Provider lookup by name: one cached adapter instance per provider name and process."""

from __future__ import annotations

from collections.abc import Callable

from aijobs.providers.base import Provider
from aijobs.providers.local import LocalProvider

PROVIDER_NAMES = ("local",)

_FACTORIES: dict[str, Callable[[], Provider]] = {"local": LocalProvider}
_INSTANCES: dict[str, Provider] = {}


def get_provider(name: str) -> Provider:
    """The provider adapter called `name`, created once and cached for the process.

    Raises `ValueError`, listing the known names, for an unknown name.
    """
    if name not in PROVIDER_NAMES:
        raise ValueError(f"unknown provider {name!r}; known providers: {', '.join(PROVIDER_NAMES)}")
    provider = _INSTANCES.get(name)
    if provider is None:
        provider = _INSTANCES[name] = _FACTORIES[name]()
    return provider
