"""Routing: which variant, pool and replica serves a request, and what happens when one is sick.

- ``config``: the models' routing config (variants, pools by role, length policy, canary rollback,
  breakers, retries), strict and validated with the key's path in every error.
- ``router``: per model, the sticky weighted variant choice and the pool order (PD at or over
  ``pd_threshold_tokens`` prompt tokens, colocated under it, the other one as failover).
- ``dispatch``: replica choice, failover past unhealthy or saturated pools, retries on connect
  errors and 5xx before any byte reached the client, within a retry budget.
- ``pools`` / ``breaker``: replicas, active health checks, a circuit breaker per replica.
- ``canary``: rendezvous hashing of keys onto weighted variants; the sliding window and the
  rollback rule (error rate or p95 time to first token worse than the baseline's by a margin, or
  past an absolute ceiling).
- ``canary_judges`` / ``canary_judges_redis``: where the canary's judgement is made: each router
  alone (in-process limits), or one decision for the deployment from samples shared in the
  limits' Redis.
- ``load``: the load book, the one owner of every load figure, and the frozen snapshot per request
  that flow control and dispatch read; ``load_redis``: the same book shared by gateway replicas
  through Redis (``load_config``: the ``load_sharing`` section).
- ``scorers``: the replica scorers as named plugins (the registry, the views they read, how to
  add one); ``outcomes``: the per-replica outcome feed and each pool's book of it.
- ``service``: the route stage the handler calls; ``table`` builds it all from a config;
  ``reload``: SIGHUP and ``POST /admin/routing/reload``; ``admin``: ``/admin/routing``.

Every response says how it was served: ``x-gateway-pool``, ``x-gateway-variant`` and
``x-gateway-route-reason`` (``prompt_long``, ``prompt_short``, ``output_long``, ``hint``,
``single_pool``, ``canary_failover`` (a canary attempt failed, the baseline served),
``canary_rolled_back`` (the key's variant was rolled back), plus
``+failover_unhealthy|saturated|failed`` or ``+unavailable``), the same in
the access log (with ``prompt_tokens``), metrics and spans.
"""
