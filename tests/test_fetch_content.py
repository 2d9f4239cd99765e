"""What fetch_page turns a page into: markdown that keeps the content's structure, in the right characters."""

from __future__ import annotations

import collections
import re

from modes.net.extract import html_to_markdown
from modes.net.fetch import fetch_page
from tests.support.web_server import (  # noqa: F401
    ARTICLE_HTML,
    JAPANESE_TEXT,
    RUSSIAN_TEXT,
    internal_server,
    public_server,
    web_settings,
)


def words(text: str) -> collections.Counter[str]:
    return collections.Counter(w.lower() for w in re.findall(r"[^\W_]+", text))


def test_article_keeps_headings_lists_tables_code_and_links(public_server, web_settings):
    """The article's structure survives as markdown: headings, list items, a table, a code block, a link."""
    page = fetch_page(public_server.url("/article"), web_settings)
    md = page.markdown
    assert "## Kinds of widgets" in md
    assert "- Round widgets roll along the floor" in md
    assert "| Kind | Sides |" in md and "| Square | 4 |" in md
    assert "```" in md and "widgets.spin(times=3)" in md
    assert "[the widget documentation](https://example.org/widget-docs)" in md
    assert "**one thing**" in md


def test_article_has_title_and_url_on_top(public_server, web_settings):
    """The markdown starts with the page title and the URL it came from, and the title is returned too."""
    url = public_server.url("/article")
    page = fetch_page(url, web_settings)
    assert page.title == "Understanding Widgets"
    assert page.content_type == "text/html"
    assert page.markdown.startswith(f"# Understanding Widgets\n\nURL: {url}\n\n")
    assert page.markdown.count("Understanding Widgets") == 1  # the article's own h1 is not repeated


def test_article_drops_navigation_and_footer_boilerplate(public_server, web_settings):
    """Menus and footers are not part of the content."""
    md = fetch_page(public_server.url("/article"), web_settings).markdown
    assert "Subscribe to our newsletter" not in md
    assert "Shop the widget store" not in md
    assert "All rights reserved" not in md
    assert "Privacy policy" not in md


def test_extraction_keeps_every_word_plain_trafilatura_finds(public_server, web_settings):
    """Our markdown loses no word that plain trafilatura.extract finds on the same page."""
    import trafilatura

    md = fetch_page(public_server.url("/article"), web_settings).markdown
    plain = trafilatura.extract(ARTICLE_HTML)
    assert plain
    assert not words(plain) - words(md)


def test_a_page_trafilatura_finds_little_in_still_yields_its_text():
    """When extraction comes back nearly empty, a clean dump of the visible text is used, without scripts."""
    html = ("<html><head><title>Status</title><style>.x{color:red}</style></head><body>"
            "<div>Build 4411 passed.</div><div>Deployed to staging at noon.</div>"
            "<script>var secretToken = 'script text';</script><div>Next deploy: Friday.</div></body></html>")
    title, content = html_to_markdown(html, "http://status.test/")
    assert title == "Status"
    for line in ("Build 4411 passed.", "Deployed to staging at noon.", "Next deploy: Friday."):
        assert line in content
    assert "secretToken" not in content and "color:red" not in content


def test_a_page_too_large_to_extract_in_time_comes_back_as_its_text(public_server, web_settings):
    """A 5 MB table page (trafilatura would take over 10 s after the download) comes
    back as its plain text with a note saying why, every cell and its title intact."""
    rows = "".join(f"<tr><td>row {n}</td><td>cell-{n}-value</td></tr>\n" for n in range(110_000))
    html = f"<html><head><title>Big &amp; flat</title></head><body><table>{rows}</table></body></html>"
    assert len(html) > 4_000_000
    public_server.add("/huge-table", html)
    page = fetch_page(public_server.url("/huge-table"), web_settings)
    assert page.title == "Big & flat"
    assert "too large to extract its main content in time: shown as plain text" in page.markdown
    assert "cell-0-value" in page.markdown and "cell-109999-value" in page.markdown


def test_gzip_and_deflate_bodies_are_decoded(public_server, web_settings):
    """Compressed responses come out as the same article as the uncompressed one."""
    for path in ("/gzip-article", "/deflate-article"):
        assert "## Kinds of widgets" in fetch_page(public_server.url(path), web_settings).markdown


def test_windows_1251_page_is_decoded_from_the_header_charset(public_server, web_settings):
    """A Cyrillic page whose charset is only in the Content-Type header reads correctly."""
    page = fetch_page(public_server.url("/cp1251-header"), web_settings)
    assert RUSSIAN_TEXT in page.markdown
    assert page.title == "Кириллица"


def test_windows_1251_page_is_decoded_from_the_meta_charset(public_server, web_settings):
    """A Cyrillic page whose charset is only in a meta tag reads correctly."""
    assert RUSSIAN_TEXT in fetch_page(public_server.url("/cp1251-meta"), web_settings).markdown


def test_windows_1251_page_without_any_declaration_is_detected(public_server, web_settings):
    """A Cyrillic page that declares no charset at all is still decoded, by detection."""
    assert RUSSIAN_TEXT in fetch_page(public_server.url("/cp1251-undeclared"), web_settings).markdown


def test_shift_jis_page_is_decoded_from_the_meta_charset(public_server, web_settings):
    """A Japanese Shift_JIS page reads correctly."""
    page = fetch_page(public_server.url("/sjis-meta"), web_settings)
    assert JAPANESE_TEXT in page.markdown
    assert page.title == "日本語"


def test_plain_text_is_passed_through(public_server, web_settings):
    """A text/plain body is returned as it is, under the URL line."""
    url = public_server.url("/text")
    page = fetch_page(url, web_settings)
    assert page.markdown == f"URL: {url}\n\nPlain text stays exactly as it is.\n  Indented line.\n"
    assert page.title is None and page.content_type == "text/plain"


def test_markdown_is_passed_through(public_server, web_settings):
    """A text/markdown body keeps its own headings, lists and code fences."""
    page = fetch_page(public_server.url("/readme.md"), web_settings)
    assert "# Title\n\n- item one\n- item two\n\n```python\nprint(1)\n```" in page.markdown
    assert page.content_type == "text/markdown"


def test_json_is_pretty_printed(public_server, web_settings):
    """A JSON body comes back indented in a json code block, non-ASCII intact."""
    page = fetch_page(public_server.url("/data.json"), web_settings)
    assert '```json\n{\n  "name": "widget",' in page.markdown
    assert '"note": "ünïcode"' in page.markdown


def test_html_without_a_content_type_is_recognised(public_server, web_settings):
    """An untyped body that is HTML is extracted as HTML, not dumped as markup."""
    page = fetch_page(public_server.url("/untyped"), web_settings)
    assert page.content_type == "text/html"
    assert "## Kinds of widgets" in page.markdown and "<article>" not in page.markdown


def test_concatenated_gzip_members_are_all_decoded(public_server, web_settings):
    """A gzip body made of several members (as some servers stream them) is read to the end."""
    import gzip

    body = gzip.compress(b"first member, ") + gzip.compress(b"second member.")
    url = public_server.add("/members", body, "text/plain", headers={"Content-Encoding": "gzip"})
    assert "first member, second member." in fetch_page(url, web_settings).markdown
