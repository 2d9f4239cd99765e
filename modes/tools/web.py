"""The web tools: web_search and web_fetch, closed over a workspace.

Every fetched page is saved as pages/<slug>.md in the workspace, so the model
can come back to it with read and grep instead of fetching it twice, and so a
kept workspace (--no-cleanup) holds what the answer was based on.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Mapping
from typing import Annotated
from urllib.parse import urlsplit

from config.schema import WebSettings
from dispatcher.errors import FetchError, ToolInputError
from modes.base import Sources
from modes.tools.definition import Tool, tool
from sandbox.workspace import Workspace

MAX_INLINE_CHARS = 50_000  # of a page's markdown returned by web_fetch or put into the first message
MAX_SLUG_CHARS = 80
MAX_SEARCH_RESULTS = 20
PAGES_DIR = "pages"


class PageStore:
    """Saves pages under pages/ with readable, unique names."""

    def __init__(self, workspace: Workspace) -> None:
        self._workspace = workspace
        self._taken: set[str] = set()
        self._lock = threading.Lock()

    def save(self, url: str, markdown: str) -> str:
        """Write `markdown` for `url` and return its workspace-relative path."""
        base = page_slug(url)
        with self._lock:
            name, n = base, 1
            while name in self._taken:
                n += 1
                name = f"{base}-{n}"
            self._taken.add(name)
        return self._workspace.write_bytes(f"{PAGES_DIR}/{name}.md", markdown.encode("utf-8"))


def page_slug(url: str) -> str:
    """`https://Example.com/docs/Intro.html?x=1` → `example-com-docs-intro-html-x-1`."""
    parts = urlsplit(url)
    text = f"{parts.hostname or ''}{parts.path}{'-' + parts.query if parts.query else ''}".lower()
    slug = re.sub(r"[^a-z0-9]+", "-", text).strip("-")[:MAX_SLUG_CHARS].strip("-")
    return slug or "page"


def inline_text(markdown: str, saved_as: str) -> str:
    """The part of a page the model sees at once, with a note on where the rest is."""
    if len(markdown) <= MAX_INLINE_CHARS:
        return f"{markdown.rstrip()}\n\n[saved as {saved_as}]"
    shown = markdown[:MAX_INLINE_CHARS]
    next_line = shown.count("\n") + 1
    return (f"{shown}\n\n[page continues: {len(markdown) - MAX_INLINE_CHARS:,} more characters; saved as "
            f"{saved_as} — read it with read(path=\"{saved_as}\", offset={next_line}) or grep]")


def web_tools(workspace: Workspace, settings: WebSettings, sources: Sources,
              environ: Mapping[str, str], store: PageStore | None = None) -> list[Tool]:
    """web_search and web_fetch; web_fetch saves pages through `store` and records them in `sources`."""
    store = store or PageStore(workspace)

    @tool
    def web_search(
        query: Annotated[str, "What to search the web for."],
        limit: Annotated[int, "Most results to return (1-20)."] = 10,
    ) -> str:
        """Search the web. Returns a numbered list of results: title, URL and a
        snippet. Fetch the pages you need with web_fetch before citing them."""
        from modes.net.search import search

        if not query.strip():
            raise ToolInputError("query is empty")
        if not 1 <= limit <= MAX_SEARCH_RESULTS:
            raise ToolInputError(f"limit must be between 1 and {MAX_SEARCH_RESULTS}")
        results = search(query, limit, settings, environ)
        if not results:
            return f"No results for {query!r}."
        return "\n".join(f"{n}. {r.title}\n   {r.url}\n   {r.snippet}".rstrip() for n, r in enumerate(results, 1))

    @tool
    def web_fetch(url: Annotated[str, "http(s) URL of the page to fetch."]) -> str:
        """Fetch a web page as clean markdown (title and URL on top). The page is
        saved as pages/<name>.md in the workspace; long pages are cut at 50,000
        characters here, and the rest is read from that file with read or grep."""
        from modes.net.fetch import fetch_page

        try:
            page = fetch_page(url, settings)
        except FetchError as exc:
            # One unreachable page must not end the run: the model is told and moves on.
            raise ToolInputError(str(exc)) from None
        saved_as = store.save(page.final_url, page.markdown)
        sources.add(page.url)
        if page.final_url != page.url:
            sources.add(page.final_url)
        return inline_text(page.markdown, saved_as)

    return [web_search, web_fetch]
