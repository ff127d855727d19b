"""The `polly` adapter against a stubbed Polly client: exact requests, real answers."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import ConnectTimeoutError, ReadTimeoutError
from botocore.response import StreamingBody
from botocore.stub import Stubber

from aijobs.errors import (
    InputTooLargeError,
    InvalidInputError,
    ProviderAuthError,
    ProviderError,
    ThrottledError,
    TransientProviderError,
)
from aijobs.providers.base import Provider, ProviderRequest
from aijobs.providers.failures import TimeoutProviderError
from aijobs.providers.polly import MAX_SYNC_CHARS, PollyProvider, UnconfirmedStartError, client_config

BUCKET = "aijobs-dev-stage"
JOB = "01JDXK5Q7R8S9T0V1W2X3Y4Z5A"
TASK = "70b61c0f-57ce-4715-a247-cae8729dcce9"
SHORT = "Hello from the jobs backbone. This is a short text."
LONG = "A long chapter of an audio book. " * 200  # 6,600 characters
AUDIO = b"ID3\x04\x00\x00\x00\x00\x00\x00fake-mp3-frames"


@pytest.fixture
def client() -> Any:
    return boto3.client("polly", region_name="us-east-1", config=client_config())


@pytest.fixture
def stub(client: Any) -> Iterator[Stubber]:
    with Stubber(client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


@pytest.fixture
def provider(client: Any) -> PollyProvider:
    return PollyProvider(bucket=BUCKET, client=client)


def request(input: Any = SHORT, **fields: Any) -> ProviderRequest:
    return ProviderRequest(job_id=JOB, kind="tts-generate", input=input, **fields)


def speech_answer(
    audio: bytes = AUDIO, content_type: str = "audio/mpeg", characters: int = 51
) -> dict[str, Any]:
    """A SynthesizeSpeech response as documented (AudioStream, ContentType, RequestCharacters)."""
    return {
        "AudioStream": StreamingBody(io.BytesIO(audio), len(audio)),
        "ContentType": content_type,
        "RequestCharacters": characters,
    }


def task(status: str, **extra: Any) -> dict[str, Any]:
    """A SynthesisTask as StartSpeechSynthesisTask / GetSpeechSynthesisTask document it."""
    return {
        "SynthesisTask": {
            "Engine": "neural",
            "TaskId": TASK,
            "TaskStatus": status,
            "OutputUri": f"https://s3.us-east-1.amazonaws.com/{BUCKET}/results/{JOB}/main/.{TASK}.mp3",
            "CreationTime": datetime(2026, 11, 29, 12, 0, tzinfo=UTC),
            "RequestCharacters": len(LONG),
            "OutputFormat": "mp3",
            "TextType": "text",
            "VoiceId": "Joanna",
            **extra,
        }
    }


def sync_params(**overrides: str) -> dict[str, Any]:
    return {
        "Text": SHORT,
        "VoiceId": "Joanna",
        "Engine": "neural",
        "OutputFormat": "mp3",
        "TextType": "text",
    } | overrides


def start_params(text: str = LONG) -> dict[str, Any]:
    return {
        "Text": text,
        "VoiceId": "Joanna",
        "Engine": "neural",
        "OutputFormat": "mp3",
        "TextType": "text",
        "OutputS3BucketName": BUCKET,
        "OutputS3KeyPrefix": f"results/{JOB}/main/",
    }


def test_satisfies_the_provider_protocol(provider: PollyProvider) -> None:
    typed: Provider = provider
    assert typed.name == "polly"


def test_client_config_leaves_retries_to_the_queue() -> None:
    config: Any = client_config()
    assert config.retries == {"max_attempts": 1, "mode": "standard"}
    assert (config.connect_timeout, config.read_timeout) == (3, 30)


def test_no_client_is_created_until_first_use(monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[str] = []
    monkeypatch.setattr(boto3, "client", lambda name, **_: created.append(name))
    PollyProvider(bucket=BUCKET)
    assert created == []


# --- short text: SynthesizeSpeech ---------------------------------------------------------------


def test_short_text_is_synthesized_into_an_artifact(provider: PollyProvider, stub: Stubber) -> None:
    stub.add_response("synthesize_speech", speech_answer(), sync_params())
    result = provider.run(request())
    assert result.status == "succeeded"
    (artifact,) = result.artifacts
    assert (artifact.name, artifact.content_type, artifact.data) == ("speech.mp3", "audio/mpeg", AUDIO)
    assert result.usage == {"characters": 51}
    assert result.output == {"audio": "speech.mp3", "voice": "Joanna", "engine": "neural"}
    assert result.model == "polly-neural-Joanna"


def test_options_choose_voice_engine_format_and_ssml(provider: PollyProvider, stub: Stubber) -> None:
    ssml = "<speak>Hello <break time='300ms'/> world</speak>"
    stub.add_response(
        "synthesize_speech",
        speech_answer(b"OggS-frames", "audio/ogg", 11),
        sync_params(
            Text=ssml, VoiceId="Matthew", Engine="generative", OutputFormat="ogg_vorbis", TextType="ssml"
        ),
    )
    options = {"voice": "Matthew", "engine": "generative", "format": "ogg_vorbis", "textType": "ssml"}
    result = provider.run(request({"text": ssml}, options=options))
    (artifact,) = result.artifacts
    assert (artifact.name, artifact.content_type) == ("speech.ogg", "audio/ogg")


def test_exactly_the_sync_limit_is_still_synchronous(provider: PollyProvider, stub: Stubber) -> None:
    text = "x" * MAX_SYNC_CHARS
    stub.add_response("synthesize_speech", speech_answer(characters=MAX_SYNC_CHARS), sync_params(Text=text))
    assert provider.run(request(text)).status == "succeeded"


@pytest.mark.parametrize(
    "options",
    [
        {"voice": "Nobody"},
        {"voice": 3},
        {"engine": "turbo"},
        {"format": "json"},
        {"format": "wav"},
        {"textType": "html"},
    ],
)
def test_options_outside_the_allow_list_are_refused(
    provider: PollyProvider, stub: Stubber, options: dict[str, Any]
) -> None:
    with pytest.raises(InvalidInputError):
        provider.run(request(options=options))


def test_text_bounds(provider: PollyProvider, stub: Stubber) -> None:
    with pytest.raises(InvalidInputError):
        provider.run(request("  "))
    with pytest.raises(InvalidInputError):
        provider.run(request({"prompt": "no text field"}))
    with pytest.raises(InputTooLargeError):
        provider.run(request("y" * 100_001))


def test_other_kinds_and_classify_are_refused(provider: PollyProvider) -> None:
    with pytest.raises(InvalidInputError):
        provider.run(ProviderRequest(job_id=JOB, kind="summary", input=SHORT))
    with pytest.raises(InvalidInputError):
        provider.classify("hello")


# --- long text: a synthesis task ----------------------------------------------------------------


def test_long_text_starts_a_task_into_the_result_prefix(provider: PollyProvider, stub: Stubber) -> None:
    stub.add_response("start_speech_synthesis_task", task("scheduled"), start_params())
    result = provider.run(request(LONG))
    assert (result.status, result.handle) == ("running", TASK)


@pytest.mark.parametrize("status", ["scheduled", "inProgress"])
def test_a_task_not_done_keeps_running(provider: PollyProvider, stub: Stubber, status: str) -> None:
    stub.add_response("get_speech_synthesis_task", task(status), {"TaskId": TASK})
    result = provider.run(request(LONG, handle=TASK, checks=1))
    assert (result.status, result.handle) == ("running", TASK)


def test_a_completed_task_points_at_its_s3_key(provider: PollyProvider, stub: Stubber) -> None:
    stub.add_response("get_speech_synthesis_task", task("completed"), {"TaskId": TASK})
    result = provider.run(request(LONG, handle=TASK, checks=2))
    assert result.status == "succeeded"
    assert result.output == {"audio": f"results/{JOB}/main/.{TASK}.mp3", "bucket": BUCKET}
    assert result.artifacts == ()  # never downloaded
    assert result.usage == {"characters": len(LONG)}


def test_a_virtual_hosted_output_uri_is_understood(provider: PollyProvider, stub: Stubber) -> None:
    answer = task(
        "completed", OutputUri=f"https://{BUCKET}.s3.us-east-1.amazonaws.com/results/{JOB}/main/{TASK}.mp3"
    )
    stub.add_response("get_speech_synthesis_task", answer, {"TaskId": TASK})
    assert provider.run(request(LONG, handle=TASK)).output["audio"] == f"results/{JOB}/main/{TASK}.mp3"


def test_an_output_uri_in_another_bucket_is_not_trusted(provider: PollyProvider, stub: Stubber) -> None:
    answer = task("completed", OutputUri=f"https://s3.us-east-1.amazonaws.com/elsewhere/{TASK}.mp3")
    stub.add_response("get_speech_synthesis_task", answer, {"TaskId": TASK})
    with pytest.raises(TransientProviderError):
        provider.run(request(LONG, handle=TASK))


@pytest.mark.parametrize(
    ("reason", "error"),
    [
        ("Throttling: rate exceeded", ThrottledError),
        ("Access Denied for the output bucket", ProviderAuthError),
        ("Text length exceeds the maximum", InputTooLargeError),
        ("Invalid SSML request", InvalidInputError),
        ("An internal error occurred", TransientProviderError),
    ],
)
def test_a_failed_task_is_classified_by_its_reason(
    provider: PollyProvider, stub: Stubber, reason: str, error: type[ProviderError]
) -> None:
    stub.add_response("get_speech_synthesis_task", task("failed", TaskStatusReason=reason), {"TaskId": TASK})
    with pytest.raises(ProviderError) as raised:
        provider.run(request(LONG, handle=TASK))
    assert type(raised.value) is error


def raise_on_send(client: Any, operation: str, error: Exception) -> None:
    def handler(**_: Any) -> None:
        raise error

    client.meta.events.register(f"before-send.polly.{operation}", handler)


def test_a_lost_start_answer_is_not_retried(provider: PollyProvider, client: Any) -> None:
    # The request went out and the answer never came: Polly may have started (and will bill) the
    # task, and without an idempotency token a retry would start a second one.
    raise_on_send(client, "StartSpeechSynthesisTask", ReadTimeoutError(endpoint_url="https://polly"))
    with pytest.raises(UnconfirmedStartError) as raised:
        provider.run(request(LONG))
    assert raised.value.retryable is False
    assert raised.value.error_class == "unconfirmed_start"


def test_a_start_that_never_connected_is_retried(provider: PollyProvider, client: Any) -> None:
    raise_on_send(client, "StartSpeechSynthesisTask", ConnectTimeoutError(endpoint_url="https://polly"))
    with pytest.raises(TimeoutProviderError) as raised:
        provider.run(request(LONG))
    assert raised.value.retryable is True


def test_a_start_refused_with_an_error_answer_is_retried(provider: PollyProvider, stub: Stubber) -> None:
    stub.add_client_error(
        "start_speech_synthesis_task", "ServiceFailureException", "boom", 500, expected_params=start_params()
    )
    with pytest.raises(TransientProviderError):
        provider.run(request(LONG))


def test_a_synthesis_read_timeout_is_a_plain_retry(provider: PollyProvider, client: Any) -> None:
    # SynthesizeSpeech has no task left behind: a retry costs at most one short synthesis again.
    raise_on_send(client, "SynthesizeSpeech", ReadTimeoutError(endpoint_url="https://polly"))
    with pytest.raises(TimeoutProviderError):
        provider.run(request())


# --- the error table through the adapter --------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status", "error"),
    [
        ("TextLengthExceededException", 400, InputTooLargeError),
        ("InvalidSsmlException", 400, InvalidInputError),
        ("LanguageNotSupportedException", 400, InvalidInputError),
        ("InvalidSampleRateException", 400, InvalidInputError),
        ("EngineNotSupportedException", 400, InvalidInputError),
        ("ServiceFailureException", 500, TransientProviderError),
        ("ThrottlingException", 400, ThrottledError),
        ("AccessDeniedException", 403, ProviderAuthError),
        ("UnrecognizedClientException", 403, ProviderAuthError),
    ],
)
def test_synthesize_errors_map_to_the_retry_table(
    provider: PollyProvider, stub: Stubber, code: str, status: int, error: type[ProviderError]
) -> None:
    stub.add_client_error(
        "synthesize_speech", code, "the service says no", status, expected_params=sync_params()
    )
    with pytest.raises(ProviderError) as raised:
        provider.run(request())
    assert type(raised.value) is error
    assert SHORT not in str(raised.value)


@pytest.mark.parametrize(
    ("code", "error"),
    [("InvalidS3BucketException", ProviderAuthError), ("InvalidS3KeyException", ProviderAuthError)],
)
def test_a_bad_output_bucket_is_configuration(
    provider: PollyProvider, stub: Stubber, code: str, error: type[ProviderError]
) -> None:
    stub.add_client_error("start_speech_synthesis_task", code, "bucket problem", 400)
    with pytest.raises(error):
        provider.run(request(LONG))


def test_an_expired_task_is_final(provider: PollyProvider, stub: Stubber) -> None:
    stub.add_client_error("get_speech_synthesis_task", "SynthesisTaskNotFoundException", "not found", 400)
    with pytest.raises(InvalidInputError):
        provider.run(request(LONG, handle=TASK))
