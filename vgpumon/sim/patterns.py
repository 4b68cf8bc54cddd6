"""Deterministic value patterns over scenario time.

A scenario describes every changing quantity (load, power, memory, a process's SM use) as a pattern:
a constant, a square wave, a ramp, a sine, steps, or seeded noise, optionally with seeded jitter on
top. Patterns are pure functions of (seed, salt, t) so the same scenario and clock always give the
same readings, whichever thread asks and in whatever order; the salt (e.g. ``gpus[3].load.duty``)
keeps replicated GPUs from sharing one noise stream.
"""

from __future__ import annotations

import functools
import hashlib
import math
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

Evaluator = Callable[[float], float]


def unit_noise(seed: int, salt: str, k: int) -> float:
    """A reproducible value in [-1, 1) for integer step ``k`` (never Python's salted ``hash``)."""
    digest = hashlib.blake2b(f"{seed}|{salt}|{k}".encode(), digest_size=8).digest()
    (n,) = struct.unpack("<Q", digest)
    return n / 2**63 - 1.0


def value_noise(seed: int, salt: str, t: float, interval: float) -> float:
    """Smooth noise in [-1, 1): seeded values every ``interval`` seconds, linearly interpolated."""
    x = t / interval
    k = math.floor(x)
    frac = x - k
    a = unit_noise(seed, salt, k)
    b = unit_noise(seed, salt, k + 1)
    return a + (b - a) * frac


@dataclass(frozen=True)
class PatternSpec:
    """A parsed pattern; ``build`` binds it to a seed and salt."""

    kind: str  # constant | square | ramp | sine | noise | steps
    params: dict[str, float] = field(default_factory=dict)
    steps: tuple[tuple[float, float], ...] = ()
    jitter: float = 0.0
    jitter_interval: float = 1.0
    lo: float | None = None
    hi: float | None = None

    @staticmethod
    def constant(value: float) -> PatternSpec:
        return PatternSpec("constant", {"value": float(value)})

    @property
    def is_constant(self) -> bool:
        return self.kind == "constant" and self.jitter == 0.0

    def constant_value(self) -> float | None:
        return self.params["value"] if self.is_constant else None

    def build(
        self, seed: int, salt: str, lo: float | None = None, hi: float | None = None
    ) -> Evaluator:
        low = self.lo if self.lo is not None else lo
        high = self.hi if self.hi is not None else hi
        if self.is_constant:
            # Most loads of a large scenario are constants (every engine a vGPU does not use):
            # one shared function per value, not a closure per instance and key holding its salt.
            return _constant(_clamp(self.params["value"], low, high))
        base = _base(self, seed, salt)
        jitter, interval = self.jitter, self.jitter_interval

        def evaluate(t: float) -> float:
            v = base(t)
            if jitter:
                v += jitter * value_noise(seed, salt + "#jitter", t, interval)
            if low is not None and v < low:
                v = low
            if high is not None and v > high:
                v = high
            return v

        return evaluate


def _clamp(v: float, low: float | None, high: float | None) -> float:
    if low is not None and v < low:
        v = low
    if high is not None and v > high:
        v = high
    return v


@functools.lru_cache(maxsize=1024)
def _shared_constant(value: float, negative_zero: bool) -> Evaluator:
    return lambda t: value


def _constant(value: float) -> Evaluator:
    # 0.0 == -0.0 (one cache key) but they print differently: the sign is part of the key.
    return _shared_constant(value, math.copysign(1.0, value) < 0)


def _base(spec: PatternSpec, seed: int, salt: str) -> Evaluator:
    p = spec.params
    if spec.kind == "constant":
        value = p["value"]
        return lambda t: value
    if spec.kind == "square":
        low, high, period = p["low"], p["high"], p["period"]
        duty, phase = p["duty"], p["phase"]
        return lambda t: high if ((t - phase) / period) % 1.0 < duty else low
    if spec.kind == "ramp":
        start_v, end_v, start, duration = p["from"], p["to"], p["start"], p["duration"]
        repeat = bool(p["repeat"])

        def ramp(t: float) -> float:
            if t < start:
                return start_v
            u = (t - start) / duration
            u = u % 1.0 if repeat else min(u, 1.0)
            return start_v + (end_v - start_v) * u

        return ramp
    if spec.kind == "sine":
        mean, amplitude, period, phase = p["mean"], p["amplitude"], p["period"], p["phase"]
        return lambda t: mean + amplitude * math.sin(2 * math.pi * (t - phase) / period)
    if spec.kind == "noise":
        mean, amplitude, interval = p["mean"], p["amplitude"], p["interval"]
        return lambda t: mean + amplitude * value_noise(seed, salt, t, interval)
    if spec.kind == "steps":
        steps = spec.steps

        def step(t: float) -> float:
            value = steps[0][1]
            for at, v in steps:
                if at <= t:
                    value = v
                else:
                    break
            return value

        return step
    raise ValueError(f"unknown pattern kind {spec.kind!r}")


# For each pattern kind: parameter -> (how it is parsed, default or None when required). "value"
# parameters carry the quantity's own unit (bytes, watts, a ratio...); the rest are fixed.
PATTERN_PARAMS: dict[str, dict[str, tuple[str, float | None]]] = {
    "constant": {"value": ("value", None)},
    "square": {
        "low": ("value", None),
        "high": ("value", None),
        "period": ("duration", None),
        "duty": ("ratio", 0.5),
        "phase": ("duration", 0.0),
    },
    "ramp": {
        "from": ("value", None),
        "to": ("value", None),
        "start": ("duration", 0.0),
        "duration": ("duration", None),
        "repeat": ("bool", 0.0),
    },
    "sine": {
        "mean": ("value", None),
        "amplitude": ("value", None),
        "period": ("duration", None),
        "phase": ("duration", 0.0),
    },
    "noise": {"mean": ("value", None), "amplitude": ("value", None), "interval": ("duration", 1.0)},
    "steps": {},
}
