"""Webhooks without AWS: the signature (checked by a receiver written here, independently of the
signer), the URL and address rules (SSRF), and one POST to a real local server."""

from __future__ import annotations

import hashlib
import hmac
import random
from collections.abc import Sequence

import pytest

from aijobs.webhooks.delivery import Backoff
from aijobs.webhooks.signing import new_secret, signature_header
from aijobs.webhooks.transport import Poster
from aijobs.webhooks.urls import CallbackUrlError, UrlPolicy, check_url, resolve_checked
from tests.unit.openai_server import ScriptedServer

DEPLOYED = UrlPolicy()
LOCAL = UrlPolicy(allow_http=True, allow_loopback=True)
TOLERANCE = 300


def receiver_accepts(secret: str, header: str, body: bytes, now: int) -> bool:
    """What docs/concepts/webhooks.md tells a receiver to do, written from it, not from the signer."""
    fields = [part.split("=", 1) for part in header.split(",")]
    timestamps = [value for key, value in fields if key == "t"]
    candidates = [value for key, value in fields if key == "v1"]
    if len(timestamps) != 1 or not candidates or not timestamps[0].isdigit():
        return False
    if abs(now - int(timestamps[0])) > TOLERANCE:
        return False  # too old (or from the future): a replay
    expected = hmac.new(secret.encode("utf-8"), timestamps[0].encode() + b"." + body, hashlib.sha256)
    return any(hmac.compare_digest(expected.hexdigest(), candidate) for candidate in candidates)


def test_a_signed_body_is_accepted_by_an_independent_receiver_and_a_tampered_one_is_not() -> None:
    secret = new_secret()
    assert secret.startswith("whsec_")
    assert len(secret) >= 6 + 43
    body = b'{"id":"01J.succeeded","type":"job.succeeded"}'
    header = signature_header([secret], 1_764_400_000, body)
    assert receiver_accepts(secret, header, body, now=1_764_400_010)
    assert not receiver_accepts(secret, header, body + b" ", now=1_764_400_010)  # body changed
    assert not receiver_accepts(new_secret(), header, body, now=1_764_400_010)  # another secret
    assert not receiver_accepts(secret, header, body, now=1_764_400_000 + TOLERANCE + 1)  # replayed late
    forged_time = header.replace("t=1764400000", "t=1764400009")
    assert not receiver_accepts(secret, forged_time, body, now=1_764_400_010)  # timestamp is signed


def test_during_a_rotation_both_secrets_sign() -> None:
    old, new = new_secret(), new_secret()
    header = signature_header([new, old], 1_764_400_000, b"{}")
    assert header.count("v1=") == 2
    assert receiver_accepts(old, header, b"{}", now=1_764_400_000)
    assert receiver_accepts(new, header, b"{}", now=1_764_400_000)


