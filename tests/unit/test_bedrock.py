"""The `bedrock` adapter against a stubbed bedrock-runtime client: exact requests, real answers."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.response import StreamingBody
from botocore.stub import ANY, Stubber

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
from aijobs.providers.bedrock import BedrockProvider, client_config, client_request_token, image_format
from aijobs.providers.failures import TimeoutProviderError

BUCKET = "aijobs-dev-stage"
JOB = "01JDXK5Q7R8S9T0V1W2X3Y4Z5A"
MODELS = {
    "summary": "us.amazon.nova-lite-v1:0",
    "classify": "us.amazon.nova-micro-v1:0",
    "image-caption": "us.amazon.nova-lite-v1:0",
    "embedding": "amazon.titan-embed-text-v2:0",
    "image-generate": "amazon.nova-canvas-v1:0",
    "video-generate": "amazon.nova-reel-v1:0",
}
INVOCATION = "arn:aws:bedrock:us-east-1:123456789012:async-invoke/abcdef012345"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32
DOC = "Solar panels convert sunlight into electricity. They lower bills and need little maintenance."


@pytest.fixture
def client() -> Any:
    return boto3.client("bedrock-runtime", region_name="us-east-1", config=client_config())


@pytest.fixture
def stub(client: Any) -> Iterator[Stubber]:
    with Stubber(client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


@pytest.fixture
def provider(client: Any) -> BedrockProvider:
    return BedrockProvider(models=MODELS, bucket=BUCKET, client=client)


def request(kind: str, input: Any = DOC, **fields: Any) -> ProviderRequest:
    return ProviderRequest(job_id=JOB, kind=kind, input=input, **fields)


def converse_answer(
    text: str, *, stop: str = "end_turn", tokens: tuple[int, int] = (120, 30)
) -> dict[str, Any]:
    """A Converse response as documented (output.message, stopReason, usage, metrics)."""
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": stop,
        "usage": {"inputTokens": tokens[0], "outputTokens": tokens[1], "totalTokens": sum(tokens)},
        "metrics": {"latencyMs": 412},
    }


def invoke_answer(document: dict[str, Any]) -> dict[str, Any]:
    raw = json.dumps(document).encode()
    return {"body": StreamingBody(io.BytesIO(raw), len(raw)), "contentType": "application/json"}


def body_of(expected: dict[str, Any]) -> Any:
    """A matcher for InvokeModel's JSON `body` that compares the parsed document."""

    class _Json:
        def __eq__(self, other: object) -> bool:
            return isinstance(other, bytes | str) and json.loads(other) == expected

        def __repr__(self) -> str:
            return f"json {expected!r}"

    return _Json()


def async_status(status: str, **extra: Any) -> dict[str, Any]:
    """A GetAsyncInvoke response as documented."""
    return {
        "invocationArn": INVOCATION,
        "modelArn": "arn:aws:bedrock:us-east-1::foundation-model/amazon.nova-reel-v1:0",
        "clientRequestToken": "aijobs-token",
        "status": status,
        "submitTime": datetime(2026, 11, 29, 12, 0, tzinfo=UTC),
        "outputDataConfig": {
            "s3OutputDataConfig": {"s3Uri": f"s3://{BUCKET}/results/{JOB}/main/abcdef012345"}
        },
        **extra,
    }


def test_satisfies_the_provider_protocol(provider: BedrockProvider) -> None:
    assert isinstance(provider.name, str)
    typed: Provider = provider
    assert typed.name == "bedrock"


def test_client_config_leaves_retries_to_the_queue() -> None:
    config: Any = client_config()
    assert config.retries == {"max_attempts": 1, "mode": "standard"}
    assert (config.connect_timeout, config.read_timeout) == (5, 50)


def test_no_client_is_created_until_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[str] = []
    monkeypatch.setattr(boto3, "client", lambda name, **_: created.append(name))
    BedrockProvider(models=MODELS, bucket=BUCKET)
    assert created == []


