"""Turn a fetched body into markdown: HTML through trafilatura, text types passed through.

HTML extraction keeps headings, lists, tables, code blocks and links and drops
navigation and footer boilerplate. It never loses text that plain
`trafilatura.extract` finds: its result is the floor every richer candidate
must cover, word for word, before it is used; and when trafilatura finds
little, a clean text dump of the body is the last resort.
"""

from __future__ import annotations

import codecs
import collections
import json
import re

# Below this many characters an extraction "found little" and the next pass is tried.
MIN_CONTENT_CHARS = 250
# Trafilatura takes about 2.5 s per MB of HTML over its passes (a 9 MB table:
# 21 s, all of it after the download and its deadline). Pages larger than this
# are dumped as plain text instead, which takes a tenth of a second.
MAX_EXTRACTED_HTML_CHARS = 2_000_000
# Where the <title> of such a page is looked for.
TITLE_SCAN_CHARS = 65_536
# A meta charset declaration is looked for in this many leading bytes (browsers scan 1,024).
META_CHARSET_SCAN_BYTES = 8_192

HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})
JSON_TYPES = frozenset({"application/json", "text/json", "application/ld+json"})
TEXT_APPLICATION_TYPES = frozenset({
    "application/xml", "application/javascript", "application/x-javascript", "application/ecmascript",
    "application/x-yaml", "application/yaml", "application/toml", "application/x-sh", "application/sql",
})

