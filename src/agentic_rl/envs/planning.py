"""Plan-first episodes: reading a plan and measuring how closely the episode followed it.

A plan is the text inside ``<plan></plan>`` of the first assistant turn, one step per
line. A step *plans a call* of the first tool it names (a tool name as a whole word);
steps naming no tool plan none. Plan adherence is the fraction of planned calls that were
made: for each tool, min(planned, made) calls count, over all planned calls (None when the
plan names no tool: nothing to adhere to).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable

PLAN_TAG = "plan"
PLAN_INSTRUCTION = (
    "Begin with a plan inside <plan></plan>: one step per line, naming the tool each step calls; then carry it out."
)
PLAN_ACK = "Plan noted. Now carry it out."


def plan_steps(plan: str) -> list[str]:
    """The plan's steps: its non-empty lines, stripped."""
    return [line.strip() for line in plan.splitlines() if line.strip()]


def planned_calls(plan: str, tool_names: Iterable[str]) -> list[str]:
    """The tool each step plans to call (the first tool name it holds as a whole word), in order."""
    names = sorted(set(tool_names), key=len, reverse=True)  # longest first: memory_read before memory
    if not names:
        return []
    pattern = re.compile(r"(?<![\w])(" + "|".join(map(re.escape, names)) + r")(?![\w])")
    calls = []
    for step in plan_steps(plan):
        found = pattern.search(step)
        if found:
            calls.append(found.group(1))
    return calls


def plan_adherence(planned: list[str], made: Counter) -> float | None:
    """Fraction of the planned calls that were made (per tool, at most as many as made)."""
    if not planned:
        return None
    wanted = Counter(planned)
    return sum(min(count, made.get(name, 0)) for name, count in wanted.items()) / len(planned)
