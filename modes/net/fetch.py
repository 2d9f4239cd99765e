"""Fetch one web page safely and return it as markdown.

Every hop (the URL and each redirect) is checked by the SSRF guard and the
connection goes to the address that was checked. The body is streamed and
decoded by us, a bounded chunk at a time, so a gzip bomb never grows memory
past the page cap; the total deadline is enforced on every socket operation.
"""

from __future__ import annotations

import re
import socket
import time
import typing
import urllib.parse
import zlib
from collections.abc import Iterator

import attrs

from config import schema
from dispatcher import errors
from modes.net import extract, guard

if typing.TYPE_CHECKING:
    import httpx

MAX_REDIRECTS = 5
CONNECT_TIMEOUT_S = 10.0
# The longest a server may stay silent mid-response; the total deadline bounds it too.
READ_TIMEOUT_S = 15.0
# A socket timeout this close to the total deadline was the deadline (clocks differ by a hair).
DEADLINE_SLACK_S = 0.05
# Decompressed output per step: what a gzip bomb can add to memory before we count it.
DECODE_CHUNK_BYTES = 64 * 1024
USER_AGENT = "Mozilla/5.0 (compatible; research/0.1; +https://github.com/)"
ACCEPT = "text/html,application/xhtml+xml,text/markdown;q=0.9,text/plain;q=0.9,application/json;q=0.8,*/*;q=0.5"
_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_SNIFFED_MEDIA_TYPES = {"html": "text/html", "json": "application/json", "text": "text/plain"}


@attrs.frozen
class FetchedPage:
    url: str           # as requested
    final_url: str     # after redirects
    content_type: str  # the media type, e.g. "text/html"
    title: str | None
    markdown: str      # title and URL on top, then the content


def fetch_page(url: str, settings: schema.WebSettings, *,
               resolver: guard.Resolver = socket.getaddrinfo) -> FetchedPage:
    """Fetch `url` within `settings`' limits and return it as markdown.

    Raises FetchError with one sentence a model and a user can both read.
    `resolver` (getaddrinfo's signature) is for tests that play DNS.
    """
    download = _download(url, settings, resolver)
    title, markdown = extract.to_markdown(download.body, download.kind, download.charset, download.final_url)
    return FetchedPage(url=url, final_url=download.final_url, content_type=download.media_type,
                       title=title, markdown=markdown)


@attrs.frozen
class _Download:
    final_url: str
    media_type: str
    charset: str | None
    kind: str
    body: bytes


def _download(url: str, settings: schema.WebSettings, resolver: guard.Resolver) -> _Download:
    import httpx

    total_s = settings.fetch_timeout_s
    backend = guard.PinnedNetworkBackend(deadline=time.monotonic() + total_s)
    timeout = httpx.Timeout(connect=min(CONNECT_TIMEOUT_S, total_s), read=min(READ_TIMEOUT_S, total_s),
                            write=min(READ_TIMEOUT_S, total_s), pool=min(CONNECT_TIMEOUT_S, total_s))
    headers = {"User-Agent": USER_AGENT, "Accept": ACCEPT, "Accept-Encoding": "gzip, deflate"}
    # A fresh client per fetch: no cookies or connections carry over; trust_env=False ignores *_PROXY and .netrc.
    with httpx.Client(transport=_pinned_transport(backend), trust_env=False, follow_redirects=False,
                      timeout=timeout, headers=headers) as client:
        current = url
        for _hop in range(MAX_REDIRECTS + 1):
            request_url = _parse_url(current)
            shown = url if current == url else f"{current} (redirected from {url})"
            target = guard.check_target(shown, request_url.scheme, request_url.raw_host.decode("ascii"),
                                        request_url.port, settings, resolver=resolver,
                                        timeout_s=max(backend.time_left(), 0.0))
            backend.pin(target)
            try:
                with client.stream("GET", request_url) as response:
                    location = response.headers.get("location")
                    if response.status_code in _REDIRECT_STATUSES and location:
                        current = _join(response.url, location, url)
                        continue
                    return _read_page(url, response, settings, backend)
            except httpx.TimeoutException as exc:
                if backend.time_left() <= DEADLINE_SLACK_S:
                    raise errors.FetchError(f"fetch of {url} took longer than {total_s:g} s") from exc
                raise errors.FetchError(f"fetch of {url} timed out: the server stopped answering") from exc
            except httpx.HTTPError as exc:
                raise errors.FetchError(f"could not fetch {url}: {_describe(exc)}") from exc
    raise errors.FetchError(f"too many redirects (more than {MAX_REDIRECTS}) from {url}")


def _parse_url(url: str) -> httpx.URL:
    import httpx

    try:
        parsed = httpx.URL(url)
        parsed.raw_host.decode("ascii")
    except (httpx.InvalidURL, UnicodeError, TypeError) as exc:
        _refuse_forbidden_literal(url)
        raise errors.FetchError(f"refused {url}: it is not a valid URL") from exc
    return parsed


def _refuse_forbidden_literal(url: str) -> None:
    """Name the real reason when httpx rejects a URL whose host the C library reads as a private address.

    httpx refuses forms such as ``http://0177.0.0.1/`` outright, which is safe,
    but "not a valid URL" would hide that the target was a loopback address.
    """
    try:
        host = urllib.parse.urlsplit(url).hostname or ""
    except ValueError:
        return
    address = guard.parse_ip_literal(host)
    reason = guard.forbidden_reason(address) if address is not None else None
    if reason is not None:
        raise errors.FetchError(f"refused {url}: {host} is {reason}")


