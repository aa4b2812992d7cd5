"""The GPU profile's scripts, run dry: every command they run, parsed by that command's own parser.

A device session is scarce; a flag renamed in a CLI must fail here, not there
(scripts/gpu-profile-run.sh once called a flag that had been removed, and the session measured
nothing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[2]


def dry_run(
    script: str, *args: str, state: Path, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PD_GPU_DRY_RUN": "1",
        "PYTHON": sys.executable,
        "PD_GPU_STATE": str(state),
        **(extra_env or {}),
    }
    return subprocess.run(
        ["bash", script, *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream: the checked commands in the order they ran
        text=True,
        timeout=300,
    )


def checked(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stdout.splitlines() if line.startswith("checked: ")]


def test_the_profile_run_checks_every_command_it_runs(tmp_path: Path) -> None:
    result = dry_run("scripts/gpu-profile-run.sh", "all", str(tmp_path / "out"), state=tmp_path)
    assert result.returncode == 0, result.stdout
    commands = [" ".join(line.split()[1:3]) for line in checked(result)]
    assert commands == [
        "serve_app.cli local",  # local up
        "gateway tenants",
        "gateway keys",
        "gateway run",
        "serve_app.cli doctor",
        "loadtests.pdload --out",
        "serve_app.cli local",  # local down
    ]
    assert any("local up --config examples/serving/local-gpu.yaml" in c for c in checked(result))


def sweep_state(tmp_path: Path) -> Path:
    (tmp_path / "serve").mkdir()
    state = {
        "model": "llama-8b-shape",
        "tokenizer_file": "cl100k_base",
        "session_dir": str(tmp_path / "ray"),
        "base_urls": {
            "pd": "http://127.0.0.1:8000/pd",
            "colocated": "http://127.0.0.1:8000/colocated",
        },
    }
    (tmp_path / "serve" / "state.json").write_text(json.dumps(state))
    (tmp_path / "key").write_text("dry-run-key\n")
    deadline = tmp_path / "deadline"
    deadline.write_text("99999999999\n")
    return deadline


def sweep_reports(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stdout
    return [Path(line.split("--out ")[1].split()[0]).name for line in checked(result)]


def test_the_sweep_checks_every_pd_loadtest_it_runs(tmp_path: Path) -> None:
    deadline = sweep_state(tmp_path)
    out = tmp_path / "sweep"
    result = dry_run("loadtests/device/pd-sweep.sh", str(out), str(deadline), state=tmp_path)
    assert sweep_reports(result) == ["c128", "c2k", "c8k", "r2k", "mix", "mixslo"]
    assert (out / "done").is_file()


def test_the_sweep_runs_only_the_items_named(tmp_path: Path) -> None:
    # A device session that comes back for one item must not spend its time on the others.
    deadline = sweep_state(tmp_path)
    result = dry_run(
        "loadtests/device/pd-sweep.sh",
        str(tmp_path / "sweep"),
        str(deadline),
        state=tmp_path,
        extra_env={"PD_SWEEP_ITEMS": "c8k r2k"},
    )
    assert sweep_reports(result) == ["c8k", "r2k"]


def test_a_removed_flag_fails_the_check() -> None:
    # The flag the profile run once called after it had been removed.
    result = subprocess.run(
        [
            sys.executable,
            "scripts/argcheck.py",
            "-m",
            "serve_app.cli",
            "local",
            "up",
            "--serve-state",
            "x",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 2
    assert "unrecognized arguments: --serve-state" in result.stderr
