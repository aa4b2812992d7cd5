"""Parse a project command line with the command's own parser, and run nothing.

    python scripts/argcheck.py -m serve_app.cli local up --config FILE --state-dir DIR

Exit 0 when the command would accept its arguments, 2 (argparse's message) when it would not.
``scripts/gpu-profile-run.sh`` runs every command of its steps through this when
``PD_GPU_DRY_RUN=1``, and a unit test runs that dry run, so a renamed flag fails CI rather than a
device session.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

# The module a command runs as (python -m NAME) -> its parser factory.
PARSERS = {
    "serve_app.cli": "serve_app.cli:_parser",
    "gateway": "gateway.cli:build_parser",
    "loadtests.pdload": "loadtests.pdload.cli:build_parser",
}


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] != "-m":
        print("usage: argcheck.py -m MODULE [ARGS...]", file=sys.stderr)
        return 2
    module, args = argv[1], argv[2:]
    if module not in PARSERS:
        print(f"argcheck: no parser known for {module}", file=sys.stderr)
        return 2
    where, _, factory = PARSERS[module].partition(":")
    parser: Any = getattr(importlib.import_module(where), factory)()
    parsed = parser.parse_args(args)  # exits 2 with argparse's message
    if module == "loadtests.pdload":
        from loadtests.pdload.cli import make_plan

        make_plan(parsed, parser)  # the cross-argument checks (targets, SLO, steps)
    print(f"checked: {module} {' '.join(args)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
