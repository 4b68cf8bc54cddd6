"""``fields`` in the serve config: NVML fields of the operator's own, checked when read.

Every bad entry is refused in one line that names the file, the line and the entry; the names
follow the metric table's own rules (vgpumon/metrics/naming.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pynvml
import pytest
import yaml

from vgpumon.cli import build_parser
from vgpumon.commands.serve import reloaded, sampler_config, settings_from_args
from vgpumon.config.fields import MAX_FIELDS, resolve_field_id, table_names
from vgpumon.config.serve import load_file
from vgpumon.errors import ConfigError
from vgpumon.metrics.extra_fields import ExtraField
from vgpumon.metrics.table import FAMILIES

DOCS = Path(__file__).resolve().parents[2] / "docs" / "exporter.md"
GOOD = "  - {id: 94, name: vgpumon_gpu_replays_again_total, type: counter, help: Again.}\n"


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "serve.yml"
    path.write_text(text)
    return str(path)


def fields_of(tmp_path: Path, text: str) -> tuple[ExtraField, ...]:
    return load_file(write(tmp_path, text), [])["fields"]


def docs_example() -> str:
    """The first YAML block of the "Extra NVML fields" section of docs/exporter.md."""
    section = DOCS.read_text(encoding="utf-8").split("## Extra NVML fields", 1)[1]
    match = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert match is not None
    return match.group(1)


def test_the_documented_example_loads(tmp_path: Path) -> None:
    text = docs_example()
    raw = yaml.safe_load(text)["fields"]
    fields = fields_of(tmp_path, text)
    assert [f.name for f in fields] == [e["name"] for e in raw]
    assert [f.type for f in fields] == [e["type"] for e in raw]
    assert [f.help for f in fields] == [e["help"] for e in raw]
    assert [f.scale for f in fields] == [float(e.get("scale", 1)) for e in raw]
    assert [f.scope_id for f in fields] == [e.get("scope_id") for e in raw]
    ids = [e["id"] if isinstance(e["id"], int) else getattr(pynvml, e["id"]) for e in raw]
    assert [f.field_id for f in fields] == ids
    assert [f.key for f in fields] == [
        i if e.get("scope_id") is None else (i, e["scope_id"])
        for i, e in zip(ids, raw, strict=True)
    ]


def test_fields_reach_the_sampler_and_the_exposition(tmp_path: Path) -> None:
    path = write(tmp_path, "fields:\n" + GOOD)
    args = build_parser("serve").parse_args(["serve", "--config", path])
    settings = settings_from_args(args)
    assert sampler_config(settings).extra_fields == (94,)
    families = reloaded(settings).options.families
    assert [(f.name, f.type, f.labels, f.collector) for f in families] == [
        ("vgpumon_gpu_replays_again_total", "counter", ("gpu", "uuid"), "fields")
    ]
    # The same declarations give the same families: a reload that changes nothing re-renders
    # nothing (the export options compare equal).
    assert reloaded(settings_from_args(args)).options == reloaded(settings).options


def test_no_fields_key_means_none(tmp_path: Path) -> None:
    path = write(tmp_path, "process_series: true\n")
    settings = settings_from_args(build_parser("serve").parse_args(["serve", "--config", path]))
    assert settings.fields == ()
    assert sampler_config(settings).extra_fields == ()
    assert reloaded(settings).options.families == ()
    assert fields_of(tmp_path, "fields:\n") == ()


def test_constant_names_resolve_against_pynvml() -> None:
    assert resolve_field_id("NVML_FI_DEV_PCIE_REPLAY_COUNTER") == 94
    assert resolve_field_id(pynvml.NVML_FI_DEV_MEMORY_TEMP) == pynvml.NVML_FI_DEV_MEMORY_TEMP
    with pytest.raises(ValueError, match='did you mean "NVML_FI_DEV_MEMORY_TEMP"'):
        resolve_field_id("NVML_FI_DEV_MEMORY_TMP")
    with pytest.raises(ValueError, match="not a field id"):
        resolve_field_id("NVML_FI_MAX")  # one past the last id, not a field


def entry(**keys: object) -> str:
    base: dict[str, object] = {
        "id": 94,
        "name": "vgpumon_gpu_x",
        "type": "gauge",
        "help": "X.",
    }
    base.update(keys)
    return "fields:\n  - " + yaml.safe_dump(
        {k: v for k, v in base.items() if v is not None}, default_flow_style=True, width=1000
    )


ENERGY = next(f for f in FAMILIES if f.name == "vgpumon_gpu_energy_joules_total")

# (file text, line of the error, entry as named, fragment of the message)
BAD = [
    ("fields: {id: 1}\n", 1, "fields", "must be a list"),
    ("fields:\n  - 3\n", 2, "fields[0]", "must be a mapping"),
    (entry(scal=2), 2, "fields[0]", 'unknown key "scal"'),
    (entry(help=None), 2, "fields[0] (vgpumon_gpu_x)", "missing help"),
    (entry(id=None, name=None), 2, "fields[0]", "missing id, name"),
    (entry(id=0), 2, "fields[0] (vgpumon_gpu_x)", "id: field ids are from 1 to 4294967295"),
    (entry(id=2**32), 2, "fields[0] (vgpumon_gpu_x)", "id: field ids are from 1"),
    (entry(id="94"), 2, "fields[0] (vgpumon_gpu_x)", "an NVML_FI_* name, got '94'"),
    (entry(id=True), 2, "fields[0] (vgpumon_gpu_x)", "expected a field id number"),
    (entry(id="NVML_FI_NOPE"), 2, "fields[0] (vgpumon_gpu_x)", "not a field id of the installed"),
    (entry(type="histogram"), 2, "fields[0] (vgpumon_gpu_x)", "type: expected gauge or counter"),
    (entry(name="gpu_x"), 2, "fields[0] (gpu_x)", "must start with vgpumon_"),
    (entry(name="vgpumon_gpuX"), 2, "fields[0] (vgpumon_gpuX)", "snake case"),
    (entry(name=5), 2, "fields[0]", "name: expected a metric name"),
    (entry(name="vgpumon_gpu_x", type="counter"), 2, "fields[0]", "counters end in _total"),
    (entry(name="vgpumon_gpu_x_total"), 2, "fields[0]", "counters end in _total"),
    (entry(name="vgpumon_gpu_power_mw"), 2, "fields[0]", "'mw' is not a base unit"),
    (entry(name="vgpumon_gpu_x_info"), 2, "fields[0]", "only info families"),
    (entry(name="vgpumon_gpu_x_count"), 2, "fields[0]", "_count is a suffix OpenMetrics"),
    (entry(name="vgpumon_gpu_x_ratio_total", type="counter"), 2, "fields[0]", "_ratio is a gauge"),
    (entry(name="vgpumon_gpu_x_joules"), 2, "fields[0]", "energy is a counter"),
    (entry(name="vgpumon_gpu_up"), 2, "fields[0]", "vgpumon_gpu_up is a name of vgpumon's"),
    # A counter whose OpenMetrics family is a gauge of the table (vgpumon_gpu_power_watts).
    (
        entry(name="vgpumon_gpu_power_watts_total", type="counter"),
        2,
        "fields[0]",
        "vgpumon_gpu_power_watts is a name of vgpumon's metric table",
    ),
    (
        "fields:\n  - id: 94\n    name: vgpumon_gpu_x\n    type: gauge\n"
        "    scale: 0\n    help: X.\n",
        5,  # the line of the offending key, not of the entry
        "fields[0] (vgpumon_gpu_x)",
        "scale: must be a finite number above 0, got 0",
    ),
    (entry(help=""), 2, "fields[0]", "help: expected a non-empty line"),
    (entry(help=7), 2, "fields[0]", "help: expected a non-empty line"),
    (entry(scale=0), 2, "fields[0]", "scale: must be a finite number above 0"),
    (entry(scale=-0.5), 2, "fields[0]", "scale: must be a finite number above 0"),
    (entry(scale=".inf"), 2, "fields[0]", "scale: expected a number"),
    (entry(scale=True), 2, "fields[0]", "scale: expected a number"),
    (entry(scope_id=-1), 2, "fields[0]", "scope_id: expected an integer from 0"),
    (entry(scope_id="a"), 2, "fields[0]", "scope_id: expected an integer from 0"),
    (
        "fields:\n" + GOOD + GOOD,
        3,
        "fields[1] (vgpumon_gpu_replays_again_total)",
        "name: vgpumon_gpu_replays_again_total is already taken by fields[0]",
    ),
    (
        "fields:\n"
        "  - {id: 1, name: vgpumon_gpu_x, type: gauge, help: X.}\n"
        "  - {id: 2, name: vgpumon_gpu_x_total, type: counter, help: X.}\n",
        3,
        "fields[1] (vgpumon_gpu_x_total)",
        "vgpumon_gpu_x is already taken by fields[0] (vgpumon_gpu_x)",
    ),
    (
        "fields:\n"
        "  - {id: 94, name: vgpumon_gpu_a, type: gauge, help: A.}\n"
        "  - {id: 94, scope_id: 0, name: vgpumon_gpu_b, type: gauge, help: B.}\n",
        3,
        "fields[1] (vgpumon_gpu_b)",
        "field 94 (scope 0) is already declared by fields[0] (vgpumon_gpu_a)",
    ),
]


@pytest.mark.parametrize(("text", "line", "where", "fragment"), BAD, ids=range(len(BAD)))
def test_a_bad_entry_is_one_line_naming_entry_and_line(
    tmp_path: Path, text: str, line: int, where: str, fragment: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_file(path, [])
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith(f"config file {path} line {line}: "), message
    assert where in message and fragment in message, message


def test_too_many_entries(tmp_path: Path) -> None:
    text = "fields:\n" + "".join(
        f"  - {{id: {i + 1}, name: vgpumon_gpu_f{i}, type: gauge, help: F.}}\n"
        for i in range(MAX_FIELDS + 1)
    )
    with pytest.raises(ConfigError, match=f"line 2: fields: at most {MAX_FIELDS} entries"):
        load_file(write(tmp_path, text), [])
    assert len(fields_of(tmp_path, "\n".join(text.splitlines()[:-1]) + "\n")) == MAX_FIELDS


def test_table_names_cover_both_formats() -> None:
    names = table_names()
    assert "vgpumon_gpu_energy_joules_total" in names and "vgpumon_gpu_energy_joules" in names
    assert {f.name for f in FAMILIES} <= names


def test_serve_refuses_a_bad_entry_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from vgpumon.cli import main

    path = write(tmp_path, entry(name="vgpumon_gpu_up"))
    assert main(["serve", "--sim", "baremetal-8xh100", "--config", path]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fields[0] (vgpumon_gpu_up)" in err, err
