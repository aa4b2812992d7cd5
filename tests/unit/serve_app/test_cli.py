"""``pd-serve`` render / check-config, and the local profile's port choices (no Ray started)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from serve_app.cli import main
from serve_app.loader import load_serving_config
from serve_app.local import base_urls, local_down, localise

EXAMPLES = Path(__file__).parents[3] / "examples" / "serving"


def test_check_config_accepts_the_examples(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", *map(str, sorted(EXAMPLES.glob("*.yaml")))]) == 0
    assert capsys.readouterr().out.count(": ok") == len(list(EXAMPLES.glob("*.yaml")))


def test_check_config_names_the_key_at_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.yaml"
    text = (EXAMPLES / "qwen3.5-9b-g6.yaml").read_text()
    broken.write_text(text.replace("backends: [LIBFABRIC]", "backend: [LIBFABRIC]", 1))
    assert main(["check-config", str(broken)]) == 1
    err = capsys.readouterr().err
    assert "pd.prefill.kv_transfer_config.kv_connector_extra_config.backend" in err


@pytest.mark.parametrize("flag", [[], ["--rayservice"]])
def test_render_prints_a_serve_config(flag: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(EXAMPLES / "qwen3.5-9b-g6.yaml"), *flag]) == 0
    document = yaml.safe_load(capsys.readouterr().out)
    assert [app["route_prefix"] for app in document["applications"]] == ["/pd", "/colocated"]


def test_render_of_an_invalid_config_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = tmp_path / "broken.yaml"
    broken.write_text("model: {id: x}\n")
    assert main(["render", str(broken)]) == 2
    assert "model.source: field required" in capsys.readouterr().err


def test_localise_pins_the_port_and_separates_nixl_ports() -> None:
    cfg = load_serving_config(EXAMPLES / "local-cpu.yaml", env={})
    local = localise(cfg, 18123)
    assert local.pd is not None
    prefill = local.pd.prefill.side_channel_port_base
    decode = local.pd.decode.side_channel_port_base
    assert prefill is not None and decode is not None and prefill != decode
    assert base_urls(local) == {
        "pd": "http://127.0.0.1:18123/pd",
        "colocated": "http://127.0.0.1:18123/colocated",
    }


def test_local_down_without_a_recorded_stack_stops_nothing(tmp_path: Path) -> None:
    assert local_down(tmp_path) is False
