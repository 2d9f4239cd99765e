"""Loopback HTTP servers for the fetch tests: a "public" site full of traps and an "internal" one with a secret.

`public_server` serves the pages the tests need (an article, non-UTF-8 pages,
redirect chains, a slow drip, a gzip bomb, binaries...). `internal_server`
stands for a service the SSRF guard must protect: it answers every request
with a secret and counts what reached it. `web_settings` lets the public
server through the guard by its exact host:port, so the internal server, on
another port of the same address, is still refused.
"""

from __future__ import annotations

import gzip
import http.server
import secrets
import threading
import zlib
from collections.abc import Callable, Iterator

import pytest

from config.schema import WebSettings

DRIP_INTERVAL_S = 0.5
BOMB_DECODED_BYTES = 1 << 30  # 1 GiB of spaces, never held in memory
BOMB_BLOCK_BYTES = 1 << 20

Handler = Callable[["_RequestHandler"], None]

ARTICLE_HTML = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Understanding Widgets | Widget Weekly</title></head>
<body>
<header><nav><ul>
  <li><a href="/">Home</a></li><li><a href="/subscribe">Subscribe to our newsletter</a></li>
  <li><a href="/shop">Shop the widget store</a></li>
</ul></nav></header>
<main><article>
<h1>Understanding Widgets</h1>
<p>Widgets are small components that do <b>one thing</b> well. This paragraph is long enough to be
considered real content by an extractor, talking at length about widgets, their history and their many
properties. See <a href="https://example.org/widget-docs">the widget documentation</a> for more.</p>
<h2>Kinds of widgets</h2>
<p>There are several kinds of widgets in common use today, and each kind has its own strengths:</p>
<ul><li>Round widgets roll along the floor</li><li>Square widgets stack neatly together</li>
<li>Triangular widgets point the way</li></ul>
<p>The following table compares the kinds of widgets by the number of sides each one has.</p>
<table><tr><th>Kind</th><th>Sides</th></tr><tr><td>Round</td><td>0</td></tr>
<tr><td>Square</td><td>4</td></tr><tr><td>Triangular</td><td>3</td></tr></table>
<h2>Using widgets</h2>
<p>Install the widget library and call it as shown in this short example program written in Python:</p>
<pre><code>import widgets
widgets.spin(times=3)
</code></pre>
<p>That is all there is to using widgets in a program; the rest is left to the reader as an exercise
in patience, curiosity and careful reading of the widget manual.</p>
</article></main>
<footer><p>Copyright 2024 Widget Corp. All rights reserved.</p>
<ul><li><a href="/privacy">Privacy policy</a></li><li><a href="/terms">Terms of service</a></li></ul></footer>
</body></html>
"""

RUSSIAN_TEXT = "Пример страницы в кодировке Windows-1251: съешь же ещё этих мягких французских булок, да выпей чаю."
JAPANESE_TEXT = "これはシフトJISで書かれた日本語のページです。ウィジェットの説明をここに書きます。"


def _cyrillic_page(meta: bool) -> bytes:
    charset_tag = '<meta http-equiv="Content-Type" content="text/html; charset=windows-1251">' if meta else ""
    paragraphs = "".join(f"<p>{RUSSIAN_TEXT} Абзац номер {n}.</p>" for n in range(1, 6))
    page = f"<html><head>{charset_tag}<title>Кириллица</title></head><body><article>{paragraphs}</article></body></html>"
    return page.encode("windows-1251")


def _japanese_page() -> bytes:
    paragraphs = "".join(f"<p>{JAPANESE_TEXT} 段落{n}。</p>" for n in range(1, 6))
    page = f'<html><head><meta charset="shift_jis"><title>日本語</title></head><body><article>{paragraphs}</article></body></html>'
    return page.encode("shift_jis")


class _RequestHandler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self.server.owner.record(self)
        path = self.path.split("?", 1)[0]
        handler = self.server.owner.routes.get(path)
        if handler is None:
            self.send_static(404, b"not found", "text/plain")
            return
        try:
            handler(self)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up on purpose (a cap, a deadline): nothing to report

    def send_static(self, status: int, body: bytes, content_type: str | None,
                    headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        if content_type is not None:
            self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass  # keep pytest output clean


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    owner: WebServer


class WebServer:
    """A threading HTTP server on a loopback address; `routes` maps a path to a handler."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.routes: dict[str, Handler] = {}
        self.secret = ""  # what an internal server holds; never to be seen in any output
        self.requests: list[tuple[str, str]] = []  # (path, Host header) of every request received
        self.stop_event = threading.Event()
        self._lock = threading.Lock()
        self._httpd = _Server((host, port), _RequestHandler)
        self._httpd.owner = self
        self.host = host
        self.port = self._httpd.server_address[1]
        # A short poll interval keeps shutdown() (it waits for the next poll) from slowing every test down.
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        name=f"web {host}:{self.port}", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, path: str) -> str:
        return self.base_url + path

    def record(self, request: _RequestHandler) -> None:
        with self._lock:
            self.requests.append((request.path, request.headers.get("Host", "")))

    def add(self, path: str, body: bytes | str, content_type: str | None = "text/html; charset=utf-8",
            status: int = 200, headers: dict[str, str] | None = None) -> str:
        """Serve a fixed body at `path`; return its URL."""
        data = body.encode("utf-8") if isinstance(body, str) else body
        self.routes[path] = lambda request: request.send_static(status, data, content_type, headers)
        return self.url(path)

    def redirect(self, path: str, location: str, status: int = 302) -> str:
        return self.add(path, b"", None, status=status, headers={"Location": location})

    def start(self) -> WebServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()  # ends slow drips and bombs still being sent
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


