"""Budget alerts: a log line, a metric and an optional webhook, never on a request's path.

Which threshold fired is decided where the cost is added (the backend's settlement: in Redis's
script across replicas), so each fires once per period per budget. What happens then is here::

    limits:
      budget_alerts:
        webhook_url: https://hooks.example.com/budget   # optional
        timeout_seconds: 5
        retries: 3              # after the first attempt
        backoff_seconds: 1      # doubled after each failed attempt
        queue_size: 1000        # alerts waiting to be posted; beyond it they are dropped, counted

``BudgetAlerter.fire`` is synchronous and never blocks: it logs, counts
``gateway_budget_alerts_total{scope,threshold}`` (both bounded: two scopes, thresholds 1-100) and
puts the alert on a bounded queue that one background task posts from.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Callable
from urllib.parse import urlsplit

import orjson
from pydantic import Field, field_validator

from configkit import StrictModel
from gateway.limits.budgets import BudgetAlert, iso
from gateway.metrics import GatewayMetrics

logger = logging.getLogger(__name__)


class BudgetAlertsConfig(StrictModel):
    webhook_url: str | None = None
    """POSTed one JSON alert each (http or https); none: log and metric only."""
    timeout_seconds: float = Field(5.0, gt=0, le=60)
    retries: int = Field(3, ge=0, le=10)
    backoff_seconds: float = Field(1.0, ge=0, le=60)
    queue_size: int = Field(1000, ge=1, le=100_000)

    @field_validator("webhook_url")
    @classmethod
    def _url(cls, url: str | None) -> str | None:
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"webhook_url must be an http(s) URL, got {url[:80]!r}")
        return url


def alert_body(alert: BudgetAlert, currency: str | None) -> dict[str, object]:
    return {
        "object": "budget.alert",
        "scope": alert.scope,
        "id": alert.subject_id,
        "threshold_percent": alert.threshold,
        "spent_micros": alert.spent,
        "amount_micros": alert.amount,
        "currency": currency,
        "period": alert.period,
        "resets_at": iso(alert.resets_at),
    }


class BudgetAlerter:
    """``alerter.fire(alert)`` from a settlement; ``await alerter.aclose()`` at shutdown."""

    def __init__(self, config: BudgetAlertsConfig, metrics: GatewayMetrics) -> None:
        self.config = config
        self.currency: Callable[[], str | None] = lambda: None
        """The prices' currency now, named in the webhook's body (the accounting stage's)."""
        self.fired = metrics.counter(
            "gateway_budget_alerts", "Budget alert thresholds crossed", ["scope", "threshold"]
        )
        self.webhook = metrics.counter(
            "gateway_budget_alert_webhooks",
            "Budget alerts the webhook was given, by result (sent, failed, dropped)",
            ["result"],
        )
        self._queue: asyncio.Queue[BudgetAlert] = asyncio.Queue(config.queue_size)
        self._task: asyncio.Task[None] | None = None

    def fire(self, alert: BudgetAlert) -> None:
        logger.warning(
            "budget alert: %s %s reached %d%% (%d of %d micro-units, %s budget)",
            alert.scope,
            alert.subject_id,
            alert.threshold,
            alert.spent,
            alert.amount,
            alert.period,
        )
        self.fired.labels(alert.scope, str(alert.threshold)).inc()
        if self.config.webhook_url is None:
            return
        try:
            self._queue.put_nowait(alert)
        except asyncio.QueueFull:
            self.webhook.labels("dropped").inc()
            return
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._post_queued())

    async def _post_queued(self) -> None:
        while True:
            alert = await self._queue.get()
            try:
                await self._deliver(alert)
            finally:
                self._queue.task_done()

    async def _deliver(self, alert: BudgetAlert) -> None:
        assert self.config.webhook_url is not None
        body = orjson.dumps(alert_body(alert, self.currency()))
        delay = self.config.backoff_seconds
        for attempt in range(self.config.retries + 1):
            try:
                status = await asyncio.wait_for(
                    post_json(self.config.webhook_url, body), self.config.timeout_seconds
                )
                if 200 <= status < 300:
                    self.webhook.labels("sent").inc()
                    return
                problem = f"status {status}"
            except (OSError, TimeoutError, ValueError) as err:
                problem = type(err).__name__
            if attempt < self.config.retries:
                await asyncio.sleep(delay)
                delay *= 2
        self.webhook.labels("failed").inc()
        logger.error("budget alert webhook failed after %d attempts: %s", attempt + 1, problem)

    async def drain(self) -> None:
        """Wait for the queued alerts to be posted (or given up on)."""
        if self._task is not None:
            await self._queue.join()

    async def aclose(self) -> None:
        """Post what is queued, for at most one webhook timeout; the rest is dropped."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.config.timeout_seconds):
                await self.drain()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None


async def post_json(url: str, body: bytes) -> int:
    """One HTTP/1.1 POST on its own connection; the response's status (its body is not read).

    Alerts are rare: a connection each keeps this small and leaves no pool to manage."""
    parts = urlsplit(url)
    secure = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if secure else 80)
    context = ssl.create_default_context() if secure else None
    reader, writer = await asyncio.open_connection(host, port, ssl=context)
    try:
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        authority = parts.netloc.rpartition("@")[2]
        head = (
            f"POST {path} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        )
        writer.write(head.encode("latin-1") + body)
        await writer.drain()
        status_line = await reader.readline()
        fields = status_line.split()
        if len(fields) < 2 or not fields[1].isdigit():
            raise ValueError("not an HTTP response")
        return int(fields[1])
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
