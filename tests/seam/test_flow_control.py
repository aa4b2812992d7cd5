"""Flow control and serving-aware routing through the app factory's seam: a queued request keeps
its reservation and is served when a place frees; shed, full, timed out and abandoned waits are
outcomes with one settlement and one ledger row; the P/D decision reads the prefix index.

Saturation is made by holding the pool's only place by hand (``pool.take``), so nothing here
depends on timing: the test waits for the queue to hold the request, then frees the place.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson

from gateway.wire.outcome import Ending
from tests.seam.harness import Gateway, running_gateway
from tests.seam.upstream import Script

CHAT = "/v1/chat/completions"
SCRIPTS = {"default": Script()}
FLOW = {"enabled": True, "max_wait_seconds": 60, "recheck_seconds": 3600}
ONE_PLACE = {"pd": {"urls": ["http://replica-a:8000"], "capacity": 1}}


def chat(text: str = "hello there", **extra: Any) -> bytes:
    body = {"model": "m", "messages": [{"role": "user", "content": text}], "stream": True}
    return orjson.dumps({**body, **extra})


def settled_once(gw: Gateway) -> None:
    admitted = [o for o in gw.outcomes if o.admitted]
    assert all(gw.limiter.settled[o.arrival.request_id] == 1 for o in admitted)
    assert gw.limiter.in_flight() == 0


async def until(check: Any) -> None:
    for _ in range(10_000):
        if check():
            return
        await asyncio.sleep(0.001)
    raise AssertionError("state not reached")


async def test_a_request_waits_for_a_place_keeping_its_reservation(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS, flow=FLOW, pools=ONE_PLACE) as gw:
        pool = gw.state.table.pools["pd"]
        held = pool.take()
        call = asyncio.create_task(gw.call(CHAT, chat()))
        assert gw.state.flow is not None
        await until(lambda: gw.state.flow is not None and gw.state.flow.queue.waiting == 1)
        assert gw.limiter.in_flight() == 1  # its reservation is held while it waits
        pool.give_back(held)
        reply = await call
        assert reply.status == 200
        outcome = reply.outcome
        assert outcome is not None and outcome.ending is Ending.COMPLETE
        assert outcome.queued > 0 and outcome.band == "standard"
        settled_once(gw)
    assert len(gw.ledger_rows()) == 1


async def test_a_sheddable_request_is_refused_while_saturated_and_recorded_once(
    tmp_path: Path,
) -> None:
    async with running_gateway(tmp_path, SCRIPTS, flow=FLOW, pools=ONE_PLACE) as gw:
        pool = gw.state.table.pools["pd"]
        held = pool.take()
        reply = await gw.call(CHAT, chat(), headers=((b"x-gateway-priority", b"sheddable"),))
        pool.give_back(held)
        assert reply.status == 429 and reply.headers[b"retry-after"] == b"1"
        assert reply.json()["error"]["code"] == "shed"
        outcome = reply.outcome
        assert outcome is not None and outcome.ending is Ending.REFUSED and outcome.admitted
        assert not outcome.reached_upstream and outcome.band == "sheddable"
        assert gw.upstreams[0].sent == []
        settled_once(gw)
    (row,) = gw.ledger_rows()
    assert row["status"] == 429


async def test_a_wait_past_max_wait_is_a_503_with_retry_after(tmp_path: Path) -> None:
    flow = {**FLOW, "max_wait_seconds": 0.01}
    async with running_gateway(tmp_path, SCRIPTS, flow=flow, pools=ONE_PLACE) as gw:
        pool = gw.state.table.pools["pd"]
        held = pool.take()
        reply = await gw.call(CHAT, chat())
        pool.give_back(held)
        assert reply.status == 503 and b"retry-after" in reply.headers
        assert reply.json()["error"]["code"] == "queue_timeout"
        outcome = reply.outcome
        assert outcome is not None and outcome.ending is Ending.REFUSED
        assert outcome.queued > 0
        settled_once(gw)
    assert len(gw.ledger_rows()) == 1


async def test_a_client_that_leaves_while_queued_is_recorded_as_gone(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS, flow=FLOW, pools=ONE_PLACE) as gw:
        pool = gw.state.table.pools["pd"]
        held = pool.take()
        reply = await gw.call(CHAT, chat(), leave_after=0)
        pool.give_back(held)
        outcome = reply.outcome
        assert outcome is not None and outcome.ending is Ending.CLIENT_GONE
        assert not outcome.reached_upstream
        assert gw.state.flow is not None and gw.state.flow.queue.waiting == 0
        settled_once(gw)
    assert len(gw.ledger_rows()) == 1


async def test_a_waiting_request_starts_when_the_one_before_it_has_its_first_token(
    tmp_path: Path,
) -> None:
    """The cause of the two-tenant unfairness (README, "Two tenants"): bounded only by requests
    in flight over their whole life, a full engine's places free together as its batch ends, the
    gate refills them together, and every request admitted with that burst (a quiet tenant's
    too) waits behind one long step of prefills. ``max_starting`` lets the next request start as
    soon as the one before it is in the batch (its first token back), while it still streams."""
    prefilled, decoded = asyncio.Event(), asyncio.Event()
    scripts = {**SCRIPTS, "held": Script(first_token=prefilled, rest=decoded)}
    pools = {"pd": {"urls": ["http://replica-a:8000"], "saturation": {"max_starting": 1}}}
    async with running_gateway(tmp_path, scripts, flow=FLOW, pools=pools) as gw:
        pool, flow = gw.state.table.pools["pd"], gw.state.flow
        assert flow is not None
        first = asyncio.create_task(gw.call(CHAT, chat(script="held")))
        await until(lambda: pool.load().starting == 1)
        second = asyncio.create_task(gw.call(CHAT, chat()))
        await until(lambda: flow.queue.waiting == 1)  # the pool's one start is taken
        prefilled.set()  # the first request's first token: it is in the batch now
        await until(lambda: len(gw.upstreams[0].sent) == 2)
        assert not first.done()  # sent while the first still streams
        assert (await second).status == 200
        decoded.set()
        assert (await first).status == 200
        assert (pool.in_flight, pool.load().starting) == (0, 0)
        settled_once(gw)
    assert len(gw.ledger_rows()) == 2


AUTH = {"enabled": True, "hash_secret": "seam-test-hash-secret-0123456789"}


async def tenant_keys(gw: Gateway, *tenants: str) -> dict[str, tuple[tuple[bytes, bytes], ...]]:
    """A key for each tenant, as its authorization header."""
    assert gw.state.auth is not None
    admin = await gw.state.auth.manager.create_admin_key("tests")
    admin_headers = ((b"authorization", f"Bearer {admin.token}".encode()),)
    keys = {}
    for tenant in tenants:
        made = await gw.call("/admin/tenants", orjson.dumps({"id": tenant}), headers=admin_headers)
        assert made.status in (200, 201), made.body
        issued = await gw.call(
            f"/admin/tenants/{tenant}/keys", orjson.dumps({"name": "k"}), headers=admin_headers
        )
        assert issued.status in (200, 201), issued.body
        keys[tenant] = ((b"authorization", f"Bearer {issued.json()['key']}".encode()),)
    return keys


async def test_the_reserve_keeps_a_place_from_the_tenant_holding_the_most(tmp_path: Path) -> None:
    """``flow.reserve``: the loud tenant, holding the most, may not take the pool's last place;
    the quiet tenant's request takes it at once, past the loud one waiting ahead of it."""
    prefilled, decoded = asyncio.Event(), asyncio.Event()
    scripts = {**SCRIPTS, "held": Script(first_token=prefilled, rest=decoded)}
    pools = {"pd": {"urls": ["http://replica-a:8000"], "capacity": 2}}
    flow = {**FLOW, "reserve": {"places": 1}}
    async with running_gateway(tmp_path, scripts, flow=flow, pools=pools, auth=AUTH) as gw:
        keys = await tenant_keys(gw, "loud", "quiet")
        pool, gate = gw.state.table.pools["pd"], gw.state.flow
        assert gate is not None
        held = asyncio.create_task(gw.call(CHAT, chat(script="held"), headers=keys["loud"]))
        await until(lambda: pool.in_flight == 1)
        waiting = asyncio.create_task(gw.call(CHAT, chat(), headers=keys["loud"]))
        await until(lambda: gate.queue.waiting == 1)  # the pool's last place is not loud's
        quiet = await gw.call(CHAT, chat(), headers=keys["quiet"])  # past the loud one
        assert quiet.status == 200 and quiet.outcome is not None
        assert not waiting.done() and gate.queue.waiting == 1
        prefilled.set()
        decoded.set()
        assert (await held).status == 200
        assert (await waiting).status == 200  # the loud one's place came back
        assert pool.book.held == {} and pool.in_flight == 0
        settled_once(gw)
    assert len(gw.ledger_rows()) == 3


