"""Signed webhooks end to end on moto: submit with a callbackUrl, the job runs, its final outcome
is queued, signed and POSTed to a real local receiver; retries, give-up, duplicates, a lost send,
rotation, SSRF at delivery, and the secret kept out of logs and messages."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import boto3
import pytest

from aijobs import runtime
from aijobs.api.schemas import JobRequest
from aijobs.api.service import JobService
from aijobs.domain import Job
from aijobs.errors import UnprocessableError
from aijobs.observability import logger
from aijobs.scheduled.context import CronRun
from aijobs.scheduled.sweeper import run_sweeper
from aijobs.settings import CronSettings, WebhookSettings
from aijobs.store.tenants import Principal
from aijobs.webhooks.delivery import WebhookConsumer
from aijobs.webhooks.secrets import ROTATION_OVERLAP, WebhookSecrets
from aijobs.webhooks.transport import Answer, Poster
from aijobs.webhooks.urls import UrlPolicy
from aijobs_cli.local.esm import QueueMapping
from tests.integration.harness import Stage
from tests.integration.test_api import Api
from tests.integration.test_api import api as api  # the fixture, re-exported
from tests.unit.openai_server import ScriptedServer
from tests.unit.test_webhooks import receiver_accepts

pytestmark = pytest.mark.integration

USER = "alice"
HOST = "hooks.example.com"
# How long the poster waits for the receiver here: an answer that takes longer is a hang (the
# receiver runs in this process, on a machine that may be busy).
ANSWER_TIMEOUT = 30.0


@pytest.fixture
def stage_values(stage_values: dict[str, str]) -> dict[str, str]:
    """One kind is enough here (and provisions faster)."""
    return {**stage_values, "QUEUE_NAMES": "summary"}


@dataclass
class Hooks:
    """The stage's API service and webhook consumer, aimed at a local receiver under a public name."""

    stage: Stage
    receiver: ScriptedServer
    api: JobService
    consumer: WebhookConsumer
    resolved: list[str]

    @property
    def url(self) -> str:
        port = self.receiver.base_url.split(":")[2].split("/")[0]
        return f"http://{HOST}:{port}/hook"

    def submit(self, text: str, url: str | None = None, **options: Any) -> Job:
        request = JobRequest(kind="summary", input=text, options=options, callbackUrl=url or self.url)
        job, _ = self.api.submit(Principal(USER), request, None)
        return job

    def mapping(self) -> QueueMapping:
        return QueueMapping(
            sqs=self.stage.sqs,
            queue_url=self.stage.resources.webhook_queue_url,
            queue_arn=self.stage.resources.webhook_queue_arn,
            handler=self.consumer.handle,
            function_name="aijobs-dev-webhook-consumer",
        )

    def deliver(self, rounds: int = 20) -> int:
        """Poll the webhook queue until it is empty; returns how many records were received."""
        mapping, received, empty = self.mapping(), 0, 0
        for _ in range(rounds):
            outcome = mapping.poll_once()
            if outcome.received == 0:
                # A retry made visible again "now" shows on moto's clock's next tick: look again
                # a few times before calling the queue empty.
                empty += 1
                if empty == 3:
                    break
                time.sleep(0.05)
                continue
            empty = 0
            received += outcome.received
        return received

    def webhook_messages(self) -> list[Any]:
        return self.stage.receive(self.stage.resources.webhook_queue_url)


def _resolver(resolved: list[str]) -> Any:
    def resolve(host: str, _port: int) -> Sequence[str]:
        resolved.append(host)
        return ["127.0.0.1"]  # the public name, as far as this test's DNS knows

    return resolve