# Labels a page declares whose real encoding, per the WHATWG Encoding standard, is a superset.
_ENCODING_SUPERSETS = {
    "iso-8859-1": "cp1252", "iso8859-1": "cp1252", "latin1": "cp1252", "latin-1": "cp1252",
    "us-ascii": "cp1252", "ascii": "cp1252", "shift_jis": "cp932", "x-sjis": "cp932",
    "sjis": "cp932", "gb2312": "gb18030", "gbk": "gb18030", "euc-kr": "cp949",
}
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"),
)
_META_CHARSET = re.compile(rb"""<meta[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.IGNORECASE)
_WORD = re.compile(r"[^\W_]+")
_LINK_TARGET = re.compile(r"\]\([^)\s]*(?:\s+\"[^\"]*\")?\)")


def kind_of(media_type: str) -> str | None:
    """Classify a media type as "html", "json", "text", or None for anything not a text page."""
    if media_type in HTML_TYPES:
        return "html"
    if media_type in JSON_TYPES or media_type.endswith("+json"):
        return "json"
    if media_type.startswith("text/") or media_type in TEXT_APPLICATION_TYPES or media_type.endswith("+xml"):
        return "text"
    return None


def sniff_kind(body: bytes) -> str:
    """Guess the kind of a body served without a Content-Type."""
    head = body[:1024].lstrip().lower()
    if head.startswith((b"<!doctype html", b"<html")) or b"<body" in head or b"<head" in head:
        return "html"
    if head.startswith((b"{", b"[")):
        return "json"
    return "text"


def is_wide_encoding(body: bytes, charset: str | None) -> bool:
    """True for UTF-16/32 text, whose NUL bytes are not a sign of binary data."""
    if body.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return True
    return bool(charset) and charset.lower().replace("-", "").startswith(("utf16", "utf32"))


def decode_text(body: bytes, header_charset: str | None, *, html: bool) -> str:
    """Decode a body: byte-order mark, then the header's charset, then a meta tag, then UTF-8, then a detector."""
    for bom, encoding in _BOMS:
        if body.startswith(bom):
            return body.decode(encoding, errors="replace")
    declared = [header_charset]
    if html:
        match = _META_CHARSET.search(body[:META_CHARSET_SCAN_BYTES])
        declared.append(match.group(1).decode("ascii") if match else None)
    for label in declared:
        encoding = _python_encoding(label)
        if encoding is not None:
            return body.decode(encoding, errors="replace")
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError:
        pass
    import charset_normalizer

    best = charset_normalizer.from_bytes(body).best()
    encoding = _python_encoding(best.encoding) if best is not None else None
    return body.decode(encoding or "cp1252", errors="replace")


def _python_encoding(label: str | None) -> str | None:
    if not label:
        return None
    label = label.strip().strip("\"'").lower()
    label = _ENCODING_SUPERSETS.get(label, label)
    try:
        name = codecs.lookup(label).name
    except LookupError:
        return None  # an unknown label is ignored, as browsers do
    # A page cannot really be UTF-16 if a meta tag inside it could be read as ASCII.
    return "utf-8" if name.startswith("utf-16") else name


def to_markdown(body: bytes, kind: str, charset: str | None, url: str) -> tuple[str | None, str]:
    """Return (title, markdown with title and URL on top) for a body of `kind` fetched from `url`."""
    text = decode_text(body, charset, html=kind == "html")
    title: str | None = None
    if kind == "html":
        title, content = html_to_markdown(text, url)
    elif kind == "json":
        content = _pretty_json(text)
    else:
        content = text.strip()
    if title:
        content = _without_leading_heading(content, title)
    header = f"# {title}\n\nURL: {url}\n\n" if title else f"URL: {url}\n\n"
    return title, header + content + "\n"


def _without_leading_heading(content: str, title: str) -> str:
    """Drop the content's first line when it only repeats the title we put on top."""
    first, _, rest = content.partition("\n")
    if " ".join(first.lstrip("#").split()) == title:
        return rest.lstrip("\n")
    return content


def _pretty_json(text: str) -> str:
    try:
        value = json.loads(text)
    except ValueError:
        return text.strip()  # served as JSON but isn't: pass it through as it came
    return "```json\n" + json.dumps(value, indent=2, ensure_ascii=False) + "\n```"


def html_to_markdown(html: str, url: str) -> tuple[str | None, str]:
    """Extract the main content of `html` as markdown; return (title, content)."""
    import trafilatura

    if len(html) > MAX_EXTRACTED_HTML_CHARS:
        note = (f"[This page is {len(html) / 1e6:.1f} MB of HTML, too large to extract its main content "
                f"in time: shown as plain text, without links or formatting.]")
        return _cheap_title(html), note + "\n\n" + body_text(html)
    floor = trafilatura.extract(html, url=url) or ""

    def keeps_floor(text: str) -> bool:
        return keeps_all_words(floor, text)

    candidates = [_markdown_pass(html, url, favor_recall=False)]
    if not (len(candidates[0]) >= MIN_CONTENT_CHARS and keeps_floor(candidates[0])):
        candidates.append(_markdown_pass(html, url, favor_recall=True))
    candidates.append(floor)
    content = next((c for c in candidates if len(c) >= MIN_CONTENT_CHARS and keeps_floor(c)), None)
    if content is None:
        # Trafilatura found little: a clean dump of the body is better than nothing, if it keeps the floor.
        content = max((c for c in [*candidates, body_text(html)] if keeps_floor(c)), key=len)
    return _title(html, url), content.strip()


def _markdown_pass(html: str, url: str, *, favor_recall: bool) -> str:
    import trafilatura

    return trafilatura.extract(
        html, url=url, output_format="markdown", include_links=True, include_tables=True,
        include_formatting=True, include_images=False, include_comments=True,
        favor_recall=favor_recall, with_metadata=False,
    ) or ""


def keeps_all_words(reference: str, candidate: str) -> bool:
    """True if `candidate` holds every word of `reference`, as many times.

    A word `reference` has and `candidate` lacks still counts as kept when it
    only differs in spacing: plain text output glues neighbouring elements
    ("Cursor" + "Experimental" -> "CursorExperimental") where markdown
    separates them, so such words are looked for in both texts with all
    spacing and punctuation removed.
    """
    missing = _words(reference) - _words(candidate)
    if not missing:
        return True
    reference_compact, candidate_compact = _compact(reference), _compact(candidate)
    return all(candidate_compact.count(word) >= reference_compact.count(word) for word in missing)


def _words(text: str) -> collections.Counter[str]:
    # Underscores split words so markdown escapes (snake\_case) compare equal to plain text.
    return collections.Counter(word.lower() for word in _WORD.findall(text))


def _compact(text: str) -> str:
    # Link targets are dropped: "[Cursor](/struct.Cursor.html)Experimental" compacts to "cursorexperimental".
    return "".join(_WORD.findall(_LINK_TARGET.sub("]", text))).lower()


def _title(html: str, url: str) -> str | None:
    import trafilatura

    metadata = trafilatura.extract_metadata(html, default_url=url)
    title = metadata.title if metadata is not None else None
    return " ".join(title.split()) if title else None


_TITLE = re.compile(r"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)


def _cheap_title(html: str) -> str | None:
    """The <title> of a page too large to parse twice."""
    import html as entities

    match = _TITLE.search(html, 0, TITLE_SCAN_CHARS)
    title = " ".join(entities.unescape(match.group(1)).split()) if match else ""
    return title or None


_DROPPED_TAGS = ("script", "style", "noscript", "template", "svg", "iframe", "object", "head")
_BLOCK_TAGS = frozenset({
    "p", "div", "section", "article", "main", "header", "footer", "nav", "aside", "li", "ul", "ol",
    "table", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "br", "dd", "dt", "form",
})


def body_text(html: str) -> str:
    """A crude but clean text dump of the page: visible text, one block per line, no scripts or styles."""
    import lxml.html
    from lxml import etree

    try:
        tree = lxml.html.document_fromstring(html)
    except (etree.ParserError, ValueError):
        return ""
    for element in tree.xpath("|".join(f"//{tag}" for tag in _DROPPED_TAGS)):
        element.drop_tree()
    for element in tree.iter(etree.Element):
        if isinstance(element.tag, str) and element.tag in _BLOCK_TAGS:
            element.tail = "\n" + (element.tail or "")
    lines = (" ".join(line.split()) for line in tree.text_content().splitlines())
    return "\n".join(line for line in lines if line)
