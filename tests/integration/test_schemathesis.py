"""Fuzzing in CI: schemathesis against /openapi.json of a real gateway (keys on) in front of the
simulator, with a valid key: no 5xx, no answer outside the document. Bounded in time by a fixed
seed, a small number of examples per operation and a time budget (about 100 s)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.gatewayproc import start_gateway
from tests.integration.auth.conftest import ENV, auth_gateway_config, cli
from tests.simproc import start_sim

SCHEMATHESIS = Path(sys.executable).with_name("schemathesis")


def test_schemathesis_finds_no_server_error_and_no_schema_violation(tmp_path: Path) -> None:
    db = f"sqlite:///{tmp_path}/gw.db"
    with start_sim("--no-delay", "--model", "alpha") as sim:
        config = auth_gateway_config(sim.url, db)
        config["models"] = {"alpha": {"pool": "sim"}}
        config["server"] = {"log_level": "warning"}
        cli(db, "db", "migrate")
        cli(db, "tenants", "create", "t", "--models", "alpha")
        key = cli(db, "keys", "create", "--tenant", "t", "--name", "fuzz", "--print-secret-only")
        with start_gateway(config, tmp_path, env=ENV) as gateway:
            run = subprocess.run(
                [
                    str(SCHEMATHESIS), "run", gateway.url + "/openapi.json",
                    "--checks", "all",
                    # An upload's file must be JSONL of batch requests, which a schema cannot
                    # say: every generated file is rightly refused (tests/seam/test_batches.py).
                    "--exclude-name", "POST /v1/files",
                    "--header", f"Authorization: Bearer {key}",
                    "--max-examples", "15", "--seed", "17", "--workers", "1",
                    "--max-time", "90", "--request-timeout", "10", "--output-sanitize", "false",
                    "--report", "junit", "--report-junit-path", str(tmp_path / "junit.xml"),
                ],
                capture_output=True, text=True, timeout=300, cwd=tmp_path,
                env={**os.environ, "NO_COLOR": "1"},
            )  # fmt: skip
    assert run.returncode == 0, run.stdout[-6000:] + run.stderr[-2000:]
