"""With real API keys: spans name the tenant and the key's public id, never the secret; the
token counter is labelled by tenant."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import openai

from tests.gatewayproc import start_gateway
from tests.integration.telemetry.conftest import EXPORT_ENV, MODEL, SERVER, telemetry_config
from tests.otlpreceiver import ReceivedSpan, Receiver
from tests.simproc import SimProcess

KEY_ENV = {"PD_GATEWAY_KEY_HASH_SECRET": "telemetry-test-hash-secret-0123456789"}


def admin_key(database_url: str) -> str:
    """An admin key made with the real CLI, as an operator would."""
    result = subprocess.run(
        [
            *(sys.executable, "-m", "gateway", "admin-keys", "create", "--name", "telemetry"),
            *("--print-secret-only", "--database-url", database_url),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, **KEY_ENV},
        timeout=120,
        check=True,
    )
    return result.stdout.strip()


def test_spans_carry_tenant_and_key_public_id_but_no_secret(
    sim: SimProcess, receiver: Receiver, tmp: Path
) -> None:
    database_url = f"sqlite:///{tmp}/keys.db"
    config = {
        **telemetry_config(sim.url, enabled=True, endpoint=receiver.http_url),
        "storage": {"url": database_url},
        "auth": {"enabled": True},
    }
    admin_secret = admin_key(database_url)
    with start_gateway(config, tmp, env={**EXPORT_ENV, **KEY_ENV}) as gateway:
        with httpx.Client(
            base_url=gateway.url + "/admin",
            headers={"Authorization": f"Bearer {admin_secret}"},
            timeout=10,
        ) as admin:
            admin.post("/tenants", json={"id": "acme", "allowed_models": [MODEL]})
            issued = admin.post("/tenants/acme/keys", json={"name": "tracing"}).json()
        with openai.OpenAI(base_url=gateway.base_url, api_key=issued["key"], max_retries=0) as sdk:
            sdk.completions.create(
                model=MODEL, prompt="hi", max_tokens=2, extra_headers={"x-request-id": "acme-1"}
            )
        admin_only = {"Authorization": f"Bearer {admin_secret}"}  # tenant series: not public
        metrics = httpx.get(gateway.url + "/metrics", headers=admin_only, timeout=5).text

    def is_server(span: ReceivedSpan) -> bool:
        return span.kind == SERVER and span.attributes.get("gateway.correlation_id") == "acme-1"

    spans = receiver.wait_for_spans(lambda spans: any(is_server(s) for s in spans))
    server = next(s for s in spans if is_server(s))
    trace = [s for s in spans if s.trace_id == server.trace_id]
    for span in (server, next(s for s in trace if s.name == f"text_completion {MODEL}")):
        assert span.attributes["gateway.tenant"] == "acme"
        assert span.attributes["gateway.key.public_id"] == issued["id"]
    everything = repr([(s.name, s.attributes) for s in trace])
    assert issued["key"] not in everything
    assert issued["key"].rsplit("-", 1)[-1] not in everything  # not even the secret part
    assert 'gateway_tokens_total{direction="output",model="sim-model",tenant="acme"} 2.0' in metrics
