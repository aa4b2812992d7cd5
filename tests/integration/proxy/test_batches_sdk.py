"""The Batch API through the official SDK, against a real gateway process in front of the
simulator: files.create, batches.create, batches.retrieve polled, files.content; and a gateway
killed with SIGKILL mid-batch on SQLite, restarted: every line exactly once in the output or
error file, exactly one ledger row per line."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import orjson
import pytest

from tests.conformance.httpx_check import checked_openai
from tests.gatewayproc import start_gateway
from tests.integration.proxy.conftest import MODEL, gateway_config
from tests.simproc import SimProcess, start_sim

FINAL = ("completed", "failed", "expired", "cancelled")


def requests_file(count: int, prefix: str = "req") -> bytes:
    lines = [
        {
            "custom_id": f"{prefix}-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": MODEL,
                "messages": [{"role": "user", "content": f"line {i}"}],
                "max_tokens": 4,
            },
        }
        for i in range(count)
    ]
    return b"".join(orjson.dumps(line) + b"\n" for line in lines)


def config(sim: SimProcess, **batches: Any) -> dict[str, Any]:
    document = gateway_config(sim.url, health={"interval": 0.5, "timeout": 0.5})
    document["accounting"] = {"ledger_interval": 0.05}
    document["batches"] = {"poll_seconds": 0.05, **batches}
    return document


def wait_final(client: openai.OpenAI, batch_id: str, timeout: float = 120) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        batch = client.batches.retrieve(batch_id)
        if batch.status in FINAL:
            return batch
        assert time.monotonic() < deadline, f"batch still {batch.status}"
        time.sleep(0.1)


def batch_rows(folder: Path, batch_id: str) -> list[sqlite3.Row]:
    with sqlite3.connect(folder / "gateway.db") as db:
        db.row_factory = sqlite3.Row
        return db.execute("SELECT * FROM usage_ledger WHERE batch_id = ?", (batch_id,)).fetchall()


@pytest.fixture(scope="module")
def sim() -> Iterator[SimProcess]:
    timing = ["--ttft-base-ms", "0", "--ttft-per-token-ms", "0", "--itl-ms", "0"]
    with start_sim("--model", MODEL, "--max-model-len", "512", *timing) as process:
        yield process


def test_the_sdk_runs_a_batch_end_to_end(sim: SimProcess, tmp_path: Path) -> None:
    with start_gateway(config(sim), tmp_path) as gateway, checked_openai(gateway.base_url) as c:
        uploaded = c.files.create(file=("in.jsonl", requests_file(12)), purpose="batch")
        assert uploaded.purpose == "batch" and uploaded.filename == "in.jsonl"
        assert c.files.retrieve(uploaded.id).bytes == uploaded.bytes
        created = c.batches.create(
            input_file_id=uploaded.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            metadata={"job": "sdk"},
        )
        assert created.status == "in_progress" and created.metadata == {"job": "sdk"}
        batch = wait_final(c, created.id)
        assert batch.status == "completed"
        assert batch.request_counts is not None
        assert (batch.request_counts.completed, batch.request_counts.failed) == (12, 0)
        assert batch.output_file_id is not None and batch.error_file_id is None
        output = c.files.content(batch.output_file_id).text
        lines = [orjson.loads(x) for x in output.splitlines()]
        assert sorted(x["custom_id"] for x in lines) == sorted(f"req-{i}" for i in range(12))
        assert all(x["response"]["status_code"] == 200 for x in lines)
        assert lines[0]["response"]["body"]["object"] == "chat.completion"
        assert [b.id for b in c.batches.list(limit=5).data] == [created.id]
        assert c.files.delete(uploaded.id).deleted
        with pytest.raises(openai.NotFoundError):
            c.files.retrieve(uploaded.id)
        rows = batch_rows(tmp_path, created.id)
        assert len(rows) == 12
        assert {r["request_id"] for r in rows} == {x["response"]["request_id"] for x in lines}


def test_a_gateway_killed_mid_batch_resumes_and_runs_every_line_once(tmp_path: Path) -> None:
    # Each answer takes about 150 ms, two at a time: 40 lines take about 3 s, time to kill it.
    slow = ["--ttft-base-ms", "150", "--ttft-per-token-ms", "0", "--itl-ms", "0"]
    with start_sim("--model", MODEL, "--max-model-len", "512", *slow) as sim:
        document = config(sim, concurrency=2, lease_seconds=1.0)
        with start_gateway(document, tmp_path) as first, checked_openai(first.base_url) as c:
            uploaded = c.files.create(file=("in.jsonl", requests_file(40)), purpose="batch")
            batch_id = c.batches.create(
                input_file_id=uploaded.id,
                endpoint="/v1/chat/completions",
                completion_window="24h",
            ).id
            _wait_for_some_done(c, batch_id, 6)
            first.proc.kill()  # SIGKILL: no shutdown, lines in flight and claims left behind
            first.proc.wait(10)
        with start_gateway(document, tmp_path) as second, checked_openai(second.base_url) as c:
            batch = wait_final(c, batch_id)
            assert batch.status == "completed"
            assert batch.request_counts is not None
            assert batch.request_counts.completed + batch.request_counts.failed == 40
            assert batch.output_file_id is not None
            output = c.files.content(batch.output_file_id).text
            errors = (
                "" if batch.error_file_id is None else c.files.content(batch.error_file_id).text
            )
        upstream = len(sim.requests())
    lines = [orjson.loads(x) for x in (output + errors).splitlines()]
    ids = [x["custom_id"] for x in lines]
    assert sorted(ids) == sorted(f"req-{i}" for i in range(40))  # each exactly once
    rows = batch_rows(tmp_path, batch_id)
    assert len(rows) == 40  # one ledger row per line, none for the runs the kill cut short
    assert {r["request_id"] for r in rows} == {x["response"]["request_id"] for x in lines}
    assert upstream >= 40  # more where a line in flight at the kill ran again


def _wait_for_some_done(client: openai.OpenAI, batch_id: str, count: int) -> None:
    deadline = time.monotonic() + 60
    while True:
        counts = client.batches.retrieve(batch_id).request_counts
        if counts is not None and counts.completed >= count:
            return
        assert time.monotonic() < deadline, "the batch did not start"
        time.sleep(0.05)
