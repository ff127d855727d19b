"""One POST to a callback URL, to the address that was checked (no DNS rebinding in between).

Standard library only (like the OpenAI adapter): `http.client` with the socket opened to the
checked address; TLS still verifies the certificate against the URL's host name (SNI too).
Redirects are not followed: a 3xx is an answer like any other non-2xx.
"""

from __future__ import annotations

import http.client
import socket
import ssl
from dataclasses import dataclass, field

from aijobs.webhooks.urls import CallbackUrlError, Resolver, UrlPolicy, check_url, resolve_checked

# Read at most this much of an answer: only its status matters.
MAX_ANSWER_BYTES = 4096
USER_AGENT = "aijobs-webhooks/1"


@dataclass(frozen=True)
class Answer:
    """What one POST got: an HTTP status, or a transport error (timeout, refused, TLS)."""

    status: int | None
    error: str | None = None
    retry_after: float | None = None


class _PinnedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float) -> None:
        super().__init__(host, port, timeout=timeout)
        self._address = address

    def connect(self) -> None:
        self.sock = socket.create_connection((self._address, self.port), self.timeout)


class _PinnedHTTPSConnection(http.client.HTTPSConnection):
    def __init__(self, host: str, port: int, address: str, timeout: float, context: ssl.SSLContext) -> None:
        super().__init__(host, port, timeout=timeout, context=context)
        self._address = address
        self._tls = context

    def connect(self) -> None:
        raw = socket.create_connection((self._address, self.port), self.timeout)
        self.sock = self._tls.wrap_socket(raw, server_hostname=self.host)


@dataclass
class Poster:
    """POSTs a signed body; refuses (CallbackUrlError) before connecting to a refused address."""

    policy: UrlPolicy
    timeout_seconds: float
    resolver: Resolver
    tls: ssl.SSLContext = field(default_factory=ssl.create_default_context)

    def post(self, url: str, body: bytes, headers: dict[str, str]) -> Answer:
        parts = check_url(url, self.policy)
        host = parts.hostname
        assert host is not None  # check_url refuses a URL without one
        port = parts.port or (443 if parts.scheme == "https" else 80)
        addresses = resolve_checked(host, port, self.policy, self.resolver)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        connection: http.client.HTTPConnection
        if parts.scheme == "https":
            connection = _PinnedHTTPSConnection(host, port, addresses[0], self.timeout_seconds, self.tls)
        else:
            connection = _PinnedHTTPConnection(host, port, addresses[0], self.timeout_seconds)
        try:
            connection.request(
                "POST",
                path,
                body=body,
                headers={"Content-Type": "application/json", "User-Agent": USER_AGENT, **headers},
            )
            response = connection.getresponse()
            response.read(MAX_ANSWER_BYTES)
            return Answer(response.status, retry_after=_seconds(response.getheader("Retry-After")))
        except TimeoutError:
            return Answer(None, "timeout")
        except (OSError, http.client.HTTPException) as error:
            return Answer(None, f"connection failed: {type(error).__name__}")
        finally:
            connection.close()


def _seconds(value: str | None) -> float | None:
    try:
        return max(0.0, float(value)) if value else None
    except ValueError:
        return None


__all__ = ["Answer", "CallbackUrlError", "Poster"]
