"""``pd-serve doctor --efa``: libfabric's efa provider, present and usable or not."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from serve_app.cli import main
from serve_app.efa import find_fi_info, parse_fi_info, probe_efa

# `fi_info -p efa` on a g6.8xlarge pod with one EFA device (libfabric 1.22's default output;
# one block per endpoint type).
FI_INFO_EFA = """\
provider: efa
    fabric: efa
    domain: rdmap0s26-rdm
    version: 122.0
    type: FI_EP_RDM
    protocol: FI_PROTO_EFA
provider: efa
    fabric: efa
    domain: rdmap0s26-dgrm
    version: 122.0
    type: FI_EP_DGRAM
    protocol: FI_PROTO_EFA
"""


def runner(stdout: str, stderr: str = "", code: int = 0) -> object:
    def run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
        assert list(argv[1:]) == ["-p", "efa"]
        return subprocess.CompletedProcess(list(argv), code, stdout, stderr)

    return run


def test_parse_fi_info_blocks() -> None:
    entries = parse_fi_info(FI_INFO_EFA)
    assert [(e["provider"], e["domain"], e["type"]) for e in entries] == [
        ("efa", "rdmap0s26-rdm", "FI_EP_RDM"),
        ("efa", "rdmap0s26-dgrm", "FI_EP_DGRAM"),
    ]


def test_usable_when_efa_entries_come_back() -> None:
    report = probe_efa("/opt/amazon/efa/bin/fi_info", run=runner(FI_INFO_EFA))  # type: ignore[arg-type]
    assert report.usable
    assert "USABLE (version 122.0, 2 device(s)" in report.render()


def test_not_usable_when_the_provider_finds_no_device() -> None:
    report = probe_efa(
        "/usr/bin/fi_info",
        run=runner("", "fi_getinfo: -61 (No data available)", code=1),  # type: ignore[arg-type]
    )
    assert not report.usable
    assert "NOT USABLE" in report.render() and "fi_getinfo: -61" in report.render()


def test_not_usable_when_only_other_providers_answer() -> None:
    tcp = FI_INFO_EFA.replace("provider: efa", "provider: tcp;ofi_rxm")
    assert not probe_efa("/usr/bin/fi_info", run=runner(tcp)).usable  # type: ignore[arg-type]


@pytest.mark.skipif(find_fi_info() is not None, reason="this machine has libfabric's fi_info")
def test_not_present_here_for_real(capsys: pytest.CaptureFixture[str]) -> None:
    # No libfabric on the CI machine: the real probe, through the real command line.
    assert main(["doctor", "--efa"]) == 1
    assert "NOT PRESENT" in capsys.readouterr().out


def test_a_real_fi_info_that_fails(tmp_path: Path) -> None:
    # A real process in fi_info's place that fails the way libfabric does without the provider.
    fake = tmp_path / "fi_info"
    fake.write_text(
        f"#!{sys.executable}\nimport sys\nsys.exit('fi_getinfo: -61 (No data available)')\n"
    )
    fake.chmod(0o755)
    report = probe_efa(str(fake))
    assert not report.usable and "exit 1, fi_getinfo: -61" in report.detail
