"""The `openai` adapter against a real HTTP server on 127.0.0.1, and the HTTP error mapping."""

from __future__ import annotations

import base64
import json
import socket
import struct
import zlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import pytest

from aijobs.errors import (
    InputTooLargeError,
    InvalidInputError,
    ModelUnavailableError,
    ProviderAuthError,
    ProviderError,
    ThrottledError,
    TransientProviderError,
)
from aijobs.providers.base import (
    Call,
    EmbeddingRequest,
    ImageRequest,
    Provider,
    TextRequest,
)
from aijobs.providers.failures import (
    TimeoutProviderError,
    http_error,
    parse_retry_after,
    parse_retry_after_ms,
)
from aijobs.providers.openai import OpenAIProvider
from tests.unit.openai_server import ScriptedServer

KEY = "sk-test-Zq8xW3secret"
TEXT = "Solar panels convert sunlight into electricity. They lower bills."
SYSTEM = "Summarize the text in two sentences."
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 16
# What a pydantic output model's `model_json_schema()` looks like (aijobs.kinds.classify): `tags`
# has a default, so it is not required and the schema cannot be used in OpenAI's strict mode.
SCHEMA: dict[str, Any] = {
    "title": "Classification",
    "type": "object",
    "properties": {
        "label": {"enum": ["positive", "negative", "neutral", "question"], "type": "string"},
        "score": {"maximum": 1.0, "minimum": 0.0, "type": "number"},
        "tags": {"items": {"type": "string"}, "maxItems": 3, "type": "array"},
    },
    "required": ["label", "score"],
}


def png(width: int = 2, height: int = 3) -> bytes:
    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data))

    raw = b"".join(b"\x00" + b"\x10\x20\x30" * width for _ in range(height))
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw))
        + chunk(b"IEND", b"")
    )


def chat_answer(
    content: Any, finish_reason: str = "stop", model: str | None = "gpt-4o-mini-2024-07-18"
) -> Any:
    answer: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}
        ],
        "usage": {"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40},
    }
    if model is not None:
        answer["model"] = model
    return answer


def error_body(message: str, code: str | None = None, type_: str = "invalid_request_error") -> Any:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def call(model: str = "gpt-4o-mini") -> Call:
    return Call(job_id="job-1", model=model)


def text_request(prompt: str = TEXT, *, model: str = "gpt-4o-mini", **fields: Any) -> TextRequest:
    fields.setdefault("system", SYSTEM)
    fields.setdefault("max_tokens", 512)
    return TextRequest(call=call(model), prompt=prompt, **fields)


def embed_request(*texts: str, model: str = "text-embedding-3-small", **fields: Any) -> EmbeddingRequest:
    return EmbeddingRequest(call=call(model), texts=texts or (TEXT,), **fields)


def image_request(prompt: str = "a red fox", *, model: str = "dall-e-3", **fields: Any) -> ImageRequest:
    return ImageRequest(call=call(model), prompt=prompt, **fields)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as running:
        yield running


def adapter(server: ScriptedServer, **fields: Any) -> OpenAIProvider:
    fields.setdefault("api_key", lambda: KEY)
    return OpenAIProvider(base_url=server.base_url, **fields)


def fail(
    server: ScriptedServer, send: Callable[[OpenAIProvider], object] | None = None, **fields: Any
) -> ProviderError:
    """The error the adapter raises for `send` (a chat completion unless told)."""
    with pytest.raises(ProviderError) as caught:
        (send or (lambda provider: provider.generate_text(text_request())))(adapter(server, **fields))
    return caught.value


# --- text: chat completions ---------------------------------------------------------------------


def test_is_a_provider(server: ScriptedServer) -> None:
    provider: Provider = adapter(server)
    assert provider.name == "openai"
    assert provider.capabilities == frozenset({"text", "embedding", "image"})
    # A second endpoint (vLLM, a gateway) under its own name, e.g. in error messages.
    assert adapter(server, name="vllm").name == "vllm"


