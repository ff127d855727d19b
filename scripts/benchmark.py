"""Performance figures of issue 12, each as a ratio against a baseline measured in the same run.

Prints figures and asserts nothing (machines here are shared and noisy; tests never time things):

- AWS calls per path, counted from botocore's own events (tests/aws_calls.py): the producer's
  `POST /jobs` warm, with an `Idempotency-Key`, and cold (a fresh container); the consumer per
  successful job in batches of 5 and 1, per retry and per final failure; the cron per shard. The
  floor of each path is printed beside it.
- Consumer wall time against a bare loop replaying exactly the AWS calls the consumer made, on
  the same moto backend (the consumer's own overhead: parsing, models, logging, metrics).
- Handler import CPU and peak memory against `import boto3` alone, each in fresh interpreters
  (median of --repeat runs), and the floor every handler shares: boto3, powertools' logger and
  metrics (aijobs.observability) and pydantic with the job models (aijobs.domain). Beside each,
  "import + set-up": the import and what the function's first invocation builds before its first
  AWS call (its settings, collaborators and boto3 clients, on the dev stage's configuration).
  `--instructions` adds the same ratios in instructions executed, counted by valgrind: they do
  not move with the machine's load (a run takes minutes).

    .venv/bin/python scripts/benchmark.py [--jobs 40] [--repeat 5] [--only calls,consumer,imports]
        [--instructions]

`--write-profile` measures the call profile instead (every path's AWS calls with the capacity
units AWS bills for them, `aijobs_cli.sizing.call_profile`) and writes
`cli/aijobs_cli/sizing/call_profile.json`, which `aijobs cost` reads;
`tests/integration/test_call_profile.py` fails when it is stale.
`--write-trace` runs the partition simulation (tests/partition_sim.py) and writes
`cli/aijobs_cli/sizing/partition_trace.json`, the writes per partition-key shape of each step of a job's
life that `aijobs capacity` reads; `tests/integration/test_partition_load.py` fails when it is stale.

The local stack's throughput with concurrent submitters: scripts/benchmark_local.py.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

from botocore.exceptions import ClientError

ROOT = Path(__file__).resolve().parents[1]


def _prepare_process() -> None:
    """Import paths, fake credentials for moto, and no metric lines on stdout (run as a script)."""
    for path in ("functions", "layers/aijobs/python", "cdk", "cli", "."):
        if str(ROOT / path) not in sys.path:
            sys.path.insert(0, str(ROOT / path))
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    for key in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
        os.environ.setdefault(key, "testing")
    os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
    os.environ["POWERTOOLS_TRACE_DISABLED"] = "true"


HANDLERS = ("api", "queue_consumer", "dlq_consumer", "cron_dispatcher")
# What every handler imports at the least: boto3, powertools' logger and metrics, pydantic with the
# job and message models every function reads.
IMPORT_FLOOR = "boto3, aijobs.observability, aijobs.domain"
TEXT = "Queues decouple accepting work from doing it. A consumer does the slow part. Retries are classified."
# The floor of each path in this design: to accept a job, the query of the credit grants it draws
# from, one transaction and one send (a cold container first looks its API key up, the stage's
# retention for the debit's TTL in the same BatchGetItem, once per container and 5 minutes); to run
# one, a claim and its finish (a small result is on the row: no PUT; a larger one adds it).
FLOORS = {
    "producer POST /jobs, warm": 3,
    "producer POST /jobs, Idempotency-Key": 3,
    "producer POST /jobs, cold container": 4,
    "consumer per job, batch of 5": 2,
    "consumer per job, batch of 1": 2,
}


# --- a moto stage ---------------------------------------------------------------------------------


def stage_values() -> dict[str, str]:
    """The benchmark stage's `.env` values: one kind (a plain single-call job: `aijobs cost` prices
    every kind like it), no back-off waits. No CRONS: each registered cron is dispatched directly,
    so the stage (and the profile's header) stays the same when a team registers one more."""
    return {
        "QUEUE_NAMES": "summary",
        "KIND_PRICES": "summary:1",
        "MAX_RETRIES": "3",
        "SHARD_COUNT": "1",
        "RETRY_BASE_DELAY_SECONDS": "0",
        "THROTTLE_DELAY_SECONDS": "0",
        "PROVIDER": "local",
    }


@contextmanager
def moto_stage() -> Iterator[Any]:
    from moto import mock_aws

    from aijobs import aws, runtime
    from aijobs.observability import logger
    from aijobs.store.retention import write_retention
    from aijobs_cdk.stage_config import parse_stage_config
    from aijobs_cli.local.resources import provision
    from aijobs_cli.moto_patches import apply as apply_speedups
    from tests.integration.harness import Clock, Stage

    logger.setLevel("ERROR")
    # The handlers run in this process: their log lines go to stderr, stdout is the figures' (--json).
    logger.registered_handler.setStream(sys.stderr)  # type: ignore[attr-defined]
    apply_speedups()
    values = stage_values()
    with mock_aws():
        runtime.reset_runtime()
        stage = Stage(resources=provision(parse_stage_config("bench", values)), clock=Clock())
        # Retention configured, as on a stage after its first deploy (docs/how-to/deploy.md): finished jobs
        # and credit transactions carry their TTL, transactions are folded as written.
        write_retention(
            aws.dynamodb().Table(stage.resources.meta_table),
            credit_tx_retention_days=90,
            ai_task_retention_days=30,
        )
        yield stage
    runtime.reset_runtime()


@contextmanager
def environment(values: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _api_call(handler: Callable[..., Any], key: str, body: dict[str, Any], headers: dict[str, str]) -> int:
    from aijobs_cli.local.esm import LambdaContext
    from tests.integration.harness import load_event

    event = load_event("api-post-jobs.json")
    event["headers"] = {"content-type": "application/json", "authorization": f"Bearer {key}", **headers}
    event["body"] = json.dumps(body)
    status: int = handler(event, LambdaContext("aijobs-bench-api"))["statusCode"]
    return status


# --- AWS calls per path ---------------------------------------------------------------------------


def producer_calls(stage: Any) -> dict[str, float]:
    from aijobs import runtime
    from tests.aws_calls import recording_calls

    figures: dict[str, float] = {}
    stage.directory.ensure_user("alice")
    key = stage.directory.create_api_key("alice")
    stage.store_for("alice").ledger.grant("alice", 10_000, stage.clock() + timedelta(days=30))
    body = {"kind": "summary", "input": TEXT}
    with environment(stage.resources.api_env()), recording_calls() as log:
        runtime.reset_runtime()
        runtime.api_service().clock = stage.clock  # the stage's time, as its grant's expiry
        from api import handler

        assert _api_call(handler.handler, key, body, {}) == 202
        figures["producer POST /jobs, cold container"] = log.count()
        for label, with_key in (
            ("producer POST /jobs, warm", False),
            ("producer POST /jobs, Idempotency-Key", True),
        ):
            log.clear()
            for i in range(10):
                headers = {"idempotency-key": f"bench-{i}"} if with_key else {}
                assert _api_call(handler.handler, key, body, headers) == 202
            figures[label] = log.count() / 10
    runtime.reset_runtime()
    return figures


def _consume(stage: Any, kind: str, batch: int, sqs: Any) -> tuple[int, float]:
    """Deliver every message of the kind's queue to its consumer in batches, as the event-source
    mapping does with `sqs` (a client made outside any recording); (records, seconds)."""
    from aijobs_cli.local.esm import LambdaContext, sqs_record

    consumer = stage.consumer(kind)
    url, arn = stage.resources.queue_urls[kind], stage.resources.queue_arns[kind]
    records, seconds = 0, 0.0
    while True:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=batch, AttributeNames=["All"]).get(
            "Messages", []
        )
        if not messages:
            return records, seconds
        event = {"Records": [sqs_record(message, arn) for message in messages]}
        started = time.perf_counter()
        response = consumer.handle(event, LambdaContext(f"aijobs-bench-{kind}"))
        seconds += time.perf_counter() - started
        failed = {item["itemIdentifier"] for item in response["batchItemFailures"]}
        for message in messages:
            if message["MessageId"] not in failed:  # what the event-source mapping does
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        records += len(messages)


def _consumer_calls_per_job(jobs: int, text: str, batch: int) -> float:
    from tests.aws_calls import recording_calls

    with moto_stage() as stage:
        for _ in range(jobs):
            stage.submit("alice", "summary", text)
        sqs = stage.sqs
        with recording_calls() as log:
            # A warm container: it knows the user's shard and the stage's retention (each read once
            # per container, the retention again every 5 minutes).
            consumer = stage.consumer("summary")
            consumer.directory.shard_for("alice")
            consumer.directory.retention()
            log.clear()
            _consume(stage, "summary", batch, sqs)
        return log.count() / jobs


def consumer_calls(jobs: int) -> dict[str, float]:
    figures = {f"consumer per job, batch of {b}": _consumer_calls_per_job(jobs, TEXT, b) for b in (5, 1)}
    retried = _consumer_calls_per_job(jobs, "#fail:503x1 " + TEXT, 5)
    figures["consumer per retry (a 503, then success)"] = retried - figures["consumer per job, batch of 5"]
    figures["consumer per final failure (400)"] = _consumer_calls_per_job(jobs, "#fail:400 " + TEXT, 5)
    return figures


def cron_calls() -> dict[str, float]:
    from aijobs import aws, runtime
    from aijobs.scheduled.dispatcher import dispatch
    from aijobs.scheduled.registry import SCHEDULED_HANDLERS
    from aijobs.settings import CronSettings
    from aijobs.store.retention import write_retention
    from tests.aws_calls import recording_calls

    figures: dict[str, float] = {}
    with moto_stage() as stage:
        write_retention(
            aws.dynamodb().Table(stage.resources.meta_table),
            credit_tx_retention_days=90,
            ai_task_retention_days=30,
        )
        shards = len(stage.resources.shard_tables)
        for expression, label in (("*/10 * * * *", "maintenance"), ("*/5 * * * *", "sweeper")):
            with recording_calls() as log:
                ctx = runtime.build_cron_context(CronSettings.from_env(stage.resources.cron_env()))
                event = {"cron": expression, "scheduledTime": "2026-11-30T00:00:00Z"}
                dispatch(event, ctx, SCHEDULED_HANDLERS)
            figures[f"cron {label} per shard, nothing due"] = log.count() / shards
    return figures


# --- the call profile (what `aijobs cost` reads) ----------------------------------------------------

PROFILE_PATHS = {
    "producer.submit": "POST /jobs on a warm container: credit grants queried, one transaction, one send",
    "producer.submit_idempotent": "POST /jobs with a new Idempotency-Key, warm container",
    "producer.submit_cold": "POST /jobs on a fresh container (its API key and the retention looked up first)",
    "producer.poll": "GET /jobs/{id} on a warm container",
    "consumer.success": "one delivery whose attempt succeeds (warm container; per message of a batch)",
    "consumer.retry": "one delivery whose attempt fails retryably (a 503): row updated, back-off set",
    "consumer.success_after_retry": "the delivery that succeeds after one failed attempt",
    "consumer.dead_letter": "the last allowed attempt failing retryably: the message goes to the DLQ",
    "consumer.failed_final": "one delivery whose attempt fails for good (a 400)",
    "dlq.dead_letter": "the DLQ consumer per dead-lettered job: row finalized, entry recorded, alert sent",
    "consumer.success_webhook": "a first-try success of a job with a callbackUrl (its delivery queued)",
    "webhook.delivery": "the webhook consumer per delivery answered 2xx: row read, claimed, signed, settled",
}
CRON_DESCRIPTION = "one run of the cron registered as {!r} on a stage with one shard and nothing due"
DISPATCHER_DESCRIPTION = (
    "one run of the cron dispatcher around a handler that makes no AWS call (the run claimed and "
    "finished, the incident checked): how `aijobs cost` prices a cron the profile has not measured"
)
# The expression and firing the dispatcher's own run is measured under: a firing no registered cron
# is dispatched at (that run would be a duplicate).
DISPATCHER_RUN = {"cron": "0 3 * * *", "scheduledTime": "2026-11-29T10:00:00Z"}


def _meter(stage: Any) -> Any:
    from aijobs.store.keys import META_INDEXES, SHARD_INDEXES
    from tests.aws_calls import Meter, TableShape

    tables = {stage.resources.meta_table: TableShape("meta", META_INDEXES)}
    tables |= {name: TableShape("shard", SHARD_INDEXES) for name in stage.resources.shard_tables}
    return Meter(tables)


def _deliver_one(stage: Any, sqs: Any, url: str, arn: str, handler: Callable[..., Any]) -> str | None:
    """One message of `url` to `handler`, deleted unless reported failed (as the event-source
    mapping does, with `sqs` made outside the recording); the job id it carried, None if empty."""
    from aijobs_cli.local.esm import LambdaContext, sqs_record

    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, AttributeNames=["All"]).get(
        "Messages"
    )
    if not messages:
        return None
    (message,) = messages
    response = handler({"Records": [sqs_record(message, arn)]}, LambdaContext("aijobs-bench"))
    if not response["batchItemFailures"]:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    job_id: str = json.loads(message["Body"])["jobId"]
    return job_id


