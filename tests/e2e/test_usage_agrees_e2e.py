"""``vgpumon usage`` and the Grafana Usage dashboard give the same totals, to the digit, for the
same range, on a real Prometheus: the dashboard's billing queries, filled in as Grafana fills
them for a range on whole hours, and ``usage --json`` for that range, against the known answer.
(Before, on Prometheus 2.x, the dashboard also counted the hour before the range: 499.775
GPU-hours where usage said 484.224.)

The metering rules' hourly series of 30 hours are written straight into Prometheus' storage
(``promtool tsdb create-blocks-from openmetrics``), as the rules would have recorded them, so the
test runs in seconds and knows every hour's value: the total over a range is the sum of the
hours after its start, up to and including its end.
"""

from __future__ import annotations

import io
import json
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from dashboard_helpers import OUT, instantiate
from prometheus_helpers import prometheus_binary, start_prometheus, stop_all

from vgpumon.cli import main
from vgpumon.sources.usage import GROUPS, QUANTITIES

pytestmark = pytest.mark.e2e

HOUR = 3600
HOURS = 30
RANGE_HOURS = 24
ROWS: dict[str, list[dict[str, str]]] = {
    "tenant": [{"tenant": "acme"}, {"tenant": "globex"}],
    "namespace": [{"namespace": "ml"}, {"namespace": "render"}],
    "vm": [{"vm": "vm-render-07"}, {"vm": "6f1c2a7e"}],
    "pod": [{"namespace": "ml", "pod": "train-0"}, {"namespace": "ml", "pod": "infer-a"}],
}
TITLES = {"tenant": "By tenant", "namespace": "By namespace", "vm": "By VM", "pod": "By pod"}


def value(by: str, row: int, quantity: int, hour: int) -> float:
    """The hourly value of one series (distinct per series and hour, not round)."""
    return round(0.125 + 0.37 * hour + 1.9 * row + 11.3 * quantity + 0.001 * len(by), 6)


@dataclass
class Stored:
    url: str
    end: float  # the last whole hour with a value


def openmetrics(end: float) -> str:
    lines = []
    for by, rows in ROWS.items():
        for q, quantity in enumerate(QUANTITIES):
            name = f"vgpumon:{by}_{quantity}:increase1h"
            lines.append(f"# TYPE {name} gauge")
            for r, labels in enumerate(rows):
                text = ",".join(f'{k}="{v}"' for k, v in labels.items())
                for hour in range(HOURS + 1):
                    at = end - (HOURS - hour) * HOUR
                    lines.append(f"{name}{{{text}}} {value(by, r, q, hour)} {at:.0f}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def stored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stored]:
    binary = prometheus_binary()
    promtool = str(Path(binary).with_name("promtool"))
    tmp = tmp_path_factory.mktemp("usage")
    end = (time.time() // HOUR - 1) * HOUR
    source = tmp / "hourly.om"
    source.write_text(openmetrics(end))
    (tmp / "data").mkdir()
    subprocess.run(
        [promtool, "tsdb", "create-blocks-from", "openmetrics", str(source), str(tmp / "data")],
        check=True,
        capture_output=True,
    )
    url, proc, log = start_prometheus(tmp, [])
    try:
        give_up = time.monotonic() + 30
        while time.monotonic() < give_up:
            try:
                if grafana_query(url, "count(vgpumon:tenant_gpu_hours:increase1h)", end):
                    break
            except OSError:
                pass
            time.sleep(0.3)
        else:
            pytest.fail(f"Prometheus did not load the blocks\n{log.read_text()[-2000:]}")
        yield Stored(url, end)
    finally:
        stop_all([proc])


def grafana_query(url: str, promql: str, at: float) -> list[dict[str, Any]]:
    params = urllib.parse.urlencode({"query": promql, "time": f"{at:.0f}"})
    with urllib.request.urlopen(f"{url}/api/v1/query?{params}", timeout=10) as answer:
        body = json.load(answer)
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def as_grafana(expr: str, start: float, end: float) -> str:
    """A panel's query as Grafana sends it for the range [start, end] (an instant query at
    ``end``): the range in seconds, its start in Unix seconds, the hidden constants."""
    filled = (
        expr.replace("$__range", f"{end - start:.0f}s")
        .replace("${__from:date:seconds}", f"{start:.0f}")
        .replace("${hour_seconds}", str(HOUR))
        .replace("$hour", "1h")
    )
    return instantiate(filled)


def dashboard_rows(url: str, by: str, start: float, end: float) -> dict[tuple[str, ...], dict]:
    doc = json.loads((OUT / "vgpumon-usage.json").read_text(encoding="utf-8"))
    panel = next(p for p in doc["panels"] if p.get("title") == TITLES[by])
    rows: dict[tuple[str, ...], dict[str, float]] = {}
    for target, quantity in zip(panel["targets"], QUANTITIES, strict=True):
        for series in grafana_query(url, as_grafana(target["expr"], start, end), end):
            key = tuple(series["metric"].get(label, "") for label in GROUPS[by])
            rows.setdefault(key, {})[quantity] = float(series["value"][1])
    return rows


def usage_rows(url: str, by: str, start: float, end: float) -> dict[tuple[str, ...], dict]:
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(
            ["usage", "--prometheus", url, "--from", f"{start:.0f}", "--to", f"{end:.0f}",
             "--by", by, "--json"]
        )  # fmt: skip
    assert code == 0
    doc = json.loads(out.getvalue())
    return {
        tuple(row[label] for label in GROUPS[by]): {q: row[q] for q in QUANTITIES}
        for row in doc["rows"]
    }


def known(by: str, start: float, end: float) -> dict[tuple[str, ...], dict[str, float]]:
    """The hours after ``start`` up to ``end``, summed from the values written."""
    first = HOURS - round((end - start) / HOUR) + 1  # the hour index of start + 1h
    last = HOURS
    return {
        tuple(labels[label] for label in GROUPS[by]): {
            quantity: sum(value(by, r, q, h) for h in range(first, last + 1))
            for q, quantity in enumerate(QUANTITIES)
        }
        for r, labels in enumerate(ROWS[by])
    }


@pytest.mark.parametrize("by", list(ROWS))
def test_usage_and_the_dashboard_agree_on_a_range_of_whole_hours(stored: Stored, by: str) -> None:
    start, end = stored.end - RANGE_HOURS * HOUR, stored.end
    expected = known(by, start, end)
    from_dashboard = dashboard_rows(stored.url, by, start, end)
    from_usage = usage_rows(stored.url, by, start, end)
    assert from_usage == from_dashboard, "usage and the dashboard, to the digit"
    for key, quantities in expected.items():
        for quantity, total in quantities.items():
            # The dashboard's numbers, from Prometheus' sum: equal to the cent, and far closer.
            assert from_dashboard[key][quantity] == pytest.approx(total, rel=1e-12), (key, quantity)


def test_the_totals_panels_agree_with_usage(stored: Stored) -> None:
    start, end = stored.end - RANGE_HOURS * HOUR, stored.end
    doc = json.loads((OUT / "vgpumon-usage.json").read_text(encoding="utf-8"))
    rows = usage_rows(stored.url, "tenant", start, end)
    for quantity, title in zip(
        QUANTITIES, ("GPU-hours", "Memory GiB-hours", "Energy"), strict=True
    ):
        panel = next(p for p in doc["panels"] if p.get("title") == title)
        (series,) = grafana_query(
            stored.url, as_grafana(panel["targets"][0]["expr"], start, end), end
        )
        assert float(series["value"][1]) == pytest.approx(
            sum(r[quantity] for r in rows.values()), rel=1e-12
        )
