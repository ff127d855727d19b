"""What a callback URL may be and which addresses it may reach (no SSRF).

Checked twice: at submit (the URL's form, and a host given as an address literal) and at delivery
(every address the host resolves to). The delivery then connects to the address it checked, so a
DNS answer that changes between the check and the connect (rebinding) reaches nothing new.

Both checks first normalize the host as a resolver would read it (`normalized_host`): IDNA maps
fullwidth and circled digits to ASCII (`①⑥⑨` is `169`) and the ideographic full stops to dots, and
a trailing dot is the DNS root (`localhost.` is `localhost`). The rules then see that host, and the
delivery resolves, connects to and names (Host, SNI) that host, never the text as sent.
"""

from __future__ import annotations

import ipaddress
import re
import socket
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from urllib.parse import SplitResult, urlsplit

MAX_URL_LENGTH = 2048
IpAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# host, port -> the addresses it resolves to (tests inject their own).
Resolver = Callable[[str, int], Sequence[str]]

# Instance metadata endpoints: refused even where loopback is allowed (the local stage).
METADATA_ADDRESSES = frozenset(
    {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}
)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_LOOPBACK_NAMES = ("localhost", ".localhost")
# A host made of digits, dots and hex prefixes that is not a canonical address (`127.1`,
# `2130706433`, `0x7f.0.0.1`): resolvers read these as addresses, so they are refused outright.
_NUMERIC_HOST = re.compile(r"(?:0x[0-9a-f]*|[0-9]+)(?:\.(?:0x[0-9a-f]*|[0-9]*))*\.?", re.IGNORECASE)
# What IDNA reads as a label separator besides `.`: ideographic, fullwidth, halfwidth ideographic.
_FULL_STOPS = ("\u3002", "\uff0e", "\uff61")
# A host name once normalized: ASCII labels of letters, digits, hyphens and underscores.
_HOST_NAME = re.compile(r"[a-z0-9_-]+(?:\.[a-z0-9_-]+)*")


class CallbackUrlError(ValueError):
    """The URL (or an address it resolves to) is refused; the message says why, for people."""


@dataclass(frozen=True)
class UrlPolicy:
    """`allow_http`: plain http (the local stage only); `allow_loopback`: 127.0.0.0/8 and ::1
    (the local stage's WEBHOOK_ALLOW_LOOPBACK=1, for a receiver on the developer's machine)."""

    allow_http: bool = False
    allow_loopback: bool = False


def check_url(url: str, policy: UrlPolicy) -> SplitResult:
    """The parsed URL if its form is acceptable, else CallbackUrlError with the reason."""
    if len(url) > MAX_URL_LENGTH:
        raise CallbackUrlError(f"callbackUrl is longer than {MAX_URL_LENGTH} characters")
    if any(ord(char) <= 0x20 or ord(char) == 0x7F for char in url):
        raise CallbackUrlError("callbackUrl must not contain spaces or control characters")
    try:
        parts = urlsplit(url)
        port = parts.port  # raises ValueError for a port out of range or not a number
    except ValueError:  # a bracket left open, a port that is no number, NFKC producing `@` or `:`
        raise CallbackUrlError("callbackUrl is not a valid URL (host or port)") from None
    schemes = ("https", "http") if policy.allow_http else ("https",)
    if parts.scheme not in schemes:
        raise CallbackUrlError(f"callbackUrl must be an absolute {' or '.join(schemes)} URL")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise CallbackUrlError("callbackUrl must not carry credentials (user:password@)")
    if parts.fragment or url.endswith("#"):
        raise CallbackUrlError("callbackUrl must not have a #fragment")
    if not parts.hostname:
        raise CallbackUrlError("callbackUrl has no host")
    host = normalized_host(parts.hostname)
    address = _literal(host)
    if address is not None:
        reason = refusal(address, policy)
        if reason is not None:
            raise CallbackUrlError(f"callbackUrl points at {reason}")
    elif _NUMERIC_HOST.fullmatch(host):
        raise CallbackUrlError("callbackUrl's host looks like an address but is not a canonical one")
    elif not policy.allow_loopback and (host == "localhost" or host.endswith(_LOOPBACK_NAMES[1])):
        raise CallbackUrlError("callbackUrl points at a loopback address")
    elif not _HOST_NAME.fullmatch(host):
        raise CallbackUrlError("callbackUrl's host is not a valid host name")
    netloc = f"[{host}]" if ":" in host else host
    return parts._replace(netloc=netloc if port is None else f"{netloc}:{port}")