def _job_paths(max_retries: int) -> Any:
    """(path name or None) per (job label, attempt): which deliveries the profile keeps."""

    def name(label: str, attempt: int) -> str | None:
        if label == "success" and attempt == 1:
            return "consumer.success"
        if label == "retried":
            return {1: "consumer.retry", 2: "consumer.success_after_retry"}.get(attempt)
        if label == "failed" and attempt == 1:
            return "consumer.failed_final"
        if label == "dead" and attempt == max_retries + 1:
            return "consumer.dead_letter"
        return None  # warm-ups and the middle retries of the dead job

    return name


def measure_profile() -> Any:
    """Run every path once on moto (after warm-ups) and measure each call as billed."""
    from datetime import UTC, datetime

    from aijobs import runtime
    from aijobs.scheduled.registry import SCHEDULED_HANDLERS
    from aijobs_cli.sizing.call_profile import CRON_DISPATCHER, CallProfile, PathProfile, item_size
    from tests.aws_calls import recording_calls

    paths: dict[str, PathProfile] = {}
    values = stage_values()
    max_retries = int(values["MAX_RETRIES"])
    with moto_stage() as stage:
        # The producer's rows carry the real date and minute too, at a second and microsecond that
        # leave no trailing zero in any number derived from them (epoch milliseconds end in 123,
        # TTLs in 1): DynamoDB sizes a number by its significant digits, so a measured size would
        # otherwise change from run to run and the committed profile look stale.
        stage.clock.now = datetime.now(UTC).replace(second=1, microsecond=123456)
        sqs = stage.sqs
        url, arn = stage.resources.queue_urls["summary"], stage.resources.queue_arns["summary"]
        with recording_calls(_meter(stage)) as log:

            def keep(name: str) -> None:
                paths[name] = PathProfile(description=PROFILE_PATHS[name], calls=tuple(log.measured))
                log.clear()

            runtime.reset_runtime()
            stage.directory.ensure_user("alice")
            key = stage.directory.create_api_key("alice")
            stage.store_for("alice").ledger.grant("alice", 10_000, stage.clock() + timedelta(days=3650))
            labels: dict[str, str] = {}
            with environment(stage.resources.api_env()):
                from api import handler

                runtime.reset_runtime()
                # The stage's fixed time: every size measured (timestamps, TTLs) is the same each run.
                runtime.api_service().clock = stage.clock
                log.clear()

                def submit(label: str, text: str, headers: dict[str, str], path: str | None) -> None:
                    event = _api_event("api-post-jobs.json", key, {"kind": "summary", "input": text}, headers)
                    response = handler.handler(event, _context())
                    assert response["statusCode"] == 202, response
                    labels[json.loads(response["body"])["jobId"]] = label
                    if path is None:
                        log.clear()
                    else:
                        keep(path)

                submit("warm-up", TEXT, {}, "producer.submit_cold")
                submit("success", TEXT, {}, "producer.submit")
                submit("warm-up", TEXT, {"idempotency-key": "bench-1"}, "producer.submit_idempotent")
                (success,) = [job_id for job_id, label in labels.items() if label == "success"]
                event = _api_event("api-get-job.json", key, None, {})
                event["rawPath"] = f"/jobs/{success}"
                assert handler.handler(event, _context())["statusCode"] == 200
                keep("producer.poll")
                for label, text in (
                    ("retried", "#fail:503x1 " + TEXT),
                    ("failed", "#fail:400 " + TEXT),
                    ("dead-warm-up", "#fail:503 " + TEXT),
                    ("dead", "#fail:503 " + TEXT),
                ):
                    submit(label, text, {}, None)
            consumer = stage.consumer("summary")
            attempts: dict[str, int] = {}
            pick = _job_paths(max_retries)
            while (job_id := _deliver_one(stage, sqs, url, arn, consumer.handle)) is not None:
                attempts[job_id] = attempts.get(job_id, 0) + 1
                name = pick(labels[job_id], attempts[job_id])
                if name is None:
                    log.clear()
                else:
                    keep(name)
            dead_letters = stage.dead_letter_consumer()
            dlq_url, dlq_arn = stage.resources.dlq_urls["summary"], stage.resources.dlq_arns["summary"]
            log.clear()
            while (job_id := _deliver_one(stage, sqs, dlq_url, dlq_arn, dead_letters.handle)) is not None:
                if labels[job_id] == "dead":
                    keep("dlq.dead_letter")
                log.clear()
            (dead,) = [job_id for job_id, label in labels.items() if label == "dead"]
            row = stage.store_for("alice")._table.get_item(Key=_job_key("alice", dead))["Item"]
            _webhook_paths(stage, sqs, log, keep)
        job_row_bytes = item_size(_low_level(row))
    paths |= _cron_paths(SCHEDULED_HANDLERS)
    missing = (set(PROFILE_PATHS) | {f"cron {e}" for e in SCHEDULED_HANDLERS} | {CRON_DISPATCHER}) - set(
        paths
    )
    assert not missing, f"paths not measured: {sorted(missing)}"
    return CallProfile(
        about=(
            "AWS calls per path, measured on moto by scripts/benchmark.py --write-profile (do not edit).",
            "Units as AWS bills them; the rules are in cli/aijobs_cli/sizing/call_profile.py.",
            "Cron paths: calls on 'shard' tables repeat per shard (the stage has one), the rest per run.",
        ),
        stage=values,
        job_row_bytes=job_row_bytes,
        paths=dict(sorted(paths.items())),
    )


