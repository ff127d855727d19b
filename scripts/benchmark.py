"""Performance figures of issue 12, each as a ratio against a baseline measured in the same run.

Prints figures and asserts nothing (machines here are shared and noisy; tests never time things):

- AWS calls per path, counted from botocore's own events (tests/aws_calls.py): the producer's
  `POST /jobs` warm, with an `Idempotency-Key`, and cold (a fresh container); the consumer per
  successful job in batches of 5 and 1, per retry and per final failure; the cron per shard. The
  floor of each path is printed beside it.
- Consumer wall time against a bare loop replaying exactly the AWS calls the consumer made, on
  the same moto backend (the consumer's own overhead: parsing, models, logging, metrics).
- Handler import CPU and peak memory against `import boto3` alone, each in fresh interpreters
  (median of --repeat runs).

    .venv/bin/python scripts/benchmark.py [--jobs 40] [--repeat 5] [--only calls,consumer,imports]

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
TEXT = "Queues decouple accepting work from doing it. A consumer does the slow part. Retries are classified."
# The floor of each path in this design: to accept a job, the query of the credit grants it draws
# from, one transaction and one send (a cold container first looks its API key up); to run one, a
# claim, its result and its finish.
FLOORS = {
    "producer POST /jobs, warm": 3,
    "producer POST /jobs, Idempotency-Key": 3,
    "producer POST /jobs, cold container": 4,
    "consumer per job, batch of 5": 3,
    "consumer per job, batch of 1": 3,
}


# --- a moto stage ---------------------------------------------------------------------------------


@contextmanager
def moto_stage() -> Iterator[Any]:
    from moto import mock_aws

    from aijobs import runtime
    from aijobs.observability import logger
    from aijobs.stage_config import parse_stage_config
    from aijobs_cli.moto_speedups import apply as apply_speedups
    from aijobs_cli.resources import provision
    from tests.integration.harness import Clock, Stage

    logger.setLevel("ERROR")
    apply_speedups()
    values = {
        "QUEUE_NAMES": "summary",
        "CRONS": "*/10 * * * *;*/5 * * * *",
        "KIND_PRICES": "summary:1",
        "RETRY_BASE_DELAY_SECONDS": "0",
        "THROTTLE_DELAY_SECONDS": "0",
        "PROVIDER": "local",
    }
    with mock_aws():
        runtime.reset_runtime()
        stage = Stage(resources=provision(parse_stage_config("bench", values)), clock=Clock())
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
    from aijobs_cli.esm import LambdaContext
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
    from aijobs_cli.esm import LambdaContext, sqs_record

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
    from aijobs.scheduled.maintenance import write_retention
    from aijobs.scheduled.registry import SCHEDULED_HANDLERS
    from aijobs.settings import CronSettings
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
cpu = time.process_time() - started
print(cpu, peak_kib())
"""
)


def _import_once(module: str) -> tuple[float, float]:
    paths = [str(ROOT / "functions"), str(ROOT / "layers/aijobs/python")]
    code = PROBE.format(paths=paths, module=module)
    from aijobs_cdk import LAMBDA_ONLY_ENV

    env = {"PATH": os.environ.get("PATH", ""), "AWS_DEFAULT_REGION": "us-east-1", **LAMBDA_ONLY_ENV}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
    cpu, rss = out.stdout.split()
    return float(cpu), float(rss)


def _baseline_rss() -> float:
    code = PEAK_KIB + "print(peak_kib())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout)


def imports(repeat: int) -> dict[str, float]:
    empty = statistics.median(_baseline_rss() for _ in range(repeat))
    samples: dict[str, list[tuple[float, float]]] = {"boto3": []}
    for name in HANDLERS:
        samples[f"{name}.handler"] = []
    for _ in range(repeat):  # interleaved, so a noisy moment hits every module alike
        for module in samples:
            samples[module].append(_import_once(module))
    cpu = {module: statistics.median(s[0] for s in runs) for module, runs in samples.items()}
    rss = {module: statistics.median(s[1] for s in runs) - empty for module, runs in samples.items()}
    figures = {}
    for name in HANDLERS:
        module = f"{name}.handler"
        figures[f"import CPU {name} vs import boto3"] = cpu[module] / cpu["boto3"]
        figures[f"import memory {name} vs import boto3"] = rss[module] / rss["boto3"]
    figures["(import boto3: CPU ms)"] = cpu["boto3"] * 1000
    figures["(import boto3: memory MiB over an empty interpreter)"] = rss["boto3"] / 1024
    return figures


def _goal(name: str) -> str:
    if name in FLOORS:
        return f"floor {FLOORS[name]}"
    for prefix, goal in (
        ("consumer wall time", "<= 1.1x"),
        ("import CPU", "<= 1.5x"),
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
    args = parser.parse_args(argv)
    parts = set(args.only.split(","))
    figures: dict[str, float] = {}
    if "imports" in parts:  # first: fresh interpreters, before this one grows
        figures |= imports(args.repeat)
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