# --- summary and classify -----------------------------------------------------------------------


def test_summary_sends_the_system_prompt_and_bounded_options(
    provider: BedrockProvider, stub: Stubber
) -> None:
    stub.add_response(
        "converse",
        converse_answer("Solar panels make power cheaply."),
        {
            "modelId": "us.amazon.nova-lite-v1:0",
            "system": [{"text": ANY}],
            "messages": [{"role": "user", "content": [{"text": DOC}]}],
            "inferenceConfig": {"maxTokens": 300, "temperature": 0.5},
        },
    )
    result = provider.run(request("summary", options={"maxTokens": 300, "temperature": 0.5}))
    assert result.status == "succeeded"
    assert result.output == {"summary": "Solar panels make power cheaply.", "stopReason": "end_turn"}
    assert result.model == "us.amazon.nova-lite-v1:0"
    assert result.usage == {"inputTokens": 120, "outputTokens": 30}


def test_summary_defaults_and_dict_input(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_response(
        "converse",
        converse_answer("Short."),
        {
            "modelId": "us.amazon.nova-lite-v1:0",
            "system": [{"text": ANY}],
            "messages": [{"role": "user", "content": [{"text": DOC}]}],
            "inferenceConfig": {"maxTokens": 1024, "temperature": 0.2},
        },
    )
    assert provider.run(request("summary", {"text": DOC})).output["summary"] == "Short."


@pytest.mark.parametrize(
    "options",
    [{"maxTokens": 0}, {"maxTokens": 5000}, {"maxTokens": "10"}, {"temperature": 1.5}, {"temperature": True}],
)
def test_summary_refuses_bad_options_before_calling(
    provider: BedrockProvider, stub: Stubber, options: dict[str, Any]
) -> None:
    with pytest.raises(InvalidInputError):
        provider.run(request("summary", options=options))


def test_summary_refuses_empty_and_oversized_text(provider: BedrockProvider, stub: Stubber) -> None:
    with pytest.raises(InvalidInputError):
        provider.run(request("summary", "   "))
    with pytest.raises(InputTooLargeError):
        provider.run(request("summary", "x" * 200_001))


def test_a_filtered_answer_is_the_inputs_fault(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_response("converse", converse_answer("blocked", stop="content_filtered"))
    with pytest.raises(InvalidInputError):
        provider.run(request("summary"))


def test_inference_profile_ids_are_sent_unchanged(client: Any, stub: Stubber) -> None:
    provider = BedrockProvider(
        models={"summary": "eu.anthropic.claude-3-haiku-20240307-v1:0"}, bucket=BUCKET, client=client
    )
    stub.add_response(
        "converse",
        converse_answer("ok"),
        {
            "modelId": "eu.anthropic.claude-3-haiku-20240307-v1:0",
            "system": ANY,
            "messages": ANY,
            "inferenceConfig": ANY,
        },
    )
    assert provider.run(request("summary")).model == "eu.anthropic.claude-3-haiku-20240307-v1:0"


def test_a_job_may_only_pick_an_allowed_model(client: Any, stub: Stubber) -> None:
    provider = BedrockProvider(
        models=MODELS, bucket=BUCKET, client=client, allowed_models={"summary": ["us.amazon.nova-pro-v1:0"]}
    )
    stub.add_response(
        "converse",
        converse_answer("ok"),
        {"modelId": "us.amazon.nova-pro-v1:0", "system": ANY, "messages": ANY, "inferenceConfig": ANY},
    )
    assert (
        provider.run(request("summary", model="us.amazon.nova-pro-v1:0")).model == "us.amazon.nova-pro-v1:0"
    )
    # Any other model is the job's fault, never a call that could answer AccessDenied and pause.
    with pytest.raises(InvalidInputError):
        provider.run(request("summary", model="anthropic.claude-opus-4-v1:0"))


def test_a_kind_without_a_model_is_configuration(client: Any, stub: Stubber) -> None:
    provider = BedrockProvider(models={"summary": MODELS["summary"]}, bucket=BUCKET, client=client)
    with pytest.raises(ProviderAuthError):
        provider.run(request("embedding"))


def test_unknown_model_keys_fail_at_construction() -> None:
    with pytest.raises(ValueError, match="tts-generate"):
        BedrockProvider(models={"tts-generate": "x"}, bucket=BUCKET)


def test_tts_is_polly_s(provider: BedrockProvider) -> None:
    with pytest.raises(InvalidInputError, match="polly"):
        provider.run(request("tts-generate"))


def test_classify_parses_the_models_json(provider: BedrockProvider, stub: Stubber) -> None:
    answer = '```json\n{"label": "negative", "score": 0.91, "tags": ["Export", "invoices", 3]}\n```'
    stub.add_response(
        "converse",
        converse_answer(answer),
        {
            "modelId": "us.amazon.nova-micro-v1:0",
            "system": [{"text": ANY}],
            "messages": [{"role": "user", "content": [{"text": "The export failed again."}]}],
            "inferenceConfig": {"maxTokens": 200, "temperature": 0.0},
        },
    )
    result = provider.classify("The export failed again.")
    assert (result.label, result.score, result.tags) == ("negative", 0.91, ("export", "invoices"))
    assert result.model == "us.amazon.nova-micro-v1:0"


@pytest.mark.parametrize(
    "answer",
    ["I think it is positive", '{"label": "angry", "score": 0.5}', '{"label": "neutral", "score": 2}'],
)
def test_classify_answer_out_of_format_is_transient(
    provider: BedrockProvider, stub: Stubber, answer: str
) -> None:
    stub.add_response("converse", converse_answer(answer))
    with pytest.raises(TransientProviderError):
        provider.classify("hello there")


# --- image caption ------------------------------------------------------------------------------


def test_caption_sends_the_image_block(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_response(
        "converse",
        converse_answer("A red square on white."),
        {
            "modelId": "us.amazon.nova-lite-v1:0",
            "system": [{"text": ANY}],
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"image": {"format": "png", "source": {"bytes": PNG}}},
                        {"text": "Describe this image in one sentence."},
                    ],
                }
            ],
            "inferenceConfig": {"maxTokens": 200, "temperature": 0.2},
        },
    )
    result = provider.run(request("image-caption", None, input_bytes=PNG))
    assert result.output == {"caption": "A red square on white."}
    assert result.usage == {"inputTokens": 120, "outputTokens": 30}


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


