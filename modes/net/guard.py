"""The SSRF guard: which addresses a fetch may reach, and connecting only to those.

A URL is checked by resolving its host the way the C library would (so numeric
tricks such as ``http://2130706433/`` or ``http://0x7f000001/`` are seen for
what they are) and refusing it if ANY address it resolves to is not public:
loopback, private, link-local (cloud metadata lives at 169.254.169.254),
carrier-grade NAT, multicast, reserved, unspecified, broadcast, their IPv6
equivalents, and IPv6 forms that embed an IPv4 address (IPv4-mapped, NAT64,
6to4), judged by the embedded address.

The addresses that were checked are then *pinned*: `PinnedNetworkBackend` is
the only way our HTTP client opens a socket, and it connects only to addresses
this module checked for that exact host and port. A DNS server that answers
differently the second time (DNS rebinding) therefore changes nothing. TLS
server name and the Host header still carry the hostname, because httpcore
takes those from the URL, not from the socket.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
import typing
from collections.abc import Callable, Iterable

import attrs

from dispatcher import errors

if typing.TYPE_CHECKING:
    import httpcore

    from config.schema import WebSettings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
# getaddrinfo's shape, so tests can inject a resolver that answers what they need.
Resolver = Callable[..., list[tuple[typing.Any, ...]]]

ALLOWED_SCHEMES = ("http", "https")
DEFAULT_PORTS = {"http": 80, "https": 443}

# Named ranges first, so a refusal says what the address is; anything else that
# is not globally routable is caught by `is_global` below.
_V4_RANGES: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "an unspecified address"),
    ("127.0.0.0/8", "a loopback address"),
    ("10.0.0.0/8", "a private address"),
    ("172.16.0.0/12", "a private address"),
    ("192.168.0.0/16", "a private address"),
    ("169.254.0.0/16", "a link-local address (cloud metadata lives there)"),
    ("100.64.0.0/10", "a carrier-grade NAT address"),
    ("224.0.0.0/4", "a multicast address"),
    ("255.255.255.255/32", "a broadcast address"),
    ("240.0.0.0/4", "a reserved address"),
)
_V6_RANGES: tuple[tuple[str, str], ...] = (
    ("::/128", "an unspecified address"),
    ("::1/128", "a loopback address"),
    ("fc00::/7", "a private (unique local) address"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local address"),
    ("ff00::/8", "a multicast address"),
)
_NAMED_RANGES = tuple(
    (ipaddress.ip_network(cidr), reason) for cidr, reason in _V4_RANGES + _V6_RANGES
)
# IPv6 prefixes that carry an IPv4 address a router or the kernel will reach.
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")


def forbidden_reason(address: IPAddress) -> str | None:
    """Say why `address` must not be fetched ("a loopback address"), or None if it is public."""
    embedded = _embedded_ipv4(address)
    if embedded is not None:
        inner = forbidden_reason(embedded)
        return None if inner is None else f"an IPv6 form of {embedded}, {inner}"
    for network, reason in _NAMED_RANGES:
        if address.version == network.version and address in network:
            return reason
    if not address.is_global:
        return "a special-purpose (non-public) address"
    return None


def _embedded_ipv4(address: IPAddress) -> ipaddress.IPv4Address | None:
    if address.version != 6:
        return None
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in _SIX_TO_FOUR:
        return address.sixtofour
    return None


def parse_ip_literal(host: str) -> IPAddress | None:
    """Read `host` as an IP address the way the C library would, or None for a name.

    Beyond dotted quads this accepts the forms `inet_aton` does and browsers
    mostly do too: ``2130706433``, ``0x7f000001``, ``127.1``, ``0177.0.0.1``.
    """
    bare = host.strip("[]")
    try:
        return ipaddress.ip_address(bare)
    except ValueError:
        pass
    if bare and all(c in "0123456789abcdefxABCDEFX." for c in bare):
        try:
            return ipaddress.IPv4Address(socket.inet_aton(bare))
        except OSError:
            return None
    return None


def _resolve_with_deadline(host: str, port: int, resolver: Resolver, timeout_s: float) -> list[IPAddress]:
    """Resolve `host` through `resolver`, giving up after `timeout_s` (getaddrinfo has no timeout of its own)."""
    outcome: dict[str, typing.Any] = {}

    def run() -> None:
        try:
            outcome["infos"] = resolver(host, port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            outcome["error"] = exc

    # A daemon thread: a resolver stuck past the deadline is abandoned, not waited on.
    worker = threading.Thread(target=run, name=f"resolve {host}", daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise errors.FetchError(f"resolving {host} took longer than {timeout_s:.0f} s")
    if "error" in outcome:
        raise errors.FetchError(f"could not resolve {host}: {_os_error_text(outcome['error'])}")
    addresses: list[IPAddress] = []
    for info in outcome["infos"]:
        # sockaddr[0] may carry an IPv6 scope ("fe80::1%eth0"); the scope is not part of the address.
        address = ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise errors.FetchError(f"could not resolve {host}: no addresses")
    return addresses


def _os_error_text(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__


@attrs.frozen
class Target:
    """A checked destination: connect to `addresses` (in order) for `host`:`port`."""

    host: str
    port: int
    addresses: tuple[IPAddress, ...]


def host_is_allowed(host: str, port: int, allowed_hosts: Iterable[str]) -> bool:
    """True if `[web] allowed_hosts` names `host` (any port) or `host:port`."""
    wanted = _canonical_host(host)
    for entry in allowed_hosts:
        entry_host, entry_port = _split_allowed_entry(entry.strip())
        if _canonical_host(entry_host) == wanted and entry_port in (None, port):
            return True
    return False


def _split_allowed_entry(entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):  # "[::1]" or "[::1]:8080"
        host, _, rest = entry[1:].partition("]")
        return host, int(rest[1:]) if rest.startswith(":") and rest[1:].isdigit() else None
    if entry.count(":") == 1:
        host, _, port = entry.partition(":")
        if port.isdigit():
            return host, int(port)
    return entry, None  # a bare name, IPv4 address or unbracketed IPv6 address


def _canonical_host(host: str) -> str:
    literal = parse_ip_literal(host)
    if literal is not None:
        return str(literal)
    return host.strip("[]").rstrip(".").lower()


def _display_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def check_target(
    url: str,
    scheme: str,
    host: str,
    port: int | None,
    settings: WebSettings,
    *,
    resolver: Resolver = socket.getaddrinfo,
    timeout_s: float = 30.0,
) -> Target:
    """Resolve and check one hop; raise FetchError naming the reason, or return the pinned target.

    `url` is only used in messages. `host` is the ASCII (IDNA) form the
    connection will use; `resolver` is injectable so tests can play a DNS
    server that answers with private addresses.
    """
    if scheme not in ALLOWED_SCHEMES:
        raise errors.FetchError(f"refused {url}: only http and https URLs can be fetched")
    if not host:
        raise errors.FetchError(f"refused {url}: the URL has no host")
    port = port or DEFAULT_PORTS[scheme]
    literal = parse_ip_literal(host)
    addresses = [literal] if literal is not None else _resolve_with_deadline(host, port, resolver, timeout_s)
    if settings.allow_private_networks or host_is_allowed(host, port, settings.allowed_hosts):
        return Target(host=host, port=port, addresses=tuple(addresses))
    for address in addresses:
        reason = forbidden_reason(address)
        if reason is None:
            continue
        shown = host.strip("[]")
        what = f"{shown} is {reason}" if literal is not None else f"{shown} resolves to {address}, {reason}"
        hint = _display_host_port(shown, port)
        raise errors.FetchError(f'refused {url}: {what} (add "{hint}" to [web] allowed_hosts to allow it)')
    return Target(host=host, port=port, addresses=tuple(addresses))


class PinnedNetworkBackend:
    """An httpcore network backend that connects only to checked addresses, within one deadline.

    `pin()` records the addresses checked for a host and port; `connect_tcp`
    refuses any host and port that was not pinned, so no code path can open a
    socket the guard did not see. Every socket operation's timeout is clamped
    to the time left before `deadline` (a `time.monotonic()` value), so a
    server that drips one byte at a time cannot hold a fetch past it.
    """

    def __init__(self, deadline: float) -> None:
        import httpcore

        self._inner = httpcore.SyncBackend()
        self._deadline = deadline
        self._targets: dict[tuple[str, int], Target] = {}

    def pin(self, target: Target) -> None:
        self._targets[(_canonical_host(target.host), target.port)] = target

    def time_left(self) -> float:
        return self._deadline - time.monotonic()

    def clamp(self, timeout: float | None) -> float:
        import httpcore

        left = self.time_left()
        if left <= 0:
            raise httpcore.ReadTimeout("the total deadline has passed")
        return left if timeout is None else min(timeout, left)

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: typing.Iterable[typing.Any] | None = None,
    ) -> httpcore.NetworkStream:
        import httpcore

        target = self._targets.get((_canonical_host(host), port))
        if target is None:
            # Unreachable through fetch_page; a guard against a future code path that forgets to check.
            raise httpcore.ConnectError(f"{host}:{port} was not checked by the guard")
        last_error: Exception | None = None
        for address in target.addresses:
            try:
                stream = self._inner.connect_tcp(
                    str(address), port, timeout=self.clamp(timeout),
                    local_address=local_address, socket_options=socket_options,
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last_error = exc
                continue
            return _DeadlineStream(stream, self)
        assert last_error is not None
        raise last_error

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: typing.Iterable[typing.Any] | None = None) -> typing.NoReturn:
        import httpcore

        raise httpcore.ConnectError("unix sockets are never fetched")

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class _DeadlineStream:
    """A network stream whose every read, write and TLS handshake ends by the backend's deadline."""

    def __init__(self, stream: httpcore.NetworkStream, backend: PinnedNetworkBackend) -> None:
        self._stream = stream
        self._backend = backend

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, self._backend.clamp(timeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._stream.write(buffer, self._backend.clamp(timeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(self, ssl_context: typing.Any, server_hostname: str | None = None,
                  timeout: float | None = None) -> _DeadlineStream:
        tls = self._stream.start_tls(ssl_context, server_hostname, self._backend.clamp(timeout))
        return _DeadlineStream(tls, self._backend)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._stream.get_extra_info(info)
