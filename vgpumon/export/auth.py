"""HTTP basic auth against the bcrypt hashes of a Prometheus ``web-config.yml``.

bcrypt is slow on purpose (its work doubles with each cost step) and Prometheus may scrape every
second, so:

* checks run on one dedicated worker thread, never on the event loop, and one at a time (the
  exporter toolkit serialises them with a mutex for the same reason: a flood of bad passwords
  must not eat every core);
* a successful check is remembered, keyed by (user, SHA-256 of the password), with the hash it
  was checked against, so a steady scrape costs one SHA-256 and a changed hash applies at once;
* an unknown user's password is checked against a fixed dummy hash of cost
  :data:`DUMMY_COST` (10), as the exporter toolkit checks it against its fixed cost-10 hash, and
  a known user's against that user's hash: no request costs more than the hash it names, so one
  user with an expensive hash does not make every anonymous request pay for it. (The toolkit's
  trade-off too: a user whose cost is not 10 answers in another time than an unknown name.)
  Failures are never cached;
* a hash above the cost ceiling (``max_cost``, ``--web.bcrypt-max-cost``, default
  :data:`~vgpumon.export.limits.DEFAULT_BCRYPT_MAX_COST`) is never checked: its user is refused
  at once (401) and a warning says so when the file is read. Cost 31 takes days per check: one
  such check would hold the bcrypt worker, and every first login behind it, that long;
* the worker is a daemon thread: a check still running when the exporter is told to stop
  (SIGTERM) does not keep the process alive;
* the bcrypt queue is bounded (``max_pending``, and a share per client address) and ranked, so a
  flood of wrong passwords from many addresses neither queues without bound nor pushes a first
  login out (:class:`BasicAuth` says how); past the bounds a check is refused at once with
  :class:`AuthRefused` instead of waiting;
* failed attempts are rate limited per client address (:class:`FailureLimiter`): an address
  that failed ``burst`` times is refused without a bcrypt until its bucket refills. A success
  already cached is never limited, so a scraper keeps working while someone else guesses.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import hashlib
import heapq
import hmac
import itertools
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import bcrypt

from vgpumon.export.limits import DEFAULT_BCRYPT_MAX_COST, MAX_BCRYPT_COST, MIN_BCRYPT_COST

# $2a$ / $2b$ / $2x$ / $2y$, a two-digit cost, then 22 salt + 31 hash characters (bcrypt's base64).
_BCRYPT_RE = re.compile(r"\$2[abxy]\$(\d\d)\$[./A-Za-z0-9]{53}", re.ASCII)
DUMMY_COST = 10  # what an unknown user's check costs (the exporter toolkit's fixed dummy hash)
# bcrypt only ever reads the first 72 bytes of a password. Go's bcrypt (the exporter toolkit's) and
# htpasswd silently ignore the rest; bcrypt>=5 for Python raises instead, so truncate first.
BCRYPT_MAX_PASSWORD_BYTES = 72
CACHE_SIZE = 100
MAX_PENDING = 8  # bcrypt checks queued (not counting the one running)
PER_ADDRESS_PENDING = 2  # of which one client address may have this many
FAILURE_BURST = 10  # failed attempts an address may make at once ...
FAILURES_PER_SECOND = 1.0  # ... and then this many per second
TRACKED_ADDRESSES = 4096  # addresses whose failures are remembered (oldest forgotten first)


class AuthRefused(Exception):
    """A check refused before any bcrypt ran; ``status`` is the HTTP answer (429 or 503)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


