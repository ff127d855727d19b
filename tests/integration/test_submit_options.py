"""Options and texts of every shipped kind are checked at submit (issue 25 point 5).

Through the real API handler on moto: each bad body is a 422 naming the field, and nothing is
written (no row, no reservation: the balance is whole). The options are the kind's declared model
(aijobs.kinds.base.Kind.options), the one the consumer reads them with again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.integration.harness import Stage, api_caller, nothing_written

pytestmark = pytest.mark.integration

Call = Callable[..., tuple[int, Any]]
TEXT = "Queues decouple accepting work from doing it. The producer answers at once."


@pytest.fixture
def stage_values() -> dict[str, str]:
    return {
        "QUEUE_NAMES": "summary;embedding;image-generate;tts-generate;video-generate;embedding-batch",
        "PROVIDER": "local",
    }


@pytest.fixture
def api(stage: Stage, monkeypatch: pytest.MonkeyPatch) -> Iterator[Call]:
    yield from api_caller(stage, monkeypatch, credits=1_000)


def _nothing_written(stage: Stage) -> None:
    nothing_written(stage, credits=1_000)


@pytest.mark.parametrize(
    ("kind", "options", "fields"),
    [
        ("summary", {"sentences": "many"}, ["sentences"]),
        # JSON types as they are: no string, boolean or fraction passes for an integer.
        ("summary", {"sentences": "3"}, ["sentences"]),
        ("summary", {"sentences": True}, ["sentences"]),
        ("summary", {"sentences": 2.5}, ["sentences"]),
        ("summary", {"sentences": 0}, ["sentences"]),
        ("summary", {"temperature": 1.5, "maxTokens": 10**9}, ["maxTokens", "temperature"]),
        ("image-generate", {"width": 1e9}, ["width"]),
        # The image models take an aspect ratio, not a size or a quality: refused, never priced.
        ("image-generate", {"width": 2048, "height": 2048}, ["height", "width"]),
        ("image-generate", {"quality": "premium"}, ["quality"]),
        ("image-generate", {"count": 5}, ["count"]),
        ("image-generate", {"aspectRatio": "7:3"}, ["aspectRatio"]),
        ("embedding", {"dimensions": -3}, ["dimensions"]),
        ("embedding", {"normalize": "no"}, ["normalize"]),
        ("tts-generate", {"textType": "html"}, ["textType"]),
        ("video-generate", {"durationSeconds": 3600}, ["durationSeconds"]),
        ("video-generate", {"resolution": "huge"}, ["resolution"]),
        # A workflow's children take its child kind's options: checked before the parent is written.
        ("embedding-batch", {"dimensions": -3}, ["dimensions"]),
    ],
)
def test_a_bad_option_is_a_422_naming_it_and_nothing_is_written(
    stage: Stage, api: Call, kind: str, options: dict[str, Any], fields: list[str]
) -> None:
    body: dict[str, Any] = {"kind": kind, "input": TEXT, "options": options}
    if kind == "embedding-batch":
        body["input"] = {"texts": [TEXT, TEXT]}
    status, answer = api("POST", "/jobs", body)
    assert status == 422, answer
    assert answer["code"] == "invalid_options"
    assert sorted(problem["option"] for problem in answer["details"]["options"]) == fields
    assert any(field in answer["message"] for field in fields)
    _nothing_written(stage)


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("summary", ""),
        ("summary", " \n\t "),
        ("summary", {"text": "   "}),
        ("embedding", "  "),
        ("embedding", {"texts": [TEXT, "  "]}),
        ("embedding", {"texts": []}),
        ("image-generate", {"prompt": "\n"}),
        ("tts-generate", "\t"),
        ("video-generate", {"prompt": ""}),
    ],
)
def test_an_empty_or_blank_text_is_a_422_and_nothing_is_written(
    stage: Stage, api: Call, kind: str, value: Any
) -> None:
    status, answer = api("POST", "/jobs", {"kind": kind, "input": value})
    assert status == 422, answer
    assert answer["code"] == "invalid_input"
    _nothing_written(stage)


def test_good_options_are_accepted(stage: Stage, api: Call) -> None:
    # The other side of the line: JSON integers and numbers of the right kind pass.
    status, answer = api(
        "POST", "/jobs", {"kind": "summary", "input": TEXT, "options": {"sentences": 2, "temperature": 0}}
    )
    assert status == 202, answer
