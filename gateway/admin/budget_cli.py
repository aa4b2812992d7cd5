"""The CLI's budget parts: ``--budget AMOUNT[:PERIOD[:MODE]]`` and ``tenants|keys budget ID``.

    pd-gateway tenants create acme --budget 200:month:hard
    pd-gateway keys create --tenant acme --name ci --budget 5.50:day:soft
    pd-gateway tenants budget acme        # the budget, and with limits.backend redis its figures

The figures live in the limiter's counters: on Redis the CLI reads the ones every replica
shares; the in-process backend's live inside the one gateway process, so the CLI shows the budget
alone there and says where the figures are (``GET /admin/tenants/{t}/budget``).
"""

from __future__ import annotations

import argparse
from typing import Any

from pydantic import ValidationError

from configkit import format_validation_error
from gateway.accounting.prices import format_money
from gateway.auth.models import Limits
from gateway.config import load_config
from gateway.limits.admission import build_backend
from gateway.limits.budgets import Budget, iso, period_reset
from gateway.limits.config import LimitsConfig, LimitValues
from gateway.limits.types import Scope, Subject


def parse_budget(text: str) -> Budget:
    """``200`` / ``200:day`` / ``200:month:soft``; argparse's error, worded by the model."""
    amount, _, rest = text.partition(":")
    period, _, mode = rest.partition(":")
    fields: dict[str, Any] = {"amount": amount}
    if period:
        fields["period"] = period
    if mode:
        fields["mode"] = mode
    try:
        return Budget.model_validate(fields)
    except ValidationError as err:
        raise argparse.ArgumentTypeError(format_validation_error(err)) from None


async def budget_figures(
    args: argparse.Namespace, scope: Scope, subject_id: str, limits: Limits
) -> dict[str, Any]:
    """The budget of a tenant or key as ``GET /admin/.../budget`` shows it, read offline."""
    budget = limits.budget
    body: dict[str, Any] = {
        "object": "budget",
        "scope": scope,
        "id": subject_id,
        "budget": None if budget is None else budget.model_dump(mode="json"),
    }
    config = load_config(args.config).limits if args.config else LimitsConfig()
    if budget is None:
        return body
    if config.backend != "redis":
        return body | {
            "figures": "the in-process limiter's counters live in the gateway: "
            f"GET /admin/{scope}s/{subject_id}/budget"
        }
    backend = build_backend(config)
    try:
        subject = Subject(scope, subject_id, LimitValues(budget=budget))
        period, committed, spent = await backend.budget_state(subject)
    finally:
        await backend.aclose()
    remaining = max(0, budget.micros - committed)
    return body | {
        "spent_micros": spent,
        "committed_micros": committed,
        "remaining_micros": remaining,
        "spent": format_money(spent),
        "remaining": format_money(remaining),
        "resets_at": iso(period_reset(budget.period, period)),
    }
