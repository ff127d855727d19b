"""The HTTP API through its Lambda handler, with the sample events in events/ and moto behind it."""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import boto3
import pytest

from aijobs import runtime
from aijobs.domain import JobStatus
from aijobs.store.keys import PK, SK, job_sk, user_pk
from aijobs_cli.local.esm import LambdaContext
from tests.integration.harness import Stage, load_event

pytestmark = pytest.mark.integration

TEXT = "Queues decouple accepting work from doing it. A producer writes the row. The consumer runs it."


@pytest.fixture
def api(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[Api]:
    for key, value in stage.resources.api_env().items():
        monkeypatch.setenv(key, value)
    runtime.reset_runtime()
    runtime.api_service().clock = stage.clock
    from api import handler  # the function's own module, as Lambda imports it

    yield Api(stage, handler.handler)
    runtime.reset_runtime()


class Api:
    def __init__(self, stage: Stage, handler: Any) -> None:
        self.stage = stage
        self._handler = handler
        self.keys = {user: stage.directory.create_api_key(user) for user in ("alice", "bob")}
        for user in self.keys:
            stage.store_for(user).ledger.grant(user, 1000, stage.clock() + timedelta(days=30))

    def call(
        self,
        sample: str,
        *,
        user: str | None = "alice",
        body: Any = ...,
        raw_body: str | None = None,
        base64_body: bytes | str | None = None,
        method: str | None = None,
        path: str | None = None,
        query: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        event = copy.deepcopy(load_event(sample))
        event["headers"].pop("authorization", None)
        event["headers"].pop("idempotency-key", None)
        if user is not None:
            event["headers"]["authorization"] = f"Bearer {self.keys[user]}"
        event["headers"].update(headers or {})
        if body is not ...:
            event["body"] = json.dumps(body)
        if raw_body is not None:
            event["body"] = raw_body
        if base64_body is not None:  # as the gateway sends a body it took for binary (str: as is)
            encoded = base64_body if isinstance(base64_body, str) else base64.b64encode(base64_body).decode()
            event["body"] = encoded
            event["isBase64Encoded"] = True
        if method is not None:
            event["requestContext"]["http"]["method"] = method
        if path is not None:
            event["rawPath"] = event["requestContext"]["http"]["path"] = path
        if query is not None:
            event["queryStringParameters"] = query
            event["rawQueryString"] = "&".join(f"{k}={v}" for k, v in query.items())
        response = self._handler(event, LambdaContext("aijobs-dev-api"))
        body_text = response.get("body") or "null"
        return response["statusCode"], response.get("headers", {}), json.loads(body_text)

    def submit(self, user: str = "alice", **body: Any) -> dict[str, Any]:
        status, _headers, payload = self.call(
            "api-post-jobs.json", user=user, body={"kind": "summary", **body}
        )
        assert status == 202, payload
        return dict(payload)

    def get(self, job_id: str, user: str = "alice") -> tuple[int, Any]:
        status, _headers, payload = self.call("api-get-job.json", user=user, path=f"/jobs/{job_id}")
        return status, payload


def _queued(stage: Stage, kind: str = "summary") -> list[dict[str, Any]]:
    return [json.loads(m["Body"]) for m in stage.receive(stage.resources.queue_urls[kind])]


def test_post_job_writes_a_queued_row_sends_a_reference_and_answers_202(api: Api) -> None:
    status, headers, body = api.call("api-post-jobs.json")
    assert status == 202, body
    assert body["status"] == "queued"
    assert body["kind"] == "summary"
    assert headers["Location"] == f"/jobs/{body['jobId']}" == body["links"]["self"]
    row = api.stage.store_for("alice").get("alice", body["jobId"])
    assert row is not None
    assert row.status is JobStatus.QUEUED
    sent_text = load_event("api-post-jobs.json")["body"]
    assert row.input == json.loads(sent_text)["input"]
    (message,) = _queued(api.stage)
    assert message == {"jobId": body["jobId"], "userId": "alice", "kind": "summary"}


def test_the_queue_message_never_carries_input_options_or_secrets(api: Api) -> None:
    secret_text = "my private prompt with sk-live-123"
    api.submit(input=secret_text, options={"sentences": 1})
    (raw,) = api.stage.receive(api.stage.resources.queue_urls["summary"])
    assert set(json.loads(raw["Body"])) == {"jobId", "userId", "kind"}
    assert "sk-live" not in raw["Body"]
    assert api.keys["alice"] not in raw["Body"]
    assert "private prompt" not in raw["Body"]


def test_same_idempotency_key_and_body_returns_the_same_job_and_sends_once(api: Api) -> None:
    headers = {"idempotency-key": "order-42"}
    first = api.call("api-post-jobs.json", headers=headers)
    second = api.call("api-post-jobs.json", headers=headers)
    assert first[0] == second[0] == 202
    assert first[2]["jobId"] == second[2]["jobId"]
    assert second[1]["Idempotent-Replayed"] == "true"
    assert len(_queued(api.stage)) == 1
    # Keys belong to a user: bob's identical request is his own job.
    bob = api.call("api-post-jobs.json", user="bob", headers=headers)
    assert bob[2]["jobId"] != first[2]["jobId"]


def test_same_idempotency_key_with_another_body_is_a_conflict(api: Api) -> None:
    headers = {"idempotency-key": "order-43"}
    api.call("api-post-jobs.json", headers=headers)
    status, _h, body = api.call(
        "api-post-jobs.json", headers=headers, body={"kind": "summary", "input": "other"}
    )
    assert (status, body["code"]) == (409, "idempotency_key_reused")
    assert len(_queued(api.stage)) == 1


def test_get_job_returns_it_to_its_owner_and_404_to_anyone_else(api: Api) -> None:
    job_id = api.submit(input=TEXT)["jobId"]
    status, body = api.get(job_id)
    assert (status, body["jobId"], body["status"], body["attempts"]) == (200, job_id, "queued", 0)
    status, body = api.get(job_id, user="bob")
    assert (status, body["code"]) == (404, "not_found")
    assert job_id in body["message"]
    assert api.get("01NOSUCHJOB")[0] == 404


def test_full_path_post_consume_get_shows_the_result(api: Api) -> None:
    job_id = api.submit(input=TEXT, options={"sentences": 1})["jobId"]
    list(api.stage.drain("summary"))
    status, body = api.get(job_id)
    assert status == 200
    assert body["status"] == "succeeded"
    assert body["attempts"] == 1
    assert body["model"] == "local-text-1"
    assert body["result"]["summary"] in TEXT
    # The kind's `sentences` option reached the model (its system text): one sentence.
    assert body["result"]["summary"].count(". ") == 0
    # A small result is the row's only copy: inline, with no S3 object to link to.
    assert body["resultRef"] is None
    assert body["resultUrl"] is None
    assert body["finishedAt"] is not None


def test_a_large_result_is_linked_not_inlined(api: Api) -> None:
    job_id = api.submit(kind="embedding", input="vector me", options={"dimensions": 256})["jobId"]
    list(api.stage.drain("embedding"))
    status, body = api.get(job_id)
    assert (status, body["status"]) == (200, "succeeded")
    assert body["result"] is None
    assert body["resultRef"] == f"results/{job_id}/main/result.json"
    assert body["resultUrl"].startswith("https://")


def test_list_jobs_is_newest_first_paginated_and_filtered(api: Api) -> None:
    ids = []
    for index in range(5):
        api.stage.clock.advance(1)
        ids.append(api.submit(input=f"{TEXT} {index}")["jobId"])
    api.stage.clock.advance(1)
    ids.append(api.submit(kind="embedding", input="x")["jobId"])
    api.submit(user="bob", input=TEXT)
    status, _h, page1 = api.call("api-list-jobs.json", query={"limit": "4"})
    assert status == 200
    assert [j["jobId"] for j in page1["jobs"]] == ids[::-1][:4]
    _s, _h, page2 = api.call("api-list-jobs.json", query={"limit": "4", "cursor": page1["nextCursor"]})
    assert [j["jobId"] for j in page2["jobs"]] == ids[::-1][4:]
    assert page2["nextCursor"] is None
    _s, _h, embeddings = api.call("api-list-jobs.json", query={"kind": "embedding"})
    assert [j["jobId"] for j in embeddings["jobs"]] == [ids[-1]]
    list(api.stage.drain("embedding"))
    _s, _h, done = api.call("api-list-jobs.json", query={"status": "succeeded"})
    assert [j["jobId"] for j in done["jobs"]] == [ids[-1]]


def test_a_cursor_cannot_reach_another_users_jobs(api: Api) -> None:
    for _ in range(3):
        api.submit(user="bob", input=TEXT)
    _s, _h, page = api.call("api-list-jobs.json", user="bob", query={"limit": "1"})
    status, _h, body = api.call("api-list-jobs.json", query={"limit": "1", "cursor": page["nextCursor"]})
    assert (status, body["code"]) == (400, "invalid_cursor")


def test_classify_answers_synchronously(api: Api) -> None:
    status, _h, body = api.call("api-post-classify.json")
    assert status == 200
    assert body["label"] in {"positive", "negative", "neutral", "question"}
    assert body["model"] == "local-text-1"
    assert _queued(api.stage) == []


def test_openapi_document_is_generated_from_the_models(api: Api) -> None:
    status, _headers, document = api.call("api-get-openapi.json", user=None)
    assert status == 200
    assert document["info"]["title"] == "aijobs"
    assert {"/jobs", "/jobs/{job_id}", "/classify"} <= set(document["paths"])
    assert "/openapi.json" not in document["paths"]
    schemas = document["components"]["schemas"]
    assert {"JobRequest", "JobView", "ErrorBody"} <= set(schemas)
    assert "inputRef" in schemas["JobRequest"]["properties"]
    assert document["components"]["securitySchemes"]["apiKey"]["scheme"] == "bearer"


@pytest.mark.parametrize(
    ("authorization", "code"),
    [(None, "missing_api_key"), ("Bearer ", "missing_api_key"), ("Basic abc", "missing_api_key"),
     ("Bearer aj_not-a-real-key", "invalid_api_key")],
)  # fmt: skip
def test_missing_or_invalid_api_key_is_401(api: Api, authorization: str | None, code: str) -> None:
    headers = {"authorization": authorization} if authorization else {}
    status, response_headers, body = api.call("api-post-jobs.json", user=None, headers=headers)
    assert (status, body["code"]) == (401, code)
    assert response_headers["WWW-Authenticate"] == "Bearer"
    assert _queued(api.stage) == []


@pytest.mark.parametrize(
    ("kwargs", "status", "code"),
    [
        ({"raw_body": "{not json"}, 400, "malformed_json"),
        ({"body": {"input": "no kind"}}, 422, "validation_error"),
        ({"body": {"kind": "summary"}}, 422, "validation_error"),
        ({"body": {"kind": "summary", "input": "a", "inputRef": "inputs/alice/x"}}, 422, "validation_error"),
        ({"body": {"kind": "summary", "input": "a", "surprise": 1}}, 422, "validation_error"),
        ({"body": {"kind": "no-such-kind", "input": "a"}}, 422, "unknown_kind"),
        ({"body": {"kind": "summary", "input": "x" * 20_000}}, 413, "input_too_large"),
        ({"body": {"kind": "image-caption", "inputRef": "inputs/bob/cat.png"}}, 422, "invalid_input_ref"),
        (
            {"body": {"kind": "image-caption", "inputRef": "inputs/alice/../bob/cat.png"}},
            422,
            "invalid_input_ref",
        ),
        ({"body": [1, 2]}, 422, "validation_error"),
        ({"headers": {"idempotency-key": "has spaces"}}, 400, "invalid_idempotency_key"),
        ({"headers": {"content-type": "application/x-www-form-urlencoded"}}, 415, "unsupported_media_type"),
        ({"headers": {"content-type": ""}}, 415, "unsupported_media_type"),
    ],
)
def test_client_mistakes_get_4xx_with_a_code_and_nothing_is_written(
    api: Api, kwargs: dict[str, Any], status: int, code: str
) -> None:
    got_status, _h, body = api.call("api-post-jobs.json", **kwargs)
    assert (got_status, body["code"]) == (status, code), body
    assert body["message"]
    assert _queued(api.stage) == []
    assert api.stage.store_for("alice").list_jobs("alice").jobs == []


def test_schema_errors_name_the_field(api: Api) -> None:
    _s, _h, body = api.call("api-post-jobs.json", body={"input": "no kind"})
    assert "body.kind" in [problem["path"] for problem in body["details"]]
    _s, _h, body = api.call("api-post-jobs.json", body={"kind": "summary", "input": "x" * 20_000})
    assert "inputRef" in body["details"]["hint"]


# The stage's MAX_INLINE_INPUT_BYTES (the default).
INLINE_LIMIT = 16_384


@pytest.mark.parametrize(
    "text",
    ["\u7a7a" * 3_000 + "\u3002", "\U0001f600" * 1_400 + ".", "caf\u00e9 cr\u00e8me. " * 1_000],
    ids=["3000-cjk", "1400-emoji", "accents"],
)
def test_the_inline_limit_counts_the_utf8_bytes_of_the_input(api: Api, text: str) -> None:
    # 9 KB, 5.6 KB and 14 KB of UTF-8; \uXXXX-escaped they were 18 KB, 16.8 KB and 22 KB: a 413.
    assert len(json.dumps(text, ensure_ascii=False).encode()) < INLINE_LIMIT < len(json.dumps(text))
    status, _h, body = api.call(
        "api-post-jobs.json", raw_body=json.dumps({"kind": "summary", "input": text}, ensure_ascii=False)
    )
    assert status == 202, body


def test_an_input_one_utf8_byte_over_the_limit_is_a_413_saying_so(api: Api) -> None:
    def body(text: str) -> str:
        return json.dumps({"kind": "summary", "input": text}, ensure_ascii=False)

    # '"' + 5,460 three-byte characters + '"' is 16,382 bytes: two ASCII letters make it the limit.
    at_limit = "\u7a7a" * 5_460 + "ab"
    assert len(json.dumps(at_limit, ensure_ascii=False).encode()) == INLINE_LIMIT
    status, _h, accepted = api.call("api-post-jobs.json", raw_body=body(at_limit))
    assert status == 202, accepted
    status, _h, refused = api.call("api-post-jobs.json", raw_body=body(at_limit + "c"))
    assert (status, refused["code"]) == (413, "input_too_large"), refused
    assert (
        refused["message"]
        == f"input is {INLINE_LIMIT + 1} bytes of UTF-8; inline inputs are limited to {INLINE_LIMIT} bytes"
    )


def test_an_inline_input_is_stored_as_utf8_not_escaped(api: Api) -> None:
    text = "\u7a7a\u6d77 \U0001f600 caf\u00e9. " * 100  # under the limit either way
    job_id = api.submit(input={"text": text, "note": "\u00e9"})["jobId"]
    item = boto3.client("dynamodb").get_item(
        TableName=api.stage.resources.shard_tables[0],
        Key={PK: {"S": user_pk("alice")}, SK: {"S": job_sk(job_id)}},
        ConsistentRead=True,
    )["Item"]
    stored = item["input_json"]["S"]
    # What the inline limit measured, byte for byte.
    assert stored == json.dumps({"text": text, "note": "\u00e9"}, separators=(",", ":"), ensure_ascii=False)
    row = api.stage.store_for("alice").get("alice", job_id)
    assert row is not None
    assert row.input == {"text": text, "note": "\u00e9"}


def test_an_input_ref_to_a_missing_object_is_a_422_at_submit(api: Api) -> None:
    balance = api.stage.store_for("alice").ledger.account("alice").balance
    body = {"kind": "image-caption", "inputRef": "inputs/alice/never-uploaded.png"}
    status, _h, error = api.call("api-post-jobs.json", body=body)
    assert (status, error["code"]) == (422, "input_ref_not_found")
    assert "upload" in error["message"]
    assert error["details"] == {"inputRef": "inputs/alice/never-uploaded.png"}
    # Refused before anything was written, sent or charged.
    assert _queued(api.stage, "image-caption") == []
    assert api.stage.store_for("alice").list_jobs("alice").jobs == []
    assert api.stage.store_for("alice").ledger.account("alice").balance == balance
    # Once uploaded, the same request is accepted.
    boto3.client("s3").put_object(
        Bucket=api.stage.resources.bucket, Key="inputs/alice/never-uploaded.png", Body=b"\x89PNG"
    )
    status, _h, accepted = api.call("api-post-jobs.json", body=body)
    assert status == 202, accepted


def test_input_size_reads_the_object_or_says_none(api: Api) -> None:
    results = runtime.api_service().results
    boto3.client("s3").put_object(Bucket=api.stage.resources.bucket, Key="inputs/alice/a.txt", Body=b"12345")
    assert results.input_size("inputs/alice/a.txt") == 5
    assert results.input_size("inputs/alice/missing.txt") is None


@pytest.mark.parametrize(
    "query", [{"status": "done"}, {"limit": "0"}, {"limit": "101"}, {"limit": "ten"}, {"cursor": "!!!"},
              {"kind": "nope"}],
)  # fmt: skip
def test_bad_list_parameters_are_client_errors(api: Api, query: dict[str, str]) -> None:
    status, _h, body = api.call("api-list-jobs.json", query=query)
    assert 400 <= status < 500, body
    assert body["code"]


def test_unknown_route_is_a_json_404(api: Api) -> None:
    status, _h, body = api.call("api-get-job.json", path="/nowhere")
    assert (status, body["code"]) == (404, "route_not_found")


def test_a_failed_send_finalizes_the_row_frees_the_key_and_answers_503(api: Api) -> None:
    sqs = boto3.client("sqs")
    url = api.stage.resources.queue_urls["summary"]
    sqs.delete_queue(QueueUrl=url)
    status, headers, body = api.call("api-post-jobs.json", headers={"idempotency-key": "retry-me"})
    assert (status, body["code"], headers["Retry-After"]) == (503, "service_unavailable", "5")
    (row,) = api.stage.store_for("alice").list_jobs("alice").jobs
    assert (row.status, row.last_error_class) == (JobStatus.FAILED_FINAL, "enqueue_failed")
    # The queue is back: the client's retry with the same key creates a job that really runs.
    sqs.create_queue(QueueName=url.rsplit("/", 1)[-1])
    status, _h, body = api.call("api-post-jobs.json", headers={"idempotency-key": "retry-me"})
    assert status == 202
    assert body["jobId"] != row.job_id
    assert [m["jobId"] for m in _queued(api.stage)] == [body["jobId"]]


def _jwt_api(stage: Stage, monkeypatch: pytest.MonkeyPatch, **env: str) -> Any:
    """The API handler in AUTH_MODE=jwt (with `env` over the stage's API environment)."""
    for key, value in {**stage.resources.api_env(), "AUTH_MODE": "jwt", **env}.items():
        monkeypatch.setenv(key, value)
    runtime.reset_runtime()
    from api import handler

    return handler.handler


def _as_jwt(handler: Any, sample: str, groups: Any) -> int:
    """The status of `sample` called with a verified token whose `cognito:groups` is `groups`."""
    event = copy.deepcopy(load_event(sample))
    event["headers"].pop("authorization", None)
    claims: dict[str, Any] = {"sub": "cognito-ops-1"}
    if groups is not None:
        claims["cognito:groups"] = groups
    event["requestContext"]["authorizer"] = {"jwt": {"claims": claims, "scopes": None}}
    return int(handler(event, LambdaContext("aijobs-dev-api"))["statusCode"])


@pytest.mark.parametrize(
    "groups",
    [None, "[badminton-club]", "[tenant-42-admins]", "not-admin", "[admin]", ["admin"],
     "[aijobs-operators-staging]", "[AIJOBS-OPERATORS]", '["aijobs-operators billing"]'],
)  # fmt: skip
def test_jwt_mode_a_group_that_only_looks_like_the_operator_group_is_a_403(
    stage: Stage, monkeypatch: pytest.MonkeyPatch, groups: Any
) -> None:
    handler = _jwt_api(stage, monkeypatch)
    assert _as_jwt(handler, "api-admin-get-spend.json", groups) == 403
    runtime.reset_runtime()


@pytest.mark.parametrize(
    "groups",
    ["[billing aijobs-operators]", "[billing, aijobs-operators]", ["billing", "aijobs-operators"],
     "aijobs-operators", "billing,aijobs-operators"],
)  # fmt: skip
def test_jwt_mode_members_of_the_operator_group_are_operators_in_each_claim_form(
    stage: Stage, monkeypatch: pytest.MonkeyPatch, groups: Any
) -> None:
    handler = _jwt_api(stage, monkeypatch)
    assert _as_jwt(handler, "api-admin-get-spend.json", groups) == 200
    runtime.reset_runtime()


def test_jwt_mode_the_operator_group_is_the_configured_one(
    stage: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    handler = _jwt_api(stage, monkeypatch, JWT_OPERATOR_GROUP="platform-oncall")
    assert _as_jwt(handler, "api-admin-get-spend.json", "[platform-oncall]") == 200
    assert _as_jwt(handler, "api-admin-get-spend.json", "[aijobs-operators]") == 403
    runtime.reset_runtime()


def test_jwt_mode_takes_the_identity_verified_by_the_gateway(
    stage: Stage, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in {**stage.resources.api_env(), "AUTH_MODE": "jwt"}.items():
        monkeypatch.setenv(key, value)
    runtime.reset_runtime()
    from api import handler

    event = load_event("api-post-jobs.json")
    event["requestContext"]["authorizer"] = {"jwt": {"claims": {"sub": "cognito-user-1"}, "scopes": None}}
    response = handler.handler(event, LambdaContext("aijobs-dev-api"))
    # A new identity gets a tenant on its first request, but no credits yet.
    assert (response["statusCode"], json.loads(response["body"])["code"]) == (402, "insufficient_credits")
    # The handler runs on the real clock (the stage's is fixed): the grant must outlive real time.
    stage.store_for("cognito-user-1").ledger.grant("cognito-user-1", 5, datetime.now(UTC) + timedelta(days=1))
    response = handler.handler(event, LambdaContext("aijobs-dev-api"))
    assert response["statusCode"] == 202
    job_id = json.loads(response["body"])["jobId"]
    assert stage.store_for("cognito-user-1").get("cognito-user-1", job_id) is not None
    del event["requestContext"]["authorizer"]
    response = handler.handler(event, LambdaContext("aijobs-dev-api"))
    assert (response["statusCode"], json.loads(response["body"])["code"]) == (401, "missing_token")
    runtime.reset_runtime()
