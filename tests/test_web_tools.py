"""web_fetch and web_search as the model calls them, and web mode's preparation
and citation checks, over a real workspace and loopback servers."""

from __future__ import annotations

import json

import pytest

from config.schema import Config, SearxngSettings, WebSettings
from dispatcher.errors import FetchError
from modes.base import RunRequest, Sources
from modes.tools.web import MAX_INLINE_CHARS, page_slug, web_tools
from modes.web import WebMode, cited_urls, normalise_url
from sandbox.local import LocalWorkspace
from tests.support.search_fakes import search_fake, searxng_body  # noqa: F401
from tests.support.web_server import WebServer

LONG_PAGE_WORDS = 30_000


@pytest.fixture
def site():
    server = WebServer().start()
    server.add("/short", "# Short page\n\nWidgets are small.\n", "text/markdown")
    server.add("/long", "# Long page\n\n" + "\n".join(f"widget line {n}" for n in range(LONG_PAGE_WORDS)),
               "text/markdown")
    server.redirect("/moved", server.url("/short"))
    yield server
    server.stop()


@pytest.fixture
def workspace():
    ws = LocalWorkspace.open("web")
    yield ws
    ws.close()


def settings_for(site, **extra) -> WebSettings:
    return WebSettings(allowed_hosts=(f"127.0.0.1:{site.port}",), **extra)


def tools_for(workspace, settings, sources):
    return {t.name: t for t in web_tools(workspace, settings, sources, {})}


def test_web_fetch_saves_the_page_and_returns_it_whole_when_short(site, workspace):
    """A short page comes back whole, is saved under pages/ and recorded as a source."""
    sources = Sources()
    out = tools_for(workspace, settings_for(site), sources)["web_fetch"].invoke({"url": site.url("/short")})
    assert "Widgets are small." in out
    saved = f"pages/{page_slug(site.url('/short'))}.md"
    assert out.endswith(f"[saved as {saved}]")
    assert "Widgets are small." in (workspace.host_dir / saved).read_text()
    assert sources.items() == [site.url("/short")]


def test_web_fetch_cuts_a_long_page_and_says_where_the_rest_is(site, workspace):
    """A page over 50,000 characters is cut, with the saved file and the offset to read on."""
    out = tools_for(workspace, settings_for(site), Sources())["web_fetch"].invoke({"url": site.url("/long")})
    saved = f"pages/{page_slug(site.url('/long'))}.md"
    assert len(out) < MAX_INLINE_CHARS + 400
    assert f"saved as {saved} — read it with read(path=\"{saved}\", offset=" in out
    assert "widget line 29999" in (workspace.host_dir / saved).read_text()


def test_web_fetch_records_both_the_asked_and_the_final_url(site, workspace):
    """After a redirect, both URLs count as fetched."""
    sources = Sources()
    tools_for(workspace, settings_for(site), sources)["web_fetch"].invoke({"url": site.url("/moved")})
    assert sources.items() == [site.url("/moved"), site.url("/short")]


def test_web_fetch_failure_is_a_message_and_the_run_goes_on(site, workspace):
    """A refused or failing URL is reported to the model; nothing is saved, nothing recorded."""
    sources = Sources()
    fetch = tools_for(workspace, WebSettings(), sources)["web_fetch"]
    out = fetch.invoke({"url": site.url("/short")})
    assert out.startswith("Error: refused") and "loopback" in out
    assert fetch.invoke({"url": "file:///etc/passwd"}).startswith("Error:")
    assert sources.items() == [] and not (workspace.host_dir / "pages").exists()


def test_same_slug_twice_gets_a_numbered_name(site, workspace):
    """Two pages with the same slug are saved side by side, not over each other."""
    fetch = tools_for(workspace, settings_for(site), Sources())["web_fetch"]
    fetch.invoke({"url": site.url("/short")})
    second = fetch.invoke({"url": site.url("/short")})
    assert second.endswith(f"[saved as pages/{page_slug(site.url('/short'))}-2.md]")


def test_web_search_lists_numbered_results(search_fake, workspace):  # noqa: F811
    """web_search prints a numbered list of title, URL and snippet."""
    search_fake.reply_json(searxng_body(("One", "https://one.example", "first"), ("Two", "https://two.example", "")))
    settings = WebSettings(search="searxng", searxng=SearxngSettings(url=search_fake.url))
    out = tools_for(workspace, settings, Sources())["web_search"].invoke(json.dumps({"query": "widgets", "limit": 2}))
    assert out == "1. One\n   https://one.example\n   first\n2. Two\n   https://two.example"
    assert tools_for(workspace, settings, Sources())["web_search"].invoke({"query": "x", "limit": 50}).startswith(
        "Error: limit must be between 1 and 20")


# -- web mode ------------------------------------------------------------------------------------
def test_prefetched_short_page_is_inline_and_long_page_is_stored(site, workspace):
    """-u pages: a short one is put into the first message, a long one is only named there."""
    mode = WebMode()
    config = Config(web=settings_for(site))
    request = RunRequest(mode="web", question="What are widgets?", urls=(site.url("/short"), site.url("/long")))
    message = mode.prepare(workspace, request, config, lambda text: None)
    assert message.startswith("Question: What are widgets?")
    assert "Widgets are small." in message
    assert "widget line 29999" not in message
    assert f"saved as pages/{page_slug(site.url('/long'))}.md: read it with read" in message
    sources = Sources()
    mode.tools(workspace, config, sources)
    assert sources.items() == [site.url("/short"), site.url("/long")]


def test_prefetch_failure_ends_the_run_with_a_fetch_error(site, workspace):
    """A -u URL that cannot be fetched is a FetchError (exit 1), not something to hide."""
    request = RunRequest(mode="web", question="q", urls=(site.url("/missing"),))
    with pytest.raises(FetchError, match="404"):
        WebMode().prepare(workspace, request, Config(web=settings_for(site)), lambda text: None)


def test_citations_verify_fetched_urls_and_flag_the_rest(workspace):
    """Cited URLs that were fetched are verified (trivial differences ignored); others are flagged."""
    sources = Sources()
    sources.add("https://docs.example/guide/")
    sources.add("https://blog.example/post")
    answer = ("See [the guide](https://DOCS.example/guide#setup) and https://blog.example/post. "
              "Also https://never.example/page, and again https://blog.example/post).")
    citations = WebMode().citations(answer, workspace, sources)
    assert citations.verified == ("https://DOCS.example/guide#setup", "https://blog.example/post")
    assert citations.unverified == ("https://never.example/page",)


def test_url_helpers():
    """cited_urls keeps order without duplicates; normalise_url drops fragments, slashes and default ports."""
    assert cited_urls("a https://x.example/1, b [t](https://y.example/2) c https://x.example/1.") == [
        "https://x.example/1", "https://y.example/2"]
    assert normalise_url("HTTPS://Example.com:443/a/#f") == normalise_url("https://example.com/a")
