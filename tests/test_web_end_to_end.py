"""`research web` and `research fetch` end to end: the real CLI, litellm's real
HTTP path to the scripted model, a SearXNG-compatible fake and loopback pages."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
import tomli_w

from tests.support.cli import cli_environment, leftover_workspaces, research
from tests.support.docker_engine import docker_engine, sandbox, sandbox_watch  # noqa: F401
from tests.support.scripted_model import answer, scripted_model, tool_calls, write_model_config  # noqa: F401
from tests.support.search_fakes import search_fake, searxng_body  # noqa: F401
from tests.support.web_server import WebServer, internal_server  # noqa: F401

ARTICLE = """<html><head><title>Widget history</title></head><body>
<nav><a href="/">Home</a> <a href="/shop">Shop</a></nav>
<article><h1>Widget history</h1>
<p>The first widget was built in 1921 by a clockmaker who wanted a smaller gear train for pocket watches.</p>
<p>Widgets spread through factories in the 1930s, when mass production made them cheap enough for toys.</p>
<p>By the 1950s every household appliance held a dozen widgets, and engineers began to standardise their sizes
so that a widget from one maker would fit a machine from another. That standard is still in use today.</p>
<p>Collectors now trade early widgets at auctions, where a working 1921 original fetched a record price,
and museums display the clockmaker's notebooks next to the first prototypes and their wooden moulds.</p>
</article><footer>Copyright Widget Weekly</footer></body></html>"""


@pytest.fixture
def site():
    server = WebServer().start()
    server.add("/history", ARTICLE)
    server.add("/faq", "# Widget FAQ\n\nWidgets are measured in millimetres.\n", "text/markdown")
    yield server
    server.stop()


@pytest.fixture
def web_env(tmp_path, scripted_model, search_fake, site):  # noqa: F811
    """A config: the scripted model, SearXNG at the fake, the page site let through the guard."""
    path = write_model_config(tmp_path / "config.toml", scripted_model)
    document = tomllib.loads(path.read_text())
    document["web"] = {"search": "searxng", "allowed_hosts": [f"127.0.0.1:{site.port}"],
                       "searxng": {"url": search_fake.url}}
    path.write_text(tomli_w.dumps(document))
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    return cli_environment(config=path, tmpdir=tmpdir)


def test_search_then_two_fetches_in_one_turn_then_an_answer_citing_both(
        scripted_model, search_fake, site, web_env, sandbox, sandbox_watch):  # noqa: F811
    """search → fetch two pages in one turn → answer citing both; sources and citations check out."""
    history, faq = site.url("/history"), site.url("/faq")
    search_fake.reply_json(searxng_body(("Widget history", history, "The first widget..."),
                                        ("Widget FAQ", faq, "Units")))
    scripted_model.add(
        tool_calls(("web_search", {"query": "widget history"})),
        tool_calls(("web_fetch", {"url": history}), ("web_fetch", {"url": faq})),
        answer(f"The first widget dates from 1921 ([history]({history})); sizes are in millimetres ({faq}). "
               "Some say otherwise (https://unfetched.example/claim)."),
    )
    result = research("web", "When was the first widget built?", "--json", "--sandbox", sandbox, env=web_env)

    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["mode"] == "web" and report["stopped"] == "answer"
    # Both fetches ran in the same turn, concurrently: either may have finished first.
    assert sorted(report["sources"]) == sorted([history, faq])
    assert report["citations"] == [history, faq]
    assert report["unverified_citations"] == ["https://unfetched.example/claim"]
    assert report["tool_calls"] == 3
    # The search went to SearXNG's JSON API, and the model read both pages in one tool turn.
    assert search_fake.requests[0].query == {"q": "widget history", "format": "json"}
    tool_results = [m["content"] for m in scripted_model.messages(2) if m["role"] == "tool"][-2:]
    assert "1921" in tool_results[0] and "millimetres" in tool_results[1]
    assert "Copyright Widget Weekly" not in tool_results[0]
    assert leftover_workspaces(Path(web_env["TMPDIR"]), "web") == []


def test_plain_output_lists_sources_under_the_answer(scripted_model, site, web_env):  # noqa: F811
    """Without --json, stdout is the answer followed by a numbered Sources list."""
    faq = site.url("/faq")
    scripted_model.add(tool_calls(("web_fetch", {"url": faq})), answer(f"Millimetres ({faq})."))
    result = research("web", "Units?", env=web_env)
    assert result.exit_code == 0, result.stderr
    assert result.stdout == f"Millimetres ({faq}).\n\nSources:\n1. {faq}\n"


def test_prefetched_url_is_in_the_first_message(scripted_model, site, web_env):  # noqa: F811
    """-u fetches the page before the model starts and puts it in the first user message."""
    scripted_model.add(answer(f"1921 ({site.url('/history')})."))
    result = research("web", "When?", "-u", site.url("/history"), "--json", env=web_env)
    assert result.exit_code == 0, result.stderr
    first_user = scripted_model.messages(0)[1]["content"]
    assert "The first widget was built in 1921" in first_user
    assert json.loads(result.stdout)["citations"] == [site.url("/history")]


def test_rejected_search_key_ends_the_run_naming_the_config_key(scripted_model, search_fake, web_env):  # noqa: F811
    """A search provider refusing us (403 from SearXNG) stops the run: exit 1, one sentence naming the key."""
    search_fake.reply_raw(403, b"Forbidden")
    scripted_model.add(tool_calls(("web_search", {"query": "x"})), answer("unused"))
    result = research("web", "q", env=web_env)
    assert result.exit_code == 1
    assert "[web.searxng] url" in result.stderr and result.stderr.count("\n") == 1


def test_internal_address_is_refused_and_its_secret_never_reaches_the_model(
        scripted_model, internal_server, web_env):  # noqa: F811
    """A prompt-injected fetch of an internal service is refused before any byte is sent to it."""
    port = internal_server.port
    hostile = [f"http://127.0.0.1:{port}/secret", f"http://localhost:{port}/", f"http://2130706433:{port}/",
               f"http://[::ffff:127.0.0.1]:{port}/", "http://169.254.169.254/latest/meta-data/"]
    scripted_model.add(tool_calls(*[("web_fetch", {"url": url}) for url in hostile]), answer("Refused."))
    result = research("web", "q", env=web_env)
    assert result.exit_code == 0, result.stderr
    assert internal_server.requests == []
    assert internal_server.secret not in scripted_model.everything_sent()
    tool_results = [m["content"] for m in scripted_model.messages(1) if m["role"] == "tool"]
    assert all(text.startswith("Error: refused") for text in tool_results)


def test_fetch_command_prints_the_tools_markdown(site, web_env):
    """`research fetch URL` prints the page's markdown: title, URL, content, no boilerplate."""
    result = research("fetch", site.url("/history"), env=web_env)
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("# Widget history\n")
    assert f"URL: {site.url('/history')}" in result.stdout
    assert "1921" in result.stdout and "Copyright Widget Weekly" not in result.stdout


