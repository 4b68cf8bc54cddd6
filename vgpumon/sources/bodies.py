"""Answers from HTTP peers vgpumon does not control (exporters, Prometheus): capped, and parsed
off the event loop.

A peer may answer with anything: hundreds of megabytes, JSON nested a million deep, NaN where a
number goes. ``top`` shares its event loop with the screen, so a body that is read whole into
memory, or parsed on the loop, freezes the screen (keys included) for as long as it takes, and
takes the memory with it. Every client here reads through :func:`read_capped` (a body over its
limit is refused as soon as the limit is passed, not after it all arrived) and parses with
:func:`parse_json` (in a worker thread; too deep is a :class:`ValueError` like any bad JSON).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

CHUNK_BYTES = 1 << 16


class BodyTooLarge(ValueError):
    """The answer is longer than the limit its reader set."""


async def read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The body of ``response``, or :class:`BodyTooLarge` as soon as it passes ``limit`` bytes."""
    if response.content_length is not None and response.content_length > limit:
        raise BodyTooLarge(f"the answer is larger than {_size(limit)}")
    data = bytearray()
    async for chunk in response.content.iter_chunked(CHUNK_BYTES):
        data += chunk
        if len(data) > limit:
            raise BodyTooLarge(f"the answer is larger than {_size(limit)}")
    return bytes(data)


def _size(limit: int) -> str:
    return f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"


def loads(data: bytes | str) -> Any:
    """:func:`json.loads`, with JSON nested too deep for the parser as a ValueError."""
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("the JSON is nested too deeply") from None


async def parse_json(data: bytes | str) -> Any:
    """:func:`loads` in a worker thread: a large answer does not stop the event loop."""
    if len(data) < CHUNK_BYTES:  # small: cheaper here than a thread hop
        return loads(data)
    return await asyncio.to_thread(loads, data)
