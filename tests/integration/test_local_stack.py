"""The local stack, started in-process (moto in its own child process), driven over HTTP and by the CLI."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import socket
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import boto3
import pytest
from typer.testing import CliRunner

from aijobs import runtime
from aijobs.bindings import queue_name_of
from aijobs.settings import ConsumerSettings
from aijobs.store.jobs import JobStore
from aijobs_cdk.stage_config import DLQ_SUFFIX
from aijobs_cli.local.stack import DEMO_USER, LocalStack, mapping_plans
from aijobs_cli.main import app
from aijobs_cli.target import Target
from tests.integration.harness import running_local_stack, wait_until

pytestmark = pytest.mark.integration

TEXT = "Queues decouple accepting work from doing it. The consumer does the slow part."


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_local_stack(tmp_path_factory.mktemp("local")) as local:
        yield local


@pytest.fixture(scope="module")
def client(stack: LocalStack) -> Target:
    assert stack.info_file is not None
    return Target.from_info_file(stack.info_file)


def _wait(client: Target, job_id: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.request("GET", f"/jobs/{job_id}").body
        if job["status"] in ("succeeded", "failed_final"):
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job_id} did not finish: {job}")


def _submit(client: Target, kind: str, text: str) -> str:
    response = client.request("POST", "/jobs", {"kind": kind, "input": text})
    assert response.status == 202, response.body
    return str(response.body["jobId"])


def test_info_file_has_the_connection_details(stack: LocalStack) -> None:
    assert stack.info_file is not None
    info = json.loads(stack.info_file.read_text())
    assert {"api_url", "api_key", "admin_key", "aws_endpoint_url", "stage"} <= set(info)
    assert info["stage"] == "local"
    assert info["api_url"].startswith("http://127.0.0.1:")


def test_submit_then_succeeded(client: Target) -> None:
    job = _wait(client, _submit(client, "summary", TEXT))
    assert (job["status"], job["attempts"]) == ("succeeded", 1)
    assert job["result"]["summary"]


def test_transient_failures_retry_to_success_with_three_attempts(client: Target) -> None:
    job = _wait(client, _submit(client, "summary", "#fail:503x2 " + TEXT))
    assert (job["status"], job["attempts"], job["lastErrorClass"]) == ("succeeded", 3, "transient")


def test_a_permanent_failure_is_final(client: Target) -> None:
    job = _wait(client, _submit(client, "summary", "#fail:400 " + TEXT))
    assert (job["status"], job["attempts"], job["lastErrorClass"]) == ("failed_final", 1, "invalid_input")


def test_a_long_running_provider_succeeds_without_extra_attempts(client: Target) -> None:
    job = _wait(client, _submit(client, "tts-generate", "#running:3 " + TEXT))
    assert (job["status"], job["attempts"]) == ("succeeded", 1)


def test_exhausted_retries_dead_letter_alert_and_rerun_succeeds(stack: LocalStack, client: Target) -> None:
    sqs = boto3.client("sqs")
    inbox = sqs.create_queue(QueueName="local-alert-inbox")["QueueUrl"]
    inbox_arn = sqs.get_queue_attributes(QueueUrl=inbox, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    assert client.alert_topic_arn is not None
    boto3.client("sns").subscribe(TopicArn=client.alert_topic_arn, Protocol="sqs", Endpoint=inbox_arn)
    job_id = _submit(client, "summary", "#outage " + TEXT)
    _wait(client, job_id)
    wait_until(lambda: client.request("GET", f"/jobs/{job_id}").body["deadLettered"], "the dead letter")
    job = client.request("GET", f"/jobs/{job_id}").body
    assert (job["status"], job["attempts"], job["deadLettered"]) == ("failed_final", 4, True)
    # The DLQ consumer alerts right after it marks the row: the alert may still be on its way.
    alerts: list[Any] = []

    def alerted() -> bool:
        received = sqs.receive_message(QueueUrl=inbox, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        alerts.extend(json.loads(json.loads(m["Body"])["Message"]) for m in received.get("Messages", []))
        return any(alert.get("job_id") == job_id for alert in alerts)

    wait_until(alerted, "the dead letter's alert")

    runner = CliRunner()
    listed = runner.invoke(app, ["dlq", "list", "--info-file", str(stack.info_file), "--json"])
    assert listed.exit_code == 0, listed.output
    assert job_id in [entry["job_id"] for entry in json.loads(listed.stdout)]
    shown = runner.invoke(app, ["dlq", "list", "--info-file", str(stack.info_file)])
    assert shown.exit_code == 0, shown.output
    assert {job_id, DEMO_USER, "summary"} <= set(shown.stdout.split()), shown.stdout  # whole, to paste
    rerun = runner.invoke(
        app, ["rerun", job_id, "--user", DEMO_USER, "--info-file", str(stack.info_file), "--json"]
    )
    assert rerun.exit_code == 0, rerun.output
    # Refunded when it was dead-lettered: the re-run is on the house, and says so.
    assert json.loads(rerun.stdout)["chargeWaived"] is True
    job = _wait(client, job_id)
    assert (job["status"], job["attempts"], job["deadLettered"]) == ("succeeded", 1, False)
    # The dead letter shows what became of it: resolved, so listed with --all only.
    listed = runner.invoke(app, ["dlq", "list", "--info-file", str(stack.info_file), "--json"])
    assert job_id not in [entry["job_id"] for entry in json.loads(listed.stdout)]
    listed = runner.invoke(app, ["dlq", "list", "--all", "--info-file", str(stack.info_file), "--json"])
    (entry,) = [entry for entry in json.loads(listed.stdout) if entry["job_id"] == job_id]
    assert (entry["job_status"], entry["resolution"], entry["resolved"]) == ("succeeded", "succeeded", True)


def test_a_fired_cron_run_expires_due_credits(stack: LocalStack, client: Target) -> None:
    directory = client.directory()
    table = directory.shard_for(DEMO_USER)
    assert table is not None
    ledger = JobStore(table, buckets=directory.buckets).ledger
    before = ledger.account(DEMO_USER).balance
    ledger.grant(DEMO_USER, 7, datetime.now(UTC) + timedelta(seconds=1))
    time.sleep(1.5)
    result = CliRunner().invoke(
        app, ["cron", "run", "*/10 * * * *", "--info-file", str(stack.info_file), "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["result"]["shards"]["0"]["creditsExpired"] >= 1
    assert ledger.account(DEMO_USER).balance == before


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["submit", "no-such-kind", "x"], 2, "unknown kind 'no-such-kind'; kinds: "),
        (["cron", "run", "0 0 * * *"], 1, "no scheduled job is registered"),
        (["redrive", "--kind", "nope"], 1, "unknown kind"),
        (["rerun", "01NOSUCHJOB", "--user", DEMO_USER], 1, "no job"),
    ],
)
def test_cli_bad_input_exits_non_zero_with_a_message(
    stack: LocalStack, args: list[str], code: int, message: str
) -> None:
    result = CliRunner().invoke(app, [*args, "--info-file", str(stack.info_file)])
    assert result.exit_code == code
    assert message in result.output


def test_cli_names_the_kinds_a_deployed_stage_s_api_refuses_a_kind_for(stack: LocalStack) -> None:
    """`--api-url` knows no kinds beforehand: the API's 422 names them and the CLI prints them."""
    result = CliRunner().invoke(
        app, ["submit", "no-such-kind", "x", "--api-url", stack.api_url, "--api-key", stack.api_key]
    )
    assert result.exit_code == 2, result.output
    kinds = ", ".join(stack.config.queue_names)
    assert f"422 unknown_kind: unknown kind 'no-such-kind'; kinds: {kinds}\n" in result.stderr


