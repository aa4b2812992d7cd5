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


def dry_run(script: str, *args: str, state: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PD_GPU_DRY_RUN": "1",
        "PYTHON": sys.executable,
        "PD_GPU_STATE": str(state),
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


def test_the_sweep_checks_every_pd_loadtest_it_runs(tmp_path: Path) -> None:
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
    out = tmp_path / "sweep"
    result = dry_run("loadtests/device/pd-sweep.sh", str(out), str(deadline), state=tmp_path)
    assert result.returncode == 0, result.stdout
    reports = [line.split("--out ")[1].split()[0] for line in checked(result)]
    assert [Path(r).name for r in reports] == ["c128", "c2k", "c8k", "r2k"]
    assert (out / "done").is_file()


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
