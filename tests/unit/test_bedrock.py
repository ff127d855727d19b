"""The `bedrock` adapter against a stubbed bedrock-runtime client: exact requests, real answers.

Each capability is driven through its typed request (aijobs.providers.base); the Stubber checks
the exact parameters of every call, and `sent` records every call the adapter attempted, so a
request refused "before calling" is seen to send nothing.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import (
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)
from botocore.response import StreamingBody
from botocore.stub import Stubber

from aijobs.errors import (
    InputTooLargeError,
    InvalidInputError,
    InvalidOptionError,
    ModelUnavailableError,
    ProviderAuthError,
    ProviderError,
    ThrottledError,
    TransientProviderError,
)
from aijobs.provider_plan import PROVIDER_CAPABILITIES
from aijobs.providers.base import (
    Call,
    Embedder,
    EmbeddingRequest,
    ImageGenerator,
    ImageRequest,
    Provider,
    SpeechSynthesizer,
    TextGenerator,
    TextRequest,
    VideoGenerator,
    VideoRequest,
)
from aijobs.providers.bedrock import (
    BedrockProvider,
    client_config,
    client_request_token,
    family,
    image_format,
)
from aijobs.providers.failures import TimeoutProviderError
from aijobs.providers.local import LocalProvider
from aijobs.providers.openai import OpenAIProvider
from aijobs.providers.polly import PollyProvider

BUCKET = "aijobs-dev-stage"
JOB = "01JDXK5Q7R8S9T0V1W2X3Y4Z5A"
TEXT_MODEL = "us.amazon.nova-lite-v1:0"
EMBED_MODEL = "amazon.titan-embed-text-v2:0"
IMAGE_MODEL = "stability.stable-image-core-v1:1"
VIDEO_MODEL = "luma.ray-v2:0"
INVOCATION = "arn:aws:bedrock:us-east-1:123456789012:async-invoke/abcdef012345"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 32
DOC = "Solar panels convert sunlight into electricity. They lower bills and need little maintenance."
SYSTEM = "Summarize the text in two sentences."
# What a pydantic output model's `model_json_schema()` looks like (aijobs.kinds.classify).
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


@pytest.fixture
def client() -> Any:
    return boto3.client("bedrock-runtime", region_name="us-east-1", config=client_config())


@pytest.fixture
def sent(client: Any) -> list[str]:
    """The operations the adapter called, in order (recorded before the Stubber answers)."""
    operations: list[str] = []

    def record(model: Any, **_: Any) -> None:
        operations.append(model.name)

    client.meta.events.register("provide-client-params.bedrock-runtime", record)
    return operations


@pytest.fixture
def stub(client: Any, sent: list[str]) -> Iterator[Stubber]:
    with Stubber(client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


@pytest.fixture
def provider(client: Any) -> BedrockProvider:
    return BedrockProvider(bucket=BUCKET, client=client)


def call(model: str, **fields: Any) -> Call:
    return Call(job_id=JOB, model=model, **fields)


def text_request(prompt: str = DOC, *, model: str = TEXT_MODEL, **fields: Any) -> TextRequest:
    fields.setdefault("system", SYSTEM)
    fields.setdefault("max_tokens", 300)
    return TextRequest(call=call(model), prompt=prompt, **fields)


def video_request(prompt: str = "a drone flight over a forest", **fields: Any) -> VideoRequest:
    call_fields = {
        name: fields.pop(name) for name in ("step", "attempt", "checks", "handle", "reruns") if name in fields
    }
    model = fields.pop("model", VIDEO_MODEL)
    return VideoRequest(call=call(model, **call_fields), prompt=prompt, **fields)


def converse_answer(
    text: str, *, stop: str = "end_turn", tokens: tuple[int, int] = (120, 30)
) -> dict[str, Any]:
    """A Converse response as documented (output.message, stopReason, usage, metrics)."""
    return converse_blocks([{"text": text}], stop=stop, tokens=tokens)


def converse_blocks(
    content: list[dict[str, Any]], *, stop: str = "end_turn", tokens: tuple[int, int] = (120, 30)
) -> dict[str, Any]:
    """A Converse response whose assistant message has these content blocks."""
    return {
        "output": {"message": {"role": "assistant", "content": content}},
        "stopReason": stop,
        "usage": {"inputTokens": tokens[0], "outputTokens": tokens[1], "totalTokens": sum(tokens)},
        "metrics": {"latencyMs": 412},
    }


def converse_params(
    content: list[dict[str, Any]],
    *,
    model: str = TEXT_MODEL,
    system: str | None = SYSTEM,
    inference: dict[str, Any] | None = None,
    tool_config: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The exact Converse parameters the adapter must send."""
    params: dict[str, Any] = {
        "modelId": model,
        "messages": [{"role": "user", "content": content}],
        "inferenceConfig": inference or {"maxTokens": 300},
    }
    if system is not None:
        params["system"] = [{"text": system}]
    if tool_config is not None:
        params["toolConfig"] = tool_config
    return params


def invoke_answer(document: Any) -> dict[str, Any]:
    raw = document if isinstance(document, bytes) else json.dumps(document).encode()
    return {"body": StreamingBody(io.BytesIO(raw), len(raw)), "contentType": "application/json"}


def body_of(expected: dict[str, Any]) -> Any:
    """A matcher for InvokeModel's JSON `body` that compares the parsed document."""

    class _Json:
        def __eq__(self, other: object) -> bool:
            return isinstance(other, bytes | str) and json.loads(other) == expected

        def __repr__(self) -> str:
            return f"json {expected!r}"

    return _Json()


def invoke_params(model: str, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "modelId": model,
        "body": body_of(body),
        "contentType": "application/json",
        "accept": "application/json",
    }


