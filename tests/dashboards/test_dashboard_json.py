"""The committed dashboards are what dashboards/generate.py writes, decode with the Grafana
Foundation SDK's typed models, and tell an operator what is good and what is bad."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from dashboard_helpers import GENERATOR, OUT, generator

GRAFANA_UNITS = {
    *("percentunit", "bytes", "watt", "hertz", "celsius", "s", "joule", "Bps", "none"),
    "kwatth",  # kWh, the unit energy is billed in
}
# Panels that must say what is good and bad: a colour per threshold step or per mapped value.
JUDGING = {"stat", "gauge", "state-timeline", "bargauge", "status-history"}
NOISE = {"__name__", "mdev_uuid", "Time", "job", "vm_uuid"}


def committed() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(OUT.glob("*.json"))}


def panels(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in doc["panels"] if p["type"] != "row"]


def test_committed_json_is_what_the_generator_writes() -> None:
    gen = generator()
    assert {p.name for p in OUT.glob("*.json")} == {b.file_name for b in gen.DASHBOARDS}, (
        "stale or missing files"
    )
    for board in gen.DASHBOARDS:
        path = OUT / board.file_name
        assert path.read_text(encoding="utf-8") == board.render(), (
            f"{path.name} differs from its source: run python {GENERATOR.name}"
        )


def decode_problems(doc: dict[str, Any]) -> list[str]:
    """Panels of ``doc`` that do not decode to the SDK's typed models of their plugin."""
    generator()
    from grafana_foundation_sdk.cog import runtime
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models import dashboard as dm
    from grafana_foundation_sdk.models import prometheus

    register_default_plugins()
    decoded = dm.Dashboard.from_json(doc)
    problems = []
    for raw, panel in zip(doc["panels"], decoded.panels or [], strict=True):
        where = raw.get("title", "?")
        if raw["type"] == "row":
            if not isinstance(panel, dm.RowPanel):
                problems.append(f"{where}: not a row")
            continue
        config = runtime.panelcfg_config(raw["type"])
        if config is None or config.options_from_json_hook is None:
            problems.append(f"{where}: panel type {raw['type']!r} unknown to Grafana 11")
            continue
        if "options" not in raw:
            problems.append(f"{where}: no options")
            continue
        typed = type(config.options_from_json_hook(raw["options"]))
        if not isinstance(panel, dm.Panel) or not isinstance(panel.options, typed):
            problems.append(f"{where}: options are not {typed.__name__}")
        targets = panel.targets or [] if isinstance(panel, dm.Panel) else []
        if not targets or not all(isinstance(t, prometheus.Dataquery) and t.expr for t in targets):
            problems.append(f"{where}: queries are not Prometheus queries")
    return problems


def test_every_panel_decodes_with_the_sdk_typed_models() -> None:
    """Grafana's own schema, as the SDK types it: options and queries of the panel's plugin."""
    problems = {name: bad for name, doc in committed().items() if (bad := decode_problems(doc))}
    assert problems == {}


def test_a_panel_that_does_not_decode_is_caught() -> None:
    """The decoding check can fail: the removed "graph" panel, a panel without options."""
    doc = committed()["vgpumon-fleet.json"]
    stat_panel = next(p for p in panels(doc) if p["type"] == "stat")
    graph = {**stat_panel, "type": "graph", "title": "old graph"}
    bare = {k: v for k, v in stat_panel.items() if k != "options"} | {"title": "bare"}
    problems = decode_problems({**doc, "panels": [graph, bare]})
    assert problems == [
        "old graph: panel type 'graph' unknown to Grafana 11",
        "bare: no options",
    ]


@pytest.mark.parametrize(
    "name", ["fleet", "vgpu-host", "mig", "gpu", "exporter", "usage", "capacity"]
)
def test_dashboard_is_importable(name: str) -> None:
    doc = committed()[f"vgpumon-{name}.json"]
    assert doc["uid"] == f"vgpumon-{name}"
    assert doc["schemaVersion"] == generator().SCHEMA_VERSION
    assert "id" not in doc, "an id would clash with the importing Grafana's own"
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    assert {"job", "cluster", "instance", "host"} <= set(variables)
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
            for var in re.findall(r"\$([A-Za-z_]\w*)", target["expr"]):
                assert var.startswith("__") or var in variables, f"{panel['title']}: ${var}"