class _Answered:
    """The receiver's side of a webhook POST, answered 2xx: no AWS call, so nothing to measure."""

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> Any:
        from aijobs.webhooks.transport import Answer

        return Answer(status=204)


def _webhook_paths(stage: Any, sqs: Any, log: Any, keep: Callable[[str], None]) -> None:
    """A job with a callbackUrl: its first-try success (which queues the delivery) and the
    delivery itself, its POST answered 2xx. The job is submitted through the API's service (a
    loopback URL, as the local stage allows; the submit is not what is measured here). `sqs` is
    made outside the recording, like the event-source mapping's calls."""
    from aijobs import runtime
    from aijobs.api.schemas import JobRequest
    from aijobs.settings import WebhookSettings
    from aijobs.store.tenants import Principal
    from aijobs.webhooks.urls import UrlPolicy

    with environment(stage.resources.api_env()):
        runtime.reset_runtime()
        service = runtime.api_service()
        service.clock = stage.clock
        service.webhook_policy = UrlPolicy(allow_http=True, allow_loopback=True)
        service.rotate_webhook_secret(Principal("alice"))
        request = JobRequest(kind="summary", input=TEXT, callbackUrl="http://127.0.0.1:9/hook")
        service.submit(Principal("alice"), request, None)
    resources = stage.resources
    consumer = stage.consumer("summary")
    log.clear()
    url, arn = resources.queue_urls["summary"], resources.queue_arns["summary"]
    assert _deliver_one(stage, sqs, url, arn, consumer.handle) is not None
    keep("consumer.success_webhook")
    hooks = runtime.build_webhook_consumer(
        WebhookSettings.from_env(resources.webhook_env()), clock=stage.clock
    )
    hooks.poster = _Answered()  # type: ignore[assignment]
    log.clear()
    hook_url, hook_arn = resources.webhook_queue_url, resources.webhook_queue_arn
    assert _deliver_one(stage, sqs, hook_url, hook_arn, hooks.handle) is not None
    keep("webhook.delivery")


