"""Each function imports only its own code path (cold starts): checked in a fresh interpreter per
handler, since one test process has every module loaded already."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
# aijobs packages that belong to one function only.
OWN = {
    "api": "aijobs.api",
    "queue_consumer": "aijobs.consumer",
    "dlq_consumer": "aijobs.dead_letters",
    "cron_dispatcher": "aijobs.scheduled",
    # The webhook consumer's own code; the rest of aijobs.webhooks (URL rules, the delivery
    # message) is shared with the functions that validate callbacks and finish jobs.
    "webhook_consumer": "aijobs.webhooks.delivery",
}
PROBE = """
import importlib, json, sys
sys.path[:0] = {paths!r}
importlib.import_module({module!r})
print(json.dumps(sorted(sys.modules)))
"""


def _imported_by(handler: str) -> set[str]:
    code = PROBE.format(
        paths=[str(ROOT / "functions"), str(ROOT / "layers/aijobs/python")], module=f"{handler}.handler"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "us-east-1"},
    )  # fmt: skip
    return set(json.loads(result.stdout))


@pytest.mark.parametrize("handler", sorted(OWN))
def test_a_handler_imports_its_own_code_and_nothing_of_the_other_functions(handler: str) -> None:
    modules = _imported_by(handler)
    assert any(m == OWN[handler] or m.startswith(OWN[handler] + ".") for m in modules), "own code at init"
    for other, package in OWN.items():
        if other != handler:
            assert not [m for m in modules if m == package or m.startswith(package + ".")], other


@pytest.mark.parametrize("handler", sorted(OWN))
def test_no_handler_loads_the_xray_sdk_outside_lambda(handler: str) -> None:
    """The tracer is built on the first invocation in Lambda only (observability.lambda_tracing)."""
    modules = _imported_by(handler)
    assert "aws_xray_sdk" not in modules


class _CountingTracer:
    built = 0

    def __init__(self) -> None:
        type(self).built += 1

    def capture_lambda_handler(self, handler: Any) -> Any:
        return lambda event, context: ("traced", handler(event, context))


@pytest.mark.parametrize(
    ("function_name", "built", "answer"), [("aijobs-dev-api", 1, ("traced", 7)), ("", 0, 7)]
)
def test_the_tracer_is_built_once_on_the_first_invocation_and_only_in_lambda(
    monkeypatch: pytest.MonkeyPatch, function_name: str, built: int, answer: Any
) -> None:
    import aws_lambda_powertools

    from aijobs.observability import lambda_tracing

    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", function_name)
    monkeypatch.setattr(aws_lambda_powertools, "Tracer", _CountingTracer)
    monkeypatch.setattr(_CountingTracer, "built", 0)
    handler = lambda_tracing(lambda event, _context: event["n"])
    assert _CountingTracer.built == 0  # decorating builds nothing
    assert [handler({"n": 7}, None), handler({"n": 7}, None)] == [answer, answer]
    assert _CountingTracer.built == built
