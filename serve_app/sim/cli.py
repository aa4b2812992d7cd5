"""Command line of the simulator: ``python -m serve_app.sim --port 0 --no-delay``.

Once it listens it prints exactly one line, ``SIM_LISTENING http://HOST:PORT``, so that a test
that asked for port 0 can read the port it got.
"""

from __future__ import annotations

import argparse
import logging
import socket
import sys
from collections.abc import Sequence

import uvicorn
import uvloop

from serve_app.sim.app import create_sim_app
from serve_app.sim.asgi import SimulatedAbort
from serve_app.sim.capacity import CapacitySettings
from serve_app.sim.settings import DEFAULT_MODEL, SimSettings

logger = logging.getLogger("serve_app.sim")


def build_parser() -> argparse.ArgumentParser:
    d = SimSettings()
    p = argparse.ArgumentParser(
        prog="python -m serve_app.sim",
        description=(
            "A SIMULATOR of vLLM's OpenAI server (no model, no engine): deterministic text on a "
            "prefill/decode timing model. It stands in for Ray Serve LLM only in gateway tests "
            "and overhead benchmarks. Steering headers: x-sim-ttft-ms, x-sim-itl-ms, "
            "x-sim-status, x-sim-fail-after, x-sim-hang. Test endpoints: GET /sim/requests, "
            "POST /sim/reset."
        ),
    )
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    p.add_argument(
        "--model",
        action="append",
        dest="models",
        help=f"served model name; repeat for several (default {DEFAULT_MODEL})",
    )
    p.add_argument("--max-model-len", type=int, default=d.max_model_len)
    p.add_argument("--ttft-base-ms", type=float, default=d.ttft_base_ms, help="prefill: fixed part")
    p.add_argument(
        "--ttft-per-token-ms", type=float, default=d.ttft_per_token_ms, help="prefill per token"
    )
    p.add_argument("--itl-ms", type=float, default=d.itl_ms, help="decode: interval per token")
    p.add_argument(
        "--itl-per-concurrent-ms",
        type=float,
        default=d.itl_per_concurrent_ms,
        help="decode: added per other concurrent decode",
    )
    p.add_argument("--no-delay", action="store_true", help="skip every sleep")
    p.add_argument(
        "--output-tokens", type=int, default=d.output_tokens, help="tokens when no max_tokens"
    )
    p.add_argument(
        "--max-records",
        type=int,
        default=d.max_records,
        help="request records kept for GET /sim/requests (the oldest are dropped)",
    )
    p.add_argument(
        "--fail-rate",
        type=float,
        default=d.fail_rate,
        help="answer this fraction of model requests with --fail-status (an even, fixed "
        "schedule; health checks still pass): a sick upstream",
    )
    p.add_argument("--fail-status", type=int, default=d.fail_status)
    p.add_argument("--log-level", default="warning")
    _add_capacity_arguments(p)
    return p


def _add_capacity_arguments(p: argparse.ArgumentParser) -> None:
    c = CapacitySettings()
    g = p.add_argument_group(
        "capacity model (off by default): one simulated engine with vLLM's running batch, "
        "waiting queue (FCFS), block prefix cache and /metrics; an engine step costs "
        "step + prefill tokens * prefill-per-token + decode seqs * decode-per-seq"
    )
    g.add_argument("--capacity", action="store_true", help="turn the capacity model on")
    g.add_argument("--max-num-seqs", type=int, default=c.max_num_seqs)
    g.add_argument("--max-num-batched-tokens", type=int, default=c.max_num_batched_tokens)
    g.add_argument("--block-size", type=int, default=c.block_size)
    g.add_argument(
        "--num-gpu-blocks-override", type=int, default=c.num_gpu_blocks, help="KV blocks"
    )
    g.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=c.enable_prefix_caching,
    )
    g.add_argument("--step-ms", type=float, default=c.step_ms)
    g.add_argument("--prefill-per-token-ms", type=float, default=c.prefill_per_token_ms)
    g.add_argument("--decode-per-seq-ms", type=float, default=c.decode_per_seq_ms)
    g.add_argument(
        "--kv-transfer-per-token-ms",
        type=float,
        default=c.kv_transfer_per_token_ms,
        help="a PD pool: the first token waits this much per prompt token after prefill",
    )
    g.add_argument(
        "--kv-transfer-parallel",
        type=int,
        default=c.kv_transfer_parallel,
        help="transfers the KV link carries at once (0: any number); the rest queue",
    )


def capacity_from_args(args: argparse.Namespace) -> CapacitySettings | None:
    if not args.capacity:
        return None
    return CapacitySettings(
        max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens,
        block_size=args.block_size,
        num_gpu_blocks=args.num_gpu_blocks_override,
        enable_prefix_caching=args.enable_prefix_caching,
        step_ms=args.step_ms,
        prefill_per_token_ms=args.prefill_per_token_ms,
        decode_per_seq_ms=args.decode_per_seq_ms,
        kv_transfer_per_token_ms=args.kv_transfer_per_token_ms,
        kv_transfer_parallel=args.kv_transfer_parallel,
    )


def settings_from_args(args: argparse.Namespace) -> SimSettings:
    return SimSettings(
        models=tuple(args.models or (DEFAULT_MODEL,)),
        max_model_len=args.max_model_len,
        ttft_base_ms=args.ttft_base_ms,
        ttft_per_token_ms=args.ttft_per_token_ms,
        itl_ms=args.itl_ms,
        itl_per_concurrent_ms=args.itl_per_concurrent_ms,
        no_delay=args.no_delay,
        output_tokens=args.output_tokens,
        max_records=args.max_records,
        fail_rate=args.fail_rate,
        fail_status=args.fail_status,
        capacity=capacity_from_args(args),
    )


class _HideSimulatedAborts(logging.Filter):
    """uvicorn logs an aborted response as an application error; this one is on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, SimulatedAbort)


class _AnnouncingServer(uvicorn.Server):
    """A uvicorn server that prints the ready line once it accepts connections."""

    def __init__(self, config: uvicorn.Config, sock: socket.socket, models: tuple[str, ...]):
        super().__init__(config)
        self._sock = sock
        self._models = models

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if not self.started:
            return
        host, port = self._sock.getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        print(f"SIM_LISTENING http://{shown}:{port}", flush=True)
        logger.warning("simulator (not a real engine) serving %s on port %d", self._models, port)


async def serve(settings: SimSettings, host: str, port: int, log_level: str) -> None:
    """Serve until stopped; announce the bound address once the server accepts connections."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    config = uvicorn.Config(
        create_sim_app(settings),
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level=log_level,
        timeout_keep_alive=30,
        timeout_graceful_shutdown=1,
        backlog=4096,
    )
    logging.getLogger("uvicorn.error").addFilter(_HideSimulatedAborts())
    await _AnnouncingServer(config, sock, settings.models).serve(sockets=[sock])


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        settings = settings_from_args(args)
    except ValueError as e:
        parser.error(str(e))
    uvloop.run(serve(settings, args.host, args.port, args.log_level))
    sys.stdout.flush()