def _cron_paths(handlers: Any) -> dict[str, Any]:
    from aijobs import aws, runtime
    from aijobs.scheduled.dispatcher import dispatch
    from aijobs.settings import CronSettings
    from aijobs.store.retention import write_retention
    from aijobs_cli.sizing.call_profile import CRON_DISPATCHER, PathProfile
    from tests.aws_calls import recording_calls

    paths = {}
    with moto_stage() as stage:
        write_retention(
            aws.dynamodb().Table(stage.resources.meta_table),
            credit_tx_retention_days=90,
            ai_task_retention_days=30,
        )
        for expression in handlers:
            with recording_calls(_meter(stage)) as log:
                ctx = runtime.build_cron_context(
                    CronSettings.from_env(stage.resources.cron_env()), clock=stage.clock
                )
                outcome = dispatch(
                    {"cron": expression, "scheduledTime": "2026-11-29T09:00:00Z"}, ctx, handlers
                )
            # A failed run (an incident, an alert) is not what a run costs: measure a healthy one.
            assert outcome.get("status") == "ok", (
                f"cron {expression!r} did not run cleanly on moto: {outcome}"
            )
            paths[f"cron {expression}"] = PathProfile(
                description=CRON_DESCRIPTION.format(expression), calls=tuple(log.measured)
            )
        with recording_calls(_meter(stage)) as log:
            ctx = runtime.build_cron_context(
                CronSettings.from_env(stage.resources.cron_env()), clock=stage.clock
            )
            outcome = dispatch(dict(DISPATCHER_RUN), ctx, {DISPATCHER_RUN["cron"]: lambda _run, _ctx: {}})
        assert outcome.get("status") == "ok", f"the dispatcher's own run failed on moto: {outcome}"
        paths[CRON_DISPATCHER] = PathProfile(description=DISPATCHER_DESCRIPTION, calls=tuple(log.measured))
    return paths


