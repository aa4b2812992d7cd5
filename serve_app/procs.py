"""Processes by pid, safely: a pid is only ours while its start time matches the one recorded.

Linux ``/proc`` only (the local profile's platform). A recorded ``(pid, start_ticks)`` pair stays
safe to signal after the process died and its pid was reused: the start time no longer matches.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

Proc = tuple[int, int]
"""(pid, start time in clock ticks since boot)."""


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may contain spaces: split after it.
    return text[text.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    fields = _stat_fields(pid)
    return None if fields is None else int(fields[19])  # field 22 of stat(5)


def this_proc(pid: int) -> Proc | None:
    ticks = start_ticks(pid)
    return None if ticks is None else (pid, ticks)


def descendants(root: int) -> list[Proc]:
    """Every living descendant of ``root`` (children, their children, ...)."""
    parent_of: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            fields = _stat_fields(int(entry.name))
            if fields is not None:
                parent_of[int(entry.name)] = int(fields[1])  # field 4: ppid
    found: list[Proc] = []
    frontier = {root}
    while frontier:
        children = {pid for pid, ppid in parent_of.items() if ppid in frontier}
        frontier = children
        for pid in children:
            proc = this_proc(pid)
            if proc is not None:
                found.append(proc)
    return found


def alive(proc: Proc) -> bool:
    fields = _stat_fields(proc[0])
    # A zombie has finished; only its parent's wait() is missing.
    return fields is not None and fields[0] != "Z" and int(fields[19]) == proc[1]


def signal_if_alive(proc: Proc, signum: signal.Signals) -> bool:
    """Send ``signum`` only if ``proc`` is still the process recorded; True if sent."""
    if not alive(proc):
        return False
    try:
        os.kill(proc[0], signum)
    except ProcessLookupError:
        return False
    return True
