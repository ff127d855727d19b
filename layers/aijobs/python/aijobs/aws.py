"""Cached boto3 clients: created on first use (never at import), shared per container.

Tests start moto first and call `reset_clients()` between tests; `AWS_ENDPOINT_URL` (honoured by
boto3 itself) points every client at the local stack's moto server.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar, cast

import boto3
from botocore.config import Config

if TYPE_CHECKING:
    from mypy_boto3_dynamodb import DynamoDBServiceResource
    from mypy_boto3_lambda import LambdaClient
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_sns import SNSClient
    from mypy_boto3_sqs import SQSClient

# Fail fast inside a Lambda: SQS redelivery is the retry mechanism, not long SDK back-offs.
_CONFIG = Config(retries={"mode": "standard", "max_attempts": 3}, connect_timeout=3, read_timeout=10)


_thread = threading.local()
# Creating clients from boto3's default session is not thread-safe: the local stack builds its
# functions' collaborators from several threads at once (a Lambda uses one thread).
_creating = threading.Lock()


def dynamodb() -> DynamoDBServiceResource:
    """The DynamoDB resource of the calling thread (boto3 resources are not thread-safe; a Lambda
    runs one thread, the local stack runs its pollers in several)."""
    resource: DynamoDBServiceResource | None = getattr(_thread, "dynamodb", None)
    if resource is None:
        with _creating:
            resource = boto3.resource("dynamodb", config=_CONFIG)
        _thread.dynamodb = resource
    return resource


@cache
def sqs() -> SQSClient:
    with _creating:
        return boto3.client("sqs", config=_CONFIG)


@cache
def s3() -> S3Client:
    # SigV4 for presigned URLs and upload forms in every region (older regions default to SigV2).
    with _creating:
        return boto3.client("s3", config=_CONFIG.merge(Config(signature_version="s3v4")))


@cache
def sns() -> SNSClient:
    with _creating:
        return boto3.client("sns", config=_CONFIG)


@cache
def lambda_() -> LambdaClient:
    with _creating:
        return boto3.client("lambda", config=_CONFIG)


@cache
def bedrock(region_name: str | None = None) -> Any:
    """Bedrock's control plane (model lifecycle reads) in `region_name`, else the default region.
    Typed `Any`: the project ships no stubs for it."""
    with _creating:
        return boto3.client("bedrock", region_name=region_name, config=_CONFIG)


_Client = TypeVar("_Client")


class _OnFirstUse:
    """Stands for the client `factory` returns, which it asks for on each use (the factories cache
    it): the client is created by its first call, never if nothing calls it."""

    __slots__ = ("_factory",)

    def __init__(self, factory: Callable[[], object]) -> None:
        self._factory = factory

    def __getattr__(self, name: str) -> Any:
        return getattr(self._factory(), name)


def on_first_use(factory: Callable[[], _Client]) -> _Client:
    """A client for a collaborator that only some invocations call (alerts, pausing a consumer,
    S3 for uploads): creating a botocore client loads its service model, 5-40% of `import boto3`'s
    CPU each, which a cold start need not pay for a client it never calls."""
    return cast(_Client, _OnFirstUse(factory))


def reset_clients() -> None:
    _thread.__dict__.pop("dynamodb", None)
    for factory in (sqs, s3, sns, lambda_, bedrock):
        factory.cache_clear()
