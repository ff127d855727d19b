"""The OpenAPI document tells the truth: operations, status codes, error bodies, kinds, 405."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.test_api import Api
from tests.integration.test_api import api as api  # the fixture, re-exported

pytestmark = pytest.mark.integration

KINDS = "summary;embedding;tts-generate"
# What each operation can answer besides its success (see aijobs.api.routes and api.service).
EXPECTED: dict[tuple[str, str], tuple[str, set[int]]] = {
    ("/jobs", "post"): ("createJob", {202, 400, 401, 402, 409, 413, 415, 422, 429, 500, 503}),
    ("/jobs/{job_id}", "get"): ("getJob", {200, 401, 404, 422, 500}),
    ("/jobs/{job_id}/cancel", "post"): ("cancelJob", {200, 202, 401, 404, 409, 422, 500, 503}),
    ("/jobs/{job_id}/children", "get"): ("listJobChildren", {200, 400, 401, 404, 422, 500}),
    ("/jobs", "get"): ("listJobs", {200, 400, 401, 422, 500}),
    ("/credits", "get"): ("getCredits", {200, 401, 422, 500}),
    ("/webhooks/secret", "post"): ("rotateWebhookSecret", {201, 401, 409, 422, 500}),
    ("/webhooks/secret", "get"): ("getWebhookSecret", {200, 401, 422, 500}),
    ("/classify", "post"): ("classify", {200, 400, 401, 402, 409, 413, 415, 422, 429, 500, 503}),
    ("/uploads", "post"): ("createUpload", {201, 400, 401, 413, 415, 422, 500}),
    # The operator routes (aijobs.api.admin): every one may refuse a non-operator (403) or a fast one (429).
    ("/admin/overview", "get"): ("adminOverview", {200, 401, 403, 422, 429, 500}),
    ("/admin/jobs", "get"): ("adminListJobs", {200, 400, 401, 403, 422, 429, 500}),
    ("/admin/jobs/{user_id}/{job_id}", "get"): ("adminGetJob", {200, 404, 401, 403, 422, 429, 500}),
    ("/admin/jobs/{user_id}/{job_id}/rerun", "post"): (
        "adminRerunJob",
        {200, 404, 409, 401, 403, 422, 429, 500},
    ),
    ("/admin/jobs/{user_id}/{job_id}/fail-final", "post"): (
        "adminFailFinal",
        {200, 400, 404, 409, 415, 401, 403, 422, 429, 500},
    ),
    ("/admin/reruns", "post"): ("adminBatchRerun", {200, 400, 415, 401, 403, 422, 429, 500}),
    ("/admin/dead-letters", "get"): ("adminDeadLetters", {200, 401, 403, 422, 429, 500}),
    ("/admin/kinds/{kind}/pause", "post"): ("adminPauseKind", {200, 401, 403, 422, 429, 500}),
    ("/admin/kinds/{kind}/resume", "post"): ("adminResumeKind", {200, 401, 403, 422, 429, 500}),
    ("/admin/tenants/{user_id}/credits", "get"): ("adminTenantCredits", {200, 404, 401, 403, 422, 429, 500}),
    ("/admin/spend", "get"): ("adminSpend", {200, 401, 403, 422, 429, 500}),
}


@pytest.fixture
def stage_values(stage_values: dict[str, str]) -> dict[str, str]:
    return {**stage_values, "QUEUE_NAMES": KINDS}


def _document(api: Api) -> dict[str, Any]:
    status, _h, document = api.call("api-get-openapi.json", user=None)
    assert status == 200
    return dict(document)


def test_every_operation_documents_its_status_codes_with_the_error_body(api: Api) -> None:
    document = _document(api)
    operations = {
        (path, method): operation
        for path, item in document["paths"].items()
        for method, operation in item.items()
    }
    assert set(operations) == set(EXPECTED)
    for key, (operation_id, codes) in EXPECTED.items():
        operation = operations[key]
        assert operation["operationId"] == operation_id
        assert operation["tags"]
        assert {int(code) for code in operation["responses"]} == codes, key
        for code, response in operation["responses"].items():
            schema = response["content"]["application/json"]["schema"]
            if int(code) >= 400:
                assert schema == {"$ref": "#/components/schemas/ErrorBody"}, (key, code)
            else:
                assert schema.get("$ref") != "#/components/schemas/ErrorBody"
    error_body = document["components"]["schemas"]["ErrorBody"]
    assert set(error_body["properties"]) == {"code", "message", "details"}
    assert set(error_body["required"]) == {"code", "message"}
    assert "Retry-After" in operations[("/jobs", "post")]["responses"]["503"]["headers"]
    assert "Retry-After" in operations[("/jobs", "post")]["responses"]["429"]["headers"]
    assert "Location" in operations[("/jobs", "post")]["responses"]["202"]["headers"]


def test_kind_is_an_enum_of_the_stages_kinds(api: Api) -> None:
    document = _document(api)
    kinds = KINDS.split(";")
    assert document["components"]["schemas"]["JobRequest"]["properties"]["kind"]["enum"] == kinds
    (kind,) = [p for p in document["paths"]["/jobs"]["get"]["parameters"] if p["name"] == "kind"]
    assert kind["schema"]["enum"] == kinds
    status, _h, body = api.call("api-post-jobs.json", body={"kind": "video-generate", "input": "x"})
    assert (status, body["code"]) == (422, "unknown_kind")


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [("DELETE", "/jobs", "GET, POST"), ("PUT", "/jobs/01ARZ3NDEKTSV4RRFFQ69G5FAV", "GET"),
     ("PATCH", "/credits", "GET"), ("GET", "/classify", "POST"), ("POST", "/openapi.json", "GET")],
)  # fmt: skip
def test_a_wrong_method_on_a_known_path_is_405_with_allow(
    api: Api, method: str, path: str, allow: str
) -> None:
    # Even with a body that would be refused (no JSON content type): the method is wrong first.
    for user in ("alice", None):
        status, headers, body = api.call(
            "api-get-job.json", user=user, method=method, path=path, headers={"content-type": "text/plain"}
        )
        assert (status, body["code"], headers["Allow"]) == (405, "method_not_allowed", allow), body
        assert body["message"]
        assert body["details"] == {"allowed": allow.split(", ")}


def test_an_unknown_path_is_still_404(api: Api) -> None:
    status, headers, body = api.call("api-get-job.json", method="DELETE", path="/nowhere")
    assert (status, body["code"]) == (404, "route_not_found")
    assert "Allow" not in headers
