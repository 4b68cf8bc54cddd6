"""The exporter under abuse, over TLS with basic auth: load held, and memory with hostile clients.

The server is ``bench/scrape_latency.py``'s synthetic 16 GPU x 48 vGPU host (a new snapshot every
second, so renders run throughout) behind a web config with TLS (a throwaway CA from ``trustme``)
and one basic-auth user (bcrypt cost 10). Everything is on loopback, bounded in count and time:

1. **load**: ``--rate`` scrapes per second for ``--seconds`` over kept-alive TLS connections with
   the right password; rate, p50/p99 and the count of answers that were not 200;
2. **idle**: ``--idle`` TLS clients that finish the handshake and never send a request; the
   server's resident memory at the peak and after the header timeout, connections still open;
3. **stalled**: ``--stalled`` TLS clients that ask four times (pipelined) for the uncompressed body
   (1.9 MB, so more than loopback's socket buffers hold) and never read; resident memory at the
   peak and after the write timeout;
4. **attacks** (issue 19): TCP connect+close probes, half-open TLS handshakes, idle kept-alive
   clients, a wrong-password flood from many loopback addresses (then first logins from new
   ones), and dropped large responses;
5. **pipelined** (issue 33): ``--pipelined`` connections (default 130, beyond the 128 slots) that
   each write ``--pipelined-requests`` (default 300) pipelined ``GET /metrics`` and never read,
   held ``--pipelined-seconds`` (default 35, past the 30 s write timeout), once against a plain
   HTTP server without credentials and once against the TLS one (its resident memory before, at
   the peak, 5 s and 70 s after the attackers leave, scraped every 5 s meanwhile: serve trims the
   heap once a minute, after the publish of a scraped snapshot).

During every attack of 2-4 a normal scraper opens a fresh TLS connection every 0.2 s and asks
for ``/-/healthy`` with the right password; the report gives how many of its scrapes were
answered within 1 s (the rule of issue 19) and its slowest answer, and one scrape after.

Usage: python bench/server_abuse.py [--rate 200] [--seconds 20] [--idle 500] [--stalled 100]
       [--attack-seconds 3] [--pipelined 130] [--pipelined-requests 300] [--pipelined-seconds 35]
       [--only pipelined [--serve-host 16x48]]
Prints a Markdown report (bench/results/server-abuse.md holds a run of it; --only pipelined
prints phase 5 alone, bench/results/server-abuse-pipelined.md).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import os
import platform
import socket
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import bcrypt
import trustme

sys.path.insert(0, str(Path(__file__).resolve().parent))

from exporter_cost import host_scenario
from scrape_latency import Load, free_port, run_clients, start_synthetic_server

from vgpumon.export.connections import ServerLimits

USER, PASSWORD = "prometheus", "bench-password"


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def write_web_config(directory: Path) -> tuple[str, str]:
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    leaf.cert_chain_pems[0].write_to_path(str(directory / "server.crt"))
    leaf.private_key_pem.write_to_path(str(directory / "server.key"))
    (directory / "server.key").chmod(0o600)
    ca.cert_pem.write_to_path(str(directory / "ca.crt"))
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
    config = directory / "web.yml"
    config.write_text(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
        f"basic_auth_users:\n  {USER}: {hashed}\n"
    )
    return str(config), str(directory / "ca.crt")


def wait_ready(port: int, cafile: str | None, proc: Any, seconds: float = 60) -> None:
    import http.client

    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    give_up = time.monotonic() + seconds
    while time.monotonic() < give_up:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            conn: http.client.HTTPConnection
            if cafile:
                ctx = ssl.create_default_context(cafile=cafile)
                conn = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=2)
            else:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            conn.request("GET", "/-/ready", headers={"Authorization": f"Basic {token}"})
            if conn.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise SystemExit("server did not become ready")


async def hold_idle(port: int, cafile: str, count: int) -> list[asyncio.StreamWriter]:
    ctx = ssl.create_default_context(cafile=cafile)
    held: list[asyncio.StreamWriter] = []

    async def one() -> None:
        try:
            _reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, ssl=ctx), 30
            )
            held.append(writer)
        except (OSError, asyncio.TimeoutError, ssl.SSLError):
            pass

    await asyncio.gather(*(one() for _ in range(count)))
    return held


async def hold_stalled(port: int, cafile: str, count: int) -> list[asyncio.StreamWriter]:
    ctx = ssl.create_default_context(cafile=cafile)
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    request = (
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept-Encoding: identity\r\n"
        f"Authorization: Basic {token}\r\n\r\n"
    ).encode()
    held: list[asyncio.StreamWriter] = []

    async def one() -> None:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, ssl=ctx, limit=1024), 30
            )
        except (OSError, asyncio.TimeoutError, ssl.SSLError):
            return
        writer.write(request * 4)  # pipelined: more than the kernel's socket buffers hold
        await writer.drain()
        await asyncio.sleep(0.5)
        writer.transport.pause_reading()  # type: ignore[attr-defined] # stop reading: the server's writes back up
        held.append(writer)
        del reader

    await asyncio.gather(*(one() for _ in range(count)))
    return held


SCRAPE_WITHIN = 1.0


async def one_scrape(port: int, cafile: str | None, local: str | None = None) -> tuple[int, float]:
    """A fresh TLS connection, one authenticated GET /-/healthy: (status or 0, seconds); without
    ``cafile``, plain HTTP without credentials."""
    ctx = ssl.create_default_context(cafile=cafile) if cafile else None
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    auth = f"Authorization: Basic {token}\r\n" if cafile else ""
    started = time.perf_counter()

    async def once() -> int:
        kwargs: dict[str, Any] = {"local_addr": (local, 0)} if local else {}
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, **kwargs)
        try:
            writer.write(f"GET /-/healthy HTTP/1.1\r\nHost: x\r\n{auth}\r\n".encode())
            return int((await reader.readuntil(b"\r\n")).split(b" ")[1])
        finally:
            writer.transport.abort()

    try:
        status = await asyncio.wait_for(once(), SCRAPE_WITHIN)
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError):
        status = 0
    return status, time.perf_counter() - started


async def scraper(port: int, cafile: str | None, stop: asyncio.Event) -> list[tuple[int, float]]:
    results = []
    while not stop.is_set():
        results.append(await one_scrape(port, cafile))
        await asyncio.sleep(0.2)
    return results


async def during(port: int, cafile: str | None, attack: Any) -> dict[str, Any]:
    """Run ``attack`` (a coroutine giving a detail string) with the normal scraper alongside."""
    stop = asyncio.Event()
    task = asyncio.ensure_future(scraper(port, cafile, stop))
    try:
        detail = await attack
    finally:
        stop.set()
        results = await task
    after, _ = await one_scrape(port, cafile)
    ok = [t for status, t in results if status == 200]
    return {
        "detail": detail,
        "ok": len(ok),
        "total": len(results),
        "max_ms": max((t for _, t in results), default=0.0) * 1000,
        "after": after,
    }


async def attack_probes(port: int, count: int) -> str:
    for _ in range(count):
        _r, w = await asyncio.open_connection("127.0.0.1", port)
        w.close()
        await asyncio.sleep(0.005)
    return f"{count} TCP connect+close"


async def attack_half_open(port: int, count: int, seconds: float) -> str:
    loop = asyncio.get_running_loop()
    held = []
    for _ in range(count):
        sock = socket.socket()
        sock.setblocking(False)
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await loop.sock_sendall(sock, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
        held.append(sock)
    await asyncio.sleep(seconds)
    for sock in held:
        sock.close()
    return f"{count} half-open TLS handshakes held {seconds:g} s"


async def attack_idle_keepalive(port: int, cafile: str, count: int, seconds: float) -> str:
    ctx = ssl.create_default_context(cafile=cafile)
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    held = []
    for _ in range(count):
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, ssl=ctx), 5
            )
            writer.write(
                (
                    f"GET /-/healthy HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {token}\r\n\r\n"
                ).encode()
            )
            await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            held.append(writer)
        except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
            pass
    await asyncio.sleep(seconds)
    for writer in held:
        writer.transport.abort()
    return f"{count} idle kept-alive TLS clients after one request each, held {seconds:g} s"


async def attack_password_flood(port: int, cafile: str, seconds: float) -> str:
    """40 concurrent wrong passwords over 200 loopback addresses, then 7 first logins."""
    ctx = ssl.create_default_context(cafile=cafile)
    wrong = base64.b64encode(f"{USER}:wrong".encode()).decode()
    stop = asyncio.Event()
    attempts = 0

    async def attacker(n: int) -> None:
        nonlocal attempts
        i = 0
        while not stop.is_set():
            local = f"127.0.{1 + (n + 40 * i) % 200 // 100}.{2 + (n + 40 * i) % 100}"
            i += 1
            try:
                reader, writer = await asyncio.wait_for(
                    asyncio.open_connection("127.0.0.1", port, ssl=ctx, local_addr=(local, 0)), 5
                )
                writer.write(
                    (
                        f"GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: Basic {wrong}\r\n\r\n"
                    ).encode()
                )
                await asyncio.wait_for(reader.readuntil(b"\r\n"), 5)
                writer.transport.abort()
                attempts += 1
            except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError):
                pass

    tasks = [asyncio.ensure_future(attacker(n)) for n in range(40)]
    await asyncio.sleep(seconds)
    firsts = [await one_scrape(port, cafile, f"127.0.9.{n}") for n in range(1, 8)]
    stop.set()
    await asyncio.gather(*tasks)
    good = sum(1 for status, t in firsts if status == 200)
    slowest = max(t for _, t in firsts) * 1000
    return (
        f"40 concurrent wrong passwords from 200 addresses ({attempts} answered in"
        f" {seconds:g} s); first logins from new addresses: {good}/7 answered 200 within 1 s,"
        f" slowest {slowest:.0f} ms"
    )


async def attack_dropped(port: int, cafile: str, count: int) -> str:
    ctx = ssl.create_default_context(cafile=cafile)
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    for _ in range(count):
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
        writer.write(
            "GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n"
            f"Authorization: Basic {token}\r\n\r\n".encode()
        )
        got = 0
        while got < 300_000:
            chunk = await reader.read(65536)
            if not chunk:
                break
            got += len(chunk)
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01" + b"\x00" * 7)
        writer.transport.abort()
    return f"{count} clients reading 300 kB of the 1.9 MB body, then resetting"


async def attacks_phase(port: int, cafile: str, seconds: float) -> list[dict[str, Any]]:
    return [
        await during(port, cafile, attack_probes(port, 200)),
        await during(port, cafile, attack_half_open(port, 128, seconds)),
        await during(port, cafile, attack_idle_keepalive(port, cafile, 140, seconds)),
        await during(port, cafile, attack_password_flood(port, cafile, seconds)),
        await during(port, cafile, attack_dropped(port, cafile, 20)),
    ]


async def attack_pipelined(
    port: int, cafile: str | None, count: int, requests: int, seconds: float, pid: int
) -> tuple[str, dict[str, float]]:
    """``count`` clients that each pipeline ``requests`` GET /metrics (identity: the 1.9 MB
    body) and never read, held ``seconds``; the server's RSS at the peak meanwhile."""
    ctx = ssl.create_default_context(cafile=cafile) if cafile else None
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    auth = f"Authorization: Basic {token}\r\n" if cafile else ""
    request = (
        f"GET /metrics HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n{auth}\r\n"
    ).encode()
    held: list[asyncio.StreamWriter] = []

    async def one() -> None:
        try:
            _r, writer = await asyncio.wait_for(
                asyncio.open_connection("127.0.0.1", port, ssl=ctx, limit=1024), 10
            )
        except (OSError, asyncio.TimeoutError, ssl.SSLError):
            return
        writer.transport.pause_reading()  # type: ignore[attr-defined]
        writer.write(request * requests)
        held.append(writer)

    await asyncio.gather(*(one() for _ in range(count)))
    peak = await watch_rss(pid, seconds)
    for writer in held:
        writer.transport.abort()
    return (
        f"{len(held)} {'TLS' if cafile else 'plain'} clients x {requests} pipelined GET /metrics,"
        f" never read, held {seconds:g} s",
        {"peak_mb": peak, "connected": float(len(held))},
    )


