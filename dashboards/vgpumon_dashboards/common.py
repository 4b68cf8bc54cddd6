"""What every vgpumon dashboard shares: scenario kinds, variables, selectors, colour presets, and
the panel helpers that turn a title, a description and PromQL into Grafana Foundation SDK builders.

A dashboard module only lists panels (``stat``, ``timeseries``, ``table``, ...) and returns a
:class:`Board`; this module lays them out, numbers them and renders the JSON. Each query names the
*scenario kinds* it must return data on (tests/e2e runs it against a simulated host of each kind),
so a panel nobody can fill is caught before an operator sees it empty.

Units are Grafana's names for vgpumon's base units: ratios 0-1 as ``percentunit``, bytes, watts,
hertz, celsius, seconds, joules, bytes per second.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from grafana_foundation_sdk.builders import (
    bargauge,
    heatmap,
    piechart,
    prometheus,
    stat,
    statetimeline,
    table,
    timeseries,
)
from grafana_foundation_sdk.builders import (
    common as common_builders,
)
from grafana_foundation_sdk.builders import (
    dashboard as dash,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import (
    common as cm,
)
from grafana_foundation_sdk.models import (
    dashboard as dm,
)
from grafana_foundation_sdk.models import (
    heatmap as hm,
)
from grafana_foundation_sdk.models import (
    prometheus as pm,
)

SCHEMA_VERSION = 41  # what the SDK for Grafana 11.6 writes
DATASOURCE = dm.DataSourceRef(type_val="prometheus", uid="${datasource}")

# Scenario kinds: tests/dashboard_helpers.py maps each to a simulator scenario.
VGPU = "vgpu"  # a KVM vGPU host (the quickstart host), with libvirt names, a KubeVirt pod,
# --process-series, --pcie-throughput and --kubernetes.pod-series
MIG = "mig"  # an H100 with MIG and GPM
BARE = "baremetal"  # eight H100s, processes, fans, Xids a few seconds after start
NVLINK = "nvlink"  # an HGX board with NVLink, one link down
GUEST = "guest"  # vgpumon inside a VM with vGPUs: guest-side licenses
LOST = "lost"  # a host with a GPU that stopped answering
METERING = "metering"  # known load: vGPUs (one idle), processes in two pods, a dead holder, a
# starved vGPU and its neighbours (usage counters, idle holders, contention)
# Capacity: the hand-computed scenarios of docs/capacity.md.
CAP_HOMOGENEOUS = "capacity-homogeneous"  # two L40S in homogeneous mode, one stranding 16 GiB
CAP_HETEROGENEOUS = "capacity-heterogeneous"  # an L40S in mixed-size mode with placement gaps
CAP_MIG = "capacity-mig"  # an A100 with a 3g and a 2g GPU instance, 2 slices free
# The newer driver surfaces (R550-R610) on one host: encoder scheduling, time-sliced vGPUs in GPU
# instances, reservations and migration payloads, accounting, CC, a pending repair.
DRIVER = "driver-surfaces"
KINDS = (
    VGPU,
    MIG,
    BARE,
    NVLINK,
    GUEST,
    LOST,
    METERING,
    CAP_HOMOGENEOUS,
    CAP_HETEROGENEOUS,
    CAP_MIG,
    DRIVER,
)
ALL = (VGPU, MIG, BARE)

# Selectors. $job and $cluster come from the scrape configuration (the file_sd example sets
# cluster), $instance is the exporter, $host an agentless host behind it (absent elsewhere: the
# empty value matches the match-all ".*").
SCOPE = 'job=~"$job", cluster=~"$cluster", instance=~"$instance"'
HOST = f'{SCOPE}, host=~"$host"'
SEL = f'{HOST}, gpu=~"$gpu"'
# What identifies one GPU across exporters and agentless hosts, for joins.
GPU_KEYS = "instance, job, host, gpu, uuid"
VGPU_KEYS = "instance, job, host, gpu, uuid, vgpu_id"
# Legend prefix that tells agentless hosts behind one exporter apart ({{host}} is empty elsewhere).
WHO = "{{instance}} {{host}}"


def vm_info(selector: str) -> str:
    """vgpumon_vgpu_info with vm_name always set: the VM's name where libvirt or the kubelet gave
    one (serve --libvirt.uri / --kubernetes.socket), NVML's VM id where nothing did."""
    return (
        f'label_replace(vgpumon_vgpu_info{{{selector}, vm_name=""}}, '
        '"vm_name", "$1", "vm_id", "(.*)")\n'
        f'or vgpumon_vgpu_info{{{selector}, vm_name!=""}}'
    )


