"""Guarded NVML calls: the only way readers touch the NVML module.

Every call goes through :meth:`NvmlSession.attempt` (``call`` is its value alone), which

* resolves the function on the injected module (pynvml, the simulator, or any compatible module);
  a module that lacks it costs exactly the values that function gives (docs/design.md, rule 6);
* times the call, per function, for the self-metrics and ``bench/``;
* classifies failures (:mod:`vgpumon.nvml.errors`): absent values are cached per GPU and call so
  that an unsupported call is paid for once, lifecycle errors abort the GPU's read with
  :class:`GpuDown`, and the rest are counted by function and error name.

A reader that must tell "nothing new" from "unsupported" from "failed" (to report an empty list as
empty, not unknown) reads :attr:`CallOutcome.status` instead of guessing from the error counters.

**Absence heals.** "Not supported" and "no permission" are sometimes transient (a driver hiccup, a
GPU being reset). A call that has answered on a GPU before is never cached as absent there: it is
asked again every cycle, so its value is back from the first cycle after the hiccup. A call that
never answered is cached, and forgotten after :data:`REPROBE_SECONDS` (checked when a cycle starts,
:meth:`NvmlSession.new_cycle`), after an NVML re-init (:meth:`NvmlSession.reset_all`) and when a
GPU is re-acquired: a transient answer never removes a series for good. An absence is
counted in the error counters the first time only, so a permanently unsupported call does not
count again at every re-probe.

**No lock on the per-call path.** Readers run in worker threads, several GPUs at once, and a lock
taken per call is contended by all of them on every call. Call statistics and error counts go
to a book owned by the calling thread (created once per thread, under the lock) and are merged when
asked for; the absence cache is a dict read without a lock (one dict lookup is atomic in CPython)
and written rarely. The successful path builds no objects beyond the argument tuple.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from vgpumon.model import NvmlErrorCount
from vgpumon.nvml.errors import LIBRARY_CODES, ErrorClass, classify, error_code, error_name
from vgpumon.nvml.library import preload


class GpuDown(Exception):
    """A lifecycle error: this GPU (or, with ``library=True``, all of NVML) must be re-acquired."""

    def __init__(self, gpu: str, function: str, error: str, *, library: bool) -> None:
        super().__init__(f"{function} on {gpu or 'NVML'}: {error}")
        self.gpu = gpu
        self.function = function
        self.error = error
        self.library = library


@dataclass
class CallStats:
    calls: int = 0
    seconds: float = 0.0
    max_seconds: float = 0.0


SYSTEM = ""  # the gpu key for calls that are not about one GPU

CallStatus = Literal["ok", "no_data", "absent", "error"]


@dataclass(frozen=True)
class CallOutcome:
    """What one guarded call came to; ``value`` is None unless ``status`` is "ok".

    * ``ok``: the call returned (its value may still be None).
    * ``no_data``: a return code the caller listed as a normal "nothing here" answer (or pynvml's
      SUCCESS raised as an error); neither counted nor cached.
    * ``absent``: not supported here (or the function is missing), now or cached from before;
      ``error`` names why, e.g. "function_not_found" (a driver too old for this call).
    * ``error``: a failure counted in the error counters; the value is unknown this time.

    Lifecycle errors have no outcome: they raise :class:`GpuDown`.
    """

    value: Any = None
    status: CallStatus = "ok"
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass(frozen=True)
class Tally:
    """One thread's NVML calls so far (:meth:`NvmlSession.tally`)."""

    returned: int  # came back, answered or not
    failed: int  # failed (an "error" outcome: timeout, unknown error...)
    unanswered: int  # failed, or not supported: no value
    last_error: str  # the error name of the latest failure ("" before any)

    def since(self, before: Tally) -> Tally:
        return Tally(
            self.returned - before.returned,
            self.failed - before.failed,
            self.unanswered - before.unanswered,
            self.last_error,
        )

    @property
    def all_failed(self) -> bool:
        """Calls were made, some failed, and none answered: nothing was read."""
        return self.failed > 0 and self.unanswered >= self.returned


# How long a cached "not supported" / "no permission" is believed before the call is tried again.
REPROBE_SECONDS = 60.0


