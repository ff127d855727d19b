"""Record the AWS calls a piece of code makes, from botocore's own events (no patching).

Each call becomes the IAM actions it needs: a `TransactWriteItems` is authorized item by item
(`PutItem`, `UpdateItem`, `DeleteItem`, `ConditionCheckItem` on each item's table), a `Query` on
an index is authorized on `table/index/*`. The infra tests compare these with each function's
policy; the benchmarks count them per job.

With a `Meter` (`recording_calls(meter=...)`, moto only), each call is also measured as AWS bills
it (`aijobs_cli.sizing.call_profile.Call`): the items it touched are read from the moto backend right
before and right after the request, sized by DynamoDB's rules and turned into request units,
index writes included. The call profile the cost estimator reads is made of these.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import boto3

from aijobs import aws
from aijobs.store.keys import PK, SK
from aijobs_cdk.stage_config import DLQ_SUFFIX
from aijobs_cli.sizing.call_profile import (
    Call,
    IndexWrite,
    ItemAccess,
    chunks,
    item_size,
    key_template,
    read_units,
    write_units,
)

_TRANSACT_ITEM_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}
_BATCH_WRITE_ACTIONS = {"PutRequest": "PutItem", "DeleteRequest": "DeleteItem"}


# The account in the ARNs the recorder writes where a request names none (moto's default; the
# infra tests resolve the template's AWS::AccountId to it too).
ACCOUNT = "123456789012"
# Where a cross-region inference profile is recorded to route a call: another region than the
# caller's, as cross-region inference may pick any region of the profile's geography.
PROFILE_DESTINATION_REGION = "us-west-2"


@dataclass(frozen=True)
class Access:
    """One IAM action on one resource: `dynamodb:PutItem` on a table (and its leading key), or
    (S3, Bedrock) on a resource ARN with the condition keys IAM sees in the request's context
    (`bedrock:InferenceProfileArn` when a model is called through a profile)."""

    action: str
    table: str | None = None
    index: bool = False
    leading_key: str | None = None
    resource: str | None = None
    context: tuple[tuple[str, str], ...] = ()


@dataclass
class CallLog:
    calls: list[tuple[str, str]] = field(default_factory=list)  # (service, operation) as sent
    accesses: list[Access] = field(default_factory=list)
    # Set to a list to keep each call's parameters too (the benchmark replays them).
    keep_params: list[tuple[str, str, dict[str, Any]]] | None = None
    # With a Meter: every call as billed, in order.
    measured: list[Call] = field(default_factory=list)

    def count(self, service: str | None = None) -> int:
        return sum(1 for s, _ in self.calls if service is None or s == service)

    def clear(self) -> None:
        self.calls.clear()
        self.accesses.clear()
        self.measured.clear()

    def record(
        self, service: str, operation: str, params: dict[str, Any], region: str = "", presign: bool = False
    ) -> None:
        self.calls.append((service, operation))
        self.accesses.extend(_accesses(service, operation, params, region, presign))
        if self.keep_params is not None:
            self.keep_params.append((service, operation, copy.deepcopy(params)))


def _plain(value: Any) -> Any:
    """A key value as the resource layer passes it, or as the low-level client does ({"S": ...})."""
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in ("S", "N", "B"):
        return next(iter(value.values()))
    return value


def _leading(key_or_item: dict[str, Any] | None) -> str | None:
    if not key_or_item or PK not in key_or_item:
        return None
    return str(_plain(key_or_item[PK]))


# S3 operations authorized by another action than their name (Service Authorization Reference).
_S3_ACTIONS = {
    "HeadObject": "GetObject",
    "CreateMultipartUpload": "PutObject",
    "UploadPart": "PutObject",
    "CompleteMultipartUpload": "PutObject",
    "ListObjects": "ListBucket",
    "ListObjectsV2": "ListBucket",
    "DeleteObjects": "DeleteObject",
}
_S3_BUCKET_OPERATIONS = {"ListObjects", "ListObjectsV2", "DeleteObjects"}


def _s3_object(bucket: str, key: str) -> str:
    return f"arn:aws:s3:::{bucket}/{key}"


# The key of a presigned POST: botocore signs it as the bucket's `CreateBucket` (a POST to the
# bucket) with only `Bucket` in the parameters; the key is in the form's fields.
PRESIGNED_POST_KEY = "<presigned POST: the key in the form>"


def _s3_accesses(operation: str, params: dict[str, Any], presign: bool = False) -> list[Access]:
    bucket = str(params.get("Bucket", ""))
    if presign and operation == "CreateBucket":
        return [Access("s3:PutObject", resource=_s3_object(bucket, PRESIGNED_POST_KEY))]
    action = "s3:" + _S3_ACTIONS.get(operation, operation)
    if operation in _S3_BUCKET_OPERATIONS:
        prefix = (("s3:prefix", str(params["Prefix"])),) if "Prefix" in params else ()
        return [Access(action, resource=f"arn:aws:s3:::{bucket}", context=prefix)]
    return [Access(action, resource=_s3_object(bucket, str(params.get("Key", ""))))]


def model_accesses(model_id: str, region: str) -> list[Access]:
    """What IAM checks for one model call (`bedrock:InvokeModel`, which Converse and
    StartAsyncInvoke use too): a foundation model in the caller's region, or an inference profile
    and then, in the region the profile routes to, its foundation model with the profile's ARN as
    `bedrock:InferenceProfileArn`. Plain model ids only (`amazon.x`, `us.amazon.x`)."""
    from aijobs.provider_plan import base_model_id, is_inference_profile

    action = "bedrock:InvokeModel"
    if not is_inference_profile(model_id):
        return [Access(action, resource=f"arn:aws:bedrock:{region}::foundation-model/{model_id}")]
    profile = f"arn:aws:bedrock:{region}:{ACCOUNT}:inference-profile/{model_id}"
    routed = f"arn:aws:bedrock:{PROFILE_DESTINATION_REGION}::foundation-model/{base_model_id(model_id)}"
    return [
        Access(action, resource=profile),
        Access(action, resource=routed, context=(("bedrock:InferenceProfileArn", profile),)),
    ]


def _bedrock_accesses(operation: str, params: dict[str, Any], region: str) -> list[Access]:
    if operation in ("Converse", "ConverseStream", "InvokeModel", "InvokeModelWithResponseStream"):
        return model_accesses(str(params["modelId"]), region)
    if operation == "StartAsyncInvoke":
        # `bedrock:InvokeModel` on the model and on the invocation it creates; Bedrock then writes
        # the output into S3 as the caller (`s3:PutObject`, in a folder named after the invocation).
        uri = str(params["outputDataConfig"]["s3OutputDataConfig"]["s3Uri"]).removeprefix("s3://")
        bucket, _, prefix = uri.partition("/")
        invocation = f"arn:aws:bedrock:{region}:{ACCOUNT}:async-invoke/*"
        return [
            *model_accesses(str(params["modelId"]), region),
            Access("bedrock:InvokeModel", resource=invocation),
            Access(
                "s3:PutObject", resource=_s3_object(bucket, f"{prefix.rstrip('/')}/<invocation>/output.mp4")
            ),
        ]
    if operation == "GetAsyncInvoke":
        return [Access("bedrock:GetAsyncInvoke", resource=str(params["invocationArn"]))]
    if operation == "GetFoundationModel":
        model = str(params["modelIdentifier"])
        return [
            Access(
                "bedrock:GetFoundationModel", resource=f"arn:aws:bedrock:{region}::foundation-model/{model}"
            )
        ]
    return [Access(f"bedrock:{operation}")]


def _accesses(
    service: str, operation: str, params: dict[str, Any], region: str = "", presign: bool = False
) -> list[Access]:
    if service == "s3":
        return _s3_accesses(operation, params, presign)
    if service in ("bedrock", "bedrock-runtime"):
        return _bedrock_accesses(operation, params, region)
    if service == "polly" and operation == "StartSpeechSynthesisTask":
        # Polly writes the audio into S3 as the caller: `<prefix><task id>.<format>`.
        audio = f"{params.get('OutputS3KeyPrefix', '')}<task>.{params.get('OutputFormat', 'mp3')}"
        return [
            Access("polly:StartSpeechSynthesisTask"),
            Access("s3:PutObject", resource=_s3_object(str(params["OutputS3BucketName"]), audio)),
        ]
    if service != "dynamodb":
        return [Access(f"{service}:{operation}")]
    if operation in ("TransactWriteItems", "TransactGetItems"):
        found = []
        for entry in params.get("TransactItems", []):
            ((kind, item),) = entry.items()
            key = item.get("Item") if kind == "Put" else item.get("Key")
            found.append(
                Access(f"dynamodb:{_TRANSACT_ITEM_ACTIONS[kind]}", item["TableName"], False, _leading(key))
            )
        return found
    if operation == "BatchWriteItem":
        return [
            Access(
                f"dynamodb:{_BATCH_WRITE_ACTIONS[kind]}",
                table,
                False,
                _leading(body.get("Item") or body.get("Key")),
            )
            for table, requests in params.get("RequestItems", {}).items()
            for request in requests
            for kind, body in request.items()
        ]
    if operation == "BatchGetItem":
        return [Access("dynamodb:BatchGetItem", table) for table in params.get("RequestItems", {})]
    key = params.get("Item") if operation == "PutItem" else params.get("Key")
    return [
        Access(f"dynamodb:{operation}", params.get("TableName"), bool(params.get("IndexName")), _leading(key))
    ]


@contextmanager
def recording_calls(meter: Meter | None = None) -> Iterator[CallLog]:
    """Record every AWS call made by clients created inside the block (aijobs' cached clients are
    dropped on entry, since botocore copies its event hooks into a client when it is created).
    With `meter`, also measure each call into `log.measured` (moto only)."""
    log = CallLog()
    session = boto3._get_default_session()._session

    def on_call(**event: Any) -> None:
        model = event["model"]
        context = event["context"]
        region = str(context.get("client_region") or "")
        presign = bool(context.get("is_presign_request"))
        log.record(model.service_model.endpoint_prefix, model.name, event["params"], region, presign)
        if meter is not None:
            event["context"][_PARAMS] = copy.deepcopy(event["params"])

    def before_send(**event: Any) -> None:
        assert meter is not None
        meter.before(event["model"], event["params"], event["context"])

    def after_call(**event: Any) -> None:
        assert meter is not None
        call = meter.after(
            event["model"], event["http_response"].status_code, event["parsed"], event["context"]
        )
        log.measured.append(call)

    handlers = [("provide-client-params", on_call)]
    if meter is not None:
        handlers += [("before-call", before_send), ("after-call", after_call)]
    for name, handler in handlers:
        session.register(name, handler)
    aws.reset_clients()
    try:
        yield log
    finally:
        for name, handler in handlers:
            session.unregister(name, handler)
        aws.reset_clients()


# --- measuring calls as billed (moto) -------------------------------------------------------------

_PARAMS = "aijobs_params"
_BEFORE = "aijobs_before"
_TRANSACT_ACTIONS = {"Put": "Put", "Update": "Update", "Delete": "Delete", "ConditionCheck": "ConditionCheck"}
_NAME = re.compile(r"(#?[A-Za-z0-9_]+)\s*=\s*(:[A-Za-z0-9_]+)")

Attributes = dict[str, Any]


@dataclass(frozen=True)
class TableShape:
    """What the meter needs to know of a table: its role and its indexes (all project ALL)."""

    role: str
    indexes: Mapping[str, tuple[str, str]]


def _moto_table(name: str) -> Any:
    from moto.dynamodb.models import dynamodb_backends

    for account in list(dynamodb_backends):
        for region in list(dynamodb_backends[account]):
            table = dynamodb_backends[account][region].tables.get(name)
            if table is not None:
                return table
    raise LookupError(f"table {name} is not in the moto backend")


def _moto_item(table_name: str, key: Mapping[str, Any]) -> Attributes | None:
    """The item's attributes in DynamoDB JSON as stored right now (None if there is none)."""
    from moto.dynamodb.models.dynamo_type import DynamoType

    item = _moto_table(table_name).get_item(DynamoType(dict(key[PK])), DynamoType(dict(key[SK])))
    if item is None:
        return None
    attributes: Attributes = copy.deepcopy(item.to_json()["Attributes"])
    return attributes