def test_every_panel_has_a_description() -> None:
    missing = [
        f"{name} / {p['title']}"
        for name, doc in committed().items()
        for p in panels(doc)
        if len(p.get("description", "")) < 20
    ]
    assert missing == []


def judged(panel: dict[str, Any]) -> bool:
    """Thresholds with more than one colour, or value mappings with a colour each."""
    defaults = panel["fieldConfig"]["defaults"]
    steps = defaults.get("thresholds", {}).get("steps", [])
    mapped = [
        result
        for mapping in defaults.get("mappings", [])
        for result in mapping.get("options", {}).values()
    ]
    colours = {s["color"] for s in steps}
    by_thresholds = len(colours) > 1 and defaults.get("color", {}).get("mode") == "thresholds"
    by_mappings = bool(mapped) and all(r.get("color") for r in mapped)
    return by_thresholds or by_mappings


def test_every_stat_gauge_and_state_panel_says_what_is_good_and_bad() -> None:
    """Neutral facts (energy in range, vGPUs per GPU) may use one colour: they judge nothing,
    and say so by having no second colour. Everything named a problem must have one."""
    unjudged = []
    for name, doc in committed().items():
        for panel in panels(doc):
            if panel["type"] not in JUDGING:
                continue
            steps = panel["fieldConfig"]["defaults"].get("thresholds", {}).get("steps", [])
            if not steps and not panel["fieldConfig"]["defaults"].get("mappings"):
                unjudged.append(f"{name} / {panel['title']}: no thresholds or mappings")
            if panel["type"] == "state-timeline" and not judged(panel):
                unjudged.append(f"{name} / {panel['title']}: states without colours")
    assert unjudged == []


@pytest.mark.parametrize(
    ("dashboard", "title"),
    [
        ("vgpumon-fleet.json", "Lost GPUs"),
        ("vgpumon-fleet.json", "Xid errors in range"),
        ("vgpumon-fleet.json", "Unlicensed vGPUs"),
        ("vgpumon-fleet.json", "Exporters down"),
        ("vgpumon-fleet.json", "NVLink links down"),
        ("vgpumon-fleet.json", "Unlicensed guest features"),
    ],
)
def test_problem_counts_are_green_at_zero_and_red_above(dashboard: str, title: str) -> None:
    panel = next(
        p for p in panels(committed()[dashboard]) if p["title"] == title and p["type"] == "stat"
    )
    defaults = panel["fieldConfig"]["defaults"]
    assert defaults["color"]["mode"] == "thresholds"
    steps = defaults["thresholds"]["steps"]

    def colour(value: float) -> str:
        return [s["color"] for s in steps if s["value"] is None or value >= s["value"]][-1]

    assert (colour(0), colour(1), colour(5)) == ("green", "red", "red")


@pytest.mark.parametrize(
    ("dashboard", "title", "value", "text", "color"),
    [
        ("vgpumon-exporter.json", "Scrape up", "0", "down", "red"),
        ("vgpumon-exporter.json", "Scrape up", "1", "up", "green"),
        ("vgpumon-exporter.json", "NVML up", "0", "down", "red"),
        ("vgpumon-exporter.json", "Sampler wedged", "1", "yes", "red"),
        ("vgpumon-gpu.json", "NVLink link state", "0", "down", "red"),
    ],
)
def test_up_down_timelines_map_their_values(
    dashboard: str, title: str, value: str, text: str, color: str
) -> None:
    panel = next(p for p in panels(committed()[dashboard]) if p["title"] == title)
    assert panel["type"] == "state-timeline"
    options = panel["fieldConfig"]["defaults"]["mappings"][0]["options"]
    assert (options[value]["text"], options[value]["color"]) == (text, color)


