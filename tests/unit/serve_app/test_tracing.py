"""Ray Serve's exporter hook in serve_app: OTLP from ``OTEL_*`` alone, importing no gateway code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from serve_app import tracing

REPO = Path(__file__).resolve().parents[3]


def test_protocol_from_the_traces_variable_then_the_general_one() -> None:
    assert tracing.otlp_protocol({}) == "http/protobuf"
    assert tracing.otlp_protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}) == "grpc"
    env = {
        "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
    }
    assert tracing.otlp_protocol(env) == "http/protobuf"
    with pytest.raises(ValueError, match="http/json"):
        tracing.otlp_protocol({"OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"})


@pytest.mark.parametrize(
    ("protocol", "exporter_type"), [("http/protobuf", HttpExporter), ("grpc", GrpcExporter)]
)
def test_the_hook_exports_to_the_endpoint_in_the_environment(
    monkeypatch: pytest.MonkeyPatch, protocol: str, exporter_type: type
) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector.example:4318")
    monkeypatch.delenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", raising=False)
    (processor,) = tracing.span_processors_from_env()
    try:
        assert isinstance(processor, BatchSpanProcessor)
        assert isinstance(processor._batch_processor._exporter, exporter_type)
    finally:
        processor.shutdown()


def test_the_hook_path_names_this_function() -> None:
    module, _, function = tracing.HOOK_PATH.partition(":")
    assert module == tracing.__name__ and callable(getattr(tracing, function))


def imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            roots |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_hook_stands_alone_so_pods_can_mount_it_as_one_file() -> None:
    assert imported_roots(REPO / "serve_app" / "tracing.py") <= {
        "__future__",
        "os",
        "collections",
        "typing",
        "opentelemetry",
    }


@pytest.mark.parametrize(
    ("package", "forbidden"), [("serve_app", "gateway"), ("gateway", "serve_app")]
)
def test_the_two_packages_never_import_each_other(package: str, forbidden: str) -> None:
    offenders = [
        str(p.relative_to(REPO))
        for p in sorted((REPO / package).rglob("*.py"))
        if forbidden in imported_roots(p)
    ]
    assert offenders == []
