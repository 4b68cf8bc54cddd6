"""``go_float`` writes every value exactly as prometheus-client's ``floatToGoString`` does."""

from __future__ import annotations

import math
import random
import struct

import pytest
from prometheus_client.utils import floatToGoString

from vgpumon.metrics.gofloat import go_float, go_floats

EDGES = [
    0.0,
    -0.0,
    1.0,
    -1.0,
    0.5,
    1e-9,
    123456.0,
    1234567.0,
    -1234567.0,
    1e6,
    999999.9,
    1000000.0,
    1e9,
    1e15,
    1e16,
    1e21,
    1e22,
    2.0**53,
    2.0**64,
    1.5e300,
    5e-324,
    float("inf"),
    float("-inf"),
    float("nan"),
    1_767_225_600.0,
    150_754_820_096.0,
    True,
    7,
]


@pytest.mark.parametrize("value", EDGES, ids=repr)
def test_edges(value: float) -> None:
    assert go_float(value) == floatToGoString(value)


def test_many_random_doubles() -> None:
    rng = random.Random(11)
    for _ in range(20_000):
        (value,) = struct.unpack("<d", rng.getrandbits(64).to_bytes(8, "little"))
        if math.isnan(value):
            continue
        assert go_float(value) == floatToGoString(value), value
    for _ in range(20_000):
        value = round(rng.uniform(0, 10 ** rng.randint(0, 15)), rng.randint(0, 6))
        assert go_float(value) == floatToGoString(value), value


@pytest.mark.parametrize(
    "values",
    [
        [],
        [0.0, -0.0, 0.0, 1.0],
        [1.5e9] * 8 + [7.0, 2.0**60],  # large values, repeated
        [5e9] * 4,  # one value throughout
        [-0.0] * 3,
        [1, 1.0, True],  # equal, written alike
        [float(i) * 1e5 for i in range(50)],  # crossing EXPONENT_FROM
        [1.0, float("inf"), 2.0, float("nan"), float("-inf")],
        [True, False, 7, 0, -3, 1e308, 1e308],  # bools and ints; a sum past the largest double
    ],
    ids=repr,
)
def test_many_at_once_as_one_by_one(values: list[float]) -> None:
    assert go_floats(values) == [floatToGoString(v) for v in values]


def test_many_random_values_at_once() -> None:
    rng = random.Random(12)
    for _ in range(200):
        pool = [
            round(rng.uniform(-1e8, 1e8), rng.randint(0, 6)),
            float(rng.randrange(1 << 40)),
            rng.choice([0.0, -0.0, 1.0, 0.5, 999_999.9, 1e6]),
        ]
        values = [rng.choice(pool) for _ in range(rng.randint(1, 40))]
        assert go_floats(values) == [floatToGoString(v) for v in values], values