def _api_event(name: str, key: str, body: dict[str, Any] | None, headers: dict[str, str]) -> dict[str, Any]:
    from tests.integration.harness import load_event

    event = load_event(name)
    event["headers"] = {"content-type": "application/json", "authorization": f"Bearer {key}", **headers}
    if body is not None:
        event["body"] = json.dumps(body)
    return event


def _context() -> Any:
    from aijobs_cli.local.esm import LambdaContext

    return LambdaContext("aijobs-bench-api")


def _job_key(user_id: str, job_id: str) -> dict[str, str]:
    from aijobs.store.keys import PK, SK, job_sk, user_pk

    return {PK: user_pk(user_id), SK: job_sk(job_id)}


def _low_level(item: dict[str, Any]) -> dict[str, Any]:
    from boto3.dynamodb.types import TypeSerializer

    serializer = TypeSerializer()
    return {name: serializer.serialize(value) for name, value in item.items()}


def write_profile(target: Path | None = None) -> Path:
    from aijobs_cli.sizing.call_profile import profile_path

    target = target or profile_path()
    target.write_text(measure_profile().to_json(), encoding="utf-8")
    return target


def write_trace(target: Path | None = None) -> Path:
    from aijobs_cli.moto_patches import apply as apply_speedups
    from aijobs_cli.sizing.partition_trace import trace_path
    from tests.partition_sim import JOBS, measure

    apply_speedups()
    target = target or trace_path()
    _, trace = measure(JOBS)
    target.write_text(trace.to_json(), encoding="utf-8")
    return target