async def pipelined_phase(
    port: int, cafile: str | None, pid: int, count: int, requests: int, seconds: float
) -> dict[str, Any]:
    before = rss_mb(pid)
    found: dict[str, float] = {}

    async def attack() -> str:
        detail, figures = await attack_pipelined(port, cafile, count, requests, seconds, pid)
        found.update(figures)
        return detail

    row = await during(port, cafile, attack())
    await asyncio.sleep(5.0)
    row.update(before_mb=before, after_mb=rss_mb(pid), fds_after=open_fds(pid), **found)
    # A Prometheus scraping every 5 s meanwhile, past serve's housekeeping (a collection and
    # malloc_trim once a minute, after the publish of a scraped snapshot).
    for _ in range(13):
        await scrape_metrics(port, cafile)
        await asyncio.sleep(5.0)
    row["later_mb"] = rss_mb(pid)
    return row


async def scrape_metrics(port: int, cafile: str | None) -> int:
    """One GET /metrics read to the end (as Prometheus scrapes): its status, or 0."""
    ctx = ssl.create_default_context(cafile=cafile) if cafile else None
    token = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
    auth = f"Authorization: Basic {token}\r\n" if cafile else ""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx)
    except OSError:
        return 0
    try:
        writer.write(
            f"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n{auth}\r\n".encode()
        )
        head = await asyncio.wait_for(reader.readuntil(b"\r\n"), 10)
        await asyncio.wait_for(reader.read(), 30)
        return int(head.split(b" ")[1])
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError, ValueError):
        return 0
    finally:
        writer.transport.abort()


