"""A real SSH server on loopback (asyncssh's) whose ``nvidia-smi`` answers from given text.

Each fake host is its own server with its own host key, so the client's known_hosts check, key
authentication and per-host timeout all run for real. ``behaviour`` picks what the host does:
``"ok"`` answers ``nvidia-smi -q -x`` / ``nvidia-smi vgpu -q -x`` with the given reports,
``"hang"`` never answers, ``"garbage"`` prints text that is not XML, ``"refuse"`` accepts no key,
``"no-smi"`` has no nvidia-smi (exit status 127). The device report answered, the vGPU report can
fail alone: ``"vgpu-empty"`` prints nothing with exit status 0, ``"vgpu-exit"`` exits 6 with a
message, ``"vgpu-hang"`` never answers it.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncssh


@dataclass
class FakeHost:
    port: int
    server: asyncssh.SSHAcceptor
    commands: list[str]
    users: list[str]  # the user name of every login

    @property
    def target(self) -> str:
        return f"vgpumon@127.0.0.1:{self.port}"

    @property
    def target_without_user(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def name(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class Keys:
    client_key_file: str
    client_public: asyncssh.SSHKey
    known_hosts_file: str


def client_keys(tmp: Path) -> tuple[str, asyncssh.SSHKey]:
    key = asyncssh.generate_private_key("ssh-ed25519")
    path = tmp / "id_ed25519"
    path.write_bytes(key.export_private_key())
    path.chmod(0o600)
    return str(path), key


async def start_host(
    known_hosts: Path,
    authorized: asyncssh.SSHKey,
    behaviour: str,
    device_xml: str = "",
    vgpu_xml: str = "",
) -> FakeHost:
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    commands: list[str] = []
    users: list[str] = []
    allowed = asyncssh.generate_private_key("ssh-ed25519") if behaviour == "refuse" else authorized

    async def handle(process: asyncssh.SSHServerProcess[bytes]) -> None:
        command = process.command or ""
        commands.append(command)
        if behaviour == "hang":
            await asyncio.sleep(3600)
        elif behaviour == "garbage":
            process.stdout.write(b"<html>this host is in maintenance</html>\n")
        elif behaviour == "no-smi":
            process.stderr.write(b"sh: nvidia-smi: not found\n")
            process.stdout.write(b"sh: nvidia-smi: not found\n")
            process.exit(127)
            return
        elif command.endswith("vgpu -q -x") and behaviour == "vgpu-hang":
            await asyncio.sleep(3600)
        elif command.endswith("vgpu -q -x") and behaviour == "vgpu-exit":
            process.stdout.write(b"No supported devices in vGPU mode\n")
            process.exit(6)
            return
        elif command.endswith("vgpu -q -x"):
            process.stdout.write(b"" if behaviour == "vgpu-empty" else vgpu_xml.encode())
        elif command.endswith("-q -x"):
            process.stdout.write(device_xml.encode())
        else:
            process.stderr.write(b"unexpected command\n")
            process.exit(1)
            return
        process.exit(0)

    class Server(asyncssh.SSHServer):
        def begin_auth(self, username: str) -> bool:
            users.append(username)
            return True  # authentication required: the key decides

    server = await asyncssh.create_server(
        Server,
        "127.0.0.1",
        0,
        server_host_keys=[host_key],
        authorized_client_keys=asyncssh.import_authorized_keys(
            allowed.export_public_key().decode()
        ),
        process_factory=handle,
        encoding=None,
    )
    port = server.sockets[0].getsockname()[1]
    with known_hosts.open("a") as f:
        f.write(f"[127.0.0.1]:{port} {host_key.export_public_key().decode()}")
    return FakeHost(port, server, commands, users)


@asynccontextmanager
async def fake_hosts(
    tmp: Path, specs: list[tuple[str, str, str]]
) -> AsyncIterator[tuple[Keys, list[FakeHost]]]:
    """Start one server per (behaviour, device_xml, vgpu_xml); close them all afterwards."""
    key_file, key = client_keys(tmp)
    known = tmp / "known_hosts"
    known.write_text("")
    hosts = [await start_host(known, key, b, d, v) for b, d, v in specs]
    try:
        yield Keys(key_file, key, str(known)), hosts
    finally:
        for h in hosts:
            h.server.close()
        for h in hosts:
            await h.server.wait_closed()