def test_license_columns_colour_each_state() -> None:
    for name, doc in committed().items():
        for panel in panels(doc):
            for override in panel["fieldConfig"].get("overrides", []):
                if override["matcher"]["options"] not in ("License", "State"):
                    continue
                if "license" not in panel["title"].lower():
                    continue
                mappings = next(p["value"] for p in override["properties"] if p["id"] == "mappings")
                options = mappings[0]["options"]
                assert options["licensed"]["color"] == "green", f"{name} / {panel['title']}"
                assert options["unlicensed"]["color"] == "red", f"{name} / {panel['title']}"


def test_tables_show_the_columns_an_operator_reads() -> None:
    """Every table keeps only the fields it names (no __name__, mdev_uuid, Time, job) and
    titles them."""
    for name, doc in committed().items():
        for panel in panels(doc):
            if panel["type"] != "table":
                continue
            ids = [t["id"] for t in panel.get("transformations", [])]
            where = f"{name} / {panel['title']}"
            assert "filterFieldsByName" in ids and "organize" in ids, where
            kept = next(
                t["options"]["include"]["names"]
                for t in panel["transformations"]
                if t["id"] == "filterFieldsByName"
            )
            assert kept and not NOISE & set(kept), where
            renames = next(
                t["options"]["renameByName"]
                for t in panel["transformations"]
                if t["id"] == "organize"
            )
            assert set(renames) == set(kept), where


def test_ratio_panels_use_percent_unit_and_stay_within_zero_and_one() -> None:
    for name, doc in committed().items():
        for panel in panels(doc):
            if panel["type"] != "timeseries":
                continue
            defaults = panel["fieldConfig"]["defaults"]
            exprs = [t["expr"] for t in panel["targets"]]
            if any("_ratio" in e for e in exprs):
                assert defaults["unit"] == "percentunit", f"{name} / {panel['title']}"
            if defaults["unit"] == "percentunit":
                assert (defaults.get("min"), defaults.get("max")) == (0, 1), panel["title"]


def test_every_query_names_the_scenarios_it_is_meant_for() -> None:
    gen = generator()
    for board in gen.DASHBOARDS:
        for panel, query in board.queries():
            assert query.kinds, f"{board.uid} / {panel.title}: no scenario kind"
            assert set(query.kinds) <= set(gen.KINDS), query.kinds