def test_text_sends_the_exact_chat_request_and_parses_the_answer(server: ScriptedServer) -> None:
    server.reply(chat_answer("  Solar panels turn sunlight into cheaper power.  "))
    result = adapter(server).generate_text(text_request())

    [sent] = server.requests
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["accept"] == "application/json"
    assert sent.json == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TEXT}],
        "max_tokens": 512,
    }
    assert result.text == "Solar panels turn sunlight into cheaper power."
    assert result.data is None
    assert result.truncated is False
    assert result.model == "gpt-4o-mini-2024-07-18"  # the model that answered
    assert result.usage == {"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40}
    assert result.cost is None


@pytest.mark.parametrize("temperature", [0.0, 0.3])
def test_temperature_is_sent_when_given_even_zero(server: ScriptedServer, temperature: float) -> None:
    server.reply(chat_answer("ok"))
    adapter(server).generate_text(text_request(temperature=temperature))
    assert server.requests[0].json["temperature"] == temperature


def test_without_a_system_text_only_the_user_turn_is_sent(server: ScriptedServer) -> None:
    server.reply(chat_answer("ok"))
    adapter(server).generate_text(text_request(system=None, max_tokens=20))
    assert server.requests[0].json == {
        "model": "gpt-4o-mini",
        "messages": [{"role": "user", "content": TEXT}],
        "max_tokens": 20,
    }


def test_the_model_of_the_call_is_sent_and_kept_when_the_answer_names_none(server: ScriptedServer) -> None:
    server.reply(chat_answer("Solar is", finish_reason="length", model=None))
    result = adapter(server).generate_text(text_request(model="qwen2.5:7b"))
    assert server.requests[0].json["model"] == "qwen2.5:7b"
    assert (result.model, result.text, result.truncated) == ("qwen2.5:7b", "Solar is", True)


def test_a_base_url_with_a_trailing_slash_keeps_its_path(server: ScriptedServer) -> None:
    server.reply(chat_answer("ok"))
    OpenAIProvider(api_key=lambda: KEY, base_url=server.base_url + "/").generate_text(text_request())
    assert server.requests[0].path == "/v1/chat/completions"


@pytest.mark.parametrize(
    ("prompt", "error"), [("   ", InvalidInputError), ("w" * 1_000_001, InputTooLargeError)]
)
def test_an_empty_or_huge_prompt_is_refused_before_upload(
    server: ScriptedServer, prompt: str, error: type[ProviderError]
) -> None:
    assert type(fail(server, lambda provider: provider.generate_text(text_request(prompt)))) is error
    assert server.requests == []


@pytest.mark.parametrize("key", [None, ""])
def test_no_api_key_sends_no_authorization_header(server: ScriptedServer, key: str | None) -> None:
    server.reply(chat_answer("ok"))
    adapter(server, api_key=lambda: key).generate_text(text_request())
    assert "authorization" not in server.requests[0].headers


def test_the_api_key_is_read_on_every_request(server: ScriptedServer) -> None:
    keys = iter(["sk-old-aaaa", "sk-new-bbbb"])
    provider = adapter(server, api_key=lambda: next(keys))
    server.reply(chat_answer("one"))
    server.reply(chat_answer("two"))
    provider.generate_text(text_request())
    provider.generate_text(text_request())
    assert [sent.headers["authorization"] for sent in server.requests] == [
        "Bearer sk-old-aaaa",
        "Bearer sk-new-bbbb",
    ]


def test_a_refusal_or_content_filter_is_final(server: ScriptedServer) -> None:
    server.reply(chat_answer(None, finish_reason="content_filter"))
    assert type(fail(server)) is InvalidInputError
    refusal = chat_answer(None)
    refusal["choices"][0]["message"]["refusal"] = "I can't help with that."
    server.reply(refusal)
    error = fail(server, lambda provider: provider.generate_text(text_request(output_schema=SCHEMA)))
    assert type(error) is InvalidInputError
    assert not error.retryable


# --- text: structured output --------------------------------------------------------------------


def test_structured_output_sends_a_json_schema_response_format(server: ScriptedServer) -> None:
    answer = {"label": "positive", "score": 0.93, "tags": ["solar"]}
    server.reply(chat_answer(json.dumps(answer)))
    result = adapter(server).generate_text(
        text_request(
            "I love my solar panels!",
            system="Classify the text.",
            max_tokens=100,
            temperature=0.0,
            output_schema=SCHEMA,
            output_name="classify",
        )
    )
    [sent] = server.requests
    assert sent.json == {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "Classify the text."},
            {"role": "user", "content": "I love my solar panels!"},
        ],
        "max_tokens": 100,
        "temperature": 0.0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "classify", "schema": SCHEMA}},
    }
    assert result.data == answer
    assert json.loads(result.text) == answer