@pytest.mark.parametrize(
    ("url", "policy", "reason"),
    [
        ("http://hooks.example.com/x", DEPLOYED, "https"),
        ("ftp://hooks.example.com/x", LOCAL, "http"),
        ("/relative/path", DEPLOYED, "https"),
        ("https://user:pw@hooks.example.com/", DEPLOYED, "credentials"),
        ("https://hooks.example.com/#frag", DEPLOYED, "fragment"),
        ("https://hooks.example.com/a b", DEPLOYED, "spaces"),
        ("https://hooks.example.com:99999/", DEPLOYED, "port"),
        ("https://" + "a" * 2050 + ".com/", DEPLOYED, "longer"),
        ("https://127.0.0.1/", DEPLOYED, "loopback"),
        ("https://[::1]/", DEPLOYED, "loopback"),
        ("https://localhost/", DEPLOYED, "loopback"),
        ("https://api.localhost/", DEPLOYED, "loopback"),
        ("https://10.1.2.3/", DEPLOYED, "private"),
        ("https://172.16.0.1/", DEPLOYED, "private"),
        ("https://192.168.1.1/", DEPLOYED, "private"),
        ("https://169.254.169.254/latest/meta-data/", DEPLOYED, "metadata"),
        ("http://169.254.169.254/", LOCAL, "metadata"),  # even where loopback is allowed
        ("https://[fd00:ec2::254]/", DEPLOYED, "metadata"),
        ("https://169.254.10.10/", DEPLOYED, "link-local"),
        ("https://[fe80::1]/", DEPLOYED, "link-local"),
        ("https://[fc00::1]/", DEPLOYED, "private"),
        ("https://224.0.0.1/", DEPLOYED, "multicast"),
        ("https://[ff02::1]/", DEPLOYED, "multicast"),
        ("https://0.0.0.0/", DEPLOYED, "unspecified"),
        ("https://240.0.0.1/", DEPLOYED, "reserved"),
        ("https://100.64.0.1/", DEPLOYED, "non-public"),
        ("https://[::ffff:10.0.0.1]/", DEPLOYED, "private"),  # IPv4-mapped IPv6
        ("https://[::ffff:169.254.169.254]/", DEPLOYED, "metadata"),
        ("https://[64:ff9b::a9fe:a9fe]/", DEPLOYED, "metadata"),  # NAT64 of 169.254.169.254
        ("https://[2002:a00:1::]/", DEPLOYED, "private"),  # 6to4 of 10.0.0.1
        ("https://2130706433/", DEPLOYED, "canonical"),  # 127.0.0.1 as one number
        ("https://127.1/", DEPLOYED, "canonical"),
        ("https://0x7f.0.0.1/", DEPLOYED, "canonical"),
        # Normalized before the checks, as a resolver would read them (issue 25's examples).
        (
            "http://\u2460\u2465\u2468.\u2461\u2464\u2463.\u2460\u2465\u2468.\u2461\u2464\u2463/",
            LOCAL,
            "metadata",
        ),  # circled digits: 169.254.169.254
        (
            "https://\u2460\u2465\u2468.\u2461\u2464\u2463.\u2460\u2465\u2468.\u2461\u2464\u2463/",
            DEPLOYED,
            "metadata",
        ),
        ("http://169\u3002254\u3002169\u3002254/", LOCAL, "metadata"),  # ideographic full stops
        ("https://169\uff0e254\uff0e169\uff0e254/", DEPLOYED, "metadata"),  # fullwidth full stops
        ("https://169\uff61254\uff61169\uff61254/", DEPLOYED, "metadata"),  # halfwidth ideographic
        ("https://\uff11\uff10.0.0.1/", DEPLOYED, "private"),  # fullwidth digits: 10.0.0.1
        ("https://\u0661\u0660.0.0.1/", DEPLOYED, "private"),  # Arabic-Indic digits: 10.0.0.1
        ("https://\uff11\uff12\uff17.\uff11/", DEPLOYED, "canonical"),  # 127.1
        ("https://localhost./", DEPLOYED, "loopback"),  # the DNS root's trailing dot
        ("https://foo.localhost./", DEPLOYED, "loopback"),
        ("https://\uff4c\uff4f\uff43\uff41\uff4c\uff48\uff4f\uff53\uff54/", DEPLOYED, "loopback"),
        ("https://LOCALHOST/", DEPLOYED, "loopback"),
        ("https://127.0.0.1./", DEPLOYED, "loopback"),
        ("https://localhost../", DEPLOYED, "domain name"),
        ("https://a..example.com/", DEPLOYED, "domain name"),
        ("https://" + "a" * 64 + ".example.com/", DEPLOYED, "domain name"),
        ("https://hooks\u3000example.com/", DEPLOYED, "host name"),
        ("https://%31%30.0.0.1/", DEPLOYED, "host name"),
        # What urlsplit itself refuses (these were a 500 at submit).
        ("https://[::1/", DEPLOYED, "not a valid URL"),
        ("https://hooks\ufe6bexample.com/", DEPLOYED, "not a valid URL"),  # NFKC makes it an `@`
        ("https://hooks.example.com:\uff18\uff14\uff14\uff13/", DEPLOYED, "port"),
    ],
)
def test_refused_callback_urls(url: str, policy: UrlPolicy, reason: str) -> None:
    with pytest.raises(CallbackUrlError, match=reason):
        check_url(url, policy)


@pytest.mark.parametrize(
    ("url", "policy"),
    [
        ("https://hooks.example.com/aijobs?x=1", DEPLOYED),
        ("https://8.8.8.8:8443/hook", DEPLOYED),
        ("https://[2001:4860:4860::8888]/hook", DEPLOYED),
        ("http://127.0.0.1:8080/hook", LOCAL),
        ("http://localhost:8080/hook", LOCAL),
    ],
)
def test_accepted_callback_urls(url: str, policy: UrlPolicy) -> None:
    assert check_url(url, policy).hostname


@pytest.mark.parametrize(
    ("url", "normalized"),
    [
        ("https://hooks.example.com./in?a=1", "https://hooks.example.com/in?a=1"),
        ("https://HOOKS.Example.com:8443/in", "https://hooks.example.com:8443/in"),
        ("https://b\u00fccher.example/in", "https://xn--bcher-kva.example/in"),
        ("https://hooks\u3002example\u3002com/in", "https://hooks.example.com/in"),
        ("https://\uff48\uff4f\uff4f\uff4b\uff53.example.com/", "https://hooks.example.com/"),
        ("https://[2001:4860:4860::8888]:8443/h", "https://[2001:4860:4860::8888]:8443/h"),
    ],
)
def test_an_accepted_url_comes_back_with_the_host_a_resolver_reads(url: str, normalized: str) -> None:
    assert check_url(url, DEPLOYED).geturl() == normalized


def _resolving(*addresses: str) -> tuple[list[str], object]:
    asked: list[str] = []

    def resolver(host: str, _port: int) -> Sequence[str]:
        asked.append(host)
        return list(addresses)

    return asked, resolver


