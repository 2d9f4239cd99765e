"""Web search providers behind one function, chosen by `[web] search`.

    searxng     self-hosted, keyless: GET {url}/search?format=json
    brave       GET  .../res/v1/web/search      X-Subscription-Token
    tavily      POST .../search                 Authorization: Bearer
    exa         POST .../search                 x-api-key
    kagi        GET  .../api/v0/search          Authorization: Bot
    duckduckgo  keyless, through the `ddgs` package (the default)

Failures split in two. A problem the user must fix (no key, a rejected key, no
SearXNG URL) is a SearchError: nothing can be searched, so the run stops and
the message names the config key. A passing problem (rate limit, timeout, a
5xx) is a ToolInputError: the model is told and may try again.

Search hosts are chosen by the user, so the private-network guard does not
apply to them (a self-hosted SearXNG usually lives on a private address).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from config.schema import WebSettings
from dispatcher.errors import SearchError, ToolInputError

SEARCH_TIMEOUT_S = 15.0
MAX_SNIPPET_CHARS = 400
USER_AGENT = "research-cli (+https://pypi.org/project/research)"

ENDPOINTS = {
    "brave": "https://api.search.brave.com/res/v1/web/search",
    "tavily": "https://api.tavily.com/search",
    "exa": "https://api.exa.ai/search",
    "kagi": "https://kagi.com/api/v0/search",
}


@attrs.frozen
class SearchResult:
    title: str
    url: str
    snippet: str


@attrs.frozen
class _Request:
    method: str
    url: str
    params: dict[str, Any] | None = None
    json: dict[str, Any] | None = None
    headers: dict[str, str] = attrs.field(factory=dict)


def search(query: str, limit: int, settings: WebSettings, environ: Mapping[str, str]) -> list[SearchResult]:
    """Up to `limit` results for `query` from the configured provider."""
    provider = settings.search
    if provider == "duckduckgo":
        return _duckduckgo(query, limit)
    build, parse = _PROVIDERS[provider]
    request = build(query, limit, settings, environ)
    return [_clean(result) for result in parse(_send(provider, request))][:limit]


# -- one request builder and one parser per provider ----------------------------------------------
def _searxng_request(query: str, limit: int, settings: WebSettings, environ) -> _Request:
    if not settings.searxng.url:
        raise SearchError("searxng search has no URL; set [web.searxng] url to your instance")
    return _Request("GET", settings.searxng.url.rstrip("/") + "/search", params={"q": query, "format": "json"})


def _searxng_results(body: dict) -> list[SearchResult]:
    return [SearchResult(r.get("title", ""), r.get("url", ""), r.get("content", "")) for r in body.get("results", [])]


def _brave_request(query: str, limit: int, settings: WebSettings, environ) -> _Request:
    key = _key("brave", settings.brave.api_key, environ)
    return _Request("GET", settings.brave.url or ENDPOINTS["brave"], params={"q": query, "count": min(limit, 20)},
                    headers={"X-Subscription-Token": key, "Accept": "application/json"})


def _brave_results(body: dict) -> list[SearchResult]:
    return [SearchResult(r.get("title", ""), r.get("url", ""), r.get("description", ""))
            for r in body.get("web", {}).get("results", [])]


def _tavily_request(query: str, limit: int, settings: WebSettings, environ) -> _Request:
    key = _key("tavily", settings.tavily.api_key, environ)
    return _Request("POST", settings.tavily.url or ENDPOINTS["tavily"], json={"query": query, "max_results": limit},
                    headers={"Authorization": f"Bearer {key}"})


def _tavily_results(body: dict) -> list[SearchResult]:
    return [SearchResult(r.get("title", ""), r.get("url", ""), r.get("content", "")) for r in body.get("results", [])]


def _exa_request(query: str, limit: int, settings: WebSettings, environ) -> _Request:
    key = _key("exa", settings.exa.api_key, environ)
    return _Request("POST", settings.exa.url or ENDPOINTS["exa"],
                    json={"query": query, "numResults": limit, "contents": {"highlights": True}},
                    headers={"x-api-key": key})


def _exa_results(body: dict) -> list[SearchResult]:
    return [SearchResult(r.get("title") or "", r.get("url", ""), " ".join(r.get("highlights") or []) or r.get("text", ""))
            for r in body.get("results", [])]


def _kagi_request(query: str, limit: int, settings: WebSettings, environ) -> _Request:
    key = _key("kagi", settings.kagi.api_key, environ)
    return _Request("GET", settings.kagi.url or ENDPOINTS["kagi"], params={"q": query, "limit": limit},
                    headers={"Authorization": f"Bot {key}"})


def _kagi_results(body: dict) -> list[SearchResult]:
    # t == 0 is a search result; t == 1 is a list of related searches.
    return [SearchResult(r.get("title", ""), r.get("url", ""), r.get("snippet") or "")
            for r in body.get("data", []) if r.get("t") == 0]


_PROVIDERS: dict[str, tuple[Callable[..., _Request], Callable[[dict], list[SearchResult]]]] = {
    "searxng": (_searxng_request, _searxng_results),
    "brave": (_brave_request, _brave_results),
    "tavily": (_tavily_request, _tavily_results),
    "exa": (_exa_request, _exa_results),
    "kagi": (_kagi_request, _kagi_results),
}


def _duckduckgo(query: str, limit: int) -> list[SearchResult]:
    from ddgs import DDGS
    from ddgs.exceptions import DDGSException

    try:
        found = DDGS(timeout=int(SEARCH_TIMEOUT_S)).text(query, max_results=limit)
    except DDGSException as exc:
        raise ToolInputError(f"duckduckgo search failed: {str(exc).splitlines()[0][:200]}") from exc
    return [_clean(result) for result in ddgs_results(found)][:limit]


def ddgs_results(found: list[dict]) -> list[SearchResult]:
    """ddgs's result dicts (title, href, body) as SearchResults."""
    return [SearchResult(r.get("title", ""), r.get("href", ""), r.get("body", "")) for r in found or []]