@pytest.mark.parametrize(
    "content", ["not json", "[1, 2]", '"a string"', '```json\n{"label": "positive", "score": 1}\n```']
)
def test_a_structured_answer_that_is_not_a_json_object_leaves_data_empty(
    server: ScriptedServer, content: str
) -> None:
    # The kind decides (its output model, InvalidOutputError): the adapter only parses what it can.
    server.reply(chat_answer(content))
    result = adapter(server).generate_text(text_request(output_schema=SCHEMA))
    assert result.data is None
    assert result.text == content.strip()


def test_json_text_without_an_output_schema_is_not_parsed(server: ScriptedServer) -> None:
    server.reply(chat_answer('{"label": "positive"}'))
    result = adapter(server).generate_text(text_request())
    assert result.data is None
    assert "response_format" not in server.requests[0].json


# --- text: images in the user turn --------------------------------------------------------------


def test_images_are_sent_as_data_urls_after_the_text(server: ScriptedServer) -> None:
    image = png()
    server.reply(chat_answer("A dark blue square."))
    result = adapter(server).generate_text(
        text_request("Write a caption for these images.", images=(image, JPEG), max_tokens=100)
    )
    [sent] = server.requests
    assert sent.json == {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": SYSTEM},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Write a caption for these images."},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64(image)}},
                    {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + b64(JPEG)}},
                ],
            },
        ],
        "max_tokens": 100,
    }
    assert result.text == "A dark blue square."
    assert result.usage["total_tokens"] == 40


def test_an_image_without_a_prompt_is_sent_alone(server: ScriptedServer) -> None:
    image = png()
    server.reply(chat_answer("A square."))
    adapter(server).generate_text(text_request("", images=(image,), system=None))
    assert server.requests[0].json["messages"] == [
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64," + b64(image)}}],
        }
    ]


@pytest.mark.parametrize(
    ("image", "error"),
    [
        (b"plain text, not an image", InvalidInputError),
        (b"RIFF\x10\x00\x00\x00AVI LIST", InvalidInputError),
        (b"\xff\xd8\xff" + b"\0" * (20 * 1024 * 1024), InputTooLargeError),
    ],
)
def test_images_are_checked_before_upload(
    server: ScriptedServer, image: bytes, error: type[ProviderError]
) -> None:
    def send(provider: OpenAIProvider) -> object:
        return provider.generate_text(text_request("Caption it.", images=(png(), image)))

    assert type(fail(server, send)) is error
    assert server.requests == []


# --- embedding ----------------------------------------------------------------------------------


def test_embedding_of_one_text(server: ScriptedServer) -> None:
    server.reply(
        {
            "object": "list",
            "data": [{"object": "embedding", "index": 0, "embedding": [0.25, -0.5, 1]}],
            "model": "text-embedding-3-small",
            "usage": {"prompt_tokens": 8, "total_tokens": 8},
        }
    )
    result = adapter(server).embed(embed_request())
    [sent] = server.requests
    assert sent.path == "/v1/embeddings"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.json == {"model": "text-embedding-3-small", "input": [TEXT]}
    assert result.vectors == ((0.25, -0.5, 1.0),)
    assert result.dimensions == 3
    assert result.usage == {"prompt_tokens": 8, "total_tokens": 8}
    assert result.model == "text-embedding-3-small"


def test_embedding_batch_in_one_request_in_input_order(server: ScriptedServer) -> None:
    server.reply(
        {
            "data": [{"index": 1, "embedding": [0.0, 1.0]}, {"index": 0, "embedding": [1.0, 0.0]}],
            "model": "nomic-embed-text",
            "usage": {"prompt_tokens": 4, "total_tokens": 4},
        }
    )
    result = adapter(server).embed(embed_request("first", "second", dimensions=2))
    assert server.requests[0].json == {
        "model": "text-embedding-3-small",
        "input": ["first", "second"],
        "dimensions": 2,
    }
    assert result.vectors == ((1.0, 0.0), (0.0, 1.0))
    assert (result.dimensions, result.model) == (2, "nomic-embed-text")


