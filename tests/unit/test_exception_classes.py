"""Exceptions that do not come from a provider adapter: only infrastructure blips are retried."""

from __future__ import annotations

from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError

from aijobs.errors import (
    InfrastructureError,
    InternalError,
    InvalidInputError,
    ThrottledError,
    classify_exception,
)


def _client_error(code: str, status: int) -> ClientError:
    response: Any = {"Error": {"Code": code, "Message": "m"}, "ResponseMetadata": {"HTTPStatusCode": status}}
    return ClientError(response, "Op")


@pytest.mark.parametrize(
    "error",
    [
        _client_error("ProvisionedThroughputExceededException", 400),
        _client_error("ThrottlingException", 400),
        _client_error("SlowDown", 503),
        _client_error("InternalServerError", 500),
        _client_error("SomethingNew", 502),
        EndpointConnectionError(endpoint_url="https://dynamodb.us-east-1.amazonaws.com"),
        ReadTimeoutError(endpoint_url="https://s3.amazonaws.com"),
        ConnectionResetError("reset by peer"),
        TimeoutError("timed out"),
    ],
)
def test_infrastructure_failures_are_retried_as_internal(error: Exception) -> None:
    classified = classify_exception(error)
    assert isinstance(classified, InfrastructureError)
    assert (classified.retryable, classified.error_class) == (True, "internal")


@pytest.mark.parametrize(
    "error",
    [
        KeyError("output"),
        TypeError("unsupported operand"),
        ValueError("bad option"),
        _client_error("AccessDeniedException", 403),
        _client_error("ValidationException", 400),
    ],
)
def test_deterministic_failures_are_final(error: Exception) -> None:
    classified = classify_exception(error)
    assert isinstance(classified, InternalError)
    assert (classified.retryable, classified.error_class) == (False, "internal_error")


def test_undecodable_input_is_the_inputs_fault() -> None:
    try:
        b"caf\xe9".decode("utf-8")
    except UnicodeDecodeError as decode_error:
        classified = classify_exception(decode_error)
    assert isinstance(classified, InvalidInputError)
    assert not classified.retryable
    assert "UTF-8" in str(classified)


def test_provider_errors_keep_their_class() -> None:
    throttled = ThrottledError("slow down", retry_after=30)
    assert classify_exception(throttled) is throttled
