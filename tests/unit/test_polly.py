"""The `polly` adapter against a stubbed Polly client: exact requests, real answers."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError
from botocore.response import StreamingBody
from botocore.stub import Stubber

from aijobs.errors import (
    InputTooLargeError,
    InvalidInputError,
    InvalidOptionError,
    ProviderAuthError,
    ProviderError,
    ThrottledError,
    TransientProviderError,
)
from aijobs.providers import polly
from aijobs.providers.base import Call, Provider, SpeechRequest
from aijobs.providers.failures import TimeoutProviderError
from aijobs.providers.polly import (
    MAX_SYNC_CHARS,
    MAX_TASK_CHARS,
    PollyProvider,
    UnconfirmedStartError,
    client_config,
)

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
def sent(client: Any) -> list[str]:
    """The operations the adapter called, in order (recorded before the Stubber answers)."""
    operations: list[str] = []

    def record(model: Any, **_: Any) -> None:
        operations.append(model.name)

    client.meta.events.register("provide-client-params.polly", record)
    return operations


@pytest.fixture
def stub(client: Any, sent: list[str]) -> Iterator[Stubber]:
    with Stubber(client) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


@pytest.fixture
def provider(client: Any) -> PollyProvider:
    return PollyProvider(bucket=BUCKET, client=client)


def speech(
    text: str = SHORT, *, step: str = "main", handle: str | None = None, checks: int = 0, **fields: Any
) -> SpeechRequest:
    call = Call(job_id=JOB, step=step, model="polly", handle=handle, checks=checks)
    return SpeechRequest(call=call, text=text, **fields)


def speech_answer(
    audio: bytes = AUDIO, content_type: str = "audio/mpeg", characters: int | None = 51
) -> dict[str, Any]:
    """A SynthesizeSpeech response as documented (AudioStream, ContentType, RequestCharacters)."""
    answer: dict[str, Any] = {
        "AudioStream": StreamingBody(io.BytesIO(audio), len(audio)),
        "ContentType": content_type,
    }
    if characters is not None:
        answer["RequestCharacters"] = characters
    return answer


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


def start_params(text: str = LONG, step: str = "main", **overrides: str) -> dict[str, Any]:
    return {
        "Text": text,
        "VoiceId": "Joanna",
        "Engine": "neural",
        "OutputFormat": "mp3",
        "TextType": "text",
        "OutputS3BucketName": BUCKET,
        "OutputS3KeyPrefix": f"results/{JOB}/{step}/",
    } | overrides


def raise_on_send(client: Any, operation: str, error: Exception) -> None:
    def handler(**_: Any) -> None:
        raise error

    client.meta.events.register(f"before-send.polly.{operation}", handler)


def test_is_the_speech_provider(provider: PollyProvider) -> None:
    typed: Provider = provider
    assert typed.name == "polly"
    assert typed.capabilities == frozenset({"speech"})


def test_client_config_leaves_retries_to_the_queue() -> None:
    config: Any = client_config()
    assert config.retries == {"max_attempts": 1, "mode": "standard"}
    assert (config.connect_timeout, config.read_timeout) == (3, 30)
    custom: Any = client_config(connect_timeout=1, read_timeout=8)
    assert (custom.connect_timeout, custom.read_timeout) == (1, 8)


def test_no_client_is_created_until_first_use_and_then_once(monkeypatch: pytest.MonkeyPatch) -> None:
    created: list[tuple[str, dict[str, Any]]] = []
    client = boto3.client("polly", region_name="eu-west-1", config=client_config())
    config = client_config(read_timeout=12)

    def fake_client(name: str, **kwargs: Any) -> Any:
        created.append((name, kwargs))
        return client

    monkeypatch.setattr(boto3, "client", fake_client)
    provider = PollyProvider(bucket=BUCKET, region_name="eu-west-1", config=config)
    assert created == []
    with Stubber(client) as stub:
        stub.add_response("synthesize_speech", speech_answer(), sync_params())
        stub.add_response("synthesize_speech", speech_answer(), sync_params())
        provider.synthesize_speech(speech())
        provider.synthesize_speech(speech())
    assert created == [("polly", {"region_name": "eu-west-1", "config": config})]


def test_a_bucket_is_required() -> None:
    with pytest.raises(ValueError, match="bucket"):
        PollyProvider(bucket="")


# --- short text: SynthesizeSpeech ---------------------------------------------------------------


def test_short_text_is_synthesized_into_an_artifact(provider: PollyProvider, stub: Stubber) -> None:
    stub.add_response("synthesize_speech", speech_answer(), sync_params())
    result = provider.synthesize_speech(speech())
    assert result.status == "succeeded"
    (artifact,) = result.artifacts
    assert (artifact.name, artifact.content_type, artifact.data) == ("speech.mp3", "audio/mpeg", AUDIO)
    assert result.usage == {"characters": 51}
    assert result.output == {"audio": "speech.mp3", "voice": "Joanna", "engine": "neural"}
    assert result.model == "polly-neural-Joanna"
    assert result.handle is None


def test_request_fields_choose_voice_engine_format_and_ssml(provider: PollyProvider, stub: Stubber) -> None:
    ssml = "<speak>Hello <break time='300ms'/> world</speak>"
    stub.add_response(
        "synthesize_speech",
        speech_answer(b"OggS-frames", "audio/ogg", 11),
        sync_params(
            Text=ssml, VoiceId="Matthew", Engine="generative", OutputFormat="ogg_vorbis", TextType="ssml"
        ),
    )
    result = provider.synthesize_speech(
        speech(ssml, voice="Matthew", engine="generative", format="ogg_vorbis", text_type="ssml")
    )
    (artifact,) = result.artifacts
    assert (artifact.name, artifact.content_type, artifact.data) == (
        "speech.ogg",
        "audio/ogg",
        b"OggS-frames",
    )
    assert result.output == {"audio": "speech.ogg", "voice": "Matthew", "engine": "generative"}
    assert result.model == "polly-generative-Matthew"


def test_pcm_is_stored_as_audio_pcm(provider: PollyProvider, stub: Stubber) -> None:
    stub.add_response(
        "synthesize_speech", speech_answer(b"\x00\x01" * 8, "audio/pcm"), sync_params(OutputFormat="pcm")
    )
    (artifact,) = provider.synthesize_speech(speech(format="pcm")).artifacts
    assert (artifact.name, artifact.content_type) == ("speech.pcm", "audio/pcm")


def test_billed_characters_fall_back_to_the_text_length(provider: PollyProvider, stub: Stubber) -> None:
    stub.add_response("synthesize_speech", speech_answer(characters=None), sync_params())
    assert provider.synthesize_speech(speech()).usage == {"characters": len(SHORT)}


def test_an_answer_without_audio_is_transient(provider: PollyProvider, stub: Stubber) -> None:
    stub.add_response("synthesize_speech", speech_answer(b""), sync_params())
    with pytest.raises(TransientProviderError) as raised:
        provider.synthesize_speech(speech())
    assert type(raised.value) is TransientProviderError


def test_exactly_the_sync_limit_is_still_synchronous(provider: PollyProvider, stub: Stubber) -> None:
    text = "x" * MAX_SYNC_CHARS
    stub.add_response("synthesize_speech", speech_answer(characters=MAX_SYNC_CHARS), sync_params(Text=text))
    assert provider.synthesize_speech(speech(text)).status == "succeeded"


def test_one_character_over_the_sync_limit_is_a_task(provider: PollyProvider, stub: Stubber) -> None:
    text = "x" * (MAX_SYNC_CHARS + 1)
    stub.add_response("start_speech_synthesis_task", task("scheduled"), start_params(text))
    assert provider.synthesize_speech(speech(text)).status == "running"


@pytest.mark.parametrize(
    "fields",
    [
        {"voice": "Nobody"},
        {"voice": "joanna"},
        {"engine": "turbo"},
        {"format": "json"},
        {"format": "wav"},
        {"text_type": "html"},
    ],
)
def test_fields_outside_the_allow_list_are_refused_before_calling(
    provider: PollyProvider, stub: Stubber, sent: list[str], fields: dict[str, Any]
) -> None:
    with pytest.raises(ProviderError) as raised:
        provider.synthesize_speech(speech(**fields))
    assert sent == []
    # The option's own name (a 422 at submit names it too), and invalid input for the retry table.
    assert type(raised.value) is InvalidOptionError
    assert raised.value.option == {"text_type": "textType"}.get(next(iter(fields)), next(iter(fields)))
    assert raised.value.error_class == "invalid_input"


def test_the_voice_allow_list_is_the_adapters(
    client: Any, stub: Stubber, sent: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # One allow-list, the module's: the API's submit check reads the same (tests/integration/
    # test_submit_model_bounds.py).
    monkeypatch.setattr(polly, "VOICES", frozenset({"Matthew"}))
    provider = PollyProvider(bucket=BUCKET, client=client)
    with pytest.raises(InvalidInputError):
        provider.synthesize_speech(speech())  # the default voice, Joanna, is not on this list
    assert sent == []
    stub.add_response("synthesize_speech", speech_answer(), sync_params(VoiceId="Matthew"))
    assert provider.synthesize_speech(speech(voice="Matthew")).model == "polly-neural-Matthew"


@pytest.mark.parametrize(
    ("text", "error"), [("  ", InvalidInputError), ("y" * (MAX_TASK_CHARS + 1), InputTooLargeError)]
)
def test_text_bounds(
    provider: PollyProvider, stub: Stubber, sent: list[str], text: str, error: type[ProviderError]
) -> None:
    with pytest.raises(ProviderError) as raised:
        provider.synthesize_speech(speech(text))
    assert sent == []
    assert type(raised.value) is error


# --- long text: a synthesis task ----------------------------------------------------------------


def test_long_text_starts_a_task_into_the_result_prefix(provider: PollyProvider, stub: Stubber) -> None:
    stub.add_response("start_speech_synthesis_task", task("scheduled"), start_params())
    result = provider.synthesize_speech(speech(LONG))
    assert (result.status, result.handle, result.model) == ("running", TASK, "polly-neural-Joanna")
    assert result.artifacts == ()


def test_a_task_of_another_step_and_voice_goes_under_that_step(
    provider: PollyProvider, stub: Stubber
) -> None:
    stub.add_response(
        "start_speech_synthesis_task",
        task("scheduled", VoiceId="Amy", Engine="long-form"),
        start_params(step="chapter-2", VoiceId="Amy", Engine="long-form"),
    )
    result = provider.synthesize_speech(speech(LONG, step="chapter-2", voice="Amy", engine="long-form"))
    assert (result.status, result.model) == ("running", "polly-long-form-Amy")


def test_a_task_that_failed_at_once_is_classified(provider: PollyProvider, stub: Stubber) -> None:
    stub.add_response(
        "start_speech_synthesis_task", task("failed", TaskStatusReason="Invalid SSML request"), start_params()
    )
    with pytest.raises(ProviderError) as raised:
        provider.synthesize_speech(speech(LONG))
    assert type(raised.value) is InvalidInputError


def test_a_start_without_a_task_id_is_transient(provider: PollyProvider, stub: Stubber) -> None:
    answer = task("scheduled")
    del answer["SynthesisTask"]["TaskId"]
    stub.add_response("start_speech_synthesis_task", answer, start_params())
    with pytest.raises(TransientProviderError) as raised:
        provider.synthesize_speech(speech(LONG))
    assert type(raised.value) is TransientProviderError


@pytest.mark.parametrize("status", ["scheduled", "inProgress"])
def test_a_task_not_done_keeps_running(provider: PollyProvider, stub: Stubber, status: str) -> None:
    stub.add_response("get_speech_synthesis_task", task(status), {"TaskId": TASK})
    result = provider.synthesize_speech(speech(LONG, handle=TASK, checks=1))
    assert (result.status, result.handle, result.model) == ("running", TASK, "polly-neural-Joanna")


def test_a_check_never_starts_or_speaks_again(
    provider: PollyProvider, stub: Stubber, sent: list[str]
) -> None:
    # With a handle the step only checks its task, whatever the length of the text.
    stub.add_response("get_speech_synthesis_task", task("inProgress"), {"TaskId": TASK})
    assert provider.synthesize_speech(speech(SHORT, handle=TASK)).status == "running"
    assert sent == ["GetSpeechSynthesisTask"]


def test_a_completed_task_points_at_its_s3_key(provider: PollyProvider, stub: Stubber) -> None:
    stub.add_response("get_speech_synthesis_task", task("completed"), {"TaskId": TASK})
    result = provider.synthesize_speech(speech(LONG, handle=TASK, checks=2))
    assert result.status == "succeeded"
    assert result.output == {"audio": f"results/{JOB}/main/.{TASK}.mp3", "bucket": BUCKET}
    assert result.artifacts == ()  # never downloaded
    assert result.usage == {"characters": len(LONG)}
    assert result.model == "polly-neural-Joanna"


def test_a_virtual_hosted_output_uri_is_understood(provider: PollyProvider, stub: Stubber) -> None:
    answer = task(
        "completed", OutputUri=f"https://{BUCKET}.s3.us-east-1.amazonaws.com/results/{JOB}/main/{TASK}.mp3"
    )
    stub.add_response("get_speech_synthesis_task", answer, {"TaskId": TASK})
    result = provider.synthesize_speech(speech(LONG, handle=TASK))
    assert result.output["audio"] == f"results/{JOB}/main/{TASK}.mp3"


def test_an_escaped_output_uri_is_decoded(provider: PollyProvider, stub: Stubber) -> None:
    answer = task(
        "completed",
        OutputUri=f"https://s3.us-east-1.amazonaws.com/{BUCKET}/results/{JOB}/my%20step/{TASK}.mp3",
    )
    stub.add_response("get_speech_synthesis_task", answer, {"TaskId": TASK})
    result = provider.synthesize_speech(speech(LONG, handle=TASK))
    assert result.output["audio"] == f"results/{JOB}/my step/{TASK}.mp3"


@pytest.mark.parametrize(
    "uri",
    [
        f"https://s3.us-east-1.amazonaws.com/elsewhere/{TASK}.mp3",
        f"https://elsewhere.s3.us-east-1.amazonaws.com/{BUCKET}-not/{TASK}.mp3",
        f"https://s3.us-east-1.amazonaws.com/{BUCKET}/",
        "",
    ],
)
def test_an_output_uri_outside_the_bucket_is_not_trusted(
    provider: PollyProvider, stub: Stubber, uri: str
) -> None:
    stub.add_response("get_speech_synthesis_task", task("completed", OutputUri=uri), {"TaskId": TASK})
    with pytest.raises(TransientProviderError) as raised:
        provider.synthesize_speech(speech(LONG, handle=TASK))
    assert type(raised.value) is TransientProviderError


def test_a_task_in_an_unknown_state_is_transient(provider: PollyProvider, stub: Stubber) -> None:
    stub.add_response("get_speech_synthesis_task", task("paused"), {"TaskId": TASK})
    with pytest.raises(TransientProviderError) as raised:
        provider.synthesize_speech(speech(LONG, handle=TASK))
    assert type(raised.value) is TransientProviderError


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
        provider.synthesize_speech(speech(LONG, handle=TASK))
    assert type(raised.value) is error


# --- the unconfirmed start ----------------------------------------------------------------------


def test_a_lost_start_answer_is_not_retried(provider: PollyProvider, client: Any) -> None:
    # The request went out and the answer never came: Polly may have started (and will bill) the
    # task, and without an idempotency token a retry would start a second one.
    raise_on_send(client, "StartSpeechSynthesisTask", ReadTimeoutError(endpoint_url="https://polly"))
    with pytest.raises(UnconfirmedStartError) as raised:
        provider.synthesize_speech(speech(LONG))
    assert raised.value.retryable is False
    assert raised.value.error_class == "unconfirmed_start"
    assert LONG[:40] not in str(raised.value)


@pytest.mark.parametrize(
    "error",
    [
        ConnectTimeoutError(endpoint_url="https://polly"),
        EndpointConnectionError(endpoint_url="https://polly"),
    ],
)
def test_a_start_that_never_connected_is_retried(
    provider: PollyProvider, client: Any, error: Exception
) -> None:
    raise_on_send(client, "StartSpeechSynthesisTask", error)
    with pytest.raises(TimeoutProviderError) as raised:
        provider.synthesize_speech(speech(LONG))
    assert raised.value.retryable is True


def test_a_start_refused_with_an_error_answer_is_retried(provider: PollyProvider, stub: Stubber) -> None:
    stub.add_client_error(
        "start_speech_synthesis_task", "ServiceFailureException", "boom", 500, expected_params=start_params()
    )
    with pytest.raises(TransientProviderError) as raised:
        provider.synthesize_speech(speech(LONG))
    assert type(raised.value) is TransientProviderError


def test_a_synthesis_read_timeout_is_a_plain_retry(provider: PollyProvider, client: Any) -> None:
    # SynthesizeSpeech has no task left behind: a retry costs at most one short synthesis again.
    raise_on_send(client, "SynthesizeSpeech", ReadTimeoutError(endpoint_url="https://polly"))
    with pytest.raises(TimeoutProviderError):
        provider.synthesize_speech(speech())


def test_a_check_read_timeout_is_a_plain_retry(provider: PollyProvider, client: Any) -> None:
    raise_on_send(client, "GetSpeechSynthesisTask", ReadTimeoutError(endpoint_url="https://polly"))
    with pytest.raises(TimeoutProviderError):
        provider.synthesize_speech(speech(LONG, handle=TASK))


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
        provider.synthesize_speech(speech())
    assert type(raised.value) is error
    assert raised.value.status == status
    assert SHORT not in str(raised.value)  # the text never lands in the row's error message


@pytest.mark.parametrize("code", ["InvalidS3BucketException", "InvalidS3KeyException"])
def test_a_bad_output_bucket_is_configuration(provider: PollyProvider, stub: Stubber, code: str) -> None:
    stub.add_client_error(
        "start_speech_synthesis_task", code, "bucket problem", 400, expected_params=start_params()
    )
    with pytest.raises(ProviderError) as raised:
        provider.synthesize_speech(speech(LONG))
    assert type(raised.value) is ProviderAuthError


@pytest.mark.parametrize("code", ["SynthesisTaskNotFoundException", "InvalidTaskIdException"])
def test_an_expired_or_unknown_task_is_final(provider: PollyProvider, stub: Stubber, code: str) -> None:
    stub.add_client_error(
        "get_speech_synthesis_task", code, "not found", 400, expected_params={"TaskId": TASK}
    )
    with pytest.raises(ProviderError) as raised:
        provider.synthesize_speech(speech(LONG, handle=TASK))
    assert type(raised.value) is InvalidInputError
