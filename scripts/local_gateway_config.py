"""Write the gateway config for the local stack (or the simulator) on embedded defaults.

    python scripts/local_gateway_config.py --serve-state .local/serve/state.json --out gw.yaml
    python scripts/local_gateway_config.py --sim http://127.0.0.1:PORT --out .local/gateway.yaml

It reads the state file that ``pd-serve local up`` writes (plain JSON: the gateway never imports
serve_app) and points the gateway's pools at the PD and colocated apps.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import yaml


def for_serve_state(state: dict[str, Any], port: int) -> dict[str, Any]:
    urls = state["base_urls"]
    model = state["model"]
    timeouts = {"connect": 5, "first_byte": 120, "idle": 60, "total": 600}
    return {
        "server": {"host": "127.0.0.1", "port": port},
        "pools": {
            name: {"urls": [url], "timeouts": timeouts, "health": {"path": "/v1/models"}}
            for name, url in urls.items()
        },
        "models": {
            model: {"pool": "colocated"},
            f"{model}-pd": {"pool": "pd", "upstream_model": model},
        },
    }


def for_sim(url: str, port: int) -> dict[str, Any]:
    return {
        "server": {"host": "127.0.0.1", "port": port},
        "pools": {"sim": {"urls": [url]}},
        "models": {"sim-model": {"pool": "sim"}},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--serve-state", type=Path)
    source.add_argument("--sim")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    if args.serve_state:
        config = for_serve_state(json.loads(args.serve_state.read_text()), args.port)
    else:
        config = for_sim(args.sim, args.port)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(yaml.safe_dump(config, sort_keys=False))
    print("  models:   ", ", ".join(config["models"]))


if __name__ == "__main__":
    main()
