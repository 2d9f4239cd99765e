"""A loopback stand-in for the search providers' HTTP APIs.

It records every request (method, path, query, headers, JSON body) and answers
with whatever the test queued: a JSON body, an HTTP error, a non-JSON body,
or silence past the client's timeout.
"""

from __future__ import annotations

import http.server
import json
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs
import pytest


@attrs.frozen
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: Any


class SearchFake:
    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.replies: list[tuple[int, bytes, str]] = []
        self.hang = threading.Event()
        self.stop_event = threading.Event()
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.owner = self
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def reply_json(self, body: Any, status: int = 200) -> None:
        self.replies.append((status, json.dumps(body).encode(), "application/json"))

    def reply_raw(self, status: int, body: bytes = b"", content_type: str = "text/plain") -> None:
        self.replies.append((status, body, content_type))

    def start(self) -> "SearchFake":
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stop_event.set()
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join()


class _Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:  # noqa: N802
        self._answer(None)

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self._answer(json.loads(self.rfile.read(length) or b"null"))

    def _answer(self, body: Any) -> None:
        fake: SearchFake = self.server.owner
        parts = urlsplit(self.path)
        query = {key: values[0] for key, values in parse_qs(parts.query).items()}
        fake.requests.append(Recorded(self.command, parts.path, query,
                                      {k.lower(): v for k, v in self.headers.items()}, body))
        if fake.hang.is_set():
            fake.stop_event.wait(30)
            return
        status, payload, content_type = fake.replies.pop(0) if fake.replies else (500, b"no reply queued", "text/plain")
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def search_fake() -> Iterator[SearchFake]:
    fake = SearchFake().start()
    yield fake
    fake.stop()


def searxng_body(*results: tuple[str, str, str]) -> dict:
    """A SearXNG JSON answer with (title, url, content) results."""
    return {"query": "q", "results": [{"title": t, "url": u, "content": c, "engine": "x"} for t, u, c in results]}