def _join(base: httpx.URL, location: str, original: str) -> str:
    import httpx

    try:
        return str(base.join(location))
    except httpx.InvalidURL as exc:
        raise errors.FetchError(f"{original} redirected to an invalid URL") from exc


def _describe(exc: Exception) -> str:
    # "[Errno 111] Connection refused" -> "connection refused": a clause of our sentence.
    text = re.sub(r"^\[Errno -?\d+\]\s*", "", str(exc).strip()).rstrip(".")
    return text[:1].lower() + text[1:] if text else type(exc).__name__


def _read_page(url: str, response: httpx.Response, settings: schema.WebSettings,
               backend: guard.PinnedNetworkBackend) -> _Download:
    if response.status_code >= 400:
        raise errors.FetchError(f"{url} answered HTTP {response.status_code} {response.reason_phrase}".rstrip())
    media_type, charset = _content_type(response.headers.get("content-type", ""))
    kind = extract.kind_of(media_type) if media_type else None
    if media_type and kind is None:
        raise errors.FetchError(f"{url} is {media_type}, not a text page")
    cap = settings.max_page_bytes
    encoding = response.headers.get("content-encoding", "identity").strip().lower()
    declared_length = response.headers.get("content-length", "")
    if encoding == "identity" and declared_length.isdigit() and int(declared_length) > cap:
        raise errors.FetchError(f"page at {url} exceeded {cap:,} bytes")
    chunks: list[bytes] = []
    size = 0
    wide = False
    for chunk in _decoded(response, encoding, url):
        if not chunks:
            wide = extract.is_wide_encoding(chunk, charset)
        # NUL bytes never occur in real text (short of UTF-16/32): refuse binary served as text.
        if not wide and b"\x00" in chunk:
            raise errors.FetchError(f"{url} is binary data served as {media_type or 'an untyped page'}, not a text page")
        size += len(chunk)
        if size > cap:
            raise errors.FetchError(f"page at {url} exceeded {cap:,} bytes")
        if backend.time_left() <= 0:
            raise errors.FetchError(f"fetch of {url} took longer than {settings.fetch_timeout_s:g} s")
        chunks.append(chunk)
    body = b"".join(chunks)
    if kind is None:  # no Content-Type at all: judge by the body
        kind = extract.sniff_kind(body)
        media_type = _SNIFFED_MEDIA_TYPES[kind]
    return _Download(final_url=str(response.url), media_type=media_type, charset=charset, kind=kind, body=body)


def _content_type(header: str) -> tuple[str, str | None]:
    media_type, _, params = header.partition(";")
    charset = None
    for param in params.split(";"):
        name, _, value = param.partition("=")
        if name.strip().lower() == "charset" and value.strip():
            charset = value.strip().strip("\"'")
    return media_type.strip().lower(), charset


def _decoded(response: httpx.Response, encoding: str, url: str) -> Iterator[bytes]:
    """Yield the body decoded from its Content-Encoding, never more than DECODE_CHUNK_BYTES at a time.

    httpx's own decoders inflate a whole network chunk in one call (64 KiB of
    gzip can be 64 MiB of zeros), so the raw stream is decoded here instead.
    """
    if encoding in ("identity", ""):
        yield from response.iter_raw()
        return
    if encoding in ("gzip", "x-gzip"):
        wbits = zlib.MAX_WBITS | 16
    elif encoding == "deflate":
        wbits = zlib.MAX_WBITS  # zlib-wrapped as the RFC says; raw deflate is tried below
    else:
        raise errors.FetchError(f"{url} uses the unsupported content encoding {encoding!r}")
    inflater = zlib.decompressobj(wbits)
    started = False
    try:
        for raw in response.iter_raw():
            data = raw
            while data:
                if not started and encoding == "deflate" and not _has_zlib_header(data):
                    inflater = zlib.decompressobj(-zlib.MAX_WBITS)  # some servers send raw deflate
                started = True
                out = inflater.decompress(data, DECODE_CHUNK_BYTES)
                if out:
                    yield out
                data = inflater.unconsumed_tail
                # Output is capped per call, so inflate may hold more even when the input is used up.
                while not data and len(out) == DECODE_CHUNK_BYTES and not inflater.eof:
                    out = inflater.decompress(b"", DECODE_CHUNK_BYTES)
                    if out:
                        yield out
                if inflater.eof and inflater.unused_data:
                    if encoding == "deflate":
                        break  # trailing junk after a deflate stream is ignored, as browsers do
                    data = inflater.unused_data  # concatenated gzip members
                    inflater = zlib.decompressobj(wbits)
        tail = inflater.flush()
        if tail:
            yield tail
    except zlib.error as exc:
        raise errors.FetchError(f"{url} sent a corrupt {encoding} body") from exc


def _has_zlib_header(data: bytes) -> bool:
    return len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0


def _pinned_transport(backend: guard.PinnedNetworkBackend) -> httpx.HTTPTransport:
    """An httpx transport whose every connection goes through the guard's pinned backend."""
    import httpcore
    import httpx

    transport = httpx.HTTPTransport(trust_env=False, retries=0)
    # HTTPTransport has no network_backend parameter, so its pool is rebuilt with ours;
    # HTTPTransport.handle_request still maps httpcore errors to httpx ones. A test
    # (connections go to the pinned address) fails if httpx ever renames `_pool`.
    transport._pool = httpcore.ConnectionPool(
        ssl_context=httpx.create_ssl_context(trust_env=False), http1=True, http2=False,
        retries=0, network_backend=backend,
    )
    return transport
