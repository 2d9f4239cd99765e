"""The SSRF guard's own decisions, with the DNS resolver played by the test."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from config.schema import WebSettings
from dispatcher.errors import FetchError
from modes.net import guard

PUBLIC_V4 = "93.184.216.34"
PUBLIC_V6 = "2606:2800:220:1:248:1893:25c8:1946"


def resolver_answering(*addresses: str, calls: list[str] | None = None):
    """A getaddrinfo stand-in that answers every name with `addresses`."""
    def resolve(host, port, *args, **kwargs):
        if calls is not None:
            calls.append(host)
        return [(socket.AF_INET6 if ":" in a else socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port))
                for a in addresses]
    return resolve


def check(url_host: str, *, settings: WebSettings | None = None, resolver=None, port: int | None = None,
          scheme: str = "http"):
    return guard.check_target(f"{scheme}://{url_host}/", scheme, url_host, port, settings or WebSettings(),
                              resolver=resolver or resolver_answering(PUBLIC_V4))


@pytest.mark.parametrize(("address", "words"), [
    ("127.0.0.1", "loopback"),
    ("127.255.0.9", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.5.4", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "link-local"),
    ("100.64.0.1", "carrier-grade NAT"),
    ("224.0.0.1", "multicast"),
    ("240.0.0.1", "reserved"),
    ("255.255.255.255", "broadcast"),
    ("0.0.0.0", "unspecified"),
    ("192.0.2.1", "special-purpose"),
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fc00::1", "private"),
    ("fd12:3456::1", "private"),
    ("fe80::1", "link-local"),
    ("ff02::1", "multicast"),
    ("::ffff:127.0.0.1", "loopback"),
    ("::ffff:169.254.169.254", "link-local"),
    ("64:ff9b::a00:1", "private"),
    ("64:ff9b::7f00:1", "loopback"),
    ("2002:c0a8:101::1", "private"),
    ("2002:7f00:1::", "loopback"),
])
def test_non_public_addresses_are_named_for_what_they_are(address, words):
    """Every non-public range is refused, and the reason says which kind of address it is."""
    reason = guard.forbidden_reason(ipaddress.ip_address(address))
    assert reason is not None and words in reason


@pytest.mark.parametrize("address", [PUBLIC_V4, "8.8.8.8", PUBLIC_V6, "::ffff:8.8.8.8", "64:ff9b::808:808",
                                     "2002:808:808::1"])
def test_public_addresses_pass(address):
    """Public addresses, including IPv6 forms embedding a public IPv4 address, are allowed."""
    assert guard.forbidden_reason(ipaddress.ip_address(address)) is None


@pytest.mark.parametrize("host", ["2130706433", "0x7f000001", "127.1", "0177.0.0.1", "0x7f.0.0.1", "017700000001"])
def test_numeric_host_tricks_are_read_as_the_c_library_reads_them(host):
    """Decimal, hex, octal and short forms of 127.0.0.1 are recognised as loopback without any DNS lookup."""
    calls: list[str] = []
    with pytest.raises(FetchError, match="loopback address"):
        check(host, resolver=resolver_answering(PUBLIC_V4, calls=calls))
    assert calls == []


def test_a_name_is_refused_if_any_address_it_resolves_to_is_private():
    """One private address among public ones is enough to refuse (the attacker picks which one we would use)."""
    with pytest.raises(FetchError) as caught:
        check("docs.example.test", resolver=resolver_answering(PUBLIC_V4, PUBLIC_V6, "10.0.0.7"))
    assert str(caught.value) == ('refused http://docs.example.test/: docs.example.test resolves to 10.0.0.7, '
                                 'a private address (add "docs.example.test:80" to [web] allowed_hosts to allow it)')


def test_a_name_resolving_to_cloud_metadata_is_refused():
    """A DNS name pointing at 169.254.169.254 cannot reach the metadata service."""
    with pytest.raises(FetchError, match="169.254.169.254, a link-local address"):
        check("metadata.attacker.test", resolver=resolver_answering("169.254.169.254"))


def test_a_name_resolving_to_a_mapped_ipv6_loopback_is_refused():
    """A AAAA answer of ::ffff:127.0.0.1 is judged by the IPv4 address it carries."""
    with pytest.raises(FetchError, match="loopback"):
        check("sneaky.test", resolver=resolver_answering("::ffff:127.0.0.1"))


def test_the_checked_addresses_are_the_ones_returned_for_pinning():
    """The guard resolves once and returns exactly what it checked, for the connection to use."""
    calls: list[str] = []
    target = check("docs.example.test", port=8443, scheme="https",
                   resolver=resolver_answering(PUBLIC_V4, PUBLIC_V6, calls=calls))
    assert target.host == "docs.example.test" and target.port == 8443
    assert [str(a) for a in target.addresses] == [PUBLIC_V4, PUBLIC_V6]
    assert calls == ["docs.example.test"]


@pytest.mark.parametrize("scheme", ["file", "ftp", "gopher", "javascript", ""])
def test_only_http_and_https_are_fetched(scheme):
    """Any scheme other than http and https is refused before anything is resolved."""
    calls: list[str] = []
    with pytest.raises(FetchError, match="only http and https"):
        check("example.test", scheme=scheme, resolver=resolver_answering(PUBLIC_V4, calls=calls))
    assert calls == []


def test_an_allowed_host_entry_with_a_port_allows_only_that_port():
    """`host:port` in allowed_hosts exempts that port and no other."""
    settings = WebSettings(allowed_hosts=("intranet.test:8080",))
    loopback = resolver_answering("10.0.0.5")
    assert check("intranet.test", port=8080, settings=settings, resolver=loopback).port == 8080
    with pytest.raises(FetchError, match='add "intranet.test:9090"'):
        check("intranet.test", port=9090, settings=settings, resolver=loopback)


def test_an_allowed_host_entry_without_a_port_allows_every_port():
    """A bare `host` in allowed_hosts exempts that host on any port, matched without regard to case."""
    settings = WebSettings(allowed_hosts=("Intranet.Test",))
    for port in (80, 8080, 9090):
        check("intranet.test", port=port, settings=settings, resolver=resolver_answering("10.0.0.5"))


def test_allowed_ip_entries_match_every_spelling_of_the_address():
    """An allowed address is recognised whatever numeric form the URL uses, and IPv6 entries take brackets."""
    v4 = WebSettings(allowed_hosts=("127.0.0.1:8080",))
    assert check("2130706433", port=8080, settings=v4).addresses == (ipaddress.ip_address("127.0.0.1"),)
    v6 = WebSettings(allowed_hosts=("[::1]:8080",))
    check("::1", port=8080, settings=v6)
    with pytest.raises(FetchError):
        check("::1", port=8081, settings=v6)


def test_allow_private_networks_turns_the_guard_off():
    """With allow_private_networks, private addresses are fetched (the user opted in)."""
    settings = WebSettings(allow_private_networks=True)
    assert check("10.0.0.1", settings=settings).addresses == (ipaddress.ip_address("10.0.0.1"),)


def test_an_unresolvable_name_is_reported_in_one_sentence():
    """A name that does not resolve gives a readable error, not a socket traceback."""
    def failing(host, port, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    with pytest.raises(FetchError, match=r"^could not resolve nowhere\.test: name or service not known$"):
        check("nowhere.test", resolver=failing)


def test_the_pinned_backend_refuses_to_connect_to_an_unchecked_host():
    """No socket is opened to a host and port the guard did not check, even if asked directly."""
    import time

    import httpcore

    backend = guard.PinnedNetworkBackend(deadline=time.monotonic() + 5)
    backend.pin(guard.Target(host="docs.example.test", port=80, addresses=(ipaddress.ip_address(PUBLIC_V4),)))
    with pytest.raises(httpcore.ConnectError, match="not checked"):
        backend.connect_tcp("127.0.0.1", 80)
    with pytest.raises(httpcore.ConnectError, match="not checked"):
        backend.connect_tcp("docs.example.test", 8080)