TWO_POOLS = {
    "pd": {"urls": ["http://pd-a:8000"]},
    "colo": {"urls": ["http://colo-a:8000", "http://colo-b:8000"], "capacity": 4},
}
PREFIX_MODEL = {
    "m": {
        "variants": {"stable": {"weight": 1, "pools": {"pd": "pd", "colocated": "colo"}}},
        "routing": {"pd_threshold_tokens": 150, "prefix": {"enabled": True}},
    }
}
HISTORY = "Tell me about the history of the river and its bridges. " * 30  # 600 chars: 136 tokens


def conversation(*turns: str) -> bytes:
    roles = ["user", "assistant"]
    messages = [{"role": roles[i % 2], "content": t} for i, t in enumerate(turns)]
    return orjson.dumps({"model": "m", "messages": messages, "stream": True})


async def test_a_conversation_stays_on_the_pool_that_holds_its_prefix(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS, pools=TWO_POOLS, models=PREFIX_MODEL) as gw:
        # The history arrives in pieces: the first turn is short, so it goes colocated.
        first = await gw.call(CHAT, conversation(HISTORY[:600]))
        assert first.headers[b"x-gateway-route-reason"] == b"prompt_short"
        assert first.headers[b"x-gateway-pool"] == b"colo"
        # One turn on, the prompt is long, but most of it is cached on colocated: it stays,
        # on the replica that holds it.
        second = await gw.call(CHAT, conversation(HISTORY[:600], "ok", HISTORY[600:900]))
        assert second.headers[b"x-gateway-route-reason"] == b"prefix_cached"
        assert second.outcome is not None and first.outcome is not None
        assert second.outcome.route.replica == first.outcome.route.replica
        # A long prompt no pool has seen goes to PD.
        fresh = await gw.call(CHAT, conversation("A new topic entirely. " * 80))
        assert fresh.headers[b"x-gateway-route-reason"] == b"prompt_long"
        assert fresh.headers[b"x-gateway-pool"] == b"pd"


