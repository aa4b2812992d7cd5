"""Load tests and benchmarks of pd-gateway; ``loadtests.pdload`` is the ``pd-loadtest`` tool."""
