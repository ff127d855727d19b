"""Memory of each Lambda function (issue 27, point 6): what the figures that size them are measured on.

Each function runs in a fresh interpreter of its own (one subprocess per row): the handler module is
imported as Lambda imports it (`functions/` and the layer on the path, nothing else loaded first), then
a moto stage is provisioned in the same process (tests/integration/harness.py's Stage, as
scripts/benchmark.py's moto_stage builds it) and the handler is invoked on a full batch of real event
shapes (the SQS records the event-source mapping hands over, `events/api-post-jobs.json`,
`events/sqs-dlq-batch.json`, `events/sqs-webhooks-batch.json`, the schedules' inputs) with the local
provider. Printed per function, in MiB:

- `import`: the process's peak RSS once the handler is imported (VmHWM; `ru_maxrss` beside it);
- `batch +`: how far the batch raised the peak above the provisioned stage's RSS, and `tracemalloc`
  the peak of the Python allocations the batch made (moto answers the calls in this process, so both
  include moto's side of them: an upper bound);
- `estimate`: import + batch growth, the function's peak in Lambda without moto's own footprint;
- `held`: for the media kinds, the largest result (stored object) x the batch size: what a batch run
  concurrently (issue 27 point 2) would hold at once; the local provider's media are small, so the
  figure of a real model is named beside it in docs/operations/cost.md.

    .venv/bin/python scripts/benchmark_memory.py [--json]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# (row, function folder, kind its stage runs).
ROWS = (
    ("api", "api", "summary"),
    ("queue_consumer summary", "queue_consumer", "summary"),
    ("queue_consumer embedding", "queue_consumer", "embedding"),
    ("queue_consumer image-generate", "queue_consumer", "image-generate"),
    ("queue_consumer tts-generate", "queue_consumer", "tts-generate"),
    ("queue_consumer video-generate", "queue_consumer", "video-generate"),
    ("dlq_consumer", "dlq_consumer", "summary"),
    ("cron_dispatcher", "cron_dispatcher", "summary"),
    ("webhook_consumer", "webhook_consumer", "summary"),
)
INPUTS = {
    "summary": "Queues decouple accepting work from doing it. A consumer does the slow part. " * 40,
    "embedding": "A paragraph to embed, as a client sends it. " * 20,
    "image-generate": "a lighthouse on a cliff at dusk, oil painting",
    "tts-generate": "Your job has finished. The results are ready to download from the jobs page. " * 6,
    "video-generate": "a paper boat drifting down a rainy street",
}
USER = "alice"
MIB = 1024.0


def _status_kib(field: str) -> float:
    with open("/proc/self/status") as status:
        return float(next(line.split()[1] for line in status if line.startswith(field + ":")))


def _peak_mib() -> float:
    return _status_kib("VmHWM") / MIB


def _rss_mib() -> float:
    return _status_kib("VmRSS") / MIB


def _maxrss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / MIB


def _stage_values(kind: str) -> dict[str, str]:
    """scripts/benchmark.py's stage with `kind` as its one kind: no back-off or re-check waits."""
    from scripts.benchmark import stage_values

    return {
        **stage_values(),
        "QUEUE_NAMES": kind,
        "KIND_PRICES": f"{kind}:1",
        "PROVIDER_RECHECK_SECONDS": "0",
    }


@contextmanager
def memory_stage(kind: str) -> Iterator[Any]:
    """scripts/benchmark.py's moto_stage, with `kind` as its kind."""
    from moto import mock_aws

    from aijobs import aws, runtime
    from aijobs.observability import logger
    from aijobs.store.retention import write_retention
    from aijobs_cdk.stage_config import parse_stage_config
    from aijobs_cli.local.resources import provision
    from aijobs_cli.moto_patches import apply as apply_speedups
    from tests.integration.harness import Clock, Stage

    logger.setLevel("ERROR")
    logger.registered_handler.setStream(sys.stderr)  # type: ignore[attr-defined]
    apply_speedups()
    with mock_aws():
        runtime.reset_runtime()
        stage = Stage(resources=provision(parse_stage_config("bench", _stage_values(kind))), clock=Clock())
        meta = aws.dynamodb().Table(stage.resources.meta_table)
        write_retention(meta, credit_tx_retention_days=90, ai_task_retention_days=30)
        stage.directory.ensure_user(USER)
        yield stage
    runtime.reset_runtime()


