"""A real OTLP trace receiver for tests: HTTP ``POST /v1/traces`` (protobuf) and gRPC.

No collector is installable here, so the tests are the exporter's protocol peer: the request is
decoded as ``ExportTraceServiceRequest`` from ``opentelemetry-proto``, exactly what a collector
does. Both servers bind a free loopback port and run in threads of the test process::

    with start_receiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.http_url}   # or receiver.grpc_url
        ...
        spans = receiver.wait_for_spans(lambda spans: any(s.name == "decode" for s in spans))
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

TRACES_PATH = "/v1/traces"


@dataclass(frozen=True)
class ReceivedSpan:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    resource: dict[str, Any]
    status_code: int
    via: str

    @property
    def duration_s(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9

    @property
    def service(self) -> str | None:
        return self.resource.get("service.name")


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    if kind == "kvlist_value":
        return _attributes(value.kvlist_value.values)
    return None if kind is None else getattr(value, kind)


def _attributes(pairs: Any) -> dict[str, Any]:
    return {kv.key: _value(kv.value) for kv in pairs if isinstance(kv, KeyValue)}


class SpanStore:
    """Every span received, by either protocol, in arrival order."""

    def __init__(self) -> None:
        self._spans: list[ReceivedSpan] = []
        self._changed = threading.Condition()
        self.requests = 0

    def add(self, request: trace_service_pb2.ExportTraceServiceRequest, via: str) -> None:
        spans = [
            ReceivedSpan(
                trace_id=span.trace_id.hex(),
                span_id=span.span_id.hex(),
                parent_span_id=span.parent_span_id.hex(),
                name=span.name,
                kind=span.kind,
                start_ns=span.start_time_unix_nano,
                end_ns=span.end_time_unix_nano,
                attributes=_attributes(span.attributes),
                resource=_attributes(rs.resource.attributes),
                status_code=span.status.code,
                via=via,
            )
            for rs in request.resource_spans
            for ss in rs.scope_spans
            for span in ss.spans
        ]
        with self._changed:
            self.requests += 1
            self._spans.extend(spans)
            self._changed.notify_all()

    def spans(self) -> list[ReceivedSpan]:
        with self._changed:
            return list(self._spans)

    def wait_for_spans(
        self, done: Callable[[list[ReceivedSpan]], bool], timeout: float = 15.0
    ) -> list[ReceivedSpan]:
        """Block until ``done(spans)`` holds; raise TimeoutError with what arrived otherwise."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not done(list(self._spans)):
                left = deadline - time.monotonic()
                if left <= 0:
                    names = [(s.name, s.service) for s in self._spans]
                    raise TimeoutError(f"spans received so far: {names}")
                self._changed.wait(left)
            return list(self._spans)


class _HttpHandler(BaseHTTPRequestHandler):
    server: _HttpServer

    def do_POST(self) -> None:
        if self.path != TRACES_PATH:
            self.send_error(404)
            return
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        if self.headers.get("content-type") != "application/x-protobuf":
            self.send_error(415)
            return
        request = trace_service_pb2.ExportTraceServiceRequest()
        request.ParseFromString(body)
        self.server.store.add(request, "http")
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass


class _HttpServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, store: SpanStore, port: int) -> None:
        super().__init__(("127.0.0.1", port), _HttpHandler)
        self.store = store


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, store: SpanStore) -> None:
        self.store = store

    def Export(
        self, request: trace_service_pb2.ExportTraceServiceRequest, context: Any
    ) -> trace_service_pb2.ExportTraceServiceResponse:
        self.store.add(request, "grpc")
        return trace_service_pb2.ExportTraceServiceResponse()


class Receiver(SpanStore):
    """The running receiver: ``http_url`` and ``grpc_url`` are OTLP endpoint base URLs."""

    http_url: str
    grpc_url: str


@contextmanager
def start_receiver(http_port: int = 0) -> Iterator[Receiver]:
    """Both receivers on loopback; ``http_port`` 0 picks a free port (a fixed one serves
    processes started before the receiver, told the address in advance)."""
    receiver = Receiver()
    http_server = _HttpServer(receiver, http_port)
    http_thread = threading.Thread(target=http_server.serve_forever, daemon=True)
    http_thread.start()
    grpc_server = grpc.server(ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(receiver), grpc_server)
    grpc_port = grpc_server.add_insecure_port("127.0.0.1:0")
    grpc_server.start()
    receiver.http_url = f"http://127.0.0.1:{http_server.server_address[1]}"
    receiver.grpc_url = f"http://127.0.0.1:{grpc_port}"
    try:
        yield receiver
    finally:
        grpc_server.stop(grace=None).wait(5)
        http_server.shutdown()
        http_server.server_close()
        http_thread.join(5)


def main() -> None:
    """``python -m tests.otlpreceiver``: serve until SIGINT/SIGTERM (for benchmarks), announcing
    ``OTLP_LISTENING <http_url> <grpc_url>``; prints the number of spans received at the end."""
    import signal

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    with start_receiver() as receiver:
        print(f"OTLP_LISTENING {receiver.http_url} {receiver.grpc_url}", flush=True)
        stop.wait()
        print(f"OTLP_SPANS {len(receiver.spans())}", flush=True)


if __name__ == "__main__":
    main()