async def test_the_answer_is_remembered_so_the_next_turn_stays_where_its_history_is(
    tmp_path: Path,
) -> None:
    """The engine caches the answer's tokens too: the next turn resends the answer, and the
    index knows the replica holds it, so the turn is not sent to PD for tokens already cached."""
    scripts = {"default": Script(chunks=120)}
    answer = "".join(f"tok{i} " for i in range(120))  # what the scripted upstream streams
    async with running_gateway(tmp_path, scripts, pools=TWO_POOLS, models=PREFIX_MODEL) as gw:
        first = await gw.call(CHAT, conversation(HISTORY[:300]))
        assert first.headers[b"x-gateway-pool"] == b"colo"
        # Long, and without the answer in the index the colocated pool would prefill all of it.
        second = await gw.call(CHAT, conversation(HISTORY[:300], answer, "ok"))
        assert second.headers[b"x-gateway-route-reason"] == b"prefix_cached"
        assert second.outcome is not None and first.outcome is not None
        assert second.outcome.route.replica == first.outcome.route.replica


async def test_a_saturated_preferred_pool_sends_the_request_to_the_other(tmp_path: Path) -> None:
    async with running_gateway(tmp_path, SCRIPTS, pools=TWO_POOLS, models=PREFIX_MODEL) as gw:
        colo = gw.state.table.pools["colo"]
        held = [colo.take() for _ in range(4)]
        reply = await gw.call(CHAT, conversation("short question"))
        for replica in held:
            colo.give_back(replica)
        assert reply.headers[b"x-gateway-pool"] == b"pd"
        assert reply.headers[b"x-gateway-route-reason"] == b"prompt_short+failover_saturated"


async def test_without_the_index_the_same_turn_goes_by_length_to_pd(tmp_path: Path) -> None:
    model = {"m": {**PREFIX_MODEL["m"], "routing": {"pd_threshold_tokens": 150}}}
    async with running_gateway(tmp_path, SCRIPTS, pools=TWO_POOLS, models=model) as gw:
        await gw.call(CHAT, conversation(HISTORY[:600]))
        second = await gw.call(CHAT, conversation(HISTORY[:600], "ok", HISTORY[600:900]))
        assert second.headers[b"x-gateway-route-reason"] == b"prompt_long"
