"""The Batch API in-process: files checked as OpenAI checks them (nothing stored half), batches
run by the runner through the pipeline, one ledger row per line, per-tenant files."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.seam.harness import Gateway, Reply, running_gateway
from tests.seam.test_exit_paths import SCRIPTS

BOUNDARY = "b0undary"
FAST = {"poll_seconds": 0.02, "concurrency": 4}


def line(custom_id: str, url: str = "/v1/chat/completions", **body: Any) -> dict[str, Any]:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "script": "whole"}
    return {"custom_id": custom_id, "method": "POST", "url": url, "body": {**chat, **body}}


def jsonl(*lines: object) -> bytes:
    return b"".join(orjson.dumps(x) + b"\n" for x in lines)


def form(content: bytes, purpose: str = "batch", filename: str = "in.jsonl") -> bytes:
    return (
        (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="purpose"\r\n\r\n{purpose}\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; '
            f'filename="{filename}"\r\nContent-Type: application/jsonl\r\n\r\n'
        ).encode()
        + content
        + f"\r\n--{BOUNDARY}--\r\n".encode()
    )


MULTIPART = ((b"content-type", f"multipart/form-data; boundary={BOUNDARY}".encode()),)


async def upload(gw: Gateway, content: bytes, **kwargs: Any) -> Reply:
    return await gw.call("/v1/files", form(content, **kwargs), headers=MULTIPART)


def stored_files(gw: Gateway) -> int:
    with sqlite3.connect(gw.db_path) as db:
        return int(db.execute("SELECT COUNT(*) FROM batch_files").fetchone()[0])


async def finished(gw: Gateway, batch_id: str) -> dict[str, Any]:
    for _ in range(500):
        reply = await gw.get(f"/v1/batches/{batch_id}")
        batch: dict[str, Any] = reply.json()
        if batch["status"] in ("completed", "failed", "expired", "cancelled"):
            return batch
        await asyncio.sleep(0.02)
    raise AssertionError(f"batch still {batch['status']}")


async def test_a_file_is_kept_listed_read_and_deleted(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS, batches=FAST) as gw:
        content = jsonl(line("a"), line("b"))
        reply = await upload(gw, content)
        assert reply.status == 200, reply.body
        made = reply.json()
        assert made["object"] == "file" and made["purpose"] == "batch"
        assert made["bytes"] == len(content) and made["filename"] == "in.jsonl"
        listed = (await gw.get("/v1/files")).json()
        assert [f["id"] for f in listed["data"]] == [made["id"]]
        assert (await gw.get(f"/v1/files/{made['id']}")).json() == made
        assert (await gw.get(f"/v1/files/{made['id']}/content")).body == content
        deleted = await gw.get(f"/v1/files/{made['id']}", method="DELETE")
        assert deleted.json() == {"id": made["id"], "object": "file", "deleted": True}
        assert (await gw.get(f"/v1/files/{made['id']}")).status == 404


@pytest.mark.parametrize(
    ("content", "code"),
    [
        (b'{"custom_id": "a", "method": "POST"\n', "invalid_batch_line"),
        (jsonl(line("a"), line("a")), "duplicate_custom_id"),
        (jsonl(line("a", url="/v1/moderations")), "invalid_batch_line"),
        (jsonl({**line("a"), "method": "GET"}), "invalid_batch_line"),
        (jsonl({**line("a"), "body": [1]}), "invalid_batch_line"),
        (jsonl({**line("a"), "custom_id": "x" * 513}), "invalid_batch_line"),
        (jsonl(line("a", stream=True)), "invalid_batch_line"),
        (b"\n\n", "empty_file"),
    ],
)
async def test_a_bad_line_refuses_the_whole_file(tmp_path: Path, content: bytes, code: str) -> None:
    async with running_gateway(tmp_path, SCRIPTS, batches=FAST) as gw:
        first = b"" if code == "empty_file" else jsonl(line("first"))
        reply = await upload(gw, first + content)
        assert reply.status == 400, reply.body
        error = reply.json()["error"]
        assert error["code"] == code and error["param"] == "file"
        assert error["type"] == "invalid_request_error"
        assert stored_files(gw) == 0


async def test_a_file_past_its_bounds_is_refused_and_not_kept(tmp_path: Path) -> None:
    bounds = {**FAST, "max_lines": 3, "max_file_bytes": 4096, "max_line_bytes": 512}
    async with running_gateway(tmp_path, SCRIPTS, batches=bounds) as gw:
        too_many = await upload(gw, jsonl(*(line(str(i)) for i in range(4))))
        assert too_many.status == 400
        assert too_many.json()["error"]["code"] == "too_many_requests_in_file"
        long_line = await upload(gw, jsonl(line("a", padding="x" * 600)))
        assert long_line.status == 400 and "longer than 512" in long_line.json()["error"]["message"]
        too_big = await upload(gw, b"x" * 8000)
        assert too_big.status == 413
        assert too_big.json()["error"]["code"] == "request_too_large"
        assert (await upload(gw, jsonl(line("a")), purpose="fine-tune")).status == 400
        assert stored_files(gw) == 0


async def test_a_body_that_never_ends_is_refused_at_the_bound(tmp_path: Path) -> None:
    bounds = {**FAST, "max_file_bytes": 64 * 1024}
    async with running_gateway(tmp_path, SCRIPTS, batches=bounds) as gw:
        head = form(b"")[: -len(f"\r\n--{BOUNDARY}--\r\n")]
        sent = 0

        async def receive() -> dict[str, Any]:
            nonlocal sent
            sent += 1
            chunk = head if sent == 1 else b'{"custom_id": "' + b"x" * 8192
            return {"type": "http.request", "body": chunk, "more_body": True}

        messages: list[dict[str, Any]] = []

        async def send(message: dict[str, Any]) -> None:
            messages.append(message)

        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": "/v1/files",
            "raw_path": b"/v1/files",
            "query_string": b"",
            "root_path": "",
            "headers": list(MULTIPART),
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8080),
        }
        await asyncio.wait_for(gw.app(scope, receive, send), 30)
        assert messages[0]["status"] == 413
        # Read up to a bound, not on and on: the server's edge reads a body up to
        # server.max_body_bytes before any route sees it; the upload's own bound is below that.
        max_body = gw.state.config.server.max_body_bytes
        assert (sent - 2) * 8192 <= max_body
        assert stored_files(gw) == 0


async def test_another_tenant_sees_none_of_it(tmp_path: Path) -> None:
    # Without keys every caller is the one anonymous tenant; the stores scope by tenant id.
    async with running_gateway(tmp_path, SCRIPTS, batches=FAST) as gw:
        made = (await upload(gw, jsonl(line("a")))).json()
        files = gw.state.batches.files
        now = gw.clock.wall()
        assert await files.get(made["id"], tenant_id="other", now=now) is None
        assert await files.content(made["id"], tenant_id="other", now=now) is None
        assert not await files.delete(made["id"], tenant_id="other")
        assert await files.get(made["id"], tenant_id="", now=now) is not None


async def test_a_batch_runs_every_line_once_through_the_pipeline(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS, batches=FAST) as gw:
        lines = [line(f"req-{i}") for i in range(10)] + [line("bad", script="e400")]
        made = (await upload(gw, jsonl(*lines))).json()
        body = {
            "input_file_id": made["id"],
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
            "metadata": {"job": "nightly"},
        }
        created = await gw.call("/v1/batches", orjson.dumps(body))
        assert created.status == 200, created.body
        batch = created.json()
        assert batch["status"] == "in_progress" and batch["metadata"] == {"job": "nightly"}
        assert batch["request_counts"] == {"total": 11, "completed": 0, "failed": 0}
        done = await finished(gw, batch["id"])
        assert done["status"] == "completed", done
        assert done["request_counts"] == {"total": 11, "completed": 10, "failed": 1}
        output = (await gw.get(f"/v1/files/{done['output_file_id']}/content")).body
        errors = (await gw.get(f"/v1/files/{done['error_file_id']}/content")).body
        out = [orjson.loads(x) for x in output.splitlines()]
        err = [orjson.loads(x) for x in errors.splitlines()]
        assert sorted(x["custom_id"] for x in out) == sorted(f"req-{i}" for i in range(10))
        assert [x["custom_id"] for x in err] == ["bad"]
        first = out[0]
        assert first["response"]["status_code"] == 200 and first["error"] is None
        assert first["response"]["body"]["object"] == "chat.completion"
        assert err[0]["response"]["status_code"] == 400
        listed = (await gw.get("/v1/batches?limit=1")).json()
        assert [b["id"] for b in listed["data"]] == [batch["id"]]
        metrics = (await gw.get("/metrics")).body.decode()
        assert 'gateway_batch_lines_total{result="completed"} 10.0' in metrics
        assert 'gateway_batch_lines_total{result="failed"} 1.0' in metrics
        assert "gateway_batch_lines_running 0.0" in metrics
    rows = [r for r in gw.ledger_rows() if r["batch_id"] == batch["id"]]
    assert len(rows) == 11
    request_ids = {x["response"]["request_id"] for x in out + err}
    assert {r["request_id"] for r in rows} == request_ids


async def test_a_batch_whose_lines_name_another_endpoint_fails_with_their_errors(
    tmp_path: Path,
) -> None:
    async with running_gateway(tmp_path, SCRIPTS, batches=FAST) as gw:
        made = (await upload(gw, jsonl(line("a"), line("b", url="/v1/completions")))).json()
        body = {
            "input_file_id": made["id"],
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        }
        batch = (await gw.call("/v1/batches", orjson.dumps(body))).json()
        assert batch["status"] == "failed"
        assert batch["errors"]["data"][0]["line"] == 2
        assert batch["errors"]["data"][0]["code"] == "mismatched_endpoint"


@pytest.mark.parametrize(
    "change",
    [
        {"completion_window": "1h"},
        {"endpoint": "/v1/moderations"},
        {"metadata": {str(i): "v" for i in range(17)}},
        {"metadata": {"k": "v" * 513}},
        {"input_file_id": "x" * 200},
    ],
)
async def test_a_bad_batch_request_is_a_400(tmp_path: Path, change: dict[str, Any]) -> None:
    async with running_gateway(tmp_path, SCRIPTS, batches=FAST) as gw:
        made = (await upload(gw, jsonl(line("a")))).json()
        body = {
            "input_file_id": made["id"],
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
            **change,
        }
        reply = await gw.call("/v1/batches", orjson.dumps(body))
        assert reply.status == 400, reply.body


async def test_an_unknown_file_or_batch_is_a_404(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS, batches=FAST) as gw:
        body = {
            "input_file_id": "file-nope",
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        }
        assert (await gw.call("/v1/batches", orjson.dumps(body))).status == 404
        assert (await gw.get("/v1/batches/batch_nope")).status == 404
        assert (await gw.call("/v1/batches/batch_nope/cancel", b"")).status == 404
        assert (await gw.get("/v1/files/file-nope/content")).status == 404


async def test_empty_lists_are_openais_list_objects(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS, batches=FAST) as gw:
        # OpenAI's document types first_id and last_id as strings (required for files); an
        # empty list has neither, and OpenAI answers null, as the gateway does.
        gw.conform = False
        files = await gw.get("/v1/files")
        assert files.json()["data"] == [] and files.json()["has_more"] is False
        batches = await gw.get("/v1/batches")
        assert batches.json()["data"] == [] and batches.json()["first_id"] is None
        gw.conform = True
        assert (await gw.get("/v1/batches?limit=101")).status == 400
        assert (await gw.get("/v1/files?limit=0")).status == 400


ONE_PLACE = {"pd": {"urls": ["http://replica-a:8000"], "capacity": 1}}
FLOW = {"enabled": True, "max_wait_seconds": 60, "recheck_seconds": 3600}


async def test_lines_wait_while_interactive_traffic_holds_the_pool(tmp_path: Path) -> None:
    """The pool's only place held by hand (an interactive request's): the runner starts no
    line; once it is given back the batch runs to its end. No line is failed meanwhile."""
    async with running_gateway(tmp_path, SCRIPTS, batches=FAST, flow=FLOW, pools=ONE_PLACE) as gw:
        pool = gw.state.table.pools["pd"]
        held = pool.take()
        made = (await upload(gw, jsonl(*(line(f"r{i}") for i in range(5))))).json()
        body = {
            "input_file_id": made["id"],
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        }
        batch = (await gw.call("/v1/batches", orjson.dumps(body))).json()
        runner = gw.app.state.batch_runner
        for _ in range(10):  # several of the runner's polls
            assert await runner.step() == 0
            await asyncio.sleep(0.02)
        assert not runner.running
        waiting = (await gw.get(f"/v1/batches/{batch['id']}")).json()
        assert waiting["request_counts"] == {"total": 5, "completed": 0, "failed": 0}
        pool.give_back(held)
        done = await finished(gw, batch["id"])
        assert done["status"] == "completed"
        assert done["request_counts"] == {"total": 5, "completed": 5, "failed": 0}


PRICES = {
    "currency": "USD",
    "models": {"m": {"input": "1.00", "output": "2.00", "batch_discount": "0.5"}},
}


async def test_a_line_is_billed_at_the_batch_price(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS, batches=FAST, prices=PRICES) as gw:
        interactive = await gw.call("/v1/chat/completions", orjson.dumps(line("x")["body"]))
        assert interactive.status == 200
        made = (await upload(gw, jsonl(line("a")))).json()
        body = {
            "input_file_id": made["id"],
            "endpoint": "/v1/chat/completions",
            "completion_window": "24h",
        }
        batch = (await gw.call("/v1/batches", orjson.dumps(body))).json()
        assert (await finished(gw, batch["id"]))["status"] == "completed"
    rows = {r["batch_id"]: r for r in gw.ledger_rows()}
    plain, batched = rows[None], rows[batch["id"]]
    assert (plain["input_tokens"], plain["output_tokens"]) == (
        batched["input_tokens"],
        batched["output_tokens"],
    )
    # The exact half of the interactive price, rounded half up to the micro-unit once.
    assert plain["cost_micros"] == 17  # 11 prompt tokens at 1 micro, 3 output at 2
    assert batched["cost_micros"] == 9
