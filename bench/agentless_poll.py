"""Cost of the agentless path: parsing nvidia-smi XML, and polling hosts over SSH on loopback.

Two measurements:

1. Parse time of ``nvidia-smi -q -x`` + ``nvidia-smi vgpu -q -x`` for the built-in
   ``kvm-vgpu-timesliced`` scenario (3 GPUs, 11 vGPUs) and for a synthetic large host: its GPU and
   vGPU elements repeated to 16 GPUs x 48 vGPUs (the design's upper bound).
2. Poll latency of :class:`vgpumon.sources.ssh.SshFleet` against asyncssh servers on loopback
   (one process: client and servers share the CPU, so this is an upper bound on the client's
   cost, not a network measurement), for 1 host and for HOSTS hosts with MAX_SESSIONS at once:
   the first round logs in, later rounds reuse each host's session.

Usage: python bench/agentless_poll.py [--hosts 20] [--max-sessions 8] [--rounds 5]
Prints a Markdown report (bench/results/agentless-poll.md holds a run of it).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import platform
import re
import statistics
import tempfile
import time
from pathlib import Path

import asyncssh

from vgpumon import sim
from vgpumon.sim.smi_xml import device_report, vgpu_report
from vgpumon.smi import parse_reports
from vgpumon.sources.ssh import SshFleet
from vgpumon.sources.ssh_targets import SshSettings, parse_target

SCENARIO = "kvm-vgpu-timesliced"


def reports() -> tuple[str, str]:
    nvml = sim.create(dataclasses.replace(sim.load_scenario(SCENARIO), faults=()))
    nvml.nvmlInit()
    return device_report(nvml), vgpu_report(nvml)


def scaled(device: str, vgpu: str, gpus: int, vgpus: int) -> tuple[str, str]:
    """The first GPU (and its first vGPU) repeated to ``gpus`` x ``vgpus``, ids made unique."""
    gpu = re.search(r"\t<gpu id=.*?\n\t</gpu>\n", device, re.S)
    vgpu_gpu = re.search(r"\t<gpu id=.*?\n\t</gpu>\n", vgpu, re.S)
    one_vgpu = re.search(r"\t\t<vgpu id=.*?\n\t\t</vgpu>\n", vgpu, re.S)
    assert gpu and vgpu_gpu and one_vgpu
    head_d, tail_d = device[: gpu.start()], "</nvidia_smi_log>\n"
    head_v = vgpu[: vgpu_gpu.start()]
    d_parts, v_parts = [], []
    for g in range(gpus):
        bus = f'id="00000000:{g + 0x10:02X}:00.0"'
        d_parts.append(re.sub(r'id="[^"]+"', bus, gpu.group(0), count=1))
        body = "".join(
            re.sub(r'<vgpu id="\d+"', f'<vgpu id="{g * 1000 + k + 1}"', one_vgpu.group(0))
            for k in range(vgpus)
        )
        v_parts.append(f"\t<gpu {bus}>\n\t\t<active_vgpus>{vgpus}</active_vgpus>\n{body}\t</gpu>\n")
    return head_d + "".join(d_parts) + tail_d, head_v + "".join(v_parts) + tail_d


def parse_ms(device: str, vgpu: str, n: int = 20) -> tuple[float, int]:
    times = []
    for _ in range(n):
        t = time.perf_counter()
        snap = parse_reports(device, vgpu, timestamp=0)
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), sum(len(g.vgpu_instances) for g in snap.gpus)


async def serve_host(device: str, vgpu: str, key: asyncssh.SSHKey, known: Path) -> int:
    host_key = asyncssh.generate_private_key("ssh-ed25519")

    def handle(process: asyncssh.SSHServerProcess[bytes]) -> None:
        cmd = process.command or ""
        process.stdout.write((vgpu if cmd.endswith("vgpu -q -x") else device).encode())
        process.exit(0)

    server = await asyncssh.create_server(
        asyncssh.SSHServer,
        "127.0.0.1",
        0,
        server_host_keys=[host_key],
        authorized_client_keys=asyncssh.import_authorized_keys(key.export_public_key().decode()),
        process_factory=handle,
        encoding=None,
    )
    port = int(server.sockets[0].getsockname()[1])
    with known.open("a") as f:
        f.write(f"[127.0.0.1]:{port} {host_key.export_public_key().decode()}")
    return port


async def poll_bench(hosts: int, max_sessions: int, rounds: int, device: str, vgpu: str) -> str:
    tmp = Path(tempfile.mkdtemp())
    key = asyncssh.generate_private_key("ssh-ed25519")
    (tmp / "id").write_bytes(key.export_private_key())
    (tmp / "id").chmod(0o600)
    known = tmp / "known_hosts"
    known.write_text("")
    ports = [await serve_host(device, vgpu, key, known) for _ in range(hosts)]
    rows = []
    for count in (1, hosts):
        settings = SshSettings(
            targets=tuple(parse_target(f"bench@127.0.0.1:{p}") for p in ports[:count]),
            identity_files=(str(tmp / "id"),),
            known_hosts=str(known),
            max_sessions=max_sessions,
            timeout_seconds=30,
        )
        source = SshFleet(settings)
        walls = []
        t = time.perf_counter()
        await asyncio.gather(*(source.poll(h) for h in source.latest.names))
        first = (time.perf_counter() - t) * 1000  # logins included
        for _ in range(rounds):
            t = time.perf_counter()
            updates = await asyncio.gather(*(source.poll(h) for h in source.latest.names))
            walls.append((time.perf_counter() - t) * 1000)
            assert all(u.state.value == "up" for u in updates)
        source.transport.close()
        rows.append(
            f"| {count} | {max_sessions} | {first:.0f} | {statistics.median(walls):.0f} "
            f"| {max(walls):.0f} |"
        )
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--hosts", type=int, default=20)
    parser.add_argument("--max-sessions", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    device, vgpu = reports()
    big_d, big_v = scaled(device, vgpu, 16, 48)
    small_ms, small_n = parse_ms(device, vgpu)
    big_ms, big_n = parse_ms(big_d, big_v, 5)
    print("# Agentless path: parse and SSH poll cost\n")
    print(f"Python {platform.python_version()}, {platform.machine()}, one process.\n")
    print("| report | bytes (-q -x + vgpu -q -x) | vGPUs | parse, median ms |")
    print("|---|---|---|---|")
    print(f"| {SCENARIO} | {len(device) + len(vgpu)} | {small_n} | {small_ms:.1f} |")
    print(f"| synthetic 16 GPU x 48 vGPU | {len(big_d) + len(big_v)} | {big_n} | {big_ms:.1f} |")
    print(
        "\nSSH polls on loopback (connect, key auth, both reports, parse), all hosts per round:\n"
    )
    print("| hosts | max sessions | first round (logins), ms | later rounds, median ms | max ms |")
    print("|---|---|---|---|---|")
    print(asyncio.run(poll_bench(args.hosts, args.max_sessions, args.rounds, device, vgpu)))


if __name__ == "__main__":
    main()
