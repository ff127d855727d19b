"""The local stack's HTTP API, as API Gateway (HTTP API, payload v2) fronts the producer function.

A threading HTTP server on localhost reads and checks each request as the gateway does (body size,
Content-Length, chunked bodies, read timeouts), turns it into a payload v2 event (api_event), and
turns the function's response back into HTTP (gateway_reply). What answers a well-formed request is
the stack's (aijobs_cli.local.stack); is_long_poll tells it which container pool a request needs.
"""

from __future__ import annotations

import base64
import json
import re
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from email.message import Message
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qsl, urlsplit

# API Gateway refuses request payloads over 10 MB; so does the local API.
MAX_BODY_BYTES = 10 * 1024 * 1024
# How long a client may keep the server waiting for the rest of its request (line, headers, body).
READ_TIMEOUT_SECONDS = 5.0


def query_parameters(raw_query: str) -> dict[str, str]:
    """`queryStringParameters` as API Gateway HTTP API builds them: URL-decoded (`%6D` is `m`,
    `+` a space), blank values kept, a repeated key's values joined with commas (payload v2)."""
    values: dict[str, list[str]] = {}
    for key, value in parse_qsl(raw_query, keep_blank_values=True):
        values.setdefault(key, []).append(value)
    return {key: ",".join(joined) for key, joined in values.items()}


def gateway_headers(headers: Message) -> dict[str, str]:
    """Request headers as payload v2 carries them: lower-cased names, repeated ones comma-joined."""
    joined: dict[str, list[str]] = {}
    for key, value in headers.items():
        joined.setdefault(key.lower(), []).append(value)
    return {key: ",".join(values) for key, values in joined.items()}


def api_event(method: str, raw_path: str, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    """An API Gateway HTTP API (payload v2) event, as the gateway would send it to the producer.

    The body is passed as the gateway passes it: UTF-8 text as is, anything else base64-encoded
    with `isBase64Encoded` true (never decoded with replacement characters)."""
    parts = urlsplit(raw_path)
    query = query_parameters(parts.query)
    lowered = {key.lower(): value for key, value in headers.items()}
    cookie = lowered.pop("cookie", None)
    now = datetime.now(UTC)
    event: dict[str, Any] = {
        "version": "2.0",
        "routeKey": "$default",
        "rawPath": parts.path,
        "rawQueryString": parts.query,
        "headers": lowered,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "local",
            "domainName": "localhost",
            "http": {
                "method": method,
                "path": parts.path,
                "protocol": "HTTP/1.1",
                "sourceIp": "127.0.0.1",
                "userAgent": lowered.get("user-agent", ""),
            },
            "requestId": f"local-{uuid.uuid4().hex}",
            "routeKey": "$default",
            "stage": "$default",
            "time": now.strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "timeEpoch": int(now.timestamp() * 1000),
        },
        "isBase64Encoded": False,
    }
    if cookie:
        event["cookies"] = [part.strip() for part in cookie.split(";") if part.strip()]
    if query:
        event["queryStringParameters"] = query
    if body:
        try:
            event["body"] = body.decode("utf-8")
        except UnicodeDecodeError:
            event["body"] = base64.b64encode(body).decode("ascii")
            event["isBase64Encoded"] = True
    return event


def is_long_poll(method: str, raw_path: str) -> bool:
    """Whether a request asks the API to wait (`?wait=N` with N not 0): it may hold its
    invocation for up to LONG_POLL_MAX_SECONDS, so the local stack gives it a container of the
    long-poll pool. A bad value goes there too, and the API answers it at once with a 400."""
    if method not in ("GET", "HEAD"):
        return False
    wait = query_parameters(urlsplit(raw_path).query).get("wait", "").strip()
    return wait not in ("", "0")


Reply = tuple[int, bytes, dict[str, str]]
JSON_HEADERS = {"Content-Type": "application/json"}


def error_reply(
    status: int, code: str, message: str, details: Any = None, headers: dict[str, str] | None = None
) -> Reply:
    """A client error in the API's own shape: `{code, message, details}`."""
    body = json.dumps({"code": code, "message": message, "details": details}).encode()
    return status, body, {**JSON_HEADERS, **(headers or {})}


def gateway_reply(response: Mapping[str, Any]) -> Reply:
    """The HTTP response API Gateway makes of a payload v2 Lambda response."""
    raw = response.get("body") or ""
    payload = base64.b64decode(raw) if response.get("isBase64Encoded") else str(raw).encode()
    headers = {str(key): str(value) for key, value in (response.get("headers") or {}).items()}
    return int(response["statusCode"]), payload, headers


