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
# A match costs (pattern components x path components) steps at worst; these
# keep that small for any path a walk can meet.
MAX_PATTERN_COMPONENTS = 32
MAX_GLOBSTARS = 4
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
    # Whether it matches whole paths is the pattern's, not each alternative's.
    whole_path = "/" in cleaned
    alternatives = [_compile(expanded, whole_path) for expanded in expand_braces(cleaned)]
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
    first brace group that has a top-level comma, or None. One pass: each
    '{' waits on a stack for its '}', with the commas met at its own level."""
    stack: list[tuple[int, list[int]]] = []
    found = None
    for index, char in enumerate(pattern):
        if char == "{":
            stack.append((index, []))
        elif char == "," and stack:
            stack[-1][1].append(index)
        elif char == "}" and stack:
            start, commas = stack.pop()
            if commas and (found is None or start < found[0]):
                found = (start, index, commas)
    if found is None:
        return None
    start, end, commas = found
    bounds = [start, *commas, end]
    return start, end, [pattern[a + 1:b] for a, b in zip(bounds, bounds[1:])]


def _compile(pattern: str, whole_path: bool) -> Matcher:
    parts = [part for part in pattern.split("/") if part]
    # '**/**' means what '**' means, and costs more.
    parts = [part for index, part in enumerate(parts)
             if not (part == _GLOBSTAR and index and parts[index - 1] == _GLOBSTAR)] or ["*"]
    if len(parts) > MAX_PATTERN_COMPONENTS or parts.count(_GLOBSTAR) > MAX_GLOBSTARS:
        raise ToolInputError(f"pattern {pattern!r} has more than {MAX_PATTERN_COMPONENTS} components or "
                             f"{MAX_GLOBSTARS} '**'; use a shorter pattern")
    if not whole_path:
        component = _component(parts[0])
        return lambda relative: component(relative.rsplit("/", 1)[-1])
    compiled = [None if part == _GLOBSTAR else _component(part) for part in parts]
    return lambda relative: _match_components(compiled, relative.split("/"))


def _component(part: str) -> Callable[[str], bool]:
    try:
        return re.compile(fnmatch.translate(_shell_negation(part))).match
    except re.error as exc:
        raise ToolInputError(f"pattern component {part!r} is not a glob this tool understands ({exc.msg})") from None


def _shell_negation(part: str) -> str:
    """A shell's '[^...]' as fnmatch's '[!...]'; a '^' elsewhere stays itself."""
    out, index = [], 0
    while index < len(part):
        char = part[index]
        if char == "[":
            end = part.find("]", index + 2)  # a ']' right after '[' (or '[^') is a member
            if end != -1:
                body = part[index + 1:end]
                out.append("[" + ("!" + body[1:] if body.startswith("^") else body) + "]")
                index = end + 1
                continue
        out.append(char)
        index += 1
    return "".join(out)


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
