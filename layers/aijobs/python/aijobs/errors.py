"""Every error the package raises on purpose, classified in one place.

Provider errors carry the retry taxonomy of docs/design.md §4 as their type, so callers branch on the
class, never on message text. Request errors carry the HTTP status and a machine-readable code
that the API's single exception handler maps to a 4xx body.
"""

from __future__ import annotations

from collections.abc import Sequence


class AijobsError(Exception):
    """Base of every deliberate aijobs error."""


# The error class of a job its owner cancelled (and of a workflow child whose parent ended first).
CANCELLED = "cancelled"
# The error class of a job an operator gave up on (`aijobs fail-final`, the console).
FAILED_BY_OPERATOR = "operator"


# --- provider errors: the retry table ---------------------------------------------------------


class ProviderError(AijobsError):
    """A failed provider call. `error_class` is what the job row and the metrics record."""

    error_class = "provider_error"
    retryable = False
    # True on the error of an asynchronous provider task that ended without a result (Bedrock
    # async invoke or a Polly task `Failed`): the task is gone, so a retry must start a new one
    # instead of checking the dead one again (set by aijobs.providers.failures.aws_task_failure).
    task_ended = False

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class TransientProviderError(ProviderError):
    """502 / 503 / network blip / timeout: retry with exponential backoff and jitter."""

    error_class = "transient"
    retryable = True


class ThrottledError(ProviderError):
    """429 / out of capacity: retry later, honouring Retry-After when the provider sends one."""

    error_class = "throttled"
    retryable = True

    def __init__(self, message: str, *, status: int | None = 429, retry_after: float | None = None) -> None:
        super().__init__(message, status=status)
        self.retry_after = retry_after


class InputTooLargeError(ProviderError):
    """Input too long or too large for the model: final; the user must split or shrink it."""

    error_class = "input_too_large"


class ProviderAuthError(ProviderError):
    """401 / 403 from the provider: final for the job, and the kind's consumer is paused."""

    error_class = "provider_auth"


class InvalidInputError(ProviderError):
    """400 / schema error in the job's input: final; fix the producer, replay the jobs."""

    error_class = "invalid_input"


class InvalidOptionError(InvalidInputError):
    """An option value the model does not take (a provider's bounds for that model, e.g. Titan
    Text Embeddings V2's three sizes). Raised by an adapter's pure `check_request` before any call,
    which the API also runs at submit (a 422 naming `option`); final like any invalid input."""

    def __init__(self, option: str, allowed: str | Sequence[object], model: str) -> None:
        if not isinstance(allowed, str):
            allowed = one_of(allowed)
        super().__init__(f"option {option!r} must be {allowed} on {model}")
        self.option = option
        self.allowed = allowed
        self.model = model
        # The message without the option's name (a 422's `details.options[].problem`).
        self.problem = f"must be {allowed} on {model}"


def one_of(values: Sequence[object]) -> str:
    """`(256, 512, 1024)` -> "256, 512 or 1024" (what a message lists as allowed)."""
    shown = [str(value) for value in values]
    return shown[0] if len(shown) == 1 else f"{', '.join(shown[:-1])} or {shown[-1]}"


class InvalidOutputError(ProviderError):
    """The model's answer does not match the kind's output model: retried (a model may answer
    well the next time; the attempt is spent), then final once the attempt budget is."""

    error_class = "invalid_output"
    retryable = True