@pytest.mark.parametrize(
    ("texts", "error"),
    [
        (("ok", ""), InvalidInputError),
        (("ok", "   "), InvalidInputError),
        (("x",) * 2049, InvalidInputError),
        (("y" * 600_000, "z" * 400_001), InputTooLargeError),
    ],
)
def test_embedding_texts_are_checked_before_upload(
    server: ScriptedServer, texts: tuple[str, ...], error: type[ProviderError]
) -> None:
    assert type(fail(server, lambda provider: provider.embed(embed_request(*texts)))) is error
    assert server.requests == []


@pytest.mark.parametrize(
    "data",
    [
        [{"index": 0, "embedding": [0.1]}],  # one vector for two texts
        [{"index": 0, "embedding": [0.1]}, {"index": 1, "embedding": ["x"]}],
        [{"index": 0, "embedding": [0.1]}, {"index": 1, "embedding": [True]}],
        [{"index": 0, "embedding": [0.1]}, {"index": 1, "embedding": []}],
        [{"index": 0, "embedding": [0.1]}, {"index": 1, "embedding": [0.1, 0.2]}],
        "not a list",
    ],
)
def test_embedding_answer_of_the_wrong_shape_is_transient(server: ScriptedServer, data: Any) -> None:
    server.reply({"data": data})
    error = fail(server, lambda provider: provider.embed(embed_request("a", "b")))
    assert type(error) is TransientProviderError


# --- image generation ---------------------------------------------------------------------------


def test_dall_e_is_asked_for_base64_images(server: ScriptedServer) -> None:
    image = png(4, 3)
    server.reply(
        {"created": 1_700_000_000, "data": [{"b64_json": b64(image), "revised_prompt": "a red fox"}]}
    )
    result = adapter(server).generate_image(image_request())
    [sent] = server.requests
    assert sent.path == "/v1/images/generations"
    assert sent.json == {
        "model": "dall-e-3",
        "prompt": "a red fox",
        "n": 1,
        "size": "1024x1024",
        "response_format": "b64_json",
    }
    [artifact] = result.images
    assert (artifact.name, artifact.content_type, artifact.data) == ("image.png", "image/png", image)
    assert result.usage == {"images": 1, "imagePixels": 1024 * 1024}
    assert result.model == "dall-e-3"


def test_gpt_image_models_always_answer_base64_and_report_tokens(server: ScriptedServer) -> None:
    server.reply(
        {
            "created": 1_700_000_000,
            "data": [{"b64_json": b64(png())}],
            "usage": {
                "input_tokens": 12,
                "output_tokens": 4160,
                "total_tokens": 4172,
                "input_tokens_details": {"text_tokens": 12, "image_tokens": 0},
            },
        }
    )
    result = adapter(server).generate_image(image_request(model="gpt-image-1", aspect_ratio="16:9"))
    # No `response_format`: gpt-image models refuse it (they always answer base64).
    assert server.requests[0].json == {
        "model": "gpt-image-1",
        "prompt": "a red fox",
        "n": 1,
        "size": "1536x1024",
    }
    assert result.usage == {
        "images": 1,
        "imagePixels": 1536 * 1024,
        "input_tokens": 12,
        "output_tokens": 4160,
        "total_tokens": 4172,
    }


@pytest.mark.parametrize(
    ("model", "ratio", "size"),
    [
        ("gpt-image-1", "1:1", "1024x1024"),
        ("gpt-image-1", "5:4", "1024x1024"),
        ("gpt-image-1", "4:5", "1024x1024"),
        ("gpt-image-1", "3:2", "1536x1024"),
        ("gpt-image-1", "21:9", "1536x1024"),
        ("gpt-image-1", "2:3", "1024x1536"),
        ("gpt-image-1", "9:16", "1024x1536"),
        ("dall-e-3", "16:9", "1792x1024"),
        ("dall-e-3", "9:21", "1024x1792"),
        ("dall-e-3", "4:5", "1024x1024"),
    ],
)
def test_the_image_size_is_the_nearest_to_the_aspect_ratio(
    server: ScriptedServer, model: str, ratio: str, size: str
) -> None:
    server.reply({"data": [{"b64_json": b64(png())}]})
    adapter(server).generate_image(image_request(model=model, aspect_ratio=ratio))
    assert server.requests[0].json["size"] == size