def _records(stage: Any, url: str, arn: str) -> list[dict[str, Any]]:
    from aijobs_cli.local.esm import sqs_record

    messages = stage.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"])
    return [sqs_record(message, arn) for message in messages.get("Messages", [])]


def _consumer_batch(stage: Any, kind: str, handler: Any, context: Any) -> int:
    """A full batch of the kind's jobs through the handler, again while a job is still running (a
    video's re-checks); the batch's size."""
    batch: int = stage.resources.config.queue_tuning(kind).batch_size
    for _ in range(batch):
        stage.submit(USER, kind, INPUTS[kind])
    url, arn = stage.resources.queue_urls[kind], stage.resources.queue_arns[kind]
    for _ in range(10):
        records = _records(stage, url, arn)[:batch]
        if not records:
            break
        handler({"Records": records}, context)
        for record in records:
            stage.sqs.delete_message(QueueUrl=url, ReceiptHandle=record["receiptHandle"])
    return batch


def _api_batch(stage: Any, handler: Any, context: Any) -> int:
    """A stage batch's worth of `POST /jobs` and a `GET /jobs/{id}` of each (events/)."""
    from datetime import timedelta

    from tests.integration.harness import load_event

    key = stage.directory.create_api_key(USER)
    stage.store_for(USER).ledger.grant(USER, 10_000, stage.clock() + timedelta(days=30))
    batch: int = stage.resources.config.batch_size
    for _ in range(batch):
        event = load_event("api-post-jobs.json")
        event["headers"] = {"content-type": "application/json", "authorization": f"Bearer {key}"}
        event["body"] = json.dumps({"kind": "summary", "input": INPUTS["summary"]})
        answer = handler(event, context)
        assert answer["statusCode"] == 202, answer
        event = load_event("api-get-job.json")
        event["headers"] = {"authorization": f"Bearer {key}"}
        event["rawPath"] = f"/jobs/{json.loads(answer['body'])['jobId']}"
        assert handler(event, context)["statusCode"] == 200
    return batch


def _dlq_batch(stage: Any, handler: Any, context: Any) -> int:
    """A stage batch of dead letters (events/sqs-dlq-batch.json's shape) for real queued jobs."""
    from tests.integration.harness import load_event

    batch: int = stage.resources.config.batch_size
    template = load_event("sqs-dlq-batch.json")["Records"][0]
    records = []
    for index in range(batch):
        job = stage.submit(USER, "summary", INPUTS["summary"])
        body = json.dumps({"jobId": job.job_id, "userId": USER, "kind": "summary"})
        records.append({**template, "messageId": f"dlq-{index}", "body": body,
                        "eventSourceARN": stage.resources.dlq_arns["summary"]})  # fmt: skip
    handler({"Records": records}, context)
    return batch


def _webhook_batch(stage: Any, handler: Any, context: Any) -> int:
    """A webhook batch (events/sqs-webhooks-batch.json's shape, WEBHOOK_BATCH_SIZE records) for
    jobs the stage does not have: the consumer reads and drops them (no POST leaves the machine)."""
    from aijobs_cdk.stage_config import WEBHOOK_BATCH_SIZE
    from tests.integration.harness import load_event

    template = load_event("sqs-webhooks-batch.json")["Records"][0]
    records = [{**template, "messageId": f"hook-{i}"} for i in range(WEBHOOK_BATCH_SIZE)]
    handler({"Records": records}, context)
    return WEBHOOK_BATCH_SIZE


def _cron_batch(handler: Any, context: Any) -> int:
    """One run of each registered cron (the schedules' inputs)."""
    from aijobs.scheduled.registry import SCHEDULED_HANDLERS
    from tests.integration.harness import schedule_event

    for expression in SCHEDULED_HANDLERS:
        handler(schedule_event(expression), context)
    return len(SCHEDULED_HANDLERS)