# -- transport and errors ---------------------------------------------------------------------------
def _key(provider: str, value: str | None, environ: Mapping[str, str]) -> str:
    from config.secrets import resolve_secret

    key = resolve_secret(value, key=f"web.{provider}.api_key", environ=environ)
    if not key:
        raise SearchError(f"{provider} search needs an API key; set [web.{provider}] api_key")
    return key


def _send(provider: str, request: _Request) -> dict:
    import httpx

    try:
        with httpx.Client(timeout=SEARCH_TIMEOUT_S, trust_env=False, follow_redirects=True,
                          headers={"User-Agent": USER_AGENT}) as client:
            response = client.request(request.method, request.url, params=request.params, json=request.json,
                                      headers=request.headers)
    except httpx.TimeoutException as exc:
        raise ToolInputError(f"{provider} search timed out after {SEARCH_TIMEOUT_S:.0f} s") from exc
    except httpx.HTTPError as exc:
        if provider == "searxng":
            raise SearchError(f"cannot reach searxng at {request.url} ({_reason(exc)}); check [web.searxng] url") from exc
        raise ToolInputError(f"{provider} search could not connect ({_reason(exc)})") from exc
    status = response.status_code
    if provider == "searxng" and status == 403:
        raise SearchError(f"searxng at {request.url} refused the JSON API (HTTP 403); enable the json format in "
                          "its settings.yml (search.formats) or fix [web.searxng] url")
    if status in (401, 403):
        raise SearchError(f"{provider} search rejected the API key (HTTP {status}); set [web.{provider}] api_key")
    if status == 429:
        raise ToolInputError(f"{provider} search is rate-limited (HTTP 429); wait before searching again")
    if status >= 400:
        raise ToolInputError(f"{provider} search failed (HTTP {status})")
    try:
        body = response.json()
    except ValueError as exc:
        raise ToolInputError(f"{provider} search returned something that is not JSON") from exc
    if not isinstance(body, dict):
        raise ToolInputError(f"{provider} search returned an unexpected JSON shape")
    return body


def _reason(exc: Exception) -> str:
    return (str(exc).splitlines() or [type(exc).__name__])[0][:160] or type(exc).__name__


def _clean(result: SearchResult) -> SearchResult:
    snippet = " ".join(result.snippet.split())
    if len(snippet) > MAX_SNIPPET_CHARS:
        snippet = snippet[: MAX_SNIPPET_CHARS - 1] + "…"
    return SearchResult(" ".join(result.title.split()) or result.url, result.url.strip(), snippet)
