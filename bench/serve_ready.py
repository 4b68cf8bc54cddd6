"""Start and wait for a ``vgpumon serve`` a benchmark runs: one copy for every script.

``/-/ready`` answers 200 once the sampler has a snapshot to serve (503 before, once the listener
is up); a server that exits first, or is still not ready after ``seconds``, ends the benchmark
with a one-line message.
"""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request


def free_port() -> int:
    """A loopback port the OS has just handed out (free for the server about to take it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(
    base: str,
    proc: subprocess.Popen[bytes],
    seconds: float = 30.0,
    *,
    every: float = 0.1,
    timeout: float = 1.0,
) -> float | None:
    """Poll ``base``/-/ready (``base``: ``http://HOST:PORT``) every ``every`` seconds until it
    answers 200. Returns when (``time.monotonic()``) it first answered not ready, the listener
    being up before the first snapshot; None when its first answer was ready."""
    give_up = time.monotonic() + seconds
    first_answer: float | None = None
    while time.monotonic() < give_up:
        if proc.poll() is not None:
            raise SystemExit(f"vgpumon serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{base}/-/ready", timeout=timeout) as resp:
                if resp.status == 200:
                    return first_answer
        except urllib.error.HTTPError:
            if first_answer is None:
                first_answer = time.monotonic()
        except OSError:
            pass
        time.sleep(every)
    raise SystemExit(f"vgpumon serve at {base} did not become ready within {seconds:g} s")
