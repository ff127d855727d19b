"""A small, real HTTP server on 127.0.0.1 that answers from a script and records what it got.

Tests queue answers with `ScriptedServer.reply(...)` (one per expected request, in order), point
an adapter at `server.base_url`, and then read `server.requests`. An unscripted request gets a
500, so a test that sends more requests than it expects fails loudly.
"""

from __future__ import annotations

import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass(frozen=True)
class Reply:
    status: int = 200
    # A dict/list is sent as JSON; str/bytes as they are.
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    # Seconds to wait before answering (a slow model); cut short when the server stops.
    delay: float = 0.0
    # Close the connection without any answer.
    hang_up: bool = False


@dataclass(frozen=True)
class Received:
    method: str
    path: str
    headers: dict[str, str]  # lower-case names
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


class ScriptedServer:
    """`with ScriptedServer() as server:` starts it on a free port; leaving the block stops it."""

    def __init__(self) -> None:
        self.replies: deque[Reply] = deque()
        self.requests: list[Received] = []
        self._stopping = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        # A short poll interval: `shutdown()` waits up to one interval, once per test.
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.01,), daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def reply(self, body: Any = None, status: int = 200, **fields: Any) -> None:
        self.replies.append(Reply(status=status, body=body, **fields))

    def __enter__(self) -> ScriptedServer:
        self._thread.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                owner.requests.append(
                    Received(
                        method="POST",
                        path=self.path,
                        headers={name.lower(): value for name, value in self.headers.items()},
                        body=self.rfile.read(length),
                    )
                )
                reply = owner.replies.popleft() if owner.replies else Reply(500, {"error": "unscripted"})
                if reply.delay and owner._stopping.wait(reply.delay):
                    return
                if reply.hang_up:
                    self.close_connection = True
                    return
                if isinstance(reply.body, bytes):
                    data = reply.body
                elif isinstance(reply.body, str):
                    data = reply.body.encode("utf-8")
                else:
                    data = json.dumps(reply.body).encode("utf-8")
                try:
                    self.send_response(reply.status)
                    headers = {"Content-Type": "application/json"} | reply.headers
                    for name, value in headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:  # the client gave up first (the timeout test)
                    self.close_connection = True

            def log_message(self, format: str, *args: Any) -> None:
                pass  # keep test output clean

        return Handler
