"""Admission to forward passes: a bounded number run at once; the requests that wait are served in turn
by client, so one client's flood waits behind its own requests and not in front of everyone else's.

A client is its network address and, within an address (learners behind one NAT, or behind the lab's own
proxy), its `lab_client` cookie. Turns go round the addresses, and within an address round its clients:
a client that floods, whether from many connections or under many cookies, gets one turn in each round
like any other. An address that has held no turn lately (REST_SECONDS) is served before the round: a
learner's occasional short pass waits for the turn under way, not for a turn of everyone's heavy work.
Past its own bound of waiting requests a client is refused alone (429), and so is an address past its
bound, whatever cookies its requests carry (a device that gathers cookies cannot fill the queue); past the
bound for everyone, or after the longest wait, a request is told to come back (503).
Waiting happens on the event loop, so a full queue never ties up the server's threads, and a request
cancelled while it waits (its client went away) leaves the queue at once.

Heavy work (Integrated Gradients, the measures, a model's load) takes one turn per slice of itself (Lab),
so that a request waits for at most one slice of it, never for the whole.

A request that gets its turn may take the jobs of those waiting behind it, in the same fair order, to do
them in the same pass (claim): each of them is then answered from that pass instead of taking a turn."""

import asyncio
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field


class Busy(RuntimeError):
    """No room: the client should retry after `retry_after` seconds (503)."""

    def __init__(self, message: str, retry_after: int):
        super().__init__(message)
        self.retry_after = retry_after


class TooManyWaiting(Busy):
    """This client alone has too many requests waiting (429); everyone else is still served."""


class Stopping(Busy):
    """The server is stopping (503): another replica, or this one restarted, answers the retry."""

    def __init__(self):
        super().__init__("this server is stopping: try again in a moment", 5)


@dataclass(frozen=True)
class Client:
    address: str
    cookie: str = ""


ANYONE = Client("")  # a caller with no client of its own (the engine used directly, as in tests)


@dataclass(eq=False)
class Turn:
    """A waiting request: resolved with None when it may run, or with the future of its answer when
    another request's pass has claimed its job."""

    keys: tuple[str, str]
    job: object = None  # what the request would run, offered to a claiming pass; None: not claimable
    ready: asyncio.Future = field(default_factory=lambda: asyncio.get_running_loop().create_future())


class Rotation:
    """Queues by key, served round the keys in turn: the key served goes to the back of the round. A key may
    start waiting ahead of the round, in one of the tiers before it (append's `tier`): the first tier's keys are
    served first, in the order they came, then the next tier's, and each then joins the round like any other.
    A turn from ahead of the round is followed by one from the round where the round has keys waiting: a
    steady stream of newcomers (a class's learners, each asking now and then) never holds the round back."""

    def __init__(self, tiers: int = 0):
        # key -> deque or Rotation, for each tier ahead of the round, and the round last; insertion order is the
        # order of turns within each
        self._tiers: list[dict] = [{} for _ in range(tiers + 1)]
        self._round_next = False  # the last turn came from ahead of the round

    def __len__(self) -> int:
        return sum(len(keys) for keys in self._tiers)

    def _tier_of(self, key) -> dict | None:
        return next((keys for keys in self._tiers if key in keys), None)

    def append(self, keys: tuple, item, tier: int | None = None) -> None:
        """`tier`: where the key waits if it waits for nothing yet: a tier ahead of the round, or the round
        (None)."""
        key, *inner = keys
        tier_keys = self._tier_of(key)
        if tier_keys is None:
            tier_keys = self._tiers[-1 if tier is None else tier]
            tier_keys[key] = Rotation() if inner else deque()
        queue = tier_keys[key]
        if inner:
            queue.append(tuple(inner), item)
        else:
            queue.append(item)

    def count(self, keys: tuple) -> int:
        key, *inner = keys
        tier_keys = self._tier_of(key)
        if tier_keys is None:
            return 0
        return tier_keys[key].count(tuple(inner)) if inner else len(tier_keys[key])

    def _next_keys(self) -> dict:
        """The keys whose first has the next turn: the round's after a turn from ahead of it, else the first
        tier with keys waiting."""
        if self._round_next and self._tiers[-1]:
            return self._tiers[-1]
        return next(keys for keys in self._tiers if keys)

    def peek(self):
        """The item whose turn is next, left in place."""
        queue = next(iter(self._next_keys().values()))
        return queue.peek() if isinstance(queue, Rotation) else queue[0]

    def popleft(self):
        keys = self._next_keys()
        key, queue = next(iter(keys.items()))
        item = queue.popleft()
        del keys[key]
        # The round's turn next where it had keys waiting (not this one, which joins it only now).
        self._round_next = keys is not self._tiers[-1] and bool(self._tiers[-1])
        if queue:
            self._tiers[-1][key] = queue
        return item

    def remove(self, keys: tuple, item) -> None:
        key, *inner = keys
        tier_keys = self._tier_of(key)
        queue = tier_keys[key]
        if inner:
            queue.remove(tuple(inner), item)
        else:
            queue.remove(item)
        if not queue:
            del tier_keys[key]


