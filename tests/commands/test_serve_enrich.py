"""`vgpumon serve` with the enrichers: flags, config file keys, and names over HTTP."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from ci_helpers import optional_binding
from enrich_helpers import wait_for
from export_helpers import samples_by_name
from http_helpers import LiveClient
from kubelet_helpers import FakeKubelet, pod, socket_dir  # noqa: F401 - fixture

from vgpumon.cli import build_parser
from vgpumon.collect.enrich.base import Enricher
from vgpumon.collect.enrich.kubelet import DEFAULT_RESOURCES, DEFAULT_SOCKET, KubeletEnricher
from vgpumon.collect.enrich.libvirt import DEFAULT_URI, LibvirtEnricher
from vgpumon.collect.sampler import Sampler
from vgpumon.commands.serve import sampler_config, sampler_recipe, settings_from_args
from vgpumon.config.serve import ServeSettings
from vgpumon.errors import ConfigError
from vgpumon.export.server import build_app
from vgpumon.metrics.table import ExportOptions
from vgpumon.model import from_json
from vgpumon.nvml.loader import open_session

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "libvirt" / "kvm-vgpu-timesliced.xml"
MDEV_3 = "fe4138f0-efff-9274-4579-142902701cd9"


def parse(*argv: str) -> ServeSettings:
    return settings_from_args(build_parser("serve").parse_args(["serve", *argv]))


def build_enrichers(settings: ServeSettings) -> list[Enricher]:
    """The enrichers the sampler process builds for these settings."""
    return sampler_recipe(settings).enrichers()


def test_enrichers_are_off_by_default() -> None:
    settings = parse()
    assert settings.libvirt_uri is None and settings.kubelet_socket is None
    # Only the metering stage, which asks no one (vgpumon.collect.metering).
    assert [e.name for e in build_enrichers(settings)] == ["metering"]


def test_flags_with_and_without_values() -> None:
    optional_binding("libvirt", "libvirt")
    assert parse("--libvirt.uri").libvirt_uri == DEFAULT_URI
    assert parse("--libvirt.uri", "qemu:///session").libvirt_uri == "qemu:///session"
    assert parse("--kubernetes.socket").kubelet_socket == DEFAULT_SOCKET
    settings = parse(
        "--kubernetes.socket=/run/k.sock",
        "--kubernetes.resources",
        "nvidia.com/gpu",
        "--kubernetes.resources",
        "nvidia.com/mig-*",
        "--kubernetes.pod-series",
    )
    assert settings.kubelet_socket == "/run/k.sock"
    assert settings.kubernetes_resources == ("nvidia.com/gpu", "nvidia.com/mig-*")
    assert settings.kubernetes_pod_series is True
    libvirt, kubelet, _metering = build_enrichers(parse("--libvirt.uri", "--kubernetes.socket"))
    assert isinstance(libvirt, LibvirtEnricher) and libvirt.config.uri == DEFAULT_URI
    assert isinstance(kubelet, KubeletEnricher)
    assert kubelet.config.resources == DEFAULT_RESOURCES


def test_config_file_keys(tmp_path: Path) -> None:
    path = tmp_path / "serve.yml"
    path.write_text(
        "libvirt: {uri: 'qemu+ssh://root@h12/system'}\n"
        "kubernetes:\n"
        "  socket: /run/k.sock\n"
        "  resources: nvidia.com/gpu\n"
        "  pod_series: true\n"
    )
    settings = parse("--config", str(path))
    assert settings.libvirt_uri == "qemu+ssh://root@h12/system"
    assert settings.kubelet_socket == "/run/k.sock"
    assert settings.kubernetes_resources == ("nvidia.com/gpu",)
    assert settings.kubernetes_pod_series is True
    path.write_text("kubernetes: {pod_series: 3}\n")
    with pytest.raises(ConfigError, match=r"kubernetes\.pod_series: expected true or false"):
        parse("--config", str(path))
    path.write_text("kubernetes: {resources: []}\n")
    with pytest.raises(ConfigError, match=r"kubernetes\.resources"):
        parse("--config", str(path))


def test_kubernetes_api_outside_a_pod_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    settings = parse("--kubernetes.socket", "--kubernetes.api")
    assert settings.kubernetes_api is True
    with pytest.raises(ConfigError, match="needs to run in a pod"):
        build_enrichers(settings)


def test_a_missing_extra_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "grpc", None)
    with pytest.raises(ConfigError, match=r"install the \[kubernetes\] extra: .* -m pip install "):
        build_enrichers(parse("--kubernetes.socket"))


async def test_names_and_pods_over_http(socket_dir: str) -> None:  # noqa: F811 - fixture
    optional_binding("libvirt", "libvirt")
    kubelet = FakeKubelet(os.path.join(socket_dir, "kubelet.sock"))
    kubelet.pods = [
        pod("virt-launcher-win11-desk-x7k2p", "vdi", "nvidia.com/NVIDIA_L40S-2B", MDEV_3)
    ]
    kubelet.start()
    settings = parse(
        "--sim",
        "kvm-vgpu-timesliced",
        "--interval",
        "0.05",
        "--libvirt.uri",
        f"test://{FIXTURE}",
        "--kubernetes.socket",
        kubelet.path,
    )
    enrichers = build_enrichers(settings)
    sampler = Sampler(open_session(sim=settings.sim), sampler_config(settings), enrichers=enrichers)
    stop = asyncio.Event()
    sampling = asyncio.create_task(sampler.run(stop))
    client = LiveClient(build_app(sampler, options=ExportOptions(pod_series=True)))
    await client.start_server()
    try:

        def named() -> bool:
            snap = sampler.latest
            return bool(
                snap
                and snap.allocations
                and any(c.name == "libvirt" and c.success for c in snap.collectors)
            )

        await asyncio.to_thread(wait_for, named, "names in a snapshot")
        # The server publishes renders of the sampler's snapshots on its own schedule: scrape
        # until one with the names is served.
        give_up = asyncio.get_running_loop().time() + 30
        while True:
            body = await (await client.get("/metrics")).text()
            series = samples_by_name(body)
            if "vgpumon_gpu_allocation_info" in series and any(
                s[0]["vm_name"] == "vm-render-07" for s in series["vgpumon_vgpu_info"]
            ):
                break
            assert asyncio.get_running_loop().time() < give_up, "names never reached /metrics"
            await asyncio.sleep(0.05)
        names = {s[0]["vgpu_id"]: s[0]["vm_name"] for s in series["vgpumon_vgpu_info"]}
        assert names["1"] == "vm-render-07"
        assert names["3"] == "vdi-desk-03"  # libvirt's name wins over the pod's
        (allocation,) = series["vgpumon_gpu_allocation_info"]
        assert allocation[0]["vm_name"] == "win11-desk" and allocation[0]["vgpu_id"] == "3"
        assert series["vgpumon_pod_gpu_utilization_ratio"]
        snap = from_json(await (await client.get("/api/v1/snapshot")).read())
        assert snap.gpus[0].vgpu_instances[0].vm is not None
        assert snap.gpus[0].vgpu_instances[0].vm.name == "vm-render-07"
        assert snap.allocations[0].pod == "virt-launcher-win11-desk-x7k2p"
    finally:
        stop.set()
        await client.close()
        await asyncio.wait_for(sampling, timeout=10)
        sampler.close()
        kubelet.stop()


def test_snapshot_json_carries_the_names(capsys: pytest.CaptureFixture[str]) -> None:
    """A one-shot snapshot waits for the enrichers' first read, so the names are in it."""
    from vgpumon.cli import main

    optional_binding("libvirt", "libvirt")
    rc = main(
        ["snapshot", "--sim", "kvm-vgpu-timesliced", "--libvirt.uri", f"test://{FIXTURE}", "--json"]
    )
    assert rc == 0
    snap = from_json(capsys.readouterr().out)
    assert snap.gpus[0].vgpu_instances[0].vm is not None
    assert snap.gpus[0].vgpu_instances[0].vm.name == "vm-render-07"
    assert any(c.name == "libvirt" and c.success for c in snap.collectors)


def test_record_masks_what_the_enrichers_named(capsys: pytest.CaptureFixture[str]) -> None:
    from vgpumon.cli import main

    optional_binding("libvirt", "libvirt")
    rc = main(["record", "--sim", "kvm-vgpu-timesliced", "--libvirt.uri", f"test://{FIXTURE}"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "vm-render-07" not in out and "Render node" not in out


def test_a_reload_applies_pod_series_and_names_enricher_changes() -> None:
    from vgpumon.commands.serve import reloaded

    got = reloaded(parse("--kubernetes.socket", "/run/k.sock", "--kubernetes.pod-series"))
    assert got.options.pod_series is True
    restart = dict(got.restart_only)
    assert restart["kubelet_socket"] == "/run/k.sock"
    assert restart["libvirt_uri"] is None
