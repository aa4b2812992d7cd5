"""The ``pd-loadtest`` command line.

    pd-loadtest --target gw=http://127.0.0.1:8080/v1 --model tiny --api-key-env KEY \\
        --workload mix --rate 0.5,1,2 --requests 20 --slo-ttft-ms 2000 --out report/

Exit status: 0 done; 2 bad arguments; 3 a target is unreachable; 4 a target refused the key;
5 every measured request failed; 6 a workload or tokenizer could not be built.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import aiohttp
import uvloop

from loadtests.pdload import client
from loadtests.pdload.arrivals import Arrival
from loadtests.pdload.progress import Progress
from loadtests.pdload.report import build_report, render_markdown, write_report
from loadtests.pdload.runner import (
    Mode,
    Request,
    Step,
    StepResult,
    TenantLoad,
    run_step,
    run_tenants_step,
)
from loadtests.pdload.stats import Slo
from loadtests.pdload.tokenizer import Tokenizer, TokenizerError, load_tokenizer
from loadtests.pdload.workload import WorkloadError, WorkloadKind, WorkloadSpec, build_items

EXIT_ALL_FAILED = 5
EXIT_WORKLOAD = 6
MAX_TARGETS = 16
MAX_STEPS = 64
MAX_INFLIGHT = 100_000
MAX_ITEMS = 20_000
MAX_TENANTS = 8


def _bounded(low: float, high: float, kind: type = float) -> Any:
    def parse(text: str) -> Any:
        value = kind(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is not within {low:g}..{high:g}")
        return value

    return parse


def _loads(text: str) -> list[float]:
    values = [float(v) for v in text.split(",") if v.strip()]
    if not values or len(values) > MAX_STEPS or any(v <= 0 for v in values):
        raise argparse.ArgumentTypeError(f"need 1..{MAX_STEPS} positive numbers, comma-separated")
    return values


def parse_target(text: str, default_model: str | None, default_key_env: str) -> client.Target:
    """``URL``, ``NAME=URL`` or ``name=N,url=U[,model=M][,key_env=VAR]``; the URL may be
    several of the same service, ``URL1|URL2|...``, sent to round robin."""
    fields: dict[str, str] = {}
    if "url=" in text:
        for part in text.split(","):
            key, _, value = part.partition("=")
            fields[key.strip()] = value.strip()
    elif "=" in text and not text.startswith("http"):
        fields["name"], _, fields["url"] = text.partition("=")
    else:
        fields["url"] = text
    unknown = set(fields) - {"name", "url", "model", "key_env"}
    urls = [u.strip().rstrip("/") for u in fields.get("url", "").split("|")]
    if unknown or not all(u.startswith(("http://", "https://")) for u in urls):
        raise argparse.ArgumentTypeError(f"bad --target {text!r}: want name=N,url=http...,model=M")
    model = fields.get("model") or default_model
    if not model:
        raise argparse.ArgumentTypeError(f"--target {text!r}: no model (give --model or model=)")
    url = urls[0]
    return client.Target(
        name=fields.get("name") or url,
        base_url=url,
        model=model,
        api_key=os.environ.get(fields.get("key_env") or default_key_env),
        mirrors=tuple(urls[1:]),
    )


@dataclass(frozen=True, slots=True)
class Tenant:
    """``--tenant name=N,key_env=VAR,load=X``: its own key and its own share of each step."""

    name: str
    key_env: str
    load: float


def parse_tenant(text: str) -> Tenant:
    fields = dict(part.partition("=")[::2] for part in text.split(","))
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    if set(fields) != {"name", "key_env", "load"} or not fields["name"]:
        raise argparse.ArgumentTypeError(f"bad --tenant {text!r}: want name=N,key_env=VAR,load=X")
    try:
        load = float(fields["load"])
    except ValueError:
        load = -1.0
    if not 0 < load <= 1e6:
        raise argparse.ArgumentTypeError(f"--tenant {text!r}: load must be a positive number")
    return Tenant(fields["name"][:32], fields["key_env"], load)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="pd-loadtest", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--target",
        action="append",
        required=True,
        help="URL, NAME=URL or name=,url=,model=,key_env= (repeat to compare)",
    )
    p.add_argument("--model", help="model for targets that do not name one")
    p.add_argument(
        "--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the API key"
    )
    p.add_argument("--api", choices=get_args(client.Api), default="chat")
    p.add_argument(
        "--tenant",
        action="append",
        type=parse_tenant,
        help="name=N,key_env=VAR,load=X (repeat): tenants sending at once, each with its own "
        "key and X times the step's load, reported per tenant",
    )
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument(
        "--rate", type=_loads, help="open loop: requests/s, comma-separated for a sweep"
    )
    load.add_argument(
        "--concurrency", type=_loads, help="closed loop: users, comma-separated for a sweep"
    )
    p.add_argument("--arrival", choices=get_args(Arrival), default="poisson")
    stop = p.add_mutually_exclusive_group(required=True)
    stop.add_argument("--requests", type=_bounded(1, 10_000_000, int), help="requests per step")
    stop.add_argument("--duration", type=_bounded(0.1, 86_400), help="seconds of sending per step")
    p.add_argument(
        "--warmup",
        type=_bounded(0, 10_000, int),
        default=0,
        help="requests per target before measuring",
    )
    w = p.add_argument_group("workload")
    w.add_argument("--workload", choices=get_args(WorkloadKind), default="fixed")
    w.add_argument(
        "--tokenizer",
        default="cl100k_base",
        help="words (the simulator's count), cl100k_base, o200k_base, or a tokenizer.json",
    )
    w.add_argument(
        "--input-tokens",
        type=_bounded(1, 1_000_000, int),
        default=128,
        help="prompt tokens (median for lognormal; suffix for shared-prefix)",
    )
    w.add_argument(
        "--output-tokens",
        type=_bounded(1, 1_000_000, int),
        default=64,
        help="max_tokens (median for lognormal)",
    )
    w.add_argument("--input-sigma", type=_bounded(0, 4), default=0.8)
    w.add_argument("--output-sigma", type=_bounded(0, 4), default=0.6)
    w.add_argument("--max-input-tokens", type=_bounded(1, 1_000_000, int), default=8192)
    w.add_argument("--max-output-tokens", type=_bounded(1, 1_000_000, int), default=4096)
    w.add_argument("--short-tokens", type=_bounded(1, 1_000_000, int), default=32)
    w.add_argument("--long-tokens", type=_bounded(1, 1_000_000, int), default=512)
    w.add_argument("--long-fraction", type=_bounded(0, 1), default=0.5)
    w.add_argument("--prefix-tokens", type=_bounded(1, 1_000_000, int), default=256)
    w.add_argument("--prefix-groups", type=_bounded(1, 10_000, int), default=4)
    w.add_argument(
        "--conversations",
        type=_bounded(1, 10_000, int),
        default=8,
        help="multi-turn: conversations in progress at once",
    )
    w.add_argument(
        "--turns", type=_bounded(1, 64, int), default=4, help="multi-turn: turns a conversation"
    )
    w.add_argument(
        "--dataset", type=Path, help="JSON lines: {prompt} or {messages}, optional max_tokens"
    )
    w.add_argument("--temperature", type=_bounded(0, 2), help="sent when given (0 = greedy)")
    w.add_argument("--ignore-eos", action="store_true", help="vLLM: always generate max_tokens")
    s = p.add_argument_group("SLO (goodput counts successful requests within all limits given)")
    s.add_argument("--slo-ttft-ms", type=_bounded(0, 1e7))
    s.add_argument("--slo-tpot-ms", type=_bounded(0, 1e7))
    s.add_argument("--slo-e2e-ms", type=_bounded(0, 1e8))
    p.add_argument("--knee-tolerance", type=_bounded(0, 1), default=0.05)
    p.add_argument("--out", type=Path, help="report folder (default loadtest-<time>)")
    p.add_argument("--title")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--max-inflight", type=_bounded(1, MAX_INFLIGHT, int), default=4096)
    p.add_argument("--timeout", type=_bounded(0.1, 86_400), default=600, help="seconds per request")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--no-plots", action="store_true")
    return p


@dataclass(frozen=True, slots=True)
class Plan:
    targets: list[client.Target]
    steps: list[Step]
    spec: WorkloadSpec
    slo: Slo
    extra: dict[str, Any]
    tenants: list[Tenant]


def make_plan(args: argparse.Namespace, parser: argparse.ArgumentParser) -> Plan:
    if len(args.target) > MAX_TARGETS:
        parser.error(f"at most {MAX_TARGETS} targets")
    try:
        targets = [parse_target(t, args.model, args.api_key_env) for t in args.target]
    except argparse.ArgumentTypeError as e:
        parser.error(str(e))
    if len({t.name for t in targets}) != len(targets):
        parser.error("target names must differ")
    tenants = args.tenant or []
    if len(tenants) > MAX_TENANTS or len({t.name for t in tenants}) != len(tenants):
        parser.error(f"at most {MAX_TENANTS} tenants, with different names")
    mode: Mode = "open" if args.rate else "closed"
    loads = args.rate or args.concurrency
    steps = [
        Step(i, mode, load, args.requests, args.duration, args.arrival)
        for i, load in enumerate(loads)
    ]
    spec = WorkloadSpec(
        kind=args.workload, input_tokens=args.input_tokens, output_tokens=args.output_tokens,
        input_sigma=args.input_sigma, output_sigma=args.output_sigma,
        max_input_tokens=args.max_input_tokens, max_output_tokens=args.max_output_tokens,
        short_tokens=args.short_tokens, long_tokens=args.long_tokens,
        long_fraction=args.long_fraction, prefix_tokens=args.prefix_tokens,
        prefix_groups=args.prefix_groups, conversations=args.conversations, turns=args.turns,
        dataset=args.dataset,
    )  # fmt: skip
    slo = Slo(
        *(
            None if v is None else v / 1000
            for v in (args.slo_ttft_ms, args.slo_tpot_ms, args.slo_e2e_ms)
        )
    )
    extra: dict[str, Any] = {}
    if args.temperature is not None:
        extra["temperature"] = args.temperature
    if args.ignore_eos:
        extra["ignore_eos"] = True
    return Plan(targets, steps, spec, slo, extra, tenants)


async def _run(args: argparse.Namespace, plan: Plan) -> list[StepResult]:
    tokenizer = load_tokenizer(args.tokenizer)
    timeout = aiohttp.ClientTimeout(total=args.timeout, sock_connect=10)
    connector = aiohttp.TCPConnector(limit=args.max_inflight, limit_per_host=0, ttl_dns_cache=300)
    results: list[StepResult] = []
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session:
        # With tenants, each tenant's key is checked instead (the target's own may be none).
        for target in [] if plan.tenants else plan.targets:
            for warning in await client.preflight(session, target):
                print(f"pd-loadtest: warning: {warning}", file=sys.stderr)
        for t_index, target in enumerate(plan.targets):
            warm_target = target
            if plan.tenants:  # warm up with the first tenant's key
                key = os.environ.get(plan.tenants[0].key_env)
                warm_target = dataclasses.replace(target, api_key=key)
            req = Request(warm_target, args.api, plan.extra)
            if args.warmup:
                items = build_items(
                    plan.spec, tokenizer, min(args.warmup, MAX_ITEMS), args.seed, -1 - t_index
                )
                warm = Step(-1, "closed", min(args.warmup, 4), args.warmup, None)
                await run_step(
                    session,
                    req,
                    items,
                    warm,
                    seed=args.seed,
                    max_inflight=args.max_inflight,
                    on_done=lambda _: None,
                )
            if plan.tenants:
                results += await _run_tenants(session, args, plan, target, t_index, tokenizer)
            else:
                results += await _run_target(session, args, plan, req, t_index, tokenizer)
    return results


async def _run_target(
    session: aiohttp.ClientSession,
    args: argparse.Namespace,
    plan: Plan,
    req: Request,
    t_index: int,
    tokenizer: Tokenizer,
) -> list[StepResult]:
    """Each step against one target, with its own key (or none)."""

    async def one_step(step: Step, progress: Progress) -> StepResult:
        count = min(step.expected_requests(), MAX_ITEMS)
        salt = t_index * MAX_STEPS + step.index
        items = build_items(plan.spec, tokenizer, count, args.seed, salt)
        return await run_step(
            session,
            req,
            items,
            step,
            seed=args.seed + step.index,
            max_inflight=args.max_inflight,
            on_done=progress,
        )

    return await _each_step(args, plan, req.target, one_step, counted=True)


async def _each_step(
    args: argparse.Namespace,
    plan: Plan,
    target: client.Target,
    run: Callable[[Step, Progress], Awaitable[StepResult]],
    *,
    counted: bool,
) -> list[StepResult]:
    """Every step of the plan against ``target``, in order, each with its progress line (of
    ``step.requests`` when ``counted``), closed however the step ends."""
    results = []
    for step in plan.steps:
        total = step.requests if counted else None
        progress = Progress(f"{target.name} @ {step.load:g}", total, not args.no_progress)
        try:
            results.append(await run(step, progress))
        finally:
            progress.close()
    return results


async def _run_tenants(
    session: aiohttp.ClientSession,
    args: argparse.Namespace,
    plan: Plan,
    target: client.Target,
    t_index: int,
    tokenizer: Tokenizer,
) -> list[StepResult]:
    """Each step with every tenant sending at once, each with its own key, load and prompts."""
    keyed = [
        (tenant, dataclasses.replace(target, api_key=os.environ.get(tenant.key_env)))
        for tenant in plan.tenants
    ]
    for tenant, tenant_target in keyed:
        for warning in await client.preflight(session, tenant_target):
            print(f"pd-loadtest: warning: tenant {tenant.name}: {warning}", file=sys.stderr)

    async def one_step(step: Step, progress: Progress) -> StepResult:
        loads = []
        for n, (tenant, tenant_target) in enumerate(keyed):
            count = min(Step(0, step.mode, step.load * tenant.load, step.requests,
                             step.duration).expected_requests(), MAX_ITEMS)  # fmt: skip
            salt = (t_index * MAX_STEPS + step.index) * MAX_TENANTS + n
            items = build_items(plan.spec, tokenizer, count, args.seed, salt)
            req = Request(tenant_target, args.api, plan.extra, tenant.name)
            loads.append(TenantLoad(req, items, tenant.load))
        return await run_tenants_step(
            session,
            loads,
            step,
            seed=args.seed + step.index,
            max_inflight=args.max_inflight,
            on_done=progress,
        )

    # No total on the progress line: the tenants' loads add up to more than the step's count.
    return await _each_step(args, plan, target, one_step, counted=False)


def _describe_workload(spec: WorkloadSpec, tokenizer: str) -> str:
    s = spec
    shapes = {
        "fixed": f"fixed {s.input_tokens} prompt tokens",
        "lognormal": f"lognormal, median prompt {s.input_tokens} (sigma {s.input_sigma}), "
        f"median output {s.output_tokens} (sigma {s.output_sigma})",
        "mix": f"mix: {s.long_fraction:.0%} long ({s.long_tokens} tokens), "
        f"the rest short ({s.short_tokens})",
        "shared-prefix": f"{s.prefix_groups} shared prefixes of {s.prefix_tokens} tokens "
        f"+ {s.input_tokens} unique",
        "multi-turn": f"{s.conversations} conversations at once, {s.turns} turns each: a "
        f"{s.prefix_tokens}-token system prompt, {s.input_tokens} tokens a user turn, "
        f"{s.output_tokens} an answer, the history resent",
        "dataset": f"dataset {s.dataset}",
    }
    if s.kind != "lognormal":
        shapes[s.kind] += f", max_tokens {s.output_tokens}"
    return f"{shapes[spec.kind]}, tokenizer {tokenizer}"


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    plan = make_plan(args, parser)
    started = time.time()
    try:
        results = uvloop.run(_run(args, plan))
    except client.TargetError as e:
        print(f"pd-loadtest: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    except (TokenizerError, WorkloadError) as e:
        print(f"pd-loadtest: {e}", file=sys.stderr)
        sys.exit(EXIT_WORKLOAD)
    meta = {
        "command": shlex.join(["pd-loadtest", *(sys.argv[1:] if argv is None else argv)]),
        "title": args.title,
        "started_at": started,
        "mode": plan.steps[0].mode,
        "api": args.api,
        "workload": _describe_workload(plan.spec, args.tokenizer),
        "targets": [{"name": t.name, "url": t.base_url, "model": t.model} for t in plan.targets],
        "tenants": [{"name": t.name, "load": t.load} for t in plan.tenants],
    }
    data = build_report(meta, results, plan.slo, args.knee_tolerance)
    out = args.out or Path(time.strftime("loadtest-%Y%m%d-%H%M%S"))
    write_report(out, data)
    if not args.no_plots:
        # matplotlib is imported only when plots are asked for (a machine without it can run).
        from loadtests.pdload.plots import write_plots

        write_plots(out, data)
    print(render_markdown(data).split("## Per pool")[0])
    print(f"report: {out.resolve()}")
    if not any(r.ok for result in results for r in result.records):
        print("pd-loadtest: every measured request failed", file=sys.stderr)
        sys.exit(EXIT_ALL_FAILED)
