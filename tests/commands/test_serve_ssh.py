"""``vgpumon serve --ssh.targets`` as a process against real SSH servers on loopback.

Done-when of the agentless source: the host's fake ``nvidia-smi`` answers with the XML of a
simulator scenario; the exporter serves every series with a ``host`` label, the snapshot it serves
equals, field by field, the same scenario read through the simulated NVML, and hosts that time
out, refuse the key or answer garbage are reported (``vgpumon_up 0``, ``ssh`` collector 0) while
the good host is served.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import aiohttp
from export_helpers import free_port
from prometheus_client.parser import text_string_to_metric_families
from smi_helpers import differences, scenario_reports
from sshd_helpers import fake_hosts

from vgpumon.model import Snapshot, from_dict

READY_WITHIN = 30.0


async def _ready(base: str, proc: asyncio.subprocess.Process) -> None:
    async with aiohttp.ClientSession() as http:
        for _ in range(int(READY_WITHIN / 0.1)):
            if proc.returncode is not None:
                raise AssertionError(f"vgpumon serve exited early ({proc.returncode})")
            try:
                async with http.get(f"{base}/-/ready") as resp:
                    if resp.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise AssertionError(f"not ready within {READY_WITHIN} s")


async def test_serve_ssh_exports_each_host_with_a_host_label(tmp_path: Path) -> None:
    via_nvml, device, vgpu = await asyncio.to_thread(scenario_reports, "kvm-vgpu-timesliced")
    specs = [("ok", device, vgpu), ("hang", "", ""), ("refuse", "", ""), ("garbage", "", "")]
    async with fake_hosts(tmp_path, specs) as (keys, hosts):
        port = free_port()
        targets = tmp_path / "targets"
        targets.write_text("# agentless hosts\n" + "".join(f"{h.target}\n" for h in hosts[1:]))
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "vgpumon.cli",
            "serve",
            "--ssh.targets",
            hosts[0].target,
            "--ssh.targets-file",
            str(targets),
            "--ssh.identity",
            keys.client_key_file,
            "--ssh.known-hosts",
            keys.known_hosts_file,
            "--ssh.timeout",
            "2",
            "--web.listen-address",
            f"127.0.0.1:{port}",
            "--web.shutdown-timeout",
            "1",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            env={**os.environ, "SSH_AUTH_SOCK": ""},
        )
        base = f"http://127.0.0.1:{port}"
        try:
            await _ready(base, proc)
            # Ready means every host answered or failed once; the exposition is rendered off the
            # scrape path, so the first scrapes may still show an older view: wait for all hosts.
            async with aiohttp.ClientSession() as http:
                for _ in range(int(READY_WITHIN / 0.1)):
                    async with http.get(f"{base}/metrics") as resp:
                        text = await resp.text()
                    if text.count("vgpumon_up{") == len(hosts):
                        break
                    await asyncio.sleep(0.1)
                async with http.get(f"{base}/api/v1/snapshot") as resp:
                    served = await resp.json()
        finally:
            proc.terminate()
            await proc.wait()
    good, *bad = (h.name for h in hosts)

    samples = [s for f in text_string_to_metric_families(text) for s in f.samples]
    # Every vgpumon series is some host's; process_* and vgpumon_http_* describe the exporter
    # process and its HTTP server themselves.
    ours = [
        s
        for s in samples
        if s.name.startswith("vgpumon_") and not s.name.startswith("vgpumon_http_")
    ]
    assert ours and all("host" in s.labels for s in ours)
    assert all(s.name.startswith(("vgpumon_", "process_", "python_")) for s in samples)
    up = {s.labels["host"]: s.value for s in samples if s.name == "vgpumon_up"}
    assert up == {good: 1.0, **{h: 0.0 for h in bad}}
    ssh_ok = {
        s.labels["host"]: s.value
        for s in samples
        if s.name == "vgpumon_scrape_collector_success" and s.labels["collector"] == "ssh"
    }
    assert ssh_ok == {good: 1.0, **{h: 0.0 for h in bad}}
    gpu_hosts = {s.labels["host"] for s in samples if s.name == "vgpumon_gpu_up"}
    assert gpu_hosts == {good}  # a failed host's GPUs are absent, not 0
    fb = [s for s in samples if s.name == "vgpumon_vgpu_framebuffer_used_bytes"]
    assert len(fb) == 11 and {s.labels["host"] for s in fb} == {good}

    by_host = {entry["host"]: entry for entry in served["hosts"]}
    snapshot = from_dict(Snapshot, by_host[good]["snapshot"])
    assert differences(via_nvml, snapshot) == {}
    errors = {h: by_host[h]["error"] for h in bad}
    assert errors == {
        bad[0]: "no answer within 2 s",
        bad[1]: "SSH key refused (permission denied)",
        bad[2]: "nvidia-smi -q -x output is a <html> document, not <nvidia_smi_log>",
    }


def _serve_error(*args: str) -> tuple[int, str]:
    import subprocess

    result = subprocess.run(
        [sys.executable, "-m", "vgpumon.cli", "serve", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return result.returncode, result.stderr


def test_bad_targets_are_one_line_errors(tmp_path: Path) -> None:
    cases = {
        (
            "--ssh.targets",
            "root@bad host",
        ): "--ssh.targets: 'root@bad host' is not [user@]host[:port]",
        (
            "--ssh.targets",
            "esxi:70000",
        ): "--ssh.targets: port 70000 of 'esxi:70000' is out of range",
        (
            "--ssh.targets",
            "esxi",
            "--ssh.targets",
            "esxi",
        ): "agentless host esxi is given twice",
        ("--ssh.targets", "esxi", "--sim", "vgpu-guest"): "cannot be combined with an NVML source",
        ("--ssh.targets-file", str(tmp_path / "missing")): "--ssh.targets-file: cannot read",
        ("--ssh.targets", "esxi", "--ssh.timeout", "0"): "--ssh.timeout",
    }
    for args, message in cases.items():
        code, stderr = _serve_error(*args)
        assert code != 0, args
        assert message in stderr, (args, stderr)
        assert len(stderr.strip().splitlines()) == 1, stderr


def test_the_flags_build_ssh_settings_for_other_commands(tmp_path: Path) -> None:
    """``top --ssh.targets`` gets the same settings from the same flags (commands/ssh_args.py)."""
    import argparse

    from vgpumon.commands.ssh_args import add_ssh_arguments, ssh_settings_from

    parser = argparse.ArgumentParser()
    parser.add_argument("--sim")
    parser.add_argument("--nvml-module")
    add_ssh_arguments(parser)
    none = parser.parse_args([])
    assert ssh_settings_from(none, "top") is None
    args = parser.parse_args(
        ["--ssh.targets", "root@esxi-1", "--ssh.targets", "esxi-2:2222", "--ssh.timeout", "4"]
    )
    settings = ssh_settings_from(args, "top")
    assert settings is not None
    assert [t.name for t in settings.targets] == ["esxi-1", "esxi-2:2222"]
    assert settings.timeout_seconds == 4.0


def test_the_config_file_ssh_section_and_flags_over_it(tmp_path: Path) -> None:
    import argparse

    from vgpumon.commands import serve
    from vgpumon.commands.ssh_args import ssh_settings_from

    config = tmp_path / "serve.yml"
    config.write_text(
        "ssh:\n"
        "  targets: [root@esxi-1, esxi-2:2222]\n"
        "  identity: keys/id_rsa\n"
        "  known_hosts: known_hosts\n"
        "  timeout: 2s\n"
        "  interval: 1m\n"
        "  max_sessions: 4\n"
        "  nvidia_smi: /usr/bin/nvidia-smi\n"
    )
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "id_rsa").write_text("")  # read at start: they must exist
    (tmp_path / "known_hosts").write_text("")
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    args = parser.parse_args(["--config", str(config), "--ssh.timeout", "5"])
    ssh = ssh_settings_from(serve.settings_from_args(args), "serve")
    assert ssh is not None
    assert [t.name for t in ssh.targets] == ["esxi-1", "esxi-2:2222"]
    assert ssh.identity_files == (str(tmp_path / "keys" / "id_rsa"),)  # relative to the file
    assert ssh.known_hosts == str(tmp_path / "known_hosts")
    assert (ssh.timeout_seconds, ssh.interval_seconds, ssh.max_sessions) == (5.0, 60.0, 4)
    assert ssh.nvidia_smi == "/usr/bin/nvidia-smi"

    config.write_text("ssh:\n  targets: [esxi-1]\n  timeout: soon\n")
    code, stderr = _serve_error("--config", str(config))
    assert code != 0 and "ssh.timeout" in stderr and len(stderr.strip().splitlines()) == 1


def test_top_ssh_reads_the_agentless_fleet() -> None:
    """``vgpumon top --ssh.targets HOST`` reads the same fleet serve renders (no NVML in the
    process)."""
    import argparse

    import pytest

    from vgpumon.commands import top
    from vgpumon.errors import ConfigError
    from vgpumon.sources.ssh import SshFleet

    parser = argparse.ArgumentParser()
    top.add_arguments(parser)
    made = top.feed_from_args(
        parser.parse_args(["--ssh.targets", "root@esxi-1", "--ssh.targets", "esxi-2"])
    )
    assert isinstance(made.feed, SshFleet) and not made.this_host
    assert made.feed.latest.names == ("esxi-1", "esxi-2")
    with pytest.raises(ConfigError, match="drop --url"):
        top.feed_from_args(parser.parse_args(["--ssh.targets", "esxi-1", "--url", "http://x:9839"]))
    with pytest.raises(ConfigError, match="cannot be combined with an NVML source"):
        top.feed_from_args(parser.parse_args(["--ssh.targets", "esxi-1", "--sim", "vgpu-guest"]))


def test_a_missing_key_or_known_hosts_file_is_refused_at_start(tmp_path: Path) -> None:
    """Like ``--config``: a file that cannot be read stops serve at once (rc 2, one line naming
    it), instead of failing every poll with an error that does not say which file."""
    missing = tmp_path / "nonexistent"
    for flag in ("--ssh.identity", "--ssh.known-hosts"):
        code, stderr = _serve_error(
            "--ssh.targets", "esxi", flag, str(missing), "--web.listen-address", "127.0.0.1:0"
        )
        assert code == 2, (flag, stderr)
        assert stderr.strip().splitlines() == [
            f"vgpumon: error: {flag}: cannot read {missing}: No such file or directory"
        ]