def test_caption_refuses_unknown_missing_and_huge_images(provider: BedrockProvider, stub: Stubber) -> None:
    with pytest.raises(InvalidInputError):
        provider.run(request("image-caption", None, input_bytes=b"BM not an image we take"))
    with pytest.raises(InvalidInputError):
        provider.run(request("image-caption", None))
    with pytest.raises(InputTooLargeError):
        provider.run(request("image-caption", None, input_bytes=PNG + b"\x00" * 4_000_000))


# --- embedding ----------------------------------------------------------------------------------


def test_embedding_of_one_text(provider: BedrockProvider, stub: Stubber) -> None:
    vector = [0.25] * 256
    stub.add_response(
        "invoke_model",
        invoke_answer(
            {"embedding": vector, "inputTextTokenCount": 17, "embeddingsByType": {"float": vector}}
        ),
        {
            "modelId": "amazon.titan-embed-text-v2:0",
            "body": body_of({"inputText": DOC, "dimensions": 256, "normalize": True}),
            "contentType": "application/json",
            "accept": "application/json",
        },
    )
    result = provider.run(request("embedding", options={"dimensions": 256}))
    assert result.output == {"dimensions": 256, "vector": vector}
    assert result.usage == {"inputTokens": 17, "texts": 1}


def test_embedding_of_a_batch_is_one_call_per_text(provider: BedrockProvider, stub: Stubber) -> None:
    texts = ["first text", "second text", "third text"]
    for index, text in enumerate(texts):
        vector = [float(index)] * 512
        stub.add_response(
            "invoke_model",
            invoke_answer(
                {"embedding": vector, "inputTextTokenCount": 2, "embeddingsByType": {"float": vector}}
            ),
            {
                "modelId": "amazon.titan-embed-text-v2:0",
                "body": body_of({"inputText": text, "dimensions": 512, "normalize": False}),
                "contentType": "application/json",
                "accept": "application/json",
            },
        )
    result = provider.run(
        request("embedding", {"texts": texts}, options={"dimensions": 512, "normalize": False})
    )
    assert result.output["count"] == 3
    assert [vector[0] for vector in result.output["vectors"]] == [0.0, 1.0, 2.0]
    assert result.usage == {"inputTokens": 6, "texts": 3}