class ModelUnavailableError(ProviderError):
    """The model itself can no longer be called: it reached its end of life, it is Legacy and
    locked for an account that has not used it lately, or the endpoint does not know it.

    Final for the job, but not a credentials problem: the kind's consumer keeps running (jobs of
    other models still work) and the operator is alerted once per model. `model` names the model
    when the raiser knows it; the consumer fills it in from the job or its kind's plan otherwise
    (`named`). It is also the seam for fallbacks: a later change may retry the job on the kind's
    next fallback model, knowing which one failed, before it fails the job.
    """

    error_class = "model_unavailable"

    # Why the model cannot be called (`reason`).
    END_OF_LIFE = "end_of_life"
    LEGACY = "legacy"
    NOT_FOUND = "not_found"

    def __init__(
        self, message: str, *, model: str | None = None, reason: str = END_OF_LIFE, status: int | None = None
    ) -> None:
        super().__init__(message, status=status)
        self.model = model
        self.reason = reason
        # Models found unavailable before this one in the same attempt (a kind's fallback chain).
        self.earlier: tuple[str, ...] = ()
        # The provider's own answer, kept apart so `for_job` can lead with the model and the fix.
        self.detail = message

    def named(self, model: str | None) -> ModelUnavailableError:
        """This error with `model` filled in where the raiser did not know it."""
        if self.model is not None or model is None:
            return self
        return type(self)(self.detail, model=model, reason=self.reason, status=self.status)

    def for_job(self, kind: str) -> ModelUnavailableError:
        """The error as the job row records it: the model and the fix first (an attempt log keeps
        only the start of a message), the provider's own answer last."""
        model = f"model {self.model!r}" if self.model else f"the {kind} model"
        why = {self.LEGACY: "Legacy, locked for this account"}.get(self.reason, self.reason.replace("_", " "))
        message = (
            f"{model} is no longer available ({why}): pick a current model for {kind} "
            f"(KIND_MODELS / KIND_ALLOWED_MODELS, or the job's model) and check the stage with "
            f"`aijobs models check`. {self.detail}"
        )
        error = type(self)(message, model=self.model, reason=self.reason, status=self.status)
        error.detail = self.detail
        return error


class InfrastructureError(TransientProviderError):
    """One of our own AWS dependencies (a table, the bucket, a queue) failed transiently."""

    error_class = "internal"


class InternalError(ProviderError):
    """Our own code failed in a way that repeats on every attempt (a bug, an unusable row): final,
    so a deterministic failure does not burn the attempt budget and a dead letter. Re-run the job
    once the code is fixed."""

    error_class = "internal_error"


# AWS error codes of our own dependencies (DynamoDB, S3, SQS, ...) that a later attempt can outlive.
_TRANSIENT_AWS_CODES = frozenset(
    {
        "InternalError", "InternalServerError", "InternalFailure", "ServiceUnavailable",
        "ServiceUnavailableException", "SlowDown", "RequestTimeout", "RequestTimeoutException",
        "Throttling", "ThrottlingException", "ThrottledException", "RequestLimitExceeded",
        "ProvisionedThroughputExceededException", "TooManyRequestsException",
        "TransactionInProgressException", "TransactionConflictException", "LimitExceededException",
        "KMSThrottlingException",
    }
)  # fmt: skip


def classify_exception(error: Exception) -> ProviderError:
    """Classify an exception that did not come from a provider adapter (docs/design.md §4's table).

    Only genuine infrastructure failures retry (`internal`, backed off like a blip): a throttled
    or unavailable AWS dependency, a connection or read timeout. Bytes that are not text are the
    input's fault (`invalid_input`); anything else is a bug that would fail the same way on every
    attempt (`internal_error`). Both are final.
    """
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(error, ProviderError):
        return error
    name = type(error).__name__
    if isinstance(error, ClientError):
        code = str(error.response.get("Error", {}).get("Code", ""))
        status = int(error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0) or 0)
        if code in _TRANSIENT_AWS_CODES or status >= 500:
            return InfrastructureError(f"internal error: AWS {code or status}")
        return InternalError(f"internal error: AWS {code or status} (not retried)")
    if isinstance(error, BotoCoreError | ConnectionError | TimeoutError):
        return InfrastructureError(f"internal error: {name}")
    if isinstance(error, UnicodeError):
        return InvalidInputError(f"the job's input is not valid UTF-8 text ({name})")
    return InternalError(f"internal error: {name} (not retried; re-run the job once it is fixed)")


# --- request errors: mapped to HTTP by the API ------------------------------------------------


class RequestError(AijobsError):
    """A client mistake or a refused request, answered with `status` and a JSON body."""

    status = 400
    code = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, details: object | None = None) -> None:
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        self.details = details


class MalformedRequestError(RequestError):
    status, code = 400, "malformed_request"


class UnauthorizedError(RequestError):
    status, code = 401, "unauthorized"


class PaymentRequiredError(RequestError):
    status, code = 402, "insufficient_credits"


class SpendCapReachedError(PaymentRequiredError):
    """The tenant's model spend today reached its own daily cap (aijobs.spend)."""

    code = "spend_cap_reached"


