"""The Open Responses compliance suite (vendored, tests/conformance/openresponses/SOURCE.md),
run by its own runner (bun) against a real gateway process on the simulator.

One suite run per module; each of its tests is one test here. The tests that need what the
gateway does not offer are expected failures with their reason (strict: one that starts passing
fails here until it is moved), and the suite's list of tests must be the one below, so a new
suite test is seen rather than silently passed over. Nothing is skipped: without bun (scripts/
test.sh installs it, tests/conformance/install-openresponses.sh) the run fails.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.gatewayproc import GatewayProcess
from tests.integration.conformance.conftest import MODEL

SUITE = Path(__file__).parents[2] / "conformance" / "openresponses"
BUN = SUITE / "node_modules" / ".bin" / "bun"

PASSING = (
    "basic-response",
    "assistant-phase",
    "response-output-phase-schema",
    "streaming-response",
    "system-prompt",
    "tool-calling",
    "image-input",
    "multi-turn",
)
_WEBSOCKET = (
    "WebSocket mode (an upgrade on /v1/responses) is not served by this gateway: every admitted "
    "request is one HTTP exchange, settled and recorded once (README, Open Responses)"
)
FAILING = {
    "websocket-response": _WEBSOCKET,
    "websocket-sequential-responses": _WEBSOCKET,
    "websocket-continuation": _WEBSOCKET,
    "websocket-reconnect-store-false-recovery": _WEBSOCKET,
    "websocket-previous-response-not-found": _WEBSOCKET,
    "websocket-failed-continuation-evicts-cache": _WEBSOCKET,
    "websocket-compact-new-chain": _WEBSOCKET,
    "compact-response": "POST /v1/responses/compact is not served by this gateway (README)",
    "compact-missing-model": "POST /v1/responses/compact is not served by this gateway (README)",
}


@pytest.fixture(scope="module")
def results(gateway: GatewayProcess) -> dict[str, dict[str, Any]]:
    assert BUN.exists(), f"{BUN} missing: run tests/conformance/install-openresponses.sh"
    command = [str(BUN), "run", "bin/compliance-test.ts", "-u", gateway.base_url]
    command += ["-k", "unused", "-m", MODEL, "--json"]
    done = subprocess.run(command, cwd=SUITE, capture_output=True, timeout=600, check=False)
    try:
        report = orjson.loads(done.stdout)
    except orjson.JSONDecodeError:
        raise AssertionError(f"the suite wrote no JSON report: {done.stderr[-4000:]!r}") from None
    listed = report["results"] if isinstance(report, dict) else report
    return {result["id"]: result for result in listed}


def test_the_suite_has_the_tests_this_file_knows(results: dict[str, dict[str, Any]]) -> None:
    assert sorted(results) == sorted((*PASSING, *FAILING))


@pytest.mark.parametrize("test_id", PASSING)
def test_the_suite_passes(results: dict[str, dict[str, Any]], test_id: str) -> None:
    result = results[test_id]
    assert result["status"] == "passed", result.get("errors")


@pytest.mark.parametrize("test_id", sorted(FAILING))
def test_what_the_gateway_does_not_offer_fails_for_its_reason(
    results: dict[str, dict[str, Any]], test_id: str, request: pytest.FixtureRequest
) -> None:
    request.applymarker(pytest.mark.xfail(reason=FAILING[test_id], strict=True))
    assert results[test_id]["status"] == "passed", results[test_id].get("errors")