def vm_selected(selector: str) -> str:
    """vm_info restricted to the VMs picked in $vm (names, or ids where a VM has no name)."""
    return (
        f'label_replace(vgpumon_vgpu_info{{{selector}, vm_name="", vm_id=~"$vm"}}, '
        '"vm_name", "$1", "vm_id", "(.*)")\n'
        f'or vgpumon_vgpu_info{{{selector}, vm_name!="", vm_name=~"$vm"}}'
    )


VM_INFO = vm_selected(HOST)


def by_vm(expr: str) -> str:
    """Name each vGPU series by its VM: join the labels of vgpumon_vgpu_info onto it."""
    return f"({expr})\n* on ({VGPU_KEYS}) group_left (vm_id, vm_name, vgpu_type)\n({VM_INFO})"


# --------------------------------------------------------------------------- variables


@dataclass(frozen=True)
class Variable:
    name: str
    label: str
    query: str  # label_values(...) or query_result(...)
    regex: str = ""  # for query_result: the capture group is the value


VARIABLES: dict[str, Variable] = {
    v.name: v
    for v in (
        Variable("job", "Job", "label_values(vgpumon_up, job)"),
        Variable("cluster", "Cluster", 'label_values(vgpumon_up{job=~"$job"}, cluster)'),
        Variable(
            "instance",
            "Exporter",
            'label_values(vgpumon_up{job=~"$job", cluster=~"$cluster"}, instance)',
        ),
        # Agentless hosts (serve --ssh.targets): one exporter, many hosts, each series labelled
        # host.
        Variable("host", "Agentless host", f"label_values(vgpumon_gpu_info{{{SCOPE}}}, host)"),
        Variable("gpu", "GPU", f"label_values(vgpumon_gpu_info{{{HOST}}}, gpu)"),
        # VM names where libvirt or the kubelet named the VM, else NVML's VM id (docs/names.md).
        Variable("vm", "VM", f"query_result({vm_info(HOST)})", '/vm_name="([^"]*)"/'),
    )
}
SCOPE_VARIABLES = ("job", "cluster", "instance", "host")


