"""The GPU profile's routing check through the gateway (scripts/gpu-profile-run.sh runs it).

    python scripts/gpu_routing_check.py GATEWAY_URL KEY MODEL STATE_JSON

A short prompt must go to colocated and a long one to PD (the gateway's ``x-gateway-pool``), and
decode's own log must show that it pulled the long prompt's KV from prefill. Exit 1 otherwise.
"""

from __future__ import annotations

import json
import sys
import urllib.request
from pathlib import Path

from serve_app.doctor import replica_logs, unique_prompt, wait_for_kv_evidence

EXPECTED = {"short": "colocated", "long": "pd"}


def main(gateway: str, key: str, model: str, state_file: Path) -> int:
    state = json.loads(state_file.read_text())
    logs = Path(state["session_dir"]) / "logs"
    prompts = {"short": "hello there", "long": unique_prompt(" ".join(["prefill builds"] * 80))}
    failed = 0
    for name, prompt in prompts.items():
        body = {
            "model": model,
            "messages": [{"role": "user", "content": prompt}],
            "max_tokens": 8,
            "temperature": 0,
        }
        request = urllib.request.Request(  # noqa: S310 - loopback, our own gateway
            f"{gateway}/v1/chat/completions",
            json.dumps(body).encode(),
            {"content-type": "application/json", "authorization": f"Bearer {key}"},
        )
        with urllib.request.urlopen(request, timeout=300) as response:  # noqa: S310
            pool, answer = response.headers["x-gateway-pool"], json.loads(response.read())
        tokens = answer["usage"]["prompt_tokens"]
        line = f"gateway model {model}, {name} prompt ({tokens} tokens): x-gateway-pool={pool}"
        if pool != EXPECTED[name]:
            line += f" (expected {EXPECTED[name]})"
            failed += 1
        if pool == "pd":
            evidence = wait_for_kv_evidence(replica_logs(logs, "pd", "Decode"), answer["id"], 60)
            line += (
                f"; decode pulled KV of {evidence.num_external_tokens} tokens, transfer "
                f"finished: {evidence.finished_recving}"
            )
            line += "".join(f"\n  decode log: {text[:240]}" for text in evidence.lines)
        print(line, flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], sys.argv[3], Path(sys.argv[4])))
