"""vLLM's gauges as vLLM (and Ray's metrics export) write them, and their freshness."""

from __future__ import annotations

import asyncio

from gateway.routing.gauges import EngineGauges, parse_engine_metrics, scrape_once

# As vLLM's own server writes them (prometheus_client text format).
VLLM = b"""# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny"} 3.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="tiny"} 7.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="tiny"} 0.42
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="tiny"} 1000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="tiny"} 250.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine="0",le="0.3",model_name="tiny"} 1.0
"""

# Through Ray's metrics export: ray_ before the name, Ray's labels beside vLLM's; two apps.
RAY = b"""# TYPE ray_vllm:num_requests_running gauge
ray_vllm:num_requests_running{Component="core_worker",ReplicaId="a",engine="0",model_name="pd"} 2.0
ray_vllm:num_requests_running{Component="core_worker",ReplicaId="b",engine="0",model_name="pd"} 1.0
ray_vllm:num_requests_running{Component="core_worker",ReplicaId="c",model_name="colo"} 9.0
# TYPE ray_vllm:kv_cache_usage_perc gauge
ray_vllm:kv_cache_usage_perc{ReplicaId="a",model_name="pd"} 0.1
ray_vllm:kv_cache_usage_perc{ReplicaId="b",model_name="pd"} 0.8
ray_vllm_num_requests_waiting{ReplicaId="a",model_name="pd"} 4.0
ray_vllm:num_requests_waiting{ReplicaId="c",model_name="colo"} NaN
ray_serve_num_http_requests_total{route="/pd"} 100.0
"""


def test_vllm_own_exposition() -> None:
    reading = parse_engine_metrics(VLLM, {})
    assert (reading.running, reading.waiting, reading.kv_usage) == (3.0, 7.0, 0.42)
    assert (reading.prefix_queries, reading.prefix_hits) == (1000.0, 250.0)
    assert reading.series == 5


def test_ray_export_summed_per_pool_by_its_labels() -> None:
    pd = parse_engine_metrics(RAY, {"model_name": "pd"})
    assert (pd.running, pd.waiting, pd.kv_usage) == (3.0, 4.0, 0.8)  # kv: the fullest engine
    colo = parse_engine_metrics(RAY, {"model_name": "colo"})
    assert (colo.running, colo.waiting) == (9.0, 0.0)  # NaN is no reading


def test_an_endpoint_without_vllm_series_reads_as_no_engine() -> None:
    reading = parse_engine_metrics(b"# nothing\nprocess_cpu_seconds_total 1.0\n", {})
    assert reading.series == 0
    gauges = EngineGauges(max_age=5, clock=lambda: 0.0)
    gauges.put(reading)
    assert gauges.fresh() is None


def test_freshness_bound_and_hit_rate_from_counter_deltas() -> None:
    now = [100.0]
    gauges = EngineGauges(max_age=2.0, clock=lambda: now[0])
    assert gauges.fresh() is None and gauges.age() is None
    gauges.put(parse_engine_metrics(VLLM, {}))
    assert gauges.fresh() is not None
    more = VLLM.replace(b"} 1000.0", b"} 1400.0").replace(b"} 250.0", b"} 550.0")
    now[0] = 101.0
    gauges.put(parse_engine_metrics(more, {}))
    assert gauges.hit_rate() == 0.75
    now[0] = 103.5
    assert gauges.fresh() is None  # stale: routing falls back to the gateway's own view
    assert gauges.age() == 2.5


def test_a_failed_scrape_never_raises_and_leaves_the_reading_to_go_stale() -> None:
    now = [0.0]
    gauges = EngineGauges(max_age=1.0, clock=lambda: now[0])

    async def good(url: str) -> bytes:
        return VLLM

    async def broken(url: str) -> bytes:
        raise ConnectionRefusedError(url)

    async def garbage(url: str) -> bytes:
        return b'vllm:num_requests_running{engine="0" 3\n'

    asyncio.run(scrape_once(gauges, ("http://a/metrics",), {}, good))
    assert gauges.fresh() is not None
    asyncio.run(scrape_once(gauges, ("http://a/metrics",), {}, broken))
    assert gauges.last_error == "ConnectionRefusedError"
    asyncio.run(scrape_once(gauges, ("http://a/metrics",), {}, garbage))
    assert gauges.last_error is not None
    now[0] = 5.0
    assert gauges.fresh() is None