@pytest.mark.parametrize(
    ("text", "code", "status", "error_class"),
    [(TEXT, 0, "succeeded", None), ("#fail:400 " + TEXT, 4, "failed_final", "invalid_input")],
    ids=["succeeded", "failed"],
)
def test_submit_wait_exits_with_how_the_job_ended(
    stack: LocalStack, text: str, code: int, status: str, error_class: str | None
) -> None:
    """The job runs in this process, whose functions log while the CLI prints: stdout is the
    CLI's JSON alone."""
    result = CliRunner().invoke(
        app, ["submit", "summary", text, "--wait", "--json", "--info-file", str(stack.info_file)]
    )
    assert result.exit_code == code, result.output
    job = json.loads(result.stdout)
    assert (job["status"], job.get("lastErrorClass")) == (status, error_class)


def test_the_in_process_stack_writes_nothing_to_stdout(stack: LocalStack, client: Target) -> None:
    """What a CLI run captures as its stdout (CliRunner swaps sys.stdout) stays the CLI's: the
    stack's functions log to stderr and emit no EMF lines while a job runs through all of them."""
    captured = io.StringIO()
    with contextlib.redirect_stdout(captured):
        job = _wait(client, _submit(client, "summary", "#fail:503x1 " + TEXT))
    assert (job["status"], job["attempts"]) == ("succeeded", 2)
    assert captured.getvalue() == ""


