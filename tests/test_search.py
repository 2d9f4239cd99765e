"""Each search provider's request and response, and every failure's wording,
against a loopback fake of its HTTP API."""

from __future__ import annotations

import pytest

from config.schema import KeyedSearchSettings, SearxngSettings, WebSettings
from dispatcher.errors import SearchError, ToolInputError
from modes.net import search as search_module
from modes.net.search import SearchResult, ddgs_results, search
from tests.support.search_fakes import search_fake, searxng_body  # noqa: F401

KEY = "test-search-key"


def keyed(provider: str, fake, api_key: str | None = "$SEARCH_KEY") -> WebSettings:
    return WebSettings(search=provider, **{provider: KeyedSearchSettings(api_key=api_key, url=fake.url + "/api")})


ENV = {"SEARCH_KEY": KEY}


def test_searxng_sends_format_json_and_maps_results(search_fake):  # noqa: F811
    """SearXNG gets GET /search?q=...&format=json and its results become title, URL, snippet."""
    search_fake.reply_json(searxng_body(("Widgets", "https://w.example/a", "All about  widgets.")))
    settings = WebSettings(search="searxng", searxng=SearxngSettings(url=search_fake.url + "/"))
    results = search("widgets", 5, settings, {})
    assert results == [SearchResult("Widgets", "https://w.example/a", "All about widgets.")]
    request = search_fake.requests[0]
    assert (request.method, request.path, request.query) == ("GET", "/search", {"q": "widgets", "format": "json"})


def test_brave_sends_subscription_token_and_count(search_fake):  # noqa: F811
    """Brave gets the key in X-Subscription-Token and the limit as count."""
    search_fake.reply_json({"web": {"results": [{"title": "B", "url": "https://b.example", "description": "d"}]}})
    assert search("q", 3, keyed("brave", search_fake), ENV) == [SearchResult("B", "https://b.example", "d")]
    request = search_fake.requests[0]
    assert request.headers["x-subscription-token"] == KEY
    assert request.query == {"q": "q", "count": "3"}


def test_tavily_posts_query_with_bearer_key(search_fake):  # noqa: F811
    """Tavily gets a JSON POST with max_results and a Bearer key."""
    search_fake.reply_json({"results": [{"title": "T", "url": "https://t.example", "content": "c"}]})
    assert search("q", 4, keyed("tavily", search_fake), ENV)[0].url == "https://t.example"
    request = search_fake.requests[0]
    assert request.method == "POST" and request.body["query"] == "q" and request.body["max_results"] == 4
    assert request.headers["authorization"] == f"Bearer {KEY}"


def test_exa_posts_with_api_key_header(search_fake):  # noqa: F811
    """Exa gets numResults and x-api-key; highlights become the snippet."""
    search_fake.reply_json({"results": [{"title": "E", "url": "https://e.example", "highlights": ["h1", "h2"]}]})
    assert search("q", 2, keyed("exa", search_fake), ENV) == [SearchResult("E", "https://e.example", "h1 h2")]
    request = search_fake.requests[0]
    assert request.body["numResults"] == 2 and request.headers["x-api-key"] == KEY


def test_kagi_uses_bot_authorization_and_keeps_only_results(search_fake):  # noqa: F811
    """Kagi gets 'Authorization: Bot KEY'; related-search entries (t=1) are dropped."""
    search_fake.reply_json({"data": [{"t": 0, "title": "K", "url": "https://k.example", "snippet": "s"},
                                     {"t": 1, "list": ["related"]}]})
    assert search("q", 5, keyed("kagi", search_fake), ENV) == [SearchResult("K", "https://k.example", "s")]
    assert search_fake.requests[0].headers["authorization"] == f"Bot {KEY}"
    assert search_fake.requests[0].query == {"q": "q", "limit": "5"}


def test_results_are_capped_at_the_limit_and_snippets_trimmed(search_fake):  # noqa: F811
    """More results than asked are cut, and overlong snippets end with an ellipsis."""
    many = [(f"T{n}", f"https://x.example/{n}", "word " * 200) for n in range(10)]
    search_fake.reply_json(searxng_body(*many))
    settings = WebSettings(search="searxng", searxng=SearxngSettings(url=search_fake.url))
    results = search("q", 3, settings, {})
    assert [r.title for r in results] == ["T0", "T1", "T2"]
    assert len(results[0].snippet) == search_module.MAX_SNIPPET_CHARS and results[0].snippet.endswith("…")


