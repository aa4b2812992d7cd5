"""The garbage collector, tuned for a server whose start-up builds most of what it will hold.

Python's cyclic collector walks every tracked object of a generation when it collects it. The
gateway's start-up leaves hundreds of thousands of them (modules, pydantic models, tokenizer
tables, SQLAlchemy metadata) that live until exit, and each request allocates a few hundred
short-lived containers, so with the default thresholds (700, 10, 10) the collector runs every few
requests and every hundredth run walks the whole start-up heap again: about 8% of the proxy's CPU
under load (py-spy, README Performance). Freezing moves what exists once the app is built out of
the collector's sight (``gc.freeze``: still alive, still freed by reference counting, never
walked), and a higher first threshold lets a request's garbage die by reference counting before
the collector looks at it.
"""

from __future__ import annotations

import gc

# Container allocations between young collections; CPython's default is 700. A request allocates
# a few hundred, so this collects every few dozen requests rather than every few.
YOUNG_THRESHOLD = 20_000


def freeze_startup_objects() -> None:
    """Collect what building the app left as garbage, freeze the rest, raise the threshold.

    For a process that serves one app until exit: a frozen object that later becomes cyclic
    garbage is never collected, so this is not for a process that builds apps repeatedly."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
