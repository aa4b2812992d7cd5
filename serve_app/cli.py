"""``pd-serve``: render and check serving configs, run the local CPU stack, prove the KV transfer.

pd-serve check-config examples/serving/qwen3.5-9b-g6.yaml
pd-serve render examples/serving/qwen3.5-9b-g6.yaml [--rayservice]
pd-serve local up [--gpu | --config FILE] [--state-dir DIR] [--port N]
pd-serve doctor [--state-dir DIR] | pd-serve doctor --efa
pd-serve local down [--state-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import yaml

from serve_app.kv_link import config_notices
from serve_app.loader import ConfigError, load_serving_config
from serve_app.local import LocalStackError

DEFAULT_STATE_DIR = Path("/tmp/pd-serve")  # noqa: S108 - matches examples/serving/local-cpu.yaml


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pd-serve", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)

    check = commands.add_parser("check-config", help="validate serving config files")
    check.add_argument("configs", nargs="+", type=Path)

    render = commands.add_parser("render", help="print the Ray Serve config for a serving config")
    render.add_argument("config", type=Path)
    render.add_argument(
        "--rayservice", action="store_true", help="print a RayService spec.serveConfigV2 instead"
    )

    local = commands.add_parser("local", help="the local CPU stack").add_subparsers(
        dest="local_command", required=True
    )
    up = local.add_parser("up", help="start Ray on loopback and deploy both apps")
    source = up.add_mutually_exclusive_group()
    source.add_argument("--config", type=Path, default=None, help="default: the local-cpu example")
    source.add_argument(
        "--gpu",
        action="store_true",
        help="the local-gpu example: every engine on this machine's GPUs (shared when too few)",
    )
    up.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    up.add_argument("--port", type=int, default=None, help="Serve HTTP port (0: a free one)")
    up.add_argument("--timeout", type=float, default=600.0)
    up.add_argument(
        "--gateway-port", type=int, default=8080, help="the port in the gateway.yaml written"
    )
    up.add_argument("--quiet", action="store_true", help="no progress lines, only the summary")
    down = local.add_parser("down", help="stop what local up started")
    down.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)

    doctor = commands.add_parser("doctor", help="prove the KV cache moves from prefill to decode")
    doctor.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    doctor.add_argument("--base-url", help="the PD app's base URL (default: from the state dir)")
    doctor.add_argument(
        "--logs",
        type=Path,
        help="folder of the engines' logs (default: the local Ray session's logs)",
    )
    doctor.add_argument("--timeout", type=float, default=60.0)
    doctor.add_argument(
        "--serve-config",
        type=Path,
        help="the rendered Serve config (default: the local stack's), for the link's report",
    )
    doctor.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 also when the link report says SLOW (KV over TCP where a faster path exists)",
    )
    doctor.add_argument(
        "--efa",
        action="store_true",
        help="instead: is libfabric's efa provider present and usable here (fi_info -p efa)",
    )
    return parser


def _check_config(configs: Sequence[Path]) -> int:
    failed = 0
    for path in configs:
        try:
            cfg = load_serving_config(path)
        except ConfigError as err:
            failed += 1
            print(f"{path}: invalid\n{err}", file=sys.stderr)
        else:
            print(f"{path}: ok")
            for notice in config_notices(cfg):
                print(f"{path}: note: {notice}")
    return 1 if failed else 0


def _render(path: Path, rayservice: bool) -> int:
    from serve_app.render import render_rayservice_serve_config_v2, render_serve_config_yaml

    cfg = load_serving_config(path)
    print(render_rayservice_serve_config_v2(cfg) if rayservice else render_serve_config_yaml(cfg))
    return 0


def _local_up(args: argparse.Namespace) -> int:
    from serve_app.local import DEFAULT_CONFIG, DEFAULT_GPU_CONFIG, local_up
    from serve_app.progress import Progress

    state = local_up(
        args.config or (DEFAULT_GPU_CONFIG if args.gpu else DEFAULT_CONFIG),
        args.state_dir,
        port=args.port,
        timeout=args.timeout,
        progress=Progress(None if args.quiet else sys.stdout),
        gateway_port=args.gateway_port,
    )
    print(f"pd-serve local: ready in {state.seconds_to_ready} s (Ray driver pid {state.driver[0]})")
    print(f"  model:        {state.model}")
    for name, url in state.base_urls.items():
        print(f"  {name + ':':<13} {url}   (OpenAI: {url}/v1/chat/completions, {url}/v1/models)")
    print(f"  state:        {args.state_dir.resolve() / 'state.json'}")
    gateway_yaml = args.state_dir.resolve() / "gateway.yaml"
    models = ", ".join(yaml.safe_load(gateway_yaml.read_text())["models"])
    print(f"  gateway:      pd-gateway run --config {gateway_yaml}   (models {models})")
    print(f"  stop with:    pd-serve local down --state-dir {args.state_dir}")
    return 0


def _local_down(args: argparse.Namespace) -> int:
    from serve_app.local import local_down

    stopped = local_down(args.state_dir)
    print(
        "pd-serve local: stopped"
        if stopped
        else f"pd-serve local: nothing recorded in {args.state_dir}"
    )
    return 0


def _doctor(args: argparse.Namespace) -> int:
    if args.efa:
        from serve_app.efa import probe_efa

        report = probe_efa()
        print(report.render())
        return 0 if report.usable else 1
    from serve_app.doctor import doctor_command

    return doctor_command(
        args.state_dir, args.base_url, args.logs, args.timeout, args.serve_config, args.strict
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "check-config":
            return _check_config(args.configs)
        if args.command == "render":
            return _render(args.config, args.rayservice)
        if args.command == "doctor":
            return _doctor(args)
        if args.local_command == "up":
            return _local_up(args)
        return _local_down(args)
    except ConfigError as err:
        print(f"invalid serving config:\n{err}", file=sys.stderr)
        return 2
    except LocalStackError as err:
        print(f"pd-serve: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
