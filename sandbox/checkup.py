"""What `research doctor` and `research sandbox status` find: a line per check.

The lines are for the user; `failed` names the checks that must be fixed before
a run can work, so the CLI can exit 1 and scripts can test for readiness.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs


@attrs.frozen
class Check:
    label: str  # what was checked, as the failure sentence names it
    line: str  # what was found, or what to do
    ok: bool = True


@attrs.frozen
class Checkup:
    lines: tuple[str, ...]
    failed: tuple[str, ...]  # labels of the checks that failed

    @classmethod
    def of(cls, checks: Iterable[Check | str]) -> "Checkup":
        """From checks and plain information lines, in order."""
        items = list(checks)
        return cls(
            lines=tuple(item if isinstance(item, str) else item.line for item in items),
            failed=tuple(item.label for item in items if isinstance(item, Check) and not item.ok),
        )

    @property
    def text(self) -> str:
        return "\n".join(self.lines)