def test_several_images_are_named_by_index_and_type(server: ScriptedServer) -> None:
    server.reply({"data": [{"b64_json": b64(png())}, {"b64_json": b64(JPEG)}]})
    result = adapter(server).generate_image(image_request(model="gpt-image-1", count=2))
    assert server.requests[0].json["n"] == 2
    assert [(artifact.name, artifact.content_type) for artifact in result.images] == [
        ("image-1.png", "image/png"),
        ("image-2.jpg", "image/jpeg"),
    ]
    assert result.usage == {"images": 2, "imagePixels": 1024 * 1024}


@pytest.mark.parametrize(
    "request_fields", [{"aspect_ratio": "wide"}, {"aspect_ratio": "1:0"}, {"prompt": "  "}]
)
def test_image_requests_are_checked_before_upload(
    server: ScriptedServer, request_fields: dict[str, Any]
) -> None:
    fields = {"prompt": "a red fox"} | request_fields
    error = fail(server, lambda provider: provider.generate_image(image_request(**fields)))
    assert type(error) is InvalidInputError
    assert server.requests == []


@pytest.mark.parametrize(
    "body",
    [
        {"data": [{"b64_json": "%%% not base64"}]},
        {"data": [{"url": "https://x"}]},
        {"data": [{"b64_json": "aGVsbG8="}]},  # base64 of "hello": not an image
        {"data": []},
        {"created": 1},
        {"data": ["not an object"]},
    ],
)
def test_image_generation_answer_without_image_data_is_transient(server: ScriptedServer, body: Any) -> None:
    server.reply(body)
    error = fail(server, lambda provider: provider.generate_image(image_request()))
    assert type(error) is TransientProviderError


# --- HTTP failures against the server ----------------------------------------------------------


def test_429_with_retry_after_seconds(server: ScriptedServer) -> None:
    server.reply(
        error_body("Rate limit reached for gpt-4o-mini", "rate_limit_exceeded", "requests"),
        status=429,
        headers={"Retry-After": "7"},
    )
    error = fail(server)
    assert isinstance(error, ThrottledError)
    assert (error.status, error.retry_after, error.retryable) == (429, 7.0, True)
    assert "rate_limit_exceeded" in str(error)


def test_429_with_retry_after_http_date(server: ScriptedServer) -> None:
    when = datetime.now(UTC) + timedelta(seconds=120)
    server.reply(
        error_body("slow down"), status=429, headers={"Retry-After": format_datetime(when, usegmt=True)}
    )
    error = fail(server)
    assert isinstance(error, ThrottledError)
    assert error.retry_after is not None
    assert 60 < error.retry_after <= 120


def test_429_prefers_retry_after_ms(server: ScriptedServer) -> None:
    server.reply(error_body("slow down"), status=429, headers={"Retry-After": "9", "retry-after-ms": "1500"})
    error = fail(server)
    assert isinstance(error, ThrottledError)
    assert error.retry_after == 1.5


def test_429_without_retry_after_leaves_the_back_off_to_the_queue(server: ScriptedServer) -> None:
    server.reply(error_body("slow down"), status=429)
    error = fail(server)
    assert isinstance(error, ThrottledError)
    assert error.retry_after is None


def test_429_for_an_exhausted_quota_is_a_configuration_problem(server: ScriptedServer) -> None:
    server.reply(error_body("You exceeded your current quota", "insufficient_quota"), status=429)
    assert type(fail(server)) is ProviderAuthError


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_server_errors_are_transient(server: ScriptedServer, status: int) -> None:
    server.reply(
        "<html><body><h1>Bad Gateway</h1></body></html>", status=status, headers={"Content-Type": "text/html"}
    )
    error = fail(server)
    assert type(error) is TransientProviderError
    assert error.status == status
    assert error.retryable