def test_fetch_command_refuses_a_private_address_with_exit_1(internal_server, web_env):  # noqa: F811
    """`research fetch` applies the same guard: loopback not in allowed_hosts is refused."""
    result = research("fetch", f"http://127.0.0.1:{internal_server.port}/secret", env=web_env)
    assert result.exit_code == 1
    assert "loopback" in result.stderr and internal_server.requests == []
    assert internal_server.secret not in result.stdout + result.stderr


def test_ctrl_c_during_a_slow_prefetch_exits_130_at_once(tmp_path, web_env):
    """SIGINT while a -u page drips slowly exits 130 within seconds and removes the workspace."""
    import signal
    import time

    from tests.support.cli import start_research

    drip = WebServer()
    drip.routes["/slow"] = lambda request: drip.stop_event.wait(60)
    drip.start()
    try:
        env = dict(web_env)
        config = Path(env["RESEARCH_CONFIG"])
        document = tomllib.loads(config.read_text())
        document["web"]["allowed_hosts"].append(f"127.0.0.1:{drip.port}")
        config.write_text(tomli_w.dumps(document))
        process = start_research("web", "q", "-u", drip.url("/slow"), env=env)
        deadline = time.monotonic() + 30
        while not drip.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        assert drip.requests, "the prefetch never reached the server"
        started = time.monotonic()
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 130
        assert time.monotonic() - started < 5
    finally:
        drip.stop()
    assert leftover_workspaces(Path(env["TMPDIR"]), "web") == []
