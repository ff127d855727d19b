"""The `openai` adapter against a real HTTP server on 127.0.0.1, and the HTTP error mapping."""

from __future__ import annotations

import base64
import json
import socket
import struct
import zlib
from collections.abc import Iterator
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
from aijobs.providers.base import Provider, ProviderRequest
from aijobs.providers.failures import (
    TimeoutProviderError,
    http_error,
    parse_retry_after,
    parse_retry_after_ms,
)
from aijobs.providers.openai import SYSTEM_PROMPTS, OpenAIProvider
from tests.unit.openai_server import ScriptedServer

KEY = "sk-test-Zq8xW3secret"
TEXT = "Solar panels convert sunlight into electricity. They lower bills."


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


def chat_answer(content: Any, finish_reason: str = "stop", model: str = "gpt-4o-mini-2024-07-18") -> Any:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}
        ],
        "usage": {"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40},
    }


def error_body(message: str, code: str | None = None, type_: str = "invalid_request_error") -> Any:
    return {"error": {"message": message, "type": type_, "param": None, "code": code}}


def request(kind: str = "summary", input: Any = TEXT, **fields: Any) -> ProviderRequest:
    return ProviderRequest(job_id="job-1", kind=kind, input=input, **fields)


@pytest.fixture
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as running:
        yield running


def adapter(server: ScriptedServer, **fields: Any) -> OpenAIProvider:
    fields.setdefault("api_key", lambda: KEY)
    return OpenAIProvider(base_url=server.base_url, **fields)


def fail(server: ScriptedServer, req: ProviderRequest | None = None, **fields: Any) -> ProviderError:
    with pytest.raises(ProviderError) as caught:
        adapter(server, **fields).run(req or request())
    return caught.value


# --- success shapes ---------------------------------------------------------------------------


def test_is_a_provider(server: ScriptedServer) -> None:
    provider: Provider = adapter(server)
    assert provider.name == "openai"
    assert adapter(server, name="vllm").name == "vllm"


def test_summary_sends_the_exact_chat_request_and_parses_the_answer(server: ScriptedServer) -> None:
    server.reply(chat_answer("  Solar panels turn sunlight into cheaper power.  "))
    result = adapter(server).run(request())

    [sent] = server.requests
    assert (sent.method, sent.path) == ("POST", "/v1/chat/completions")
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["content-type"] == "application/json"
    assert sent.headers["accept"] == "application/json"
    assert sent.json == {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPTS["summary"]},
            {"role": "user", "content": TEXT},
        ],
        "max_tokens": 512,
    }
    assert result.status == "succeeded"
    assert result.output == {"summary": "Solar panels turn sunlight into cheaper power.", "truncated": False}
    assert result.model == "gpt-4o-mini-2024-07-18"
    assert result.usage == {"prompt_tokens": 31, "completion_tokens": 9, "total_tokens": 40}


def test_summary_options_model_override_and_truncation(server: ScriptedServer) -> None:
    server.reply(chat_answer("Solar is", finish_reason="length", model="llama3"))
    options = {"max_tokens": 20, "temperature": 0.3, "sentences": 2}
    result = adapter(server, models={"summary": "ignored"}).run(
        request(input={"text": TEXT}, options=options, model="llama3")
    )
    body = server.requests[0].json
    assert body["model"] == "llama3"
    assert body["max_tokens"] == 20
    assert body["temperature"] == 0.3
    assert body["messages"][0]["content"] == SYSTEM_PROMPTS["summary"] + " Use at most 2 sentences."
    assert result.output == {"summary": "Solar is", "truncated": True}


def test_the_model_map_picks_the_model_per_kind(server: ScriptedServer) -> None:
    server.reply(chat_answer("ok"))
    adapter(server, models={"summary": "qwen2.5:7b"}).run(request())
    assert server.requests[0].json["model"] == "qwen2.5:7b"


@pytest.mark.parametrize(
    "options",
    [
        {"max_tokens": 0},
        {"max_tokens": 16_385},
        {"max_tokens": "100"},
        {"max_tokens": True},
        {"temperature": -0.1},
        {"temperature": 2.5},
        {"temperature": "hot"},
        {"sentences": 0},
    ],
)
def test_summary_options_out_of_bounds_are_invalid_input_and_send_nothing(
    server: ScriptedServer, options: dict[str, Any]
) -> None:
    error = fail(server, request(options=options))
    assert type(error) is InvalidInputError
    assert server.requests == []


