"""Where the routes' services come from: the handler configures them at its cold start.

Per-container state (the local stack loads this module once per API container, see
aijobs_cli.local.api_containers).
"""

from __future__ import annotations

from collections.abc import Callable

from aijobs.api.admin import AdminService
from aijobs.api.service import JobService

_service_factory: Callable[[], JobService] | None = None
_admin_factory: Callable[[], AdminService] | None = None


def configure(factory: Callable[[], JobService]) -> None:
    """Tell the routes where their service comes from (the handler passes the cached runtime one)."""
    global _service_factory
    _service_factory = factory


def service() -> JobService:
    assert _service_factory is not None, "aijobs.api.wiring.configure() was not called"
    return _service_factory()


def configure_admin(factory: Callable[[], AdminService]) -> None:
    """Tell the operator routes where their service comes from (the handler passes the runtime one)."""
    global _admin_factory
    _admin_factory = factory


def admin_service() -> AdminService:
    assert _admin_factory is not None, "aijobs.api.wiring.configure_admin() was not called"
    return _admin_factory()
