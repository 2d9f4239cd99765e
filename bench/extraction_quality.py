"""Does our HTML extraction keep everything plain trafilatura finds, and at what cost?

    python bench/extraction_quality.py [DIR_OF_HTML_FILES] [MAX_PAGES]

With no directory, the Rust documentation installed by rustup is used when
present (real pages, offline). For each page it compares `html_to_markdown`
with plain `trafilatura.extract`: whether every word plain extraction found is
kept (the goal: all pages), which pass was used (markdown, recall, plain text
fallback, body dump), the amount of text, and the time both take.
"""

from __future__ import annotations

import collections
import glob
import os
import pathlib
import random
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent.parent))

from modes.net import extract  # noqa: E402

DEFAULT_CORPUS = "~/.rustup/toolchains/*/share/doc/rust/html"
DEFAULT_MAX_PAGES = 80
MAX_PAGE_BYTES = 2_000_000


def corpus_files(directory: str | None, limit: int) -> list[str]:
    pattern = os.path.expanduser(directory or DEFAULT_CORPUS)
    files = sorted(glob.glob(os.path.join(pattern, "**", "*.htm*"), recursive=True))
    files = [f for f in files if 2_000 < os.path.getsize(f) < MAX_PAGE_BYTES]
    random.Random(1).shuffle(files)
    return files[:limit]


def main() -> None:
    import trafilatura

    directory = sys.argv[1] if len(sys.argv) > 1 else None
    limit = int(sys.argv[2]) if len(sys.argv) > 2 else DEFAULT_MAX_PAGES
    files = corpus_files(directory, limit)
    if not files:
        sys.exit(f"no HTML files under {directory or DEFAULT_CORPUS}")
    chosen: collections.Counter[str] = collections.Counter()
    kept = 0
    plain_chars = ours_chars = 0
    plain_s = ours_s = 0.0
    for path in files:
        html = pathlib.Path(path).read_text(encoding="utf-8", errors="replace")
        url = "https://docs.example/" + os.path.basename(path)
        started = time.perf_counter()
        plain = trafilatura.extract(html, url=url) or ""
        plain_s += time.perf_counter() - started
        started = time.perf_counter()
        _title, ours = extract.html_to_markdown(html, url)
        ours_s += time.perf_counter() - started
        kept += extract.keeps_all_words(plain, ours)
        plain_chars += len(plain)
        ours_chars += len(ours)
        if ours == extract._markdown_pass(html, url, favor_recall=False).strip():
            chosen["markdown"] += 1
        elif ours == plain.strip():
            chosen["plain-text fallback"] += 1
        elif ours == extract._markdown_pass(html, url, favor_recall=True).strip():
            chosen["markdown, favor_recall"] += 1
        else:
            chosen["body text dump"] += 1
    pages = len(files)
    print(f"pages                      {pages}")
    print(f"keeps every plain word     {kept}/{pages}  (goal: all)")
    print("pass used                  " + ", ".join(f"{name} {count}" for name, count in chosen.most_common()))
    print(f"text, chars                plain {plain_chars:,}  ours {ours_chars:,} (markdown adds link targets)")
    print(f"time per page              plain {plain_s / pages * 1000:.0f} ms  ours {ours_s / pages * 1000:.0f} ms")


if __name__ == "__main__":
    main()
