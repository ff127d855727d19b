"""A provisioned stage on moto, with a controllable clock and helpers to drive the functions."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3

from aijobs import runtime
from aijobs.consumer.attempts import Consumer
from aijobs.dead_letters import DeadLetterConsumer
from aijobs.domain import Job, JobStatus, QueueMessage
from aijobs.ids import new_job_id
from aijobs.providers.base import (
    EmbeddingRequest,
    EmbeddingResult,
    ImageRequest,
    ImageResult,
    ProviderResult,
    SpeechRequest,
    TextRequest,
    TextResult,
    VideoRequest,
)
from aijobs.providers.local import LocalProvider
from aijobs.queues import JobQueues
from aijobs.settings import ConsumerSettings, DlqSettings
from aijobs.store.jobs import JobStore
from aijobs.store.tenants import Directory
from aijobs_cli.local.esm import QueueMapping
from aijobs_cli.local.resources import StageResources

EVENTS = Path(__file__).resolve().parents[2] / "events"


def load_event(name: str) -> dict[str, Any]:
    """A hand-written sample event of events/ (API, DLQ, webhooks)."""
    event: dict[str, Any] = json.loads((EVENTS / name).read_text())
    return event


def consumer_event(kind: str, stage: str = "dev") -> dict[str, Any]:
    """The generated sample SQS batch of `kind`'s queue on `stage` (`sqs-<kind>-batch.json`)."""
    from aijobs_cli.local import sample_events

    return sample_events.consumer_event(kind, sample_events.queue_arn(stage, kind))


def schedule_event(expression: str) -> dict[str, Any]:
    """The generated input the schedule of cron `expression` sends the dispatcher."""
    from aijobs_cli.local import sample_events

    return sample_events.schedule_event(expression)


class Clock:
    """A clock the test moves by hand (leases and timestamps); SQS timing stays real unless the
    test puts moto's SQS on this clock too (`sqs_on`)."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 29, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class CountingProvider(LocalProvider):
    """The local provider, counting calls per job (to prove a job ran once)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(sleep=lambda _seconds: None, **kwargs)
        self.calls: dict[str, int] = {}
        self.before_run: Any = None

    def after(self, result: Any) -> Any:
        """What a call answers (subclasses rewrite it: another model, usage or cost)."""
        return result

    def _count(self, request: Any) -> None:
        job_id = request.call.job_id
        self.calls[job_id] = self.calls.get(job_id, 0) + 1
        if self.before_run is not None:
            hook, self.before_run = self.before_run, None
            hook(request)

    def generate_text(self, request: TextRequest) -> TextResult:
        self._count(request)
        result: TextResult = self.after(super().generate_text(request))
        return result

    def embed(self, request: EmbeddingRequest) -> EmbeddingResult:
        self._count(request)
        result: EmbeddingResult = self.after(super().embed(request))
        return result

    def generate_image(self, request: ImageRequest) -> ImageResult:
        self._count(request)
        result: ImageResult = self.after(super().generate_image(request))
        return result

    def synthesize_speech(self, request: SpeechRequest) -> ProviderResult:
        self._count(request)
        result: ProviderResult = self.after(super().synthesize_speech(request))
        return result

    def start_video(self, request: VideoRequest) -> ProviderResult:
        self._count(request)
        result: ProviderResult = self.after(super().start_video(request))
        return result

    def check_video(self, request: VideoRequest) -> ProviderResult:
        self._count(request)
        result: ProviderResult = self.after(super().check_video(request))
        return result


@contextmanager
def sqs_on(clock: Clock) -> Iterator[None]:
    """moto's SQS reads `clock` instead of the wall clock inside the block: a delayed message or a
    hidden one (a visibility timeout) comes back when the test advances the clock, never because
    the machine was slow to reach the next line. Enter it before the test sends its first message
    (messages sent on the wall clock would be out of step), and advance the clock to let even a
    zero visibility timeout pass (moto's SQS shows a message only once its time is past)."""
    from moto.sqs import models as sqs_models

    models: Any = sqs_models  # the module's clock, as aijobs_cli.moto_patches.sqs_queue_attributes sets it
    wall = models.unix_time, models.unix_time_millis

    def unix_time(dt: Any = None) -> float:
        return wall[0](dt) if dt is not None else clock().timestamp()

    def unix_time_millis(dt: Any = None) -> float:
        return wall[1](dt) if dt is not None else clock().timestamp() * 1000.0

    models.unix_time, models.unix_time_millis = unix_time, unix_time_millis
    try:
        yield
    finally:
        models.unix_time, models.unix_time_millis = wall


