"""Do fetches run in parallel when the agent loop runs tool calls on threads?

    python bench/parallel_fetch.py

A loopback server answers every page after PAGE_DELAY_S. Three pages are
fetched one after another, then at once on a ThreadPoolExecutor (the way the
agent loop runs a turn's tool calls). Goal: the concurrent run takes about one
page's time, a ratio near 3x.
"""

from __future__ import annotations

import concurrent.futures
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from config.schema import WebSettings  # noqa: E402
from modes.net.fetch import fetch_page  # noqa: E402
from tests.support.web_server import ARTICLE_HTML, WebServer  # noqa: E402

PAGE_DELAY_S = 2.0
PAGES = 3


def slow_article(request) -> None:
    # Server-side pacing (the thing being measured), not test synchronisation.
    request.server.owner.stop_event.wait(PAGE_DELAY_S)
    request.send_static(200, ARTICLE_HTML.encode(), "text/html; charset=utf-8")


def main() -> None:
    server = WebServer().start()
    try:
        urls = []
        for n in range(PAGES):
            server.routes[f"/slow/{n}"] = slow_article
            urls.append(server.url(f"/slow/{n}"))
        settings = WebSettings(allowed_hosts=(f"127.0.0.1:{server.port}",))
        fetch_page(urls[0], settings)  # warm-up: import httpx and trafilatura before timing

        started = time.perf_counter()
        for url in urls:
            fetch_page(url, settings)
        sequential = time.perf_counter() - started

        started = time.perf_counter()
        with concurrent.futures.ThreadPoolExecutor(max_workers=PAGES) as pool:
            pages = list(pool.map(lambda url: fetch_page(url, settings), urls))
        concurrent_s = time.perf_counter() - started
        assert all("Understanding Widgets" in page.markdown for page in pages)
    finally:
        server.stop()
    print(f"{PAGES} pages, each answered after {PAGE_DELAY_S:g} s")
    print(f"sequential   {sequential:6.2f} s")
    print(f"concurrent   {concurrent_s:6.2f} s")
    print(f"speed-up     {sequential / concurrent_s:6.2f}x (ideal {PAGES}x)")


if __name__ == "__main__":
    main()
