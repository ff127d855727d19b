"""Random bytes and odd JSON at the POST routes, through the real handler: never a 5xx."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aijobs.api.screening import MAX_JSON_INTEGER_DIGITS
from tests.integration.harness import EVENTS
from tests.integration.test_api import Api
from tests.integration.test_api import api as api  # the fixture, re-exported

pytestmark = pytest.mark.integration

# The fixture's stage is shared by all examples of one test (jobs pile up, which is fine here).
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# Text with what breaks naive handlers: unpaired surrogates, NUL, brackets, quotes, non-BMP.
_odd_text = st.text(
    alphabet=st.one_of(
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
        st.sampled_from('\x00"\\[]{}#:\u2028\ufeff\U0001f600 ab'),
        st.characters(),
    ),
    max_size=40,
)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _odd_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_odd_text, children, max_size=4),
    max_leaves=20,
)
_job_like = st.fixed_dictionaries(
    {},
    optional={
        "kind": st.sampled_from(["summary", "embedding", "nope", ""]) | _odd_text,
        "input": _json_values,
        "inputRef": st.sampled_from(["inputs/alice/a.png", "inputs/bob/a.png", "../x"]) | _odd_text,
        "model": _json_values,
        "options": _json_values,
        "extra": _json_values,
    },
)
_nesting = st.integers(min_value=0, max_value=3000).map(lambda n: "[" * n + "]" * n)


def _assert_answered(status: int, body: Any) -> None:
    assert status < 500, body
    if status >= 400:
        assert isinstance(body, dict)
        assert body["code"]
        assert body["message"]


@FUZZ
@given(raw=st.binary(max_size=200), as_base64=st.booleans())
def test_random_bytes(api: Api, raw: bytes, as_base64: bool) -> None:
    if as_base64:
        status, _h, body = api.call("api-post-jobs.json", base64_body=raw)
    else:  # what a lenient decode of the same bytes leaves in a text body
        status, _h, body = api.call("api-post-jobs.json", raw_body=raw.decode("utf-8", "surrogateescape"))
    _assert_answered(status, body)


@FUZZ
@given(document=_job_like | _json_values | _nesting)
def test_odd_json(api: Api, document: Any) -> None:
    text = document if isinstance(document, str) and document.startswith("[") else json.dumps(document)
    status, _h, body = api.call(
        "api-post-jobs.json", raw_body=text, headers={"idempotency-key": "fuzz"} if len(text) % 2 else {}
    )
    _assert_answered(status, body)


@FUZZ
@given(text=_odd_text)
def test_odd_text_to_classify(api: Api, text: str) -> None:
    status, _h, body = api.call("api-post-classify.json", raw_body=json.dumps({"text": text}))
    _assert_answered(status, body)


# Stands for an integer literal too long for json.dumps (and for Python's int() in the router).
_HUGE = "\x00huge\x00"
_with_huge = st.recursive(
    st.just(_HUGE) | st.none() | st.integers() | _odd_text,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_odd_text, children, max_size=4),
    max_leaves=12,
)
_POST_SAMPLES = sorted(path.name for path in EVENTS.glob("api-*.json") if "-post-" in path.name)


@FUZZ
@given(
    document=_with_huge | _job_like.map(lambda doc: {**doc, "options": {"n": _HUGE}}),
    digits=st.integers(min_value=MAX_JSON_INTEGER_DIGITS + 1, max_value=6000),
    sign=st.sampled_from(["", "-"]),
    sample=st.sampled_from(_POST_SAMPLES),
    user=st.sampled_from([None, "alice"]),
)
def test_huge_integers_anywhere_in_any_body_are_a_400(
    api: Api, document: Any, digits: int, sign: str, sample: str, user: str | None
) -> None:
    text = json.dumps(document)
    huge = text.count(json.dumps(_HUGE))
    text = text.replace(json.dumps(_HUGE), sign + "7" * digits)
    headers = {"content-type": "application/json"}
    status, _h, body = api.call(sample, user=user, raw_body=text, headers=headers)
    _assert_answered(status, body)
    if huge:  # refused as malformed before anything else reads it (authentication included)
        assert status == 400, body
