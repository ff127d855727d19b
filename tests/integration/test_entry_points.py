"""Each Lambda entry point fed its sample event (events/, or generated per kind and cron), plus logs
and metrics per job."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import boto3
import pytest

from aijobs import runtime
from aijobs.domain import Job, JobStatus
from aijobs.observability import logger
from aijobs_cdk.stage import load_stage_config
from aijobs_cli.local.esm import LambdaContext
from tests.integration.harness import Stage, consumer_event, load_event, schedule_event

pytestmark = pytest.mark.integration


def _env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    runtime.reset_runtime()


def _rows_for_sample(stage: Stage, sample: dict[str, Any]) -> list[Job]:
    stage.directory.ensure_user("user-demo")
    store = stage.store_for("user-demo")
    jobs = []
    for record in sample["Records"]:
        body = json.loads(record["body"])
        now = stage.clock()
        job = Job(
            job_id=body["jobId"],
            user_id=body["userId"],
            kind="summary",
            status=JobStatus.QUEUED,
            input="One sentence here. And another one.",
            provider="local",
            created_at=now,
            updated_at=now,
        )
        store.create(job)
        jobs.append(job)
    return jobs


def test_queue_consumer_entry_point_runs_the_sample_batch(
    stage: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    _env(monkeypatch, stage.resources.consumer_env("summary"))
    from queue_consumer import handler

    sample = consumer_event("summary")
    jobs = _rows_for_sample(stage, sample)
    assert len(jobs) > 1
    assert handler.handler(sample, LambdaContext("aijobs-dev-consumer-summary")) == {"batchItemFailures": []}
    assert [stage.job(job).status for job in jobs] == [JobStatus.SUCCEEDED] * len(jobs)


def test_sample_events_match_the_shipped_configuration() -> None:
    config = load_stage_config("dev")
    for cron in config.crons:
        assert schedule_event(cron.text)["cron"] == cron.text
    for sample in (consumer_event("summary"), load_event("sqs-dlq-batch.json")):
        for record in sample["Records"]:
            assert record["eventSourceARN"].split(":")[-1].startswith("aijobs-dev-summary")
            assert set(json.loads(record["body"])) == {"jobId", "userId", "kind"}
    for name in ("api-post-jobs.json", "api-get-job.json", "api-list-jobs.json", "api-post-classify.json"):
        event = load_event(name)
        assert event["version"] == "2.0"
        assert event["requestContext"]["http"]["path"] == event["rawPath"]


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    """The JSON log lines of the shared powertools logger (its handler keeps the stdout it started with)."""
    stream = io.StringIO()
    previous = logger.registered_handler.setStream(stream)  # type: ignore[attr-defined]
    yield stream
    logger.registered_handler.setStream(previous)  # type: ignore[attr-defined]


def test_each_job_logs_structured_lines_with_its_id_as_correlation_id(
    stage: Stage, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str], log_stream: io.StringIO
) -> None:
    _env(monkeypatch, stage.resources.consumer_env("summary"))
    from queue_consumer import handler

    secret = "#fail:503x1 my very private text. With two sentences."
    job = stage.submit("alice", "summary", secret)
    mapping = stage.mapping("summary")
    mapping.handler = handler.handler
    capfd.readouterr()
    mapping.poll_once()
    mapping.poll_once()
    logs = [json.loads(line) for line in log_stream.getvalue().splitlines()]
    lines = logs + [json.loads(line) for line in capfd.readouterr().out.splitlines() if line.startswith("{")]
    retried = next(line for line in logs if line["message"] == "attempt failed, retry scheduled")
    succeeded = next(line for line in logs if line["message"] == "job succeeded")
    for line in (retried, succeeded):
        assert (line["jobId"], line["userId"], line["kind"], line["correlation_id"]) == (
            job.job_id, "alice", "summary", job.job_id,
        )  # fmt: skip
    assert (retried["attempt"], retried["errorClass"]) == (1, "transient")
    assert succeeded["attempt"] == 2
    assert succeeded["model"] == "local-text-1"
    assert succeeded["durationMs"] >= 0
    assert all("private" not in json.dumps(line) for line in lines)

    metrics = [line for line in lines if "_aws" in line]
    names = {m["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Name"]: m for m in metrics}
    assert names["JobsRetried"]["error_class"] == "transient"
    assert names["JobsSucceeded"]["kind"] == "summary"
    assert names["JobDuration"]["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"] == "Milliseconds"
    assert {"service", "kind"} <= set(names["JobsSucceeded"]["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0])


# A sample event per entry point, and the entry point that `sam local invoke` would run it with.
EVENT_HANDLERS = {
    "api-post-jobs.json": "api",
    "api-get-job.json": "api",
    "api-list-jobs.json": "api",
    "api-post-classify.json": "api",
    "api-get-openapi.json": "api",
    "sqs-summary-batch.json": "queue_consumer",
    "sqs-dlq-batch.json": "dlq_consumer",
    "schedule-maintenance.json": "cron_dispatcher",
}
# The ones generated from the stage's kinds and crons (aijobs_cli.local.sample_events), not in events/.
GENERATED = {
    "sqs-summary-batch.json": lambda: consumer_event("summary"),
    "schedule-maintenance.json": lambda: schedule_event("*/10 * * * *"),
}


def test_every_event_file_runs_through_its_entry_point(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from aijobs.store.retention import write_retention
    from tests.integration.harness import EVENTS

    # One event per entry point here; test_events.py runs every one, hand-written or generated (and
    # derives which ones must exist from the stage configuration and the API's routes).
    assert set(EVENT_HANDLERS) - set(GENERATED) <= {path.name for path in EVENTS.glob("*.json")}
    resources = stage.resources
    env = {
        **resources.api_env(),
        **resources.cron_env(),
        **resources.dlq_env(),
        **resources.consumer_env("summary"),
    }
    _env(monkeypatch, env)
    write_retention(boto3.resource("dynamodb").Table(resources.meta_table), credit_tx_retention_days=9,
                    ai_task_retention_days=9)  # fmt: skip
    key = stage.directory.create_api_key("user-demo")
    stage.store_for("user-demo").ledger.grant("user-demo", 50, stage.clock() + timedelta(days=1))
    runtime.api_service().clock = stage.clock
    for name, role in EVENT_HANDLERS.items():
        event = GENERATED[name]() if name in GENERATED else load_event(name)
        if role == "api":
            event["headers"]["authorization"] = f"Bearer {key}"
        if role == "queue_consumer":
            _rows_for_sample(stage, event)
        module = importlib.import_module(f"{role}.handler")
        response = module.handler(event, LambdaContext(f"aijobs-dev-{role}"))
        if role == "api":
            assert response["statusCode"] < 500, (name, response)
            assert response["statusCode"] != 401, name
        elif role == "cron_dispatcher":
            assert response["status"] == "ok", name
        else:
            assert response == {"batchItemFailures": []}, name


def test_every_entry_point_is_traced_in_lambda(monkeypatch: pytest.MonkeyPatch) -> None:
    """In Lambda, each entry point runs through a powertools Tracer built on its first invocation."""
    import importlib

    import aws_lambda_powertools

    built: list[str] = []

    class RecordingTracer:
        def capture_lambda_handler(self, handler: Any) -> Any:
            built.append(handler.__name__)
            return lambda event, context: "traced"

    monkeypatch.setenv("AWS_LAMBDA_FUNCTION_NAME", "aijobs-dev-fn")
    monkeypatch.setattr(aws_lambda_powertools, "Tracer", RecordingTracer)
    roles = sorted(set(EVENT_HANDLERS.values()))
    try:
        for role in roles:
            module = importlib.reload(importlib.import_module(f"{role}.handler"))
            assert built.count("handler") == roles.index(role)  # importing built nothing
            assert module.handler({}, LambdaContext("fn")) == "traced", role
            assert module.handler({}, LambdaContext("fn")) == "traced", role
            assert module.handler.__name__ == "handler", role
        assert built == ["handler"] * len(roles)  # once per function
    finally:
        monkeypatch.undo()
        for role in roles:  # later tests get entry points that have not cached the fake tracer
            importlib.reload(importlib.import_module(f"{role}.handler"))
