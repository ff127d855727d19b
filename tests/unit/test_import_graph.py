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
import importlib, json
importlib.import_module({module!r})
print(json.dumps(sorted(sys.modules)))
"""
# Modules only some invocations of a function need: imported on first use, never at init.
LAZY = {
    # powertools' OpenAPI models: the /openapi.json document only. Workflow definitions: a
    # workflow kind's submit only.
    "api": ("aws_lambda_powertools.event_handler.openapi.models", "aijobs.workflows.base"),
    # The workflow runner and definitions: the consumer of a workflow kind only.
    "queue_consumer": ("aijobs.workflows.runner", "aijobs.workflows.base"),
}
# Never at any function's init: the stage config's parser (synth time), the local stack's provider.
NEVER = ("aijobs.stage_config", "aijobs.providers.local")


def _fresh(code: str) -> str:
    """The output of `code` run in a fresh interpreter with Lambda's import path."""
    paths = [str(ROOT / "functions"), str(ROOT / "layers/aijobs/python")]
    result = subprocess.run(
        [sys.executable, "-c", f"import sys\nsys.path[:0] = {paths!r}\n{code}"],
        capture_output=True, text=True, check=True, cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "AWS_DEFAULT_REGION": "us-east-1"},
    )  # fmt: skip
    return result.stdout


def _imported_by(handler: str) -> set[str]:
    return set(json.loads(_fresh(PROBE.format(module=f"{handler}.handler"))))


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


@pytest.mark.parametrize("handler", sorted(OWN))
def test_a_handler_leaves_what_only_some_invocations_need_to_their_first_use(handler: str) -> None:
    modules = _imported_by(handler)
    assert [m for m in (*LAZY.get(handler, ()), *NEVER) if m in modules] == []


def test_the_openapi_document_loads_its_models_on_first_use() -> None:
    out = _fresh(
        "import json, api.handler\n"
        "from aijobs.api.app import _openapi_document\n"
        "before = 'aws_lambda_powertools.event_handler.openapi.models' in sys.modules\n"
        "document = json.loads(_openapi_document(('summary',)))\n"
        "print(json.dumps([before, document['components']['securitySchemes']]))"
    )
    before, schemes = json.loads(out)
    assert before is False
    assert schemes == {"apiKey": {"type": "http", "description": "Authorization: Bearer <api key>",
                                  "scheme": "bearer"}}  # fmt: skip


def test_a_workflow_kinds_consumer_loads_the_runner_on_its_first_job() -> None:
    """Without a store the runner refuses the step: its own error proves the step reached it."""
    out = _fresh(
        "import json, queue_consumer.handler\n"
        "from datetime import UTC, datetime\n"
        "from aijobs.consumer.handlers import JobContext\n"
        "from aijobs.consumer.registry import QUEUE_HANDLERS\n"
        "from aijobs.domain import Job, JobStatus\n"
        "before = 'aijobs.workflows.runner' in sys.modules\n"
        "now = datetime.now(UTC)\n"
        "job = Job(job_id='j', user_id='u', kind='report', status=JobStatus.RUNNING, provider='local',\n"
        "          created_at=now, updated_at=now)\n"
        "try:\n"
        "    QUEUE_HANDLERS['report'](JobContext(job=job, provider=None, results=None))\n"
        "except TypeError as error:\n"
        "    print(json.dumps([before, str(error)]))"
    )
    before, error = json.loads(out)
    assert before is False
    assert error == "a workflow step needs the consumer's store, queues and clock"


# Models built on first use (defer_build), by module: none is built by importing any handler.
DEFERRED = {
    "aijobs.settings": ("FunctionSettings", "ApiSettings", "ConsumerSettings", "DlqSettings", "CronSettings"),
    "aijobs.api.schemas": ("JobRequest", "JobView", "ErrorBody"),
    "aijobs.api.admin_schemas": ("AdminJobDetail", "BatchRerunRequest"),
    "aijobs.providers.base": ("ProviderRequest", "ProviderResult"),
}


@pytest.mark.parametrize("handler", sorted(OWN))
def test_importing_a_handler_builds_no_deferred_model(handler: str) -> None:
    out = _fresh(
        f"import json, {handler}.handler\n"
        f"deferred = {DEFERRED!r}\n"
        "built = [f'{module}.{name}' for module, names in deferred.items() if module in sys.modules\n"
        "         for name in names if getattr(sys.modules[module], name).__pydantic_complete__]\n"
        "print(json.dumps(built))"
    )
    assert json.loads(out) == []
