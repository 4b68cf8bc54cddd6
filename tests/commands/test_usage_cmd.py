"""``vgpumon usage``: its queries total the right hours (evaluated by promtool over the metering
rules), and the command prints them as a table, CSV or JSON from a Prometheus on loopback, with
one-line errors for bad input and unreachable or refusing servers."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from prometheus_helpers import PrometheusStandIn

from vgpumon.cli import main
from vgpumon.sources.usage import QUANTITIES, hour_range, query

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "packaging" / "prometheus" / "vgpumon-metering.rules.yml"
START = 1_793_491_200.0  # 2026-11-01T00:00:00Z


# --------------------------------------------------------------------------- the queries


def test_the_queries_total_whole_hours_with_promtool(tmp_path: Path) -> None:
    """Over 3 hours at 50 % busy, VM vm-a has 1.5 GPU-hours; the query says so."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (apt-get install prometheus)")
    shutil.copy(RULES, tmp_path / RULES.name)
    ids = 'instance="h:9839",job="vgpumon",gpu="0",uuid="GPU-0",vgpu_id="1"'
    start, end = 3600.0, 4 * 3600.0  # hours 1-4 of promtool's clock
    test = {
        "rule_files": [RULES.name],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [
                    {
                        "series": f'vgpumon_vgpu_info{{{ids},vm_name="vm-a",vm_id="x"}}',
                        "values": "1x300",
                    },
                    {"series": f"vgpumon_vgpu_busy_seconds_total{{{ids}}}", "values": "0+30x300"},
                    # 1 GiB held all along: 3 GiB-hours in 3 hours.
                    {
                        "series": f"vgpumon_vgpu_framebuffer_byte_seconds_total{{{ids}}}",
                        "values": "0+64424509440x300",
                    },
                    {
                        "series": f"vgpumon_vgpu_energy_joules_total{{{ids}}}",
                        "values": "0+15000x300",
                    },
                ],
                "promql_expr_test": [
                    {
                        "expr": query("vm", q, start, end),
                        "eval_time": "4h",
                        "exp_samples": [{"labels": '{vm="vm-a"}', "value": v}],
                    }
                    for q, v in zip(QUANTITIES, (1.5, 3.0, 0.75), strict=True)
                ],
            }
        ],
    }
    path = tmp_path / "usage.test.yml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run(
        [promtool, "test", "rules", path.name],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_hour_range_keeps_whole_hours() -> None:
    assert hour_range(START + 10, START + 3 * 3600 + 5) == (START + 3600, START + 3 * 3600)


# ------------------------------------------------------------------ a Prometheus on loopback

ANSWERS = {
    "gpu_hours": [("acme", 12.5), ("beta", 3.25)],
    "memory_gib_hours": [("acme", 400.0), ("beta", 80.0)],
    "energy_kwh": [("acme", 4.2)],
}


@pytest.fixture
def prometheus() -> Iterator[PrometheusStandIn]:
    with PrometheusStandIn() as stand_in:

        def vector(promql: str) -> list[tuple[dict[str, str], str]]:
            quantity = next(q for q in ANSWERS if f"_{q}:" in promql)
            return [({"tenant": t}, str(v)) for t, v in ANSWERS[quantity]]

        stand_in.vector = vector
        yield stand_in


RANGE = ["--from", "2026-11-01", "--to", "2026-12-01T00:00:00Z"]


def test_table(prometheus: PrometheusStandIn, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["usage", "--prometheus", prometheus.url, *RANGE]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "usage by tenant, 2026-11-01T00:00:00Z to 2026-12-01T00:00:00Z"
    assert out[1].split() == ["tenant", "GPU-hours", "GiB-hours", "kWh"]
    assert out[2].split() == ["acme", "12.500", "400.000", "4.200"]
    assert out[3].split() == ["beta", "3.250", "80.000", "-"]
    assert out[-1].split() == ["total", "15.750", "480.000", "4.200"]
    # 30 days of whole hours, evaluated at the end of the range.
    first = prometheus.params[0]
    assert first["query"] == [
        "sum by (tenant) (sum_over_time((vgpumon:tenant_gpu_hours:increase1h and on () "
        f"vector(time()) - 3600 >= {START:.0f})[2592000s:1h]))"
    ]
    assert float(first["time"][0]) == START + 30 * 86400


def test_csv_and_json(prometheus: PrometheusStandIn, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["usage", "--prometheus", prometheus.url, *RANGE, "--csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "from,to,tenant,gpu_hours,memory_gib_hours,energy_kwh"
    assert lines[1] == "2026-11-01T00:00:00Z,2026-12-01T00:00:00Z,acme,12.5,400.0,4.2"
    assert lines[2].endswith("beta,3.25,80.0,")
    assert main(["usage", "--prometheus", prometheus.url, *RANGE, "--json", "--by", "tenant"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rows"][0] == {
        "tenant": "acme",
        "gpu_hours": 12.5,
        "memory_gib_hours": 400.0,
        "energy_kwh": 4.2,
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--from", "yesterday"], "--from 'yesterday': give RFC 3339"),
        (["--range", "soon"], "--range: bad duration"),
        (["--from", "2026-11-02", "--to", "2026-11-01"], "--from must be before --to"),
        (["--from", "2026-11-01T00:10:00Z", "--to", "2026-11-01T00:50:00Z"], "no whole hour"),
        (["--from", "2026-11-01", "--range", "1d"], "not both"),
        (["--by", "galaxy"], "invalid choice"),
    ],
)
def test_bad_input_is_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["usage", "--prometheus", "http://127.0.0.1:9", *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    ("mode", "message"),
    [("error", "refused sum by (tenant) (sum_over_time"), ("html", "not JSON")],
)
def test_server_errors_are_one_line(
    prometheus: PrometheusStandIn, mode: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    if mode == "error":
        prometheus.error = "parse error"
    else:
        prometheus.raw = b"<html>not prometheus</html>"
    assert main(["usage", "--prometheus", prometheus.url, *RANGE]) != 0
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_unreachable_prometheus(capsys: pytest.CaptureFixture[str]) -> None:
    with __import__("socket").socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connections are refused
        assert main(["usage", "--prometheus", f"http://127.0.0.1:{port}", *RANGE]) != 0
    err = capsys.readouterr().err
    assert "Prometheus at http://127.0.0.1" in err and err.count("\n") == 1


# ---------------------------------------------------------------- since start, from a snapshot


def test_report_from_a_snapshot() -> None:
    """The TUI's since-start table: the same quantities from the snapshot's own counters."""
    from export_helpers import rich_snapshot

    from vgpumon.sources.usage import report_from_snapshot

    snap = rich_snapshot()
    by_vm = report_from_snapshot(snap, "vm")
    vgpus = snap.gpus[0].vgpu_instances
    assert len(by_vm.rows) >= 1
    total = sum(r.values["gpu_hours"] for r in by_vm.rows)
    assert total == pytest.approx(30.0 * len(vgpus) / 3600)
    pods = report_from_snapshot(snap, "pod")
    assert [(r.key, round(r.values["energy_kwh"] * 3.6e6)) for r in pods.rows] == [
        (("ml", "infer-a"), 300)
    ]
    tenants = report_from_snapshot(snap, "tenant")
    assert {r.key for r in tenants.rows} >= {("ml",)}