@pytest.fixture
def hooks(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hooks]:
    for key, value in stage.resources.api_env().items():
        monkeypatch.setenv(key, value)
    runtime.reset_runtime()
    stage.directory.ensure_user(USER)
    stage.store_for(USER).ledger.grant(USER, 100, stage.clock() + timedelta(days=3))
    api = runtime.api_service()
    api.clock = stage.clock
    # The receiver is on 127.0.0.1 behind plain http: what the local stage allows. Deployed
    # stages refuse both (tests/unit/test_webhooks.py); the address rules themselves still apply.
    api.webhook_policy = UrlPolicy(allow_http=True, allow_loopback=True)
    resolved: list[str] = []
    consumer = runtime.build_webhook_consumer(
        WebhookSettings.from_env(stage.resources.webhook_env()),
        clock=stage.clock,
        resolver=_resolver(resolved),
    )
    consumer.poster = Poster(
        UrlPolicy(allow_http=True, allow_loopback=True), ANSWER_TIMEOUT, consumer.poster.resolver
    )
    consumer.backoff = type(consumer.backoff)(0, 0)  # retries come back at once (no sleeping)
    assert api.webhook_secrets is not None
    api.webhook_secrets = WebhookSecrets(
        boto3.resource("dynamodb").Table(stage.resources.meta_table), stage.clock
    )
    consumer.secrets = api.webhook_secrets
    with ScriptedServer() as receiver:
        yield Hooks(stage, receiver, api, consumer, resolved)
    runtime.reset_runtime()


class TimeoutsInTurn(Poster):
    """A poster whose POSTs wait for an answer as long as `timeouts` say, one after the other."""

    def __init__(self, poster: Poster, timeouts: list[float]) -> None:
        super().__init__(poster.policy, poster.timeout_seconds, poster.resolver)
        self.timeouts = list(timeouts)

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> Answer:
        self.timeout_seconds = self.timeouts.pop(0)
        return super().post(url, body, headers)


def _secret(hooks: Hooks) -> str:
    return hooks.api.rotate_webhook_secret(Principal(USER)).secret


def test_a_callback_needs_a_secret_and_an_acceptable_url(hooks: Hooks) -> None:
    with pytest.raises(UnprocessableError) as missing:
        hooks.submit("one sentence.")
    assert missing.value.code == "webhook_secret_missing"
    _secret(hooks)
    hooks.api.webhook_policy = UrlPolicy()  # a deployed stage
    for url in ("http://hooks.example.com/x", "https://10.0.0.1/x", "https://169.254.169.254/"):
        with pytest.raises(UnprocessableError) as refused:
            hooks.submit("one sentence.", url)
        assert refused.value.code == "invalid_callback_url"


def test_end_to_end_the_outcome_is_signed_posted_once_and_shown_on_the_job(hooks: Hooks) -> None:
    principal = Principal(USER)
    assert not hooks.api.webhook_secret(principal).exists
    secret = _secret(hooks)
    status = hooks.api.webhook_secret(principal)
    assert status.exists
    assert status.created_at == hooks.stage.clock()
    job = hooks.submit("Queues decouple work. The consumer runs it.")
    assert hooks.api.view(hooks.api.get(principal, job.job_id)).callback is not None
    assert hooks.api.view(hooks.api.get(principal, job.job_id)).callback.state == "waiting"  # type: ignore[union-attr]
    list(hooks.stage.drain("summary"))
    hooks.receiver.reply({"ok": True})
    assert hooks.deliver() == 1
    (request,) = hooks.receiver.requests
    assert receiver_accepts(
        secret, request.headers["aijobs-signature"], request.body, now=int(hooks.stage.clock().timestamp())
    )
    assert request.headers["aijobs-delivery-id"] == f"{job.job_id}.succeeded"
    assert request.headers["aijobs-event"] == "job.succeeded"
    event = request.json
    assert event["id"] == f"{job.job_id}.succeeded"
    assert event["type"] == "job.succeeded"
    assert event["data"]["job"]["jobId"] == job.job_id
    assert event["data"]["job"]["status"] == "succeeded"
    assert "input" not in json.dumps(event["data"]["job"])
    assert event["data"]["job"]["resultRef"] is None  # a small result: on the row only
    assert hooks.resolved == [HOST]
    view = hooks.api.view(hooks.api.get(principal, job.job_id)).callback
    assert view is not None
    assert (view.state, view.attempts, view.lastStatus) == ("delivered", 1, 200)


