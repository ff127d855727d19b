"""Cached boto3 clients: created on first use (never at import), shared per container.

Tests start moto first and call `reset_clients()` between tests; `AWS_ENDPOINT_URL` (honoured by
boto3 itself) points every client at the local stack's moto server.
"""

from __future__ import annotations

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


@cache
def dynamodb() -> DynamoDBServiceResource:
    return boto3.resource("dynamodb", config=_CONFIG)


@cache
def sqs() -> SQSClient:
    return boto3.client("sqs", config=_CONFIG)


@cache
def s3() -> S3Client:
    return boto3.client("s3", config=_CONFIG)


@cache
def sns() -> SNSClient:
    return boto3.client("sns", config=_CONFIG)


@cache
def lambda_() -> LambdaClient:
    return boto3.client("lambda", config=_CONFIG)


def reset_clients() -> None:
    for factory in (dynamodb, sqs, s3, sns, lambda_):
        factory.cache_clear()
