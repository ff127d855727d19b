"""Cached boto3 clients: created on first use (never at import), shared per container.

Tests start moto first and call `reset_clients()` between tests; `AWS_ENDPOINT_URL` (honoured by
boto3 itself) points every client at the local stack's moto server.
"""

from __future__ import annotations

import threading
from functools import cache
from typing import TYPE_CHECKING

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


def reset_clients() -> None:
    _thread.__dict__.pop("dynamodb", None)
    for factory in (sqs, s3, sns, lambda_):
        factory.cache_clear()