class BadRequest(Exception):
    """A request the local API answers itself, before any function sees it."""

    def __init__(self, status: int, code: str, message: str, details: Any = None) -> None:
        super().__init__(message)
        self.reply = error_reply(status, code, message, details)


class Answers(Protocol):
    """What the server hands each well-formed request to: the local stack."""

    def answer(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> Reply: ...


_CHUNK_SIZE = re.compile(rb"[0-9a-fA-F]{1,8}")


class ApiServer(ThreadingHTTPServer):
    """One thread per connection, so a slow or stalled client never holds up the others."""

    daemon_threads = True
    block_on_close = False  # stop() must not wait for a stalled client's read timeout
    request_queue_size = 1024  # listen backlog: a burst of clients queues instead of being refused


class ApiRequestHandler(BaseHTTPRequestHandler):
    """Reads and checks a request like the gateway does, then lets the stack answer it."""

    stack: Answers
    # Socket timeout: a client that stops sending mid-body gets a 400; one that stops before its
    # headers are complete is disconnected (http.server's handling). Others are served meanwhile.
    timeout = READ_TIMEOUT_SECONDS

    def _serve(self) -> None:
        try:
            body = self._read_body()
        except BadRequest as error:
            self.close_connection = True  # whatever is left of this request is unreadable
            self._reply(error.reply)
            return
        self._reply(self.stack.answer(self.command, self.path, gateway_headers(self.headers), body))

    def __getattr__(self, name: str) -> Any:
        # Every method goes to the API function, as API Gateway's `$default` route sends it
        # (the API answers an unknown one with 405 and `Allow`), not to http.server's own 501.
        if name.startswith("do_"):
            return self._serve
        raise AttributeError(name)

    def _read_body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._read_chunked()
        lengths = {value.strip() for value in self.headers.get_all("Content-Length") or []}
        if not lengths:
            return b""
        text = lengths.pop()
        if lengths or not (text.isascii() and text.isdigit()):
            raise BadRequest(
                400,
                "invalid_content_length",
                "Content-Length must be one non-negative integer",
                {"contentLength": self.headers.get_all("Content-Length")},
            )
        length = int(text)
        if length > MAX_BODY_BYTES:
            raise BadRequest(
                413, "payload_too_large", f"request bodies are limited to {MAX_BODY_BYTES} bytes"
            )
        return self._read_exactly(length)

    def _read_exactly(self, length: int) -> bytes:
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            body = None
        if body is None or len(body) < length:
            raise BadRequest(
                400,
                "incomplete_body",
                "the request body ended before Content-Length bytes arrived",
                {"expectedBytes": length, "timeoutSeconds": READ_TIMEOUT_SECONDS},
            )
        return body

    def _read_chunked(self) -> bytes:
        body = bytearray()
        while True:
            size_line = self._read_line()
            match = _CHUNK_SIZE.fullmatch(size_line.split(b";", 1)[0].strip())
            if match is None:
                raise BadRequest(400, "invalid_chunk", "a chunk size is not a hexadecimal number")
            size = int(match.group(), 16)
            if size == 0:
                while self._read_line().strip():  # trailer fields, up to the blank line
                    pass
                return bytes(body)
            if len(body) + size > MAX_BODY_BYTES:
                raise BadRequest(
                    413, "payload_too_large", f"request bodies are limited to {MAX_BODY_BYTES} bytes"
                )
            body += self._read_exactly(size)
            self._read_line()  # the CRLF that ends the chunk

    def _read_line(self) -> bytes:
        try:
            line = self.rfile.readline(1024)
        except TimeoutError:
            line = b""
        if not line.endswith(b"\n"):
            raise BadRequest(400, "incomplete_body", "the chunked request body ended early")
        return line

    def _reply(self, reply: Reply) -> None:
        status, payload, headers = reply
        try:
            self.send_response(status)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(payload)
        except OSError:
            self.close_connection = True  # the client went away; nobody is left to answer

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """Errors http.server detects itself (a malformed request line, oversized headers): JSON too."""
        self.close_connection = True
        # http.server answers an unparsable request line HTTP/0.9-style (no status line, no
        # headers); a status and a Content-Type are what every client here understands.
        self.request_version = self.protocol_version
        try:
            phrase = HTTPStatus(code).phrase
        except ValueError:
            phrase = "Bad Request"
        reply = error_reply(code, re.sub(r"[^a-z]+", "_", phrase.lower()), message or phrase, explain)
        self._reply(reply)

    def log_message(self, format: str, *args: Any) -> None:
        return  # the function logs every request itself
