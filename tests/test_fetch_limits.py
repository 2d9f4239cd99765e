"""fetch_page's limits: size, time, redirects, and what it will not read."""

from __future__ import annotations

import attrs
import pytest

from dispatcher.errors import FetchError
from modes.net.fetch import fetch_page
from tests.support.web_server import (  # noqa: F401
    internal_server,
    public_server,
    web_settings,
)


def fetch_error(url, settings) -> str:
    with pytest.raises(FetchError) as caught:
        fetch_page(url, settings)
    return str(caught.value)


def test_a_page_declared_larger_than_the_cap_is_refused(public_server, web_settings):
    """A Content-Length over max_page_bytes is refused with the cap in the message."""
    settings = attrs.evolve(web_settings, max_page_bytes=1_000_000)
    url = public_server.url("/huge-declared")
    assert fetch_error(url, settings) == f"page at {url} exceeded 1,000,000 bytes"


def test_a_streamed_page_larger_than_the_cap_is_cut_off(public_server, web_settings):
    """A page with no Content-Length is stopped once its body passes the cap."""
    settings = attrs.evolve(web_settings, max_page_bytes=1_000_000)
    url = public_server.url("/huge-streamed")
    assert fetch_error(url, settings) == f"page at {url} exceeded 1,000,000 bytes"


def test_a_gzip_bomb_hits_the_cap_on_the_decoded_body(public_server, web_settings):
    """1 GiB of gzip-compressed spaces is stopped at the default 10 MB cap on what it decodes to."""
    url = public_server.url("/gzip-bomb")
    assert fetch_error(url, web_settings) == f"page at {url} exceeded 10,000,000 bytes"


def test_a_slow_drip_is_cut_off_at_the_total_deadline(public_server, web_settings):
    """A server sending a byte every half second forever is abandoned when the total time runs out."""
    settings = attrs.evolve(web_settings, fetch_timeout_s=1.5)
    url = public_server.url("/drip")
    assert fetch_error(url, settings) == f"fetch of {url} took longer than 1.5 s"


def test_a_server_that_never_answers_is_cut_off_at_the_total_deadline(public_server, web_settings):
    """A server that accepts the connection and then says nothing is abandoned at the deadline."""
    public_server.routes["/silent"] = lambda request: request.server.owner.stop_event.wait()
    settings = attrs.evolve(web_settings, fetch_timeout_s=1.0)
    url = public_server.url("/silent")
    assert fetch_error(url, settings) == f"fetch of {url} took longer than 1 s"


def test_five_redirects_are_followed(public_server, web_settings):
    """A chain of five redirects (relative Locations) lands on the final page, which is reported."""
    page = fetch_page(public_server.url("/chain5/1"), web_settings)
    assert page.url == public_server.url("/chain5/1")
    assert page.final_url == public_server.url("/article")
    assert "Understanding Widgets" in page.markdown


def test_a_sixth_redirect_is_refused(public_server, web_settings):
    """More than five redirects is an error naming the URL, and the sixth target is never requested."""
    url = public_server.url("/chain6/1")
    assert fetch_error(url, web_settings) == f"too many redirects (more than 5) from {url}"
    assert [path for path, _ in public_server.requests] == [f"/chain6/{hop}" for hop in range(1, 7)]


@pytest.mark.parametrize(("path", "media_type"), [
    ("/image.png", "image/png"),
    ("/report.pdf", "application/pdf"),
    ("/download", "application/octet-stream"),
])
def test_binary_types_are_refused_by_content_type(path, media_type, public_server, web_settings):
    """Images, PDFs and other binaries are refused with a notice naming the type."""
    url = public_server.url(path)
    assert fetch_error(url, web_settings) == f"{url} is {media_type}, not a text page"


def test_binary_served_as_text_is_refused_by_its_nul_bytes(public_server, web_settings):
    """A body with NUL bytes is refused even when the server calls it text/plain."""
    url = public_server.url("/fake-text")
    assert fetch_error(url, web_settings) == f"{url} is binary data served as text/plain, not a text page"


def test_an_unsupported_content_encoding_is_refused(public_server, web_settings):
    """A body in an encoding we do not decode (brotli) is an error, not garbage."""
    url = public_server.url("/brotli")
    assert fetch_error(url, web_settings) == f"{url} uses the unsupported content encoding 'br'"


def test_an_http_error_status_is_reported(public_server, web_settings):
    """A 404 is an error that names the status, not a page of error HTML."""
    url = public_server.url("/missing-page")
    assert fetch_error(url, web_settings) == f"{url} answered HTTP 404 Not Found"


def test_a_closed_port_is_reported_in_one_sentence(web_settings):
    """Nothing listening gives a readable error naming the URL."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = attrs.evolve(web_settings, allowed_hosts=(f"127.0.0.1:{port}",))
    message = fetch_error(f"http://127.0.0.1:{port}/", settings)
    assert message.startswith(f"could not fetch http://127.0.0.1:{port}/: ")
    assert "refused" in message.lower()