def targets(doc: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    return [(panel, target) for panel in panels(doc) for target in panel["targets"]]


def test_legends_that_name_a_gpu_name_its_host() -> None:
    """Agentless hosts behind one exporter all have a GPU 0: a legend needs {{host}} too."""
    bad = [
        f"{name} / {panel['title']}: {target['legendFormat']}"
        for name, doc in committed().items()
        for panel, target in targets(doc)
        if "{{gpu}}" in target["legendFormat"] and "{{host}}" not in target["legendFormat"]
    ]
    assert bad == []


def test_queries_follow_the_job_cluster_and_host_variables() -> None:
    """Every vgpumon selector is narrowed by $job, $cluster, $instance and $host."""
    bad = []
    for name, doc in committed().items():
        for panel, target in targets(doc):
            for selector in re.findall(r"vgpumon_\w+\{([^}]*)\}", target["expr"]):
                for variable in ('job=~"$job"', 'cluster=~"$cluster"', 'instance=~"$instance"'):
                    if variable not in selector:
                        bad.append(f"{name} / {panel['title']}: {variable}")
    assert bad == []


def test_lost_gpus_lists_only_lost_gpus() -> None:
    fleet = committed()["vgpumon-fleet.json"]
    table = next(p for p in panels(fleet) if p["title"] == "Lost GPUs" and p["type"] == "table")
    for target in table["targets"]:
        assert "== 1" not in target["expr"] and " or " not in target["expr"], target["expr"]
        assert "vgpumon_gpu_up" in target["expr"] and "== 0" in target["expr"]


def test_xid_series_only_where_an_xid_happened() -> None:
    """Every catalogued Xid is pre-created at 0: a time series of them plots flat lines."""
    checked = 0
    for name, doc in committed().items():
        for panel, target in targets(doc):
            if "vgpumon_gpu_xid_errors_total" in target["expr"] and panel["type"] == "timeseries":
                checked += 1
                assert target["expr"].rstrip().endswith("> 0"), f"{name} / {panel['title']}"
    assert checked >= 2


def test_pcie_throughput_reads_either_family() -> None:
    """GPM's measurement on Hopper, the driver's counter (--pcie-throughput) elsewhere."""
    gpu = committed()["vgpumon-gpu.json"]
    panel = next(p for p in panels(gpu) if p["title"] == "PCIe throughput")
    (target,) = panel["targets"]
    expr = target["expr"]
    assert "vgpumon_gpu_gpm_pcie_throughput_bytes_per_second" in expr
    assert "\nor vgpumon_gpu_pcie_throughput_bytes_per_second" in expr


def test_vm_variable_lists_names() -> None:
    """$vm takes vm_name (libvirt's or the kubelet's name, NVML's id where there is none)."""
    doc = committed()["vgpumon-vgpu-host.json"]
    variable = next(v for v in doc["templating"]["list"] if v["name"] == "vm")
    assert 'vm_name="([^"]*)"' in variable["regex"]
    assert "label_replace" in variable["query"] and "vm_name" in variable["query"]


def override(panel: dict[str, Any], column: str, prop: str) -> Any:
    """A table column's override property (after the organize rename)."""
    for o in panel["fieldConfig"].get("overrides", []):
        if o["matcher"]["options"] == column:
            return next(p["value"] for p in o["properties"] if p["id"] == prop)
    raise KeyError(f"{panel['title']}: no {prop} for {column}")


def capacity_panel(title: str) -> dict[str, Any]:
    return next(p for p in panels(committed()["vgpumon-capacity.json"]) if p["title"] == title)


def colour_at(steps: list[dict[str, Any]], value: float) -> str:
    return [s["color"] for s in steps if s["value"] is None or value >= s["value"]][-1]


@pytest.mark.parametrize(
    ("ratio", "colour"),
    [(0.0, "green"), (0.09, "green"), (0.1, "orange"), (0.2, "orange"), (0.25, "red"), (1, "red")],
)
def test_fragmentation_is_green_when_little_is_stranded_and_red_from_a_quarter(
    ratio: float, colour: str
) -> None:
    stat = capacity_panel("Fragmentation")
    defaults = stat["fieldConfig"]["defaults"]
    assert defaults["unit"] == "percentunit" and defaults["color"]["mode"] == "thresholds"
    assert colour_at(defaults["thresholds"]["steps"], ratio) == colour
    table = capacity_panel("Fragmentation by GPU")
    assert colour_at(override(table, "Fragmentation", "thresholds")["steps"], ratio) == colour


@pytest.mark.parametrize(
    ("title", "column"),
    [
        ("Where one more vGPU fits", "Framebuffer left after one more"),
        ("Where one more MIG instance fits", "Slices left after one more"),
    ],
)
def test_where_one_more_fits_is_sorted_best_fit_first(title: str, column: str) -> None:
    """Best fit: the least left over after placing one, as vgpumon.capacity.fits orders it."""
    panel = capacity_panel(title)
    assert panel["options"]["sortBy"] == [{"displayName": column, "desc": False}]


def test_creatable_counts_are_orange_when_nothing_more_fits() -> None:
    for title in ("Creatable vGPUs per type", "Creatable MIG instances per profile"):
        steps = capacity_panel(title)["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert (colour_at(steps, 0), colour_at(steps, 1)) == ("orange", "green"), title


@pytest.mark.parametrize(
    ("dashboard", "title", "column"),
    [
        ("vgpumon-capacity.json", "Migration readiness by vGPU", "Ready"),
        ("vgpumon-vgpu-host.json", "Live migration by VM", "Ready to move"),
    ],
)
def test_migration_readiness_maps_ready_and_not_ready(
    dashboard: str, title: str, column: str
) -> None:
    panel = next(p for p in panels(committed()[dashboard]) if p["title"] == title)
    options = override(panel, column, "mappings")[0]["options"]
    assert (options["1"]["text"], options["1"]["color"]) == ("ready", "green")
    assert (options["0"]["text"], options["0"]["color"]) == ("not ready", "red")
