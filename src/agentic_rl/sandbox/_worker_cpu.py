"""The processes of a call and their CPU time, as the kernel counts them, read by the worker.

A helper script of ``_worker.py`` (stdlib only; imported by it from this directory, never
through the ``agentic_rl`` package). Every process a call starts is a descendant of the
worker (the worker is init of its PID namespace or a child subreaper, so orphans come
back to it), except the zygote's subtree, which never runs code: that tree is what the
worker counts, stops between a session's cells and kills.
"""

from __future__ import annotations

import os

TICKS = os.sysconf("SC_CLK_TCK")


def process_table() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, state letter, CPU seconds of the process and its reaped children)."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except OSError:  # gone meanwhile
            continue
        # After the command name: state (3), ppid (4), ... utime (14), stime, cutime, cstime (17).
        table[int(entry)] = (int(fields[1]), fields[0].decode(), sum(int(value) for value in fields[11:15]) / TICKS)
    return table


def descendants(spare: int | None, table: dict | None = None) -> list[int]:
    """Every descendant of this process but ``spare`` (the zygote) and its own."""
    table = process_table() if table is None else table
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in table.items():
        children.setdefault(parent, []).append(pid)
    found, todo = [], [os.getpid()]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child != spare:
                found.append(child)
                todo.append(child)
    return found


def tree_cpu_s(spare: int | None) -> float:
    """CPU seconds the call's processes have used (see the module docstring): whatever the
    code did to its own RLIMIT_CPU, its session or its uid."""
    table = process_table()
    return sum(table[pid][2] for pid in descendants(spare, table))
