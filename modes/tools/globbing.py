"""Glob patterns for the find tool, matched in time linear in the path.

The pattern comes from the model, so it is hostile input: a glob turned into
one regular expression (`*a*a*a*a*a*a*b`) can backtrack for minutes on a long
name. Here braces are expanded first (into a bounded number of patterns), each
pattern is split at '/', each component is compiled by `fnmatch.translate`
(whose expressions cannot backtrack: every '*' becomes an atomic group), and
'**' components are matched against path components by a small state set, so
a match costs at most (pattern components x path components) steps.

Semantics: '*', '?' and '[...]' ('[!...]' or '[^...]' to negate) stay within
one path component; a '**' component spans any number of them, none
included; '{a,b}' alternates, and may nest.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable

from dispatcher.errors import ToolInputError

# "{a,b}{c,d}..." multiplies, and every alternative is tried on every path
# of a walk (up to 500,000): refuse rather than build hundreds of patterns.
MAX_BRACE_EXPANSIONS = 32
_GLOBSTAR = "**"

Matcher = Callable[[str], bool]


def glob_matcher(pattern: str) -> Matcher:
    """A predicate for '/'-separated paths relative to the search directory. A
    pattern without '/' matches the last component anywhere; one with '/'
    matches the whole path."""
    cleaned = pattern.strip()
    while cleaned.startswith("./"):
        cleaned = cleaned[2:]
    cleaned = cleaned.strip("/") or "*"
    alternatives = [_compile(expanded) for expanded in expand_braces(cleaned)]
    return lambda relative: any(matches(relative) for matches in alternatives)


def expand_braces(pattern: str) -> list[str]:
    """'src/*.{ts,tsx}' -> ['src/*.ts', 'src/*.tsx']; unbalanced braces and
    braces without a top-level comma stay literal."""
    done, pending = [], [pattern]
    while pending:
        current = pending.pop()
        group = _first_group(current)
        if group is None:
            done.append(current)
        else:
            start, end, choices = group
            pending.extend(current[:start] + choice + current[end + 1:] for choice in reversed(choices))
        if len(done) + len(pending) > MAX_BRACE_EXPANSIONS:
            raise ToolInputError(f"pattern {pattern!r} expands to more than {MAX_BRACE_EXPANSIONS} "
                                 "alternatives; use fewer braces")
    return done


def _first_group(pattern: str) -> tuple[int, int, list[str]] | None:
    """(index of '{', index of its '}', the comma-separated choices) of the
    first brace group that has a top-level comma, or None."""
    for start, char in enumerate(pattern):
        if char != "{":
            continue
        depth, commas = 0, []
        for index in range(start, len(pattern)):
            if pattern[index] == "{":
                depth += 1
            elif pattern[index] == "}":
                depth -= 1
                if depth == 0:
                    if commas:
                        bounds = [start, *commas, index]
                        return start, index, [pattern[a + 1:b] for a, b in zip(bounds, bounds[1:])]
                    break
            elif pattern[index] == "," and depth == 1:
                commas.append(index)
    return None


def _compile(pattern: str) -> Matcher:
    parts = [part for part in pattern.split("/") if part]
    if len(parts) == 1:
        component = _component(parts[0])
        return lambda relative: component(relative.rsplit("/", 1)[-1])
    compiled = [None if part == _GLOBSTAR else _component(part) for part in parts]
    return lambda relative: _match_components(compiled, relative.split("/"))


def _component(part: str) -> Callable[[str], bool]:
    # fnmatch negates with '!'; a shell also takes '^'.
    translated = fnmatch.translate(part.replace("[^", "[!"))
    try:
        return re.compile(translated).match
    except re.error as exc:
        raise ToolInputError(f"pattern component {part!r} is not a glob this tool understands ({exc.msg})") from None


def _match_components(parts: list[Callable[[str], bool] | None], names: list[str]) -> bool:
    """Whether `names` matches `parts`, where None is '**' (any number of
    names, none included): the set of pattern positions reachable so far."""
    states = _with_empty_globstars({0}, parts)
    for name in names:
        following = set()
        for position in states:
            if position == len(parts):
                continue
            part = parts[position]
            if part is None:
                following.add(position)
            elif part(name):
                following.add(position + 1)
        states = _with_empty_globstars(following, parts)
        if not states:
            return False
    return len(parts) in states


def _with_empty_globstars(states: set[int], parts: list) -> set[int]:
    """`states` plus every position reached by letting '**' match nothing."""
    result, stack = set(states), list(states)
    while stack:
        position = stack.pop()
        if position < len(parts) and parts[position] is None and position + 1 not in result:
            result.add(position + 1)
            stack.append(position + 1)
    return result
