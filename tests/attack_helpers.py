"""A real exporter listener under attack, and the normal scraper whose service is the measure.

The rule of every attack test (issue 19): a normal scraper on a fresh connection is still
answered within :data:`SCRAPE_WITHIN` while the attack runs and after it. The server, the attack
and the scraper share one event loop, so the attacks are small in number and quick by design;
the limits are the production ones unless a test says otherwise.
"""

from __future__ import annotations

import asyncio
import base64
import socket
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import bcrypt
import trustme
from export_helpers import FixedFeed, rich_snapshot

from vgpumon.export.address import ListenAddress
from vgpumon.export.connections import ConnectionGuard
from vgpumon.export.limits import ServerLimits
from vgpumon.export.listener import Listener
from vgpumon.export.server import build_app
from vgpumon.export.serverstats import server_families

SCRAPE_WITHIN = 1.0  # seconds: the rule's bound for a normal scraper's answer
PASSWORD = "scraper-password"


@dataclass
class Target:
    """A listening exporter: its port, guard, TLS client context and scraper credentials."""

    port: int
    guard: ConnectionGuard
    client_ctx: ssl.SSLContext | None
    auth: str | None
    runtime: Any = None


_CA: trustme.CA | None = None
_LEAF: trustme.LeafCert | None = None


def _pki() -> tuple[trustme.CA, trustme.LeafCert]:
    global _CA, _LEAF
    if _CA is None or _LEAF is None:
        _CA = trustme.CA()
        _LEAF = _CA.issue_cert("127.0.0.1")
    return _CA, _LEAF


def write_web_config(
    tmp: Path, *, tls: bool, users: dict[str, int] | None = None, extra: str = ""
) -> str:
    """A web-config file; ``users`` maps a user name to its bcrypt cost (password PASSWORD)."""
    text = ""
    if tls:
        _ca, leaf = _pki()
        leaf.cert_chain_pems[0].write_to_path(str(tmp / "server.crt"))
        leaf.private_key_pem.write_to_path(str(tmp / "server.key"))
        (tmp / "server.key").chmod(0o600)
        text += f"tls_server_config:\n  cert_file: {tmp / 'server.crt'}\n"
        text += f"  key_file: {tmp / 'server.key'}\n"
    if users:
        text += "basic_auth_users:\n"
        for name, cost in users.items():
            hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(cost)).decode()
            text += f"  {name}: '{hashed}'\n"
    path = tmp / "web.yml"
    path.write_text(text + extra)
    return str(path)


def client_context() -> ssl.SSLContext:
    ca, _leaf = _pki()
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return ctx


@asynccontextmanager
async def target(
    tmp: Path,
    *,
    limits: ServerLimits | None = None,
    tls: bool = False,
    users: dict[str, int] | None = None,
    source: FixedFeed | None = None,
    **app_kwargs: Any,
) -> AsyncIterator[Target]:
    from vgpumon.export.webconfig_runtime import WebConfigRuntime

    runtime = None
    if tls or users:
        runtime = WebConfigRuntime(write_web_config(tmp, tls=tls, users=users))
    guard = ConnectionGuard(limits or ServerLimits())
    app_kwargs.setdefault("extra", server_families(guard, runtime))
    app = build_app(source or FixedFeed(rich_snapshot()), web_config=runtime, **app_kwargs)
    listener = Listener(app, guard)
    ssl_context = runtime.ssl_context() if runtime is not None else None
    await listener.start([ListenAddress("127.0.0.1", 0)], ssl_context)
    auth = None
    if users:
        auth = f"{next(iter(users))}:{PASSWORD}"
    try:
        yield Target(
            listener.addresses[0][1], guard, client_context() if tls else None, auth, runtime
        )
    finally:
        await listener.close(1.0)


def basic(credentials: str) -> bytes:
    return b"Basic " + base64.b64encode(credentials.encode())


async def scrape(
    t: Target,
    path: str = "/-/healthy",
    *,
    auth: str | None = None,
    local: str | None = None,
    within: float = SCRAPE_WITHIN,
) -> int:
    """A fresh connection, one GET; the status, or 0 when no answer came within ``within``."""
    credentials = auth if auth is not None else t.auth

    async def once() -> int:
        kwargs: dict[str, Any] = {}
        if local is not None:
            kwargs["local_addr"] = (local, 0)
        reader, writer = await asyncio.open_connection(
            "127.0.0.1", t.port, ssl=t.client_ctx, **kwargs
        )
        try:
            head = b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n"
            if credentials:
                head += b"Authorization: " + basic(credentials) + b"\r\n"
            writer.write(head + b"\r\n")
            status = await reader.readuntil(b"\r\n")
            return int(status.split(b" ")[1])
        finally:
            writer.transport.abort()

    try:
        return await asyncio.wait_for(once(), within)
    except (asyncio.TimeoutError, OSError, asyncio.IncompleteReadError, ValueError, IndexError):
        return 0


async def scrapes_during(t: Target, attack: Any, count: int = 5, **kwargs: Any) -> list[int]:
    """Statuses of ``count`` scrapes made while ``attack`` (a coroutine) runs, then one after."""
    task = asyncio.ensure_future(attack)
    statuses = []
    try:
        await asyncio.sleep(0.05)
        for _ in range(count):
            statuses.append(await scrape(t, **kwargs))
            await asyncio.sleep(0.02)
    finally:
        await task
    statuses.append(await scrape(t, **kwargs))
    return statuses


def linger_reset(sock: socket.socket) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a client that crashed or timed out does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    sock.close()
