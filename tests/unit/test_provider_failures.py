"""The AWS section of providers/failures.py: every row of the mapping table, one test each.

ClientErrors come from real clients through botocore's Stubber (`add_client_error`), so they have
exactly the shape boto3 raises.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import boto3
import pytest
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ParamValidationError,
    ReadTimeoutError,
)
from botocore.stub import Stubber

from aijobs.errors import (
    InputTooLargeError,
    InvalidInputError,
    ModelUnavailableError,
    ProviderAuthError,
    ProviderError,
    ThrottledError,
    TransientProviderError,
)
from aijobs.providers.failures import (
    TimeoutProviderError,
    aws_failure,
    aws_task_failure,
    bedrock_model_unavailable,
    request_maybe_accepted,
)


def bedrock_error(code: str, message: str = "", status: int = 400, **meta: Any) -> ClientError:
    """The ClientError a bedrock-runtime Converse call raises for this answer."""
    client = boto3.client("bedrock-runtime", region_name="us-east-1")
    with Stubber(client) as stub:
        stub.add_client_error("converse", code, message, status, **meta)
        with pytest.raises(ClientError) as raised:
            client.converse(modelId="us.amazon.nova-lite-v1:0", messages=[])
    return raised.value


def polly_error(code: str, message: str = "", status: int = 400) -> ClientError:
    """The ClientError a Polly SynthesizeSpeech call raises for this answer."""
    client = boto3.client("polly", region_name="us-east-1")
    with Stubber(client) as stub:
        stub.add_client_error("synthesize_speech", code, message, status)
        with pytest.raises(ClientError) as raised:
            client.synthesize_speech(Text="hi", VoiceId="Joanna", OutputFormat="mp3")
    return raised.value


def mapped(error: ClientError | BotoCoreError, service: str = "Bedrock") -> ProviderError:
    return aws_failure(error, service=service)


# --- Bedrock rows -------------------------------------------------------------------------------

BEDROCK_ROWS = [
    # throttled
    ("ThrottlingException", 429, "Too many requests, please wait before trying again.", ThrottledError),
    ("ServiceQuotaExceededException", 400, "Your request exceeded a service quota.", ThrottledError),
    ("TooManyRequestsException", 429, "Too many requests", ThrottledError),
    # transient
    ("ServiceUnavailableException", 503, "Service is unavailable", TransientProviderError),
    ("InternalServerException", 500, "An internal server error occurred", TransientProviderError),
    (
        "ModelNotReadyException",
        429,
        "The model is not ready to serve inference requests",
        TransientProviderError,
    ),
    ("ModelErrorException", 424, "The model returned an error", TransientProviderError),
    # timeout
    ("ModelTimeoutException", 408, "Model has timed out in processing the request", TimeoutProviderError),
    # invalid input / input too large (the only message matching of the codebase)
    ("ValidationException", 400, "Malformed input request: extraneous key [foo]", InvalidInputError),
    ("ValidationException", 400, "Input is too long for requested model.", InputTooLargeError),
    ("ValidationException", 400, "Too many input tokens. Max input tokens: 8192", InputTooLargeError),
    ("ValidationException", 400, "Too many tokens in the request", InputTooLargeError),
    ("ValidationException", 400, "The input exceeds the context window of this model", InputTooLargeError),
    ("ValidationException", 400, "#/inputText: expected maxLength: 50000, actual: 60000", InputTooLargeError),
    (
        "ValidationException",
        400,
        "The maximum tokens you requested exceeds the model limit",
        InvalidInputError,
    ),
    # configuration: pause the kind and alert
    (
        "AccessDeniedException",
        403,
        "You don't have access to the model with the specified model ID.",
        ProviderAuthError,
    ),
    (
        "AccessDeniedException",
        403,
        "User is not authorized to perform: bedrock:InvokeModel",
        ProviderAuthError,
    ),
    (
        "UnrecognizedClientException",
        403,
        "The security token included in the request is invalid",
        ProviderAuthError,
    ),
    ("ResourceNotFoundException", 404, "Model not found: amazon.nova-lite-v9:0", ProviderAuthError),
    (
        "ValidationException",
        400,
        "You don't have access to the model with the specified model ID.",
        ProviderAuthError,
    ),
    ("ValidationException", 400, "The provided model identifier is invalid.", ProviderAuthError),
    (
        "ValidationException",
        400,
        "Invocation of model ID amazon.nova-lite-v1:0 with on-demand throughput isn't supported.",
        ProviderAuthError,
    ),
]


@pytest.mark.parametrize(("code", "status", "message", "expected"), BEDROCK_ROWS)
def test_bedrock_error_rows(code: str, status: int, message: str, expected: type[ProviderError]) -> None:
    error = mapped(bedrock_error(code, message, status))
    assert type(error) is expected
    assert error.status == status
    assert str(error).startswith(f"Bedrock {code}: ")


# --- a model that is gone or locked: AWS's exact answers ---------------------------------------
# AWS gives these no code of their own (a plain ResourceNotFoundException, like a mistyped model
# id), so the texts are the fixtures: as seen from bedrock-runtime in 2026, for Converse,
# InvokeModel and GetFoundationModel alike.

END_OF_LIFE = (
    "This model version has reached the end of its life. Please refer to the AWS documentation for more "
    "details."
)
LEGACY_30_DAYS = (
    "Access denied. This Model is marked by provider as Legacy and you have not been actively using the "
    "model in the last 30 days. Please upgrade to an active model on Amazon Bedrock"
)
LEGACY_15_DAYS = (
    "Access denied. This Model is marked by provider as Legacy and you have not been actively using the "
    "model in the last 15 days. Please upgrade to an active model on Amazon Bedrock"
)


@pytest.mark.parametrize(
    ("code", "message", "reason"),
    [
        ("ResourceNotFoundException", END_OF_LIFE, "end_of_life"),
        ("ResourceNotFoundException", LEGACY_30_DAYS, "legacy"),
        ("ResourceNotFoundException", LEGACY_15_DAYS, "legacy"),
        # The Legacy lock has been answered as a ValidationException too.
        ("ValidationException", LEGACY_30_DAYS.removeprefix("Access denied. "), "legacy"),
    ],
)
def test_a_model_past_its_end_of_life_or_locked_as_legacy_is_unavailable(
    code: str, message: str, reason: str
) -> None:
    error = mapped(bedrock_error(code, message, 404 if code.startswith("Resource") else 400))
    assert type(error) is ModelUnavailableError
    assert (error.error_class, error.retryable, error.reason) == ("model_unavailable", False, reason)
    assert not isinstance(error, ProviderAuthError)  # never pauses the kind's consumer
    assert str(error) == f"Bedrock {code}: {message}"


def test_the_model_unavailable_error_carries_the_model_the_caller_names() -> None:
    error = aws_failure(
        bedrock_error("ResourceNotFoundException", END_OF_LIFE, 404), service="Bedrock", model="amazon.x-v1:0"
    )
    assert isinstance(error, ModelUnavailableError)
    assert error.model == "amazon.x-v1:0"
    unnamed = mapped(bedrock_error("ResourceNotFoundException", END_OF_LIFE, 404))
    assert isinstance(unnamed, ModelUnavailableError)
    assert unnamed.model is None


@pytest.mark.parametrize(
    ("code", "message"),
    [
        # The same code for a mistyped or never-existing id: our configuration (pause, alert).
        ("ResourceNotFoundException", "Model not found: amazon.nova-lite-v9:0"),
        ("ResourceNotFoundException", "Could not resolve the foundation model from the model identifier"),
        # The words in another code mean nothing here.
        ("AccessDeniedException", LEGACY_30_DAYS),
        ("ThrottlingException", END_OF_LIFE),
    ],
)
def test_only_the_model_gone_answers_are_read_as_unavailable(code: str, message: str) -> None:
    assert bedrock_model_unavailable(code, message) is None
    assert not isinstance(mapped(bedrock_error(code, message, 404)), ModelUnavailableError)


def test_the_job_message_names_the_model_and_the_fix_first() -> None:
    error = mapped(bedrock_error("ResourceNotFoundException", END_OF_LIFE, 404))
    assert isinstance(error, ModelUnavailableError)
    final = error.named("amazon.nova-canvas-v1:0").for_job("image-generate")
    message = str(final)
    assert message.startswith("model 'amazon.nova-canvas-v1:0' is no longer available (end of life): ")
    assert "pick a current model for image-generate" in message[:160]  # what an attempt log keeps
    assert "`aijobs models check`" in message
    assert message.endswith(f"Bedrock ResourceNotFoundException: {END_OF_LIFE}")
    assert (final.model, final.reason, final.status, final.detail) == (
        "amazon.nova-canvas-v1:0", "end_of_life", 404, str(error),
    )  # fmt: skip
    # A model named by the raiser is kept.
    assert error.named("a").named("b").model == "a"


# --- Polly rows ---------------------------------------------------------------------------------

POLLY_ROWS = [
    ("TextLengthExceededException", 400, InputTooLargeError),
    ("InvalidSsmlException", 400, InvalidInputError),
    ("LanguageNotSupportedException", 400, InvalidInputError),
    ("InvalidSampleRateException", 400, InvalidInputError),
    ("EngineNotSupportedException", 400, InvalidInputError),
    ("ServiceFailureException", 500, TransientProviderError),
    ("InvalidS3BucketException", 400, ProviderAuthError),
    ("InvalidS3KeyException", 400, ProviderAuthError),
    ("SynthesisTaskNotFoundException", 400, InvalidInputError),
]


@pytest.mark.parametrize(("code", "status", "expected"), POLLY_ROWS)
def test_polly_error_rows(code: str, status: int, expected: type[ProviderError]) -> None:
    error = mapped(polly_error(code, "the service says no", status), service="Polly")
    assert type(error) is expected
    assert str(error) == f"Polly {code}: the service says no"


# --- codes the table does not know: by HTTP status ----------------------------------------------


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (429, ThrottledError),
        (401, ProviderAuthError),
        (403, ProviderAuthError),
        (404, ProviderAuthError),
        (413, InputTooLargeError),
        (408, TimeoutProviderError),
        (400, InvalidInputError),
        (422, InvalidInputError),
        (409, TransientProviderError),
        (500, TransientProviderError),
        (502, TransientProviderError),
        (503, TransientProviderError),
        (504, TransientProviderError),
    ],
)
def test_unknown_codes_fall_back_to_the_status(status: int, expected: type[ProviderError]) -> None:
    assert type(mapped(bedrock_error("BrandNewException", "something", status))) is expected


def test_expired_credentials_retry_rather_than_pause() -> None:
    # Lambda rotates its role credentials by itself; pausing the consumer would be an outage.
    assert type(mapped(bedrock_error("ExpiredTokenException", "expired", 400))) is TransientProviderError


# --- Retry-After --------------------------------------------------------------------------------


def headers(value: str) -> dict[str, Any]:
    return {"response_meta": {"HTTPHeaders": {"retry-after": value}}}


@pytest.mark.parametrize(("value", "seconds"), [("7", 7.0), ("2.5", 2.5), ("-3", 0.0), ("999999", 43_200.0)])
def test_retry_after_seconds(value: str, seconds: float) -> None:
    error = mapped(bedrock_error("ThrottlingException", "slow down", 429, **headers(value)))
    assert isinstance(error, ThrottledError)
    assert error.retry_after == seconds


def test_retry_after_http_date() -> None:
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=120), usegmt=True)
    error = mapped(bedrock_error("ThrottlingException", "slow down", 429, **headers(when)))
    assert isinstance(error, ThrottledError)
    assert error.retry_after is not None
    assert 100 <= error.retry_after <= 120


@pytest.mark.parametrize("value", ["soon", "", "nan"])
def test_unreadable_retry_after_is_ignored(value: str) -> None:
    error = mapped(bedrock_error("ThrottlingException", "slow down", 429, **headers(value)))
    assert isinstance(error, ThrottledError)
    assert error.retry_after is None


def test_no_retry_after_header() -> None:
    error = mapped(bedrock_error("ServiceQuotaExceededException", "quota", 400))
    assert isinstance(error, ThrottledError)
    assert error.retry_after is None


def test_retry_after_on_an_unknown_429_code() -> None:
    error = mapped(bedrock_error("SlowDownPlease", "", 429, **headers("11")))
    assert isinstance(error, ThrottledError)
    assert error.retry_after == 11.0


# --- errors the SDK raises itself ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "expected", "maybe_accepted"),
    [
        (ReadTimeoutError(endpoint_url="https://bedrock-runtime"), TimeoutProviderError, True),
        (ConnectionClosedError(endpoint_url="https://bedrock-runtime"), TimeoutProviderError, True),
        (ConnectTimeoutError(endpoint_url="https://bedrock-runtime"), TimeoutProviderError, False),
        (EndpointConnectionError(endpoint_url="https://bedrock-runtime"), TimeoutProviderError, False),
        (NoCredentialsError(), ProviderAuthError, False),
        (ParamValidationError(report="Invalid length for parameter Text"), InvalidInputError, False),
    ],
)
def test_sdk_errors(error: BotoCoreError, expected: type[ProviderError], maybe_accepted: bool) -> None:
    provider_error = mapped(error)
    assert type(provider_error) is expected
    assert request_maybe_accepted(error) is maybe_accepted


def test_timeouts_are_transient_with_their_own_error_class() -> None:
    error = mapped(ReadTimeoutError(endpoint_url="https://bedrock-runtime"))
    assert isinstance(error, TransientProviderError)
    assert (error.retryable, error.error_class) == (True, "timeout")
    assert mapped(bedrock_error("ModelTimeoutException", "late", 408)).error_class == "timeout"


def test_an_error_answer_means_the_request_was_not_accepted() -> None:
    assert request_maybe_accepted(bedrock_error("ServiceUnavailableException", "down", 503)) is False


def test_long_aws_messages_are_cut() -> None:
    error = mapped(bedrock_error("ValidationException", "x" * 5000, 400))
    assert len(str(error)) < 260


# --- asynchronous task failures -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "expected"),
    [
        ("ThrottlingException: Rate exceeded", ThrottledError),
        ("Service quota exceeded", ThrottledError),
        ("Insufficient capacity to serve the request", ThrottledError),
        ("Access Denied (Service: S3, Status Code: 403)", ProviderAuthError),
        ("The caller is not authorized to write to the bucket", ProviderAuthError),
        ("Text length exceeds the maximum allowed", InputTooLargeError),
        ("Input is too long", InputTooLargeError),
        ("ValidationException: the input violates the content policy", InvalidInputError),
        ("Invalid SSML", InvalidInputError),
        ("The output was blocked by content filters", InvalidInputError),
        ("Internal error", TransientProviderError),
        (None, TransientProviderError),
        ("", TransientProviderError),
    ],
)
def test_task_failure_rows(reason: str | None, expected: type[ProviderError]) -> None:
    error = aws_task_failure(reason, service="Bedrock video")
    assert type(error) is expected
    assert str(error).startswith("Bedrock video task failed: ")
    # The task is over whatever the cause: a retry must start a new one, not check it again.
    assert error.task_ended


def test_a_failed_call_is_not_an_ended_task() -> None:
    # A throttled or failed start or check says nothing about the task: its handle is kept.
    error = mapped(bedrock_error("ThrottlingException", "Too many requests", 429))
    assert error.retryable
    assert not error.task_ended
