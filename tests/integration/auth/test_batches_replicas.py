"""Batches with keys on, through real gateway processes: files and batches belong to the tenant
whose key made them (another tenant's key gets 404 for every one of them), lines run with the
batch's key and are billed to it; and on a real PostgreSQL, two replicas share a batch, one is
killed with SIGKILL mid-batch, and every line still appears exactly once in the output with
exactly one ledger row."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.auth.conftest import ENV, Admin, admin_key, auth_gateway_config
from tests.pgserver import PostgresServer, start_postgres
from tests.simproc import SimProcess, start_sim

FINAL = ("completed", "failed", "expired", "cancelled")


def requests_file(count: int) -> bytes:
    return b"".join(
        orjson.dumps(
            {
                "custom_id": f"req-{i}",
                "method": "POST",
                "url": "/v1/chat/completions",
                "body": {
                    "model": "alpha",
                    "messages": [{"role": "user", "content": f"line {i}"}],
                    "max_tokens": 4,
                },
            }
        )
        + b"\n"
        for i in range(count)
    )


@pytest.fixture(scope="module")
def postgres() -> Iterator[PostgresServer]:
    with start_postgres() as server:
        yield server


def tenant_keys(gateway: GatewayProcess, url: str, *tenants: str) -> dict[str, str]:
    admin = Admin(gateway.url, admin_key(url))
    keys = {}
    for tenant in tenants:
        admin.post("/tenants", {"id": tenant})
        keys[tenant] = admin.post(f"/tenants/{tenant}/keys", {"name": "k"})["key"]
    admin.close()
    return keys


def sdk(gateway: GatewayProcess, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.base_url, api_key=key, max_retries=0)


def wait_final(client: openai.OpenAI, batch_id: str, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while (batch := client.batches.retrieve(batch_id)).status not in FINAL:
        assert time.monotonic() < deadline, f"batch still {batch.status}"
        time.sleep(0.1)
    return batch


def test_another_tenant_gets_404_for_files_and_batches(
    sim: SimProcess, postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.create_database("batch_tenancy")
    config = auth_gateway_config(sim.url, url)
    config["server"] = {"log_level": "info"}
    config["batches"] = {"poll_seconds": 0.05}
    with start_gateway(config, tmp_path, env=ENV) as gateway:
        keys = tenant_keys(gateway, url, "acme", "rival")
        with sdk(gateway, keys["acme"]) as acme, sdk(gateway, keys["rival"]) as rival:
            made = acme.files.create(file=("in.jsonl", requests_file(3)), purpose="batch")
            batch = acme.batches.create(
                input_file_id=made.id, endpoint="/v1/chat/completions", completion_window="24h"
            )
            calls: list[Any] = [
                lambda: rival.files.retrieve(made.id),
                lambda: rival.files.content(made.id),
                lambda: rival.files.delete(made.id),
                lambda: rival.batches.retrieve(batch.id),
                lambda: rival.batches.cancel(batch.id),
                lambda: rival.batches.create(
                    input_file_id=made.id,
                    endpoint="/v1/chat/completions",
                    completion_window="24h",
                ),
            ]
            for call in calls:
                with pytest.raises(openai.NotFoundError):
                    call()
            assert rival.files.list().data == [] and rival.batches.list().data == []
            done = wait_final(acme, batch.id)
            assert done.status == "completed" and done.request_counts.completed == 3
    tenants = postgres.psql(
        f"SELECT DISTINCT tenant_id FROM usage_ledger WHERE batch_id = '{batch.id}'",
        "batch_tenancy",
    )
    assert tenants.split() == ["acme"]  # billed to the batch's own tenant


def test_two_replicas_on_postgresql_one_killed_every_line_once(
    postgres: PostgresServer, tmp_path: Path
) -> None:
    url = postgres.create_database("batch_replicas")
    slow = ["--ttft-base-ms", "150", "--ttft-per-token-ms", "0", "--itl-ms", "0"]
    with start_sim("--model", "alpha", *slow) as sim:
        config = auth_gateway_config(sim.url, url)
        config["server"] = {"log_level": "info"}
        config["accounting"] = {"ledger_interval": 0.05}
        config["batches"] = {"poll_seconds": 0.05, "concurrency": 2, "lease_seconds": 1.0}
        first_dir, second_dir = tmp_path / "a", tmp_path / "b"
        first_dir.mkdir()
        second_dir.mkdir()
        with (
            start_gateway(config, first_dir, env=ENV) as first,
            start_gateway(config, second_dir, env=ENV) as second,
        ):
            key = tenant_keys(first, url, "acme")["acme"]
            with sdk(first, key) as client:
                made = client.files.create(file=("in.jsonl", requests_file(60)), purpose="batch")
                batch_id = client.batches.create(
                    input_file_id=made.id, endpoint="/v1/chat/completions", completion_window="24h"
                ).id
                deadline = time.monotonic() + 60
                while client.batches.retrieve(batch_id).request_counts.completed < 10:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
            first.proc.kill()  # SIGKILL: its claims are left to expire
            first.proc.wait(10)
            with sdk(second, key) as client:
                done = wait_final(client, batch_id)
                assert done.status == "completed"
                output = client.files.content(done.output_file_id).text
                errors = (
                    ""
                    if done.error_file_id is None
                    else client.files.content(done.error_file_id).text
                )
    lines = [orjson.loads(x) for x in (output + errors).splitlines()]
    assert sorted(x["custom_id"] for x in lines) == sorted(f"req-{i}" for i in range(60))
    rows = postgres.psql(
        f"SELECT request_id FROM usage_ledger WHERE batch_id = '{batch_id}'", "batch_replicas"
    ).split()
    assert len(rows) == 60
    assert set(rows) == {x["response"]["request_id"] for x in lines}