def variable_builder(var: Variable) -> dash.QueryVariable:
    builder = (
        dash.QueryVariable(var.name)
        .label(var.label)
        .datasource(DATASOURCE)
        .query(var.query.replace("\n", " "))
        .refresh(dm.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .include_all(True)
        .all_value(".*")
        .multi(True)
        .sort(dm.VariableSort.NUMERICAL_ASC)
        .current(dm.VariableOption(selected=True, text=["All"], value=["$__all"]))
    )
    if var.regex:
        builder = builder.regex(var.regex)
    return builder


# --------------------------------------------------------------------------- colours


def steps(*pairs: tuple[float | None, str]) -> dash.ThresholdsConfig:
    """Absolute thresholds: (from value, colour), the first from -infinity (None)."""
    return (
        dash.ThresholdsConfig()
        .mode(dm.ThresholdsMode.ABSOLUTE)
        .steps([dm.Threshold(value=v, color=c) for v, c in pairs])
    )


# Counts that are bad above 0 (lost GPUs, Xids, unlicensed vGPUs, links down). 0.001 rather than
# 1 keeps an extrapolated increase() of a single event red.
RED_ABOVE_ZERO = ((None, "green"), (0.001, "red"))
ORANGE_ABOVE_ZERO = ((None, "green"), (0.001, "orange"))
# Counts that are good above 0 (hosts, GPUs): none at all is red.
GREEN_ABOVE_ZERO = ((None, "red"), (1, "green"))
# Neutral facts (a frame rate limit, a slice length): one colour, nothing is wrong.
NEUTRAL = ((None, "blue"),)
# Fractions where full is the problem (memory, a fan at full speed).
FILLING = ((None, "green"), (0.8, "orange"), (0.95, "red"))
# Seconds to a license's expiry: red within a day (or past), orange within the alert's 7 days.
EXPIRY = ((None, "red"), (86400, "orange"), (7 * 86400, "green"))
# Seconds since the served sample: the stale alert fires at 120.
SAMPLE_AGE = ((None, "green"), (30, "orange"), (120, "red"))
# Room for more (creatable instances, free slices): none left is orange (full: the next VM or
# MIG instance has nowhere to go), any is green.
ROOM = ((None, "orange"), (1, "green"))
# Share of the free vGPU framebuffer that no type can use (stranded / free): from a tenth on the
# mix wastes room, from a quarter on re-packing (or one size per GPU) wins a VM or more.
FRAGMENTATION = ((None, "green"), (0.1, "orange"), (0.25, "red"))


def value_map(options: dict[str, tuple[str, str]]) -> dm.ValueMap:
    """{value: (text, colour)} as one Grafana value mapping."""
    return dm.ValueMap(
        options={
            value: dm.ValueMappingResult(text=text, color=colour, index=i)
            for i, (value, (text, colour)) in enumerate(options.items())
        }
    )


UP_DOWN = value_map({"1": ("up", "green"), "0": ("down", "red")})
LOST_OK = value_map({"1": ("answers", "green"), "0": ("lost", "red")})
YES_GOOD = value_map({"1": ("yes", "green"), "0": ("no", "orange")})
YES_BAD = value_map({"0": ("no", "green"), "1": ("yes", "red")})
YES_WARN = value_map({"0": ("no", "green"), "1": ("yes", "orange")})
ON_OFF = value_map({"1": ("on", "blue"), "0": ("off", "text")})
OK_FAILED = value_map({"1": ("ok", "green"), "0": ("failed", "red")})
READY = value_map({"1": ("ready", "green"), "0": ("not ready", "red")})
# The share verdict's states (vgpumon_vgpu_*_share_state, docs/verdicts.md).
SHARE_STATES = value_map(
    {
        "starved": ("starved", "red"),
        "ok": ("ok", "green"),
        "short_window": ("no verdict yet", "text"),
        "missed_entries": ("log entries missed", "orange"),
        "unknown_policy": ("policy unknown", "text"),
    }
)
CURRENT = value_map({"1": ("current", "blue"), "0": ("", "transparent")})
# vgpumon_vgpu_migration_limit's reasons (what NVML's compatibility check says limits a move).
MIGRATION_LIMITS = value_map(
    {
        "host_driver": ("host driver", "orange"),
        "guest_driver": ("guest driver", "orange"),
        "gpu": ("GPU", "red"),
        "other": ("other", "orange"),
    }
)
# State-set names as they come out of a table's label column.
LICENSE_STATES = value_map(
    {
        "licensed": ("licensed", "green"),
        "unlicensed_unrestricted": ("unlicensed (grace period)", "orange"),
        "unlicensed_restricted": ("unlicensed (restricted)", "red"),
        "unlicensed": ("unlicensed", "red"),
        "uninitialized": ("not yet licensed", "orange"),
        "unknown": ("unknown", "text"),
    }
)
VM_STATES = value_map(
    {
        "running": ("running", "green"),
        "paused": ("paused", "orange"),
        "blocked": ("blocked", "orange"),
        "pmsuspended": ("suspended", "orange"),
        "shutdown": ("shutting down", "orange"),
        "shutoff": ("off", "red"),
        "crashed": ("crashed", "red"),
        "nostate": ("no state", "text"),
    }
)


# --------------------------------------------------------------------------- queries and panels


@dataclass(frozen=True)
class Query:
    expr: str
    legend: str
    kinds: tuple[str, ...]  # scenario kinds where this query must return data
    instant: bool = False

    def target(self, ref: str) -> prometheus.Dataquery:
        builder = (
            prometheus.Dataquery()
            .datasource(DATASOURCE)
            .expr(self.expr)
            .legend_format(self.legend)
            .ref_id(ref)
        )
        if self.instant:
            return builder.instant().format(pm.PromQueryFormat.TABLE)
        return builder.range().format(pm.PromQueryFormat.TIME_SERIES)


def q(expr: str, legend: str, *kinds: str, instant: bool = False) -> Query:
    return Query(expr, legend, kinds or ALL, instant)


@dataclass(frozen=True)
class Panel:
    """One panel: its kind, its queries (for the tests) and the SDK builder that renders it."""

    kind: str
    title: str
    queries: tuple[Query, ...]
    builder: Any  # an SDK panel builder of ``kind``


@dataclass(frozen=True)
class Row:
    title: str


def _common(builder: Any, title: str, description: str, queries: Sequence[Query]) -> Any:
    builder = builder.title(title).description(description).datasource(DATASOURCE)
    return builder.targets([query.target(chr(ord("A") + i)) for i, query in enumerate(queries)])


def _size(builder: Any, width: int, height: int) -> Any:
    return builder.span(width).height(height)


def stat_panel(
    title: str,
    description: str,
    *queries: Query,
    unit: str = "none",
    thresholds: Sequence[tuple[float | None, str]] = NEUTRAL,
    mappings: Sequence[dm.ValueMapping] = (),
    width: int = 4,
    height: int = 4,
) -> Panel:
    builder = (
        stat.Panel()
        .unit(unit)
        .thresholds(steps(*thresholds))
        .color_scheme(dash.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS))
        .color_mode(cm.BigValueColorMode.BACKGROUND)
        .graph_mode(cm.BigValueGraphMode.NONE)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    )
    if mappings:
        builder = builder.mappings(list(mappings))
    builder = _size(_common(builder, title, description, queries), width, height)
    return Panel("stat", title, queries, builder)


