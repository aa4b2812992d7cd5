"""Reading decode's evidence from Ray worker logs (lines as vLLM 0.32 and NIXL 1.3 write them)."""

from __future__ import annotations

from pathlib import Path

from serve_app.doctor import backends_instantiated, kv_evidence, replica_logs, unique_prompt

REQUEST = "chatcmpl-pd-doctor-7bf5"
DECODE_LOG = f"""\
:job_id:01000000
:actor_name:ServeReplica:pd:Decode:tiny
2026-11-29 09:12:05 NIXL INFO    _api.py:390 Backend UCX was instantiated
(EngineCore pid=1) DEBUG [nixl/pull_scheduler.py:112] NIXLConnector update_state_after_alloc: \
num_external_tokens=165, kv_transfer_params={{'do_remote_prefill': True, 'do_remote_decode': \
False, 'remote_block_ids': [[1, 4]], 'remote_request_id': '{REQUEST}-8d4c1a26'}}
(Worker pid=2) DEBUG [nixl/base_worker.py:2892] Rank 0, get_finished: 0 requests done sending \
and 1 requests done recving (0 failed)
(EngineCore pid=1) DEBUG [v1/core/sched/scheduler.py:3223] Finished recving KV transfer for \
request {REQUEST}-848c1913
(EngineCore pid=1) DEBUG [nixl/pull_scheduler.py:112] NIXLConnector update_state_after_alloc: \
num_external_tokens=0, kv_transfer_params={{'do_remote_prefill': False, 'remote_request_id': \
'{REQUEST}-8d4c1a26'}}
"""
PREFILL_LOG = """\
:job_id:01000000
:actor_name:ServeReplica:pd:Prefill:tiny
2026-11-29 09:12:04 NIXL INFO    _api.py:390 Backend LIBFABRIC was instantiated
"""
OTHER_LOG = ":job_id:01000000\n:actor_name:ServeReplica:colocated:LLMServer:tiny\n"


def write_logs(folder: Path) -> None:
    (folder / "worker-aa-01000000-10.out").write_text(DECODE_LOG)
    (folder / "worker-bb-01000000-11.out").write_text(PREFILL_LOG)
    (folder / "worker-cc-01000000-12.out").write_text(OTHER_LOG)
    (folder / "raylet.out").write_text(DECODE_LOG)  # not a replica's log: ignored


def test_replica_logs_are_found_by_app_and_role(tmp_path: Path) -> None:
    write_logs(tmp_path)
    assert [p.name for p in replica_logs(tmp_path, "pd", "Decode")] == ["worker-aa-01000000-10.out"]
    assert [p.name for p in replica_logs(tmp_path, "pd", "Prefill")] == [
        "worker-bb-01000000-11.out"
    ]
    assert replica_logs(tmp_path, "other", "Decode") == []


def test_backends_are_read_per_side(tmp_path: Path) -> None:
    write_logs(tmp_path)
    assert backends_instantiated(replica_logs(tmp_path, "pd", "Prefill")) == ["LIBFABRIC"]
    assert backends_instantiated(replica_logs(tmp_path, "pd", "Decode")) == ["UCX"]


def test_a_remote_prefill_with_a_finished_pull_is_a_move(tmp_path: Path) -> None:
    write_logs(tmp_path)
    evidence = kv_evidence(replica_logs(tmp_path, "pd", "Decode"), REQUEST)
    assert evidence.moved
    assert evidence.num_external_tokens == 165
    assert len(evidence.lines) == 2


def test_another_requests_evidence_does_not_count(tmp_path: Path) -> None:
    write_logs(tmp_path)
    # A prefix of the logged id is a different request.
    evidence = kv_evidence(replica_logs(tmp_path, "pd", "Decode"), "chatcmpl-pd-doctor")
    assert not evidence.moved
    assert evidence.lines == []


def test_external_tokens_without_a_finished_pull_is_no_move(tmp_path: Path) -> None:
    log = tmp_path / "worker-aa-01000000-10.out"
    log.write_text("\n".join(x for x in DECODE_LOG.splitlines() if "Finished" not in x))
    evidence = kv_evidence([log], REQUEST)
    assert evidence.num_external_tokens == 165
    assert not evidence.moved


def test_prompts_never_repeat_so_no_prefix_cache_hit_hides_the_pull() -> None:
    first, second = unique_prompt(), unique_prompt()
    assert first != second and first[:32] != second[:32]


def test_a_text_completions_engine_id_carries_the_prompt_index(tmp_path: Path) -> None:
    log = tmp_path / "worker-aa-01000000-10.out"
    log.write_text(
        "(EngineCore pid=1) DEBUG [nixl/pull_scheduler.py:112] NIXLConnector "
        "update_state_after_alloc: num_external_tokens=140, kv_transfer_params="
        "{'do_remote_prefill': True, 'remote_request_id': 'cmpl-8d2e-0-b2b9ca7a'}\n"
        "(EngineCore pid=1) DEBUG [v1/core/sched/scheduler.py:3223] Finished recving KV "
        "transfer for request cmpl-8d2e-0-b2b9ca7a\n"
    )
    assert kv_evidence([log], "cmpl-8d2e").moved
    assert not kv_evidence([log], "cmpl-8d2").moved