# --- consumer vs a bare loop ----------------------------------------------------------------------


def _submit_numbered(stage: Any, jobs: int) -> None:
    """`jobs` queued rows with the same ids in every stage, each with its message."""
    from aijobs.domain import Job, JobStatus

    stage.directory.ensure_user("alice")
    now = stage.clock()
    for index in range(jobs):
        job = Job(
            job_id=f"01BENCH{index:019d}", user_id="alice", kind="summary", status=JobStatus.QUEUED,
            input=TEXT, provider="local", created_at=now, updated_at=now,
        )  # fmt: skip
        stage.store_for("alice").create(job)
        stage.send(job)


def consumer_overhead(jobs: int) -> dict[str, float]:
    """The consumer's wall time against replaying, with plain boto3 clients on an identical fresh
    backend, exactly the AWS calls it made (the same writes, conditions and all)."""
    from aijobs import aws
    from tests.aws_calls import recording_calls

    calls: list[tuple[str, str, dict[str, Any]]] = []
    with moto_stage() as stage:
        _submit_numbered(stage, jobs)
        sqs = stage.sqs
        with recording_calls() as log:
            log.keep_params = calls
            _, consumer_seconds = _consume(stage, "summary", 5, sqs)
    with moto_stage() as stage:  # the same rows again, so every replayed call does the same work
        _submit_numbered(stage, jobs)
        clients = {
            "dynamodb": aws.dynamodb().meta.client,
            "sqs": aws.sqs(),
            "s3": aws.s3(),
            "sns": aws.sns(),
        }
        started = time.perf_counter()
        for service, operation, params in calls:
            client = clients[service]
            by_operation = {api: name for name, api in client.meta.method_to_api_mapping.items()}
            method = getattr(client, by_operation[operation])
            # A condition that fails in the replay costs the same round trip as one that holds.
            with contextlib.suppress(ClientError):
                method(**params)
        bare_seconds = time.perf_counter() - started
    return {
        "consumer wall time vs a bare loop of the same calls": consumer_seconds / bare_seconds,
        "(consumer seconds per job)": consumer_seconds / jobs,
        "(bare loop seconds per job)": bare_seconds / jobs,
    }


# --- imports --------------------------------------------------------------------------------------

# Peak memory from the kernel's high-water mark of this process image (VmHWM, reset by exec;
# ru_maxrss would carry over a big parent's peak through fork).
PEAK_KIB = """
def peak_kib():
    try:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
    except OSError:
        import resource
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
"""
PROBE = (
    PEAK_KIB
    + """
import sys, time
sys.path[:0] = {paths!r}
started = time.process_time()
import {module}
{first_use}
cpu = time.process_time() - started
print(cpu, peak_kib())
"""
)


def _import_env() -> dict[str, str]:
    from aijobs_cdk import LAMBDA_ONLY_ENV

    return {"PATH": os.environ.get("PATH", ""), "AWS_DEFAULT_REGION": "us-east-1", **LAMBDA_ONLY_ENV}


def _probe(module: str, first_use: str = "") -> str:
    paths = [str(ROOT / "functions"), str(ROOT / "layers/aijobs/python")]
    return PROBE.format(paths=paths, module=module, first_use=first_use)


def _import_once(module: str, first_use: str = "", env: dict[str, str] | None = None) -> tuple[float, float]:
    code = _probe(module, first_use)
    env = {**_import_env(), **(env or {})}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    cpu, rss = out.stdout.split()
    return float(cpu), float(rss)


def _baseline_rss() -> float:
    code = PEAK_KIB + "print(peak_kib())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout)


# What each function's first invocation builds before its first AWS call: its settings, the
# collaborators of its own path (the imports they load lazily) and their boto3 clients.
FIRST_USE = {
    "api": "from aijobs import runtime; runtime.api_service()",
    "queue_consumer": "from aijobs import runtime; runtime.consumer()",
    "dlq_consumer": "from aijobs import runtime; runtime.dead_letter_consumer()",
    "cron_dispatcher": "from aijobs import runtime; runtime.cron_context()",
}
FIRST_USE_KIND = "summary"


