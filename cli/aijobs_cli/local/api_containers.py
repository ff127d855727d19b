"""The API function's containers in the local stack: concurrent invocations, as Lambda scales.

One warm Lambda container serves one invocation at a time, and Lambda starts another container when
a request arrives while every warm one is busy. The API function cannot simply be called from two
threads of one module: its powertools resolver keeps the current event on the module-level `app`
(`aijobs.api.app`, read by its routers in `aijobs.api.routes`), the routes' services are configured
on `aijobs.api.wiring`, and its collaborators are cached per container by `aijobs.runtime`. So each
local container is a fresh load of those modules and of the ones that hold them (CONTAINER_MODULES),
as a new Lambda container would load them, sharing only what every container shares anyway (the
library's other modules, boto3's thread-safe clients, the settings read from the environment).

`ApiContainers.invoke` hands an invocation to an idle container, starts a new one if none is idle
and fewer than `limit` exist, and otherwise waits for one to be free (like reserved concurrency).
"""

from __future__ import annotations

import importlib
import pkgutil
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

import aijobs.api.routes as routes  # the package only: its modules load per container

Handler = Callable[[dict[str, Any], Any], Any]

# What a container loads for itself: the handler module, the per-container state it holds, and
# the modules bound to that state (each router is bound to its resolver, `auth` to `wiring`).
API_ROUTE_MODULES = tuple(
    f"{routes.__name__}.{module.name}" for module in pkgutil.iter_modules(routes.__path__)
)
CONTAINER_MODULES = (
    "api.handler", "aijobs.api.app", "aijobs.api.wiring", "aijobs.api.auth", *API_ROUTE_MODULES,
    "aijobs.runtime",
)  # fmt: skip
# Imports juggle sys.modules: one container loads at a time.
_loading = threading.Lock()


@dataclass
class ApiContainer:
    """One container: its handler and its own loads of CONTAINER_MODULES, by name."""

    handler: Handler
    modules: dict[str, ModuleType]
    invocations: int = 0

    @property
    def runtime(self) -> ModuleType:
        """This container's `aijobs.runtime`: its collaborators, cached for this container only."""
        return self.modules["aijobs.runtime"]


def load_container() -> ApiContainer:
    """A fresh load of the API function's modules; sys.modules is left as it was."""
    with _loading:
        saved = {name: sys.modules.pop(name, None) for name in CONTAINER_MODULES}
        for name in CONTAINER_MODULES:
            _bind(name, None)  # `from aijobs import runtime` would take the package's attribute
        try:
            handler_module = importlib.import_module("api.handler")
            modules = {name: sys.modules[name] for name in CONTAINER_MODULES}
        finally:
            for name, module in saved.items():
                if module is None:
                    sys.modules.pop(name, None)
                else:
                    sys.modules[name] = module
                _bind(name, module)
    return ApiContainer(handler=handler_module.handler, modules=modules)


def _bind(name: str, module: ModuleType | None) -> None:
    """Set (or, with None, remove) the attribute by which a submodule hangs on its loaded package."""
    parent, _, child = name.rpartition(".")
    package = sys.modules.get(parent)
    if package is None:
        return
    if module is None:
        package.__dict__.pop(child, None)
    else:
        setattr(package, child, module)


class ApiContainers:
    """Up to `limit` containers of the API function, started on demand and reused while warm."""

    def __init__(
        self,
        limit: int,
        load: Callable[[], ApiContainer] = load_container,
        on_start: Callable[[ApiContainer], None] = lambda _container: None,
    ) -> None:
        if limit < 1:
            raise ValueError("an API function needs at least one container")
        self.limit = limit
        self._load = load
        self._on_start = on_start
        self._idle: list[ApiContainer] = []
        self.containers: list[ApiContainer] = []
        self._starting = 0
        self._busy = 0
        self._changed = threading.Condition()

    @property
    def busy(self) -> int:
        """Containers running an invocation now."""
        with self._changed:
            return self._busy

    def prewarm(self) -> None:
        """Start one container now: the first request finds it warm, and a broken import fails here."""
        container = self._start()
        with self._changed:
            self._idle.append(container)
            self._changed.notify()

    def invoke(self, event: dict[str, Any], context: Any) -> Any:
        container = self._acquire()
        with self._changed:
            self._busy += 1
        try:
            container.invocations += 1
            return container.handler(event, context)
        finally:
            with self._changed:
                self._busy -= 1
                self._idle.append(container)
                self._changed.notify()

    def _acquire(self) -> ApiContainer:
        with self._changed:
            while True:
                if self._idle:
                    return self._idle.pop()  # the most recently used: the others may stay cold
                if len(self.containers) + self._starting < self.limit:
                    self._starting += 1
                    break
                self._changed.wait()
        try:
            return self._start()  # a cold start, outside the lock: the warm ones keep serving
        finally:
            with self._changed:
                self._starting -= 1
                self._changed.notify()  # a failed start leaves room for another

    def _start(self) -> ApiContainer:
        container = self._load()
        self._on_start(container)
        with self._changed:
            self.containers.append(container)
        return container