def async_status(status: str, **extra: Any) -> dict[str, Any]:
    """A GetAsyncInvoke response as documented."""
    return {
        "invocationArn": INVOCATION,
        "modelArn": "arn:aws:bedrock:us-east-1::foundation-model/luma.ray-v2:0",
        "clientRequestToken": "aijobs-token",
        "status": status,
        "submitTime": datetime(2026, 11, 29, 12, 0, tzinfo=UTC),
        "outputDataConfig": {
            "s3OutputDataConfig": {"s3Uri": f"s3://{BUCKET}/results/{JOB}/main/abcdef012345"}
        },
        **extra,
    }


def raise_on_send(client: Any, operation: str, error: Exception) -> None:
    def handler(**_: Any) -> None:
        raise error

    client.meta.events.register(f"before-send.bedrock-runtime.{operation}", handler)


# --- the port -----------------------------------------------------------------------------------


_PORTS: dict[str, type[Any]] = {
    "text": TextGenerator,
    "embedding": Embedder,
    "image": ImageGenerator,
    "speech": SpeechSynthesizer,
    "video": VideoGenerator,
}


@pytest.mark.parametrize(
    "make",
    [
        lambda: BedrockProvider(bucket=BUCKET),
        lambda: OpenAIProvider(api_key=lambda: None),
        lambda: PollyProvider(bucket=BUCKET),
        lambda: LocalProvider(),
    ],
    ids=["bedrock", "openai", "polly", "local"],
)
def test_capabilities_are_the_provider_plans_and_the_ports_it_implements(make: Any) -> None:
    adapter: Provider = make()
    # Synth plans kinds onto providers from PROVIDER_CAPABILITIES: it must say what the adapter does.
    assert adapter.capabilities == PROVIDER_CAPABILITIES[adapter.name]
    implemented = {name for name, port in _PORTS.items() if isinstance(adapter, port)}
    assert implemented == set(adapter.capabilities)


def test_client_config_leaves_retries_to_the_queue() -> None:
    config: Any = client_config()
    assert config.retries == {"max_attempts": 1, "mode": "standard"}
    assert (config.connect_timeout, config.read_timeout) == (5, 50)
    custom: Any = client_config(connect_timeout=2, read_timeout=9)
    assert (custom.connect_timeout, custom.read_timeout) == (2, 9)


def test_no_client_is_created_until_first_use_and_then_once(monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[tuple[str, dict[str, Any]]] = []
    client = boto3.client("bedrock-runtime", region_name="eu-west-1", config=client_config())
    config = client_config(read_timeout=12)

    def fake_client(name: str, **kwargs: Any) -> Any:
        created.append((name, kwargs))
        return client

    monkeypatch.setattr(boto3, "client", fake_client)
    provider = BedrockProvider(bucket=BUCKET, region_name="eu-west-1", config=config)
    assert created == []
    with Stubber(client) as stub:
        stub.add_response("converse", converse_answer("one"))
        stub.add_response("converse", converse_answer("two"))
        assert provider.generate_text(text_request()).text == "one"
        assert provider.generate_text(text_request()).text == "two"
    assert created == [("bedrock-runtime", {"region_name": "eu-west-1", "config": config})]


def test_a_bucket_is_required() -> None:
    with pytest.raises(ValueError, match="bucket"):
        BedrockProvider(bucket="")


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("us.amazon.nova-lite-v1:0", "converse"),
        ("global.anthropic.claude-sonnet-4-5-20250929-v1:0", "converse"),
        ("amazon.titan-embed-text-v2:0", "titan-embed-v2"),
        ("amazon.titan-embed-text-v1", "converse"),  # V1 takes another body: not an embedding family
        ("stability.stable-image-core-v1:1", "stability"),
        ("us.stability.sd3-5-large-v1:0", "stability"),
        ("luma.ray-v2:0", "luma-ray"),
        ("us.luma.ray-v2:0", "luma-ray"),
        ("amazon.nova-reel-v1:0", "converse"),
    ],
)
def test_family_of_a_model_id(model: str, name: str) -> None:
    assert family(model) == name


# --- text: Converse -----------------------------------------------------------------------------


def test_text_sends_the_system_text_the_user_turn_and_max_tokens(
    provider: BedrockProvider, stub: Stubber
) -> None:
    stub.add_response(
        "converse",
        converse_answer("Solar panels make power cheaply."),
        converse_params([{"text": DOC}]),
    )
    result = provider.generate_text(text_request())
    assert result.text == "Solar panels make power cheaply."
    assert result.data is None
    assert result.truncated is False
    assert result.model == TEXT_MODEL
    assert result.usage == {"inputTokens": 120, "outputTokens": 30}
    assert result.cost is None  # priced from usage


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_temperature_is_sent_when_given_even_zero(
    provider: BedrockProvider, stub: Stubber, temperature: float
) -> None:
    stub.add_response(
        "converse",
        converse_answer("ok"),
        converse_params([{"text": DOC}], inference={"maxTokens": 300, "temperature": temperature}),
    )
    assert provider.generate_text(text_request(temperature=temperature)).text == "ok"