def function_envs() -> dict[str, dict[str, str]]:
    """Each measured function's environment on the dev stage (`.env.dev` as shipped: Bedrock, Polly
    for speech, the workflow kinds) with made-up resource names: enough to build its settings and
    clients, never to call AWS."""
    from aijobs_cdk.stage import load_stage_config
    from aijobs_cdk.stage_config import DLQ_SUFFIX, queue_resource_name
    from aijobs_cli.local.resources import StageResources

    config = load_stage_config("dev")
    account = "arn:aws:sqs:us-east-1:123456789012"
    urls = "https://sqs.us-east-1.amazonaws.com/123456789012"
    names = {kind: queue_resource_name("dev", kind) for kind in config.queue_names}
    resources = StageResources(
        config=config, region="us-east-1", meta_table="aijobs-dev-meta",
        shard_tables=[f"aijobs-dev-shard-{i}" for i in range(config.shard_count)],
        bucket="aijobs-dev-jobs", topic_arn="arn:aws:sns:us-east-1:123456789012:aijobs-dev-alerts",
        queue_urls={kind: f"{urls}/{name}" for kind, name in names.items()},
        queue_arns={kind: f"{account}:{name}" for kind, name in names.items()},
        dlq_urls={kind: f"{urls}/{name}{DLQ_SUFFIX}" for kind, name in names.items()},
        dlq_arns={kind: f"{account}:{name}{DLQ_SUFFIX}" for kind, name in names.items()},
        webhook_queue_url=f"{urls}/aijobs-dev-webhooks", webhook_dlq_url=f"{urls}/aijobs-dev-webhooks-dlq",
    )  # fmt: skip
    return {
        "api": resources.api_env(),
        "queue_consumer": resources.consumer_env(FIRST_USE_KIND),
        "dlq_consumer": resources.dlq_env(),
        "cron_dispatcher": resources.cron_env(),
    }


def imports(repeat: int) -> dict[str, float]:
    empty = statistics.median(_baseline_rss() for _ in range(repeat))
    envs = function_envs()
    # (module, what runs after its import, its environment) per figure.
    probes: dict[str, tuple[str, str, dict[str, str]]] = {
        "boto3": ("boto3", "", {}),
        IMPORT_FLOOR: (IMPORT_FLOOR, "", {}),
    }
    for name in HANDLERS:
        probes[name] = (f"{name}.handler", "", {})
        probes[f"{name} +first"] = (f"{name}.handler", FIRST_USE[name], envs[name])
    samples: dict[str, list[tuple[float, float]]] = {label: [] for label in probes}
    for _ in range(repeat):  # interleaved, so a noisy moment hits every module alike
        for label, (module, first_use, env) in probes.items():
            samples[label].append(_import_once(module, first_use, env))
    cpu = {label: statistics.median(s[0] for s in runs) for label, runs in samples.items()}
    rss = {label: statistics.median(s[1] for s in runs) - empty for label, runs in samples.items()}
    figures = {}
    for name in HANDLERS:
        figures[f"import CPU {name} vs import boto3"] = cpu[name] / cpu["boto3"]
        figures[f"import memory {name} vs import boto3"] = rss[name] / rss["boto3"]
    for name in HANDLERS:
        first = f"{name} +first"
        figures[f"import + set-up CPU {name} vs import boto3"] = cpu[first] / cpu["boto3"]
        figures[f"import + set-up memory {name} vs import boto3"] = rss[first] / rss["boto3"]
    figures["(floor every handler shares: import CPU vs import boto3)"] = cpu[IMPORT_FLOOR] / cpu["boto3"]
    figures["(floor every handler shares: import memory vs import boto3)"] = rss[IMPORT_FLOOR] / rss["boto3"]
    figures["(import boto3: CPU ms)"] = cpu["boto3"] * 1000
    figures["(import boto3: memory MiB over an empty interpreter)"] = rss["boto3"] / 1024
    return figures


# --- imports in instructions (valgrind) -----------------------------------------------------------

VALGRIND = "valgrind"
# cachegrind without its cache simulation counts every instruction executed and nothing else: the
# cheapest valgrind tool for a total (callgrind's call graph costs several times as much).
VALGRIND_ARGS = ("--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null")


class InstructionCountError(RuntimeError):
    """valgrind is missing, or its output has no instruction count."""