def _environment(stage: Any, function: str, kind: str) -> dict[str, str]:
    resources = stage.resources
    env: dict[str, str] = {
        "api": resources.api_env,
        "dlq_consumer": resources.dlq_env,
        "cron_dispatcher": resources.cron_env,
        "webhook_consumer": resources.webhook_env,
    }.get(function, lambda: resources.consumer_env(kind))()
    return env


def _largest_object(stage: Any) -> int:
    import boto3

    listed = boto3.client("s3").list_objects_v2(Bucket=stage.resources.bucket).get("Contents", [])
    return max((item["Size"] for item in listed), default=0)


def child(function: str, kind: str) -> dict[str, float]:
    """Import `function`'s handler as Lambda does, then run a batch on a moto stage; MiB figures."""
    sys.path.append(str(ROOT))  # scripts/ and tests/, imported after the handler
    started = time.process_time()
    handler = importlib.import_module(f"{function}.handler").handler
    figures = {
        "import CPU s": time.process_time() - started,
        "import": _peak_mib(),
        "ru_maxrss import": _maxrss_mib(),
    }
    from aijobs import runtime
    from aijobs_cli.local.esm import LambdaContext
    from scripts.benchmark import environment

    with memory_stage(kind) as stage, environment(_environment(stage, function, kind)):
        runtime.reset_runtime()
        context = LambdaContext(f"aijobs-bench-{function}")
        base = _rss_mib()
        tracemalloc.start()
        if function == "queue_consumer":
            batch = _consumer_batch(stage, kind, handler, context)
        elif function == "api":
            batch = _api_batch(stage, handler, context)
        elif function == "dlq_consumer":
            batch = _dlq_batch(stage, handler, context)
        elif function == "webhook_consumer":
            batch = _webhook_batch(stage, handler, context)
        else:
            batch = _cron_batch(handler, context)
        traced = tracemalloc.get_traced_memory()[1] / MIB / MIB
        tracemalloc.stop()
        figures |= {"batch": float(batch), "stage RSS": base, "after batch": _peak_mib(),
                    "ru_maxrss after batch": _maxrss_mib(), "tracemalloc": traced}  # fmt: skip
        figures["batch +"] = max(0.0, figures["after batch"] - base)
        figures["largest result"] = _largest_object(stage) / MIB / MIB
        jobs = stage.store_for(USER).list_jobs(USER).jobs
        figures["succeeded"] = float(sum(job.status.value == "succeeded" for job in jobs))
    figures["estimate"] = figures["import"] + figures["batch +"]
    figures["held"] = figures["largest result"] * batch if function == "queue_consumer" else 0.0
    return figures


def _child_env() -> dict[str, str]:
    from aijobs_cdk import LAMBDA_ONLY_ENV

    paths = [ROOT / "functions", ROOT / "layers/aijobs/python", ROOT / "cdk", ROOT / "cli", ROOT]
    return {
        "PATH": os.environ.get("PATH", ""),
        "PYTHONPATH": os.pathsep.join(str(path) for path in paths),
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "POWERTOOLS_METRICS_DISABLED": "true",
        "POWERTOOLS_TRACE_DISABLED": "true",
        **LAMBDA_ONLY_ENV,
    }


def measure() -> dict[str, dict[str, float]]:
    rows = {}
    for label, function, kind in ROWS:
        out = subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "--child", function, kind],
            capture_output=True, text=True, check=True, env=_child_env(),
        )  # fmt: skip
        rows[label] = json.loads(out.stdout.strip().splitlines()[-1])
    return rows


COLUMNS = (
    "import CPU s", "import", "ru_maxrss import", "batch", "succeeded", "batch +", "tracemalloc",
    "after batch", "estimate",
    "largest result", "held",
)  # fmt: skip


def table(rows: dict[str, dict[str, float]]) -> str:
    head = f"{'function':32}" + "".join(f"{name:>17}" for name in COLUMNS)
    lines = [head]
    for label, figures in rows.items():
        lines.append(f"{label:32}" + "".join(f"{figures[name]:17.2f}" for name in COLUMNS))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    parser.add_argument("--child", nargs=2, metavar=("FUNCTION", "KIND"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(*args.child)))
        return 0
    sys.path[:0] = [str(ROOT / "cdk"), str(ROOT / "layers/aijobs/python")]
    rows = measure()
    print(json.dumps(rows, indent=2) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
