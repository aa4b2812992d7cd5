"""Prove, from decode's own evidence, that a PD request's KV cache moved from prefill to decode.

Nothing is assumed from the answer being right: a decode engine that recomputed the prompt
answers just as well. The proof is in the engines' logs (Ray worker logs of the replicas):

- decode's NIXL scheduler logs ``num_external_tokens=N`` with ``do_remote_prefill: True`` for
  the request: N prompt tokens whose KV blocks it pulls instead of computing them;
- decode's scheduler logs ``Finished recving KV transfer for request <id>``;
- each side's NIXL agent logs ``Backend <NAME> was instantiated``: UCX locally, LIBFABRIC on EFA.

Requests are matched by their completion id (``chatcmpl-<request id>``), which vLLM carries into
the ids it logs, so the proof also works for a request that went through the gateway. The logs
needing DEBUG on decode: the local profile sets ``VLLM_LOGGING_LEVEL=DEBUG`` there. On EKS, copy
``/tmp/ray/session_latest/logs`` of the prefill and decode pods into one folder and pass ``--logs``.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from serve_app.kv_transfer_log import Transfer, parse_transfer_lines
from serve_app.link_report import LinkReport, link_report

_ACTOR_LINE = re.compile(r"^:actor_name:ServeReplica:(?P<app>[^:]+):(?P<role>[^:]+):", re.M)
_BACKEND = re.compile(r"Backend (\w+) was instantiated")
_EXTERNAL = re.compile(r"num_external_tokens=(\d+), kv_transfer_params=(\{.*)")
# Long enough to exceed vLLM's kv_recompute_threshold (64 tokens): below it decode recomputes
# the prompt and pulls nothing. About 130 tokens with the tiny model's tokenizer.
_FILLER = " ".join(["the quick brown fox jumps over the lazy dog"] * 6)


def unique_prompt(filler: str = _FILLER) -> str:
    """A prompt no engine has cached: a fresh nonce first, so prefix caching on decode cannot
    supply any of its blocks and every block has to come from prefill."""
    return f"{uuid.uuid4().hex} {filler}"


@dataclass
class KVEvidence:
    """What decode's log says about one request."""

    num_external_tokens: int = 0
    finished_recving: bool = False
    lines: list[str] = field(default_factory=list)

    @property
    def moved(self) -> bool:
        return self.num_external_tokens > 0 and self.finished_recving


def replica_logs(logs_dir: Path, app: str, role: str) -> list[Path]:
    """The Ray worker logs of one app's replicas of one role (``Decode``, ``Prefill``)."""
    found = []
    for path in sorted(logs_dir.glob("worker-*")):
        with path.open(errors="replace") as log:
            head = log.read(4096)
        match = _ACTOR_LINE.search(head)
        if match and match["app"] == app and match["role"] == role:
            found.append(path)
    return found


def backends_instantiated(paths: list[Path]) -> list[str]:
    names: set[str] = set()
    for path in paths:
        names.update(_BACKEND.findall(path.read_text(errors="replace")))
    return sorted(names)


def kv_evidence(decode_logs: list[Path], completion_id: str) -> KVEvidence:
    """Decode's evidence for the request whose response carried ``completion_id``."""
    evidence = KVEvidence()
    # vLLM's engine request id is the completion id, the prompt's index for text completions
    # (``cmpl-<id>-0``), then a suffix of 8 hex digits; anchoring on all of it keeps one id from
    # matching another that merely starts with it.
    this_request = re.compile(re.escape(completion_id) + r"(?:-\d+)?-[0-9a-f]{8}(?![0-9A-Za-z-])")
    for path in decode_logs:
        for line in path.read_text(errors="replace").splitlines():
            if not this_request.search(line):
                continue
            external = _EXTERNAL.search(line)
            if external and "'do_remote_prefill': True" in external[2]:
                evidence.num_external_tokens = max(evidence.num_external_tokens, int(external[1]))
                evidence.lines.append(line)
            elif "Finished recving KV transfer for request" in line:
                evidence.finished_recving = True
                evidence.lines.append(line)
    return evidence


def wait_for_kv_evidence(
    decode_logs: list[Path], completion_id: str, timeout: float = 30.0
) -> KVEvidence:
    """Poll decode's logs (flushed asynchronously) until the transfer shows or time is up."""
    deadline = time.monotonic() + timeout
    while True:
        evidence = kv_evidence(decode_logs, completion_id)
        if evidence.moved or time.monotonic() > deadline:
            return evidence
        time.sleep(0.5)


def _post_json(url: str, body: dict[str, object], headers: dict[str, str]) -> dict[str, object]:
    request = urllib.request.Request(  # noqa: S310 - a URL the operator gave
        url,
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json", **headers},
    )
    with urllib.request.urlopen(request, timeout=120) as response:  # noqa: S310
        result: dict[str, object] = json.loads(response.read())
        return result


