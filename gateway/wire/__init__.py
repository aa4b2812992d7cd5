"""The leaf of the gateway: OpenAI wire values that every stage passes along.

The operation and parsed request (``request``), the stream meter and what it saw (``meter``), the
usage and where it came from (``usage``), and the one outcome of a request (``outcome``). Nothing
here imports another package of the gateway but ``errors`` and ``asgi``.
"""