def state_panel(
    title: str,
    description: str,
    *queries: Query,
    mappings: Sequence[dm.ValueMapping],
    thresholds: Sequence[tuple[float | None, str]] = NEUTRAL,
    width: int = 12,
    height: int = 8,
) -> Panel:
    builder = (
        statetimeline.Panel()
        .unit("none")
        .mappings(list(mappings))
        .thresholds(steps(*thresholds))
        .color_scheme(dash.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS))
        .show_value(cm.VisibilityMode.NEVER)
        .merge_values(True)
        .fill_opacity(80)
        .legend(common_builders.VizLegendOptions().show_legend(False))
    )
    builder = _size(_common(builder, title, description, queries), width, height)
    return Panel("state-timeline", title, queries, builder)


def timeseries_panel(
    title: str,
    description: str,
    *queries: Query,
    unit: str = "none",
    min: float | None = 0,
    max: float | None = None,
    width: int = 12,
    height: int = 8,
    thresholds: Sequence[tuple[float | None, str]] | None = None,
) -> Panel:
    builder = (
        timeseries.Panel()
        .unit(unit)
        .line_width(1)
        .fill_opacity(10)
        .legend(
            common_builders.VizLegendOptions()
            .display_mode(cm.LegendDisplayMode.LIST)
            .placement(cm.LegendPlacement.BOTTOM)
            .show_legend(True)
        )
        .tooltip(common_builders.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI))
    )
    if min is not None:
        builder = builder.min(min)
    if max is not None:
        builder = builder.max(max)
    if thresholds is not None:
        # Dashed lines where a series turns from good to bad.
        builder = builder.thresholds(steps(*thresholds)).thresholds_style(
            common_builders.GraphThresholdsStyleConfig().mode(cm.GraphThresholdsStyleMode.DASHED)
        )
    builder = _size(_common(builder, title, description, queries), width, height)
    return Panel("timeseries", title, queries, builder)


