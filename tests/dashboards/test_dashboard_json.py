"""The committed dashboards are what dashboards/generate.py writes, and import as they are."""

from __future__ import annotations

import json

import pytest
from dashboard_helpers import GENERATOR, generator

GRAFANA_UNITS = {"percentunit", "bytes", "watt", "hertz", "celsius", "s", "joule", "Bps", "none"}


def test_committed_json_is_what_the_generator_writes() -> None:
    gen = generator()
    committed = {p.name for p in gen.OUT.glob("*.json")}
    assert committed == {gen.file_name(d) for d in gen.DASHBOARDS}, "stale or missing files"
    for dashboard in gen.DASHBOARDS:
        path = gen.OUT / gen.file_name(dashboard)
        assert path.read_text(encoding="utf-8") == gen.render(dashboard), (
            f"{path.name} differs from its source: run python {GENERATOR.name}"
        )


@pytest.mark.parametrize("name", ["fleet", "vgpu-host", "mig", "gpu", "exporter"])
def test_dashboard_is_importable(name: str) -> None:
    gen = generator()
    doc = json.loads((gen.OUT / f"vgpumon-{name}.json").read_text(encoding="utf-8"))
    assert doc["uid"] == f"vgpumon-{name}"
    assert doc["schemaVersion"] == gen.SCHEMA_VERSION
    assert "id" not in doc, "an id would clash with the importing Grafana's own"
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert "instance" in variables
    ids = [p["id"] for p in doc["panels"]]
    assert len(ids) == len(set(ids)), "panel ids are unique"
    for panel in doc["panels"]:
        assert panel["gridPos"]["x"] >= 0 and panel["gridPos"]["x"] + panel["gridPos"]["w"] <= 24
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
        assert panel["fieldConfig"]["defaults"]["unit"] in GRAFANA_UNITS, panel["title"]
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}"
            # Every variable used in a query is defined by the dashboard (or Grafana's own).
            for var in ("$instance", "$gpu", "$vm"):
                if var in target["expr"]:
                    assert var[1:] in variables, f"{panel['title']}: {var} undefined"


def test_ratio_panels_use_percent_unit_and_stay_within_zero_and_one() -> None:
    gen = generator()
    for dashboard in gen.DASHBOARDS:
        for panel, query in dashboard.queries():
            if "_ratio" in query.expr and panel.kind == "timeseries":
                assert panel.unit == "percentunit", panel.title
            if panel.unit == "percentunit" and panel.kind == "timeseries":
                assert (panel.min, panel.max) == (0, 1), panel.title


def test_every_query_names_the_scenarios_it_is_meant_for() -> None:
    gen = generator()
    known = {gen.VGPU, gen.MIG, gen.BARE, gen.LICENSE}
    for dashboard in gen.DASHBOARDS:
        for panel, query in dashboard.queries():
            assert query.kinds, f"{dashboard.uid} / {panel.title}: no scenario kind"
            assert set(query.kinds) <= known, query.kinds