@pytest.mark.parametrize("provider", ["brave", "tavily", "exa", "kagi"])
@pytest.mark.parametrize("status", [401, 403])
def test_rejected_key_is_a_search_error_naming_the_config_key(search_fake, provider, status):  # noqa: F811
    """A 401/403 stops the run with a sentence naming [web.<provider>] api_key."""
    search_fake.reply_raw(status)
    with pytest.raises(SearchError, match=rf"{provider} search rejected the API key \(HTTP {status}\); "
                                          rf"set \[web\.{provider}\] api_key"):
        search("q", 5, keyed(provider, search_fake), ENV)


def test_missing_key_is_a_search_error_before_any_request(search_fake):  # noqa: F811
    """No api_key at all: the user is told which key to set, and nothing is sent."""
    with pytest.raises(SearchError, match=r"brave search needs an API key; set \[web\.brave\] api_key"):
        search("q", 5, keyed("brave", search_fake, api_key=None), ENV)
    assert search_fake.requests == []


def test_unset_key_variable_is_a_config_error():
    """api_key = "$VAR" with VAR unset names the key and the variable."""
    from dispatcher.errors import ConfigError

    settings = WebSettings(search="brave", brave=KeyedSearchSettings(api_key="$NOT_SET_ANYWHERE"))
    with pytest.raises(ConfigError, match=r"web\.brave\.api_key refers to \$NOT_SET_ANYWHERE"):
        search("q", 5, settings, {})


@pytest.mark.parametrize("status, wording", [(429, "rate-limited"), (500, r"failed \(HTTP 500\)"),
                                             (502, r"failed \(HTTP 502\)")])
def test_passing_failures_are_told_to_the_model(search_fake, status, wording):  # noqa: F811
    """429 and 5xx become a message for the model (ToolInputError), not the end of the run."""
    search_fake.reply_raw(status)
    with pytest.raises(ToolInputError, match=wording):
        search("q", 5, keyed("tavily", search_fake), ENV)


def test_non_json_answer_is_told_to_the_model(search_fake):  # noqa: F811
    """A 200 with HTML instead of JSON is reported, not a crash."""
    search_fake.reply_raw(200, b"<html>hi</html>", "text/html")
    with pytest.raises(ToolInputError, match="not JSON"):
        search("q", 5, keyed("exa", search_fake), ENV)


def test_searxng_without_url_or_json_api_is_a_search_error(search_fake):  # noqa: F811
    """SearXNG with no url, or with its JSON format disabled (403), names [web.searxng] url."""
    with pytest.raises(SearchError, match=r"set \[web\.searxng\] url"):
        search("q", 5, WebSettings(search="searxng"), {})
    search_fake.reply_raw(403, b"Forbidden")
    with pytest.raises(SearchError, match="refused the JSON API"):
        search("q", 5, WebSettings(search="searxng", searxng=SearxngSettings(url=search_fake.url)), {})


def test_unreachable_searxng_is_a_search_error(search_fake):  # noqa: F811
    """A SearXNG URL nobody listens on is the user's to fix."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = WebSettings(search="searxng", searxng=SearxngSettings(url=f"http://127.0.0.1:{port}"))
    with pytest.raises(SearchError, match=r"cannot reach searxng .* check \[web\.searxng\] url"):
        search("q", 5, settings, {})


def test_slow_provider_times_out_as_a_message(search_fake, monkeypatch):  # noqa: F811
    """A provider that never answers is cut off at the search timeout and the model is told."""
    monkeypatch.setattr(search_module, "SEARCH_TIMEOUT_S", 0.5)
    search_fake.hang.set()
    with pytest.raises(ToolInputError, match="timed out"):
        search("q", 5, keyed("kagi", search_fake), ENV)


def test_ddgs_results_map_to_search_results():
    """duckduckgo results (title, href, body dicts from ddgs) map to title, URL, snippet.

    ddgs itself talks to the internet, which tests never reach; only the mapping is tested."""
    found = [{"title": "D", "href": "https://d.example", "body": "b"}]
    assert ddgs_results(found) == [SearchResult("D", "https://d.example", "b")]
