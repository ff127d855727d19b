"""An object that is not there, as S3 answers it to the stage's functions.

The functions may read objects under their prefixes but not list the bucket (cdk: JobStorage), so
S3 answers a missing key with 403 (a HEAD: the bare status; a GET: AccessDenied) instead of 404.
The producer's `inputRef` check and the consumer's read of an uploaded input take it as "not
there" (a 422 at submit, a final `invalid_input` job); any other error still raises.
"""

from __future__ import annotations

from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from botocore.stub import Stubber

from aijobs.errors import InvalidInputError
from aijobs.kinds.context import input_value
from aijobs.store.results import ResultStore

BUCKET = "aijobs-dev-stage"
KEY = "inputs/alice/01JDXK5Q7R8S9T0V1W2X3Y4Z5A-notes.txt"


@pytest.fixture
def s3() -> Any:
    return boto3.client(
        "s3", region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )


@pytest.fixture
def stub(s3: Any) -> Iterator[Stubber]:
    with Stubber(s3) as stubber:
        yield stubber
        stubber.assert_no_pending_responses()


@pytest.mark.parametrize(("code", "status"), [("403", 403), ("404", 404)])
def test_a_head_answered_403_without_list_rights_or_404_is_no_such_input(
    s3: Any, stub: Stubber, code: str, status: int
) -> None:
    stub.add_client_error("head_object", code, "", status, expected_params={"Bucket": BUCKET, "Key": KEY})
    assert ResultStore(s3, BUCKET).input_object(KEY) is None


def test_any_other_error_of_a_head_still_raises(s3: Any, stub: Stubber) -> None:
    stub.add_client_error("head_object", "500", "", 500, expected_params={"Bucket": BUCKET, "Key": KEY})
    with pytest.raises(ClientError):
        ResultStore(s3, BUCKET).input_object(KEY)


def _context(s3: Any) -> Any:
    job = SimpleNamespace(input=None, input_ref=KEY)
    return SimpleNamespace(job=job, results=ResultStore(s3, BUCKET))


@pytest.mark.parametrize(("code", "status"), [("AccessDenied", 403), ("NoSuchKey", 404)])
def test_an_uploaded_input_that_is_gone_fails_the_job_as_its_input(
    s3: Any, stub: Stubber, code: str, status: int
) -> None:
    stub.add_client_error("get_object", code, "gone", status, expected_params={"Bucket": BUCKET, "Key": KEY})
    with pytest.raises(InvalidInputError, match="does not exist"):
        input_value(_context(s3))


def test_a_failing_read_of_an_input_is_not_taken_for_a_missing_one(s3: Any, stub: Stubber) -> None:
    stub.add_client_error("get_object", "SlowDown", "", 503, expected_params={"Bucket": BUCKET, "Key": KEY})
    with pytest.raises(ClientError):
        input_value(_context(s3))
