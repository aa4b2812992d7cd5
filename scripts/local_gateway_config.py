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

# Prompts this long or longer go to the PD app (the local model's context is 512 tokens).
PD_THRESHOLD_TOKENS = 128


def for_serve_state(state: dict[str, Any], port: int, data_dir: Path) -> dict[str, Any]:
    """One model routed by prompt length across the PD and colocated apps, counted with the
    served model's own tokenizer; ``<model>-pd`` and ``<model>-colocated`` pin one pool."""
    urls = state["base_urls"]
    model = state["model"]
    tokenizer = Path(state["driver_log"]).parent / "tiny-model" / "tokenizer.json"
    timeouts = {"connect": 5, "first_byte": 120, "idle": 60, "total": 600}
    pools = {name: {"urls": [url], "timeouts": dict(timeouts)} for name, url in urls.items()}
    models: dict[str, Any] = {
        model: {
            "variants": {"stable": {"weight": 1, "pools": {"pd": "pd", "colocated": "colocated"}}},
            "routing": {"pd_threshold_tokens": PD_THRESHOLD_TOKENS},
            "tokenizer": {"kind": "huggingface", "tokenizer_file": str(tokenizer)},
        }
    }
    for name in urls:
        models[f"{model}-{name}"] = {"pool": name, "upstream_model": model}
    return {**_base(port, data_dir), "pools": pools, "models": models}


def for_sim(url: str, port: int, data_dir: Path) -> dict[str, Any]:
    return {
        **_base(port, data_dir),
        "pools": {"sim": {"urls": [url]}},
        "models": {"sim-model": {"pool": "sim"}},
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
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--serve-state", type=Path)
    source.add_argument("--sim")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    data_dir = args.out.parent
    if args.serve_state:
        state = json.loads(args.serve_state.read_text())
        config = for_serve_state(state, args.port, data_dir)
    else:
        config = for_sim(args.sim, args.port, data_dir)
    args.out.write_text(yaml.safe_dump(config, sort_keys=False))
    print("  models:   ", ", ".join(config["models"]))


if __name__ == "__main__":
    main()
