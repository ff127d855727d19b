"""The API Gateway HTTP API (payload v2) events the local stack builds from HTTP requests."""

from __future__ import annotations

import base64
import json
from email.message import Message

import pytest

from aijobs_cli.local.gateway import api_event, gateway_headers, gateway_reply, query_parameters


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("kind=sum%6Dary", {"kind": "summary"}),
        ("q=a+b%2Bc", {"q": "a b+c"}),
        ("tag=a&tag=b&tag=c", {"tag": "a,b,c"}),
        ("flag&empty=", {"flag": "", "empty": ""}),
        ("caf%C3%A9=cr%C3%A8me", {"café": "crème"}),
        ("", {}),
    ],
)
def test_query_parameters_are_decoded_and_repeated_keys_joined(raw: str, expected: dict[str, str]) -> None:
    assert query_parameters(raw) == expected


def test_the_event_keeps_the_raw_query_string_and_decodes_the_parameters() -> None:
    event = api_event("GET", "/jobs?kind=sum%6Dary&status=queued&status=running", {}, b"")
    assert event["rawQueryString"] == "kind=sum%6Dary&status=queued&status=running"
    assert event["queryStringParameters"] == {"kind": "summary", "status": "queued,running"}
    assert event["rawPath"] == event["requestContext"]["http"]["path"] == "/jobs"


def test_a_utf8_body_is_passed_as_text() -> None:
    body = json.dumps({"kind": "summary", "input": "crème brûlée ✓"}, ensure_ascii=False).encode()
    event = api_event("POST", "/jobs", {"Content-Type": "application/json"}, body)
    assert (event["body"], event["isBase64Encoded"]) == (body.decode(), False)


def test_a_body_that_is_not_utf8_is_base64_encoded_not_replaced() -> None:
    body = b'{"kind": "summary", "input": "\xff\xfe caf\xe9"}'
    event = api_event("POST", "/jobs", {"Content-Type": "application/json"}, body)
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == body


def test_headers_are_lower_cased_repeated_ones_joined_and_cookies_split() -> None:
    message = Message()
    message["Accept"] = "application/json"
    message["X-Tag"] = "a"
    message["x-tag"] = "b"
    message["Cookie"] = "a=1; b=2"
    event = api_event("GET", "/jobs", gateway_headers(message), b"")
    assert event["headers"] == {"accept": "application/json", "x-tag": "a,b"}
    assert event["cookies"] == ["a=1", "b=2"]


def test_each_request_gets_its_own_request_id() -> None:
    ids = {api_event("GET", "/jobs", {}, b"")["requestContext"]["requestId"] for _ in range(50)}
    assert len(ids) == 50


def test_a_base64_response_is_decoded_for_the_client() -> None:
    status, payload, headers = gateway_reply(
        {"statusCode": 200, "body": base64.b64encode(b"\x00\x01").decode(), "isBase64Encoded": True,
         "headers": {"Content-Type": "application/octet-stream"}}
    )  # fmt: skip
    assert (status, payload, headers) == (200, b"\x00\x01", {"Content-Type": "application/octet-stream"})