def test_without_a_system_text_no_system_block_is_sent(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_response("converse", converse_answer("ok"), converse_params([{"text": DOC}], system=None))
    assert provider.generate_text(text_request(system=None)).text == "ok"


def test_max_tokens_is_capped_at_the_models_limit(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_response(
        "converse", converse_answer("ok"), converse_params([{"text": DOC}], inference={"maxTokens": 10_000})
    )
    provider.generate_text(text_request(max_tokens=20_000))


def test_an_answer_cut_at_max_tokens_is_truncated(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_response("converse", converse_answer("Solar panels", stop="max_tokens"))
    assert provider.generate_text(text_request()).truncated is True


def test_text_blocks_are_joined_and_stripped(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_response("converse", converse_blocks([{"text": "  Solar "}, {"text": "power.\n"}]))
    assert provider.generate_text(text_request()).text == "Solar power."


@pytest.mark.parametrize("content", [[], [{"text": "   "}]])
def test_an_answer_without_text_is_transient(
    provider: BedrockProvider, stub: Stubber, content: list[dict[str, Any]]
) -> None:
    stub.add_response("converse", converse_blocks(content))
    with pytest.raises(TransientProviderError):
        provider.generate_text(text_request())


@pytest.mark.parametrize("stop", ["content_filtered", "guardrail_intervened"])
def test_a_filtered_answer_is_the_inputs_fault(provider: BedrockProvider, stub: Stubber, stop: str) -> None:
    stub.add_response("converse", converse_answer("blocked", stop=stop))
    with pytest.raises(InvalidInputError) as raised:
        provider.generate_text(text_request())
    assert type(raised.value) is InvalidInputError
    assert DOC not in str(raised.value)


def test_inference_profile_ids_are_sent_unchanged(provider: BedrockProvider, stub: Stubber) -> None:
    model = "eu.anthropic.claude-3-haiku-20240307-v1:0"
    stub.add_response("converse", converse_answer("ok"), converse_params([{"text": DOC}], model=model))
    assert provider.generate_text(text_request(model=model)).model == model


def test_images_come_first_in_the_user_turn(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_response(
        "converse",
        converse_answer("A red square on white."),
        converse_params(
            [
                {"image": {"format": "png", "source": {"bytes": PNG}}},
                {"image": {"format": "jpeg", "source": {"bytes": JPEG}}},
                {"text": "Describe these images."},
            ]
        ),
    )
    result = provider.generate_text(text_request("Describe these images.", images=(PNG, JPEG)))
    assert result.text == "A red square on white."


def test_an_image_without_a_prompt_is_sent_alone(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_response(
        "converse",
        converse_answer("A red square."),
        converse_params([{"image": {"format": "png", "source": {"bytes": PNG}}}]),
    )
    assert provider.generate_text(text_request("  ", images=(PNG,))).text == "A red square."


@pytest.mark.parametrize(
    ("data", "name"),
    [
        (PNG, "png"),
        (b"\xff\xd8\xff\xe0rest", "jpeg"),
        (b"GIF89a...", "gif"),
        (b"GIF87a...", "gif"),
        (b"RIFF\x10\x00\x00\x00WEBPVP8 ", "webp"),
    ],
)
def test_image_format_from_magic_bytes(data: bytes, name: str) -> None:
    assert image_format(data) == name


@pytest.mark.parametrize(
    ("prompt", "images", "error"),
    [
        ("Describe it.", (b"BM not an image we take",), InvalidInputError),
        ("Describe it.", (b"RIFF\x10\x00\x00\x00AVI LIST",), InvalidInputError),
        ("Describe it.", (PNG, PNG + b"\x00" * 3_932_160), InputTooLargeError),
        ("   ", (), InvalidInputError),
    ],
)
def test_unusable_images_and_empty_turns_are_refused_before_calling(
    provider: BedrockProvider,
    stub: Stubber,
    sent: list[str],
    prompt: str,
    images: tuple[bytes, ...],
    error: type[ProviderError],
) -> None:
    with pytest.raises(ProviderError) as raised:
        provider.generate_text(text_request(prompt, images=images))
    assert sent == []
    assert type(raised.value) is error


# --- text: structured output as a forced tool call ----------------------------------------------


def tool_config(name: str = "classify") -> dict[str, Any]:
    return {
        "tools": [
            {
                "toolSpec": {
                    "name": name,
                    "description": "Give the answer as this tool's input.",
                    "inputSchema": {"json": SCHEMA},
                }
            }
        ],
        "toolChoice": {"tool": {"name": name}},
    }


def tool_use(data: dict[str, Any], name: str = "classify") -> dict[str, Any]:
    return {"toolUse": {"toolUseId": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "name": name, "input": data}}


def structured_request(**fields: Any) -> TextRequest:
    return text_request(
        "The export failed again.",
        model="us.amazon.nova-micro-v1:0",
        system="Classify the text.",
        max_tokens=200,
        output_schema=SCHEMA,
        output_name="classify",
        **fields,
    )


def test_structured_output_forces_a_tool_call_whose_input_is_the_answer(
    provider: BedrockProvider, stub: Stubber
) -> None:
    answer = {"label": "negative", "score": 0.91, "tags": ["export"]}
    stub.add_response(
        "converse",
        converse_blocks([tool_use(answer)], stop="tool_use"),
        converse_params(
            [{"text": "The export failed again."}],
            model="us.amazon.nova-micro-v1:0",
            system="Classify the text.",
            inference={"maxTokens": 200, "temperature": 0.0},
            tool_config=tool_config(),
        ),
    )
    result = provider.generate_text(structured_request(temperature=0.0))
    assert result.data == answer
    assert json.loads(result.text) == answer
    assert result.truncated is False
    assert result.usage == {"inputTokens": 120, "outputTokens": 30}


def test_structured_output_reads_the_tool_block_of_its_own_name(
    provider: BedrockProvider, stub: Stubber
) -> None:
    answer = {"label": "question", "score": 0.6}
    stub.add_response(
        "converse",
        converse_blocks(
            [{"text": "Let me classify that."}, tool_use({"label": "wrong"}, name="other"), tool_use(answer)],
            stop="tool_use",
        ),
    )
    assert provider.generate_text(structured_request()).data == answer


def test_structured_output_without_a_tool_block_falls_back_to_the_text(
    provider: BedrockProvider, stub: Stubber
) -> None:
    # No tool call: the kind validates the text as JSON itself.
    stub.add_response("converse", converse_answer(' {"label": "neutral", "score": 0.5} ', stop="end_turn"))
    result = provider.generate_text(structured_request())
    assert result.data is None
    assert result.text == '{"label": "neutral", "score": 0.5}'


def test_a_structured_answer_cut_at_max_tokens_is_truncated(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_response("converse", converse_blocks([tool_use({"label": "neutral"})], stop="max_tokens"))
    result = provider.generate_text(structured_request())
    assert (result.data, result.truncated) == ({"label": "neutral"}, True)


# --- embedding: Titan Text Embeddings V2 --------------------------------------------------------


def embed_request(*texts: str, model: str = EMBED_MODEL, **fields: Any) -> EmbeddingRequest:
    return EmbeddingRequest(call=call(model), texts=texts or (DOC,), **fields)


def test_embedding_of_one_text(provider: BedrockProvider, stub: Stubber) -> None:
    vector = [0.25] * 256
    stub.add_response(
        "invoke_model",
        invoke_answer(
            {"embedding": vector, "inputTextTokenCount": 17, "embeddingsByType": {"float": vector}}
        ),
        invoke_params(EMBED_MODEL, {"inputText": DOC, "dimensions": 256, "normalize": True}),
    )
    result = provider.embed(embed_request(dimensions=256))
    assert result.vectors == (tuple(vector),)
    assert result.dimensions == 256
    assert result.model == EMBED_MODEL
    assert result.usage == {"inputTokens": 17, "texts": 1}


def test_embedding_defaults_to_1024_normalized(provider: BedrockProvider, stub: Stubber) -> None:
    vector = [0.5] * 1024
    stub.add_response(
        "invoke_model",
        invoke_answer({"embedding": vector, "inputTextTokenCount": 3}),
        invoke_params(EMBED_MODEL, {"inputText": "hello", "dimensions": 1024, "normalize": True}),
    )
    assert provider.embed(embed_request("hello")).dimensions == 1024


def test_embedding_of_a_batch_is_one_call_per_text(provider: BedrockProvider, stub: Stubber) -> None:
    texts = ("first text", "second text", "third text")
    for index, text in enumerate(texts):
        vector = [float(index)] * 512
        stub.add_response(
            "invoke_model",
            invoke_answer({"embedding": vector, "inputTextTokenCount": 2}),
            invoke_params(EMBED_MODEL, {"inputText": text, "dimensions": 512, "normalize": False}),
        )
    result = provider.embed(embed_request(*texts, dimensions=512, normalize=False))
    assert [vector[0] for vector in result.vectors] == [0.0, 1.0, 2.0]
    assert result.usage == {"inputTokens": 6, "texts": 3}


@pytest.mark.parametrize(
    ("texts", "dimensions", "error"),
    [
        ((DOC,), 128, InvalidOptionError),
        ((DOC,), 1536, InvalidOptionError),
        (("   ",), None, InvalidInputError),
        (("x",) * 101, None, InputTooLargeError),
        (("y" * 50_001,), None, InputTooLargeError),
    ],
)
def test_embedding_refuses_bad_input_before_calling(
    provider: BedrockProvider,
    stub: Stubber,
    sent: list[str],
    texts: tuple[str, ...],
    dimensions: int | None,
    error: type[ProviderError],
) -> None:
    with pytest.raises(ProviderError) as raised:
        provider.embed(embed_request(*texts, dimensions=dimensions))
    assert sent == []
    assert type(raised.value) is error


@pytest.mark.parametrize(
    "document",
    [{"embedding": [0.1] * 255, "inputTextTokenCount": 1}, {"inputTextTokenCount": 1}, {"embedding": "x"}],
)
def test_an_embedding_of_the_wrong_shape_is_transient(
    provider: BedrockProvider, stub: Stubber, document: dict[str, Any]
) -> None:
    stub.add_response("invoke_model", invoke_answer(document))
    with pytest.raises(TransientProviderError):
        provider.embed(embed_request(dimensions=256))


@pytest.mark.parametrize("raw", [b"not json", b"[1, 2]"])
def test_an_invoke_body_that_is_not_a_json_object_is_transient(
    provider: BedrockProvider, stub: Stubber, raw: bytes
) -> None:
    stub.add_response("invoke_model", invoke_answer(raw))
    with pytest.raises(TransientProviderError) as raised:
        provider.embed(embed_request())
    assert type(raised.value) is TransientProviderError


def test_a_body_that_times_out_while_read_is_a_timeout(provider: BedrockProvider, stub: Stubber) -> None:
    class _SlowBody:
        def read(self) -> bytes:
            raise ReadTimeoutError(endpoint_url="https://bedrock-runtime.us-east-1.amazonaws.com")

    stub.add_response("invoke_model", {"body": _SlowBody(), "contentType": "application/json"})
    with pytest.raises(TimeoutProviderError):
        provider.embed(embed_request())


def test_a_failure_mid_batch_fails_the_job(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_response("invoke_model", invoke_answer({"embedding": [0.0] * 1024, "inputTextTokenCount": 1}))
    stub.add_client_error("invoke_model", "ThrottlingException", "Too many requests", 429)
    with pytest.raises(ThrottledError):
        provider.embed(embed_request("a", "b"))


# --- image: Stability AI ------------------------------------------------------------------------


def image_request(prompt: str = "a red bicycle", *, model: str = IMAGE_MODEL, **fields: Any) -> ImageRequest:
    return ImageRequest(call=call(model), prompt=prompt, **fields)


def stability_answer(*images: bytes, reasons: list[str | None] | None = None) -> dict[str, Any]:
    """A Stability AI text-to-image answer as Bedrock documents it."""
    return invoke_answer(
        {
            "seeds": [1234] * len(images),
            "finish_reasons": reasons if reasons is not None else [None] * len(images),
            "images": [base64.b64encode(image).decode() for image in images],
        }
    )


def test_image_request_body_and_its_png_artifact(provider: BedrockProvider, stub: Stubber) -> None:
    image = PNG + b"one"
    stub.add_response(
        "invoke_model",
        stability_answer(image),
        invoke_params(
            IMAGE_MODEL, {"prompt": "a red bicycle", "aspect_ratio": "16:9", "output_format": "png"}
        ),
    )
    result = provider.generate_image(image_request(aspect_ratio="16:9"))
    [artifact] = result.images
    assert (artifact.name, artifact.content_type, artifact.data) == ("image.png", "image/png", image)
    assert result.model == IMAGE_MODEL
    assert result.usage == {"images": 1}


def test_several_images_are_one_call_each_with_the_next_seed(
    provider: BedrockProvider, stub: Stubber
) -> None:
    images = [PNG + b"one", PNG + b"two", PNG + b"three"]
    for index, image in enumerate(images):
        stub.add_response(
            "invoke_model",
            stability_answer(image),
            invoke_params(
                IMAGE_MODEL,
                {
                    "prompt": "a red bicycle",
                    "aspect_ratio": "1:1",
                    "output_format": "png",
                    "seed": 41 + index,
                    "negative_prompt": "blurry",
                },
            ),
        )
    result = provider.generate_image(image_request(count=3, seed=41, negative_prompt="blurry"))
    assert [artifact.data for artifact in result.images] == images
    assert [artifact.name for artifact in result.images] == ["image-1.png", "image-2.png", "image-3.png"]
    assert result.usage == {"images": 3}


def test_the_seed_wraps_at_stabilitys_maximum(provider: BedrockProvider, stub: Stubber) -> None:
    for seed in (4_294_967_294, 0):
        stub.add_response(
            "invoke_model",
            stability_answer(PNG),
            invoke_params(
                IMAGE_MODEL, {"prompt": "waves", "aspect_ratio": "1:1", "output_format": "png", "seed": seed}
            ),
        )
    assert len(provider.generate_image(image_request("waves", count=2, seed=4_294_967_294)).images) == 2


def test_a_refused_image_is_the_prompts_fault(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_response("invoke_model", stability_answer(reasons=["Filter reason: prompt"]))
    with pytest.raises(InvalidInputError) as raised:
        provider.generate_image(image_request())
    assert type(raised.value) is InvalidInputError
    assert "Filter reason: prompt" in str(raised.value)


def test_a_blocked_image_among_several_keeps_the_others_and_reports_the_block(
    provider: BedrockProvider, stub: Stubber
) -> None:
    # The images made before and after the blocked one were paid for: they are the job's result.
    first, third = PNG + b"one", PNG + b"three"
    stub.add_response("invoke_model", stability_answer(first))
    stub.add_response("invoke_model", stability_answer(PNG, reasons=["Filter reason: output image"]))
    stub.add_response("invoke_model", stability_answer(third))
    result = provider.generate_image(image_request(count=3))
    assert [artifact.data for artifact in result.images] == [first, third]
    assert [artifact.name for artifact in result.images] == ["image-1.png", "image-2.png"]
    assert (result.blocked, result.blocked_reason) == (1, "Filter reason: output image")
    assert result.usage == {"images": 2}


def test_a_prompt_refused_after_an_image_keeps_it_and_stops_calling(
    provider: BedrockProvider, stub: Stubber, sent: list[str]
) -> None:
    # A refused prompt is refused on every later call too: no more paid calls, the survivor kept.
    stub.add_response("invoke_model", stability_answer(PNG))
    stub.add_response("invoke_model", stability_answer(reasons=["Filter reason: prompt"]))
    result = provider.generate_image(image_request(count=4))
    assert [artifact.data for artifact in result.images] == [PNG]
    assert (result.blocked, result.blocked_reason) == (3, "Filter reason: prompt")
    assert sent == ["InvokeModel", "InvokeModel"]


def test_every_image_blocked_is_the_prompts_fault(provider: BedrockProvider, stub: Stubber) -> None:
    for _ in range(2):
        stub.add_response("invoke_model", stability_answer(reasons=["Filter reason: output image"]))
    with pytest.raises(InvalidInputError) as raised:
        provider.generate_image(image_request(count=2))
    assert "Filter reason: output image" in str(raised.value)


def test_an_inference_error_is_transient(provider: BedrockProvider, stub: Stubber) -> None:
    # Not a filter: the model failed, and a later attempt may well succeed.
    stub.add_response("invoke_model", stability_answer(reasons=["Inference error"]))
    with pytest.raises(TransientProviderError):
        provider.generate_image(image_request())


@pytest.mark.parametrize(
    ("request_fields", "error"),
    [
        ({"aspect_ratio": "4:3"}, InvalidOptionError),
        ({"aspect_ratio": "wide"}, InvalidOptionError),
        ({"prompt": "   "}, InvalidInputError),
        ({"prompt": "z" * 10_001}, InputTooLargeError),
    ],
)
def test_image_requests_are_checked_before_calling(
    provider: BedrockProvider,
    stub: Stubber,
    sent: list[str],
    request_fields: dict[str, Any],
    error: type[ProviderError],
) -> None:
    with pytest.raises(ProviderError) as raised:
        provider.generate_image(image_request(**request_fields))
    assert sent == []
    assert type(raised.value) is error


@pytest.mark.parametrize(
    "document",
    [{"images": [], "finish_reasons": []}, {"finish_reasons": [None]}, {"images": ["%%% not b64"]}],
)
def test_an_answer_without_a_usable_image_is_transient(
    provider: BedrockProvider, stub: Stubber, document: dict[str, Any]
) -> None:
    stub.add_response("invoke_model", invoke_answer(document))
    with pytest.raises(TransientProviderError):
        provider.generate_image(image_request())


# --- video: Luma Ray 2 (asynchronous) -----------------------------------------------------------


def start_params(
    token: str,
    prompt: str = "a drone flight over a forest",
    step: str = "main",
    **model_input: Any,
) -> dict[str, Any]:
    return {
        "modelId": VIDEO_MODEL,
        "modelInput": {
            "prompt": prompt,
            "aspect_ratio": "16:9",
            "loop": False,
            "duration": "5s",
            "resolution": "720p",
            **model_input,
        },
        "outputDataConfig": {"s3OutputDataConfig": {"s3Uri": f"s3://{BUCKET}/results/{JOB}/{step}/"}},
        "clientRequestToken": token,
    }


def test_video_start_sends_the_luma_body_into_the_result_prefix(
    provider: BedrockProvider, stub: Stubber
) -> None:
    first = video_request()
    stub.add_response(
        "start_async_invoke", {"invocationArn": INVOCATION}, start_params(client_request_token(first.call))
    )
    result = provider.start_video(first)
    assert (result.status, result.handle, result.model) == ("running", INVOCATION, VIDEO_MODEL)


def test_video_options_are_sent(provider: BedrockProvider, stub: Stubber) -> None:
    request = video_request(
        "waves", step="intro", duration_seconds=9, resolution="540p", aspect_ratio="9:16", loop=True
    )
    stub.add_response(
        "start_async_invoke",
        {"invocationArn": INVOCATION},
        start_params(
            client_request_token(request.call),
            prompt="waves",
            step="intro",
            duration="9s",
            resolution="540p",
            aspect_ratio="9:16",
            loop=True,
        ),
    )
    assert provider.start_video(request).status == "running"


def test_a_retry_of_the_same_step_sends_the_same_token(provider: BedrockProvider, stub: Stubber) -> None:
    # A second attempt of the same job step (the first answer was lost) sends the same token, so
    # Bedrock answers with the invocation already started instead of billing a second video.
    token = client_request_token(call(VIDEO_MODEL))
    stub.add_response("start_async_invoke", {"invocationArn": INVOCATION}, start_params(token))
    stub.add_response("start_async_invoke", {"invocationArn": INVOCATION}, start_params(token))
    assert provider.start_video(video_request()).handle == INVOCATION
    assert provider.start_video(video_request(attempt=2)).handle == INVOCATION


def test_client_request_token_is_per_step_rerun_and_model() -> None:
    base = client_request_token(call(VIDEO_MODEL))
    assert base == client_request_token(call(VIDEO_MODEL, attempt=3, checks=2))
    assert base != client_request_token(call(VIDEO_MODEL, step="intro"))
    assert base != client_request_token(call(VIDEO_MODEL, reruns=1))
    assert client_request_token(call(VIDEO_MODEL, reruns=1)) != client_request_token(
        call(VIDEO_MODEL, reruns=2)
    )
    assert base != client_request_token(call("us.luma.ray-v2:0"))  # a fallback model starts its own
    # After a task ended Failed the retry starts a new one: a new token (the old one would get the
    # dead invocation back), kept by that task's own retries after a lost start answer.
    after_one = client_request_token(call(VIDEO_MODEL, tasks=1))
    assert after_one not in (base, client_request_token(call(VIDEO_MODEL, tasks=2)))
    assert after_one == client_request_token(call(VIDEO_MODEL, tasks=1, attempt=4))
    assert after_one != client_request_token(call(VIDEO_MODEL, tasks=1, reruns=1))
    assert base != client_request_token(Call(job_id="other", model=VIDEO_MODEL))
    # The API takes 1-256 printable ASCII characters, whatever the step is called.
    for token in (base, client_request_token(call(VIDEO_MODEL, step="ünïcode step " * 40))):
        assert 1 <= len(token) <= 256
        assert all("!" <= char <= "~" for char in token)


@pytest.mark.parametrize(
    ("request_fields", "error"),
    [
        ({"duration_seconds": 6}, InvalidOptionError),
        ({"duration_seconds": 10}, InvalidOptionError),
        ({"resolution": "1080p"}, InvalidOptionError),
        ({"aspect_ratio": "5:4"}, InvalidOptionError),
        ({"seed": 7}, InvalidOptionError),
        ({"prompt": "  "}, InvalidInputError),
        ({"prompt": "w" * 5_001}, InputTooLargeError),
        ({"model": "amazon.nova-reel-v1:0"}, ProviderAuthError),
    ],
)
def test_video_requests_are_checked_before_calling(
    provider: BedrockProvider,
    stub: Stubber,
    sent: list[str],
    request_fields: dict[str, Any],
    error: type[ProviderError],
) -> None:
    with pytest.raises(ProviderError) as raised:
        provider.start_video(video_request(**request_fields))
    assert sent == []
    assert type(raised.value) is error


def test_video_still_in_progress_keeps_its_handle(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_response("get_async_invoke", async_status("InProgress"), {"invocationArn": INVOCATION})
    result = provider.check_video(video_request("waves", handle=INVOCATION, checks=1))
    assert (result.status, result.handle, result.model) == ("running", INVOCATION, VIDEO_MODEL)


@pytest.mark.parametrize(("seconds", "expected"), [(None, 5), (9, 9)])
def test_video_completed_points_at_the_s3_output(
    provider: BedrockProvider, stub: Stubber, seconds: int | None, expected: int
) -> None:
    end = datetime(2026, 11, 29, 12, 2, tzinfo=UTC)
    stub.add_response(
        "get_async_invoke",
        async_status("Completed", endTime=end, lastModifiedTime=end),
        {"invocationArn": INVOCATION},
    )
    result = provider.check_video(
        video_request("waves", handle=INVOCATION, checks=3, duration_seconds=seconds)
    )
    assert result.status == "succeeded"
    assert result.output == {
        "video": f"results/{JOB}/main/abcdef012345/output.mp4",
        "bucket": BUCKET,
        "durationSeconds": expected,
    }
    assert result.artifacts == ()  # never downloaded
    assert result.usage == {"videoSeconds": expected}
    assert result.model == VIDEO_MODEL


@pytest.mark.parametrize("uri", [f"s3://{BUCKET}/results/{JOB}/main/", f"s3://{BUCKET}/results/{JOB}/main"])
def test_video_completed_with_only_our_prefix_adds_the_invocation_folder(
    provider: BedrockProvider, stub: Stubber, uri: str
) -> None:
    answer = async_status("Completed", outputDataConfig={"s3OutputDataConfig": {"s3Uri": uri}})
    stub.add_response("get_async_invoke", answer, {"invocationArn": INVOCATION})
    result = provider.check_video(video_request("waves", handle=INVOCATION))
    assert result.output["video"] == f"results/{JOB}/main/abcdef012345/output.mp4"


@pytest.mark.parametrize(
    "uri",
    [
        f"s3://{BUCKET}",
        f"https://{BUCKET}.s3.amazonaws.com/results/{JOB}/main/x",
        f"s3://{BUCKET}/",
        "s3:///results/x",
    ],
)
def test_video_completed_without_a_usable_output_location_is_transient(
    provider: BedrockProvider, stub: Stubber, uri: str
) -> None:
    answer = async_status("Completed", outputDataConfig={"s3OutputDataConfig": {"s3Uri": uri}})
    stub.add_response("get_async_invoke", answer, {"invocationArn": INVOCATION})
    with pytest.raises(TransientProviderError) as raised:
        provider.check_video(video_request("waves", handle=INVOCATION))
    assert type(raised.value) is TransientProviderError


def test_video_in_an_unknown_state_is_transient(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_response("get_async_invoke", async_status("Paused"), {"invocationArn": INVOCATION})
    with pytest.raises(TransientProviderError) as raised:
        provider.check_video(video_request("waves", handle=INVOCATION))
    assert type(raised.value) is TransientProviderError


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ("ThrottlingException: rate exceeded", ThrottledError),
        ("Service quota exceeded for concurrent invocations", ThrottledError),
        ("ValidationException: the prompt violates the content policy", InvalidInputError),
        ("Access denied writing to the output bucket", ProviderAuthError),
        ("Internal server error", TransientProviderError),
        (None, TransientProviderError),
    ],
)
def test_video_failure_is_classified_by_its_message(
    provider: BedrockProvider, stub: Stubber, message: str | None, error: type[ProviderError]
) -> None:
    extra = {"failureMessage": message} if message is not None else {}
    stub.add_response("get_async_invoke", async_status("Failed", **extra), {"invocationArn": INVOCATION})
    with pytest.raises(ProviderError) as raised:
        provider.check_video(video_request("waves", handle=INVOCATION))
    assert type(raised.value) is error


@pytest.mark.parametrize(
    "handle",
    [
        None,
        "local-0123456789abcdef",
        "70b61c0f-57ce-4715-a247-cae8729dcce9",
        INVOCATION + "0",
        INVOCATION.replace("123456789012", "12345"),
    ],
)
def test_a_foreign_handle_is_refused_before_calling(
    provider: BedrockProvider, stub: Stubber, sent: list[str], handle: str | None
) -> None:
    with pytest.raises(InvalidInputError):
        provider.check_video(video_request("waves", handle=handle))
    assert sent == []


# --- model families the adapter has no request for ----------------------------------------------


@pytest.mark.parametrize(
    ("model", "send"),
    [
        ("us.amazon.nova-lite-v1:0", lambda p, m: p.embed(embed_request(model=m))),
        ("amazon.titan-embed-text-v1", lambda p, m: p.embed(embed_request(model=m))),
        ("amazon.nova-canvas-v1:0", lambda p, m: p.generate_image(image_request(model=m))),
        ("amazon.titan-embed-text-v2:0", lambda p, m: p.generate_image(image_request(model=m))),
        ("amazon.nova-reel-v1:0", lambda p, m: p.start_video(video_request(model=m))),
        ("stability.stable-image-core-v1:1", lambda p, m: p.start_video(video_request(model=m))),
    ],
)
def test_a_model_of_another_family_is_configuration(
    provider: BedrockProvider, stub: Stubber, sent: list[str], model: str, send: Any
) -> None:
    # The kind's model is set up wrong: every job would fail the same way, so the kind pauses.
    with pytest.raises(ProviderError) as raised:
        send(provider, model)
    assert sent == []
    assert type(raised.value) is ProviderAuthError


@pytest.mark.parametrize("model", [EMBED_MODEL, IMAGE_MODEL, VIDEO_MODEL, "us.luma.ray-v2:0"])
def test_text_on_a_model_of_another_family_is_configuration(
    provider: BedrockProvider, stub: Stubber, sent: list[str], model: str
) -> None:
    # Like the other capabilities: a model the adapter knows takes no Converse request is a
    # set-up error (pause the kind), not a Converse call whose ValidationException fails each job.
    with pytest.raises(ProviderError) as raised:
        provider.generate_text(text_request(model=model))
    assert sent == []
    assert type(raised.value) is ProviderAuthError


# --- the error table through the adapter --------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status", "message", "error"),
    [
        ("ThrottlingException", 429, "Too many requests, please wait before trying again.", ThrottledError),
        ("ServiceQuotaExceededException", 400, "Your request exceeded a quota.", ThrottledError),
        ("TooManyRequestsException", 429, "Too many requests", ThrottledError),
        ("ServiceUnavailableException", 503, "Service unavailable", TransientProviderError),
        ("InternalServerException", 500, "Internal server error", TransientProviderError),
        ("ModelNotReadyException", 429, "Model is not ready", TransientProviderError),
        ("ModelErrorException", 424, "The model failed to process the request", TransientProviderError),
        ("SomethingNewException", 502, "Bad gateway", TransientProviderError),
        ("ModelTimeoutException", 408, "Model has timed out in processing the request", TimeoutProviderError),
        (
            "ValidationException",
            400,
            "Malformed input request, please reformat your input",
            InvalidInputError,
        ),
        ("ValidationException", 400, "Input is too long for requested model.", InputTooLargeError),
        ("ValidationException", 400, "Too many input tokens. Max input tokens: 8192", InputTooLargeError),
        (
            "ValidationException",
            400,
            "prompt is too long: 250000 tokens > 200000 maximum",
            InputTooLargeError,
        ),
        ("ValidationException", 400, "The input exceeds the context window of the model", InputTooLargeError),
        (
            "AccessDeniedException",
            403,
            "You don't have access to the model with the specified model ID.",
            ProviderAuthError,
        ),
        (
            "UnrecognizedClientException",
            403,
            "The security token included in the request is invalid.",
            ProviderAuthError,
        ),
        (
            "ResourceNotFoundException",
            404,
            "Could not resolve the foundation model from the model identifier",
            ProviderAuthError,
        ),
        ("ValidationException", 400, "The provided model identifier is invalid.", ProviderAuthError),
        (
            "ValidationException",
            400,
            "Invocation of model ID amazon.nova-lite-v1:0 with on-demand throughput isn't supported.",
            ProviderAuthError,
        ),
    ],
)
def test_converse_errors_map_to_the_retry_table(
    provider: BedrockProvider, stub: Stubber, code: str, status: int, message: str, error: type[ProviderError]
) -> None:
    stub.add_client_error("converse", code, message, status, expected_params=converse_params([{"text": DOC}]))
    with pytest.raises(ProviderError) as raised:
        provider.generate_text(text_request())
    assert type(raised.value) is error
    assert raised.value.status == status
    assert code in str(raised.value)
    assert DOC not in str(raised.value)  # the input never lands in the row's error message
    assert SYSTEM not in str(raised.value)


@pytest.mark.parametrize(
    ("operation", "send"),
    [
        ("invoke_model", lambda p: p.embed(embed_request())),
        ("invoke_model", lambda p: p.generate_image(image_request())),
        ("start_async_invoke", lambda p: p.start_video(video_request())),
    ],
)
def test_every_call_maps_its_errors(
    provider: BedrockProvider, stub: Stubber, operation: str, send: Any
) -> None:
    stub.add_client_error(operation, "ValidationException", "Malformed input request", 400)
    with pytest.raises(ProviderError) as raised:
        send(provider)
    assert type(raised.value) is InvalidInputError


def test_throttle_honours_retry_after(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_client_error(
        "start_async_invoke",
        "ThrottlingException",
        "slow down",
        429,
        response_meta={"HTTPHeaders": {"retry-after": "17"}},
    )
    with pytest.raises(ThrottledError) as raised:
        provider.start_video(video_request("waves"))
    assert raised.value.retry_after == 17.0


def test_status_check_errors_map_too(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_client_error("get_async_invoke", "AccessDeniedException", "not allowed", 403)
    with pytest.raises(ProviderAuthError):
        provider.check_video(video_request("waves", handle=INVOCATION))


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (ReadTimeoutError(endpoint_url="https://bedrock-runtime"), TimeoutProviderError),
        (ConnectTimeoutError(endpoint_url="https://bedrock-runtime"), TimeoutProviderError),
        (EndpointConnectionError(endpoint_url="https://bedrock-runtime"), TimeoutProviderError),
        (NoCredentialsError(), ProviderAuthError),
    ],
)
def test_sdk_failures_map_to_the_retry_table(
    provider: BedrockProvider, client: Any, error: Exception, expected: type[ProviderError]
) -> None:
    raise_on_send(client, "Converse", error)
    with pytest.raises(ProviderError) as raised:
        provider.generate_text(text_request())
    assert type(raised.value) is expected
    assert DOC not in str(raised.value)


# --- a model past its end of life ------------------------------------------------------------------

END_OF_LIFE = (
    "This model version has reached the end of its life. Please refer to the AWS documentation for more "
    "details."
)
LEGACY = (
    "Access denied. This Model is marked by provider as Legacy and you have not been actively using the "
    "model in the last 30 days. Please upgrade to an active model on Amazon Bedrock"
)


def _send(provider: BedrockProvider, capability: str) -> object:
    if capability == "text":
        return provider.generate_text(text_request())
    if capability == "image":
        return provider.generate_image(image_request())
    return provider.start_video(video_request())


@pytest.mark.parametrize(
    ("capability", "operation", "message", "reason"),
    [
        ("text", "converse", END_OF_LIFE, "end_of_life"),
        ("image", "invoke_model", END_OF_LIFE, "end_of_life"),
        ("video", "start_async_invoke", END_OF_LIFE, "end_of_life"),
        ("text", "converse", LEGACY, "legacy"),
    ],
)
def test_a_retired_model_is_unavailable_not_a_credentials_error(
    provider: BedrockProvider, stub: Stubber, capability: str, operation: str, message: str, reason: str
) -> None:
    stub.add_client_error(operation, "ResourceNotFoundException", message, 404)
    with pytest.raises(ProviderError) as raised:
        _send(provider, capability)
    error = raised.value
    assert type(error) is ModelUnavailableError
    assert (error.error_class, error.retryable, error.reason, error.status) == (
        "model_unavailable", False, reason, 404,
    )  # fmt: skip