def _text(value: Any) -> str:
    return str(_plain(value))


@dataclass
class Meter:
    """Measures each call as billed; `tables` maps a table name to its role and indexes."""

    tables: Mapping[str, TableShape]

    def _shape(self, name: str) -> TableShape:
        return self.tables.get(name) or TableShape(name, {})

    # Items a DynamoDB request touches: (action, table name, key) in request order.
    @staticmethod
    def _targets(operation: str, body: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
        if operation == "TransactWriteItems":
            found = []
            for entry in body["TransactItems"]:
                ((kind, item),) = entry.items()
                key = item["Item"] if kind == "Put" else item["Key"]
                found.append((_TRANSACT_ACTIONS[kind], item["TableName"], {PK: key[PK], SK: key[SK]}))
            return found
        if operation == "TransactGetItems":
            return [("Get", e["Get"]["TableName"], e["Get"]["Key"]) for e in body["TransactItems"]]
        if operation in ("PutItem", "UpdateItem", "DeleteItem", "GetItem"):
            key = body["Item"] if operation == "PutItem" else body["Key"]
            return [(operation.removesuffix("Item"), body["TableName"], {PK: key[PK], SK: key[SK]})]
        if operation == "BatchWriteItem":
            return [
                (kind.removesuffix("Request"), table, {PK: body_[k][PK], SK: body_[k][SK]})
                for table, requests in body["RequestItems"].items()
                for request in requests
                for kind, body_ in request.items()
                for k in ("Item" if kind == "PutRequest" else "Key",)
            ]
        if operation == "BatchGetItem":
            return [
                ("Get", table, {PK: key[PK], SK: key[SK]})
                for table, spec in body["RequestItems"].items()
                for key in spec["Keys"]
            ]
        if operation in ("Query", "DescribeTable", "ListTables"):
            return []
        raise NotImplementedError(f"the meter does not measure dynamodb {operation} yet")

    def before(self, model: Any, request: dict[str, Any], context: dict[str, Any]) -> None:
        if model.service_model.endpoint_prefix != "dynamodb":
            return
        body = json.loads(request["body"] or b"{}")
        targets = self._targets(model.name, body)
        context[_BEFORE] = (body, [(a, t, k, _moto_item(t, k)) for a, t, k in targets])

    def after(self, model: Any, status: int, parsed: Mapping[str, Any], context: dict[str, Any]) -> Call:
        service, operation = model.service_model.endpoint_prefix, model.name
        params: dict[str, Any] = context.get(_PARAMS, {})
        if service == "dynamodb":
            body, before = context[_BEFORE]
            if operation == "Query":
                return self._query(body, parsed)
            return self._items(operation, body, before, ok=status < 300)
        if service in ("sqs", "sns"):
            return self._message(service, operation, params, parsed)
        if service == "s3":
            size = _payload_size(params.get("Body")) if operation == "PutObject" else 0
            if operation == "GetObject":
                size = int(parsed.get("ContentLength") or 0)
            return Call(service=service, operation=operation, bytes=size)
        return Call(service=service, operation=operation)

    def _query(self, body: Mapping[str, Any], parsed: Mapping[str, Any]) -> Call:
        shape = self._shape(body["TableName"])
        items = parsed.get("Items", [])
        if parsed.get("ScannedCount", len(items)) != len(items):
            raise NotImplementedError("a Query with a filter: the meter cannot see the items it read")
        accesses = []
        for returned in items:
            key = {PK: {"S": _text(returned[PK])}, SK: {"S": _text(returned[SK])}}
            stored = _moto_item(body["TableName"], key)
            accesses.append(
                ItemAccess(
                    action="Query", table=shape.role, partition=key_template(_text(returned[PK])),
                    sort=key_template(_text(returned[SK])), bytes=item_size(stored), units=0.0,
                )
            )  # fmt: skip
        consistent = bool(body.get("ConsistentRead"))
        index = body.get("IndexName")
        partition_attribute = shape.indexes[index][0] if index else PK
        return Call(
            service="dynamodb",
            operation="Query",
            table=shape.role,
            index=index,
            partition=_queried_partition(body, partition_attribute),
            consistent=consistent,
            read_units=read_units(sum(a.bytes for a in accesses), consistent=consistent),
            items=tuple(accesses),
        )

    def _items(
        self,
        operation: str,
        body: Mapping[str, Any],
        before: list[tuple[str, str, dict[str, Any], Attributes | None]],
        *,
        ok: bool,
    ) -> Call:
        transactional = operation.startswith("Transact")
        consistent = True if transactional else bool(body.get("ConsistentRead"))
        if operation == "BatchGetItem":
            consistent = all(spec.get("ConsistentRead") for spec in body["RequestItems"].values())
        accesses, reads, writes, index_units = [], 0.0, 0.0, 0.0
        for action, table_name, key, old in before:
            shape = self._shape(table_name)
            new = _moto_item(table_name, key)
            size = max(item_size(old), item_size(new))
            partition, sort = key_template(_text(key[PK])), key_template(_text(key[SK]))
            if action == "Get":
                units = read_units(size, consistent=consistent, transactional=transactional)
                reads += units
                accesses.append(
                    ItemAccess(
                        action="Get",
                        table=shape.role,
                        partition=partition,
                        sort=sort,
                        bytes=size,
                        units=units,
                    )
                )
                continue
            units = write_units(size, transactional=transactional)
            changed = ok and action != "ConditionCheck" and old != new
            indexed = tuple(_index_writes(shape, old, new)) if changed else ()
            writes += units
            index_units += sum(w.units for w in indexed)
            accesses.append(
                ItemAccess(
                    action=action, table=shape.role, partition=partition, sort=sort, bytes=size,
                    changed=changed, units=units, index_writes=indexed,
                )
            )  # fmt: skip
        roles = {a.table for a in accesses}
        return Call(
            service="dynamodb",
            operation=operation,
            table=roles.pop() if len(roles) == 1 else None,
            consistent=consistent if reads else None,
            transactional=transactional,
            read_units=reads,
            write_units=writes,
            index_write_units=index_units,
            items=tuple(accesses),
        )

    @staticmethod
    def _message(service: str, operation: str, params: Mapping[str, Any], parsed: Mapping[str, Any]) -> Call:
        url = str(params.get("QueueUrl", ""))
        role = ("dlq" if url.rsplit("/", 1)[-1].endswith(DLQ_SUFFIX) else "queue") if url else None
        if operation == "SendMessage":
            size = _payload_size(params.get("MessageBody")) + _attributes_size(
                params.get("MessageAttributes")
            )
        elif operation == "SendMessageBatch":
            size = sum(
                _payload_size(e.get("MessageBody")) + _attributes_size(e.get("MessageAttributes"))
                for e in params.get("Entries", [])
            )
        elif operation == "ReceiveMessage":
            size = sum(_payload_size(m.get("Body")) for m in parsed.get("Messages", []))
        elif operation == "Publish":
            size = _payload_size(params.get("Message")) + _payload_size(params.get("Subject"))
        else:  # deletes, visibility changes, attribute reads: no payload
            size = 0
        return Call(service=service, operation=operation, table=role, bytes=size, requests=chunks(size))


def _payload_size(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bytes | bytearray):
        return len(value)
    if isinstance(value, str):
        return len(value.encode("utf-8"))
    if hasattr(value, "read"):
        raise NotImplementedError("the meter measures in-memory payloads only")
    return len(json.dumps(value).encode("utf-8"))


def _attributes_size(attributes: Mapping[str, Any] | None) -> int:
    total = 0
    for name, value in (attributes or {}).items():
        data = value.get("StringValue") or value.get("BinaryValue") or ""
        total += len(name.encode("utf-8")) + len(str(value.get("DataType", "")).encode("utf-8"))
        total += _payload_size(data)
    return total


def _queried_partition(body: Mapping[str, Any], attribute: str) -> str | None:
    """Template of the partition key value in a Query's key condition (`pk = :v`)."""
    names: Mapping[str, str] = body.get("ExpressionAttributeNames", {})
    values: Mapping[str, Any] = body.get("ExpressionAttributeValues", {})
    for name, placeholder in _NAME.findall(body.get("KeyConditionExpression", "")):
        if names.get(name, name) == attribute and placeholder in values:
            return key_template(_text(values[placeholder]))
    return None


def _index_writes(shape: TableShape, old: Attributes | None, new: Attributes | None) -> Iterator[IndexWrite]:
    """The index writes of one changed item (AWS's rules: put, delete, move = 2, update in place)."""
    for index, (index_pk, index_sk) in shape.indexes.items():
        before = old if old is not None and index_pk in old and index_sk in old else None
        after = new if new is not None and index_pk in new and index_sk in new else None
        if before is not None and after is not None:
            moved = (before[index_pk], before[index_sk]) != (after[index_pk], after[index_sk])
            entries = [before, after] if moved else [after]
        else:
            entries = [e for e in (before, after) if e is not None]
        if not entries:
            continue
        yield IndexWrite(
            index=index,
            partition=key_template(_text(entries[-1][index_pk])),
            writes=len(entries),
            bytes=max(item_size(e) for e in entries),
            units=sum(write_units(item_size(e)) for e in entries),
        )
