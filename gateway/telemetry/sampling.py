"""Head sampling that a client cannot force: its ``traceparent`` sampled flag counts only from
trusted networks.

A W3C ``traceparent`` carries a sampled flag; the SDK's usual ``ParentBased`` sampler follows it,
so any internet client could have every one of its requests traced (a flood for the collector).
The server span marks the context of a caller outside ``tracing.trusted_parent_networks``; for
such a parent this sampler ignores the flag and decides by a random coin at the gateway's own
ratio (not by trace id, which the caller chose). The trace id is kept either way, so a sampled
request still joins the caller's trace.

    sampler = EdgeSampler(ratio=0.05)
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace.sampling import (
    Decision,
    Sampler,
    SamplingResult,
    TraceIdRatioBased,
)
from opentelemetry.trace import Link, SpanKind
from opentelemetry.util.types import Attributes

UNTRUSTED_PARENT = otel_context.create_key("pd-gateway-untrusted-parent")


def mark_untrusted(context: Context) -> Context:
    return otel_context.set_value(UNTRUSTED_PARENT, True, context)


class EdgeSampler(Sampler):
    def __init__(self, ratio: float, coin: random.Random | None = None) -> None:
        self.ratio = ratio
        self.root = TraceIdRatioBased(ratio)  # our own trace ids are random: fair to use
        self.coin = coin or random.Random()  # noqa: S311 (sampling, not secrecy)

    def should_sample(
        self,
        parent_context: Context | None,
        trace_id: int,
        name: str,
        kind: SpanKind | None = None,
        attributes: Attributes = None,
        links: Sequence[Link] | None = None,
        trace_state: trace.TraceState | None = None,
    ) -> SamplingResult:
        parent = trace.get_current_span(parent_context).get_span_context()
        if not parent.is_valid:
            return self.root.should_sample(parent_context, trace_id, name, kind, attributes, links)
        if parent.is_remote and otel_context.get_value(UNTRUSTED_PARENT, parent_context):
            sampled = self.coin.random() < self.ratio
        else:
            sampled = parent.trace_flags.sampled
        decision = Decision.RECORD_AND_SAMPLE if sampled else Decision.DROP
        return SamplingResult(decision, attributes if sampled else None, parent.trace_state)

    def get_description(self) -> str:
        return f"EdgeSampler{{ratio={self.ratio}, untrusted parents decided here}}"
