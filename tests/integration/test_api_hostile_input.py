"""Bodies no client should send, through the real handler: each is a 4xx, never a 5xx."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from aijobs.api.app import app
from aijobs.api.screening import (
    MAX_BODY_BYTES,
    MAX_JSON_DEPTH,
    MAX_JSON_INTEGER_DIGITS,
    json_depth_exceeds,
    json_integer_too_long,
)
from tests.integration.harness import EVENTS, load_event
from tests.integration.test_api import Api
from tests.integration.test_api import api as api  # the fixture, re-exported

pytestmark = pytest.mark.integration


def _nothing_written(api: Api) -> None:
    assert api.stage.receive(api.stage.resources.queue_urls["summary"]) == []
    assert api.stage.store_for("alice").list_jobs("alice").jobs == []


@pytest.mark.parametrize("levels", [40, 300, 1000, 50_000])
def test_deeply_nested_json_is_refused_before_parsing(api: Api, levels: int) -> None:
    # 300 levels is ~1.8 KB: it used to pass validation and fail hashing the request (500);
    # 1,000 failed parsing with a RecursionError.
    text = '{"kind": "summary", "input": ' + '{"a": ' * levels + '"x"' + "}" * levels + "}"
    status, _h, body = api.call("api-post-jobs.json", raw_body=text)
    assert (status, body["code"]) == (400, "json_too_deep"), body
    assert body["details"] == {"limit": MAX_JSON_DEPTH}
    _nothing_written(api)


def test_nesting_within_the_limit_is_accepted(api: Api) -> None:
    deep: Any = "x"
    for _ in range(MAX_JSON_DEPTH - 2):  # the body and `input` are two levels
        deep = [deep]
    status, _h, body = api.call(
        "api-post-jobs.json", body={"kind": "summary", "input": {"text": "a", "d": deep}}
    )
    assert status == 202, body


def test_brackets_inside_strings_do_not_count_as_nesting(api: Api) -> None:
    text = '[{"' + "[" * 100 + '\\"{{"}]'
    assert not json_depth_exceeds(text, 2)
    assert json_depth_exceeds("[[[", 2)
    assert not json_depth_exceeds('"unterminated [[[[', 0)
    status, _h, body = api.call(
        "api-post-jobs.json", body={"kind": "summary", "input": "[" * 500 + "{" * 500}
    )
    assert status == 202, body


@pytest.mark.parametrize(
    ("raw", "code"),
    [(b"\xff\xfe{}", "invalid_utf8"), (b'{"kind": "summary", "input": "caf\xe9"}', "invalid_utf8"),
     (b"\xed\xa0\x80", "invalid_utf8")],
)  # fmt: skip
def test_a_base64_body_that_is_not_utf8_is_a_400(api: Api, raw: bytes, code: str) -> None:
    status, _h, body = api.call("api-post-jobs.json", base64_body=raw)
    assert (status, body["code"]) == (400, code), body
    _nothing_written(api)


def test_a_text_body_with_unencodable_characters_is_a_400(api: Api) -> None:
    # What a surrogate-escaped decode of invalid bytes leaves in a text body.
    text = b'{"kind": "summary", "input": "caf\xe9"}'.decode("utf-8", errors="surrogateescape")
    status, _h, body = api.call("api-post-jobs.json", raw_body=text)
    assert (status, body["code"]) == (400, "invalid_utf8"), body
    _nothing_written(api)


@pytest.mark.parametrize("encoded", ["not base64!", "abc", "ZXhhbXBsZQ=x", "é"])
def test_invalid_base64_is_a_400(api: Api, encoded: str) -> None:
    status, _h, body = api.call("api-post-jobs.json", base64_body=encoded)
    assert (status, body["code"]) == (400, "invalid_base64"), body


def test_a_base64_json_body_is_decoded_and_accepted(api: Api) -> None:
    text = '{"kind": "summary", "input": "Caf\u00e9 cr\u00e8me. Queues decouple work."}'
    status, _h, body = api.call("api-post-jobs.json", base64_body=text.encode())
    assert status == 202, body
    row = api.stage.store_for("alice").get("alice", body["jobId"])
    assert row is not None
    assert row.input == "Caf\u00e9 cr\u00e8me. Queues decouple work."


@pytest.mark.parametrize(
    ("body", "field"),
    [({"kind": "summary", "input": "\ud800"}, "input"),
     ({"kind": "summary", "input": {"k\udfff": 1}}, "input"),
     ({"kind": "summary", "input": "x", "options": {"v": ["\udc80"]}}, "options"),
     ({"kind": "summary", "input": "x", "model": "m\ud83d"}, "model")],
)  # fmt: skip
def test_unpaired_surrogates_in_the_request_are_a_422_at_submit(
    api: Api, body: dict[str, Any], field: str
) -> None:
    # json.dumps escapes them ("\\ud800"): valid JSON, but no UTF-8 store can hold the string.
    status, _h, error = api.call("api-post-jobs.json", raw_body=json.dumps(body))
    assert (status, error["code"]) == (422, "validation_error"), error
    assert [problem["path"] for problem in error["details"]] == [f"body.{field}"]
    _nothing_written(api)


def test_a_paired_surrogate_escape_is_ordinary_text(api: Api) -> None:
    status, _h, body = api.call(
        "api-post-jobs.json", raw_body='{"kind": "summary", "input": "ok \\ud83d\\ude00"}'
    )
    assert status == 202, body


def test_a_body_far_above_any_legitimate_size_is_a_413(api: Api) -> None:
    text = json.dumps({"kind": "summary", "input": "x" * (MAX_BODY_BYTES + 1)})
    status, _h, body = api.call("api-post-jobs.json", raw_body=text)
    assert (status, body["code"]) == (413, "body_too_large"), body
    status, _h, body = api.call("api-post-jobs.json", base64_body=text.encode())
    assert (status, body["code"]) == (413, "body_too_large"), body


@pytest.mark.parametrize("text", ["   ", "\x1c", "\u2028\u3000"])
def test_classify_of_blank_text_is_a_422_not_a_provider_crash(api: Api, text: str) -> None:
    status, _h, body = api.call("api-post-classify.json", body={"text": text})
    assert status == 422, body
    assert body["code"] in ("validation_error", "invalid_input")


@pytest.mark.parametrize("job_id", ["x" * 2000, "01ARZ3NDEKTSV4RRFFQ69G5FA%2F", "\u00e9" * 30])
def test_get_of_a_malformed_job_id_is_a_404(api: Api, job_id: str) -> None:
    status, body = api.get(job_id)
    assert (status, body["code"]) == (404, "not_found"), body


# More digits than Python converts (4,300): json.loads raised ValueError inside the router, a 500
# with no API key needed.
HUGE = "9" * 5000


def _huge(template: str) -> str:
    return template.replace("@", HUGE)


# A huge integer where each POST route reads a number (or anywhere, for routes without a body).
_HUGE_BODIES = {
    "api-post-jobs.json": _huge('{"kind": "summary", "input": "x", "options": {"sentences": @}}'),
    "api-post-uploads.json": _huge('{"contentType": "text/plain", "size": @}'),
    "api-post-classify.json": _huge('{"text": "x", "n": -@}'),
    "api-admin-post-reruns.json": _huge('{"kind": "summary", "dryRun": true, "limit": @}'),
    "api-admin-post-job-fail-final.json": _huge('{"reason": [1, 2, @]}'),
    "api-admin-post-job-rerun.json": HUGE,
    "api-admin-post-kind-pause.json": _huge('{"a": @}'),
    "api-admin-post-kind-resume.json": _huge('{"a": @}'),
    "api-post-job-cancel.json": _huge("[@]"),
    "api-post-webhook-secret.json": _huge('{"a": {"b": @}}'),
}


def test_every_route_that_takes_a_body_has_a_huge_integer_case() -> None:
    routes = {(route.method, route.rule) for route in [*app._static_routes, *app._dynamic_routes]}
    posted = {route for route in routes if route[0] in ("POST", "PUT", "PATCH", "DELETE")}
    covered = set()
    for sample in _HUGE_BODIES:
        path = load_event(sample)["rawPath"]
        covered |= {route for route in posted if route[1].match(path)}
    assert covered == posted
    assert {p.name for p in EVENTS.glob("api-*.json") if "-post-" in p.name} == set(_HUGE_BODIES)


@pytest.mark.parametrize("sample", sorted(_HUGE_BODIES))
@pytest.mark.parametrize("user", [None, "alice"])
def test_a_huge_integer_is_a_400_on_every_route_before_authentication(
    api: Api, sample: str, user: str | None
) -> None:
    status, _h, body = api.call(
        sample, user=user, raw_body=_HUGE_BODIES[sample], headers={"content-type": "application/json"}
    )
    assert (status, body["code"]) == (400, "number_too_long"), body
    assert body["details"] == {"limit": MAX_JSON_INTEGER_DIGITS}
    _nothing_written(api)


def test_long_integers_within_the_limit_and_long_non_integers_are_parsed_as_usual(api: Api) -> None:
    ok = "1" * MAX_JSON_INTEGER_DIGITS
    status, _h, body = api.call(
        "api-post-jobs.json", raw_body='{"kind": "summary", "input": {"text": "a", "n": @}}'.replace("@", ok)
    )
    assert status == 202, body
    # A long fraction or exponent is a float (no digit limit in Python); a digit run in a string is text.
    text = _huge('{"kind": "summary", "input": {"text": "@", "f": 0.@, "e": 1@e-4990}}')
    status, _h, body = api.call("api-post-jobs.json", raw_body=text)
    assert status == 202, body


def test_the_integer_scan_reads_json_tokens() -> None:
    limit = 3
    assert json_integer_too_long("[1234]", limit)
    assert json_integer_too_long('{"a": -1234}', limit)
    assert not json_integer_too_long("[123, -123, 1234.5, 1234e1, 1234E+1, 0.12345]", limit)
    assert not json_integer_too_long('["1234", "\\"1234"]', limit)
    assert json_integer_too_long('["\\"", 1234]', limit)
    assert not json_integer_too_long('"unterminated 12345', limit)
    assert sys.get_int_max_str_digits() > MAX_JSON_INTEGER_DIGITS
