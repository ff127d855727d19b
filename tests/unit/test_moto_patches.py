"""aijobs_cli.moto_patches' SQS and routing patches answer as moto does (each patched path run
against moto's own code, moto_patches.ORIGINALS, on the same data); the patches apply only to the
moto release they were written for; and every patch module declares that release and its upstream
reference. The DynamoDB patches: test_moto_patches_dynamodb.py."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import backends, mock_aws

from aijobs_cli import moto_patches
from aijobs_cli.moto_patches import sqs_queue_attributes

ACCOUNT, REGION = "123456789012", "us-east-1"


# --- server_module_listing: request routing -------------------------------------------------------


def test_moto_lists_its_services_once(monkeypatch: pytest.MonkeyPatch) -> None:
    moto_patches.apply()
    expected = list(moto_patches.ORIGINALS["list_of_moto_modules"]())
    assert "dynamodb" in expected
    listed: list[str] = []

    def listdir(path: str) -> list[str]:
        listed.append(path)
        return []

    monkeypatch.setattr(os, "listdir", listdir)
    assert list(backends.list_of_moto_modules()) == expected
    assert list(backends.list_of_moto_modules()) == expected
    assert listed == []


# --- sqs_queue_attributes: built from what is asked, counted in one walk --------------------------


@pytest.fixture
def queues() -> Iterator[dict[str, str]]:
    """Queues of every shape moto gives attributes to, holding messages in every state: waiting,
    in flight, delayed. Name -> URL."""
    moto_patches.apply()
    with mock_aws():
        sqs = boto3.client("sqs", region_name=REGION)
        dlq = sqs.create_queue(QueueName="dead")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        urls = {
            "plain": sqs.create_queue(QueueName="plain")["QueueUrl"],
            "redriven": sqs.create_queue(
                QueueName="redriven",
                Attributes={
                    "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 3}),
                    "KmsMasterKeyId": "alias/aws/sqs",
                    "Policy": json.dumps({"Version": "2012-10-17", "Statement": []}),
                    # Long enough to outlast the test on any machine: a delay that ran out between
                    # two lookups compared below would change a count between them.
                    "DelaySeconds": "900",
                },
            )["QueueUrl"],
            "fifo.fifo": sqs.create_queue(
                QueueName="fifo.fifo", Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true"}
            )["QueueUrl"],
            "dead": dlq,
        }
        for name, url in urls.items():
            for i in range(6):
                if name.endswith(".fifo"):
                    sqs.send_message(QueueUrl=url, MessageBody=f"m{i}", MessageGroupId="g")
                else:
                    sqs.send_message(QueueUrl=url, MessageBody=f"m{i}")
            if not name.endswith(".fifo"):
                sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=600)
            sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, VisibilityTimeout=600)
        yield urls


def _sqs_backend() -> Any:
    from moto.sqs.models import sqs_backends

    return sqs_backends[ACCOUNT][REGION]


def _moto_lookup(queue_name: str, names: list[str]) -> Any:
    try:
        return moto_patches.ORIGINALS["SQSBackend.get_queue_attributes"](_sqs_backend(), queue_name, names)
    except Exception as error:  # compared with the patched lookup's error below
        return type(error), str(error)


def _patched_lookup(queue_name: str, names: list[str]) -> Any:
    try:
        return _sqs_backend().get_queue_attributes(queue_name, names)
    except Exception as error:
        return type(error), str(error)


def test_queue_attributes_are_motos(queues: dict[str, str]) -> None:
    for name in queues:
        queue = _sqs_backend().get_queue(name)
        expected = moto_patches.ORIGINALS["Queue.attributes"].fget(queue)
        assert list(queue.attributes.items()) == list(expected.items()), name
    counts = _sqs_backend().get_queue("plain").attributes
    # Waiting, in flight and delayed are all there, so the counts are compared on something.
    waiting_delayed_in_flight = [int(counts[n]) for n in sqs_queue_attributes._SQS_COUNTS]
    assert waiting_delayed_in_flight == [4, 1, 2]


def test_named_attribute_lookups_answer_as_moto_does(queues: dict[str, str]) -> None:
    queue = _sqs_backend().get_queue("plain")
    every = [*queue.BASE_ATTRIBUTES, *queue.FIFO_ATTRIBUTES, *queue.KMS_ATTRIBUTES]
    asks = [
        *([name] for name in every),
        every,
        ["All"],
        ["MessageRetentionPeriod", "ApproximateNumberOfMessages", "MessageRetentionPeriod"],
        ["ContentBasedDeduplication", "QueueArn"],  # a FIFO attribute of a standard queue: left out
        [],
        ["NoSuchAttribute"],
        ["QueueArn", ""],
    ]
    for name in [*queues, "missing-queue"]:
        for ask in asks:
            assert _patched_lookup(name, ask) == _moto_lookup(name, ask), (name, ask)


def test_a_named_lookup_does_not_walk_the_messages(queues: dict[str, str]) -> None:
    """What made a receive quadratic: moto reads each returned message's retention period through a
    lookup that walked the whole queue three times."""
    walks: list[int] = []

    class Watched(list[Any]):
        def __iter__(self) -> Iterator[Any]:
            walks.append(1)
            return super().__iter__()

    queue = _sqs_backend().get_queue("plain")
    queue._messages = Watched(queue._messages)
    asked = ["MessageRetentionPeriod", "QueueArn"]
    assert _sqs_backend().get_queue_attributes("plain", asked) == _moto_lookup("plain", asked)
    assert len(walks) >= len(asked)  # moto's: every attribute built (counts included) per name asked
    walks.clear()
    assert _sqs_backend().get_queue_attributes("plain", asked)["MessageRetentionPeriod"] == 345600
    assert walks == []
    assert (
        int(
            _sqs_backend().get_queue_attributes("plain", ["ApproximateNumberOfMessages"])[
                "ApproximateNumberOfMessages"
            ]
        )
        == 4
    )
    assert len(walks) == 1  # the counts in one walk


def test_moto_sqs_clock_reads_the_same_time() -> None:
    moto_patches.apply()
    from moto.sqs import models as sqs_models

    moto_millis = moto_patches.ORIGINALS["sqs.unix_time_millis"]
    before = moto_millis()
    now = sqs_models.unix_time_millis()  # type: ignore[attr-defined]
    after = moto_millis()
    assert before - 1 <= now <= after + 1  # moto's clock has microseconds: 1 ms either side
    moment = datetime(2026, 11, 30, 12, 0, 0)
    assert sqs_models.unix_time(moment) == moto_patches.ORIGINALS["sqs.unix_time"](moment)  # type: ignore[attr-defined]
    assert sqs_models.unix_time_millis(moment) == moto_millis(moment)  # type: ignore[attr-defined]


class _Crowded:
    """An in-flight message whose group is read while another thread receives one more: reading
    `group_id` adds a message to the set being iterated, as the server's other threads do."""

    def __init__(self, pending: set[Any], group: str) -> None:
        self._pending, self._group = pending, group

    @property
    def group_id(self) -> str:
        if len(self._pending) < 50:
            self._pending.add(_Crowded(self._pending, f"g{len(self._pending)}"))
        return self._group


