"""The pipe between ``serve`` and its sampler process: framed messages, and a snapshot in pieces.

A frame is a 4-byte little-endian length, one byte of kind, then the payload (a pickle: both ends
are the same vgpumon, one the other's child). A snapshot travels as its header (the snapshot
without its GPUs) and one pickle per GPU, so that the receiving event loop can unpickle it one
GPU at a time and answer scrapes in between (a 16 GPU x 48 vGPU snapshot is tens of
milliseconds of unpickling in one piece, about one per GPU).
"""

from __future__ import annotations

import dataclasses
import os
import pickle
import struct
from collections.abc import Iterator
from typing import Any, BinaryIO

from vgpumon.model import Gpu, Snapshot

HEAD = struct.Struct("<IB")
PROTOCOL = pickle.HIGHEST_PROTOCOL

# Parent to child (the child's stdin)
START = 1  # the recipe that builds the sampler (a picklable callable)
FIELDS = 2  # the configured NVML fields changed (a reload)
REFRESH = 3  # cycle now
# Child to parent (the pipe named on the child's command line)
HELLO = 10  # the sampler is built: its name
FAILED = 11  # the sampler could not be built: (message, exit status)
SNAPSHOT = 12  # one snapshot (:func:`encode_snapshot`)


def frame(kind: int, message: Any) -> bytes:
    payload = pickle.dumps(message, PROTOCOL)
    return HEAD.pack(len(payload), kind) + payload


def write_frame(fd: int, kind: int, message: Any) -> None:
    """Write one whole frame to ``fd`` (blocking until the reader has room)."""
    view = memoryview(frame(kind, message))
    while view:
        view = view[os.write(fd, view) :]


def read_frame(stream: BinaryIO) -> tuple[int, Any] | None:
    """The next frame from a blocking stream; None at its end (a frame cut short included)."""
    head = stream.read(HEAD.size)
    if len(head) < HEAD.size:
        return None
    size, kind = HEAD.unpack(head)
    payload = stream.read(size)
    if len(payload) < size:
        return None
    return kind, pickle.loads(payload)


class FrameBuffer:
    """Bytes as they arrive from a pipe, cut into whole frames."""

    def __init__(self) -> None:
        self._data = bytearray()

    def feed(self, data: bytes) -> Iterator[tuple[int, bytes]]:
        """Append ``data``; yield (kind, payload) of every frame now complete."""
        self._data += data
        while len(self._data) >= HEAD.size:
            size, kind = HEAD.unpack_from(self._data)
            end = HEAD.size + size
            if len(self._data) < end:
                return
            payload = bytes(self._data[HEAD.size : end])
            del self._data[:end]
            yield kind, payload


@dataclasses.dataclass(frozen=True)
class SnapshotPieces:
    """A snapshot as it travels: the rest of it, each GPU, and the sampler's readiness."""

    header: bytes  # the snapshot with no GPUs
    gpus: tuple[bytes, ...]
    not_ready_reason: str | None


def encode_snapshot(snapshot: Snapshot, not_ready_reason: str | None) -> SnapshotPieces:
    return SnapshotPieces(
        pickle.dumps(dataclasses.replace(snapshot, gpus=()), PROTOCOL),
        tuple(pickle.dumps(gpu, PROTOCOL) for gpu in snapshot.gpus),
        not_ready_reason,
    )


def decode_header(pieces: SnapshotPieces) -> Snapshot:
    snapshot = pickle.loads(pieces.header)
    if not isinstance(snapshot, Snapshot):
        raise TypeError(f"not a snapshot: {type(snapshot).__name__}")
    return snapshot


def decode_gpu(piece: bytes) -> Gpu:
    gpu = pickle.loads(piece)
    if not isinstance(gpu, Gpu):
        raise TypeError(f"not a GPU: {type(gpu).__name__}")
    return gpu