# An address none of whose requests has held a turn for this long is served before the round (Rotation), as
# fair queuing serves a sparse flow first (FQ-CoDel's new flows): a learner's short request, asked now and then,
# waits for the turn under way, not for a turn of every address with heavy work waiting (docs/serving.md: beside
# 24 Integrated Gradients from 24 addresses). Heavy work asks for its next slice's turn as its last one ends, so
# it stays in the round, one turn a round, as does a client that asks again at once. Among the rested, a short
# turn (admit's `short`: a learner's pass) goes before heavy work's first slice, not behind the first slices of
# fifteen kinds of heavy work asked for at once from fifteen addresses. The round still gets every other turn
# while newcomers keep coming (Rotation).
REST_SECONDS = 0.1
RESTED_SHORT, RESTED = 0, 1  # the tiers ahead of the round


class PassGate:
    def __init__(
        self,
        max_passes: int,
        max_waiting: int,
        max_waiting_per_client: int,
        max_wait_seconds: float,
        max_waiting_per_address: int | None = None,
    ):
        self.max_passes = max_passes
        self.max_waiting = max_waiting
        self.max_waiting_per_client = max_waiting_per_client
        self.max_waiting_per_address = max_waiting_per_address or max_waiting
        self.max_wait_seconds = max_wait_seconds
        self.running = 0
        self.waiting = 0
        self._turns = Rotation(tiers=2)  # the waiting requests' turns, by address, then by cookie
        self._by_address: Counter[str] = Counter()  # waiting requests per address
        self._holding: Counter[str] = Counter()  # turns held now, per address
        self._last_turn: dict[str, float] = {}  # address -> when its last turn ended (time.monotonic), lately
        self.stopping = False

    def stop(self) -> None:
        """The server is stopping: the requests waiting are told so at once (Stopping), and so is every request
        that asks for a turn from now on. Heavy work asks for one per slice, so it ends at its next slice,
        within the server's grace, instead of being cut off with the server."""
        self.stopping = True
        while self._turns:
            turn = self._turns.popleft()
            self._dequeued(turn)
            turn.ready.set_exception(Stopping())

    @asynccontextmanager
    async def admit(
        self, client: Client = ANYONE, job: object = None, short: bool = False
    ) -> AsyncIterator[asyncio.Future | None]:
        """Yields None when this request may run, or the future of its answer when a running pass claimed
        its `job` while it waited (it then takes no turn). `short`: the turn is a short pass (REST_SECONDS)."""
        if self.stopping:
            raise Stopping()
        if self.running < self.max_passes and self.waiting == 0:
            self.running += 1
            claimed = None
        else:
            claimed = await self._wait_for_turn(Turn((client.address, client.cookie), job), short)
        if claimed is None:
            self._holding[client.address] += 1
        try:
            yield claimed
        finally:
            if claimed is None:
                self._ended(client.address)
                self._pass_on()

    def _ended(self, address: str) -> None:
        """A turn of the address ended: when, for REST_SECONDS (the addresses not heard of since are rested)."""
        self._holding[address] -= 1
        if not self._holding[address]:
            del self._holding[address]
            now = time.monotonic()
            self._last_turn[address] = now
            if len(self._last_turn) > 256:
                self._last_turn = {at: end for at, end in self._last_turn.items() if now - end < REST_SECONDS}

    def _rested(self, address: str) -> bool:
        """Whether the address has held no turn for REST_SECONDS (and holds none now)."""
        ended = self._last_turn.get(address)
        return address not in self._holding and (ended is None or time.monotonic() - ended >= REST_SECONDS)

    def claim(self, accepts: Callable[[object], bool], limit: int) -> list[tuple[object, asyncio.Future]]:
        """Takes up to `limit` waiting jobs, in turn order, while the next one is one `accepts`: each with
        the future its request now waits on for its answer."""
        claimed = []
        while self._turns and len(claimed) < limit:
            turn = self._turns.peek()
            if turn.job is None or not accepts(turn.job):
                break
            self._dequeued(self._turns.popleft())
            answer = asyncio.get_running_loop().create_future()
            turn.ready.set_result(answer)
            claimed.append((turn.job, answer))
        return claimed

    def check_room(self, client: Client) -> None:
        """TooManyWaiting or Busy now where the client's request would be refused a place in line: called
        before the work a request does to get there (reading a long text's tokens), so that a client past
        its bound costs the server no more than this, however fast it asks again."""
        if self.running < self.max_passes and self.waiting == 0:
            return
        keys = (client.address, client.cookie)
        if self._turns.count(keys) >= self.max_waiting_per_client:
            raise TooManyWaiting(
                f"you already have {self.max_waiting_per_client} requests waiting for the model: "
                "wait for them, then try again",
                2,
            )
        if self._by_address[client.address] >= self.max_waiting_per_address:
            raise TooManyWaiting(
                f"this address already has {self.max_waiting_per_address} requests waiting for the model: "
                "wait for them, then try again",
                2,
            )
        if self.waiting >= self.max_waiting:
            raise Busy(f"{self.waiting} requests are already waiting for the model: try again in a moment", 2)

    async def _wait_for_turn(self, turn: Turn, short: bool) -> asyncio.Future | None:
        keys = turn.keys
        self.check_room(Client(*keys))
        self._turns.append(keys, turn, tier=(RESTED_SHORT if short else RESTED) if self._rested(keys[0]) else None)
        self.waiting += 1
        self._by_address[keys[0]] += 1
        try:
            async with asyncio.timeout(self.max_wait_seconds):
                return await asyncio.shield(turn.ready)
        except BaseException as error:
            if turn.ready.done():
                if turn.ready.exception() is None and turn.ready.result() is None:
                    # the turn came as the wait ended: give it to the next in line
                    self._pass_on()
            else:
                turn.ready.cancel()
                self._turns.remove(keys, turn)
                self._dequeued(turn)
            if isinstance(error, TimeoutError):
                raise Busy(f"waited {self.max_wait_seconds:g} s for the model: try again in a moment", 5) from None
            raise

    def _pass_on(self) -> None:
        """A pass ended: its slot goes to whoever's turn it is, or is freed."""
        if self._turns:
            turn = self._turns.popleft()
            self._dequeued(turn)
            turn.ready.set_result(None)
        else:
            self.running -= 1

    def _dequeued(self, turn: Turn) -> None:
        self.waiting -= 1
        self._by_address[turn.keys[0]] -= 1
        if not self._by_address[turn.keys[0]]:
            del self._by_address[turn.keys[0]]