def test_pending_message_groups_survive_a_receive_on_another_thread() -> None:
    moto_patches.apply()
    from moto.sqs import models as sqs_models

    class Queue:
        def __init__(self) -> None:
            self._pending_messages: set[Any] = set()
            self._pending_messages.add(_Crowded(self._pending_messages, "first"))

    moto_property = moto_patches.ORIGINALS["Queue.pending_message_groups"]
    with pytest.raises(RuntimeError, match="Set changed size during iteration"):
        moto_property.fget(Queue())
    assert sqs_models.Queue.pending_message_groups.fget(Queue()) == {"first"}  # type: ignore[attr-defined]
    # The groups moto finds when nothing moves underneath.
    steady = Queue()
    steady._pending_messages = {type("M", (), {"group_id": g})() for g in ("a", "b", None)}
    assert sqs_models.Queue.pending_message_groups.fget(steady) == moto_property.fget(steady) == {"a", "b"}  # type: ignore[attr-defined]


def test_the_patches_apply_only_to_the_moto_release_they_were_written_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from importlib import metadata

    assert metadata.version("moto") == moto_patches.MOTO_VERSION  # the pin and the constant agree
    pinned = (Path(__file__).resolve().parents[2] / "requirements/dev.in").read_text()
    assert f"moto[server]=={moto_patches.MOTO_VERSION}" in pinned
    monkeypatch.setattr(moto_patches, "_applied", False)
    monkeypatch.setattr(metadata, "version", lambda _name: "9.9.9")

    def patched(*_args: Any) -> None:
        raise AssertionError("a patch was installed on a moto release it was not written for")

    for patch in moto_patches.PATCHES:
        monkeypatch.setattr(patch, "install", patched)
    with pytest.warns(RuntimeWarning, match="moto 9.9.9 is installed"):
        moto_patches.apply()
    moto_patches.apply()  # once per process: no second warning, nothing installed


@pytest.mark.parametrize("patch", moto_patches.PATCHES, ids=lambda patch: patch.__name__.rsplit(".", 1)[-1])
def test_every_patch_declares_its_moto_release_and_upstream_reference(patch: Any) -> None:
    """Each module names the moto release it was written for (the guard checks it) and where the
    problem stands upstream: a getmoto/moto issue or pull request, or the issue we would file."""
    name = patch.__name__.rsplit(".", 1)[-1]
    assert patch.MOTO_VERSION == moto_patches.MOTO_VERSION
    assert callable(patch.install)
    docstring = patch.__doc__ or ""
    assert f"Written for moto MOTO_VERSION ({patch.MOTO_VERSION})" in docstring
    assert patch.UPSTREAM == "not reported upstream" or patch.UPSTREAM.startswith(
        ("https://github.com/getmoto/moto/issues/", "https://github.com/getmoto/moto/pull/")
    )
    if patch.UPSTREAM == "not reported upstream":
        assert "Upstream: not reported upstream" in docstring
    else:
        number = patch.UPSTREAM.rsplit("/", 1)[-1]
        assert f"getmoto/moto#{number}" in docstring
    page = (Path(__file__).resolve().parents[2] / "docs/reference/moto-patches.md").read_text()
    assert f"`{name}`" in page  # its paragraph: what it changes, upstream or not, the issue text
