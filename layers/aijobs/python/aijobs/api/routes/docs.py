"""`/openapi.json`: the API's OpenAPI document, generated from the routes and the stage's kinds."""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.api_gateway import Router

from aijobs.api.wiring import service

API_VERSION = "1"

router = Router()  # type: ignore[no-untyped-call]  # powertools: Router.__init__ is unannotated


@router.get("/openapi.json", include_in_schema=False)
def openapi() -> Response[Any]:
    document = _openapi_document(tuple(service().queues.kinds))
    return Response(status_code=200, content_type=content_types.APPLICATION_JSON, body=document)


@lru_cache(maxsize=4)
def _openapi_document(kinds: tuple[str, ...]) -> str:
    """The generated document, with what the generator cannot express patched in.

    The stage's kinds are configuration, not code: `kind` becomes an enum of them here.
    """
    # powertools' OpenAPI models (a hundred pydantic classes) load here, on the first request for
    # the document: no other route needs them.
    from aws_lambda_powertools.event_handler.openapi.models import HTTPBearer

    resolver = router.api_resolver
    assert isinstance(resolver, APIGatewayHttpResolver), "the docs router is not included in the app"
    document: dict[str, Any] = json.loads(
        resolver.get_openapi_json_schema(
            title="aijobs",
            version=API_VERSION,
            description=(
                "Submit asynchronous AI jobs and poll their status. Every error is an `ErrorBody`; "
                "a known path called with another method answers 405 with an `Allow` header."
            ),
            security_schemes={"apiKey": HTTPBearer(description="Authorization: Bearer <api key>")},
            security=[{"apiKey": []}],
        )
    )
    kind_schema = {"type": "string", "enum": list(kinds)}
    document["components"]["schemas"]["JobRequest"]["properties"]["kind"].update(kind_schema)
    _describe_kind_options(document, kinds)
    document["components"]["schemas"]["BatchRerunRequest"]["properties"]["kind"].update(kind_schema)
    listings = [("/jobs", "get"), *[(path, method) for path in document["paths"] if path.startswith("/admin/")
                                    for method in document["paths"][path]]]  # fmt: skip
    for path, method in listings:
        for parameter in document["paths"][path][method].get("parameters", []):
            if parameter["name"] == "kind":
                parameter["schema"] = {**kind_schema, "title": "Kind"}
    return json.dumps(document)


def _describe_kind_options(document: dict[str, Any], kinds: tuple[str, ...]) -> None:
    """Each kind's options model as a component schema (`<Kind>Options`), and the map from kind to
    it on `JobRequest.options` (`x-options-by-kind`): what `POST /jobs` checks at submit."""
    from aijobs.kinds.registry import kind as kind_of
    from aijobs.workflows.registry import workflow

    schemas = document["components"]["schemas"]
    by_kind: dict[str, dict[str, str]] = {}
    for name in kinds:
        definition = workflow(name)
        declaration = kind_of(definition.child_kind if definition is not None else name)
        if declaration is None:
            continue
        schema = declaration.options_model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        if definition is not None:  # a workflow takes its own options besides its child kind's
            for option in definition.all_options:
                kind = "integer" if option.integer else "number"
                schema.setdefault("properties", {})[option.name] = {
                    "type": kind, "minimum": option.low, "maximum": option.high,
                    "default": option.default, "description": option.doc,
                }  # fmt: skip
        component = "".join(part.title() for part in name.split("-")) + "Options"
        schema["title"] = component
        schema["description"] = f"options of `{name}`: {declaration.description}"
        schemas[component] = schema
        by_kind[name] = {"$ref": f"#/components/schemas/{component}"}
    options = schemas["JobRequest"]["properties"]["options"]
    options["x-options-by-kind"] = by_kind
    options["description"] = "kind-specific options: see x-options-by-kind (an unknown option is a 422)"