def test_a_large_result_is_named_by_its_object_in_the_event(hooks: Hooks) -> None:
    _secret(hooks)
    text = " ".join(f"Sentence {n} says how queue number {n} decoupled its work." for n in range(60))
    job = hooks.submit(text, sentences=60)
    list(hooks.stage.drain("summary"))
    hooks.receiver.reply({"ok": True})
    assert hooks.deliver() == 1
    (request,) = hooks.receiver.requests
    assert request.json["data"]["job"]["resultRef"] == f"results/{job.job_id}/main/result.json"


def test_a_cancelled_job_sends_job_failed(hooks: Hooks) -> None:
    _secret(hooks)
    job = hooks.submit("never runs")
    hooks.api.cancel(Principal(USER), job.job_id)
    hooks.receiver.reply({"ok": True})
    hooks.deliver()
    (request,) = hooks.receiver.requests
    assert request.headers["aijobs-event"] == "job.failed"
    assert request.json["data"]["job"]["lastErrorClass"] == "cancelled"


def test_5xx_timeouts_and_hang_ups_are_retried_until_delivered(hooks: Hooks) -> None:
    _secret(hooks)
    job = hooks.submit("One sentence. Two.")
    list(hooks.stage.drain("summary"))
    hooks.receiver.reply({"error": "busy"}, status=503)
    hooks.receiver.reply(None, hang_up=True)
    # Answered only when the receiver stops: that attempt's short timeout always runs out first,
    # while every other attempt may take as long as a busy machine needs.
    hooks.receiver.reply({"ok": True}, delay=ANSWER_TIMEOUT * 10)
    hooks.receiver.reply({"error": "slow down"}, status=429)
    hooks.receiver.reply({"ok": True}, status=202)
    hooks.consumer.poster = TimeoutsInTurn(
        hooks.consumer.poster, [ANSWER_TIMEOUT, ANSWER_TIMEOUT, 0.5, ANSWER_TIMEOUT, ANSWER_TIMEOUT]
    )
    hooks.deliver()
    assert len(hooks.receiver.requests) == 5
    # Every attempt of one outcome carries the same delivery id (the receiver dedupes on it).
    assert {r.headers["aijobs-delivery-id"] for r in hooks.receiver.requests} == {f"{job.job_id}.succeeded"}
    row = hooks.stage.job(job)
    assert (row.callback_state, row.callback_attempts, row.callback_status) == ("delivered", 5, 202)


def test_a_4xx_is_given_up_at_once(hooks: Hooks) -> None:
    _secret(hooks)
    job = hooks.submit("One sentence. Two.")
    list(hooks.stage.drain("summary"))
    hooks.receiver.reply({"error": "gone"}, status=410)
    hooks.deliver()
    assert len(hooks.receiver.requests) == 1
    row = hooks.stage.job(job)
    assert (row.callback_state, row.callback_status, row.callback_error) == ("failed", 410, "HTTP 410")
    view = hooks.api.view(row).callback
    assert view is not None
    assert view.state == "failed"


def test_the_attempt_cap_gives_up_and_dead_letters_the_delivery(hooks: Hooks) -> None:
    _secret(hooks)
    hooks.consumer.max_attempts = 3
    job = hooks.submit("One sentence. Two.")
    list(hooks.stage.drain("summary"))
    for _ in range(3):
        hooks.receiver.reply({"error": "down"}, status=500)
    hooks.deliver()
    assert len(hooks.receiver.requests) == 3
    row = hooks.stage.job(job)
    assert (row.callback_state, row.callback_attempts) == ("failed", 3)
    (dead,) = hooks.stage.receive(hooks.stage.resources.webhook_dlq_url)
    assert json.loads(dead["Body"]) == {
        "jobId": job.job_id,
        "userId": USER,
        "deliveryId": f"{job.job_id}.succeeded",
    }


