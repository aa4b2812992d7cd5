"""The ``pd-gateway`` command line: ``run``, ``check-config``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from starlette.types import ASGIApp

from gateway.config import (
    ConfigError,
    GatewayConfig,
    extras_problem,
    load_config,
    workers_problem,
)

CONFIG_ENV = "PD_GATEWAY_CONFIG"


def app_from_env() -> ASGIApp:
    """The uvicorn factory: each worker process loads the config named by $PD_GATEWAY_CONFIG."""
    from gateway.app import create_app
    from gateway.logs import configure_logging
    from gateway.server.memory import freeze_startup_objects

    path = Path(os.environ[CONFIG_ENV])
    config = load_config(path)
    configure_logging(config.server.log_level)
    app = create_app(config, config_path=path)
    freeze_startup_objects()  # a served process only: tests build many apps in one process
    return app  # its caps (gateway/server/overload.py) are composed in create_app


def _run(args: argparse.Namespace) -> int:
    from gateway.server.run import serve

    config = _load_or_report(args.config)
    if config is None:
        return 2
    server = config.server
    problem = extras_problem(config) or workers_problem(config, args.workers or server.workers)
    if problem:
        print(f"{args.config}: {problem}", file=sys.stderr)
        return 2
    os.environ[CONFIG_ENV] = os.path.abspath(args.config)
    return serve(
        "gateway.cli:app_from_env",
        server,
        host=args.host or server.host,
        port=server.port if args.port is None else args.port,
        workers=args.workers or server.workers,
        log_level=args.log_level or server.log_level,
    )


def _check_config(args: argparse.Namespace) -> int:
    config = _load_or_report(args.config)
    if config is None:
        return 1
    problem = extras_problem(config)
    if problem:
        print(f"{args.config}: {problem}", file=sys.stderr)
        return 1
    print(f"{args.config}: OK ({len(config.pools)} pools, {len(config.models)} models)")
    return 0


def _load_or_report(path: str) -> GatewayConfig | None:
    try:
        return load_config(path)
    except ConfigError as err:
        print(f"{path}: invalid configuration:\n{err}", file=sys.stderr)
        return None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pd-gateway", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="serve the gateway")
    run.add_argument("--config", required=True, help="the gateway's YAML config file")
    run.add_argument("--host", help="overrides server.host")
    run.add_argument("--port", type=int, help="overrides server.port (0: any free port)")
    run.add_argument("--workers", type=int, help="overrides server.workers")
    run.add_argument("--log-level", choices=["debug", "info", "warning", "error"])
    run.set_defaults(handler=_run)

    check = commands.add_parser("check-config", help="validate a config file and say what is wrong")
    check.add_argument("config")
    check.set_defaults(handler=_check_config)

    from gateway.admin.cli import add_commands  # tenants, keys, admin-keys, db

    add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.handler(args)
    return result