class ForbiddenError(RequestError):
    """Authenticated, but the key's role may not do this (an operator route with a user key)."""

    status, code = 403, "forbidden"


class NotFoundError(RequestError):
    status, code = 404, "not_found"


class RateLimitedError(RequestError):
    """Too many calls from one key (the operator routes); retry after `retry_after` seconds."""

    status, code = 429, "rate_limited"

    def __init__(self, message: str, *, retry_after: float) -> None:
        super().__init__(message, details={"retryAfter": round(retry_after, 1)})
        self.retry_after = retry_after


class ConflictError(RequestError):
    status, code = 409, "conflict"


class PayloadTooLargeError(RequestError):
    status, code = 413, "input_too_large"


class UnsupportedMediaTypeError(RequestError):
    status, code = 415, "unsupported_media_type"


class UnprocessableError(RequestError):
    status, code = 422, "validation_error"


class TenantRateLimitedError(RequestError):
    """One tenant submits faster than its own items take writes (docs/operations/scale.md): retry later."""

    status, code = 429, "tenant_rate_limited"

    def __init__(self, message: str, *, retry_after: float = 1.0) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class StageSpendCapReachedError(RequestError):
    """The stage's model spend today reached its daily cap (aijobs.spend). A queued job waits for
    the brake; a synchronous call (`POST /classify`) cannot, so it is refused: retry later."""

    status, code = 429, "stage_spend_cap_reached"

    def __init__(self, message: str, *, retry_after: float, details: object | None = None) -> None:
        super().__init__(message, details=details)
        self.retry_after = retry_after


# DynamoDB's answers when a partition or an item is over its throughput (a table's capacity or
# an item's ~1,000 writes per second); inside a transaction, the cancellation reason says it.
DYNAMODB_THROTTLE_CODES = frozenset(
    {"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"}
)


def is_dynamodb_throttle(error: Exception) -> bool:
    """Whether DynamoDB refused a request (or a transaction's item) for throughput."""
    from botocore.exceptions import ClientError

    if not isinstance(error, ClientError):
        return False
    if str(error.response.get("Error", {}).get("Code", "")) in DYNAMODB_THROTTLE_CODES:
        return True
    reasons = error.response.get("CancellationReasons") or []
    return any(str(reason.get("Code", "")) == "ThrottlingError" for reason in reasons)


class ServiceUnavailableError(RequestError):
    """Our own dependency failed (e.g. the queue): the client may retry with the same key."""

    status, code = 503, "service_unavailable"


class InvalidBodyEncodingError(MalformedRequestError):
    """The body is not valid UTF-8 (or, when the gateway base64-encoded it, not valid base64)."""

    code = "invalid_utf8"


class JsonTooDeepError(MalformedRequestError):
    """JSON nested deeper than any legitimate request: refused before a recursive parser sees it."""

    code = "json_too_deep"


class JsonNumberTooLongError(MalformedRequestError):
    """An integer with more digits than any legitimate request: refused before the parser converts it."""

    code = "number_too_long"


class BodyTooLargeError(PayloadTooLargeError):
    """The whole body is far above any legitimate request (not just the inline input)."""

    code = "body_too_large"


class MethodNotAllowedError(RequestError):
    """The path exists but not with this method; `details` lists the allowed methods."""

    status, code = 405, "method_not_allowed"


class InputRefNotFoundError(UnprocessableError):
    """`inputRef` names an object of the caller's that is not in the bucket (upload it first)."""

    code = "input_ref_not_found"


class InputRefTooLargeError(UnprocessableError):
    """The object `inputRef` names is larger than its kind takes; `details` carries the cap."""

    code = "input_ref_too_large"


class UnsupportedUploadTypeError(UnprocessableError):
    """`POST /uploads` for a content type no kind takes; `details` lists the allowed ones."""

    code = "unsupported_upload_type"


class UploadTooLargeError(UnprocessableError):
    """`POST /uploads` for a file over its content type's cap; `details` carries the cap."""

    code = "upload_too_large"


# --- state transitions ---------------------------------------------------------------------------


class TransitionConflict(AijobsError):
    """A conditional state transition lost its race; the row is the source of truth."""
