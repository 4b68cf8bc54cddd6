"""HTTP basic auth against the bcrypt hashes of a Prometheus ``web-config.yml``.

bcrypt is slow on purpose (tens of milliseconds at cost 10) and Prometheus may scrape every
second, so:

* checks run on one dedicated worker thread, never on the event loop, and one at a time (the
  exporter toolkit serialises them with a mutex for the same reason: a flood of bad passwords
  must not eat every core);
* a successful check is remembered, keyed by (user, SHA-256 of the password), with the hash it
  was checked against, so a steady scrape costs one SHA-256 and a changed hash applies at once;
* an unknown user still costs one bcrypt (against a dummy hash of the configured cost), so timing
  does not tell which user names exist. Failures are never cached;
* the bcrypt queue is bounded (``max_pending``): past it a check is refused at once with
  :class:`AuthRefused` instead of waiting. 200 concurrent wrong passwords used to queue without
  bound on the one thread and made a fresh valid login wait 10 s (Prometheus' scrape timeout);
* failed attempts are rate limited per client address (:class:`FailureLimiter`): an address
  that failed ``burst`` times is refused without a bcrypt until its bucket refills. A success
  already cached is never limited, so a scraper keeps working while someone else guesses.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor

import bcrypt

# $2a$ / $2b$ / $2x$ / $2y$, a two-digit cost, then 22 salt + 31 hash characters (bcrypt's base64).
_BCRYPT_RE = re.compile(r"\$2[abxy]\$(\d\d)\$[./A-Za-z0-9]{53}", re.ASCII)
_MIN_COST, _MAX_COST = 4, 31
# bcrypt only ever reads the first 72 bytes of a password. Go's bcrypt (the exporter toolkit's) and
# htpasswd silently ignore the rest; bcrypt>=5 for Python raises instead, so truncate first.
BCRYPT_MAX_PASSWORD_BYTES = 72
CACHE_SIZE = 100
MAX_PENDING = 8  # bcrypt checks queued or running; at cost 10 (~50 ms) a new one waits <= 0.4 s
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
    if not _MIN_COST <= cost <= _MAX_COST:
        return f"has bcrypt cost {cost}, outside {_MIN_COST}..{_MAX_COST}"
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


class BasicAuth:
    """The users of one web config (replaceable on reload) plus the cache of verified passwords."""

    def __init__(
        self,
        users: Mapping[str, str] | None = None,
        *,
        cache_size: int = CACHE_SIZE,
        max_pending: int = MAX_PENDING,
        limiter: FailureLimiter | None = None,
    ) -> None:
        self.checker = BcryptChecker()
        self.max_pending = max_pending
        self.limiter = limiter or FailureLimiter()
        self._pending = 0
        self._cache_size = cache_size
        self._cache: OrderedDict[tuple[bytes, bytes], bytes] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._users: dict[bytes, bytes] = {}
        self._dummy = _dummy_hash(10)
        self.set_users(users or {})

    @property
    def enabled(self) -> bool:
        """Basic auth is required only when the file lists at least one user (as in the toolkit)."""
        return bool(self._users)

    def set_users(self, users: Mapping[str, str]) -> None:
        """Swap in a new user table; cached successes stay valid only while the user's hash does."""
        table = {name.encode("utf-8"): hashed.encode("ascii") for name, hashed in users.items()}
        for name, hashed in table.items():
            error = bcrypt_hash_error(hashed.decode("ascii"))
            if error is not None:
                raise ValueError(f"basic_auth_users.{name.decode('utf-8', 'replace')} {error}")
        self._users = table
        # Unknown users pay what the most expensive real user pays, so no user name stands out.
        self._dummy = _dummy_hash(max((_cost(h) for h in table.values()), default=10))

    async def check(self, authorization: str | None, client: str = "") -> bool:
        """True when the ``Authorization`` header names a configured user and their password.

        ``client`` is the peer address the failure limit counts against. Raises
        :class:`AuthRefused` when a bcrypt would be needed but the address is over its failure
        limit (429) or the bcrypt queue is full (503).
        """
        credentials = parse_basic_authorization(authorization)
        if credentials is None:
            return False
        user, password = credentials
        hashed = self._users.get(user)
        key = (user, hashlib.sha256(password).digest())
        if hashed is not None:
            with self._cache_lock:
                verified = self._cache.get(key)
                if verified is not None:
                    self._cache.move_to_end(key)
            if verified is not None and hmac.compare_digest(verified, hashed):
                return True
        if not self.limiter.allowed(client):
            raise AuthRefused(429, "too many failed logins from this address")
        if self._pending >= self.max_pending:
            raise AuthRefused(503, "too many logins being checked")
        target = self._dummy if hashed is None else hashed
        loop = asyncio.get_running_loop()
        self._pending += 1
        try:
            ok = await loop.run_in_executor(self._pool(), self.checker, password, target)
        finally:
            self._pending -= 1
        if not ok or hashed is None:
            self.limiter.failed(client)
            return False
        with self._cache_lock:
            self._cache[key] = hashed
            self._cache.move_to_end(key)
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return True

    def _pool(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vgpumon-bcrypt")
        return self._executor

    def close(self) -> None:
        """Stop the bcrypt worker thread (a later check starts a new one)."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