def test_duplicate_delivery_messages_post_once(hooks: Hooks) -> None:
    _secret(hooks)
    job = hooks.submit("One sentence. Two.")
    list(hooks.stage.drain("summary"))
    (message,) = hooks.webhook_messages()
    for _ in range(3):  # at-least-once: the same message three times
        hooks.stage.sqs.send_message(
            QueueUrl=hooks.stage.resources.webhook_queue_url, MessageBody=message["Body"]
        )
    hooks.receiver.reply({"ok": True})
    hooks.deliver()
    hooks.stage.clock.advance(3600)
    hooks.deliver()
    assert len(hooks.receiver.requests) == 1
    assert hooks.stage.job(job).callback_attempts == 1


def test_a_delivery_lost_after_the_final_commit_is_sent_by_the_sweeper(
    hooks: Hooks, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The process dies between the job's final write (which marks the webhook pending) and the
    send: the sweeper finds the pending, never-tried delivery and queues it."""
    _secret(hooks)
    job = hooks.submit("One sentence. Two.")
    list(hooks.stage.drain("summary"))
    assert len(hooks.webhook_messages()) == 1  # received and lost: as if never sent
    assert hooks.stage.job(job).callback_state == "pending"
    ctx = runtime.build_cron_context(
        CronSettings.from_env(hooks.stage.resources.cron_env()), clock=hooks.stage.clock
    )
    assert run_sweeper(CronRun("*/5 * * * *"), ctx)["webhooksResent"] == 0  # within its grace minute
    hooks.stage.clock.advance(120)
    assert run_sweeper(CronRun("*/5 * * * *"), ctx)["webhooksResent"] == 1
    hooks.receiver.reply({"ok": True})
    hooks.deliver()
    assert len(hooks.receiver.requests) == 1
    assert hooks.stage.job(job).callback_state == "delivered"
    hooks.stage.clock.advance(600)
    assert run_sweeper(CronRun("*/5 * * * *"), ctx)["webhooksResent"] == 0  # delivered: left alone


def test_a_rotation_signs_with_both_secrets_for_24_hours(hooks: Hooks) -> None:
    old = _secret(hooks)
    new = _secret(hooks)
    assert old != new
    status = hooks.api.webhook_secret(Principal(USER))
    assert status.previous_expires_at == hooks.stage.clock() + ROTATION_OVERLAP
    first = hooks.submit("One sentence. Two.")
    list(hooks.stage.drain("summary"))
    hooks.receiver.reply({"ok": True})
    hooks.deliver()
    signed = hooks.receiver.requests[-1]
    now = int(hooks.stage.clock().timestamp())
    assert signed.headers["aijobs-signature"].count("v1=") == 2
    assert receiver_accepts(old, signed.headers["aijobs-signature"], signed.body, now=now)
    assert receiver_accepts(new, signed.headers["aijobs-signature"], signed.body, now=now)

    hooks.stage.clock.advance(ROTATION_OVERLAP.total_seconds() + 1)
    second = hooks.submit("Another sentence. Two.")
    list(hooks.stage.drain("summary"))
    hooks.receiver.reply({"ok": True})
    hooks.deliver()
    later = hooks.receiver.requests[-1]
    now = int(hooks.stage.clock().timestamp())
    assert later.headers["aijobs-signature"].count("v1=") == 1
    assert receiver_accepts(new, later.headers["aijobs-signature"], later.body, now=now)
    assert not receiver_accepts(old, later.headers["aijobs-signature"], later.body, now=now)
    assert hooks.api.webhook_secret(Principal(USER)).previous_expires_at is None
    assert {first.job_id, second.job_id} == {
        json.loads(r.body)["data"]["job"]["jobId"] for r in hooks.receiver.requests
    }


_CIRCLED_METADATA = ".".join(["\u2460\u2465\u2468", "\u2461\u2464\u2463"] * 2)  # 169.254.169.254


@pytest.mark.parametrize(
    ("url", "local"),
    [(f"http://{_CIRCLED_METADATA}/", True), ("http://169\u3002254\u3002169\u3002254/", True),
     (f"https://{_CIRCLED_METADATA}/", False), ("https://169\uff0e254\uff0e169\uff0e254/", False),
     ("https://localhost./", False), ("https://foo.localhost./", False),
     ("https://[::1/", False), ("https://hooks\ufe6bexample.com/", False)],
)  # fmt: skip
def test_a_callback_url_that_normalizes_to_a_refused_target_is_a_422_at_submit(
    api: Api, url: str, local: bool
) -> None:
    """Issue 25's examples were a 202 (the last two a 500): delivery refused them later, silently."""
    if local:  # the local stage: http and loopback allowed, metadata never
        runtime.api_service().webhook_policy = UrlPolicy(allow_http=True, allow_loopback=True)
    api.call("api-post-webhook-secret.json")
    status, _h, body = api.call(
        "api-post-jobs.json", body={"kind": "summary", "input": "x", "callbackUrl": url}
    )
    assert (status, body["code"]) == (422, "invalid_callback_url"), body
    assert api.stage.store_for("alice").list_jobs("alice").jobs == []


def test_a_name_that_resolves_to_a_private_address_is_refused_at_delivery(hooks: Hooks) -> None:
    _secret(hooks)
    hooks.consumer.poster = Poster(UrlPolicy(allow_http=True), 0.5, lambda _host, _port: ["10.0.0.7"])
    job = hooks.submit("One sentence. Two.")
    list(hooks.stage.drain("summary"))
    hooks.deliver()
    assert hooks.receiver.requests == []
    row = hooks.stage.job(job)
    assert row.callback_state == "failed"
    assert row.callback_error is not None
    assert "private" in row.callback_error


def test_the_secret_never_appears_in_logs_or_messages(hooks: Hooks) -> None:
    handler: Any = logger.registered_handler
    saved, saved_level = handler.stream, logger.log_level
    captured = io.StringIO()
    handler.setStream(captured)
    # Every line the delivery logs, whatever level an earlier test (a CLI command) left behind.
    logger.setLevel("INFO")
    try:
        secret = _secret(hooks)
        job = hooks.submit("One sentence. Two.")
        list(hooks.stage.drain("summary"))
        bodies = [m["Body"] for m in hooks.webhook_messages()]
        for body in bodies:
            hooks.stage.sqs.send_message(QueueUrl=hooks.stage.resources.webhook_queue_url, MessageBody=body)
        hooks.receiver.reply({"error": "x"}, status=500)
        hooks.receiver.reply({"ok": True})
        hooks.deliver()
    finally:
        handler.setStream(saved)
        logger.setLevel(saved_level)
    logs = captured.getvalue()
    assert "webhook delivered" in logs
    assert job.job_id in logs
    assert secret not in logs
    assert secret.removeprefix("whsec_") not in logs
    assert all(secret not in body for body in bodies)


def test_the_openapi_document_shows_callback_url_and_the_secret_routes(hooks: Hooks) -> None:
    from api.handler import handler

    from aijobs_cli.local.esm import LambdaContext
    from tests.integration.harness import load_event

    response = handler(load_event("api-get-openapi.json"), LambdaContext("aijobs-dev-api"))
    document = json.loads(response["body"])
    request = document["components"]["schemas"]["JobRequest"]["properties"]
    assert "2048" in json.dumps(request["callbackUrl"])
    assert "callback" in document["components"]["schemas"]["JobView"]["properties"]
    assert set(document["paths"]["/webhooks/secret"]) == {"get", "post"}