@pytest.mark.parametrize(
    ("addresses", "reason"),
    [
        (("10.0.0.5",), "private"),
        (("93.184.216.34", "192.168.0.7"), "private"),  # one bad answer among good ones is enough
        (("169.254.169.254",), "metadata"),
        (("::ffff:127.0.0.1",), "loopback"),
        (("fe80::1%eth0",), "link-local"),
        ((), "does not resolve"),
    ],
)
def test_a_public_name_that_resolves_to_a_refused_address_is_refused(
    addresses: tuple[str, ...], reason: str
) -> None:
    _asked, resolver = _resolving(*addresses)
    with pytest.raises(CallbackUrlError, match=reason):
        resolve_checked("hooks.example.com", 443, DEPLOYED, resolver)  # type: ignore[arg-type]


def test_the_post_goes_to_the_address_that_was_checked_with_the_urls_host() -> None:
    """A name resolved once, checked, then connected to by address: a second DNS answer (rebinding)
    is never asked for. The Host header still names the URL's host."""
    asked, resolver = _resolving("127.0.0.1")
    with ScriptedServer() as server:
        server.reply({"ok": True}, status=204)
        port = server.base_url.split(":")[2].split("/")[0]
        poster = Poster(LOCAL, 5, resolver)  # type: ignore[arg-type]
        answer = poster.post(
            f"http://hooks.test:{port}/in?a=1", b'{"x":1}', {"Aijobs-Event": "job.succeeded"}
        )
    assert answer.status == 204
    assert asked == ["hooks.test"]
    (request,) = server.requests
    assert request.headers["host"] == f"hooks.test:{port}"
    assert request.path == "/in?a=1"
    assert request.body == b'{"x":1}'
    assert request.headers["aijobs-event"] == "job.succeeded"


def test_the_delivery_resolves_connects_to_and_names_the_normalized_host() -> None:
    asked, resolver = _resolving("127.0.0.1")
    with ScriptedServer() as server:
        server.reply({"ok": True}, status=204)
        port = server.base_url.split(":")[2].split("/")[0]
        poster = Poster(LOCAL, 5, resolver)  # type: ignore[arg-type]
        answer = poster.post(f"http://\uff48\uff4f\uff4f\uff4b\uff53\u3002test.:{port}/in", b"{}", {})
    assert answer.status == 204
    assert asked == ["hooks.test"]
    (request,) = server.requests
    assert request.headers["host"] == f"hooks.test:{port}"


@pytest.mark.parametrize(
    "url",
    ["https://\u2460\u2465\u2468.\u2461\u2464\u2463.\u2460\u2465\u2468.\u2461\u2464\u2463/",
     "https://169\u3002254\u3002169\u3002254/", "https://localhost./", "https://foo.localhost./"],
)  # fmt: skip
def test_the_delivery_refuses_what_the_submit_refuses_without_resolving(url: str) -> None:
    asked, resolver = _resolving("93.184.216.34")
    with pytest.raises(CallbackUrlError):
        Poster(DEPLOYED, 5, resolver).post(url, b"{}", {})  # type: ignore[arg-type]
    assert asked == []


def test_a_refused_address_is_never_connected_to() -> None:
    _asked, resolver = _resolving("127.0.0.1")
    with ScriptedServer() as server:
        port = server.base_url.split(":")[2].split("/")[0]
        with pytest.raises(CallbackUrlError, match="loopback"):
            Poster(UrlPolicy(allow_http=True), 5, resolver).post(f"http://hooks.test:{port}/", b"{}", {})  # type: ignore[arg-type]
    assert server.requests == []


def test_back_off_doubles_with_jitter_up_to_its_cap_and_honours_retry_after() -> None:
    backoff = Backoff(base_seconds=30, max_seconds=3600, rng=random.Random(7))
    delays = [backoff.delay_seconds(attempt) for attempt in range(1, 10)]
    ceilings = [min(3600, 30 * 2 ** (attempt - 1)) for attempt in range(1, 10)]
    assert all(ceiling / 2 <= delay <= ceiling for delay, ceiling in zip(delays, ceilings, strict=True))
    assert backoff.delay_seconds(1, retry_after=600) >= 600
    assert backoff.delay_seconds(1, retry_after=99_999) <= 3600


def test_only_the_local_stage_may_let_webhooks_reach_loopback() -> None:
    from aijobs_cdk.stage_config import ConfigError, parse_stage_config

    assert parse_stage_config("local", {"WEBHOOK_ALLOW_LOOPBACK": "1"}).webhook_allow_loopback
    assert not parse_stage_config("dev", {"WEBHOOK_ALLOW_LOOPBACK": ""}).webhook_allow_loopback
    with pytest.raises(ConfigError, match="local stage only"):
        parse_stage_config("dev", {"WEBHOOK_ALLOW_LOOPBACK": "1"})
    with pytest.raises(ConfigError, match="must be 0 or 1"):
        parse_stage_config("local", {"WEBHOOK_ALLOW_LOOPBACK": "yes"})
