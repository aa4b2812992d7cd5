"""The public view of the metrics leaves out every series labelled by tenant."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from gateway.metrics import GatewayMetrics


def labels_of(text: bytes) -> set[str]:
    families = text_string_to_metric_families(text.decode())
    return {label for family in families for s in family.samples for label in s.labels}


def test_the_public_view_has_no_tenant_label() -> None:
    metrics = GatewayMetrics()
    metrics.tokens.labels("acme-corp", "m", "output").inc(5)
    metrics.tenant_requests.labels("acme-corp", "2xx").inc()
    metrics.rate_limit_refusals.labels("acme-corp", "requests_per_minute").inc()
    metrics.requests.labels("m", "pd", "", "200").inc()
    whole, public = metrics.render(), metrics.render(tenants=False)
    assert b"acme-corp" in whole and "tenant" in labels_of(whole)
    assert b"acme-corp" not in public and "tenant" not in labels_of(public)
    assert b"gateway_requests_total" in public
