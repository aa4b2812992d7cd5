"""Money through the whole gateway: every ledger row priced once from the usage billed (cut
streams, failovers, cached prompt tokens), and the usage report and its CSV export summing to
the ledger's cost column to the micro-unit."""

from __future__ import annotations

import asyncio
import csv
import io
from pathlib import Path

from gateway.accounting.prices import PricesConfig, PriceTable, cost
from tests.seam.harness import running_gateway
from tests.seam.test_exit_paths import CHAT, chat
from tests.seam.upstream import Script

PRICES = {
    "currency": "USD",
    "models": {"m": {"input": "15", "cached_input": "7.5", "output": "60.000001"}},
}
PRICE = PriceTable.build(PricesConfig.model_validate(PRICES)).price("m", None)
SCRIPTS = {
    "default": Script(),
    "whole": Script(kind="whole"),
    "cached": Script(cached=7),
    "reset": Script(chunks=5, fail_after=2),
    "down@replica-a": Script(kind="connect_error"),
    "down": Script(),
}


async def test_every_row_costs_prices_times_its_tokens_and_the_reports_sum_to_it(
    tmp_path: Path,
) -> None:
    assert PRICE is not None
    async with running_gateway(tmp_path, SCRIPTS, prices=PRICES) as gw:
        for script in ("default", "whole", "cached", "reset", "down") * 4:
            await gw.call(CHAT, chat(script, stream=script != "whole"))
        ledger = gw.state.accounting.ledger
        assert ledger is not None
        async with asyncio.timeout(30):  # the ledger's writer flushes every 50 ms
            while ledger.written < 20:
                await asyncio.sleep(0.01)
        rows = gw.ledger_rows()
        assert len(rows) == 20  # one row per request
        for row in rows:
            assert row["cost_micros"] == cost(
                PRICE,
                input_tokens=row["input_tokens"],
                cached_tokens=row["cached_tokens"],
                output_tokens=row["output_tokens"],
            )
            assert row["price_version"] == PRICE.version
        cached = [r for r in rows if r["cached_tokens"]]
        fresh = [r for r in rows if not r["cached_tokens"] and r["output_tokens"] == 3]
        assert cached and fresh and cached[0]["cost_micros"] < fresh[0]["cost_micros"]
        total = sum(r["cost_micros"] for r in rows)
        report = (await gw.get("/v1/usage?group_by=model")).json()
        [group] = report["data"]
        assert group["cost_micros"] == total and group["currency"] == "USD"
        export = await gw.get("/v1/usage/export?group_by=model")
        assert export.status == 200 and export.content_type.startswith("text/csv")
        lines = list(csv.DictReader(io.StringIO(export.body.decode())))
        assert sum(int(line["cost_micros"]) for line in lines) == total