@pytest.mark.parametrize("input", [None, "   ", {"prompt": 3}, {"other": "x"}])
def test_summary_without_text_is_invalid_input(server: ScriptedServer, input: Any) -> None:
    assert type(fail(server, request(input=input))) is InvalidInputError
    assert server.requests == []


def test_summary_of_megabytes_is_refused_before_upload(server: ScriptedServer) -> None:
    assert type(fail(server, request(input="word " * 300_000))) is InputTooLargeError
    assert server.requests == []


def test_no_api_key_sends_no_authorization_header(server: ScriptedServer) -> None:
    server.reply(chat_answer("ok"))
    adapter(server, api_key=lambda: None).run(request())
    assert "authorization" not in server.requests[0].headers


def test_the_api_key_is_read_on_every_request(server: ScriptedServer) -> None:
    keys = iter(["sk-old-aaaa", "sk-new-bbbb"])
    provider = adapter(server, api_key=lambda: next(keys))
    server.reply(chat_answer("one"))
    server.reply(chat_answer("two"))
    provider.run(request())
    provider.run(request())
    assert [sent.headers["authorization"] for sent in server.requests] == [
        "Bearer sk-old-aaaa",
        "Bearer sk-new-bbbb",
    ]


def test_classify_sends_a_json_mode_request(server: ScriptedServer) -> None:
    server.reply(chat_answer(json.dumps({"label": "Positive", "score": 0.93, "tags": ["solar", "bills"]})))
    result = adapter(server).classify("I love my solar panels!")
    [sent] = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.json == {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPTS["classify"]},
            {"role": "user", "content": "I love my solar panels!"},
        ],
        "max_tokens": 100,
        "temperature": 0,
        "response_format": {"type": "json_object"},
    }
    assert (result.label, result.score, result.tags) == ("positive", 0.93, ("solar", "bills"))
    assert result.model == "gpt-4o-mini-2024-07-18"


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[1, 2]",
        json.dumps({"label": "angry", "score": 1}),
        json.dumps({"label": "neutral", "score": 1, "tags": "solar"}),
    ],
)
def test_classify_answer_that_is_not_the_requested_json_is_transient(
    server: ScriptedServer, content: str
) -> None:
    server.reply(chat_answer(content))
    with pytest.raises(TransientProviderError):
        adapter(server).classify("hello")


def test_embedding_of_one_text(server: ScriptedServer) -> None:
    server.reply(
        {
            "object": "list",
            "data": [{"object": "embedding", "index": 0, "embedding": [0.25, -0.5, 1]}],
            "model": "text-embedding-3-small",
            "usage": {"prompt_tokens": 8, "total_tokens": 8},
        }
    )
    result = adapter(server).run(request("embedding"))
    [sent] = server.requests
    assert sent.path == "/v1/embeddings"
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.json == {"model": "text-embedding-3-small", "input": TEXT}
    assert result.output == {"vector": [0.25, -0.5, 1.0], "dimensions": 3}
    assert result.usage == {"prompt_tokens": 8, "total_tokens": 8}
    assert result.model == "text-embedding-3-small"


def test_embedding_batch_in_one_request_in_input_order(server: ScriptedServer) -> None:
    server.reply(
        {
            "data": [
                {"index": 1, "embedding": [0.0, 1.0]},
                {"index": 0, "embedding": [1.0, 0.0]},
            ],
            "model": "nomic-embed-text",
            "usage": {"prompt_tokens": 4, "total_tokens": 4},
        }
    )
    result = adapter(server).run(
        request("embedding", input={"texts": ["first", "second"]}, options={"dimensions": 2})
    )
    assert server.requests[0].json == {
        "model": "text-embedding-3-small",
        "input": ["first", "second"],
        "dimensions": 2,
    }
    assert result.output == {"vectors": [[1.0, 0.0], [0.0, 1.0]], "count": 2, "dimensions": 2}


