"""``pd-loadtest``: drive any OpenAI-compatible endpoint and report TTFT, ITL and goodput.

The pure parts (workloads, arrivals, SSE timing, statistics, knee finding) sit in their own
modules with no I/O, so they are unit-tested; ``client`` and ``runner`` do the network work,
``report`` and ``plots`` write the report folder, ``cli`` ties them together::

    pd-loadtest --target gw=http://127.0.0.1:8080/v1 --model tiny --rate 1,2,4 --requests 50
"""
