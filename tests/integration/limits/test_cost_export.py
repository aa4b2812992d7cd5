"""Money through a real gateway process and the simulator (a real engine cannot serve here): every
ledger row's cost is its billed tokens at the configured prices (cut and failed streams included,
cached prompt tokens at the cached price), and the usage API's JSON and CSV export sum to it."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from tests.gatewayproc import GatewayProcess, start_gateway
from tests.integration.limits.limitsetup import MODEL, STEERING, ledger_rows
from tests.integration.limits.test_ledger_rows import MESSAGES, stream_lines, wait_for_rows
from tests.simproc import SimProcess, start_sim

PRICE = {"input": "0.15", "cached_input": "0.075", "output": "0.600001"}
# Long enough that the simulator's prefix cache serves most of it the second time.
LONG = [{"role": "user", "content": " ".join(f"stone{i} river{i}" for i in range(300))}]


@pytest.fixture
def sim() -> Iterator[SimProcess]:
    zero = ["--ttft-base-ms", "0", "--ttft-per-token-ms", "0", "--itl-ms", "0"]
    # The capacity model has the block prefix cache that reports `cached_tokens`.
    with start_sim("--model", MODEL, "--max-model-len", "8192", "--capacity", *zero) as process:
        yield process


def priced(row: dict[str, Any]) -> int:
    """The row's tokens at ``PRICE``, from the config's own strings, rounded half up."""
    cached = row["cached_tokens"]
    units = (
        (row["input_tokens"] - cached) * Decimal(PRICE["input"])
        + cached * Decimal(PRICE["cached_input"])
        + row["output_tokens"] * Decimal(PRICE["output"])
    )
    return int(units.quantize(Decimal(1), rounding=ROUND_HALF_UP))  # per million x micro-units


def test_costs_of_a_mixed_load_sum_to_prices_times_tokens(sim: SimProcess, tmp_path: Path) -> None:
    config = {
        "pools": {"sim": {"urls": [sim.url], "forward_headers": STEERING}},
        "models": {MODEL: {"pool": "sim"}},
        "prices": {"currency": "USD", "models": {MODEL: PRICE}},
        "storage": {"url": f"sqlite:///{tmp_path}/ledger.db"},
        "accounting": {"ledger_interval": 0.1},
        "server": {"access_log": False},
    }
    with start_gateway(config, tmp_path) as gateway:
        client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
        for i in range(3):  # the same long prompt: cached from the second on
            client.chat.completions.create(model=MODEL, messages=LONG, max_tokens=4 + i)  # type: ignore[arg-type]
        for i in range(3):
            body = {"max_tokens": 5 + i, "stream_options": {"include_usage": True}}
            stream_lines(gateway, f"usage-{i}", body, headers={})
        for i in range(3):  # cut by the client: billed what was used
            stream_lines(
                gateway, f"cut-{i}", {"max_tokens": 200}, headers={"x-sim-itl-ms": "20"}, keep=3
            )
        for i in range(2):  # failed mid-stream: billed what was delivered
            stream_lines(
                gateway, f"failed-{i}", {"max_tokens": 50}, headers={"x-sim-fail-after": "3"}
            )
        wait_for_rows(tmp_path / "ledger.db", 11)
        rows = ledger_rows(tmp_path / "ledger.db")
        with httpx.Client(base_url=gateway.base_url, timeout=10) as http:
            listing = http.get("/usage", params={"group_by": "day,model"}).json()
            export = http.get("/usage/export", params={"group_by": "day,key_id,model"})
    assert len(rows) == 11
    assert any(r["cached_tokens"] > 0 for r in rows), "the repeated prompt was served from cache"
    assert sum(r["partial"] for r in rows) >= 3  # the cut streams are in the sum
    for row in rows:
        assert row["cost_micros"] == priced(row), row
        assert row["price_version"].startswith("USD-")
    total = sum(priced(r) for r in rows)
    assert sum(g["cost_micros"] for g in listing["data"]) == total
    assert {g["currency"] for g in listing["data"]} == {"USD"}
    assert export.headers["content-type"].startswith("text/csv")
    groups = list(csv.DictReader(io.StringIO(export.text)))
    assert sum(int(g["cost_micros"]) for g in groups) == total
    assert sum(Decimal(g["cost"]) for g in groups) * 1_000_000 == total
    assert sum(int(g["input_tokens"]) for g in groups) == sum(r["input_tokens"] for r in rows)


def test_a_reload_changes_the_prices_of_later_rows_and_a_bad_one_changes_nothing(
    sim: SimProcess, tmp_path: Path
) -> None:
    def config(output: str) -> dict[str, Any]:
        price = {"input": "1", "output": output}
        return {
            "pools": {"sim": {"urls": [sim.url]}},
            "models": {MODEL: {"pool": "sim"}},
            "prices": {"currency": "EUR", "models": {MODEL: price}},
            "storage": {"url": f"sqlite:///{tmp_path}/ledger.db"},
            "accounting": {"ledger_interval": 0.1},
        }

    def ask(gateway: GatewayProcess, n: int) -> dict[str, Any]:
        client = openai.OpenAI(base_url=gateway.base_url, api_key="unused", max_retries=0)
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=8)  # type: ignore[arg-type]
        wait_for_rows(tmp_path / "ledger.db", n)
        return ledger_rows(tmp_path / "ledger.db")[-1]

    def reload(gateway: GatewayProcess, output: str) -> httpx.Response:
        assert gateway.config_path is not None
        running = yaml.safe_load(gateway.config_path.read_text())["server"]
        gateway.config_path.write_text(yaml.safe_dump({**config(output), "server": running}))
        return httpx.post(gateway.url + "/admin/routing/reload", timeout=10)

    with start_gateway(config("2"), tmp_path) as gateway:
        first = ask(gateway, 1)
        refused = reload(gateway, "-2")
        assert refused.status_code == 400 and "negative" in refused.text
        same = ask(gateway, 2)
        assert reload(gateway, "4").status_code == 200
        after = ask(gateway, 3)
    assert first["price_version"] == same["price_version"] != after["price_version"]
    for row, output_price in ((first, 2), (same, 2), (after, 4)):
        want = row["input_tokens"] * 1 + row["output_tokens"] * output_price  # micro-units
        assert row["cost_micros"] == want and row["price_version"].startswith("EUR-")
