"""Running a kind (aijobs.kinds.run): input rules, options, the capability request it builds, and
structured output checked against the kind's output model."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from pydantic import BaseModel, Field

from aijobs.errors import InputTooLargeError, InvalidInputError, InvalidOutputError, ProviderAuthError
from aijobs.kinds.base import Inputs, Kind, TextOptions
from aijobs.kinds.registry import declared, require
from aijobs.kinds.run import Step, check_input, run
from aijobs.providers.base import ImageRequest, ImageResult, TextRequest, TextResult
from aijobs.providers.local import LocalProvider
from aijobs.providers.polly import PollyProvider


class Answer(BaseModel):
    answer: str
    confidence: float = Field(ge=0, le=1)


class Options(TextOptions):
    target: str = Field(default="en", pattern=r"^[a-z]{2}$")


def _kind(**fields: Any) -> Kind:
    values: dict[str, Any] = {
        "name": "translate",
        "capability": "text",
        "description": "test",
        "models": {"local": "local-text-1"},
        "options": Options,
        "system": "Translate into {options.target}.",
        "prompt": "Text:\n{input}",
    }
    return Kind(**{**values, **fields})


class Scripted(LocalProvider):
    """The local provider, answering what a test says and keeping the request it got."""

    def __init__(self, answer: TextResult | None = None) -> None:
        super().__init__()
        self.answer = answer
        self.requests: list[TextRequest] = []

    def generate_text(self, request: TextRequest) -> TextResult:
        self.requests.append(request)
        return self.answer or super().generate_text(request)


def _step(kind: Kind, text: str = "Bonjour. Merci.", **options: Any) -> Step:
    return Step(job_id="j", input=check_input(kind, text), options=options, model="local-text-1")


def test_every_declared_kind_is_a_valid_declaration_found_by_its_file_name() -> None:
    assert {"summary", "classify", "embedding", "image-generate", "image-caption"} <= set(declared())
    for name in declared():
        kind = require(name)
        assert kind.name == name
        assert kind.parse_options({}) is not None  # every option has a default


def test_the_templates_render_the_input_and_options_into_the_request() -> None:
    provider = Scripted()
    run(_kind(), provider, _step(_kind(), target="fr"))
    (request,) = provider.requests
    assert request.system == "Translate into fr."
    assert request.prompt == "Text:\nBonjour. Merci."
    assert (request.max_tokens, request.temperature, request.output_schema) == (1024, None, None)


def test_a_template_field_that_is_not_input_or_an_option_fails_at_declaration() -> None:
    with pytest.raises(ValueError, match=r"template field \{text\}"):
        _kind(prompt="{text}")


def test_options_are_the_kinds_model() -> None:
    with pytest.raises(InvalidInputError, match="target"):
        run(_kind(), Scripted(), _step(_kind(), target="French"))
    with pytest.raises(InvalidInputError, match="unknown"):
        run(_kind(), Scripted(), _step(_kind(), unknown=1))
    # The consumer reads them with the model the API checked them with: strict JSON types.
    with pytest.raises(InvalidInputError, match="maxTokens"):
        run(_kind(), Scripted(), _step(_kind(), maxTokens="300"))


@pytest.mark.parametrize(
    ("raw", "error"),
    [
        ("   ", InvalidInputError),
        ({"other": "x"}, InvalidInputError),
        (3, InvalidInputError),
        ("x" * 51, InputTooLargeError),
    ],
)
def test_the_input_rules_are_the_kinds(raw: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        check_input(_kind(inputs=Inputs(max_chars=50)), raw)


def test_an_object_input_gives_its_text_field_and_a_list_field_gives_texts() -> None:
    kind = _kind(inputs=Inputs(fields=("prompt", "text"), list_field="texts", max_items=2))
    assert check_input(kind, {"prompt": "a", "text": "b"}).text == "a"
    assert check_input(kind, {"texts": ["a", "b"]}).texts == ("a", "b")
    with pytest.raises(InputTooLargeError):
        check_input(kind, {"texts": ["a", "b", "c"]})


def test_an_image_kind_takes_no_inline_input() -> None:
    with pytest.raises(InvalidInputError, match="inputRef"):
        check_input(require("image-caption"), "a picture")


def test_a_structured_answer_is_validated_and_dumped() -> None:
    kind = _kind(output=Answer)
    provider = Scripted(TextResult(text="", data={"answer": "hello", "confidence": 0.5}, model="m"))
    result = run(kind, provider, _step(kind))
    assert result.output == {"answer": "hello", "confidence": 0.5}
    assert provider.requests[0].output_schema == Answer.model_json_schema()
    assert provider.requests[0].output_name == "translate"


@pytest.mark.parametrize(
    "answer",
    [
        TextResult(text="", data={"answer": "hello", "confidence": 7}, model="m"),
        TextResult(text="not json at all", model="m"),
        TextResult(text='{"answer": 1}', model="m"),
    ],
)
def test_an_answer_that_does_not_match_the_output_model_is_a_retryable_invalid_output(
    answer: TextResult,
) -> None:
    kind = _kind(output=Answer)
    with pytest.raises(InvalidOutputError) as caught:
        run(kind, Scripted(answer), _step(kind))
    assert (caught.value.error_class, caught.value.retryable) == ("invalid_output", True)


def test_a_json_text_answer_validates_too() -> None:
    kind = _kind(output=Answer)
    answer = TextResult(text='{"answer": "hi", "confidence": 1}', model="m")
    assert run(kind, Scripted(answer), _step(kind)).output == {"answer": "hi", "confidence": 1.0}


def test_the_local_provider_answers_every_shipped_output_model_validly() -> None:
    kind = replace(_kind(), output=Answer)
    assert set(run(kind, LocalProvider(), _step(kind)).output) == {"answer", "confidence"}
    classify = require("classify")
    out = run(
        classify,
        LocalProvider(),
        Step(job_id="c", input=check_input(classify, "I love it!"), options={}, model="local-text-1"),
    )
    assert out.output["label"] == "positive"


def test_a_provider_without_the_capability_is_a_set_up_error() -> None:
    with pytest.raises(ProviderAuthError, match="does not offer the text capability"):
        run(_kind(), PollyProvider(bucket="b"), _step(_kind()))


def test_images_blocked_by_the_content_filter_are_reported_beside_the_ones_kept() -> None:
    class PartlyBlocked(LocalProvider):
        def generate_image(self, request: ImageRequest) -> ImageResult:
            made = super().generate_image(request.model_copy(update={"count": 1}))
            return made.model_copy(update={"blocked": 2, "blocked_reason": "Filter reason: output image"})

    kind = require("image-generate")
    value = check_input(kind, "a lighthouse")
    step = Step(job_id="j", input=value, options={"count": 3}, model="local-image-1")
    result = run(kind, PartlyBlocked(), step)
    assert result.status == "succeeded"
    assert len(result.artifacts) == 1
    assert result.output == {
        "images": 1,
        "aspectRatio": "1:1",
        "blocked": 2,
        "blockedReason": "Filter reason: output image",
    }