def _drip(request: _RequestHandler) -> None:
    """A page that never ends: one byte every DRIP_INTERVAL_S until the server stops."""
    request.send_response(200)
    request.send_header("Content-Type", "text/plain")
    request.end_headers()
    stop = request.server.owner.stop_event
    while not stop.wait(DRIP_INTERVAL_S):
        request.wfile.write(b"x")
        request.wfile.flush()


def gzip_bomb_stream(decoded_bytes: int = BOMB_DECODED_BYTES) -> Iterator[bytes]:
    """Yield a gzip stream of `decoded_bytes` spaces, one compressed block at a time.

    Spaces rather than zeros: NUL bytes would be refused as binary before the
    byte cap is ever reached, and the cap is what a bomb must run into.
    """
    compressor = zlib.compressobj(1, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    spaces = b" " * BOMB_BLOCK_BYTES
    for _ in range(decoded_bytes // BOMB_BLOCK_BYTES):
        block = compressor.compress(spaces)
        if block:
            yield block
    yield compressor.flush()


def gzip_bomb_handler(request: _RequestHandler) -> None:
    """1 GiB of spaces, gzip-encoded, generated as it is sent (a few MB on the wire)."""
    request.send_response(200)
    request.send_header("Content-Type", "text/html")
    request.send_header("Content-Encoding", "gzip")
    request.end_headers()  # no Content-Length: the body ends when the connection closes
    stop = request.server.owner.stop_event
    for block in gzip_bomb_stream():
        if stop.is_set():
            return
        request.wfile.write(block)


def _chunked_huge(size: int) -> Handler:
    def handler(request: _RequestHandler) -> None:
        request.send_response(200)
        request.send_header("Content-Type", "text/plain")
        request.end_headers()  # no Content-Length: only the streamed cap can stop it
        line = b"all work and no play makes a very long page\n"
        for _ in range(size // len(line) + 1):
            request.wfile.write(line)
    return handler


PNG_BYTES = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489") + bytes(64)


def populate_public_site(server: WebServer, internal: WebServer) -> None:
    """Install every page the fetch tests use on `server`; redirect traps point at `internal`."""
    server.add("/article", ARTICLE_HTML)
    server.add("/cp1251-header", _cyrillic_page(meta=False), "text/html; charset=windows-1251")
    server.add("/cp1251-meta", _cyrillic_page(meta=True), "text/html")
    server.add("/cp1251-undeclared", _cyrillic_page(meta=False), "text/html")
    server.add("/sjis-meta", _japanese_page(), "text/html")
    server.add("/text", "Plain text stays exactly as it is.\n  Indented line.\n", "text/plain; charset=utf-8")
    server.add("/readme.md", "# Title\n\n- item one\n- item two\n\n```python\nprint(1)\n```\n", "text/markdown")
    server.add("/data.json", '{"name":"widget","sides":[0,4,3],"note":"ünïcode"}', "application/json")
    server.add("/image.png", PNG_BYTES, "image/png")
    server.add("/report.pdf", b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n", "application/pdf")
    server.add("/download", b"MZ\x90\x00\x03\x00\x00\x00binary", "application/octet-stream")
    server.add("/fake-text", b"looks like text\x00\x00\x01\x02but is not", "text/plain")
    server.add("/untyped", ARTICLE_HTML, None)
    server.add("/missing-page", "gone", "text/plain", status=404)
    server.add("/gzip-article", gzip.compress(ARTICLE_HTML.encode()), "text/html; charset=utf-8",
               headers={"Content-Encoding": "gzip"})
    server.add("/deflate-article", zlib.compress(ARTICLE_HTML.encode()), "text/html; charset=utf-8",
               headers={"Content-Encoding": "deflate"})
    server.add("/brotli", b"\x0b\x02\x80hello\x03", "text/plain", headers={"Content-Encoding": "br"})
    server.add("/huge-declared", b"x" * 2_000_000, "text/plain")
    server.routes["/huge-streamed"] = _chunked_huge(2_000_000)
    server.routes["/drip"] = _drip
    server.routes["/gzip-bomb"] = gzip_bomb_handler
    # A chain of five redirects (allowed) and one of six (refused); relative Locations on purpose.
    for hop in range(1, 6):
        server.redirect(f"/chain5/{hop}", f"/chain5/{hop + 1}" if hop < 5 else "/article")
    for hop in range(1, 7):
        server.redirect(f"/chain6/{hop}", f"/chain6/{hop + 1}" if hop < 6 else "/article")
    server.redirect("/to-internal", internal.url("/secret"))
    server.redirect("/to-metadata", "http://169.254.169.254/latest/meta-data/iam/security-credentials/")
    server.redirect("/to-loopback-alias", f"http://127.0.0.2:{internal.port}/secret")
    server.redirect("/to-file", "file:///etc/passwd")
    server.redirect("/to-localhost", f"http://localhost:{internal.port}/secret", status=307)


@pytest.fixture
def internal_server() -> Iterator[WebServer]:
    """A service the guard must protect: every path answers with a secret, and each request is counted."""
    server = WebServer()
    server.secret = f"INTERNAL-SECRET-{secrets.token_hex(8)}"
    server.routes["/secret"] = lambda request: request.send_static(200, server.secret.encode(), "text/plain")
    server.routes["/"] = server.routes["/secret"]
    server.start()
    yield server
    server.stop()


@pytest.fixture
def public_server(internal_server: WebServer) -> Iterator[WebServer]:
    """The "public" site the tests fetch from, with every trap installed."""
    server = WebServer()
    populate_public_site(server, internal_server)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def web_settings(public_server: WebServer) -> WebSettings:
    """Settings that let the public fixture through the guard by its exact host:port, and nothing else."""
    return WebSettings(allowed_hosts=(f"127.0.0.1:{public_server.port}",), fetch_timeout_s=10.0)
