"""`/console`: the operator console's static page and assets (docs/operations/console.md)."""

from __future__ import annotations

from functools import lru_cache
from importlib import resources
from typing import Any

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router

from aijobs.api.errors import error_response

router = Router()  # type: ignore[no-untyped-call]  # powertools: Router.__init__ is unannotated

# The console is static: no inline script or style, nothing from elsewhere, no framing.
CONSOLE_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
    "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}
_CONSOLE_FILES = {
    "index.html": "text/html; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
}


@lru_cache(maxsize=len(_CONSOLE_FILES))
def _console_file(name: str) -> str:
    return resources.files("aijobs.api").joinpath("console", name).read_text(encoding="utf-8")


@router.get("/console", include_in_schema=False)
def console_page() -> Response[str]:
    return _console_response("index.html")


@router.get("/console/<asset>", include_in_schema=False)
def console_asset(asset: str) -> Response[Any]:
    if asset not in _CONSOLE_FILES or asset == "index.html":
        return error_response(404, "route_not_found", "no such console file")
    return _console_response(asset)


def _console_response(name: str) -> Response[str]:
    return Response(
        status_code=200, content_type=_CONSOLE_FILES[name], body=_console_file(name), headers=CONSOLE_HEADERS
    )