@dataclass
class Stage:
    resources: StageResources
    clock: Clock
    provider: CountingProvider = field(default_factory=CountingProvider)
    _consumers: dict[str, Consumer] = field(default_factory=dict)

    @property
    def sqs(self) -> Any:
        return boto3.client("sqs", region_name=self.resources.region)

    @property
    def directory(self) -> Directory:
        return runtime.directory(ConsumerSettings.from_env(self.resources.consumer_env(self.kinds[0])))

    @property
    def kinds(self) -> tuple[str, ...]:
        return self.resources.config.queue_names

    def consumer(self, kind: str) -> Consumer:
        if kind not in self._consumers:
            consumer = runtime.build_consumer(
                ConsumerSettings.from_env(self.resources.consumer_env(kind)), clock=self.clock
            )
            consumer.provider = self.provider
            self._consumers[kind] = consumer
        return self._consumers[kind]

    def mapping(self, kind: str, batch_size: int = 5) -> QueueMapping:
        return QueueMapping(
            sqs=self.sqs,
            queue_url=self.resources.queue_urls[kind],
            queue_arn=self.resources.queue_arns[kind],
            handler=self.consumer(kind).handle,
            function_name=f"aijobs-dev-consumer-{kind}",
            batch_size=batch_size,
        )

    def dead_letter_consumer(self) -> DeadLetterConsumer:
        """The stage's DLQ consumer, on the test's clock (built anew: its clients are the current ones)."""
        return runtime.build_dead_letter_consumer(
            DlqSettings.from_env(self.resources.dlq_env()), clock=self.clock
        )

    def dlq_mapping(self, kind: str = "summary") -> QueueMapping:
        """A kind's DLQ delivered to the DLQ consumer, as its event-source mapping would."""
        return QueueMapping(
            sqs=self.sqs,
            queue_url=self.resources.dlq_urls[kind],
            queue_arn=self.resources.dlq_arns[kind],
            handler=self.dead_letter_consumer().handle,
            function_name="aijobs-dev-dlq",
        )

    def store_for(self, user_id: str) -> JobStore:
        table = self.directory.shard_for(user_id)
        assert table is not None, f"unknown user {user_id}"
        return JobStore(table, self.clock, buckets=self.directory.buckets)

    def submit(self, user_id: str, kind: str, text: Any, **fields: Any) -> Job:
        """Write a queued row and send its reference, as the producer does."""
        self.directory.ensure_user(user_id)
        now = self.clock()
        job = Job(
            job_id=new_job_id(int(now.timestamp() * 1000)),
            user_id=user_id,
            kind=kind,
            status=JobStatus.QUEUED,
            input=text,
            provider="local",
            created_at=now,
            updated_at=now,
            **fields,
        )
        self.store_for(user_id).create(job)
        self.send(job)
        return job

    def send(self, job: Job, *, kind: str | None = None) -> None:
        """Send the job's reference as the producer does (through `JobQueues`, tenant group and all)."""
        message = QueueMessage(jobId=job.job_id, userId=job.user_id, kind=job.kind)
        JobQueues(self.sqs, self.resources.queue_urls).send(message, kind=kind or job.kind)

    def job(self, job: Job) -> Job:
        row = self.store_for(job.user_id).get(job.user_id, job.job_id)
        assert row is not None
        return row

    def set_attempts(self, job: Job, attempts: int) -> None:
        """Write the row's attempt count, as attempts whose consumers died would have left it."""
        self.store_for(job.user_id)._table.update_item(
            Key={"pk": f"USER#{job.user_id}", "sk": f"JOB#{job.job_id}"},
            UpdateExpression="SET attempts = :n",
            ExpressionAttributeValues={":n": attempts},
        )

    def job_by_id(self, user_id: str, job_id: str) -> Job:
        row = self.store_for(user_id).get(user_id, job_id)
        assert row is not None
        return row

    def receive(self, url: str, count: int = 10) -> list[Any]:
        response = self.sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=count, AttributeNames=["All"])
        messages: list[Any] = response.get("Messages", [])
        return messages

    def redrive(self, kind: str) -> None:
        """Receive the kind's one waiting message `maxReceiveCount` times without running it (receives
        that never reach our code: a throttled invocation, a function that failed to start), so SQS's
        redrive policy moves it to the kind's DLQ, as it would in AWS."""
        url = self.resources.queue_urls[kind]
        policy = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])["Attributes"]
        for _ in range(json.loads(policy["RedrivePolicy"])["maxReceiveCount"]):
            assert len(self.sqs.receive_message(QueueUrl=url, VisibilityTimeout=0)["Messages"]) == 1
        assert "Messages" not in self.sqs.receive_message(QueueUrl=url)  # this receive moved it

    def depth(self, url: str) -> int:
        """Every message of a queue, visible, in flight or delayed (read without receiving any)."""
        names = ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
                 "ApproximateNumberOfMessagesDelayed"]  # fmt: skip
        found = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=names)["Attributes"]
        return sum(int(found[name]) for name in names)

    def drain(self, kind: str, *, rounds: int = 20) -> Iterator[Any]:
        mapping = self.mapping(kind)
        for _ in range(rounds):
            outcome = mapping.poll_once()
            if outcome.received == 0:
                return
            yield outcome

    def subscribe_inbox(self, name: str = "alert-inbox") -> str:
        """An SQS queue subscribed to the stage's alert topic, to read the alerts a test expects."""
        url: str = self.sqs.create_queue(QueueName=name)["QueueUrl"]
        arn = self.sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        boto3.client("sns").subscribe(TopicArn=self.resources.topic_arn, Protocol="sqs", Endpoint=arn)
        return url


