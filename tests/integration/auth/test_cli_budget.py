"""``--budget`` on ``tenants create`` and ``keys create``, and ``tenants|keys budget``, as real
processes against a fresh store (and a real Redis for the figures)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

from tests.integration.auth.conftest import ENV, cli
from tests.redisserver import spawn_redis


def test_budgets_are_set_on_create_and_read_back(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/cli.db"
    tenant = json.loads(cli(url, "tenants", "create", "acme", "--budget", "200:month:hard"))
    assert tenant["limits"]["budget"] == {
        "amount": "200", "period": "month", "mode": "hard",
        "alert_thresholds": [50, 80, 100],
    }  # fmt: skip
    key = json.loads(cli(url, "keys", "create", "--tenant", "acme", "--name", "ci",
                         "--budget", "5.50:day:soft", "--tokens-per-minute", "100"))  # fmt: skip
    assert key["limits"]["budget"]["amount"] == "5.50" and key["limits"]["tokens_per_minute"] == 100
    shown = json.loads(cli(url, "tenants", "budget", "acme"))
    assert (
        shown["budget"]["period"] == "month"
        and "GET /admin/tenants/acme/budget" in shown["figures"]
    )
    bad = subprocess.run(
        [sys.executable, "-m", "gateway", "tenants", "create", "b", "--budget", "-3",
         "--database-url", url],
        capture_output=True, text=True, env={**os.environ, **ENV}, timeout=120,
    )  # fmt: skip
    assert bad.returncode == 2 and "0 or more" in bad.stderr

    redis = spawn_redis()
    try:
        config = tmp_path / "gateway.yaml"
        config.write_text(yaml.safe_dump({
            "pools": {"p": {"urls": ["http://127.0.0.1:9"]}}, "models": {"m": {"pool": "p"}},
            "storage": {"url": url}, "limits": {"backend": "redis", "redis_url": redis.url},
        }))  # fmt: skip
        figures = json.loads(cli(url, "keys", "budget", key["id"], "--config", str(config)))
        assert figures["spent_micros"] == 0 and figures["remaining_micros"] == 5_500_000
        assert figures["resets_at"].endswith("T00:00:00Z")
    finally:
        redis.stop()
