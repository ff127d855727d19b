"""Two API containers of the local stack resolve at once, each in its own thread with its own
resolver: each route reads its own request (powertools keeps the current event on a class every
resolver shares; aijobs.api.app.ContainerResolver keeps it on the resolver)."""

from __future__ import annotations

import json
import threading
from types import SimpleNamespace
from typing import Any

from aws_lambda_powertools.event_handler.api_gateway import Router

from aijobs.api.app import ContainerResolver


def _container(entered: threading.Event, proceed: threading.Event) -> ContainerResolver:
    router = Router()  # type: ignore[no-untyped-call]  # powertools: Router.__init__ is unannotated

    @router.post("/echo")
    def echo() -> dict[str, Any]:
        entered.set()
        assert proceed.wait(10)
        return {"body": router.current_event.json_body, "context": router.lambda_context.function_name}

    resolver = ContainerResolver()
    resolver.include_router(router)
    return resolver


def _event(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "version": "2.0", "routeKey": "$default", "rawPath": "/echo", "rawQueryString": "",
        "headers": {"content-type": "application/json"}, "body": json.dumps(body),
        "isBase64Encoded": False,
        "requestContext": {
            "http": {"method": "POST", "path": "/echo", "sourceIp": "127.0.0.1"}, "stage": "$default",
        },
    }  # fmt: skip


def test_a_route_reads_its_own_request_while_another_container_resolves() -> None:
    entered, proceed, never = threading.Event(), threading.Event(), threading.Event()
    first, second = _container(entered, proceed), _container(threading.Event(), never)
    answers: dict[str, Any] = {}

    def run_first() -> None:
        answers["first"] = first.resolve(_event({"n": 1}), SimpleNamespace(function_name="first"))

    thread = threading.Thread(target=run_first)
    thread.start()
    assert entered.wait(10)  # the first route runs, and waits
    never.set()  # the second container's route answers at once
    answers["second"] = second.resolve(_event({"n": 2}), SimpleNamespace(function_name="second"))
    proceed.set()
    thread.join(10)
    assert json.loads(answers["second"]["body"]) == {"body": {"n": 2}, "context": "second"}
    assert json.loads(answers["first"]["body"]) == {"body": {"n": 1}, "context": "first"}