@contextmanager
def restored_process_state() -> Iterator[None]:
    """Undo what a local stack and the CLI set process-wide: environment (endpoint, credentials),
    the logger's level and stream, and the cached runtime."""
    from aijobs.observability import logger

    handler: Any = logger.registered_handler
    saved_env, saved_level, saved_stream = dict(os.environ), logger.log_level, handler.stream
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        logger.setLevel(saved_level)
        handler.setStream(saved_stream)
        runtime.reset_runtime()


# Local stacks under test retry and re-check at once.
FAST = {"RETRY_BASE_DELAY_SECONDS": "0", "THROTTLE_DELAY_SECONDS": "0", "PROVIDER_RECHECK_SECONDS": "0"}


@contextmanager
def running_local_stack(
    folder: Path, values: Mapping[str, str] | None = None, **options: Any
) -> Iterator[Any]:
    """A quiet local stack (the `local` stage with FAST retries, and `values` over them) whose info
    file is in `folder`, with the process state it changes restored afterwards; `options` are
    LocalStack's own (e.g. `long_poll_seconds`)."""
    from aijobs.observability import logger
    from aijobs_cdk.stage import load_stage_config
    from aijobs_cli.commands._common import CurrentStderr
    from aijobs_cli.local.stack import LocalStack

    config = load_stage_config("local", {**FAST, **(values or {})})
    local = LocalStack(config, port=0, info_file=folder / "local.json", log=lambda _line: None, **options)
    with restored_process_state():
        # The stack's functions run as threads of this process while tests run the CLI in it
        # (CliRunner swaps sys.stdout): their logs go to stderr and their EMF lines nowhere, so
        # a CLI run's stdout is the CLI's alone, whatever the stack does meanwhile.
        os.environ["POWERTOOLS_METRICS_DISABLED"] = "true"
        logger.registered_handler.setStream(CurrentStderr())  # type: ignore[attr-defined]
        with local:
            yield local


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """Poll `condition` (every 0.2 s) until it holds; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


ApiCall = Callable[..., tuple[int, Any]]


def nothing_written(stage: Stage, credits: int, user: str = "alice") -> None:
    """A refused submission left no job row and the whole balance."""
    assert stage.store_for(user).ledger.account(user).balance == credits
    assert stage.store_for(user).list_jobs(user).jobs == []


def api_caller(
    stage: Stage, monkeypatch: Any, *, credits: int, operators: tuple[str, ...] = ()
) -> Iterator[ApiCall]:
    """`call(method, path, body, key="alice")` through the real API handler as alice (with
    `credits` that outlive the real clock) or as one of `operators` (operator keys), for a fixture
    to `yield from`; the runtime is reset afterwards."""
    from api import handler

    from aijobs_cli.local.esm import LambdaContext

    for key, value in stage.resources.api_env().items():
        monkeypatch.setenv(key, value)
    runtime.reset_runtime()
    runtime.api_service().clock = stage.clock
    stage.directory.ensure_user("alice")
    keys = {"alice": stage.directory.create_api_key("alice")}
    keys |= {name: stage.directory.create_api_key(name, role="operator") for name in operators}
    stage.store_for("alice").ledger.grant("alice", credits, datetime.now(UTC) + timedelta(days=30))

    def call(method: str, path: str, body: Any = None, *, key: str = "alice") -> tuple[int, Any]:
        event = load_event("api-post-jobs.json")
        event["headers"]["authorization"] = f"Bearer {keys[key]}"
        event["headers"].pop("idempotency-key", None)
        event["requestContext"]["http"]["method"] = method
        event["rawPath"] = event["requestContext"]["http"]["path"] = path
        event["rawQueryString"] = ""
        event.pop("queryStringParameters", None)
        if "?" in path:
            raw_path, query = path.split("?", 1)
            event["rawPath"] = event["requestContext"]["http"]["path"] = raw_path
            event["rawQueryString"] = query
            event["queryStringParameters"] = dict(part.split("=", 1) for part in query.split("&"))
        event["body"] = json.dumps(body) if body is not None else None
        event["isBase64Encoded"] = False
        response = handler.handler(event, LambdaContext("api"))
        return response["statusCode"], json.loads(response["body"])

    yield call
    runtime.reset_runtime()
