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
# Each function's settings model (aijobs.settings.<module>): its own at init, never another's.
OWN_SETTINGS = {
    "api": "aijobs.settings.api",
    "queue_consumer": "aijobs.settings.consumer",
    "dlq_consumer": "aijobs.settings.dlq",
    "cron_dispatcher": "aijobs.settings.cron",
    "webhook_consumer": "aijobs.settings.webhook",
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
NEVER = (
    "aijobs_cdk.stage_config",
    "aijobs.providers.local",
    "aijobs.providers.local_directives",
    "aijobs.providers.local_text",
    "aijobs.providers.local_media",
)


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
    assert OWN_SETTINGS[handler] in modules, "own settings at init"
    for other, package in OWN.items():
        if other != handler:
            assert not [m for m in modules if m == package or m.startswith(package + ".")], other
            assert OWN_SETTINGS[other] not in modules, other


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
        "from aijobs.api.routes.docs import _openapi_document\n"
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
        "from aijobs.kinds.context import JobContext\n"
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
    "aijobs.settings": ("FunctionSettings",),
    "aijobs.settings.api": ("ApiSettings",),
    "aijobs.settings.consumer": ("ConsumerSettings",),
    "aijobs.settings.dlq": ("DlqSettings",),
    "aijobs.settings.cron": ("CronSettings",),
    "aijobs.api.schemas": ("JobRequest", "JobView", "ErrorBody"),
    "aijobs.api.admin_schemas": ("AdminJobDetail", "BatchRerunRequest"),
    "aijobs.providers.base": ("Call", "TextRequest", "ProviderResult"),
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


def test_another_functions_settings_still_load_by_their_old_name() -> None:
    """`from aijobs.settings import ApiSettings` (the CLI, the tests) loads aijobs.settings.api then."""
    out = _fresh(
        "import json, dlq_consumer.handler\n"
        "before = 'aijobs.settings.api' in sys.modules\n"
        "from aijobs.settings import ApiSettings, api_settings\n"
        "from aijobs.settings.api import ApiSettings as Loaded\n"
        "print(json.dumps([before, ApiSettings is Loaded, api_settings.__module__]))"
    )
    assert json.loads(out) == [False, True, "aijobs.settings.api"]


def test_reset_runtime_forgets_the_settings_read(monkeypatch: pytest.MonkeyPatch) -> None:
    from aijobs import runtime
    from aijobs.settings import dlq_settings
    from scripts.benchmark import function_envs

    env = function_envs()["dlq_consumer"]
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    runtime.reset_runtime()
    assert dlq_settings().alert_topic_arn == env["ALERT_TOPIC_ARN"]
    monkeypatch.setenv("ALERT_TOPIC_ARN", "arn:aws:sns:us-east-1:123456789012:other")
    assert dlq_settings().alert_topic_arn == env["ALERT_TOPIC_ARN"]  # read once per container
    runtime.reset_runtime()
    assert dlq_settings().alert_topic_arn == "arn:aws:sns:us-east-1:123456789012:other"
    runtime.reset_runtime()


# boto3 clients a function's collaborators create only when first called (aws.on_first_use): the
# common path of each function never calls them. The others (besides DynamoDB's) are created with
# the collaborators.
ON_FIRST_USE = {
    "api": ("s3", "lambda_"),
    "queue_consumer": ("sqs", "sns", "lambda_"),
    "dlq_consumer": ("sqs",),
    "cron_dispatcher": ("sqs", "sns", "lambda_"),
}
EAGER = {"api": {"sqs"}, "queue_consumer": {"s3"}, "dlq_consumer": {"sns"}, "cron_dispatcher": set()}


def _build(handler: str) -> None:
    from aijobs import runtime

    if handler == "api":
        runtime.api_service()
        runtime.admin_service()
    else:
        {"queue_consumer": runtime.consumer, "dlq_consumer": runtime.dead_letter_consumer,
         "cron_dispatcher": runtime.cron_context}[handler]()  # fmt: skip


@pytest.mark.parametrize("handler", sorted(ON_FIRST_USE))
def test_a_functions_rarely_used_clients_are_created_on_their_first_call(
    monkeypatch: pytest.MonkeyPatch, handler: str
) -> None:
    from aijobs import aws, runtime
    from scripts.benchmark import function_envs

    for name, value in function_envs()[handler].items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    runtime.reset_runtime()
    try:
        _build(handler)
        factories = {name: getattr(aws, name) for name in ("sqs", "s3", "sns", "lambda_")}
        created = {name for name, factory in factories.items() if factory.cache_info().currsize}
        assert created == EAGER[handler]
        for name in ON_FIRST_USE[handler]:
            client = aws.on_first_use(factories[name])
            assert factories[name].cache_info().currsize == 0
            # The first call reaches the function's one cached client.
            assert client.get_paginator.__self__ is factories[name]()
            assert factories[name].cache_info().currsize == 1
    finally:
        runtime.reset_runtime()