@pytest.mark.parametrize(
    "body",
    [
        error_body(
            "This model's maximum context length is 128000 tokens. However, your messages resulted in "
            "130512 tokens. Please reduce the length of the messages.",
            "context_length_exceeded",
        ),
        # vLLM: no code, only the words.
        {
            "object": "error",
            "message": "This model's maximum context length is 4096 tokens. However, you requested "
            "5000 tokens.",
            "type": "BadRequestError",
            "param": None,
            "code": 400,
        },
    ],
)
def test_400_context_length_is_input_too_large(server: ScriptedServer, body: Any) -> None:
    server.reply(body, status=400)
    error = fail(server)
    assert type(error) is InputTooLargeError
    assert not error.retryable


def test_413_is_input_too_large(server: ScriptedServer) -> None:
    server.reply("Request Entity Too Large", status=413)
    assert type(fail(server)) is InputTooLargeError


def test_other_400_is_invalid_input(server: ScriptedServer) -> None:
    server.reply(error_body("'temperature' must be a number", "invalid_type"), status=400)
    assert type(fail(server)) is InvalidInputError


@pytest.mark.parametrize("status", [401, 403])
def test_401_and_403_are_auth_errors_without_the_key(server: ScriptedServer, status: int) -> None:
    server.reply(
        error_body(f"Incorrect API key provided: {KEY}. You can find your API key at ...", "invalid_api_key"),
        status=status,
    )
    error = fail(server)
    assert type(error) is ProviderAuthError
    assert error.status == status
    assert KEY not in str(error)
    assert "sk-" not in str(error)
    assert "invalid_api_key" in str(error)


def test_a_key_of_any_shape_echoed_back_is_redacted(server: ScriptedServer) -> None:
    # Not key-shaped ("sk-..."): only the adapter passing its own key as a secret removes it.
    key = "gateway-token-8f3a1c77"
    server.reply(error_body(f"token {key} is not valid for this route", "invalid_api_key"), status=401)
    error = fail(server, api_key=lambda: key)
    assert type(error) is ProviderAuthError
    assert key not in str(error)
    assert "[redacted]" in str(error)


@pytest.mark.parametrize(
    "send",
    [
        lambda provider: provider.generate_text(text_request(model="gpt-9")),
        lambda provider: provider.embed(embed_request(model="gpt-9")),
        lambda provider: provider.generate_image(image_request(model="gpt-9")),
    ],
    ids=["text", "embedding", "image"],
)
def test_404_model_not_found_is_an_unavailable_model_not_a_configuration_error(
    server: ScriptedServer, send: Callable[[OpenAIProvider], object]
) -> None:
    # The model is gone (or this account may not use it): the job fails, nobody's consumer pauses, the
    # operator is alerted once per model (aijobs.consumer.attempts). A job's own model is
    # allow-listed at submit, so its 404 means the same.
    server.reply(
        error_body("The model `gpt-9` does not exist or you do not have access to it.", "model_not_found"),
        status=404,
    )
    error = fail(server, send)
    assert type(error) is ModelUnavailableError
    assert (error.error_class, error.retryable, error.reason, error.status) == (
        "model_unavailable", False, "not_found", 404,
    )  # fmt: skip


def test_404_without_model_not_found_is_still_the_configurations(server: ScriptedServer) -> None:
    # A wrong base URL answers 404 too: paused and alerted.
    server.reply(error_body("no such route"), status=404)
    assert type(fail(server)) is ProviderAuthError


def test_404_of_a_wrong_base_url_is_a_configuration_error(server: ScriptedServer) -> None:
    server.reply("404 page not found", status=404, headers={"Content-Type": "text/plain"})
    assert type(fail(server)) is ProviderAuthError


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"<html>Welcome to the hotel wifi</html>",
        b"\xff\xfe\x00",
        b"[]",
        json.dumps({"choices": []}).encode(),
        json.dumps({"choices": [{"finish_reason": "stop"}]}).encode(),
        json.dumps(chat_answer(None)).encode(),
        json.dumps(chat_answer(["not", "text"])).encode(),
    ],
)
def test_an_unusable_200_answer_is_transient(server: ScriptedServer, body: bytes) -> None:
    server.reply(body)
    error = fail(server)
    assert type(error) is TransientProviderError
    assert error.retryable


def test_a_slow_answer_hits_the_read_timeout(server: ScriptedServer) -> None:
    # Answered only when the server stops: the read timeout runs out first however busy the machine.
    server.reply(chat_answer("too late"), delay=60.0)
    error = fail(server, read_timeout=0.2)
    assert isinstance(error, TimeoutProviderError)
    assert isinstance(error, TransientProviderError)
    assert "read timed out" in str(error)