def start_serve(port: int, host: str, tmp: Path, web_config: str | None) -> subprocess.Popen[bytes]:
    """``vgpumon serve`` itself on a simulated ``host`` (exporter_cost.py's ``GxV``): the whole
    path, its own sampler in the process, as production runs it."""
    scenario = tmp / f"{host}.yaml"
    scenario.write_text(host_scenario(host))
    cmd = [sys.executable, "-m", "vgpumon.cli", "serve", "--sim", str(scenario)]
    cmd += ["--web.listen-address", f"127.0.0.1:{port}"]
    if web_config:
        cmd += ["--web.config.file", web_config]
    env = dict(os.environ, VGPUMON_SIM_LATENCY=os.environ.get("VGPUMON_SIM_LATENCY", "realistic"))
    return subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_pipelined(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Phase 5 on a plain server (no credentials needed) and on the TLS + basic-auth one: the
    synthetic server, or ``vgpumon serve`` on ``--serve-host``."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        config, cafile = write_web_config(Path(tmp))
        for web_config, ca in ((None, None), (config, cafile)):
            port = free_port()
            if args.serve_host:
                proc = start_serve(port, args.serve_host, Path(tmp), web_config)
            else:
                proc = start_synthetic_server(port, 1.0, 16, 48, web_config)
            try:
                wait_ready(port, ca, proc)
                rows.append(
                    asyncio.run(
                        pipelined_phase(
                            port,
                            ca,
                            proc.pid,
                            args.pipelined,
                            args.pipelined_requests,
                            args.pipelined_seconds,
                        )
                    )
                )
            finally:
                proc.terminate()
                proc.wait(timeout=15)
    return rows


def print_pipelined(rows: list[dict[str, Any]]) -> None:
    print("## Pipelined requests that are never read (issue 33)\n")
    print(
        "A fresh connection every 0.2 s asking for /-/healthy (TLS and the right password on the"
        " TLS server); answered means a 200 within 1 s.\n"
    )
    print(
        "| attack | scrapes answered | slowest scrape ms | scrape after | RSS before MB |"
        " RSS peak MB | RSS 5 s after MB | RSS 70 s after MB | fds after |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['detail']} | {r['ok']}/{r['total']} | {r['max_ms']:.0f} |"
            f" {r['after'] or 'no answer'} | {r['before_mb']:.1f} | {r['peak_mb']:.1f} |"
            f" {r['after_mb']:.1f} | {r['later_mb']:.1f} | {r['fds_after']} |"
        )


async def watch_rss(pid: int, seconds: float) -> float:
    peak = 0.0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        peak = max(peak, rss_mb(pid))
        await asyncio.sleep(0.1)
    return peak


async def connections_phase(
    pid: int, port: int, cafile: str, idle: int, stalled: int, limits: ServerLimits
) -> dict[str, Any]:
    out: dict[str, Any] = {"before_mb": rss_mb(pid)}

    async def idle_attack() -> str:
        held = await hold_idle(port, cafile, idle)
        out["idle_handshaken"] = len(held)
        out["idle_peak_mb"] = await watch_rss(pid, 2.0)
        out["idle_fds"] = open_fds(pid)
        out["idle_held"] = held
        return f"{idle} TLS clients that never send a request"

    out["idle_scraper"] = await during(port, cafile, idle_attack())
    held = out.pop("idle_held")
    await asyncio.sleep(limits.header_timeout_seconds + 2)
    out["idle_after_timeout_mb"] = rss_mb(pid)
    out["idle_fds_after_timeout"] = open_fds(pid)
    for w in held:
        w.close()
    await asyncio.sleep(1)

    async def stalled_attack() -> str:
        out["stalled_held"] = await hold_stalled(port, cafile, stalled)
        out["stalled_sent"] = len(out["stalled_held"])
        out["stalled_peak_mb"] = await watch_rss(pid, 3.0)
        return f"{stalled} TLS clients that stop reading the 1.9 MB body"

    out["stalled_scraper"] = await during(port, cafile, stalled_attack())
    stalled_held = out.pop("stalled_held")
    await asyncio.sleep(limits.write_timeout_seconds + 3)
    out["stalled_after_timeout_mb"] = rss_mb(pid)
    out["stalled_fds_after_timeout"] = open_fds(pid)
    for w in stalled_held:
        w.close()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--idle", type=int, default=500)
    parser.add_argument("--stalled", type=int, default=100)
    parser.add_argument("--client-procs", type=int, default=2)
    parser.add_argument("--attack-seconds", type=float, default=3.0)
    parser.add_argument("--pipelined", type=int, default=130)
    parser.add_argument("--pipelined-requests", type=int, default=300)
    parser.add_argument("--pipelined-seconds", type=float, default=35.0)
    parser.add_argument("--only", choices=("pipelined",), help="run this phase alone")
    parser.add_argument(
        "--serve-host",
        metavar="GxV",
        help="with --only pipelined: attack `vgpumon serve` on this simulated host (16x48: the"
        " whole path, its sampler in the process) instead of the synthetic server",
    )
    args = parser.parse_args()
    if args.serve_host and args.only != "pipelined":
        parser.error("--serve-host needs --only pipelined")
    limits = ServerLimits()
    if args.only == "pipelined":
        rows = run_pipelined(args)
        print("# The exporter under pipelined requests that are never read\n")
        print_header(args, limits)
        print_pipelined(rows)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        config, cafile = write_web_config(Path(tmp))
        port = free_port()
        proc = start_synthetic_server(port, 1.0, 16, 48, config)
        try:
            wait_ready(port, cafile, proc)
            load = run_clients(
                Load(
                    f"https://127.0.0.1:{port}/metrics",
                    args.seconds,
                    rate=args.rate,
                    auth=(USER, PASSWORD),
                    cafile=cafile,
                ),
                args.client_procs,
            )
            conns = asyncio.run(
                connections_phase(proc.pid, port, cafile, args.idle, args.stalled, limits)
            )
            attacks = asyncio.run(attacks_phase(port, cafile, args.attack_seconds))
        finally:
            proc.terminate()
            proc.wait(timeout=15)
    pipelined = run_pipelined(args)

    print("# The exporter under abuse (TLS + basic auth)\n")
    print_header(args, limits)
    print("## Load held with TLS and basic auth\n")
    print("| scrapes/s asked | requests | statuses | non-200 | p50 ms | p99 ms | max ms |")
    print("|---|---|---|---|---|---|---|")
    print(
        f"| {args.rate:g} | {load['requests']} | {load['statuses']} | {load['non_200']} | "
        f"{load['p50']:.2f} | {load['p99']:.2f} | {load['max']:.1f} |\n"
    )
    print("## Memory under hostile connections (server resident set)\n")
    print("| phase | clients | server RSS MB | open fds |")
    print("|---|---|---|---|")
    print(f"| before | 0 | {conns['before_mb']:.1f} | |")
    print(
        f"| {args.idle} idle TLS clients, peak | {conns['idle_handshaken']} handshakes completed "
        f"| {conns['idle_peak_mb']:.1f} | {conns['idle_fds']} |"
    )
    print(
        f"| idle, after the header timeout | | {conns['idle_after_timeout_mb']:.1f} | "
        f"{conns['idle_fds_after_timeout']} |"
    )
    print(
        f"| {args.stalled} stalled TLS readers of the 1.9 MB body, peak | "
        f"{conns['stalled_sent']} requests sent | {conns['stalled_peak_mb']:.1f} | |"
    )
    print(
        f"| stalled, after the write timeout | | {conns['stalled_after_timeout_mb']:.1f} | "
        f"{conns['stalled_fds_after_timeout']} |"
    )
    print("\n## A normal scraper during each attack\n")
    print(
        "A fresh TLS connection every 0.2 s asking for /-/healthy with the right password;"
        " answered means a 200 within 1 s.\n"
    )
    print("| attack | scrapes answered | slowest scrape ms | scrape after |")
    print("|---|---|---|---|")
    for row in (conns["idle_scraper"], conns["stalled_scraper"], *attacks):
        print(
            f"| {row['detail']} | {row['ok']}/{row['total']} | {row['max_ms']:.0f} |"
            f" {row['after'] or 'no answer'} |"
        )
    print()
    print_pipelined(pipelined)
    return 0


def print_header(args: argparse.Namespace, limits: ServerLimits) -> None:
    print(f"Command: `python bench/server_abuse.py {' '.join(sys.argv[1:])}`  ")
    print(f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}  ")
    print(
        f"Machine: {platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, {platform.platform()}, load average "
        f"{os.getloadavg()[0]:.1f}  "
    )
    server = (
        f"`vgpumon serve --sim` on the simulated {args.serve_host} host (its sampler in the"
        " process), default cadences"
        if args.serve_host
        else "synthetic 16 GPUs x 48 vGPUs, new snapshot every 1 s"
    )
    print(
        f"Server: {server}, default limits "
        f"({limits.max_connections} connections, header timeout "
        f"{limits.header_timeout_seconds:g} s, write timeout {limits.write_timeout_seconds:g} s)\n"
    )


if __name__ == "__main__":
    sys.exit(main())