def parse_instruction_count(output: str) -> int:
    """The total from cachegrind's summary line `==PID== I   refs:      693,251,979`."""
    for line in output.splitlines():
        head, _, value = line.partition("I   refs:")
        if _ and head.startswith("==") and value.strip():
            digits = value.strip().replace(",", "")
            if digits.isdigit():
                return int(digits)
    raise InstructionCountError("no instruction count ('I refs:') in valgrind's output:\n" + output[-2000:])


def _valgrind() -> str:
    import shutil

    found = shutil.which(VALGRIND)
    if found is None:
        raise InstructionCountError(
            "--instructions needs valgrind (cachegrind) on PATH, e.g. `apt-get install valgrind`"
        )
    return found


def _instructions_once(valgrind: str, code: str, env: dict[str, str]) -> int:
    # A fixed hash seed: set and dict orders, hence the work done, are the same in every run.
    env = {**_import_env(), **env, "PYTHONHASHSEED": "0"}
    out = subprocess.run(
        [valgrind, *VALGRIND_ARGS, sys.executable, "-c", code],
        capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    if out.returncode != 0:
        raise InstructionCountError(f"valgrind exited {out.returncode}:\n{out.stderr[-2000:]}")
    return parse_instruction_count(out.stderr)


def import_instructions() -> dict[str, float]:
    """Instructions executed by each import (and its first invocation's set-up), less an empty
    interpreter's, over `import boto3`'s: the same ratios as `imports`, unmoved by machine load."""
    valgrind = _valgrind()
    envs = function_envs()
    empty = _instructions_once(valgrind, "pass", {})

    def count(module: str, first_use: str = "", env: dict[str, str] | None = None) -> int:
        _import_once(module, first_use, env)  # writes the .pyc files first: compiling is not counted
        return _instructions_once(valgrind, _probe(module, first_use), env or {}) - empty

    boto3 = count("boto3")
    figures = {}
    for name in HANDLERS:
        figures[f"import instructions {name} vs import boto3"] = count(f"{name}.handler") / boto3
    for name in HANDLERS:
        first = count(f"{name}.handler", FIRST_USE[name], envs[name])
        figures[f"import + set-up instructions {name} vs import boto3"] = first / boto3
    figures["(floor every handler shares: import instructions vs import boto3)"] = count(IMPORT_FLOOR) / boto3
    figures["(import boto3: millions of instructions)"] = boto3 / 1e6
    return figures


def _goal(name: str) -> str:
    if name in FLOORS:
        return f"floor {FLOORS[name]}"
    for prefix, goal in (
        ("consumer wall time", "<= 1.1x"),
        ("import CPU", "<= 1.5x"),
        ("import instructions", "<= 1.5x (CPU)"),
        ("import memory", "<= 1.4x"),
    ):
        if name.startswith(prefix):
            return goal
    return ""


# --- main -----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    _prepare_process()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40, help="jobs per consumer measurement")
    parser.add_argument("--repeat", type=int, default=5, help="fresh interpreters per import figure")
    parser.add_argument("--only", default="calls,consumer,imports")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--instructions",
        action="store_true",
        help="with imports: also count each import's instructions under valgrind (minutes; load-proof)",
    )
    parser.add_argument(
        "--write-profile",
        nargs="?",
        const="",
        metavar="FILE",
        help="measure the call profile and write it (default: cli/aijobs_cli/sizing/call_profile.json)",
    )
    parser.add_argument(
        "--write-trace",
        nargs="?",
        const="",
        metavar="FILE",
        help="write the partition simulation's trace (default: cli/aijobs_cli/sizing/partition_trace.json)",
    )
    args = parser.parse_args(argv)
    if args.write_profile is not None:
        print(f"wrote {write_profile(Path(args.write_profile) if args.write_profile else None)}")
        return 0
    if args.write_trace is not None:
        print(f"wrote {write_trace(Path(args.write_trace) if args.write_trace else None)}")
        return 0
    parts = set(args.only.split(","))
    figures: dict[str, float] = {}
    if "imports" in parts:  # first: fresh interpreters, before this one grows
        if args.instructions:  # before the timed figures: a missing valgrind fails at once
            try:
                counted = import_instructions()
            except InstructionCountError as error:
                print(f"benchmark.py: {error}", file=sys.stderr)
                return 2
        figures |= imports(args.repeat)
        if args.instructions:
            figures |= counted
    if "calls" in parts:
        with moto_stage() as stage:
            figures |= producer_calls(stage)
        figures |= consumer_calls(args.jobs)
        figures |= cron_calls()
    if "consumer" in parts:
        figures |= consumer_overhead(args.jobs)
    if args.json:
        print(json.dumps(figures, indent=1))
        return 0
    width = max(len(name) for name in figures)
    print(f"{'figure':<{width}}  {'value':>8}  floor/goal")
    for name, value in figures.items():
        print(f"{name:<{width}}  {value:8.2f}  {_goal(name)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
