"""End to end on the local CPU stack: one trace holds the gateway's spans and Ray Serve's spans
for the ingress, the decode replica and the prefill replica.

Ray reads its tracing settings when its processes start, so this module adds them to the stack's
environment (``STACK_ENV``) at collection, before the session's stack is launched: Ray Serve then
exports through serve_app's hook (``serve_app.tracing``) to a receiver
whose port is chosen now and which this module starts before its test runs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import openai
import pytest

from serve_app.doctor import unique_prompt
from serve_app.local import LocalState
from serve_app.tracing import HOOK_PATH
from tests.e2e.conftest import STACK_TIMEOUT, gateway_config
from tests.e2e.stack import REUSE_ENV, STACK_ENV
from tests.gatewayproc import GatewayProcess, free_port, start_gateway
from tests.otlpreceiver import ReceivedSpan, Receiver, start_receiver

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(STACK_TIMEOUT + 300)]

RAY_SERVICE = "ray-serve-local"
# Ray Serve's exporter hook (serve_app.tracing), configured by the OTEL_* below.
EXPORTER = HOOK_PATH
RECEIVER_PORT = free_port()
STACK_ENV.update(
    {
        "RAY_SERVE_TRACING_EXPORTER_IMPORT_PATH": EXPORTER,
        "RAY_SERVE_TRACING_SAMPLING_RATIO": "1",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{RECEIVER_PORT}/v1/traces",
        "OTEL_SERVICE_NAME": RAY_SERVICE,
        "OTEL_BSP_SCHEDULE_DELAY": "200",
    }
)


@pytest.fixture(scope="module")
def receiver() -> Iterator[Receiver]:
    with start_receiver(http_port=RECEIVER_PORT) as running:
        yield running


@pytest.fixture(scope="module")
def traced_gateway(
    local_stack: LocalState, receiver: Receiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    config = {
        **gateway_config(local_stack),
        "tracing": {"enabled": True, "endpoint": receiver.http_url, "sampling_ratio": 1.0},
    }
    env = {"OTEL_BSP_SCHEDULE_DELAY": "100"}
    with start_gateway(config, tmp_path_factory.mktemp("traced-gw"), env=env) as gateway:
        yield gateway


def deployment_span(spans: list[ReceivedSpan], part: str) -> ReceivedSpan | None:
    """Ray's span for a request handled by a replica of the deployment named like ``part``."""
    return next(
        (
            s
            for s in spans
            if s.service == RAY_SERVICE
            and s.name.startswith("replica_handle_request")
            and part in str(s.attributes.get("deployment", "")).lower()
        ),
        None,
    )


def test_one_trace_from_the_gateway_through_ingress_decode_and_prefill(
    local_stack: LocalState, traced_gateway: GatewayProcess, receiver: Receiver
) -> None:
    if REUSE_ENV in os.environ:
        pytest.skip("a reused stack was started without Ray Serve's tracing settings")
    request_id = "e2e-traced-" + os.urandom(4).hex()
    with openai.OpenAI(
        base_url=traced_gateway.base_url, api_key="unused", timeout=120, max_retries=0
    ) as client:
        chunks = list(
            client.chat.completions.create(
                model=f"{local_stack.model}-pd",
                messages=[{"role": "user", "content": unique_prompt()}],
                max_tokens=8,
                temperature=0,
                stream=True,
                stream_options={"include_usage": True},
                extra_headers={"x-request-id": request_id},
            )
        )
    usage = chunks[-1].usage
    assert usage is not None and usage.completion_tokens > 0

    def joined(spans: list[ReceivedSpan]) -> bool:
        server = [s for s in spans if s.attributes.get("gateway.correlation_id") == request_id]
        if not server:
            return False
        trace = [s for s in spans if s.trace_id == server[0].trace_id]
        names = {s.name for s in trace}
        ids = {s.span_id for s in trace}
        # Ray's replicas export in batches of their own: wait until every Ray span's parent has
        # arrived too, or a late parent reads as a broken trace.
        parents_in = all(s.parent_span_id in ids for s in trace if s.service == RAY_SERVICE)
        return (
            {"prefill", "decode"} <= names
            and deployment_span(trace, "decode") is not None
            and deployment_span(trace, "prefill") is not None
            and deployment_span(trace, "ingress") is not None
            and parents_in
        )

    spans = receiver.wait_for_spans(joined, timeout=90)
    server = next(s for s in spans if s.attributes.get("gateway.correlation_id") == request_id)
    trace = [s for s in spans if s.trace_id == server.trace_id]
    by_id = {s.span_id: s for s in trace}
    client_span = next(s for s in trace if s.name == f"chat {local_stack.model}-pd")
    ingress = deployment_span(trace, "ingress")
    decode_replica = deployment_span(trace, "decode")
    prefill_replica = deployment_span(trace, "prefill")
    assert ingress and decode_replica and prefill_replica

    # Ray's first span continues the traceparent the gateway's attempt sent.
    ray_roots = [s for s in trace if s.service == RAY_SERVICE and s.parent_span_id not in by_id]
    assert not ray_roots, [s.name for s in ray_roots]
    assert any(
        s.service == RAY_SERVICE and s.parent_span_id == client_span.span_id for s in trace
    ), "no Ray span under the gateway's client span"

    def ancestors(span: ReceivedSpan) -> list[str]:
        chain = []
        while span.parent_span_id in by_id:
            span = by_id[span.parent_span_id]
            chain.append(span.span_id)
        return chain

    # gateway -> ingress -> decode -> prefill, each below the one before.
    assert client_span.span_id in ancestors(ingress)
    assert ingress.span_id in ancestors(decode_replica)
    assert decode_replica.span_id in ancestors(prefill_replica)
    # The prefill replica's work happens within the gateway's prefill phase (same clock).
    gateway_prefill = next(s for s in trace if s.name == "prefill")
    assert gateway_prefill.start_ns <= prefill_replica.start_ns
    assert prefill_replica.end_ns <= gateway_prefill.end_ns + 50_000_000