def ratio_panel(title: str, description: str, *queries: Query, width: int = 12) -> Panel:
    return timeseries_panel(
        title, description, *queries, unit="percentunit", min=0, max=1, width=width
    )


def heatmap_panel(title: str, description: str, *queries: Query, unit: str) -> Panel:
    builder = (
        heatmap.Panel()
        .calculate(True)
        .y_axis(heatmap.YAxisConfig().unit(unit))
        .color(
            # Grafana's own defaults for a scheme (the SDK's zero values draw one colour).
            heatmap.HeatmapColorOptions()
            .mode(hm.HeatmapColorMode.SCHEME)
            .scheme("Oranges")
            .fill("dark-orange")
            .steps(64)
            .exponent(0.5)
        )
        .unit(unit)
    )
    builder = _size(_common(builder, title, description, queries), 12, 8)
    return Panel("heatmap", title, queries, builder)


def bargauge_panel(
    title: str,
    description: str,
    *queries: Query,
    thresholds: Sequence[tuple[float | None, str]] = NEUTRAL,
    unit: str = "none",
    width: int = 8,
    height: int = 8,
) -> Panel:
    builder = (
        bargauge.Panel()
        .unit(unit)
        .min(0)
        .thresholds(steps(*thresholds))
        .color_scheme(dash.FieldColor().mode(dm.FieldColorModeId.THRESHOLDS))
        .display_mode(cm.BarGaugeDisplayMode.BASIC)
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    )
    builder = _size(_common(builder, title, description, queries), width, height)
    return Panel("bargauge", title, queries, builder)