@pytest.mark.parametrize(
    ("input", "options", "error"),
    [
        (DOC, {"dimensions": 128}, InvalidInputError),
        (DOC, {"dimensions": True}, InvalidInputError),
        (DOC, {"normalize": "yes"}, InvalidInputError),
        ({"texts": []}, {}, InvalidInputError),
        ({"texts": ["ok", 3]}, {}, InvalidInputError),
        ({"texts": ["x"] * 101}, {}, InputTooLargeError),
        ("y" * 50_001, {}, InputTooLargeError),
    ],
)
def test_embedding_refuses_bad_input(
    provider: BedrockProvider, stub: Stubber, input: Any, options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        provider.run(request("embedding", input, options=options))


def test_a_failure_mid_batch_fails_the_job(provider: BedrockProvider, stub: Stubber) -> None:
    vector = [0.0] * 1024
    stub.add_response("invoke_model", invoke_answer({"embedding": vector, "inputTextTokenCount": 1}))
    stub.add_client_error("invoke_model", "ThrottlingException", "Too many requests", 429)
    with pytest.raises(ThrottledError):
        provider.run(request("embedding", {"texts": ["a", "b"]}))


# --- image generation ---------------------------------------------------------------------------


def test_image_generation_request_and_png_artifacts(provider: BedrockProvider, stub: Stubber) -> None:
    images = [PNG + b"one", PNG + b"two"]
    stub.add_response(
        "invoke_model",
        invoke_answer({"images": [base64.b64encode(image).decode() for image in images], "error": None}),
        {
            "modelId": "amazon.nova-canvas-v1:0",
            "body": body_of(
                {
                    "taskType": "TEXT_IMAGE",
                    "textToImageParams": {"text": "a red bicycle"},
                    "imageGenerationConfig": {"numberOfImages": 2, "width": 512, "height": 768, "seed": 42},
                }
            ),
            "contentType": "application/json",
            "accept": "application/json",
        },
    )
    result = provider.run(
        request(
            "image-generate",
            {"prompt": "a red bicycle"},
            options={"numberOfImages": 2, "width": 512, "height": 768, "seed": 42},
        )
    )
    assert [artifact.data for artifact in result.artifacts] == images
    assert [artifact.name for artifact in result.artifacts] == ["image-1.png", "image-2.png"]
    assert {artifact.content_type for artifact in result.artifacts} == {"image/png"}
    assert result.usage == {"images": 2}
    assert result.output == {"images": 2, "width": 512, "height": 768}


@pytest.mark.parametrize(
    "options",
    [
        {"width": 300},
        {"width": 4112},
        {"width": 1000},
        {"width": 4096, "height": 4096},
        {"width": 320, "height": 2048},
        {"numberOfImages": 6},
        {"seed": -1},
        {"seed": 858_993_460},
    ],
)
def test_image_generation_refuses_out_of_bounds_options(
    provider: BedrockProvider, stub: Stubber, options: dict[str, Any]
) -> None:
    with pytest.raises(InvalidInputError):
        provider.run(request("image-generate", "a cat", options=options))


def test_image_prompt_over_canvas_limit_is_too_large(provider: BedrockProvider, stub: Stubber) -> None:
    with pytest.raises(InputTooLargeError):
        provider.run(request("image-generate", "z" * 1025))


def test_a_moderated_canvas_answer_is_the_prompts_fault(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_response("invoke_model", invoke_answer({"images": [], "error": "blocked by content filters"}))
    with pytest.raises(InvalidInputError):
        provider.run(request("image-generate", "a cat"))


# --- video (asynchronous) -----------------------------------------------------------------------


def start_params(
    token: str, prompt: str = "a drone flight over a forest", step: str = "main"
) -> dict[str, Any]:
    return {
        "modelId": "amazon.nova-reel-v1:0",
        "modelInput": {
            "taskType": "TEXT_VIDEO",
            "textToVideoParams": {"text": prompt},
            "videoGenerationConfig": {"durationSeconds": 6, "fps": 24, "dimension": "1280x720"},
        },
        "outputDataConfig": {"s3OutputDataConfig": {"s3Uri": f"s3://{BUCKET}/results/{JOB}/{step}/"}},
        "clientRequestToken": token,
    }


def test_video_start_answers_running_with_the_invocation(provider: BedrockProvider, stub: Stubber) -> None:
    first = request("video-generate", "a drone flight over a forest")
    token = client_request_token(first)
    stub.add_response("start_async_invoke", {"invocationArn": INVOCATION}, start_params(token))
    # A second attempt of the same job step (the first answer was lost) sends the same token.
    stub.add_response("start_async_invoke", {"invocationArn": INVOCATION}, start_params(token))
    result = provider.run(first)
    again = provider.run(request("video-generate", "a drone flight over a forest", attempt=2))
    assert result.status == again.status == "running"
    assert result.handle == again.handle == INVOCATION
    assert result.model == "amazon.nova-reel-v1:0"


def test_client_request_token_is_per_step_and_per_rerun() -> None:
    base = client_request_token(request("video-generate"))
    assert base == client_request_token(request("video-generate", attempt=3, checks=2))
    assert base != client_request_token(request("video-generate", step="intro"))
    assert base != client_request_token(request("video-generate", reruns=1))
    assert base != client_request_token(ProviderRequest(job_id="other", kind="video-generate"))
    # The API takes 1-256 printable ASCII characters, whatever the step is called.
    odd = client_request_token(request("video-generate", step="ünïcode step " * 40))
    assert 1 <= len(odd) <= 256
    assert all("!" <= char <= "~" for char in odd)


def test_video_seed_option_is_bounded_and_sent(provider: BedrockProvider, stub: Stubber) -> None:
    params = start_params(client_request_token(request("video-generate")), prompt="waves")
    params["modelInput"]["videoGenerationConfig"]["seed"] = 7
    stub.add_response("start_async_invoke", {"invocationArn": INVOCATION}, params)
    assert provider.run(request("video-generate", "waves", options={"seed": 7})).status == "running"
    for options in ({"seed": 2_147_483_647}, {"durationSeconds": 12}):
        with pytest.raises(InvalidInputError):
            provider.run(request("video-generate", "waves", options=options))


def test_video_prompt_over_reel_limit_is_too_large(provider: BedrockProvider, stub: Stubber) -> None:
    with pytest.raises(InputTooLargeError):
        provider.run(request("video-generate", "w" * 513))


def test_video_still_in_progress_keeps_its_handle(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_response("get_async_invoke", async_status("InProgress"), {"invocationArn": INVOCATION})
    result = provider.run(request("video-generate", "waves", handle=INVOCATION, checks=1))
    assert (result.status, result.handle) == ("running", INVOCATION)


def test_video_completed_points_at_the_s3_output(provider: BedrockProvider, stub: Stubber) -> None:
    end = datetime(2026, 11, 29, 12, 2, tzinfo=UTC)
    stub.add_response(
        "get_async_invoke",
        async_status("Completed", endTime=end, lastModifiedTime=end),
        {"invocationArn": INVOCATION},
    )
    result = provider.run(request("video-generate", "waves", handle=INVOCATION, checks=3))
    assert result.status == "succeeded"
    assert result.output == {
        "video": f"results/{JOB}/main/abcdef012345/output.mp4",
        "bucket": BUCKET,
        "durationSeconds": 6,
    }
    assert result.artifacts == ()  # never downloaded
    assert result.usage == {"videoSeconds": 6}


def test_video_completed_with_only_our_prefix_adds_the_invocation_folder(
    provider: BedrockProvider, stub: Stubber
) -> None:
    answer = async_status("Completed")
    answer["outputDataConfig"] = {"s3OutputDataConfig": {"s3Uri": f"s3://{BUCKET}/results/{JOB}/main/"}}
    stub.add_response("get_async_invoke", answer, {"invocationArn": INVOCATION})
    result = provider.run(request("video-generate", "waves", handle=INVOCATION))
    assert result.output["video"] == f"results/{JOB}/main/abcdef012345/output.mp4"


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
    with pytest.raises(error) as raised:
        provider.run(request("video-generate", "waves", handle=INVOCATION))
    assert type(raised.value) is error


def test_a_foreign_handle_is_refused(provider: BedrockProvider, stub: Stubber) -> None:
    with pytest.raises(InvalidInputError):
        provider.run(request("video-generate", "waves", handle="local-0123456789abcdef"))


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
    stub.add_client_error("converse", code, message, status)
    with pytest.raises(ProviderError) as raised:
        provider.run(request("summary"))
    assert type(raised.value) is error
    assert raised.value.status == status
    assert code in str(raised.value) or "SomethingNew" in code
    assert DOC not in str(raised.value)  # the input never lands in the row's error message


def test_throttle_honours_retry_after(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_client_error(
        "start_async_invoke",
        "ThrottlingException",
        "slow down",
        429,
        response_meta={"HTTPHeaders": {"retry-after": "17"}},
    )
    with pytest.raises(ThrottledError) as raised:
        provider.run(request("video-generate", "waves"))
    assert raised.value.retry_after == 17.0


def test_status_check_errors_map_too(provider: BedrockProvider, stub: Stubber) -> None:
    stub.add_client_error("get_async_invoke", "AccessDeniedException", "not allowed", 403)
    with pytest.raises(ProviderAuthError):
        provider.run(request("video-generate", "waves", handle=INVOCATION))


# --- a model past its end of life ------------------------------------------------------------------
# Someone else changes the image and video request bodies; these answers depend on no body.

END_OF_LIFE = (
    "This model version has reached the end of its life. Please refer to the AWS documentation for more "
    "details."
)
LEGACY = (
    "Access denied. This Model is marked by provider as Legacy and you have not been actively using the "
    "model in the last 30 days. Please upgrade to an active model on Amazon Bedrock"
)


@pytest.mark.parametrize(
    ("kind", "operation", "message", "reason"),
    [
        ("summary", "converse", END_OF_LIFE, "end_of_life"),
        ("image-generate", "invoke_model", END_OF_LIFE, "end_of_life"),
        ("video-generate", "start_async_invoke", END_OF_LIFE, "end_of_life"),
        ("summary", "converse", LEGACY, "legacy"),
    ],
)
def test_a_retired_model_is_unavailable_not_a_credentials_error(
    provider: BedrockProvider, stub: Stubber, kind: str, operation: str, message: str, reason: str
) -> None:
    stub.add_client_error(operation, "ResourceNotFoundException", message, 404)
    with pytest.raises(ProviderError) as raised:
        provider.run(request(kind, "A lighthouse at dusk"))
    error = raised.value
    assert type(error) is ModelUnavailableError
    assert (error.error_class, error.retryable, error.reason, error.status) == (
        "model_unavailable", False, reason, 404,
    )  # fmt: skip
