"""Every function has a sample event (`sam local invoke -e`), and each one runs.

What needs an event is derived, not listed: the queue kinds and crons of every shipped stage
(`.env.<stage>`), whose events are generated (aijobs_cli.local.sample_events: a kind or cron a team adds
gets its own without anyone writing it), and the API routes from the OpenAPI document the API
serves, whose events are written by hand in events/ with the DLQ's and the webhook queue's. Each
event is fed to its entry point against moto, as `sam local invoke` would run it, and must do its
work.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from functools import cache
from typing import Any

import boto3
import pytest
from moto import mock_aws

from aijobs import runtime
from aijobs.domain import Job, JobStatus
from aijobs.ids import new_job_id
from aijobs.providers.local_media import encode_png
from aijobs.store.retention import write_retention
from aijobs.webhooks.secrets import WebhookSecrets
from aijobs.webhooks.transport import Poster
from aijobs.webhooks.urls import UrlPolicy
from aijobs_cdk import REPO_ROOT
from aijobs_cdk.stage import load_stage_config
from aijobs_cdk.stage_config import (
    DLQ_SUFFIX,
    WEBHOOK_QUEUE,
    StageConfig,
    queue_name_from_resource,
    queue_resource_name,
)
from aijobs_cli.local.esm import LambdaContext
from aijobs_cli.local.resources import provision
from aijobs_cli.local.sample_events import (
    SAMPLE_USER,
    consumer_event_name,
    schedule_event_names,
    stage_events,
)
from aijobs_cli.local.stack import LocalControl
from tests.integration.harness import EVENTS, Clock, Stage, load_event
from tests.unit.openai_server import ScriptedServer

pytestmark = pytest.mark.integration

EVENT_NAMES = sorted(path.name for path in EVENTS.glob("*.json"))  # the hand-written ones
DEMO_USER = SAMPLE_USER
OPERATOR_USER = "operator-demo"
# The pipeline runs on the local provider here (no network); the adapters have their own tests.
LOCAL_PROVIDERS = {
    "PROVIDER": "local",
    "KIND_PROVIDERS": "",
    "KIND_MODELS": "",
    "KIND_ALLOWED_MODELS": "",
    "RETRY_BASE_DELAY_SECONDS": "0",
}
REPORT_TEXT = " ".join(
    f"Section {n} explains how queues decouple accepting work from doing it, and why retries need a cap."
    for n in range(1, 40)
)
# A valid job input per shipped kind whose input is not plain text, as a client would submit it
# (image-caption's image is uploaded). Any other kind, such as one a team adds, gets TEXT_INPUT.
TEXT_INPUT = "Queues decouple accepting work from doing it. The consumer loads the row and runs it."
KIND_INPUTS: dict[str, Any] = {
    "embedding": "vector me",
    "image-generate": "a blue lake at dawn",
    "tts-generate": "hello there",
    "video-generate": {"prompt": "waves on a beach"},
    "report": REPORT_TEXT,
    "embedding-batch": {"texts": ["first document", "second document", "third document"]},
    "image-batch": {"prompts": ["a red fox", "a green field"]},
}


def _declared_example(kind: str) -> Any:
    """The example input a kind declares (aijobs/kinds/), else a plain text."""
    from aijobs.kinds.registry import kind as declaration

    found = declaration(kind)
    return found.example if found is not None and found.example is not None else TEXT_INPUT


@cache
def shipped_stages() -> dict[str, StageConfig]:
    """Every stage the repository ships a configuration for (`.env.dev`, `.env.prod`, ...)."""
    names = sorted(path.name.removeprefix(".env.") for path in REPO_ROOT.glob(".env.*"))
    return {name: load_stage_config(name) for name in names}


def _first_stage_with(values: Callable[[StageConfig], tuple[str, ...]]) -> dict[str, str]:
    """Each value (kind, cron) of any shipped stage -> the first stage that has it, dev first."""
    found: dict[str, str] = {}
    for name in sorted(shipped_stages(), key=lambda stage: (stage != "dev", stage)):
        for value in values(shipped_stages()[name]):
            found.setdefault(value, name)
    return dict(sorted(found.items()))


def kind_stages() -> dict[str, str]:
    """Every job kind of every shipped stage -> a stage that configures it."""
    return _first_stage_with(lambda config: config.queue_names)


def cron_stages() -> dict[str, str]:
    """Every cron expression of every shipped stage -> a stage that schedules it."""
    return _first_stage_with(lambda config: tuple(cron.text for cron in config.crons))


def sqs_queue(event: dict[str, Any]) -> tuple[str, str] | None:
    """(stage, queue resource name) an SQS event's records all come from; None if not SQS."""
    records = event.get("Records")
    if not records or any(record.get("eventSource") != "aws:sqs" for record in records):
        return None
    (arn,) = {record["eventSourceARN"] for record in records}
    resource = arn.rsplit(":", 1)[-1]
    stage = next((s for s in shipped_stages() if queue_name_from_resource(s, resource)), None)
    assert stage is not None, f"{arn} names no queue of a shipped stage"
    return stage, resource