def _about_gpu(function: str) -> bool:
    """Whether a call's answer says anything of the GPU it was made for: a system-wide call
    (``nvmlSystem*``, e.g. the confidential-computing state a GPU's collector reads) answers
    whatever the GPU does, so it is left out of the tallies below (timed and counted all the
    same): a GPU none of whose own calls answered is not read, though the system's did."""
    return not function.startswith("nvmlSystem")


class _Book:
    """One thread's call statistics and error counts; only that thread writes it."""

    __slots__ = ("errors", "failed", "last_error", "returned", "stats", "unanswered")

    def __init__(self) -> None:
        # calls about a GPU that came back (returned or raised); a hung call never does
        self.returned = 0
        # of those, the ones that failed (an "error" outcome), and the ones that gave no answer
        # at all (failed, or not supported): the sampler tells a collector, or a GPU, whose every
        # call failed from one that answered something (:meth:`NvmlSession.tally`)
        self.failed = 0
        self.unanswered = 0
        self.last_error = ""
        # function -> [calls, seconds, max_seconds]
        self.stats: dict[str, list[float]] = {}
        self.errors: dict[tuple[str, str], int] = {}


class NvmlSession:
    """One NVML module plus the bookkeeping that keeps reading it honest."""

    def __init__(
        self,
        module: Any,
        source: str,
        *,
        reprobe_seconds: float = REPROBE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.module = module
        self.source = source
        self.reprobe_seconds = reprobe_seconds
        self._clock = clock
        self._lock = threading.Lock()  # taken only to register a book or to write the cache
        # (gpu, function, key) -> the error name that made it absent
        self._absent: dict[tuple[str, str, Hashable], str] = {}
        # when each absence was cached (for re-probing), and every key ever counted as absent
        self._absent_since: dict[tuple[str, str, Hashable], float] = {}
        self._counted_absent: set[tuple[str, str, Hashable]] = set()
        # Calls that have answered on this GPU: their "not supported" is a passing state (a
        # driver hiccup, a reset), so it is never cached and the next cycle asks again.
        self._answered: set[tuple[str, str, Hashable]] = set()
        self._books: list[_Book] = []
        self._local = threading.local()

    # ------------------------------------------------------------------ lifecycle

    def init(self) -> None:
        """nvmlInit; raises the module's exception unchanged (the caller decides on backoff)."""
        if not self.source.startswith("sim:"):
            preload()  # the library from $VGPUMON_NVML_LIBRARY where it is set (library.py)
        self.module.nvmlInit()

    def shutdown(self) -> None:
        with contextlib.suppress(Exception):
            self.module.nvmlShutdown()

    def reset_gpu(self, gpu: str) -> None:
        """Forget cached absences for a GPU that was re-acquired (its support may differ now)."""
        with self._lock:
            for k in [k for k in self._absent if k[0] == gpu]:
                self._forget(k)
            self._counted_absent = {k for k in self._counted_absent if k[0] != gpu}
            self._answered = {k for k in self._answered if k[0] != gpu}

    def forget(self, gpu: str, function: str, key: Hashable = ()) -> None:
        """Forget one cached absence now (a call too important to wait for the re-probe)."""
        with self._lock:
            self._forget((gpu, function, key))

    def reset_all(self) -> None:
        """Forget every cached absence: NVML was initialised again and may answer differently."""
        with self._lock:
            self._absent.clear()
            self._absent_since.clear()

    def new_cycle(self) -> None:
        """Re-probe absences older than ``reprobe_seconds``: the next call tries them again."""
        if not self._absent_since:
            return
        cutoff = self._clock() - self.reprobe_seconds
        with self._lock:
            for k in [k for k, since in self._absent_since.items() if since <= cutoff]:
                self._forget(k)

    def _forget(self, k: tuple[str, str, Hashable]) -> None:
        self._absent.pop(k, None)
        self._absent_since.pop(k, None)

    # ------------------------------------------------------------------ calls

    def has(self, function: str) -> bool:
        return callable(getattr(self.module, function, None))

    def is_absent(self, gpu: str, function: str, key: Hashable = ()) -> bool:
        return (gpu, function, key) in self._absent

    def call(
        self,
        gpu: str,
        function: str,
        *args: Any,
        key: Hashable = (),
        no_data: Iterable[int] = (),
        **kwargs: Any,
    ) -> Any:
        """Call ``module.<function>(*args)``; return its value or None when there is none.

        The value of :meth:`attempt`, for callers to whom every kind of "no value" is the same.
        This is the hot path (hundreds of calls per GPU per second on a vGPU host), so it is
        :meth:`attempt` inlined for the successful case: no outcome object, no lock.
        """
        cache_key = (gpu, function, key)
        if cache_key in self._absent:
            return None
        fn = getattr(self.module, function, None)
        if not callable(fn):
            return self._mark_absent(cache_key, function, "function_not_found").value
        start = time.perf_counter()
        try:
            value = fn(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001
            return self._failed(exc, cache_key, frozenset(no_data)).value
        finally:
            self._time(function, time.perf_counter() - start)
        self._answered.add(cache_key)  # a set add of a key already there allocates nothing
        return value

    def attempt(
        self,
        gpu: str,
        function: str,
        *args: Any,
        key: Hashable = (),
        no_data: Iterable[int] = (),
        **kwargs: Any,
    ) -> CallOutcome:
        """Call ``module.<function>(*args)`` and say what came of it.

        ``gpu`` is the GPU's UUID (or :data:`SYSTEM`); ``key`` distinguishes calls of the same
        function whose support differs by argument (clock type, sensor, cap id). ``no_data`` lists
        return codes that are a normal "nothing new" answer for this call (e.g. NOT_FOUND from the
        sample APIs): they come back as "no_data", neither counted nor cached. Raises
        :class:`GpuDown` for lifecycle errors.
        """
        cache_key = (gpu, function, key)
        fn = getattr(self.module, function, None)
        if not callable(fn):
            # Not timed: nothing was called. Counted once, like any absence.
            return self._mark_absent(cache_key, function, "function_not_found")
        call: Callable[..., Any] = fn
        return self._guarded(cache_key, no_data, lambda: CallOutcome(call(*args, **kwargs)))

    def raw_function(self, symbol: str) -> Any:
        """A C function pointer from the loaded library, for calls pynvml wraps wrongly.

        Only real pynvml has ``_nvmlGetFunctionPointer``; for other modules this returns None and
        the caller uses the module's Python function (the simulator returns true values there).
        """
        getter = getattr(self.module, "_nvmlGetFunctionPointer", None)
        if getter is None:
            return None
        return getter(symbol)

    def call_raw(
        self,
        gpu: str,
        symbol: str,
        *args: Any,
        key: Hashable = (),
        no_data: Iterable[int] = (),
    ) -> bool | None:
        """Call a raw C symbol with ctypes arguments; True on success, None when there is no value.

        ``no_data`` and error handling are those of :meth:`attempt`.
        """
        return self.attempt_raw(gpu, symbol, *args, key=key, no_data=no_data).value

    def attempt_raw(
        self,
        gpu: str,
        symbol: str,
        *args: Any,
        key: Hashable = (),
        no_data: Iterable[int] = (),
    ) -> CallOutcome:
        """:meth:`attempt` for a raw C symbol; an "ok" outcome's value is True (return code 0)."""
        cache_key = (gpu, symbol, key)

        def invoke() -> CallOutcome:
            # Looking the symbol up is part of the call: pynvml raises FUNCTION_NOT_FOUND for a
            # symbol the loaded driver lacks, which is classified like any other absence.
            fn = self.raw_function(symbol)
            if fn is None:
                return self._mark_absent(cache_key, symbol, "function_not_found")
            ret = fn(*args)
            if ret != 0:
                raise self.module.NVMLError(ret)
            return CallOutcome(True)

        return self._guarded(cache_key, no_data, invoke)

    # ------------------------------------------------------------------ bookkeeping

    def _guarded(
        self,
        cache_key: tuple[str, str, Hashable],
        no_data: Iterable[int],
        invoke: Callable[[], CallOutcome],
    ) -> CallOutcome:
        """Run ``invoke`` unless the call is known to be absent; time it and classify failures."""
        reason = self._absent.get(cache_key)
        if reason is not None:
            return CallOutcome(status="absent", error=reason)
        start = time.perf_counter()
        try:
            outcome = invoke()
        except Exception as exc:  # noqa: BLE001
            return self._failed(exc, cache_key, frozenset(no_data))
        finally:
            self._time(cache_key[1], time.perf_counter() - start)
        if outcome.status == "ok":
            self._answered.add(cache_key)
        elif _about_gpu(cache_key[1]):  # a raw symbol the library lacks: came back, no answer
            self._book().unanswered += 1
        return outcome

    def _failed(
        self, exc: Exception, cache_key: tuple[str, str, Hashable], no_data: frozenset[int]
    ) -> CallOutcome:
        gpu, function, _key = cache_key
        if isinstance(exc, UnicodeDecodeError) and isinstance(exc.object, bytes):
            # pynvml decodes names strictly; a driver string that is not UTF-8 (a GPU, vGPU type
            # or process name) is still the name: keep it, with replacement characters.
            raw = exc.object.split(b"\x00", 1)[0]
            return CallOutcome(raw.decode("utf-8", "replace"))
        code = error_code(exc)
        name = error_name(exc)
        if code == 0 or (code is not None and code in no_data):
            # code 0: pynvml raises NVMLError(SUCCESS) when a sizing call finds no samples.
            return CallOutcome(status="no_data", error=name)
        kind = classify(exc)
        book = self._book()
        about_gpu = _about_gpu(function)
        book.unanswered += about_gpu
        if kind is ErrorClass.ABSENT:
            return self._mark_absent(cache_key, function, name)
        self._count(function, name)
        if kind is ErrorClass.LIFECYCLE:
            raise GpuDown(gpu, function, name, library=code in LIBRARY_CODES) from exc
        book.failed += about_gpu
        book.last_error = name
        return CallOutcome(status="error", error=name)

    def _mark_absent(
        self, cache_key: tuple[str, str, Hashable], function: str, name: str
    ) -> CallOutcome:
        """Cache the absence (counted once ever per key, by whoever caches it first).

        A call that has answered before on this GPU is not cached: its absence is transient,
        and its value is read again from the next cycle on, not a re-probe period later.
        """
        with self._lock:
            if cache_key in self._answered:
                reason = name
            else:
                reason = self._absent.setdefault(cache_key, name)
                self._absent_since.setdefault(cache_key, self._clock())
            first = cache_key not in self._counted_absent
            self._counted_absent.add(cache_key)
        if first:
            self._count(function, name)
        return CallOutcome(status="absent", error=reason)

    def _book(self) -> _Book:
        book: _Book | None = getattr(self._local, "book", None)
        if book is None:
            book = self._local.book = _Book()
            with self._lock:
                self._books.append(book)
        return book

    def _count(self, function: str, name: str) -> None:
        errors = self._book().errors
        errors[(function, name)] = errors.get((function, name), 0) + 1

    def _time(self, function: str, seconds: float) -> None:
        book: _Book | None = getattr(self._local, "book", None)
        if book is None:
            book = self._book()
        book.returned += _about_gpu(function)
        st = book.stats.get(function)
        if st is None:
            book.stats[function] = [1, seconds, seconds]
        else:
            st[0] += 1
            st[1] += seconds
            if seconds > st[2]:
                st[2] = seconds

    def returned_calls(self) -> Callable[[], int]:
        """How many of the calling thread's NVML calls have come back so far, as a function
        another thread may call: the sampler tells a GPU that stopped answering (no call of its
        job came back) from one collector hung after others answered."""
        book = self._book()
        return lambda: book.returned

    def tally(self) -> Tally:
        """The calling thread's counts so far: calls that came back, that failed, that gave no
        answer; the difference of two tallies is what the calls between them came to."""
        book = self._book()
        return Tally(book.returned, book.failed, book.unanswered, book.last_error)

    def error_counts(self) -> tuple[NvmlErrorCount, ...]:
        """Error counts of every thread, merged (a snapshot: threads may be counting meanwhile)."""
        with self._lock:
            books = list(self._books)
        merged: dict[tuple[str, str], int] = {}
        for book in books:
            for k, n in list(book.errors.items()):  # list(): one C-level copy under the GIL
                merged[k] = merged.get(k, 0) + n
        return tuple(
            NvmlErrorCount(function=f, error=e, count=n) for (f, e), n in sorted(merged.items())
        )

    def call_stats(self) -> dict[str, CallStats]:
        """Per-function call statistics of every thread, merged."""
        with self._lock:
            books = list(self._books)
        merged: dict[str, CallStats] = {}
        for book in books:
            for function, (calls, seconds, top) in list(book.stats.items()):
                st = merged.setdefault(function, CallStats())
                st.calls += int(calls)
                st.seconds += seconds
                st.max_seconds = max(st.max_seconds, top)
        return merged
