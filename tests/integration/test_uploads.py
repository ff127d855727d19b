"""Inputs by upload: `POST /uploads` signs a form for one new key under the caller's `inputs/<userId>/`,
a job then refers to it by `inputRef` (refused at submit when missing or over its kind's cap).

moto (mock or server) does not check POST policies: it stores whatever is posted, whatever the
key, type or size. So the conditions S3 enforces are asserted on the signed policy document, and
the upload itself is exercised end to end against the local stack's moto server.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import boto3
import pytest
import requests  # moto's own dependency: an independent multipart client
from typer.testing import CliRunner

from aijobs.store.results import (
    IMAGE_INPUT_MAX_BYTES,
    TEXT_INPUT_MAX_BYTES,
    UPLOAD_FORM_SECONDS,
    UPLOAD_RULES,
    ResultStore,
    UploadForm,
    input_ref_is_owned,
)
from aijobs_cli.local.stack import DEMO_USER, LocalStack
from aijobs_cli.main import app
from aijobs_cli.target import Target
from tests.integration.harness import running_local_stack
from tests.integration.test_api import Api
from tests.integration.test_api import api as api  # the fixture, re-exported

pytestmark = pytest.mark.integration

API_PAGE = Path(__file__).resolve().parents[2] / "docs" / "concepts" / "api.md"
TEXT = "Queues decouple accepting work from doing it. The consumer does the slow part. It retries."


def _upload(api: Api, user: str | None = "alice", **body: Any) -> tuple[int, Any]:
    status, _headers, payload = api.call("api-post-jobs.json", user=user, path="/uploads", body=body)
    return status, payload


def _policy(form: dict[str, Any]) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(base64.b64decode(form["fields"]["policy"]))
    return document


# --- POST /uploads through the handler (moto) ------------------------------------------------------


def test_an_upload_form_is_a_presigned_post_for_one_key_under_the_callers_prefix(api: Api) -> None:
    status, form = _upload(api, contentType="text/plain", size=120, name="notes.txt")
    assert status == 201, form
    assert set(form) == {"inputRef", "url", "method", "fields", "headers", "expiresIn"}
    ref = form["inputRef"]
    assert ref.startswith("inputs/alice/")
    assert ref.endswith("-notes.txt")
    assert input_ref_is_owned(ref, "alice")
    assert (form["method"], form["headers"], form["expiresIn"]) == ("POST", {}, UPLOAD_FORM_SECONDS)
    assert api.stage.resources.bucket in form["url"]
    assert form["fields"]["key"] == ref
    assert form["fields"]["Content-Type"] == "text/plain"
    # What S3 enforces on the upload: exactly this key, bucket and type, 1 byte to the type's cap.
    conditions = _policy(form)["conditions"]
    assert {"key": ref} in conditions
    assert {"bucket": api.stage.resources.bucket} in conditions
    assert {"Content-Type": "text/plain"} in conditions
    assert ["content-length-range", 1, TEXT_INPUT_MAX_BYTES] in conditions
    assert not [c for c in conditions if isinstance(c, list) and c[0] == "starts-with"]


def test_each_form_gets_its_own_key_and_an_image_gets_the_image_cap(api: Api) -> None:
    _s, first = _upload(api, contentType="image/png", size=10, name="cat.png")
    _s, second = _upload(api, contentType="image/png", size=10, name="cat.png")
    assert first["inputRef"] != second["inputRef"]
    assert ["content-length-range", 1, IMAGE_INPUT_MAX_BYTES] in _policy(first)["conditions"]
    _s, nameless = _upload(api, contentType="image/jpeg", size=10)
    assert nameless["inputRef"].startswith("inputs/alice/")
    assert nameless["inputRef"].endswith(".jpg")


@pytest.mark.parametrize(
    "name",
    ["../../bob/x.txt", "/etc/passwd", "..", "...", "a b?c&d.txt", "ünï cødé.txt", "..\\..\\bob\\x",
     "inputs/bob/x.txt", "x" * 200, "-", "%2e%2e%2fbob"],
)  # fmt: skip
def test_a_client_name_never_leaves_the_callers_prefix(api: Api, name: str) -> None:
    status, form = _upload(api, contentType="text/plain", size=5, name=name)
    assert status == 201, form
    ref = form["inputRef"]
    assert input_ref_is_owned(ref, "alice"), ref
    assert "/" not in ref.removeprefix("inputs/alice/")
    assert {"key": ref} in _policy(form)["conditions"]


@pytest.mark.parametrize(
    ("body", "code", "detail"),
    [
        ({"contentType": "application/pdf", "size": 10}, "unsupported_upload_type", "allowed"),
        ({"contentType": "text/html", "size": 10}, "unsupported_upload_type", "allowed"),
        ({"contentType": "image/png", "size": IMAGE_INPUT_MAX_BYTES + 1}, "upload_too_large", "limit"),
        ({"contentType": "text/plain", "size": TEXT_INPUT_MAX_BYTES + 1}, "upload_too_large", "limit"),
        ({"contentType": "text/plain", "size": 0}, "validation_error", None),
        ({"contentType": "text/plain"}, "validation_error", None),
        ({"contentType": "text/plain", "size": 1, "key": "inputs/bob/x"}, "validation_error", None),
        ({"contentType": "", "size": 1}, "validation_error", None),
    ],
)
def test_a_refused_type_or_size_is_a_422_with_the_reason(
    api: Api, body: dict[str, Any], code: str, detail: str | None
) -> None:
    status, error = _upload(api, **body)
    assert (status, error["code"]) == (422, code), error
    assert error["message"]
    if detail == "allowed":
        assert error["details"]["allowed"] == sorted(UPLOAD_RULES)
    if detail == "limit":
        assert error["details"]["limit"] == UPLOAD_RULES[body["contentType"]]
        assert str(error["details"]["limit"]) in error["message"]


def test_content_type_parameters_and_case_are_normalized(api: Api) -> None:
    status, form = _upload(api, contentType="Text/Plain; charset=utf-8", size=3)
    assert status == 201, form
    assert form["fields"]["Content-Type"] == "text/plain"
    assert {"Content-Type": "text/plain"} in _policy(form)["conditions"]


def test_uploads_need_an_api_key(api: Api) -> None:
    status, error = _upload(api, user=None, contentType="text/plain", size=3)
    assert (status, error["code"]) == (401, "missing_api_key")


def test_upload_form_signs_the_given_key_type_and_cap() -> None:
    class FakeS3:
        def generate_presigned_post(self, **kwargs: Any) -> dict[str, Any]:
            self.kwargs = kwargs
            return {"url": "https://bucket.example/", "fields": {"key": kwargs["Key"], "policy": "p"}}

    s3 = FakeS3()
    form = ResultStore(s3, "bucket").upload_form("inputs/u/k.txt", "text/plain", 99)  # type: ignore[arg-type]
    assert form == UploadForm(
        key="inputs/u/k.txt",
        url="https://bucket.example/",
        fields={"key": "inputs/u/k.txt", "policy": "p"},
        expires_in=UPLOAD_FORM_SECONDS,
    )
    assert s3.kwargs == {
        "Bucket": "bucket",
        "Key": "inputs/u/k.txt",
        "Fields": {"Content-Type": "text/plain"},
        "Conditions": [{"Content-Type": "text/plain"}, ["content-length-range", 1, 99]],
        "ExpiresIn": UPLOAD_FORM_SECONDS,
    }


# --- submit: the object must exist and fit its kind ----------------------------------------------


@pytest.mark.parametrize(
    ("kind", "cap"), [("summary", TEXT_INPUT_MAX_BYTES), ("image-caption", IMAGE_INPUT_MAX_BYTES)]
)
def test_an_input_over_its_kinds_cap_is_a_422_at_submit(api: Api, kind: str, cap: int) -> None:
    s3 = boto3.client("s3")
    bucket = api.stage.resources.bucket
    ledger = api.stage.store_for("alice").ledger
    balance = ledger.account("alice").balance
    s3.put_object(Bucket=bucket, Key="inputs/alice/big", Body=b"a" * (cap + 1))
    status, _h, error = api.call("api-post-jobs.json", body={"kind": kind, "inputRef": "inputs/alice/big"})
    assert (status, error["code"]) == (422, "input_ref_too_large"), error
    assert error["details"] == {"inputRef": "inputs/alice/big", "size": cap + 1, "limit": cap}
    assert api.stage.receive(api.stage.resources.queue_urls[kind]) == []
    assert api.stage.store_for("alice").list_jobs("alice").jobs == []
    assert ledger.account("alice").balance == balance
    # At the cap exactly, it is accepted.
    s3.put_object(Bucket=bucket, Key="inputs/alice/big", Body=b"a" * cap)
    status, _h, accepted = api.call("api-post-jobs.json", body={"kind": kind, "inputRef": "inputs/alice/big"})
    assert status == 202, accepted


@pytest.mark.parametrize(
    ("kind", "content_type", "wanted"),
    [("summary", "image/png", "text"), ("image-caption", "text/plain", "an image")],
)
def test_an_upload_of_the_wrong_type_for_its_kind_is_a_422_at_submit(
    api: Api, kind: str, content_type: str, wanted: str
) -> None:
    bucket = api.stage.resources.bucket
    boto3.client("s3").put_object(Bucket=bucket, Key="inputs/alice/x", Body=b"data", ContentType=content_type)
    status, _h, error = api.call("api-post-jobs.json", body={"kind": kind, "inputRef": "inputs/alice/x"})
    assert (status, error["code"]) == (422, "input_ref_wrong_type"), error
    assert f"takes {wanted} input" in error["message"]
    assert api.stage.receive(api.stage.resources.queue_urls[kind]) == []


def test_the_openapi_document_has_the_upload_operation(api: Api) -> None:
    _s, _h, document = api.call("api-get-openapi.json", user=None)
    operation = document["paths"]["/uploads"]["post"]
    assert (operation["operationId"], operation["tags"]) == ("createUpload", ["uploads"])
    responses = operation["responses"]
    assert {int(code) for code in responses} == {201, 400, 401, 413, 415, 422, 500}
    success = responses["201"]["content"]["application/json"]["schema"]
    assert success == {"$ref": "#/components/schemas/PresignedUpload"}
    for code, response in responses.items():
        if int(code) >= 400:
            assert response["content"]["application/json"]["schema"] == {
                "$ref": "#/components/schemas/ErrorBody"
            }
    schemas = document["components"]["schemas"]
    assert set(schemas["UploadRequest"]["required"]) == {"contentType", "size"}
    assert set(schemas["PresignedUpload"]["properties"]) == {
        "inputRef", "url", "method", "fields", "headers", "expiresIn"
    }  # fmt: skip


def test_the_api_page_documents_every_upload_rule() -> None:
    readme = API_PAGE.read_text()
    for content_type, cap in UPLOAD_RULES.items():
        assert f"`{content_type}`" in readme, content_type
        assert f"{cap:,}" in readme, cap


# --- end to end on the local stack (moto server) ---------------------------------------------------


class _RefusingS3(BaseHTTPRequestHandler):
    """What S3 answers a POST that breaks its policy."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = (
            b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>AccessDenied</Code><Message>Invalid "
            b'according to Policy: Policy Condition failed: ["content-length-range", 1, 5]</Message></Error>'
        )
        self.send_response(403)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture(scope="class")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    """A local stack for one test class (moto's state is per process): stopped when the class ends,
    before any later test could run under `mock_aws`."""
    with running_local_stack(tmp_path_factory.mktemp("uploads")) as local:
        yield local