def webhook_events() -> list[str]:
    """Events from the webhook delivery queue (`aijobs-<stage>-webhooks`)."""
    return [
        name
        for name in EVENT_NAMES
        if (queue := sqs_queue(load_event(name))) is not None
        and queue_name_from_resource(queue[0], queue[1]) == WEBHOOK_QUEUE
    ]


def dlq_events() -> list[str]:
    return [
        name
        for name in EVENT_NAMES
        if (queue := sqs_queue(load_event(name))) is not None and queue[1].endswith(DLQ_SUFFIX)
    ]


def api_events() -> list[str]:
    return [name for name in EVENT_NAMES if load_event(name).get("version") == "2.0"]


def test_every_hand_written_event_is_for_the_api_the_dlq_or_the_webhook_consumer() -> None:
    # A job queue's or a schedule's event committed to events/ would be one more file to edit per
    # kind or cron: those are generated (and `aijobs events` refuses to shadow a hand-written one).
    claimed = set(dlq_events()) | set(api_events()) | set(webhook_events())
    assert set(EVENT_NAMES) - claimed == set()


def test_every_queue_kind_and_cron_of_every_shipped_stage_gets_a_generated_event() -> None:
    for stage, config in shipped_stages().items():
        events = stage_events(config)
        for kind in config.queue_names:
            event = events[
                consumer_event_name(kind)
            ]  # sam-env writes it to .aijobs/events (docs/how-to/sam-local-invoke.md)
            # From that kind's queue on this stage (the consumer acknowledges records of any other
            # queue without running them), carrying references to distinct jobs of that kind.
            assert sqs_queue(event) == (stage, queue_resource_name(stage, kind)), kind
            bodies = [json.loads(record["body"]) for record in event["Records"]]
            assert len(bodies) > 1, "a batch: each record is acknowledged on its own"
            assert {body["kind"] for body in bodies} == {kind}
            assert len({body["jobId"] for body in bodies}) == len(bodies)
        names = schedule_event_names(cron.text for cron in config.crons)
        assert len(set(names.values())) == len(config.crons), names
        for cron in config.crons:
            assert events[names[cron.text]]["cron"] == cron.text
        assert len(events) == len(config.queue_names) + len(config.crons), sorted(events)
    assert stage_events(shipped_stages()["dev"]) == stage_events(load_stage_config("dev"))  # deterministic


def test_the_dead_letter_consumer_has_an_event() -> None:
    assert dlq_events(), "no sample event from a dead-letter queue (sqs-dlq-batch.json)"


def test_the_webhook_consumer_has_an_event() -> None:
    assert webhook_events(), "no sample event from the webhook queue (sqs-webhooks-batch.json)"


# --- each event through its entry point ------------------------------------------------------------


@contextmanager
def provisioned(stage_name: str) -> Iterator[Stage]:
    """The stage's own queues and crons, on moto, with the local provider."""
    with mock_aws():
        runtime.reset_runtime()
        config = load_stage_config(stage_name, LOCAL_PROVIDERS)
        yield Stage(resources=provision(config), clock=Clock())
    runtime.reset_runtime()