def test_cli_without_a_running_stack_says_how_to_start_it(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["list", "--info-file", str(tmp_path / "missing.json")])
    assert result.exit_code == 1
    assert "aijobs dev" in result.output


def test_cost_reproduces_the_articles_cloudflare_count() -> None:
    result = CliRunner().invoke(
        app, ["cost", "--jobs", "20000", "--retry-rate", "0.05", "--dlq-rate", "0.01", "--json"]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["cloudflare_operations"] == 61_200
    bad = CliRunner().invoke(app, ["cost", "--retry-rate", "0.01", "--dlq-rate", "0.5"])
    assert bad.exit_code != 0


# --- the HTTP front door -----------------------------------------------------------------------------


def _connect(stack: LocalStack) -> socket.socket:
    address = urlsplit(stack.api_url)
    assert address.hostname is not None
    assert address.port is not None
    return socket.create_connection((address.hostname, address.port), timeout=60)


def _response(sock: socket.socket) -> tuple[int, Any]:
    """Status and JSON body of the one response the server writes before closing."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body)


def _raw(stack: LocalStack, request: bytes, *, then_close_sending: bool = True) -> tuple[int, Any]:
    with _connect(stack) as sock:
        sock.sendall(request)
        if then_close_sending:
            sock.shutdown(socket.SHUT_WR)
        return _response(sock)


def _post_head(stack: LocalStack, content_length: str) -> bytes:
    return (
        f"POST /jobs HTTP/1.1\r\nHost: localhost\r\nAuthorization: Bearer {stack.api_key}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {content_length}\r\n\r\n"
    ).encode()


@pytest.mark.parametrize("content_length", ["abc", "-1", "1e3", "5, 7"])
def test_an_invalid_content_length_is_a_400_json_error(stack: LocalStack, content_length: str) -> None:
    status, body = _raw(stack, _post_head(stack, content_length) + b'{"kind": "summary"}')
    assert status == 400
    assert body["code"] == "invalid_content_length"
    assert set(body) == {"code", "message", "details"}


def test_a_body_shorter_than_its_content_length_is_a_400_json_error(stack: LocalStack) -> None:
    status, body = _raw(stack, _post_head(stack, "100") + b'{"kind": "sum')
    assert (status, body["code"]) == (400, "incomplete_body")
    assert body["details"]["expectedBytes"] == 100


def test_a_stalled_client_gets_a_400_and_holds_up_nobody(stack: LocalStack, client: Target) -> None:
    with _connect(stack) as stalled:
        stalled.sendall(_post_head(stack, "100") + b'{"kind": "sum')  # ... and nothing more
        # Served while the stalled request still waits for its remaining bytes.
        assert client.request("GET", "/jobs?limit=1").status == 200
        assert Target(stage="local", api_url=stack.api_url).request("GET", "/_local/health").status == 200
        status, body = _response(stalled)  # the server gives up on it after its read timeout
    assert (status, body["code"]) == (400, "incomplete_body")


def test_a_malformed_request_line_is_a_400_json_error(stack: LocalStack) -> None:
    status, body = _raw(stack, b"GARBAGE\r\n\r\n")
    assert (status, body["code"]) == (400, "bad_request")
    assert set(body) == {"code", "message", "details"}


def test_a_chunked_body_is_read_like_any_other(stack: LocalStack) -> None:
    payload = json.dumps({"kind": "summary", "input": TEXT}).encode()
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(part), part) for part in (payload[:10], payload[10:]))
    head = _post_head(stack, "0").replace(b"Content-Length: 0", b"Transfer-Encoding: chunked")
    status, body = _raw(stack, head + chunks + b"0\r\n\r\n")
    assert (status, body["status"]) == (202, "queued")


def test_a_body_that_is_not_utf8_reaches_the_api_unmangled(stack: LocalStack) -> None:
    """The API decides about bytes it cannot read; the local gateway must not "fix" them first."""
    body = b'{"kind": "summary", "input": "caf\xe9 ' + TEXT.encode() + b'"}'
    status, answer = _raw(stack, _post_head(stack, str(len(body))) + body)
    assert status == 400, answer  # not a 202 for "caf\ufffd": the API refuses bytes that are not UTF-8
    assert set(answer) == {"code", "message", "details"}


def test_the_query_string_is_url_decoded_like_api_gateway_does(client: Target) -> None:
    _submit(client, "summary", TEXT)
    listed = client.request("GET", "/jobs?kind=sum%6Dary&limit=100")
    assert listed.status == 200, listed.body
    assert listed.body["jobs"]
    assert {job["kind"] for job in listed.body["jobs"]} == {"summary"}


def test_the_local_control_endpoints_need_an_admin_key(stack: LocalStack) -> None:
    pause = "/_local/consumers/summary/pause"
    anonymous = Target(stage="local", api_url=stack.api_url)
    as_user = Target(stage="local", api_url=stack.api_url, api_key=stack.api_key)
    as_unknown = Target(stage="local", api_url=stack.api_url, api_key="not-a-key")
    as_admin = Target(stage="local", api_url=stack.api_url, api_key=stack.admin_key)
    for caller, status in ((anonymous, 401), (as_unknown, 401), (as_user, 403)):
        refused = caller.request("POST", pause)
        assert refused.status == status
        assert set(refused.body) == {"code", "message", "details"}
    assert anonymous.request("GET", "/_local/health").body["paused"] == []  # health stays public
    assert as_admin.request("POST", "/_local/consumers/nope/pause").status == 404
    try:
        assert as_admin.request("POST", pause).status == 200
        assert anonymous.request("GET", "/_local/health").body["paused"] == ["summary"]
        # `aijobs resume` sends the admin key of the info file.
        resumed = CliRunner().invoke(app, ["resume", "summary", "--info-file", str(stack.info_file)])
        assert resumed.exit_code == 0, resumed.output
        assert anonymous.request("GET", "/_local/health").body["paused"] == []
    finally:
        as_admin.request("POST", "/_local/consumers/summary/resume")


def test_concurrent_clients_are_all_answered(client: Target) -> None:
    clients, each = 16, 5
    all_connected = threading.Barrier(clients, timeout=120)  # fails only on a real hang

    def submit_several(_index: int) -> list[tuple[int, Any]]:
        all_connected.wait()  # start together: a burst, like the benchmark
        answers = []
        for _ in range(each):
            response = client.request("POST", "/jobs", {"kind": "summary", "input": TEXT})
            answers.append((response.status, response.body))
        return answers

    with ThreadPoolExecutor(max_workers=clients) as pool:
        answers = [answer for batch in pool.map(submit_several, range(clients)) for answer in batch]
    assert [status for status, _body in answers] == [202] * clients * each, answers
    assert len({body["jobId"] for _status, body in answers}) == clients * each


def test_a_long_polling_request_holds_one_api_container_while_another_answers(
    stack: LocalStack, client: Target
) -> None:
    """Concurrent invocations, as Lambda scales: a submit is answered while a `?wait=` poll waits.
    The poll's job stays queued (its consumer is paused) until the submit is answered, so the poll
    cannot have ended first, however slow the machine."""
    assert stack.resources is not None
    stack.control.set_kind(stack.resources, "summary", enabled=False)
    try:
        job_id = _submit(client, "summary", TEXT)
        with ThreadPoolExecutor(max_workers=1) as pool:
            poll = pool.submit(client.request, "GET", f"/jobs/{job_id}?wait=20")
            wait_until(lambda: stack.long_polls_in_progress == 1, "the long-poll in its container")
            _submit(client, "summary", TEXT)
            # One container for every request would have made the submit wait for the poll.
            still_waiting = not poll.done()
            stack.control.set_kind(stack.resources, "summary", enabled=True)
            answer = poll.result(timeout=60)
    finally:
        stack.control.set_kind(stack.resources, "summary", enabled=True)
    assert still_waiting
    assert answer.status == 200, answer.body
    # A long-poll answers with the job once it has finished (asking again only if a busy machine
    # let the first poll's 20 s run out before the job ran).
    deadline = time.monotonic() + 120
    while answer.body["status"] not in ("succeeded", "failed_final") and time.monotonic() < deadline:
        answer = client.request("GET", f"/jobs/{job_id}?wait=20")
    assert answer.body["status"] == "succeeded", answer.body


def test_long_polls_leave_the_api_containers_to_other_tenants(stack: LocalStack, client: Target) -> None:
    """Two `?wait=20` long-polls held open (their job stays queued: its consumer is paused) do not
    hold up another tenant's request: it is answered while both are still waiting."""
    assert stack.resources is not None
    directory = runtime.directory(ConsumerSettings.from_env(stack.resources.consumer_env("summary")))
    other_tenant = dataclasses.replace(client, api_key=directory.create_api_key("tenant-credits"))
    stack.control.set_kind(stack.resources, "summary", enabled=False)
    try:
        job_id = _submit(client, "summary", TEXT)
        with ThreadPoolExecutor(max_workers=2) as pool:
            polls = [pool.submit(client.request, "GET", f"/jobs/{job_id}?wait=20") for _ in range(2)]
            wait_until(lambda: stack.long_polls_in_progress == 2, "both long-polls in a container")
            credits = other_tenant.request("GET", "/credits")
            still_waiting = [not poll.done() for poll in polls]
            stack.control.set_kind(stack.resources, "summary", enabled=True)
            answers = [poll.result(timeout=60) for poll in polls]
    finally:
        stack.control.set_kind(stack.resources, "summary", enabled=True)
    assert credits.status == 200, credits.body
    assert still_waiting == [True, True]
    assert [answer.status for answer in answers] == [200, 200]


def test_every_queue_is_polled_with_its_template_mappings_batch_size_and_window(stack: LocalStack) -> None:
    """Each kind's queue, each DLQ and the webhook queue (the plans tests/infra checks against the
    CDK template): the DLQ consumer's mappings gather a batch within the stage's window too."""
    plans = mapping_plans(stack.config)
    assert {plan.function for plan in plans.values()} == {"consumer", "dlq-consumer", "webhook-consumer"}

    def polled() -> dict[str, set[tuple[int, float]]]:
        return {
            queue_name_of(arn): {(m.batch_size, m.batch_window_seconds) for m in mappings}
            for arn, mappings in list(stack.control.mappings.items())
        }

    wait_until(lambda: set(polled()) == set(plans), "a poller on every queue")
    assert polled() == {name: {(plan.batch_size, plan.batch_window_seconds)} for name, plan in plans.items()}
    dlq = plans[f"aijobs-local-summary{DLQ_SUFFIX}"]
    assert (dlq.batch_size, dlq.batch_window_seconds) == (5, 1)  # .env.local's BATCH_SIZE, BATCH_WINDOW


def test_any_method_reaches_the_api_which_answers_405_with_allow(stack: LocalStack) -> None:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(stack.api_url + "/jobs", method="QUERY")  # noqa: S310 - loopback
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)  # noqa: S310 - loopback
    assert caught.value.code == 405
    assert set(caught.value.headers["Allow"].split(", ")) == {"GET", "POST"}
    assert json.loads(caught.value.read())["code"] == "method_not_allowed"
