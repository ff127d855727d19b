"""Provider failures mapped to the retry taxonomy of `aijobs.errors`, in one place per transport.

Adapters call the mapping of their transport and raise what it returns; nothing outside this module
looks at provider error codes or message text. Each transport keeps its own clearly marked
section, self-contained, so the AWS SDK mapping and the HTTP-status mapping can change apart.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionError,
    HTTPClientError,
    NoCredentialsError,
    ParamValidationError,
    PartialCredentialsError,
)

from aijobs.errors import (
    InputTooLargeError,
    InvalidInputError,
    ModelUnavailableError,
    ProviderAuthError,
    ProviderError,
    ThrottledError,
    TransientProviderError,
)

# =================================================================================================
# AWS (botocore): Bedrock, Polly and any other AI service called through boto3
# =================================================================================================


class TimeoutProviderError(TransientProviderError):
    """The provider did not answer in time (a model or read timeout, or no connection at all).

    Retried like any transient failure; its own `error_class` lets the row and the metrics tell
    a slow model from a 5xx.
    """

    error_class = "timeout"


# Error codes by outcome. Codes of Bedrock Runtime and Polly, plus the generic AWS ones a service
# may answer with; a code not listed falls back to its HTTP status (`_by_status`).
_THROTTLED_CODES = frozenset(
    {
        "ThrottlingException", "ServiceQuotaExceededException", "TooManyRequestsException",
        "Throttling", "ThrottledException", "RequestLimitExceeded", "LimitExceededException",
    }
)  # fmt: skip
_TRANSIENT_CODES = frozenset(
    {
        "ServiceUnavailableException", "InternalServerException", "ModelNotReadyException",
        "ModelErrorException", "ServiceFailureException", "ServiceUnavailable", "InternalFailure",
        "InternalServerError", "InternalError",
        # Lambda refreshes its role credentials by itself: a later attempt outlives an expired token.
        "ExpiredTokenException", "ExpiredToken",
        # A concurrent operation on the same resource; bounded by the attempt budget.
        "ConflictException",
    }
)  # fmt: skip
_TIMEOUT_CODES = frozenset({"ModelTimeoutException", "RequestTimeout", "RequestTimeoutException"})
_TOO_LARGE_CODES = frozenset({"TextLengthExceededException"})
_INVALID_CODES = frozenset(
    {
        "ValidationException", "InvalidSsmlException", "LanguageNotSupportedException",
        "InvalidSampleRateException", "EngineNotSupportedException",
        "MarksNotSupportedForFormatException", "SsmlMarksNotSupportedForTextTypeException",
        "InvalidTaskIdException", "SynthesisTaskNotFoundException",
    }
)  # fmt: skip
# Configuration, not the user's fault: our credentials, model access, model ids, output bucket.
# The consumer pauses the kind and alerts; every job would fail the same way until it is fixed.
_CONFIG_CODES = frozenset(
    {
        "AccessDeniedException", "AccessDenied", "UnrecognizedClientException",
        "InvalidSignatureException", "MissingAuthenticationTokenException", "InvalidClientTokenId",
        "IncompleteSignature", "SignatureDoesNotMatch", "ResourceNotFoundException",
        "InvalidS3BucketException", "InvalidS3KeyException",
    }
)  # fmt: skip

# Message matching happens here and only here (STYLE.md forbids it elsewhere): AWS answers
# "input too long for the model" and "no access to this model" with the same ValidationException
# code as any other bad request, and only the message tells them apart. Matched case-insensitively.
_TOO_LARGE_TEXT = re.compile(
    r"too long|too large|too many (?:input )?tokens|context (?:window|length)|maxlength"
    r"|exceed\w*[^.]*\b(?:tokens?|characters|length)\b|\b(?:length|size)\b[^.]*\bexceed",
    re.IGNORECASE,
)
_MODEL_ACCESS_TEXT = re.compile(
    r"(?:don't|do not) have access to the model|access to the model|model access"
    r"|model identifier is invalid|on-demand throughput isn.t supported",
    re.IGNORECASE,
)
# A model that is gone or locked. Bedrock says so with no code or field of its own: the end of a
# model's life and the Legacy lock are both a plain ResourceNotFoundException (the Legacy lock has
# been seen as a ValidationException too), the same code as a mistyped model id, which is ours to
# fix (`ProviderAuthError`). The message is the only signal AWS gives, so it is read here and only
# here (`bedrock_model_unavailable`); tests/unit/test_provider_failures.py holds AWS's exact texts:
#   "This model version has reached the end of its life. Please refer to the AWS documentation for
#    more details."
#   "Access denied. This Model is marked by provider as Legacy and you have not been actively using
#    the model in the last 30 days. Please upgrade to an active model on Amazon Bedrock"
_MODEL_GONE_CODES = frozenset({"ResourceNotFoundException", "ValidationException"})
# AWS's answer after a model's end of life, as the local provider's `#fail:eol` reproduces it.
BEDROCK_END_OF_LIFE_MESSAGE = (
    "This model version has reached the end of its life. Please refer to the AWS documentation for "
    "more details."
)
_END_OF_LIFE_TEXT = re.compile(r"\breached the end of its life\b", re.IGNORECASE)
_LEGACY_TEXT = re.compile(r"\bmarked by (?:the )?provider as legacy\b", re.IGNORECASE)
# Async task failure texts (GetAsyncInvoke `failureMessage`, Polly `TaskStatusReason`): the task
# carries no error code, so its text is all there is to classify.
_TASK_THROTTLED_TEXT = re.compile(r"throttl|rate exceeded|too many requests|quota|capacity", re.IGNORECASE)
_TASK_CONFIG_TEXT = re.compile(r"access ?denied|not authori[sz]ed|permission|kms", re.IGNORECASE)
_TASK_INVALID_TEXT = re.compile(r"validation|invalid|malformed|content filter|blocked", re.IGNORECASE)

# AWS's own message is kept this short on the row: a validation message may quote a field back.
_MAX_DETAIL = 200
_MAX_RETRY_AFTER_SECONDS = 12 * 3600.0


def aws_failure(
    error: ClientError | BotoCoreError, *, service: str, model: str | None = None
) -> ProviderError:
    """The typed `ProviderError` for a failed boto3 call to an AI service (`service` names it;
    `model`, when the caller passes it, is carried by a `ModelUnavailableError`).

    | AWS answer                                                        | raised                    |
    |-------------------------------------------------------------------|---------------------------|
    | Throttling, ServiceQuotaExceeded, TooManyRequests, 429            | `ThrottledError`          |
    | ServiceUnavailable, InternalServer, ModelNotReady, ModelError,    | `TransientProviderError`  |
    | ServiceFailure, any 5xx                                           |                           |
    | ModelTimeout, read/connect timeout, no connection                 | `TimeoutProviderError`    |
    | Validation whose message means "input too long", TextLength...    | `InputTooLargeError`      |
    | Validation, InvalidSsml, LanguageNotSupported, InvalidSampleRate  | `InvalidInputError`       |
    | ResourceNotFound / Validation saying the model reached its end of | `ModelUnavailableError`   |
    | life or is Legacy and locked (`bedrock_model_unavailable`)        |                           |
    | AccessDenied, UnrecognizedClient, ResourceNotFound (model id),    | `ProviderAuthError`       |
    | Validation meaning "no access to the model" / bad model id        |                           |

    `Retry-After`, if the answer carries one, becomes `ThrottledError.retry_after`. The message
    names the service, the code and AWS's own message (cut short); never the request's input.
    """
    if isinstance(error, ClientError):
        return _client_error(error, service, model)
    return _sdk_error(error, service)


def bedrock_model_unavailable(code: str, message: str) -> str | None:
    """Why Bedrock refuses the model itself (`ModelUnavailableError.END_OF_LIFE` or `.LEGACY`), or
    None for any other answer. The message text is all AWS gives (see the texts above)."""
    if code not in _MODEL_GONE_CODES:
        return None
    if _END_OF_LIFE_TEXT.search(message):
        return ModelUnavailableError.END_OF_LIFE
    if _LEGACY_TEXT.search(message):
        return ModelUnavailableError.LEGACY
    return None


def aws_task_failure(reason: str | None, *, service: str) -> ProviderError:
    """The typed error for an asynchronous task that ended `Failed`, from its failure text.

    Throttling or quota -> throttled; access or permission (e.g. to the output bucket) ->
    configuration; too long -> input too large; validation -> invalid input; anything else ->
    transient. Each is marked `task_ended`: a later attempt starts a new task.
    """
    text = (reason or "no reason given")[:_MAX_DETAIL]
    what = f"{service} task failed: {text}"
    error: ProviderError
    if _TASK_THROTTLED_TEXT.search(text):
        error = ThrottledError(what, status=None)
    elif _TASK_CONFIG_TEXT.search(text):
        error = ProviderAuthError(what)
    elif _TOO_LARGE_TEXT.search(text):
        error = InputTooLargeError(what)
    elif _TASK_INVALID_TEXT.search(text):
        error = InvalidInputError(what)
    else:
        error = TransientProviderError(what)
    # The task is over: a retry starts a new one (the consumer forgets its handle).
    error.task_ended = True
    return error


def _client_error(error: ClientError, service: str, model: str | None) -> ProviderError:
    response: Mapping[str, Any] = error.response
    details: Mapping[str, Any] = response.get("Error") or {}
    metadata: Mapping[str, Any] = response.get("ResponseMetadata") or {}
    code = str(details.get("Code", "") or "")
    message = str(details.get("Message", "") or "")
    status = _int_or_none(metadata.get("HTTPStatusCode"))
    what = f"{service} {code or status}: {message[:_MAX_DETAIL]}".rstrip(": ")
    gone = bedrock_model_unavailable(code, message)
    if gone is not None:
        return ModelUnavailableError(what, model=model, reason=gone, status=status)
    if code in _THROTTLED_CODES:
        return ThrottledError(what, status=status, retry_after=_retry_after(metadata))
    if code in _TIMEOUT_CODES:
        return TimeoutProviderError(what, status=status)
    if code in _TRANSIENT_CODES:
        return TransientProviderError(what, status=status)
    if code in _TOO_LARGE_CODES:
        return InputTooLargeError(what, status=status)
    if code in _CONFIG_CODES:
        return ProviderAuthError(what, status=status)
    if code in _INVALID_CODES:
        if _MODEL_ACCESS_TEXT.search(message):
            return ProviderAuthError(what, status=status)
        if _TOO_LARGE_TEXT.search(message):
            return InputTooLargeError(what, status=status)
        return InvalidInputError(what, status=status)
    return _by_status(what, status, metadata)


def _by_status(what: str, status: int | None, metadata: Mapping[str, Any]) -> ProviderError:
    """A code this table does not know: decide by its HTTP status."""
    if status == 429:
        return ThrottledError(what, status=status, retry_after=_retry_after(metadata))
    if status in (401, 403, 404):
        return ProviderAuthError(what, status=status)
    if status == 413:
        return InputTooLargeError(what, status=status)
    if status == 408:
        return TimeoutProviderError(what, status=status)
    if status is not None and 400 <= status < 500 and status != 409:
        return InvalidInputError(what, status=status)
    # 5xx, 409, or no status at all: a later attempt may well succeed.
    return TransientProviderError(what, status=status)


def _sdk_error(error: BotoCoreError, service: str) -> ProviderError:
    """An error raised by the SDK itself, before or instead of an answer."""
    name = type(error).__name__
    if isinstance(error, ConnectionError | HTTPClientError):
        # ConnectTimeout/EndpointConnection (never connected) and ReadTimeout/ConnectionClosed
        # (no answer in time): the timeout path. Whether the request was accepted is the caller's
        # question where it matters (see `request_maybe_accepted`).
        return TimeoutProviderError(f"{service}: {name} (no answer in time)")
    if isinstance(error, NoCredentialsError | PartialCredentialsError):
        return ProviderAuthError(f"{service}: {name} (no usable AWS credentials)")
    if isinstance(error, ParamValidationError):
        # The SDK refused our request before sending it: the job's input or options did not fit.
        return InvalidInputError(f"{service}: request rejected by the SDK ({name})")
    return TransientProviderError(f"{service}: {name}")


def request_maybe_accepted(error: ClientError | BotoCoreError) -> bool:
    """Whether the service may have accepted a request that failed with `error`.

    True only when the request was sent but its answer was lost (read timeout, connection closed
    mid-answer). A refused connection, a connect timeout or an error answer mean it was not.
    Callers of a non-idempotent start use this to avoid starting a second task on retry.
    """
    return isinstance(error, HTTPClientError)


def _retry_after(metadata: Mapping[str, Any]) -> float | None:
    """Seconds from a `Retry-After` header (delta-seconds or an HTTP date), if any."""
    headers = metadata.get("HTTPHeaders") or {}
    raw = next((str(value) for key, value in headers.items() if str(key).lower() == "retry-after"), None)
    if raw is None or not raw.strip():
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - datetime.now(UTC)).total_seconds()
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), _MAX_RETRY_AFTER_SECONDS)


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value) if value is not None else None
    except (TypeError, ValueError):
        return None


# =================================================================================================
# end of the AWS section
# =================================================================================================


# =================================================================================================
# --- HTTP providers: OpenAI-compatible endpoints (OpenAI, gateways, vLLM, Ollama)
# =================================================================================================
# Status codes, Retry-After, transport failures and unusable 2xx answers, mapped to the retry
# table of docs/design.md §4. Shares only `TimeoutProviderError` with the AWS section.

# A provider's own error message is kept, this short, for the job row and the operator: bodies of
# 4xx answers can quote the input back (a 400 about a bad field value), so never more than this.
_HTTP_MESSAGE_CHARS = 160
# SQS caps a visibility delay at 12 h; a Retry-After beyond it is clamped, not trusted blindly.
_HTTP_MAX_RETRY_AFTER = 43_200.0
# Server side and "try again" statuses: 408 request timeout, 425 too early, 5xx (Cloudflare's
# 520-524 and Anthropic-style 529 "overloaded" included).
_HTTP_RETRY_STATUSES = frozenset({408, 425})
# The request can never succeed as configured (key, billing, base URL, model name): final for the
# job and the kind's consumer is paused until an operator fixes the configuration.
_HTTP_CONFIG_STATUSES = frozenset({401, 402, 403, 404, 405})
_HTTP_CONTEXT_LENGTH_CODES = frozenset(
    {"context_length_exceeded", "string_above_max_length", "tokens_limit_reached"}
)
# Providers without an error code (vLLM, Ollama, TGI, gateways) only say it in words. Matching
# text is the exception to convention 6, kept here in the one place that classifies provider errors.
_HTTP_CONTEXT_LENGTH_TEXT = re.compile(
    r"maximum context length|context length|context window|too many tokens|prompt is too long"
    r"|input is too long|maximum input length|exceeds the max(?:imum)? (?:number of )?tokens"
    r"|reduce the length of|string too long",
    re.IGNORECASE,
)
_HTTP_MODEL_NOT_FOUND_CODES = frozenset({"model_not_found"})
_HTTP_MODEL_NOT_FOUND_TEXT = re.compile(r"\bmodel\b.*\b(?:not found|does not exist|not exist)", re.IGNORECASE)
_HTTP_QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})
# Key-like tokens a provider may echo back ("Incorrect API key provided: sk-ab***yz").
_HTTP_SECRET_TEXT = re.compile(r"(?:\b(?:sk|rk|pk)-[\w*.-]{3,}|\bBearer\s+\S+)", re.IGNORECASE)
_HTTP_SPACE = re.compile(r"\s+")


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` header: delta-seconds (decimals accepted, as some
    gateways send them) or an HTTP date. None when absent or unreadable; never negative, at most
    12 h."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if not math.isfinite(seconds):
        return None
    return min(_HTTP_MAX_RETRY_AFTER, max(0.0, seconds))


def parse_retry_after_ms(value: str | None) -> float | None:
    """Seconds to wait from a `retry-after-ms` header (Azure OpenAI, some gateways); None if absent."""
    if value is None:
        return None
    try:
        milliseconds = float(value.strip())
    except ValueError:
        return None
    if not math.isfinite(milliseconds):
        return None
    return min(_HTTP_MAX_RETRY_AFTER, max(0.0, milliseconds / 1000.0))


def _http_error_fields(body_text: str | None) -> tuple[str | None, str]:
    """The provider's error code (if any) and error message from an error body.

    Shapes seen: OpenAI `{"error": {"message", "type", "code", "param"}}`, Ollama
    `{"error": "text"}`, older vLLM `{"message", "type", "code": 400}`; anything else (an HTML
    page from a load balancer) is kept as plain text.
    """
    if not body_text:
        return None, ""
    try:
        body = json.loads(body_text)
    except ValueError:
        return None, body_text
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, str):
            return None, error
        if isinstance(error, dict):
            code = error.get("code") if isinstance(error.get("code"), str) else error.get("type")
            message = error.get("message")
            return (code if isinstance(code, str) else None), (message if isinstance(message, str) else "")
    return None, ""


def _http_short(text: str, secrets: tuple[str, ...] = ()) -> str:
    """`text` on one line, without key-like tokens or `secrets`, truncated for an error message."""
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    text = _HTTP_SPACE.sub(" ", _HTTP_SECRET_TEXT.sub("[redacted]", text)).strip()
    if len(text) > _HTTP_MESSAGE_CHARS:
        text = text[: _HTTP_MESSAGE_CHARS - 3].rstrip() + "..."
    return text


def http_error(
    status: int,
    body_text: str | None,
    retry_after_header: str | None = None,
    *,
    retry_after_ms_header: str | None = None,
    provider: str = "provider",
    model_override: bool = False,
    model: str | None = None,
    secrets: tuple[str, ...] = (),
    now: datetime | None = None,
) -> ProviderError:
    """The typed error for a non-2xx answer of an HTTP provider (docs/design.md §4's table).

    - 429: `ThrottledError`, `retry_after` from `retry-after-ms` (more precise) or `Retry-After`
      (seconds or HTTP date); an exhausted quota or billing limit (`insufficient_quota`) is a
      configuration problem instead: `ProviderAuthError`.
    - 408, 425, 5xx: `TransientProviderError`.
    - 413, and a 400 about the context length (code `context_length_exceeded` or the words):
      `InputTooLargeError`; other 400 and 4xx: `InvalidInputError`.
    - 404 with the error code `model_not_found` (OpenAI's: the model is gone, or this account
      may not use it): `ModelUnavailableError` (carrying `model`), which fails the job without
      pausing the kind's consumer: jobs of its other models still work. Job-chosen models are
      allow-listed at submit, so this holds for an override too.
    - 401, 402, 403, 404 (wrong base URL, or a model not found without that code), 405, 3xx:
      `ProviderAuthError`, which pauses the kind's consumer. Except such a 404 for a model the
      *job* chose (`model_override`): the job's fault, `InvalidInputError`, so one bad request
      cannot pause everyone's jobs.

    The message is `"<provider>: HTTP <status> [<code>]: <provider message>"`, the provider's
    message cut to 160 characters and stripped of key-like tokens and of `secrets`.
    """
    code, message = _http_error_fields(body_text)
    text = f"{provider}: HTTP {status}" + (f" {code}" if code else "")
    detail = _http_short(message, secrets)
    text += f": {detail}" if detail else ""
    if status == 429:
        if code in _HTTP_QUOTA_CODES:
            return ProviderAuthError(text + " (quota or billing: fix the account)", status=status)
        retry_after = parse_retry_after_ms(retry_after_ms_header)
        if retry_after is None:
            retry_after = parse_retry_after(retry_after_header, now=now)
        return ThrottledError(text, status=status, retry_after=retry_after)
    if status >= 500 or status in _HTTP_RETRY_STATUSES:
        return TransientProviderError(text, status=status)
    if status == 413 or (
        status == 400 and (code in _HTTP_CONTEXT_LENGTH_CODES or _HTTP_CONTEXT_LENGTH_TEXT.search(message))
    ):
        return InputTooLargeError(text + " (split or shrink the input)", status=status)
    if status == 404 and code in _HTTP_MODEL_NOT_FOUND_CODES:
        return ModelUnavailableError(text, model=model, reason=ModelUnavailableError.NOT_FOUND, status=status)
    if status == 404 and model_override and _HTTP_MODEL_NOT_FOUND_TEXT.search(message):
        return InvalidInputError(text + " (the job's model override)", status=status)
    if status in _HTTP_CONFIG_STATUSES or 300 <= status < 400:
        return ProviderAuthError(text + " (configuration: key, account, base URL or model)", status=status)
    return InvalidInputError(text, status=status)


def http_transport_error(error: BaseException, *, provider: str = "provider", phase: str) -> ProviderError:
    """A connect or read timeout, a refused or reset connection, a TLS failure or a broken
    answer before its status arrived: `TimeoutProviderError`, retried like any blip. `phase`
    says where ("connect", "read"); the message names only the exception class, since an
    exception's text can carry the URL or a fragment of what was sent."""
    if isinstance(error, TimeoutError):
        return TimeoutProviderError(f"{provider}: {phase} timed out")
    return TimeoutProviderError(f"{provider}: {phase} failed ({type(error).__name__})")


def malformed_response_error(what: str, *, provider: str = "provider", status: int = 200) -> ProviderError:
    """A 2xx answer we cannot use (not JSON, not the documented shape, truncated): retried.

    Why transient: such a body almost always comes from the path, not the model: an answer cut off
    mid-stream, or a proxy, load balancer or captive gateway answering 200 with its own page. The
    next attempt usually gets a proper answer, and the attempt cap bounds the cost of one that
    repeats. `what` must describe the shape, never quote the body (it may contain model output).
    """
    return TransientProviderError(f"{provider}: unusable {status} answer: {what}", status=status)


# =================================================================================================
# end of the HTTP section
# =================================================================================================
