"""Write the gateway config for the simulator on embedded defaults (``run-local.sh --sim``).

    python scripts/local_gateway_config.py --sim http://127.0.0.1:PORT --out .local/gateway.yaml

The real local stack's gateway config has one source: ``pd-serve local up`` writes it to
``<state dir>/gateway.yaml`` (serve_app.local.gateway_config), and run-local.sh and the
end-to-end tests use that one.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import yaml

# The real local stack's model names (pd-serve local up), so the README's snippets work on both.
SIM_MODELS = ("tiny", "tiny-pd", "tiny-colocated")


def for_sim(url: str, port: int, data_dir: Path) -> dict[str, Any]:
    """Every name on the one simulator, which serves them all (run-local.sh starts it so)."""
    return {
        **_base(port, data_dir),
        "pools": {"sim": {"urls": [url]}},
        "models": {name: {"pool": "sim"} for name in SIM_MODELS},
    }


def _base(port: int, data_dir: Path) -> dict[str, Any]:
    """Embedded defaults: SQLite for keys and usage, the in-process rate limiter."""
    return {
        "server": {"host": "127.0.0.1", "port": port},
        "storage": {"url": f"sqlite:///{data_dir.resolve() / 'gateway.db'}"},
        "console": {"enabled": True},  # the web console at /console (off by default)
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sim", required=True, help="the simulator's base URL")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    data_dir = args.out.parent
    config = for_sim(args.sim, args.port, data_dir)
    args.out.write_text(yaml.safe_dump(config, sort_keys=False))
    print("  models:   ", ", ".join(config["models"]))


if __name__ == "__main__":
    main()
