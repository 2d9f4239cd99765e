"""fetch_page never reaches a private address: every form of URL, every redirect hop, no rebinding."""

from __future__ import annotations

import socket

import pytest

from config.schema import WebSettings
from dispatcher.errors import FetchError
from modes.net.fetch import fetch_page
from tests.support.web_server import (  # noqa: F401
    WebServer,
    internal_server,
    public_server,
    web_settings,
)


def assert_refused(url: str, settings: WebSettings, internal: WebServer, reason: str) -> str:
    """Fetching `url` fails naming `reason`, nothing reached the internal server, and its secret was never shown."""
    with pytest.raises(FetchError) as caught:
        fetch_page(url, settings)
    message = str(caught.value)
    assert reason in message
    assert internal.requests == []
    assert internal.secret not in message
    return message


def test_loopback_url_is_refused_with_the_allowed_hosts_hint(internal_server, web_settings):
    """The exact message tells the user what the address is and how to allow it."""
    url = f"http://127.0.0.1:{internal_server.port}/secret"
    message = assert_refused(url, web_settings, internal_server, "loopback")
    assert message == (f'refused {url}: 127.0.0.1 is a loopback address '
                       f'(add "127.0.0.1:{internal_server.port}" to [web] allowed_hosts to allow it)')


@pytest.mark.parametrize("host", [
    "localhost", "LocalHost", "127.1", "2130706433", "0x7f000001", "0177.0.0.1", "127.0.0.2",
    "[::1]", "[::ffff:127.0.0.1]", "[::ffff:7f00:1]", "[64:ff9b::7f00:1]", "[2002:7f00:1::]", "0.0.0.0", "[::]",
])
def test_every_spelling_of_this_machine_is_refused(host, internal_server, web_settings):
    """Names and numeric tricks that land on this machine never reach the internal service."""
    assert_refused(f"http://{host}:{internal_server.port}/secret", web_settings, internal_server, "refused")


@pytest.mark.parametrize(("url", "reason"), [
    ("http://169.254.169.254/latest/meta-data/", "link-local"),
    ("http://[fd00:ec2::254]/latest/meta-data/", "private"),
    ("http://10.0.0.1/", "private"),
    ("http://192.168.0.1/", "private"),
    ("http://100.100.100.200/latest/meta-data/", "carrier-grade NAT"),
    ("http://[fe80::1]/", "link-local"),
    ("http://224.0.0.251/", "multicast"),
    ("http://255.255.255.255/", "broadcast"),
    ("file:///etc/passwd", "only http and https"),
    ("gopher://127.0.0.1:6379/_INFO", "only http and https"),
])
def test_private_and_metadata_addresses_are_refused(url, reason, internal_server, web_settings):
    """Cloud metadata, private ranges and other schemes are refused before any connection is made."""
    assert_refused(url, web_settings, internal_server, reason)


@pytest.mark.parametrize(("path", "reason"), [
    ("/to-internal", "loopback"),
    ("/to-metadata", "link-local"),
    ("/to-loopback-alias", "loopback"),
    ("/to-localhost", "localhost resolves to"),
    ("/to-file", "only http and https"),
])
def test_redirects_to_forbidden_addresses_are_refused(path, reason, public_server, internal_server, web_settings):
    """A public page cannot bounce the fetch into the internal network: every hop is checked again."""
    message = assert_refused(public_server.url(path), web_settings, internal_server, reason)
    assert f"(redirected from {public_server.url(path)})" in message
    assert [p for p, _ in public_server.requests] == [path]


def test_the_allowed_public_fixture_is_fetched(public_server, web_settings):
    """The host:port in allowed_hosts is fetched, which is what every other fetch test relies on."""
    page = fetch_page(public_server.url("/text"), web_settings)
    assert "Plain text stays exactly as it is." in page.markdown


def test_allowing_a_host_without_a_port_allows_any_port(internal_server):
    """`127.0.0.1` alone in allowed_hosts lets every port of it through, as documented."""
    page = fetch_page(internal_server.url("/secret"), WebSettings(allowed_hosts=("127.0.0.1",)))
    assert internal_server.secret in page.markdown


def test_allow_private_networks_reaches_the_internal_server(internal_server):
    """Turning the guard off is possible, and then private addresses are fetched."""
    page = fetch_page(internal_server.url("/secret"), WebSettings(allow_private_networks=True))
    assert internal_server.secret in page.markdown


def test_the_connection_goes_to_the_checked_address_with_the_hostname_kept(public_server):
    """A name is resolved once; the socket goes to that address while the Host header keeps the name."""
    calls: list[str] = []

    def resolver(host, port, *args, **kwargs):
        calls.append(host)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("127.0.0.1", port))]

    settings = WebSettings(allowed_hosts=(f"docs.example.test:{public_server.port}",))
    page = fetch_page(f"http://docs.example.test:{public_server.port}/text", settings, resolver=resolver)
    assert page.final_url == f"http://docs.example.test:{public_server.port}/text"
    assert calls == ["docs.example.test"]
    assert public_server.requests == [("/text", f"docs.example.test:{public_server.port}")]


def test_dns_rebinding_after_the_check_changes_nothing(public_server, internal_server):
    """A resolver that answers differently the second time cannot move the connection to another address."""
    try:
        twin = WebServer(host="127.0.0.2", port=public_server.port)  # same port, the "internal" address
    except OSError:
        pytest.skip("127.0.0.2 with the public fixture's port is not available here")
    twin.secret = internal_server.secret
    twin.routes["/text"] = lambda request: request.send_static(200, twin.secret.encode(), "text/plain")
    twin.start()
    answers = iter(["127.0.0.1"] + ["127.0.0.2"] * 10)

    def rebinding(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers), port))]

    try:
        settings = WebSettings(allowed_hosts=(f"rebind.test:{public_server.port}",))
        page = fetch_page(f"http://rebind.test:{public_server.port}/text", settings, resolver=rebinding)
    finally:
        twin.stop()
    assert "Plain text stays exactly as it is." in page.markdown
    assert twin.requests == []
    assert internal_server.secret not in page.markdown


def test_proxies_from_the_environment_are_ignored(public_server, web_settings, monkeypatch):
    """HTTP_PROXY and friends are not honoured: a proxy would be a way around the guard."""
    proxy = WebServer().start()
    try:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
            monkeypatch.setenv(name, proxy.base_url)
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        fetch_page(public_server.url("/text"), web_settings)
    finally:
        proxy.stop()
    assert proxy.requests == []
    assert [p for p, _ in public_server.requests] == ["/text"]


def test_cookies_do_not_carry_over_between_fetches(public_server, web_settings):
    """A cookie a page sets is not sent by the next fetch (no session state leaks across pages)."""
    public_server.add("/set-cookie", "set", "text/plain", headers={"Set-Cookie": "session=abc123; Path=/"})
    public_server.routes["/echo-cookie"] = lambda request: request.send_static(
        200, f"cookie header: [{request.headers.get('Cookie', '')}]".encode(), "text/plain")
    fetch_page(public_server.url("/set-cookie"), web_settings)
    page = fetch_page(public_server.url("/echo-cookie"), web_settings)
    assert "cookie header: []" in page.markdown
