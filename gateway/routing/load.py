"""The load book: the one owner of every load figure the gateway routes and bounds on.

Four kinds of news reach it, and nothing else writes a load figure: a request takes a replica
(:meth:`LocalLoadBook.take`), its streamed answer's first token came back
(:meth:`~LocalLoadBook.first_token`), it gives the replica back (:meth:`~LocalLoadBook.give_back`),
and the scrapers put the engines' readings (:meth:`~LocalLoadBook.engine`). What it hands out is a
frozen :class:`LoadSnapshot` per request: each pool of the plan and each of its replicas (in
flight, starting, prompt tokens, the engine reading and its age, the prefix match), and the
asking tenant's held places against the most any tenant holds. Flow control's room check and
dispatch's first choice read the same snapshot (the gate keeps the one it admitted on)::

    book = LocalLoadBook()
    book.add(pool)                               # a table was built: its replicas, its index
    hold = book.take(pool, replica, tenant="a", prompt_tokens=900, starting=True, blocks=blocks)
    book.first_token(hold)                       # the engine took it into its batch
    book.give_back(hold)                         # the request left the replica, however
    book.engine("colo").put(reading)             # a scraper (a replica's: engine(pool, label))
    snap = book.snapshot(pools, tenant="a", matches=plan.matches)
    snap.pool("colo").saturation(config)         # None: headroom
    book.subscribe(queue.pump)                   # in create_app: told whenever a place frees

Figures are kept per pool name and replica label, so a reload that rebuilds a pool keeps the
requests in flight on its replicas. The Redis version (gateway/routing/load_redis.py) is this
book plus the other gateway replicas' figures (``others``), exchanged through one Redis client
(``load_sharing``): N gateways behind a balancer then bound and route as one.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from gateway.routing.config import PoolConfig
from gateway.routing.gauges import EngineGauges, EngineReading
from gateway.routing.policy import saturation
from gateway.routing.prefix import NO_MATCH, PrefixIndex, PrefixMatch, PromptBlocks, matched
from gateway.values import value

if TYPE_CHECKING:
    from gateway.routing.pools import Pool, Replica

_NO_MATCHES: Mapping[str, PrefixMatch] = {}

Listener = Callable[[], None]
"""Told, synchronously, whenever a place may have freed (a give-back, a first token)."""


@value
class ReplicaLoad:
    """One replica in a snapshot."""

    index: int
    """Its position in the pool (the prefix index's numbering)."""
    label: str
    outstanding: int
    """Requests in flight on it: this gateway's and, when shared, the other gateways'."""
    prompt_tokens: int
    engine: EngineReading | None
    """Its engine's reading while fresh, else None."""


@value
class PoolSnapshot:
    """One pool in a snapshot: every figure a filter or scorer reads, frozen for one request."""

    name: str
    in_flight: int
    """Requests in flight on the pool, every gateway replica's (``own_in_flight`` this one's)."""
    starting: int
    """Streamed requests sent whose first token has not come back, every gateway's."""
    prompt_tokens: int
    engine: EngineReading | None
    """The pool's engines' reading while fresh (``signals.metrics_urls``), else None."""
    engine_age: float | None
    """Seconds since the last good reading; None when there was none."""
    replicas: tuple[ReplicaLoad, ...]
    match: PrefixMatch = NO_MATCH
    """What the pool probably holds of the request's prompt (the plan's match)."""
    own_in_flight: int = 0

    def saturation(
        self, config: PoolConfig, pending: int = 0, held_back: tuple[int, int] = (0, 0)
    ) -> str | None:
        """The first registered filter (gateway/routing/filters.py) the pool is past, counting
        ``pending`` granted requests about to arrive, less ``held_back`` (places and starts the
        request may not use: flow control's reserve); None: headroom."""
        return saturation(
            config,
            self.in_flight + pending,
            self.prompt_tokens,
            self.engine,
            self.starting + pending,
            held_back,
        )


@value
class LoadSnapshot:
    """The load one request is judged and routed on (flow control's room check, dispatch's
    first choice): the pools of its plan, and its tenant's held places."""

    pools: Mapping[str, PoolSnapshot] = field(hash=False, compare=False)
    tenant_held: int = 0
    """Places the asking tenant holds (requests past the gate, every gateway's)."""
    most_held: int = 0
    """The most places any one tenant holds."""

    def pool(self, name: str) -> PoolSnapshot:
        return self.pools[name]

    def held_back(self, reserve: tuple[int, int]) -> tuple[int, int]:
        """What flow control's reserve keeps from this request: ``reserve`` (places, starts)
        when its tenant holds the most (ties: each of them), else nothing."""
        if reserve == (0, 0):
            return reserve
        mine = self.tenant_held
        return reserve if mine and mine >= self.most_held else (0, 0)


class Hold:
    """One request's place on one replica, from :meth:`LocalLoadBook.take` to its give-back."""

    __slots__ = ("label", "pool", "prompt_tokens", "released", "replica", "starting", "tenant")

    def __init__(
        self, pool: str, replica: Replica, tenant: str, prompt_tokens: int, starting: bool
    ) -> None:
        self.pool = pool
        self.replica = replica
        self.label = replica.label
        self.tenant = tenant
        self.prompt_tokens = prompt_tokens
        self.starting = starting
        """Counted as starting until its first token (or its give-back)."""
        self.released = False


class LoadBook(Protocol):
    """The interface both books keep (local, and shared through Redis)."""

    def add(self, pool: Pool) -> None: ...
    def take(
        self,
        pool: Pool,
        replica: Replica,
        *,
        tenant: str = "",
        prompt_tokens: int = 0,
        starting: bool = False,
        blocks: PromptBlocks | None = None,
    ) -> Hold: ...
    def first_token(self, hold: Hold) -> None: ...
    def give_back(self, hold: Hold) -> None: ...
    def engine(self, pool: str, replica: str | None = None) -> EngineGauges: ...
    def match(self, pool: Pool, blocks: PromptBlocks) -> PrefixMatch: ...
    def remember(self, pool: Pool, replica: Replica, blocks: PromptBlocks) -> None: ...
    def snapshot(
        self,
        pools: Iterable[Pool],
        *,
        tenant: str = "",
        matches: Mapping[str, PrefixMatch] | None = None,
    ) -> LoadSnapshot: ...
    def pool_load(self, pool: Pool) -> PoolSnapshot: ...
    def subscribe(self, listener: Listener) -> None: ...
    def show(self, pool: Pool) -> dict[str, object]: ...
    @property
    def held(self) -> Mapping[str, int]: ...
    @property
    def stable_hashes(self) -> bool: ...
    @property
    def claims(self) -> bool: ...
    async def claim(
        self,
        pool: Pool,
        *,
        tenant: str,
        starting: bool,
        prompt_tokens: int,
        reserve: tuple[int, int],
    ) -> bool: ...
    def refresh(self) -> None: ...
    async def start(self) -> None: ...
    async def aclose(self) -> None: ...


@dataclass(slots=True)
class _Counts:
    outstanding: int = 0
    prompt_tokens: int = 0


@dataclass(slots=True)
class Others:
    """The other gateway replicas' figures for one pool (the Redis book fills them)."""

    in_flight: int = 0
    starting: int = 0
    prompt_tokens: int = 0
    replicas: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per replica label: (in flight, prompt tokens)."""


@dataclass(slots=True, eq=False)
class _PoolBook:
    labels: tuple[str, ...]
    gauges: EngineGauges
    replica_gauges: dict[str, EngineGauges]
    prefix: PrefixIndex | None
    replicas: dict[str, _Counts] = field(default_factory=dict)
    starting: int = 0
    others: Others = field(default_factory=Others)
    index_of: dict[str, int] = field(default_factory=dict)


class LocalLoadBook:
    """This gateway's own figures; see the module docstring."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._pools: dict[str, _PoolBook] = {}
        self._listeners: list[Listener] = []
        self._held: dict[str, int] = {}
        """Places per tenant (only tenants holding some: bounded by the requests in flight)."""
        self._holding: Counter[int] = Counter()
        """How many tenants hold each count, so the most held is known without a scan."""
        self._most = 0
        self.others_held: Mapping[str, int] = {}
        """The other gateways' places per tenant (the Redis book fills it)."""
        self.others_most = 0

    # -- what comes in ---------------------------------------------------------------------

    def add(self, pool: Pool) -> None:
        """A table holds ``pool``: its replicas are counted under their labels, its engines'
        readings kept fresh for ``signals.max_age``, its prefix index sized. A pool rebuilt
        under the same name keeps its counts; its index restarts if its replicas changed."""
        config = pool.config
        labels = tuple(r.label for r in pool.replicas)
        old = self._pools.get(pool.name)
        max_age = config.signals.max_age
        if old is not None and _unchanged(old, labels, config):  # the readings stay
            old.gauges.max_age = max_age
            for gauges in old.replica_gauges.values():
                gauges.max_age = max_age
            return
        replica_gauges = (
            {label: EngineGauges(max_age, self._clock) for label in labels}
            if config.signals.replica_metrics
            else {}
        )
        size = config.prefix_index_blocks
        book = _PoolBook(
            labels,
            EngineGauges(max_age, self._clock),
            replica_gauges,
            PrefixIndex(size, len(labels)) if size else None,
        )
        if old is not None:  # the same upstream's requests are still in flight on it
            book.replicas, book.starting, book.others = old.replicas, old.starting, old.others
        book.index_of = {label: i for i, label in enumerate(labels)}
        for label in labels:
            book.replicas.setdefault(label, _Counts())
        self._pools[pool.name] = book

    def take(
        self,
        pool: Pool,
        replica: Replica,
        *,
        tenant: str = "",
        prompt_tokens: int = 0,
        starting: bool = False,
        blocks: PromptBlocks | None = None,
    ) -> Hold:
        """Count a request on ``replica``; pair with :meth:`give_back`. ``starting``: a streamed
        request, counted until :meth:`first_token`. ``blocks``: recorded in the prefix index."""
        book = self._book(pool)
        counts = book.replicas.get(replica.label)
        if counts is None:
            counts = book.replicas[replica.label] = _Counts()
        counts.outstanding += 1
        counts.prompt_tokens += prompt_tokens
        book.starting += starting
        self._hold(tenant)
        if blocks is not None and blocks.hashes and book.prefix is not None:
            index = book.index_of.get(replica.label)
            if index is not None:
                book.prefix.record(blocks, index)
                self._recorded(pool.name, replica.label, blocks)
        self._changed()
        return Hold(pool.name, replica, tenant, prompt_tokens, starting)

    def first_token(self, hold: Hold) -> None:
        """The engine took a starting request into its batch: another may start."""
        if not hold.starting or hold.released:
            return
        hold.starting = False
        self._pools[hold.pool].starting -= 1
        self._changed()
        self._tell()

    def give_back(self, hold: Hold) -> None:
        """The request left its replica (any way); a second give-back does nothing."""
        if hold.released:
            return
        hold.released = True
        book = self._pools[hold.pool]
        counts = book.replicas[hold.label]
        counts.outstanding -= 1
        counts.prompt_tokens -= hold.prompt_tokens
        if hold.starting:
            hold.starting = False
            book.starting -= 1
        if not counts.outstanding and hold.label not in book.index_of:
            del book.replicas[hold.label]  # a replica a reload removed, now idle
        self._unhold(hold.tenant)
        self._changed()
        self._tell()

    def engine(self, pool: str, replica: str | None = None) -> EngineGauges:
        """The gauges a scraper puts its readings in: the pool's, or one replica's."""
        book = self._pools[pool]
        return book.gauges if replica is None else book.replica_gauges[replica]

    def has_replica_gauges(self, pool: str, replica: str) -> bool:
        return replica in self._pools[pool].replica_gauges

    def match(self, pool: Pool, blocks: PromptBlocks) -> PrefixMatch:
        """What ``pool`` probably holds of the prompt (touches the blocks found: call once)."""
        return matched(self._book(pool).prefix, blocks)

    def remember(self, pool: Pool, replica: Replica, blocks: PromptBlocks) -> None:
        """The replica's engine now holds ``blocks`` too (a clean answer's prompt and answer)."""
        book = self._book(pool)
        index = book.index_of.get(replica.label)
        if book.prefix is not None and index is not None and blocks.hashes:
            book.prefix.record(blocks, index)
            self._recorded(pool.name, replica.label, blocks)

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    # -- what goes out ---------------------------------------------------------------------

    def snapshot(
        self,
        pools: Iterable[Pool],
        *,
        tenant: str = "",
        matches: Mapping[str, PrefixMatch] | None = None,
    ) -> LoadSnapshot:
        """The frozen load of ``pools`` for one request of ``tenant``; ``matches``: the plan's
        prefix matches (made once, at the plan), carried into each pool's figures."""
        found = matches or _NO_MATCHES
        views = {p.name: self._view(p, found.get(p.name, NO_MATCH)) for p in pools}
        mine = self._held.get(tenant, 0)
        if self.others_held:
            mine += self.others_held.get(tenant, 0)
        most = self._most if self._most >= self.others_most else self.others_most
        return LoadSnapshot(views, mine, mine if mine > most else most)

    def pool_load(self, pool: Pool) -> PoolSnapshot:
        """One pool's figures now (admin views, metrics, the batch runner's headroom)."""
        return self._view(pool, NO_MATCH)

    @property
    def held(self) -> Mapping[str, int]:
        """This gateway's places per tenant."""
        return self._held

    @property
    def most(self) -> int:
        return self._most

    @property
    def stable_hashes(self) -> bool:
        """Prompt blocks must be named the same in every process (the prefix hints are
        shared): False here, so the index uses Python's cheaper salted hash."""
        return False

    @property
    def claims(self) -> bool:
        """Flow control must claim a place (:meth:`claim`) before dispatch takes it: only where
        other gateways count on the same places (the Redis book). False: its own room check is
        exact, and no request waits on anything."""
        return False

    async def claim(
        self,
        pool: Pool,
        *,
        tenant: str,
        starting: bool,
        prompt_tokens: int,
        reserve: tuple[int, int],
    ) -> bool:
        """Here every figure is this gateway's own, so the room check that found the place
        holds it: True (the Redis book checks every gateway's figures at once)."""
        return True

    def own(self, pool: str) -> tuple[int, int, int]:
        """This gateway's (in flight, starting, prompt tokens) on ``pool``."""
        book = self._pools[pool]
        counts = book.replicas.values()
        return (
            sum(c.outstanding for c in counts),
            book.starting,
            sum(c.prompt_tokens for c in counts),
        )

    def show(self, pool: Pool) -> dict[str, object]:
        """A pool's load as the admin API and the console show it."""
        book = self._book(pool)
        view = self._view(pool, NO_MATCH)
        gauges = book.gauges
        latest = gauges.latest
        others = book.others
        return {
            "in_flight": view.own_in_flight,
            "prompt_tokens_in_flight": view.prompt_tokens - others.prompt_tokens,
            "starting": view.starting - others.starting,
            "other_gateways": {
                "in_flight": others.in_flight,
                "prompt_tokens": others.prompt_tokens,
                "starting": others.starting,
            },
            "capacity": pool.config.capacity,
            "saturated": view.saturation(pool.config),
            "engine": None
            if latest is None
            else {
                "running": latest.running,
                "waiting": latest.waiting,
                "kv_usage": latest.kv_usage,
                "prefix_hit_rate": gauges.hit_rate(),
                "age_seconds": gauges.age(),
                "fresh": view.engine is not None,
            },
            "engine_error": gauges.last_error,
            "prefix_index_blocks": self.index_size(pool),
        }

    def index_size(self, pool: Pool) -> int:
        prefix = self._book(pool).prefix
        return 0 if prefix is None else len(prefix)

    def replica_counts(self, pool: Pool, replica: Replica) -> tuple[int, int]:
        """This gateway's (in flight, prompt tokens) on one replica."""
        counts = self._book(pool).replicas.get(replica.label)
        return (0, 0) if counts is None else (counts.outstanding, counts.prompt_tokens)

    def refresh(self) -> None:
        """Someone must wait on the figures now: nothing to read here (the Redis book reads
        the other gateways' at once, so a place freed there is seen within a round trip)."""

    async def start(self) -> None:
        """Nothing to start here (the Redis book starts its exchange)."""

    async def aclose(self) -> None:
        """Nothing to close here."""

    # -- inside ----------------------------------------------------------------------------

    def _book(self, pool: Pool) -> _PoolBook:
        book = self._pools.get(pool.name)
        if book is None:  # a pool built outside a table (tests, tools): counted from now
            self.add(pool)
            book = self._pools[pool.name]
        return book

    def _view(self, pool: Pool, match: PrefixMatch) -> PoolSnapshot:
        book = self._pools.get(pool.name)
        if book is None:
            book = self._book(pool)
        others = book.others
        shared = others.replicas
        gauges = book.replica_gauges
        counts = book.replicas
        replicas = []
        in_flight = tokens = 0
        # On every request's path (the gate's room check, dispatch's choice): kept lean.
        for i, label in enumerate(book.labels):
            mine = counts[label]
            out, tok = mine.outstanding, mine.prompt_tokens
            in_flight += out
            tokens += tok
            if shared:
                more = shared.get(label)
                if more is not None:
                    out, tok = out + more[0], tok + more[1]
            engine = None
            if gauges:
                replica_gauges = gauges.get(label)
                engine = None if replica_gauges is None else replica_gauges.fresh()
            replicas.append(ReplicaLoad(i, label, out, tok, engine))
        if len(counts) > len(book.labels):  # requests still on replicas a reload removed
            for label, extra in counts.items():
                if label not in book.index_of:
                    in_flight += extra.outstanding
                    tokens += extra.prompt_tokens
        pool_gauges = book.gauges
        latest = pool_gauges.latest
        return PoolSnapshot(
            pool.name,
            in_flight + others.in_flight,
            book.starting + others.starting,
            tokens + others.prompt_tokens,
            None if latest is None else pool_gauges.fresh(),
            None if latest is None else pool_gauges.age(),
            tuple(replicas),
            match,
            in_flight,
        )

    def _hold(self, tenant: str) -> None:
        held, holding = self._held, self._holding
        had = held.get(tenant, 0)
        if had:
            holding[had] -= 1
            if not holding[had]:
                del holding[had]
        held[tenant] = had + 1
        holding[had + 1] += 1
        if had + 1 > self._most:
            self._most = had + 1

    def _unhold(self, tenant: str) -> None:
        held, holding = self._held, self._holding
        had = held[tenant]
        holding[had] -= 1
        if not holding[had]:
            del holding[had]
            if had == self._most:  # it held the most alone: now it, at had - 1, does
                self._most = had - 1
        if had > 1:
            held[tenant] = had - 1
            holding[had - 1] += 1
        else:
            del held[tenant]

    def _tell(self) -> None:
        for listener in self._listeners:
            listener()

    def _changed(self) -> None:
        """A figure this gateway shares changed (the Redis book sends it soon)."""

    def _recorded(self, pool: str, label: str, blocks: PromptBlocks) -> None:
        """Blocks were recorded for a replica (the Redis book shares them as hints)."""


def _unchanged(old: _PoolBook, labels: tuple[str, ...], config: PoolConfig) -> bool:
    """The same replicas, the same prefix index size, replica readings on as before."""
    size = config.prefix_index_blocks
    prefix = old.prefix
    same_index = (prefix is None and not size) or (prefix is not None and prefix.max_blocks == size)
    same_gauges = bool(old.replica_gauges) == (config.signals.replica_metrics and bool(labels))
    return old.labels == labels and same_index and same_gauges
