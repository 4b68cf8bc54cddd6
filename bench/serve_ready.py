"""Wait until a ``vgpumon serve`` a benchmark started is ready: one copy for every script.

``/-/ready`` answers 200 once the sampler has a snapshot to serve; a server that exits first, or
is still not ready after ``seconds``, ends the benchmark with a one-line message.
"""

from __future__ import annotations

import subprocess
import time
import urllib.request


def wait_ready(base: str, proc: subprocess.Popen[bytes], seconds: float = 30.0) -> None:
    """Poll ``base``/-/ready (``base``: ``http://HOST:PORT``) until it answers 200."""
    give_up = time.monotonic() + seconds
    while time.monotonic() < give_up:
        if proc.poll() is not None:
            raise SystemExit(f"vgpumon serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"{base}/-/ready", timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"vgpumon serve at {base} did not become ready within {seconds:g} s")