def served_model(base_url: str) -> str:
    with urllib.request.urlopen(base_url + "/v1/models", timeout=30) as response:  # noqa: S310
        return str(json.loads(response.read())["data"][0]["id"])


def log_offsets(paths: list[Path]) -> dict[Path, int]:
    """How far each log has been written, so a request's own transfer lines can be told apart."""
    return {path: path.stat().st_size for path in paths}


def transfers_since(offsets: dict[Path, int]) -> list[Transfer]:
    transfers: list[Transfer] = []
    for path, offset in offsets.items():
        with path.open("rb") as log:
            log.seek(offset)
            transfers += parse_transfer_lines(log.read().decode(errors="replace").splitlines())
    return transfers


def pd_side_config(serve_config: dict[str, Any], app: str, side: str) -> dict[str, Any] | None:
    """One PD side's rendered ``LLMConfig`` (``prefill_config``/``decode_config``) of ``app``."""
    for application in serve_config.get("applications", []):
        if application.get("name") == app:
            found = application.get("args", {}).get(f"{side}_config")
            return found if isinstance(found, dict) else None
    return None


@dataclass
class DoctorReport:
    completion_id: str
    prompt_tokens: int
    evidence: KVEvidence
    prefill_backends: list[str]
    decode_backends: list[str]
    link: LinkReport | None = None

    def render(self) -> str:
        e = self.evidence
        lines = [
            f"request {self.completion_id}: {self.prompt_tokens} prompt tokens",
            f"KV moved prefill -> decode: {'YES' if e.moved else 'NO'} (decode pulled the KV "
            f"blocks of {e.num_external_tokens} of {self.prompt_tokens} prompt tokens; "
            f"transfer finished: {e.finished_recving})",
            f"NIXL backend instantiated: prefill {self.prefill_backends or ['none found']}, "
            f"decode {self.decode_backends or ['none found']}",
        ]
        lines += [f"  decode log: {line[:300]}" for line in e.lines]
        if self.link is not None:
            lines += self.link.render()
        return "\n".join(lines)


def run_doctor(
    base_url: str,
    logs_dir: Path,
    app: str = "pd",
    timeout: float = 60.0,
    serve_config: dict[str, Any] | None = None,
) -> DoctorReport:
    decode_logs = replica_logs(logs_dir, app, "Decode")
    prefill_logs = replica_logs(logs_dir, app, "Prefill")
    if not decode_logs:
        raise FileNotFoundError(f"no Decode replica log of app {app!r} in {logs_dir}")
    offsets = log_offsets(prefill_logs + decode_logs)
    body = {
        "model": served_model(base_url),
        "messages": [{"role": "user", "content": unique_prompt()}],
        "max_tokens": 4,
        "temperature": 0,
    }
    response = _post_json(
        base_url + "/v1/chat/completions", body, {"x-request-id": f"pd-doctor-{uuid.uuid4().hex}"}
    )
    completion_id = str(response["id"])
    usage = response.get("usage")
    prompt_tokens = int(usage.get("prompt_tokens", 0)) if isinstance(usage, dict) else 0
    evidence = wait_for_kv_evidence(decode_logs, completion_id, timeout)
    side = None if serve_config is None else pd_side_config(serve_config, app, "decode")
    return DoctorReport(
        completion_id=completion_id,
        prompt_tokens=prompt_tokens,
        evidence=evidence,
        prefill_backends=backends_instantiated(prefill_logs),
        decode_backends=backends_instantiated(decode_logs),
        link=None if side is None else link_report(side, transfers_since(offsets)),
    )


def doctor_command(
    state_dir: Path,
    base_url: str | None,
    logs: Path | None,
    timeout: float,
    serve_config: Path | None = None,
    strict: bool = False,
) -> int:
    """``pd-serve doctor``: 0 if the KV cache moved, 1 if not; with ``strict`` also 1 when the
    link report says SLOW (KV over TCP where a faster path exists)."""
    from serve_app.local import load_state

    state = load_state(state_dir.resolve())
    if (base_url is None or logs is None) and state is None:
        print(f"pd-serve doctor: no local stack in {state_dir}; pass --base-url and --logs")
        return 2
    if base_url is None:
        assert state is not None
        base_url = state.base_urls["pd"]
    if logs is None:
        assert state is not None and state.session_dir is not None
        logs = Path(state.session_dir) / "logs"
    if serve_config is None and state is not None:
        serve_config = Path(state.serve_config)
    rendered = None
    if serve_config is not None and serve_config.is_file():
        rendered = yaml.safe_load(serve_config.read_text())
    report = run_doctor(base_url.rstrip("/"), logs, timeout=timeout, serve_config=rendered)
    print(report.render())
    if not report.evidence.moved:
        return 1
    return 1 if strict and report.link is not None and report.link.slow else 0
