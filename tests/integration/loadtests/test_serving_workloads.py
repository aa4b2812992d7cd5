"""pd-loadtest's multi-turn and multi-tenant workloads against real processes: a capacity
simulator (serve_app/sim, not a real engine) alone, and a gateway with two tenants' keys.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.gatewayproc import start_gateway
from tests.simproc import start_sim

HASH_ENV = {"PD_GATEWAY_KEY_HASH_SECRET": "loadtest-tenants-hash-secret-0123456789"}
CAPACITY = ("--capacity", "--block-size", "4", "--step-ms", "1", "--model", "m")


def run_tool(*args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    out = Path(args[args.index("--out") + 1])
    done = subprocess.run(
        [sys.executable, "-m", "loadtests.pdload", "--no-progress", "--no-plots", *args],
        capture_output=True, text=True, timeout=180, env={**os.environ, **(env or {})},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    data: dict[str, Any] = json.loads((out / "report.json").read_text())
    return data


def test_multi_turn_conversations_hit_the_engines_prefix_cache(tmp_path: Path) -> None:
    with start_sim(*CAPACITY) as sim:
        data = run_tool(
            "--target", f"sim={sim.base_url}", "--model", "m", "--tokenizer", "words",
            "--workload", "multi-turn", "--conversations", "4", "--turns", "3",
            "--prefix-tokens", "40", "--input-tokens", "8", "--output-tokens", "4",
            "--concurrency", "2", "--requests", "12", "--out", str(tmp_path / "r"),
        )  # fmt: skip
    step = data["targets"][0]["steps"][0]
    assert step["summary"]["ok"] == 12
    by_turn = step["by_shape"]
    # A first turn shares nothing with anything before it; later turns find their history.
    assert by_turn["turn-1"]["cached_tokens_total"] == 0
    assert by_turn["turn-2"]["prefix_hit_rate"] > 0.5
    assert by_turn["turn-3"]["prefix_hit_rate"] > by_turn["turn-2"]["prefix_hit_rate"]
    s = step["summary"]
    assert s["prefill_tokens_total"] == s["prompt_tokens_total"] - s["cached_tokens_total"]


def _key(database_url: str, tenant: str) -> str:
    def cli(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "gateway", *args, "--database-url", database_url],
            capture_output=True, text=True, timeout=120, check=True,
            env={**os.environ, **HASH_ENV},
        )  # fmt: skip
        return done.stdout.strip()

    cli("tenants", "create", tenant)
    return cli("keys", "create", "--tenant", tenant, "--name", "load", "--print-secret-only")


def test_two_tenants_send_at_once_each_at_its_own_rate(tmp_path: Path) -> None:
    database_url = f"sqlite:///{tmp_path}/keys.db"
    keys = {"LOUD_KEY": _key(database_url, "loud"), "QUIET_KEY": _key(database_url, "quiet")}
    config = {
        "storage": {"url": database_url},
        "auth": {"enabled": True},
        "pools": {},
        "models": {"m": {"pool": "sim"}},
    }
    with start_sim(*CAPACITY) as sim:
        config["pools"] = {"sim": {"urls": [sim.url]}}
        with start_gateway(config, tmp_path, env=HASH_ENV) as gateway:
            data = run_tool(
                "--target", f"gw={gateway.base_url}", "--model", "m", "--tokenizer", "words",
                "--tenant", "name=loud,key_env=LOUD_KEY,load=4",
                "--tenant", "name=quiet,key_env=QUIET_KEY,load=1",
                "--rate", "10", "--requests", "25", "--input-tokens", "8",
                "--output-tokens", "2", "--out", str(tmp_path / "r"),
                env=keys,
            )  # fmt: skip
    step = data["targets"][0]["steps"][0]
    tenants = step["by_tenant"]
    # 25 requests split 4:1 by load, each tenant with its own key (a wrong key would be a 401).
    assert (tenants["loud"]["ok"], tenants["quiet"]["ok"]) == (20, 5)
    assert tenants["quiet"]["ttft"]["p99"] is not None
    assert data["meta"]["tenants"] == [
        {"name": "loud", "load": 4.0},
        {"name": "quiet", "load": 1.0},
    ]
    assert "## Per tenant" in (tmp_path / "r" / "report.md").read_text()
