"""Every error the package raises on purpose, classified in one place.

Provider errors carry the retry taxonomy of DESIGN.md §4 as their type, so callers branch on the
class, never on message text. Request errors carry the HTTP status and a machine-readable code
that the API's single exception handler maps to a 4xx body.
"""

from __future__ import annotations


class AijobsError(Exception):
    """Base of every deliberate aijobs error."""


# --- provider errors: the retry table ---------------------------------------------------------


class ProviderError(AijobsError):
    """A failed provider call. `error_class` is what the job row and the metrics record."""

    error_class = "provider_error"
    retryable = False

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


class NotFoundError(RequestError):
    status, code = 404, "not_found"


class ConflictError(RequestError):
    status, code = 409, "conflict"


class PayloadTooLargeError(RequestError):
    status, code = 413, "input_too_large"


class UnsupportedMediaTypeError(RequestError):
    status, code = 415, "unsupported_media_type"


class UnprocessableError(RequestError):
    status, code = 422, "validation_error"


class ServiceUnavailableError(RequestError):
    """Our own dependency failed (e.g. the queue): the client may retry with the same key."""

    status, code = 503, "service_unavailable"


# --- state transitions ---------------------------------------------------------------------------


class TransitionConflict(AijobsError):
    """A conditional state transition lost its race; the row is the source of truth."""