def _use_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    runtime.reset_runtime()


def _seed(stage: Stage, job_id: str, kind: str, status: JobStatus = JobStatus.QUEUED, **extra: Any) -> Job:
    stage.directory.ensure_user(DEMO_USER)
    fields: dict[str, Any] = dict(extra)
    if kind == "image-caption":
        key = f"inputs/{DEMO_USER}/lake.png"
        png = encode_png(4, 4, [b"\x20\x40\xe0" * 4] * 4)
        boto3.client("s3").put_object(Bucket=stage.resources.bucket, Key=key, Body=png)
        fields["input_ref"] = key
    else:
        fields["input"] = KIND_INPUTS.get(kind, _declared_example(kind))
    now = stage.clock()
    job = Job(
        job_id=job_id,
        user_id=DEMO_USER,
        kind=kind,
        status=status,
        provider="local",
        created_at=now,
        updated_at=now,
        **fields,
    )
    stage.store_for(DEMO_USER).create(job)
    return job


def _handler(role: str) -> Any:
    return importlib.import_module(f"{role}.handler").handler


@pytest.mark.parametrize(("kind", "stage_name"), kind_stages().items())
def test_each_consumer_event_runs_its_jobs(
    kind: str, stage_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    event = stage_events(shipped_stages()[stage_name])[consumer_event_name(kind)]
    with provisioned(stage_name) as stage:
        jobs = [_seed(stage, json.loads(r["body"])["jobId"], kind) for r in event["Records"]]
        _use_env(monkeypatch, stage.resources.consumer_env(kind))
        response = _handler("queue_consumer")(event, LambdaContext(f"aijobs-{stage_name}-consumer-{kind}"))
        assert response == {"batchItemFailures": []}
        rows = [stage.job(job) for job in jobs]
    # Ran, not merely acknowledged: a record from a queue the function does not serve would leave
    # the row queued. A workflow parent now waits for its children; video polls its task.
    assert all(row.attempts == 1 for row in rows), [(row.status, row.last_error_message) for row in rows]
    assert all(row.status in (JobStatus.SUCCEEDED, JobStatus.RUNNING) for row in rows), [
        (row.status, row.last_error_message) for row in rows
    ]


@pytest.mark.parametrize("name", dlq_events())
def test_each_dead_letter_event_finalizes_its_jobs(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    event = load_event(name)
    queue = sqs_queue(event)
    assert queue is not None
    stage_name, resource = queue
    kind = str(queue_name_from_resource(stage_name, resource))
    with provisioned(stage_name) as stage:
        # Each job spent its kind's attempt budget: only that makes a dead letter finalize a job.
        budget = stage.resources.config.queue_tuning(kind).max_attempts
        jobs = [
            _seed(stage, json.loads(r["body"])["jobId"], kind, JobStatus.RUNNING, attempts=budget)
            for r in event["Records"]
        ]
        _use_env(monkeypatch, stage.resources.dlq_env())
        response = _handler("dlq_consumer")(event, LambdaContext(f"aijobs-{stage_name}-dlq-consumer"))
        assert response == {"batchItemFailures": []}
        assert [stage.job(job).status for job in jobs] == [JobStatus.FAILED_FINAL] * len(jobs)


@pytest.mark.parametrize("name", webhook_events())
def test_each_webhook_event_delivers_its_signed_callback(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    event = load_event(name)
    with provisioned("dev") as stage, ScriptedServer() as receiver:
        stage.directory.ensure_user(DEMO_USER)
        secrets = WebhookSecrets(boto3.resource("dynamodb").Table(stage.resources.meta_table))
        secret = secrets.rotate(DEMO_USER).secret
        for record in event["Records"]:
            job = _seed(
                stage,
                json.loads(record["body"])["jobId"],
                "summary",
                callback_url=receiver.base_url + "/hook",
            )
            store = stage.store_for(DEMO_USER)
            claimed = store.claim(job, now=stage.clock(), lease=timedelta(minutes=1), max_attempts=9)
            assert claimed is not None
            store.succeed(
                claimed, now=stage.clock(), result={"output": "done"}, result_ref=None, model=None, usage={},
                cost=None,
            )  # fmt: skip
            receiver.reply({"ok": True})
        _use_env(monkeypatch, stage.resources.webhook_env())
        # The dev stage refuses http and loopback targets; the receiver here is both.
        consumer = runtime.webhook_consumer()
        consumer.poster = Poster(UrlPolicy(allow_http=True, allow_loopback=True), 5, consumer.poster.resolver)
        response = _handler("webhook_consumer")(event, LambdaContext("aijobs-dev-webhook-consumer"))
        assert response == {"batchItemFailures": []}
        assert len(receiver.requests) == len(event["Records"])
        assert all(request.headers["aijobs-signature"].startswith("t=") for request in receiver.requests)
        assert secret not in json.dumps([r.headers for r in receiver.requests])


@pytest.mark.parametrize(("cron", "stage_name"), cron_stages().items())
def test_each_cron_event_runs_its_scheduled_job(
    cron: str, stage_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = shipped_stages()[stage_name]
    event = stage_events(config)[schedule_event_names(c.text for c in config.crons)[cron]]
    with provisioned(stage_name) as stage:
        meta = boto3.resource("dynamodb").Table(stage.resources.meta_table)
        write_retention(meta, credit_tx_retention_days=9, ai_task_retention_days=9)
        _use_env(monkeypatch, stage.resources.cron_env())
        response = _handler("cron_dispatcher")(event, LambdaContext(f"aijobs-{stage_name}-cron"))
    assert (response["cron"], response["status"]) == (event["cron"], "ok")
    assert isinstance(response["result"], dict)


# --- the API: every route of its OpenAPI document ---------------------------------------------------


def _route(event: dict[str, Any]) -> tuple[str, str]:
    return event["requestContext"]["http"]["method"], event["rawPath"]


def _matches(template: str, path: str) -> bool:
    return re.fullmatch(re.sub(r"\{[^}]+\}", "[^/]+", template), path) is not None


class Api:
    """The dev stage's API function with a key for the sample events' user and credits, and an
    operator key for the `/admin/...` events. Pause/resume switch emulated consumer mappings (the
    local stack's control: the stage's CONSUMER_MAPPINGS name queue ARNs)."""

    def __init__(self, stage: Stage) -> None:
        self.stage = stage
        self.key = stage.directory.create_api_key(DEMO_USER)
        self.operator_key = stage.directory.create_api_key(OPERATOR_USER, role="operator")
        stage.store_for(DEMO_USER).ledger.grant(DEMO_USER, 100, stage.clock() + timedelta(days=1))
        runtime.api_service().clock = stage.clock
        self.admin = runtime.admin_service()
        self.admin.clock = self.admin.operator.clock = stage.clock
        self.control = LocalControl()
        self.admin.control = self.control

    def call(self, event: dict[str, Any]) -> tuple[int, Any]:
        key = self.operator_key if event["rawPath"].startswith("/admin/") else self.key
        event["headers"]["authorization"] = f"Bearer {key}"
        response = _handler("api")(event, LambdaContext("aijobs-dev-api"))
        return int(response["statusCode"]), json.loads(response.get("body") or "null")

    def document(self) -> dict[str, Any]:
        status, document = self.call(load_event("api-get-openapi.json"))
        assert status == 200
        return dict(document)


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    with provisioned("dev") as stage:
        _use_env(monkeypatch, stage.resources.api_env())
        yield Api(stage)


def test_every_api_route_has_an_event(api: Api) -> None:
    routes = {(method.upper(), path) for path, item in api.document()["paths"].items() for method in item} | {
        ("GET", "/openapi.json")
    }  # serves the document itself, outside it
    events = [_route(load_event(name)) for name in api_events()]
    missing = {
        (method, template)
        for method, template in routes
        if not any(m == method and _matches(template, path) for m, path in events)
    }
    assert missing == set()


# The operator events' targets (docs/operations/console.md): a job of the sample user, a kind's
# consumer, a tenant.
ADMIN_JOB = re.compile(r"/admin/jobs/(?P<user>[^/]+)/(?P<job>[^/]+)(?:/(?P<action>rerun|fail-final))?")
ADMIN_KIND = re.compile(r"/admin/kinds/(?P<kind>[^/]+)/(?P<action>pause|resume)")
ADMIN_TENANT = re.compile(r"/admin/tenants/(?P<user>[^/]+)/credits")


def _dead_lettered(stage: Stage, job_id: str, kind: str, error_class: str) -> Job:
    """A job whose message reached its DLQ after its attempts, finalized as the DLQ consumer does."""
    job = _seed(stage, job_id, kind, JobStatus.RUNNING, attempts=3)
    return stage.store_for(DEMO_USER).fail_final(
        job, now=stage.clock(), error_class=error_class, message="the provider answered 503",
        dead_lettered=True, own_claim=False,
    )  # fmt: skip


def _arrange_admin(api: Api, event: dict[str, Any]) -> Callable[[Any], bool]:
    """Seed what an operator event acts on, in the state its action starts from; returns whether
    the answer (and the stage afterwards) shows the action done."""
    stage, path = api.stage, event["rawPath"]
    if match := ADMIN_JOB.fullmatch(path):
        assert match["user"] == DEMO_USER, path
        if match["action"] == "rerun":
            dead = _dead_lettered(stage, match["job"], "summary", "provider_unavailable")
            return lambda _body: (stage.job(dead).status, stage.job(dead).reruns) == (JobStatus.QUEUED, 1)
        if match["action"] == "fail-final":
            stuck = _seed(stage, match["job"], "summary", JobStatus.RUNNING, attempts=1)
            return lambda _body: stage.job(stuck).status is JobStatus.FAILED_FINAL
        job = _seed(stage, match["job"], "summary")
        return lambda body: (body["userId"], body["jobId"]) == (DEMO_USER, job.job_id)
    if match := ADMIN_KIND.fullmatch(path):
        mapping, resume = stage.mapping(match["kind"]), match["action"] == "resume"
        mapping.enabled = not resume  # the consumer starts in the other state
        api.control.mappings[mapping.queue_arn] = [mapping]
        return lambda _body: mapping.enabled is resume
    if match := ADMIN_TENANT.fullmatch(path):
        assert match["user"] == DEMO_USER, path
        return lambda body: body["balance"] == 100  # Api's grant
    if path == "/admin/reruns":
        request = json.loads(event["body"])
        job_id = new_job_id(int(stage.clock().timestamp() * 1000))
        dead = _dead_lettered(stage, job_id, request["kind"], request["errorClass"])
        status = JobStatus.FAILED_FINAL if request["dryRun"] else JobStatus.QUEUED
        return lambda body: body["matched"] == 1 and stage.job(dead).status is status
    return lambda _body: True


@pytest.mark.parametrize("name", api_events())
def test_each_api_event_gets_a_documented_success(api: Api, name: str) -> None:
    event = load_event(name)
    method, path = _route(event)
    # The job a path names exists, as after a `POST /jobs`; for /children, a workflow parent its
    # consumer has split into children.
    for job_id in re.findall(r"^/jobs/([^/]+)", path):
        if path.endswith("/children"):
            workflow = next(iter(api.stage.resources.config.workflow_children))
            api.stage.send(_seed(api.stage, job_id, workflow))
            assert sum(outcome.received for outcome in api.stage.drain(workflow)) == 1
        else:
            _seed(api.stage, job_id, "summary")
    did_its_work = _arrange_admin(api, event) if path.startswith("/admin/") else None
    document = api.document()
    status, body = api.call(event)
    assert 200 <= status < 300, (name, status, body)
    if did_its_work is not None:
        assert did_its_work(body), (name, body)
    operation = next(
        (
            spec[method.lower()]
            for template, spec in document["paths"].items()
            if _matches(template, path) and method.lower() in spec
        ),
        None,
    )
    if operation is None:
        assert path == "/openapi.json", name
    else:
        assert str(status) in operation["responses"], (name, status)
    if path.endswith("/children"):
        assert body["jobs"], "the sample parent has children"
