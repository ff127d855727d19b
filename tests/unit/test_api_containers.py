"""The local stack's API containers: concurrent invocations, each container one at a time."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from aijobs_cdk.stage import load_stage_config
from aijobs_cli.local.api_containers import (
    API_ROUTE_MODULES,
    CONTAINER_MODULES,
    ApiContainer,
    ApiContainers,
    load_container,
)
from aijobs_cli.local.gateway import is_long_poll
from aijobs_cli.local.stack import LocalStack


def _fake_containers(handler: Any) -> tuple[list[ApiContainer], Callable[[], ApiContainer]]:
    loaded: list[ApiContainer] = []

    def load() -> ApiContainer:
        container = ApiContainer(handler=handler, modules={})
        loaded.append(container)
        return container

    return loaded, load


def test_busy_containers_make_room_for_concurrent_invocations_up_to_the_limit() -> None:
    both_inside = threading.Barrier(2, timeout=60)  # fails only on a real hang

    def handler(event: dict[str, Any], _context: Any) -> str:
        both_inside.wait()  # returns only once the other invocation is running too
        return str(event["n"])

    loaded, load = _fake_containers(handler)
    containers = ApiContainers(2, load=load)
    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(pool.map(lambda n: containers.invoke({"n": n}, None), range(2)))
    assert answers == ["0", "1"]
    assert len(loaded) == 2
    assert [container.invocations for container in loaded] == [1, 1]


def test_a_container_serves_one_invocation_at_a_time_and_is_reused_warm() -> None:
    inside, most = [0], [0]
    lock = threading.Lock()

    def handler(_event: dict[str, Any], _context: Any) -> None:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        threading.Event().wait(0.01)
        with lock:
            inside[0] -= 1

    loaded, load = _fake_containers(handler)
    containers = ApiContainers(1, load=load)
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(lambda _n: containers.invoke({}, None), range(8)))
    assert most[0] == 1  # at the limit, a request waits for the busy container
    assert len(loaded) == 1
    assert loaded[0].invocations == 8


def test_a_failed_start_leaves_room_for_the_next_one() -> None:
    attempts = [0]

    def load() -> ApiContainer:
        attempts[0] += 1
        if attempts[0] == 1:
            raise RuntimeError("cold start failed")
        return ApiContainer(handler=lambda _event, _context: "ok", modules={})

    containers = ApiContainers(1, load=load)
    with pytest.raises(RuntimeError):
        containers.invoke({}, None)
    assert containers.invoke({}, None) == "ok"


def test_each_container_loads_its_own_api_modules_and_leaves_sys_modules_as_it_was() -> None:
    import aijobs
    from aijobs import runtime

    before = {name: sys.modules.get(name) for name in CONTAINER_MODULES}
    first, second = load_container(), load_container()
    assert {name: sys.modules.get(name) for name in CONTAINER_MODULES} == before
    assert aijobs.runtime is runtime
    # Own resolver (the current event lives on it), own cached collaborators: nothing shared.
    for name in CONTAINER_MODULES:
        assert first.modules[name] is not second.modules[name]
        assert before[name] not in (first.modules[name], second.modules[name])
    assert first.modules["aijobs.api.app"].app is not second.modules["aijobs.api.app"].app
    # Each router reads the current event from its own container's resolver.
    for name in API_ROUTE_MODULES:
        assert first.modules[name].router.api_resolver is first.modules["aijobs.api.app"].app
    assert first.modules["api.handler"].runtime is first.runtime


@pytest.mark.parametrize(
    ("method", "path", "long_poll"),
    [
        ("GET", "/jobs/01J?wait=20", True),
        ("GET", "/jobs/01J?wait=%32%30", True),  # decoded as the gateway decodes it
        ("GET", "/jobs/01J?wait=abc", True),  # the API answers it at once (400)
        ("GET", "/jobs/01J?wait=0", False),
        ("GET", "/jobs/01J?wait=", False),
        ("GET", "/jobs/01J", False),
        ("GET", "/credits", False),
        ("POST", "/jobs?wait=20", False),
    ],
)
def test_a_request_that_asks_to_wait_is_a_long_poll(method: str, path: str, long_poll: bool) -> None:
    assert is_long_poll(method, path) is long_poll


def test_long_polls_holding_every_api_container_starve_no_other_request() -> None:
    """Two long-polls that hold their containers until released; another tenant's request is
    answered meanwhile (with one pool for all, it would wait for a long-poll to end)."""
    release, both_waiting = threading.Event(), threading.Barrier(3, timeout=30)

    def handler(event: dict[str, Any], _context: Any) -> dict[str, Any]:
        if event.get("queryStringParameters", {}).get("wait"):
            both_waiting.wait()
            assert release.wait(timeout=60), "never released"
        return {"statusCode": 200, "body": event["rawPath"]}

    stack = LocalStack(load_stage_config("local"), api_concurrency=2)
    # The stack's two pools, with containers that run `handler` (started by _start_api otherwise).
    stack._api = ApiContainers(stack.api_concurrency, load=_fake_containers(handler)[1])
    stack._long_polls = ApiContainers(stack.long_poll_concurrency, load=_fake_containers(handler)[1])
    with ThreadPoolExecutor(max_workers=3) as pool:
        polls = [pool.submit(stack.answer, "GET", f"/jobs/{n}?wait=20", {}, b"") for n in (1, 2)]
        try:
            both_waiting.wait()  # both long-polls are inside a container now
            other = pool.submit(stack.answer, "GET", "/credits", {}, b"")
            status, body, _headers = other.result(timeout=30)  # fails only on a real hang
            assert (status, body) == (200, b"/credits")
            assert not any(poll.done() for poll in polls)
            assert stack.long_polls_in_progress == 2
        finally:
            release.set()
        assert [poll.result(timeout=30)[1] for poll in polls] == [b"/jobs/1", b"/jobs/2"]
