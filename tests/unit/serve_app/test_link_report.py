"""The doctor's link report on KV transfer lines recorded on the H200 (issue 40)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from serve_app.kv_transfer_log import parse_transfer_lines
from serve_app.link_report import gbps, link_report, side_link

DATA = Path(__file__).parent / "h200_kv_transfers"


def side(connector: str, tls: str | None, backends: tuple[str, ...] = ("UCX",)) -> dict[str, Any]:
    kv = {
        "kv_connector": connector,
        "kv_buffer_device": "cuda",
        "kv_connector_extra_config": {"backends": list(backends)},
    }
    env = {} if tls is None else {"UCX_TLS": tls}
    return {"engine_kwargs": {"kv_transfer_config": kv}, "runtime_env": {"env_vars": env}}


def recorded(name: str) -> list[Any]:
    # The lines as the engines' workers logged them (loadtests/device/pd-push.sh's grep).
    return parse_transfer_lines((DATA / name).read_text().splitlines())


def test_the_h200_pull_is_slow_at_tcps_rate() -> None:
    transfers = recorded("h200-pull-kv-transfers.txt")
    report = link_report(side("NixlConnector", "cuda_ipc,cuda_copy,tcp"), transfers)
    assert report.link == "same_host" and report.expected_gbps == 100.0
    assert report.over_tcp and report.slow
    assert "link verdict: SLOW" in report.render()[-1]


def test_the_h200_push_of_256_mib_beats_the_goal() -> None:
    transfers = recorded("h200-push-kv-transfers.txt")
    full = [t for t in transfers if t.bytes == 256 * 2**20]
    assert len(full) == 3 and max(gbps(t) for t in full) > 100
    report = link_report(side("NixlPushConnector", "cuda_ipc,cuda_copy,tcp"), transfers)
    assert not report.slow
    assert "link verdict: ok" in report.render()[-1]


def test_a_tcp_link_on_gpus_is_slow_by_name_even_with_no_transfer_seen() -> None:
    report = link_report(side("NixlConnector", "tcp"), [])
    assert report.link == "tcp" and report.slow
    assert any("no KV transfer line" in line for line in report.render())


@pytest.mark.parametrize(
    ("tls", "backends", "device", "link"),
    [
        (None, ("UCX",), "cuda", "same_host"),
        ("all", ("UCX",), "cuda", "same_host"),
        ("tcp,cuda_copy", ("UCX",), "cuda", "tcp"),
        (None, ("LIBFABRIC",), "cuda", "efa"),
        ("tcp", ("UCX",), "cpu", "host_memory"),
    ],
)
def test_the_link_asked_for_is_read_from_the_rendered_side(
    tls: str | None, backends: tuple[str, ...], device: str, link: str
) -> None:
    rendered = side("NixlConnector", tls, backends)
    kv = rendered["engine_kwargs"]["kv_transfer_config"]
    kv["kv_buffer_device"] = device
    assert side_link(kv, rendered["runtime_env"]["env_vars"]) == link


def test_host_memory_is_never_slow() -> None:
    rendered = side("NixlConnector", "tcp")
    rendered["engine_kwargs"]["kv_transfer_config"]["kv_buffer_device"] = "cpu"
    assert not link_report(rendered, recorded("h200-pull-kv-transfers.txt")).slow