def piechart_panel(title: str, description: str, *queries: Query, width: int = 8) -> Panel:
    builder = (
        piechart.Panel()
        .unit("none")
        .reduce_options(common_builders.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
    )
    builder = _size(_common(builder, title, description, queries), width, 8)
    return Panel("piechart", title, queries, builder)


@dataclass(frozen=True)
class Column:
    """One column an operator reads: a label or a query's value, shown under ``title``."""

    field: str  # a label name, "Value" (one query) or "Value #A" (several, by refId)
    title: str
    unit: str = ""
    mappings: tuple[dm.ValueMapping, ...] = ()
    thresholds: tuple[tuple[float | None, str], ...] = ()


def table_panel(
    title: str,
    description: str,
    *queries: Query,
    columns: Sequence[Column],
    width: int = 12,
    height: int = 8,
    sort_by: tuple[str, bool] | None = None,
) -> Panel:
    """An instant table with exactly ``columns``, in that order: the query rows merged into one
    table, every other field (Time, __name__, mdev_uuid, job, ...) filtered out. ``sort_by`` is
    (column title, descending) for tables whose order is the answer (best fit first)."""
    names = [c.field for c in columns]
    builder = table.Panel().unit("none").show_header(True).cell_height(cm.TableCellHeight.SM)
    if sort_by is not None:
        sorted_by, descending = sort_by
        if sorted_by not in {c.title for c in columns}:
            raise ValueError(f"sort_by {sorted_by!r} is not a column")
        builder = builder.sort_by(
            [common_builders.TableSortByFieldState().display_name(sorted_by).desc(descending)]
        )
    builder = (
        builder.with_transformation(dm.DataTransformerConfig(id_val="merge", options={}))
        .with_transformation(
            dm.DataTransformerConfig(
                id_val="filterFieldsByName", options={"include": {"names": names}}
            )
        )
        .with_transformation(
            dm.DataTransformerConfig(
                id_val="organize",
                options={
                    "indexByName": {name: i for i, name in enumerate(names)},
                    "renameByName": {c.field: c.title for c in columns},
                    "excludeByName": {},
                },
            )
        )
    )
    for column in columns:
        properties: list[dm.DynamicConfigValue] = []
        if column.unit:
            properties.append(dm.DynamicConfigValue(id_val="unit", value=column.unit))
        if column.mappings:
            properties.append(dm.DynamicConfigValue(id_val="mappings", value=column.mappings))
        if column.thresholds:
            properties.append(
                dm.DynamicConfigValue(id_val="thresholds", value=steps(*column.thresholds).build())
            )
        if column.mappings or column.thresholds:
            properties.append(
                dm.DynamicConfigValue(
                    id_val="custom.cellOptions", value={"type": "color-background"}
                )
            )
            if column.thresholds:
                properties.append(
                    dm.DynamicConfigValue(id_val="color", value={"mode": "thresholds"})
                )
        if properties:
            # Overrides match the field's name after the organize rename.
            builder = builder.override_by_name(column.title, properties)
    builder = _size(_common(builder, title, description, queries), width, height)
    return Panel("table", title, queries, builder)


# --------------------------------------------------------------------------- dashboards


@dataclass(frozen=True)
class Board:
    uid: str
    title: str
    description: str
    variables: tuple[str, ...]  # names in VARIABLES, besides the data source
    items: tuple[Panel | Row, ...] = field(default_factory=tuple)
    # Hidden constants the queries name (``$name``): (name, value, what it is).
    constants: tuple[tuple[str, str, str], ...] = ()

    def panels(self) -> Iterator[Panel]:
        for item in self.items:
            if isinstance(item, Panel):
                yield item

    def queries(self) -> Iterator[tuple[Panel, Query]]:
        for panel in self.panels():
            for query in panel.queries:
                yield panel, query

    def build(self) -> dm.Dashboard:
        builder = (
            dash.Dashboard(self.title)
            .uid(self.uid)
            .description(self.description)
            .tags(["vgpumon", "nvidia", "gpu"])
            .editable()
            .tooltip(dm.DashboardCursorSync.CROSSHAIR)
            .timezone("browser")
            .refresh("30s")
            .time("now-6h", "now")
            .version(1)
            .link(
                dash.DashboardLink("vgpumon")
                .type(dm.DashboardLinkType.DASHBOARDS)
                .tags(["vgpumon"])
                .as_dropdown(True)
                .include_vars(True)
                .keep_time(True)
            )
            .with_variable(
                dash.DatasourceVariable("datasource").label("Data source").type("prometheus")
            )
        )
        for name in self.variables:
            builder = builder.with_variable(variable_builder(VARIABLES[name]))
        for name, value, description in self.constants:
            builder = builder.with_variable(
                dash.ConstantVariable(name).value(value).description(description)
            )
        # Laid out here, left to right and wrapping before a panel that would not fit: the
        # SDK's own layout lets a panel overflow the 24 columns.
        x = y = row_height = 0
        for number, item in enumerate(self.items, start=1):
            if isinstance(item, Row):
                y += row_height
                x = row_height = 0
                position = dm.GridPos(h=1, w=24, x=0, y=y)
                builder = builder.with_row(dash.Row(item.title).id(number).grid_pos(position))
                y += 1
                continue
            size = item.builder.build().grid_pos
            if x + size.w > 24:
                y += row_height
                x = row_height = 0
            size.x, size.y = x, y
            builder = builder.with_panel(item.builder.id(number))
            x += size.w
            row_height = max(row_height, size.h)
        return builder.build()

    def render(self) -> str:
        doc = json.loads(json.dumps(self.build(), cls=JSONEncoder))
        return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"

    @property
    def file_name(self) -> str:
        return f"{self.uid}.json"
