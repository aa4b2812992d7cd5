"""Rate limits per key and per tenant: requests and tokens per minute, concurrency, daily tokens.

The maths (``maths``) runs in-process (``memory``) or as an atomic Redis script
(``redis_backend``); the admission stage (``admission``) reserves before forwarding and settles
to the upstream's usage afterwards.
"""