def normalized_host(host: str) -> str:
    """`host` (urlsplit's `hostname`: lowercased, brackets dropped) as a resolver reads it: NFKC
    (circled, fullwidth and other compatibility digits and letters become ASCII), U+3002, U+FF0E
    and U+FF61 separate labels as dots do, a host of nothing but decimal digits of any script is
    that number in ASCII, IDNA ToASCII (other non-ASCII labels become `xn--`), lowercased, without
    the trailing dot of the DNS root. CallbackUrlError when IDNA refuses it (an empty or over-long
    label). An IPv6 literal is returned as it is."""
    if ":" in host:
        return host
    text = unicodedata.normalize("NFKC", host)
    for stop in _FULL_STOPS:
        text = text.replace(stop, ".")
    if not text.isascii() and all(label.isdecimal() for label in text.removesuffix(".").split(".")):
        # Digits of another script (Arabic-Indic 10.0.0.1): NFKC leaves them; the host reads as an address.
        text = "".join(str(unicodedata.decimal(char)) if char.isdecimal() else char for char in text)
    try:
        ascii_host = text.encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise CallbackUrlError("callbackUrl's host is not a valid domain name") from None
    return ascii_host.removesuffix(".")


def refusal(address: IpAddress, policy: UrlPolicy) -> str | None:
    """Why a delivery may not connect to `address` (None: it may): anything but a public address."""
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        return refusal(embedded, policy)
    if address in METADATA_ADDRESSES:
        return "a cloud metadata address"
    if address.is_loopback:
        return None if policy.allow_loopback else "a loopback address"
    if address.is_link_local:
        return "a link-local address"
    if address.is_multicast:
        return "a multicast address"
    if address.is_unspecified:
        return "an unspecified address"
    if address.is_private or address.is_reserved:
        return "a private or reserved address"
    if isinstance(address, ipaddress.IPv6Address) and address.is_site_local:
        return "a private or reserved address"
    if not address.is_global:  # shared (100.64/10), benchmarking, documentation ranges
        return "a non-public address"
    return None


def resolve_checked(host: str, port: int, policy: UrlPolicy, resolver: Resolver) -> list[str]:
    """Every address `host` resolves to, each checked; CallbackUrlError if any is refused (an
    attacker's name may answer a public and a private address, and a client may use either)."""
    literal = _literal(host)
    if literal is not None:
        addresses = [str(literal)]
    else:
        try:
            addresses = list(dict.fromkeys(resolver(host, port)))
        except (OSError, UnicodeError):
            raise CallbackUrlError("the callback host does not resolve") from None
    if not addresses:
        raise CallbackUrlError("the callback host does not resolve")
    for text in addresses:
        reason = refusal(ipaddress.ip_address(text.split("%", 1)[0]), policy)
        if reason is not None:
            raise CallbackUrlError(f"the callback host resolves to {reason}")
    return addresses


def system_resolver(host: str, port: int) -> list[str]:
    """The host's addresses from the system resolver (IPv4 and IPv6)."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


def _literal(host: str) -> IpAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def _embedded_ipv4(address: IpAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 one carries (mapped, 6to4, Teredo, NAT64): it is what is reached."""
    if not isinstance(address, ipaddress.IPv6Address):
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    return None
