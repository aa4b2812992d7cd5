"""The ``pd-loadtest`` console script: says which extra to install before anything is imported.

The script is installed with the distribution, its dependencies only with the ``loadtest``
extra; without them it says so instead of failing with an ImportError.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence

NEEDS = ("aiohttp", "tqdm", "matplotlib")


def main(argv: Sequence[str] | None = None) -> int:
    absent = [name for name in NEEDS if importlib.util.find_spec(name) is None]
    if absent:
        print(
            f"pd-loadtest needs the 'loadtest' extra ({', '.join(absent)} not installed): "
            "pip install 'pd-gateway[loadtest]'",
            file=sys.stderr,
        )
        return 2
    from loadtests.pdload.cli import main as run

    run(argv)
    return 0