class FailureLimiter:
    """A token bucket of failed attempts per client address (event loop only, no locking)."""

    def __init__(
        self,
        burst: int = FAILURE_BURST,
        per_second: float = FAILURES_PER_SECOND,
        tracked: int = TRACKED_ADDRESSES,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst = burst
        self.per_second = per_second
        self.tracked = tracked
        self._clock = clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def _tokens(self, address: str) -> float:
        tokens, last = self._buckets.get(address, (float(self.burst), self._clock()))
        return min(float(self.burst), tokens + (self._clock() - last) * self.per_second)

    def allowed(self, address: str) -> bool:
        return self._tokens(address) >= 1.0

    def has_failed(self, address: str) -> bool:
        """True while a failed attempt from ``address`` is remembered."""
        return address in self._buckets

    def failed(self, address: str) -> None:
        self._buckets[address] = (self._tokens(address) - 1.0, self._clock())
        self._buckets.move_to_end(address)
        while len(self._buckets) > self.tracked:
            self._buckets.popitem(last=False)


def bcrypt_hash_error(hashed: str) -> str | None:
    """Why ``hashed`` is not a bcrypt hash this module can check, or None when it is."""
    match = _BCRYPT_RE.fullmatch(hashed)
    if match is None:
        return "is not a bcrypt hash (expected $2a$, $2b$, $2x$ or $2y$, a cost, 53 characters)"
    cost = int(match.group(1))
    if not MIN_BCRYPT_COST <= cost <= MAX_BCRYPT_COST:
        return f"has bcrypt cost {cost}, outside {MIN_BCRYPT_COST}..{MAX_BCRYPT_COST}"
    return None


def _cost(hashed: bytes) -> int:
    return int(hashed[4:6])


def _dummy_hash(cost: int) -> bytes:
    """A well-formed hash no password matches in practice; checking against it costs a real bcrypt.

    bcrypt derives the digest from the password, salt and cost and only then compares, so the time
    taken does not depend on whether the stored digest came from a real password.
    """
    return b"$2b$%02d$" % cost + b"." * 53


def parse_basic_authorization(header: str | None) -> tuple[bytes, bytes] | None:
    """(user, password) from an ``Authorization: Basic`` header, as Go's ``Request.BasicAuth``."""
    prefix = "basic "
    if header is None or len(header) < len(prefix) or header[: len(prefix)].lower() != prefix:
        return None
    try:
        decoded = base64.b64decode(header[len(prefix) :].encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        return None
    user, sep, password = decoded.partition(b":")
    if not sep:
        return None
    return user, password


class BcryptChecker:
    """``bcrypt.checkpw`` that counts its calls, so tests can prove which paths pay for a bcrypt."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls = 0

    def __call__(self, password: bytes, hashed: bytes) -> bool:
        with self._lock:
            self.calls += 1
        try:
            return bcrypt.checkpw(password[:BCRYPT_MAX_PASSWORD_BYTES], hashed)
        except ValueError:  # a NUL byte in the password, or a hash bcrypt cannot read
            return False


@dataclass(order=True)
class _Job:
    """A bcrypt check waiting for the worker: lower ``rank`` first, then first come."""

    rank: tuple[int, int]
    seq: int
    address: str = field(compare=False)
    run: Callable[[], bool] = field(compare=False)
    done: asyncio.Future[bool] = field(compare=False)


class BasicAuth:
    """The users of one web config (replaceable on reload) plus the cache of verified passwords.

    bcrypt checks run one at a time on one worker thread, taken from a queue by rank, so a
    flood of wrong passwords cannot starve a first login (after a restart or a password change):

    * an address with no failed login on record goes before one with failures, and a known user
      before an unknown one; so a flood, after each of its addresses failed once, waits behind
      every first login instead of in front of it;
    * an address may have at most ``per_address`` checks queued (past that: 429 at once), and
      the queue holds at most ``max_pending``: when full, a new check of better rank takes the
      place of the worst one queued (which gets a 503), a worse one is refused with a 503;
    * failures are rate limited per address (:class:`FailureLimiter`).
    """

    def __init__(
        self,
        users: Mapping[str, str] | None = None,
        *,
        cache_size: int = CACHE_SIZE,
        max_pending: int = MAX_PENDING,
        per_address: int = PER_ADDRESS_PENDING,
        limiter: FailureLimiter | None = None,
        max_cost: int = DEFAULT_BCRYPT_MAX_COST,
    ) -> None:
        self.checker = BcryptChecker()
        self.max_pending = max_pending
        self.per_address = per_address
        self.limiter = limiter or FailureLimiter()
        self._queue: list[_Job] = []
        self._seq = itertools.count()
        self._by_address: dict[str, int] = {}
        self._worker: asyncio.Task[None] | None = None
        self._cache_size = cache_size
        self._cache: OrderedDict[tuple[bytes, bytes], bytes] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._closed = False
        self._running: _Job | None = None  # the check on its thread now
        self._users: dict[bytes, bytes] = {}
        self.max_cost = max_cost
        self._locked: frozenset[bytes] = frozenset()  # users whose hash is above max_cost
        self._dummy = _dummy_hash(DUMMY_COST)
        self.set_users(users or {})

    @property
    def enabled(self) -> bool:
        """Basic auth is required only when the file lists at least one user (as in the toolkit)."""
        return bool(self._users)

    def set_users(self, users: Mapping[str, str]) -> list[str]:
        """Swap in a new user table; cached successes stay valid only while the user's hash does.
        Returns a warning per user whose hash costs more than :attr:`max_cost` (refused at once)."""
        table = {name.encode("utf-8"): hashed.encode("ascii") for name, hashed in users.items()}
        for name, hashed in table.items():
            error = bcrypt_hash_error(hashed.decode("ascii"))
            if error is not None:
                raise ValueError(f"basic_auth_users.{name.decode('utf-8', 'replace')} {error}")
        self._users = table
        self._locked = frozenset(n for n, h in table.items() if _cost(h) > self.max_cost)
        return [
            over_ceiling(n.decode("utf-8", "replace"), _cost(table[n]), self.max_cost)
            for n in sorted(self._locked)
        ]

    async def check(self, authorization: str | None, client: str = "") -> bool:
        """True when the ``Authorization`` header names a configured user and their password.

        ``client`` is the peer address the failure limit and the queue share count against.
        Raises :class:`AuthRefused` when a bcrypt would be needed but the address is over its
        failure limit or its share of the queue (429), or the queue is full of better-ranked
        checks (503).
        """
        credentials = parse_basic_authorization(authorization)
        if credentials is None:
            return False
        user, password = credentials
        hashed = self._users.get(user)
        key = (user, hashlib.sha256(password).digest())
        if user in self._locked:  # a hash above the ceiling is never checked: refused at once
            self.limiter.failed(client)
            return False
        if hashed is not None:
            with self._cache_lock:
                verified = self._cache.get(key)
                if verified is not None:
                    self._cache.move_to_end(key)
            if verified is not None and hmac.compare_digest(verified, hashed):
                return True
        if not self.limiter.allowed(client):
            raise AuthRefused(429, "too many failed logins from this address")
        if self._by_address.get(client, 0) >= self.per_address:
            raise AuthRefused(429, "too many logins being checked for this address")
        rank = (int(self.limiter.has_failed(client)), int(hashed is None))
        ok = await self._queued(rank, client, self._verifier(password, hashed))
        if not ok or hashed is None:
            self.limiter.failed(client)
            return False
        with self._cache_lock:
            self._cache[key] = hashed
            self._cache.move_to_end(key)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return True

    def _verifier(self, password: bytes, hashed: bytes | None) -> Callable[[], bool]:
        """The bcrypt work of one check: the user's own hash, or the fixed cost-10 dummy for a
        name that is no user (so an unknown name is not answered at once, yet costs what the
        toolkit's costs, whatever hashes the file holds)."""
        checker = self.checker
        if hashed is None:
            dummy = self._dummy
            return lambda: checker(password, dummy) and False
        known = hashed
        return lambda: checker(password, known)

    async def _queued(self, rank: tuple[int, int], address: str, run: Callable[[], bool]) -> bool:
        loop = asyncio.get_running_loop()
        job = _Job(rank, next(self._seq), address, run, loop.create_future())
        if len(self._queue) >= self.max_pending:
            worst = max(self._queue)
            if worst < job:
                raise AuthRefused(503, "too many logins being checked")
            self._queue.remove(worst)
            heapq.heapify(self._queue)
            self._forget(worst.address)
            worst.done.set_exception(AuthRefused(503, "too many logins being checked"))
        heapq.heappush(self._queue, job)
        self._by_address[address] = self._by_address.get(address, 0) + 1
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._work())
        try:
            return await job.done
        finally:
            if job in self._queue:  # the request went away before its turn
                self._queue.remove(job)
                heapq.heapify(self._queue)
                self._forget(address)

    def _forget(self, address: str) -> None:
        left = self._by_address.get(address, 0) - 1
        if left > 0:
            self._by_address[address] = left
        else:
            self._by_address.pop(address, None)

    async def _work(self) -> None:
        """Run queued checks one at a time, best rank first, each on a daemon thread."""
        while self._queue:
            job = heapq.heappop(self._queue)
            self._forget(job.address)
            if job.done.done():  # refused or given up meanwhile: no bcrypt for nobody
                continue
            if self._closed:
                job.done.set_exception(AuthRefused(503, "shutting down"))
                continue
            self._running = job
            try:
                ok = await _in_daemon_thread(job.run)
            except (RuntimeError, ValueError) as err:
                if not job.done.done():
                    job.done.set_exception(err)
                continue
            finally:
                self._running = None
            if not job.done.done():
                job.done.set_result(ok)

    def close(self) -> None:
        """Refuse the checks queued and the one running (their requests get 503 now); the
        running bcrypt ends on its daemon thread, which never holds the process."""
        self._closed = True
        running = [self._running] if self._running is not None else []
        for job in (*running, *self._queue):
            if not job.done.done():  # its request answers now: a shutdown waits for no bcrypt
                job.done.set_exception(AuthRefused(503, "shutting down"))


async def _in_daemon_thread(run: Callable[[], bool]) -> bool:
    """``run()`` on a daemon thread of its own, awaited: unlike an executor's worker (which the
    interpreter joins at exit), a bcrypt of a high cost still running never delays the exit."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[bool] = loop.create_future()

    def settle(ok: bool | None, err: BaseException | None) -> None:
        if done.done():
            return
        if err is not None:
            done.set_exception(err)
        else:
            done.set_result(bool(ok))

    def target() -> None:
        try:
            result, error = run(), None
        except Exception as exc:  # noqa: BLE001 - handed to the waiting coroutine
            result, error = None, exc
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
            loop.call_soon_threadsafe(settle, result, error)

    threading.Thread(target=target, name="vgpumon-bcrypt", daemon=True).start()
    return await done


def over_ceiling(user: str, cost: int, ceiling: int) -> str:
    """The warning for a user whose hash is never checked."""
    return (
        f"basic_auth_users.{user} has bcrypt cost {cost}, above the ceiling {ceiling} "
        "(--web.bcrypt-max-cost): that user is refused without a check; hash the password "
        "again with a lower cost (e.g. htpasswd -nbBC 10 USER) or raise the ceiling"
    )
