"""What of an upstream's response headers reaches the client."""

from __future__ import annotations

from gateway.upstream.client import relayable


def test_cookies_hop_by_hop_and_connection_named_headers_are_dropped() -> None:
    upstream = [
        (b"Content-Type", b"application/json"),
        (b"Set-Cookie", b"session=tenant-a; Path=/"),
        (b"set-cookie2", b"old=1"),
        (b"Connection", b"keep-alive, X-Hop"),
        (b"X-Hop", b"internal"),
        (b"Keep-Alive", b"timeout=5"),
        (b"Transfer-Encoding", b"chunked"),
        (b"x-vllm-something", b"kept"),
    ]
    assert relayable(upstream) == [
        (b"content-type", b"application/json"),
        (b"x-vllm-something", b"kept"),
    ]