def test_a_connection_closed_without_an_answer_is_transient(server: ScriptedServer) -> None:
    server.reply(hang_up=True)
    assert isinstance(fail(server), TimeoutProviderError)


def test_a_refused_connection_is_transient() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = OpenAIProvider(api_key=lambda: KEY, base_url=f"http://127.0.0.1:{port}/v1")
    with pytest.raises(TimeoutProviderError) as caught:
        provider.generate_text(text_request())
    assert "connect failed" in str(caught.value)
    assert str(port) not in str(caught.value)  # names the exception class, never the URL


def test_error_messages_are_short_and_do_not_echo_the_input(server: ScriptedServer) -> None:
    secret_input = "PRIVATE-" + "x" * 5000
    server.reply(error_body(f"Invalid value for 'content': {secret_input}", "invalid_value"), status=400)
    error = fail(server, lambda provider: provider.generate_text(text_request(secret_input)))
    assert len(str(error)) < 300
    assert "x" * 200 not in str(error)


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="base_url"):
        OpenAIProvider(api_key=lambda: KEY, base_url="ftp://example.com")
    with pytest.raises(ValueError, match="base_url"):
        OpenAIProvider(api_key=lambda: KEY, base_url="https:///v1")
    with pytest.raises(ValueError, match="timeouts"):
        OpenAIProvider(api_key=lambda: KEY, read_timeout=0)
    with pytest.raises(ValueError, match="timeouts"):
        OpenAIProvider(api_key=lambda: KEY, connect_timeout=-1)


# --- the mapping on its own --------------------------------------------------------------------


def test_retry_after_forms() -> None:
    now = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("30", now=now) == 30.0
    assert parse_retry_after(" 2.5 ", now=now) == 2.5
    assert parse_retry_after("Sun, 29 Nov 2026 12:01:30 GMT", now=now) == 90.0
    assert parse_retry_after("Sun, 29 Nov 2026 11:00:00 GMT", now=now) == 0.0  # already past
    assert parse_retry_after("-5", now=now) == 0.0
    assert parse_retry_after("99999999", now=now) == 43_200.0
    for unusable in (None, "", "soon", "nan", "inf"):
        assert parse_retry_after(unusable, now=now) is None
    assert parse_retry_after_ms("250") == 0.25
    assert parse_retry_after_ms("x") is None
    assert parse_retry_after_ms(None) is None


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (408, "", TransientProviderError),
        (529, "overloaded", TransientProviderError),
        (
            400,
            error_body("Invalid 'prompt': string too long.", "string_above_max_length"),
            InputTooLargeError,
        ),
        (400, {"error": "prompt is too long for the model"}, InputTooLargeError),
        (
            400,
            error_body("Your request was rejected by the safety system", "content_policy_violation"),
            InvalidInputError,
        ),
        (422, error_body("unprocessable"), InvalidInputError),
        (402, "Payment Required", ProviderAuthError),
        (404, "Not Found", ProviderAuthError),
        (301, "", ProviderAuthError),
    ],
)
def test_http_error_table(status: int, body: Any, expected: type[ProviderError]) -> None:
    text = body if isinstance(body, str) else json.dumps(body)
    assert type(http_error(status, text)) is expected


def test_http_error_of_a_model_the_job_chose_is_the_jobs_fault() -> None:
    body = json.dumps({"error": 'model "llama9" not found, try pulling it first'})
    assert type(http_error(404, body, model_override=True)) is InvalidInputError
    assert type(http_error(404, body, model_override=False)) is ProviderAuthError


def test_http_error_message_names_provider_status_and_code_only() -> None:
    error = http_error(
        400,
        json.dumps(error_body("Bad\n\nthing   Bearer abc.def " + "y" * 400, "invalid_value")),
        provider="openai",
        secrets=("hunter2",),
    )
    message = str(error)
    assert message.startswith("openai: HTTP 400 invalid_value: Bad thing [redacted] ")
    assert message.endswith("...")
    assert len(message) < 220
    assert "hunter2" not in str(http_error(401, "key hunter2 is wrong", secrets=("hunter2",)))