@pytest.mark.parametrize(
    ("input", "options"),
    [
        ({"texts": []}, {}),
        ({"texts": ["ok", ""]}, {}),
        ({"texts": "not a list"}, {}),
        ({"texts": ["x"] * 2049}, {}),
        ("text", {"dimensions": 0}),
        ("text", {"dimensions": 9000}),
    ],
)
def test_embedding_input_and_options_are_checked(
    server: ScriptedServer, input: Any, options: dict[str, Any]
) -> None:
    assert type(fail(server, request("embedding", input=input, options=options))) is InvalidInputError
    assert server.requests == []


@pytest.mark.parametrize(
    "data",
    [
        [{"index": 0, "embedding": [0.1]}],  # one vector for two texts
        [{"index": 0, "embedding": [0.1]}, {"index": 1, "embedding": ["x"]}],
        [{"index": 0, "embedding": [0.1]}, {"index": 1, "embedding": [0.1, 0.2]}],
    ],
)
def test_embedding_answer_of_the_wrong_shape_is_transient(server: ScriptedServer, data: Any) -> None:
    server.reply({"data": data})
    error = fail(server, request("embedding", input={"texts": ["a", "b"]}))
    assert type(error) is TransientProviderError


def test_image_generation_stores_png_artifacts(server: ScriptedServer) -> None:
    image = png(4, 3)
    server.reply(
        {
            "created": 1_700_000_000,
            "data": [{"b64_json": base64.b64encode(image).decode(), "revised_prompt": "a red fox"}],
        }
    )
    result = adapter(server).run(request("image-generate", input={"prompt": "a red fox"}))
    [sent] = server.requests
    assert sent.path == "/v1/images/generations"
    assert sent.json == {
        "model": "dall-e-3",
        "prompt": "a red fox",
        "n": 1,
        "size": "1024x1024",
        "response_format": "b64_json",
    }
    [artifact] = result.artifacts
    assert (artifact.name, artifact.content_type, artifact.data) == ("image.png", "image/png", image)
    assert result.output == {
        "images": [{"name": "image.png", "bytes": len(image), "width": 4, "height": 3}],
        "size": "1024x1024",
    }
    assert result.usage == {"images": 1}
    assert result.model == "dall-e-3"


def test_image_generation_of_several_images(server: ScriptedServer) -> None:
    encoded = base64.b64encode(png()).decode()
    server.reply({"data": [{"b64_json": encoded}, {"b64_json": encoded}]})
    result = adapter(server).run(
        request("image-generate", input="a fox", options={"n": 2, "size": "256x256"})
    )
    assert server.requests[0].json["n"] == 2
    assert server.requests[0].json["size"] == "256x256"
    assert [artifact.name for artifact in result.artifacts] == ["image-1.png", "image-2.png"]
    assert result.usage == {"images": 2}


@pytest.mark.parametrize("options", [{"size": "big"}, {"size": "x1024"}, {"n": 5}, {"n": 0}])
def test_image_generation_options_are_checked(server: ScriptedServer, options: dict[str, Any]) -> None:
    assert type(fail(server, request("image-generate", options=options))) is InvalidInputError
    assert server.requests == []


@pytest.mark.parametrize(
    "item", [{"b64_json": "%%% not base64"}, {"url": "https://x"}, {"b64_json": "aGVsbG8="}]
)
def test_image_generation_answer_without_image_data_is_transient(server: ScriptedServer, item: Any) -> None:
    server.reply({"data": [item]})
    assert type(fail(server, request("image-generate"))) is TransientProviderError


def test_image_caption_sends_the_image_as_a_data_url(server: ScriptedServer) -> None:
    image = png()
    server.reply(chat_answer("A dark blue square."))
    result = adapter(server).run(
        ProviderRequest(job_id="job-1", kind="image-caption", input_bytes=image, options={"detail": "low"})
    )
    [sent] = server.requests
    assert sent.path == "/v1/chat/completions"
    assert sent.json == {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": SYSTEM_PROMPTS["image-caption"]},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Write a caption for this image."},
                    {
                        "type": "image_url",
                        "image_url": {
                            "url": "data:image/png;base64," + base64.b64encode(image).decode(),
                            "detail": "low",
                        },
                    },
                ],
            },
        ],
        "max_tokens": 100,
    }
    assert result.output == {"caption": "A dark blue square.", "truncated": False}
    assert result.usage["total_tokens"] == 40


