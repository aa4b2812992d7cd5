"""Budget alerts' webhook against a real HTTP receiver (uvicorn on loopback, in a thread): posted
off the request's path, retried with backoff on failure, dropped and counted when the queue is
full; and the metric with its two bounded labels."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import uvicorn

from gateway.limits.alerts import BudgetAlerter, BudgetAlertsConfig
from gateway.limits.budgets import BudgetAlert
from gateway.metrics import GatewayMetrics

ALERT = BudgetAlert("tenant", "acme", 80, 8_000_000, 10_000_000, "month", 1_801_440_000.0)


class Receiver:
    """Answers ``fail_first`` posts with 503, then 204; keeps every body it was sent."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.times: list[float] = []
        self.fail_first = 0
        self.hold: threading.Event | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if self.hold is not None:
            await asyncio.to_thread(self.hold.wait, 10)
        self.bodies.append(orjson.loads(body))
        self.times.append(time.monotonic())
        status = 503 if len(self.bodies) <= self.fail_first else 204
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b""})


@pytest.fixture
def receiver() -> Iterator[tuple[str, Receiver]]:
    app = Receiver()
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the receiver never started"
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/hooks/budget?team=ops", app
    finally:
        if app.hold is not None:
            app.hold.set()
        server.should_exit = True
        thread.join(10)


def alerter(url: str | None, **config: Any) -> tuple[BudgetAlerter, GatewayMetrics]:
    metrics = GatewayMetrics()
    made = BudgetAlerter(BudgetAlertsConfig(webhook_url=url, **config), metrics)
    made.currency = lambda: "USD"
    return made, metrics


def sample(metrics: GatewayMetrics, name: str) -> str:
    return "\n".join(line for line in metrics.render().decode().splitlines() if name in line)


async def test_an_alert_is_posted_to_the_webhook_and_counted(
    receiver: tuple[str, Receiver],
) -> None:
    url, app = receiver
    made, metrics = alerter(url)
    made.fire(ALERT)  # synchronous: the settlement that decided it does not wait
    await made.drain()
    assert app.bodies == [
        {
            "object": "budget.alert",
            "scope": "tenant",
            "id": "acme",
            "threshold_percent": 80,
            "spent_micros": 8_000_000,
            "amount_micros": 10_000_000,
            "currency": "USD",
            "period": "month",
            "resets_at": "2027-02-01T00:00:00Z",
        }
    ]
    assert 'gateway_budget_alerts_total{scope="tenant",threshold="80"} 1.0' in sample(
        metrics, "gateway_budget_alerts_total"
    )
    assert 'result="sent"} 1.0' in sample(metrics, "gateway_budget_alert_webhooks_total")
    await made.aclose()


async def test_a_failing_webhook_is_retried_with_backoff_then_given_up(
    receiver: tuple[str, Receiver],
) -> None:
    url, app = receiver
    app.fail_first = 2
    made, metrics = alerter(url, retries=2, backoff_seconds=0.1)
    made.fire(ALERT)
    await made.drain()
    assert len(app.bodies) == 3  # two 503s, then delivered
    gaps = [b - a for a, b in zip(app.times, app.times[1:], strict=False)]
    assert gaps[0] >= 0.09 and gaps[1] >= 0.19  # 0.1 s, then doubled
    assert 'result="sent"} 1.0' in sample(metrics, "gateway_budget_alert_webhooks_total")
    app.fail_first = 10
    made.fire(ALERT)
    await made.drain()
    assert 'result="failed"} 1.0' in sample(metrics, "gateway_budget_alert_webhooks_total")
    await made.aclose()


async def test_a_full_queue_drops_and_counts_and_never_blocks(
    receiver: tuple[str, Receiver],
) -> None:
    url, app = receiver
    app.hold = threading.Event()  # the receiver sits on the first post
    made, metrics = alerter(url, queue_size=2, timeout_seconds=10)
    started = time.monotonic()
    for _ in range(6):
        made.fire(ALERT)
        await asyncio.sleep(0.05)  # the poster takes the first one off the queue
    assert time.monotonic() - started < 1.0
    # One in flight, two queued, three dropped.
    assert 'result="dropped"} 3.0' in sample(metrics, "gateway_budget_alert_webhooks_total")
    app.hold.set()
    await made.drain()
    assert len(app.bodies) == 3
    await made.aclose()


async def test_an_unreachable_webhook_fails_without_raising() -> None:
    made, metrics = alerter("http://127.0.0.1:9/never", retries=1, backoff_seconds=0.01)
    made.fire(ALERT)
    await made.drain()
    assert 'result="failed"} 1.0' in sample(metrics, "gateway_budget_alert_webhooks_total")
    await made.aclose()


def test_no_webhook_still_logs_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    made, metrics = alerter(None)
    made.fire(ALERT)
    assert "budget alert: tenant acme reached 80%" in caplog.text
    assert 'threshold="80"} 1.0' in sample(metrics, "gateway_budget_alerts_total")


def test_the_webhook_url_is_checked() -> None:
    with pytest.raises(ValueError, match="http"):
        BudgetAlertsConfig(webhook_url="ftp://example.com/x")