@pytest.fixture(scope="class")
def client(stack: LocalStack) -> Target:
    assert stack.info_file is not None
    return Target.from_info_file(stack.info_file)


class TestOnTheLocalStack:
    """Upload with the form, submit by reference, and the CLI's `submit --file`, over HTTP."""

    @staticmethod
    def _wait(client: Target, job_id: str, timeout: float = 60) -> Any:
        deadline = time.monotonic() + timeout
        job: Any = None
        while time.monotonic() < deadline:
            job = client.request("GET", f"/jobs/{job_id}").body
            if job["status"] in ("succeeded", "failed_final"):
                return job
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} did not finish: {job}")

    def _cli(self, stack: LocalStack, *args: str) -> Any:
        return CliRunner().invoke(app, [*args, "--info-file", str(stack.info_file)])

    def test_upload_with_the_form_then_submit_by_reference(self, stack: LocalStack, client: Target) -> None:
        response = client.request("POST", "/uploads", {"contentType": "text/plain", "size": len(TEXT)})
        assert response.status == 201, response.body
        form = response.body
        assert form["url"].startswith(stack.endpoint_url)  # the local S3 endpoint, not AWS
        ref = form["inputRef"]
        assert ref.startswith(f"inputs/{DEMO_USER}/")
        # Any multipart client: the fields as given, then the file.
        uploaded = requests.post(
            form["url"], data=form["fields"], files={"file": ("t.txt", TEXT.encode())}, timeout=30
        )
        assert uploaded.status_code in (200, 201, 204), uploaded.text
        head = boto3.client("s3").head_object(Bucket=stack.info()["bucket"], Key=ref)
        assert (head["ContentLength"], head["ContentType"]) == (len(TEXT), "text/plain")
        submitted = client.request("POST", "/jobs", {"kind": "summary", "inputRef": ref})
        assert submitted.status == 202, submitted.body
        job = self._wait(client, submitted.body["jobId"])
        assert (job["status"], job["attempts"]) == ("succeeded", 1), job
        assert job["result"]["summary"]

    def test_cli_submit_file_uploads_then_submits(self, stack: LocalStack, tmp_path: Path) -> None:
        notes = tmp_path / "notes.txt"
        notes.write_text(TEXT)
        result = self._cli(stack, "submit", "summary", "--file", str(notes), "--wait", "--json")
        assert result.exit_code == 0, result.output
        job = json.loads(result.stdout)
        assert (job["kind"], job["status"]) == ("summary", "succeeded"), job
        assert job["result"]["summary"]

    def test_cli_submit_image_file_for_a_caption(self, stack: LocalStack, tmp_path: Path) -> None:
        image = tmp_path / "pixel.png"
        image.write_bytes(base64.b64decode(
            "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
        ))  # fmt: skip
        result = self._cli(stack, "submit", "image-caption", "--file", str(image), "--wait", "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["status"] == "succeeded", result.stdout

    @pytest.mark.parametrize(
        ("files", "args", "code", "message"),
        [
            ({}, ["summary", "--file", "{dir}/missing.txt"], 1, "no such file"),
            ({"a.txt": b"x"}, ["summary", "words", "--file", "{dir}/a.txt"], 1, "one of them"),
            ({}, ["summary"], 1, "one of them"),
            ({"a.pdf": b"%PDF-1.4"}, ["summary", "--file", "{dir}/a.pdf"], 2, "unsupported_upload_type"),
            ({"noext": b"x"}, ["summary", "--file", "{dir}/noext"], 1, "--content-type"),
            ({"empty.txt": b""}, ["summary", "--file", "{dir}/empty.txt"], 1, "empty"),
            (
                {"big.png": b"\x89PNG" + b"0" * IMAGE_INPUT_MAX_BYTES},
                ["image-caption", "--file", "{dir}/big.png"],
                2,
                "upload_too_large",
            ),
        ],
    )
    def test_cli_submit_file_failures_exit_non_zero_with_a_message(
        self,
        stack: LocalStack,
        tmp_path: Path,
        files: dict[str, bytes],
        args: list[str],
        code: int,
        message: str,
    ) -> None:
        for name, data in files.items():
            (tmp_path / name).write_bytes(data)
        result = self._cli(stack, "submit", *[arg.format(dir=tmp_path) for arg in args])
        assert result.exit_code == code, result.output
        assert message in result.output

    def test_cli_reports_an_upload_that_s3_refuses(
        self, stack: LocalStack, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        server = HTTPServer(("127.0.0.1", 0), _RefusingS3)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        signed = ResultStore.upload_form

        def elsewhere(store: ResultStore, *args: Any, **kwargs: Any) -> UploadForm:
            form = signed(store, *args, **kwargs)
            return UploadForm(
                form.key, f"http://127.0.0.1:{server.server_address[1]}/", form.fields, form.expires_in
            )

        monkeypatch.setattr(ResultStore, "upload_form", elsewhere)
        notes = tmp_path / "notes.txt"
        notes.write_text(TEXT)
        try:
            result = self._cli(stack, "submit", "summary", "--file", str(notes))
        finally:
            server.shutdown()
            server.server_close()
        assert result.exit_code == 1, result.output
        assert "the upload was refused: 403 AccessDenied" in result.output
        assert "content-length-range" in result.output
