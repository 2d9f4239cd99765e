"""Peak memory while fetching a 1 GiB gzip bomb.

    python bench/gzip_bomb_memory.py

A loopback server streams 1 GiB of spaces, gzip-compressed (a few MB on the
wire, generated as it is sent). fetch_page must stop at the 10 MB cap on the
decoded body without ever inflating more than a small chunk at a time.
Goal: peak RSS of this process under 300 MB.
"""

from __future__ import annotations

import pathlib
import resource
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from config.schema import WebSettings  # noqa: E402
from dispatcher.errors import FetchError  # noqa: E402
from modes.net.fetch import fetch_page  # noqa: E402
from tests.support.web_server import WebServer, gzip_bomb_handler  # noqa: E402

GOAL_PEAK_RSS_MB = 300


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def main() -> None:
    import httpx  # noqa: F401  (imported up front so the baseline includes the libraries)
    import trafilatura  # noqa: F401

    server = WebServer()
    server.routes["/bomb"] = gzip_bomb_handler
    server.start()
    before = peak_rss_mb()
    try:
        settings = WebSettings(allowed_hosts=(f"127.0.0.1:{server.port}",))
        started = time.perf_counter()
        try:
            fetch_page(server.url("/bomb"), settings)
            outcome = "fetched (unexpected)"
        except FetchError as exc:
            outcome = str(exc)
        elapsed = time.perf_counter() - started
    finally:
        server.stop()
    after = peak_rss_mb()
    print(f"outcome      {outcome}")
    print(f"time         {elapsed:.2f} s")
    print(f"peak RSS     {before:.0f} MB before the fetch, {after:.0f} MB after")
    print(f"goal: peak RSS < {GOAL_PEAK_RSS_MB} MB -> {'met' if after < GOAL_PEAK_RSS_MB else 'MISSED'}")


if __name__ == "__main__":
    main()