@pytest.mark.parametrize(
    ("image", "options", "error_type"),
    [
        (None, {}, InvalidInputError),
        (b"plain text, not an image", {}, InvalidInputError),
        (b"\xff\xd8\xff" + b"\0" * (20 * 1024 * 1024), {}, InputTooLargeError),
        (png(), {"detail": "ultra"}, InvalidInputError),
    ],
)
def test_image_caption_input_is_checked(
    server: ScriptedServer, image: bytes | None, options: dict[str, Any], error_type: type[ProviderError]
) -> None:
    req = ProviderRequest(job_id="job-1", kind="image-caption", input_bytes=image, options=options)
    assert type(fail(server, req)) is error_type
    assert server.requests == []


@pytest.mark.parametrize("kind", ["tts-generate", "video-generate", "nope"])
def test_kinds_it_does_not_do_are_invalid_input(server: ScriptedServer, kind: str) -> None:
    assert type(fail(server, request(kind))) is InvalidInputError


def test_a_refusal_or_content_filter_is_final(server: ScriptedServer) -> None:
    server.reply(chat_answer(None, finish_reason="content_filter"))
    assert type(fail(server)) is InvalidInputError
    refusal = chat_answer(None)
    refusal["choices"][0]["message"]["refusal"] = "I can't help with that."
    server.reply(refusal)
    assert type(fail(server)) is InvalidInputError


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


@pytest.mark.parametrize("chosen", [None, "gpt-9"])
def test_404_model_not_found_is_an_unavailable_model_not_a_configuration_error(
    server: ScriptedServer, chosen: str | None
) -> None:
    # The model is gone (or this account may not use it): the job fails, nobody's consumer pauses.
    # A job's own model is allow-listed at submit, so its 404 means the same.
    server.reply(
        error_body("The model `gpt-9` does not exist or you do not have access to it.", "model_not_found"),
        status=404,
    )
    error = fail(server, request(model=chosen))
    assert type(error) is ModelUnavailableError
    assert (error.error_class, error.retryable, error.reason) == ("model_unavailable", False, "not_found")
    assert error.status == 404


def test_404_for_a_model_the_job_chose_is_the_jobs_fault(server: ScriptedServer) -> None:
    # Ollama's shape; pausing the consumer for one user's typo would stop everyone's jobs.
    server.reply({"error": 'model "llama9" not found, try pulling it first'}, status=404)
    assert type(fail(server, request(model="llama9"))) is InvalidInputError


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"<html>Welcome to the hotel wifi</html>",
        b"\xff\xfe\x00",
        b"[]",
        json.dumps({"choices": []}).encode(),
        json.dumps(chat_answer(None)).encode(),
    ],
)
def test_an_unusable_200_answer_is_transient(server: ScriptedServer, body: bytes) -> None:
    server.reply(body)
    error = fail(server)
    assert type(error) is TransientProviderError
    assert error.retryable


def test_a_slow_answer_hits_the_read_timeout(server: ScriptedServer) -> None:
    server.reply(chat_answer("too late"), delay=1.0)
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
        provider.run(request())
    assert "connect failed" in str(caught.value)


def test_error_messages_are_short_and_do_not_echo_the_input(server: ScriptedServer) -> None:
    secret_input = "PRIVATE-" + "x" * 5000
    server.reply(error_body(f"Invalid value for 'content': {secret_input}", "invalid_value"), status=400)
    error = fail(server, request(input=secret_input))
    assert len(str(error)) < 300
    assert "x" * 200 not in str(error)


def test_bad_constructor_arguments() -> None:
    with pytest.raises(ValueError, match="base_url"):
        OpenAIProvider(api_key=lambda: KEY, base_url="ftp://example.com")
    with pytest.raises(ValueError, match="timeouts"):
        OpenAIProvider(api_key=lambda: KEY, read_timeout=0)


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


def test_http_error_carries_the_model_of_a_model_not_found() -> None:
    body = json.dumps(error_body("The model `gpt-9` does not exist", "model_not_found"))
    error = http_error(404, body, provider="openai", model="gpt-9")
    assert isinstance(error, ModelUnavailableError)
    assert error.model == "gpt-9"
    # Without the code a 404 is still the configuration's (a wrong base URL): paused, alerted.
    assert type(http_error(404, json.dumps(error_body("no such route")), model="gpt-9")) is ProviderAuthError


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
