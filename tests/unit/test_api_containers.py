"""The local stack's API containers: concurrent invocations, each container one at a time."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from aijobs_cli.api_containers import CONTAINER_MODULES, ApiContainer, ApiContainers, load_container


def _fake_containers(handler: Any) -> tuple[list[ApiContainer], Callable[[], ApiContainer]]:
    loaded: list[ApiContainer] = []

    def load() -> ApiContainer:
        container = ApiContainer(handler=handler, modules={})
        loaded.append(container)
        return container

    return loaded, load


def test_busy_containers_make_room_for_concurrent_invocations_up_to_the_limit() -> None:
    both_inside = threading.Barrier(2, timeout=10)

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
    assert first.modules["api.handler"].runtime is first.runtime
