"""Print GPU usage per tenant, VM, pod or namespace over a time range, for invoicing.

Reads the metering rules' hourly series from Prometheus (packaging/prometheus/
vgpumon-metering.rules.yml must be loaded there): GPU-hours (one GPU fully busy for an hour is 1),
GiB-hours of GPU memory and kWh, summed over the whole hours of the range. docs/metering.md says
how each is measured and how far to trust it.

Examples::

    vgpumon usage --prometheus http://prom:9090 --range 30d
    vgpumon usage --prometheus http://prom:9090 --from 2026-11-01 --to 2026-12-01 --by vm --csv
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import datetime as dt
import json
import math
import sys
import time
from typing import TextIO

from vgpumon.commands.prometheus_args import add_prometheus_arguments, prometheus_settings
from vgpumon.errors import ConfigError
from vgpumon.sources.usage import GROUPS, QUANTITIES, UsageClient, UsageReport
from vgpumon.text import printable
from vgpumon.units import UnitError, parse_duration

DEFAULT_RANGE = "1d"
HEADINGS = {"gpu_hours": "GPU-hours", "memory_gib_hours": "GiB-hours", "energy_kwh": "kWh"}


# A month of hourly series is a few thousand points per row: give a large Prometheus time.
USAGE_TIMEOUT_SECONDS = 30.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    # No abbreviations: "--prometheus.password VALUE" must be refused, not taken as the file.
    parser.allow_abbrev = False
    add_prometheus_arguments(parser, "usage")
    parser.add_argument("--from", dest="start", metavar="TIME", help="start (see --to)")
    parser.add_argument(
        "--to",
        dest="end",
        metavar="TIME",
        help="end: RFC 3339 (2026-11-01T00:00:00Z), a date (2026-11-01, midnight UTC), Unix "
        "seconds or 'now' (default now)",
    )
    parser.add_argument(
        "--range",
        dest="span",
        metavar="DURATION",
        help=f"how far back from --to when --from is not given (default {DEFAULT_RANGE})",
    )
    parser.add_argument(
        "--by", choices=tuple(GROUPS), default="tenant", help="one row per (default tenant)"
    )
    out = parser.add_mutually_exclusive_group()
    out.add_argument("--csv", action="store_const", const="csv", dest="format", help="CSV")
    out.add_argument("--json", action="store_const", const="json", dest="format", help="JSON")


def parse_time(text: str, flag: str, now: float) -> float:
    """Unix seconds from RFC 3339, a date, Unix seconds or 'now'."""
    value = text.strip()
    if value == "now":
        return now
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ConfigError(
            f"{flag} {text!r}: give RFC 3339 (2026-11-01T00:00:00Z), a date, Unix seconds or now"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.timezone.utc)
    return parsed.timestamp()


def time_range(args: argparse.Namespace, now: float) -> tuple[float, float]:
    end = parse_time(args.end, "--to", now) if args.end else now
    if args.start and args.span:
        raise ConfigError("give --from or --range, not both")
    if args.start:
        start = parse_time(args.start, "--from", now)
    else:
        try:
            span = parse_duration(args.span or DEFAULT_RANGE, lo=1.0)
        except UnitError as err:
            raise ConfigError(f"--range: {err}") from None
        start = end - span
    if start >= end:
        raise ConfigError("--from must be before --to")
    return start, end


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_table(report: UsageReport, out: TextIO) -> None:
    head = [*report.labels, *(HEADINGS[q] for q in QUANTITIES)]
    # Names are label values anyone who runs a VM or a pod chose: escaped for the terminal.
    body = [
        [*(printable(k) or "-" for k in row.key), *(_number(row.values.get(q)) for q in QUANTITIES)]
        for row in report.rows
    ]
    totals = [_number(sum(r.values.get(q, 0.0) for r in report.rows)) for q in QUANTITIES]
    footer = ["total", *[""] * (len(report.labels) - 1), *totals]
    widths = [max(len(str(c)) for c in col) for col in zip(head, *body, footer, strict=True)]
    out.write(f"usage by {report.by}, {_iso(report.start)} to {_iso(report.end)}\n")
    for i, line in enumerate([head, *body, footer]):
        if i == len(body) + 1:
            out.write("  ".join("-" * w for w in widths) + "\n")
        cells = [
            str(c).ljust(w) if j < len(report.labels) else str(c).rjust(w)
            for j, (c, w) in enumerate(zip(line, widths, strict=True))
        ]
        out.write("  ".join(cells).rstrip() + "\n")


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


# What makes a spreadsheet read a cell as a formula, or as the start of one (OWASP, "CSV
# Injection"): a VM or pod named "=HYPERLINK(...)" or "+cmd|..." must stay text.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_text(value: str) -> str:
    """A text cell as OWASP recommends: one that a spreadsheet would take for a formula gets a
    leading single quote (the csv module quotes it and doubles any quote inside), and control
    characters are escaped (:func:`vgpumon.text.printable`)."""
    if value.startswith(FORMULA_STARTS):
        value = "'" + value
    return printable(value)


def write_csv(report: UsageReport, out: TextIO) -> None:
    writer = csv.writer(out, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    writer.writerow(["from", "to", *report.labels, *QUANTITIES])
    for row in report.rows:
        values = [("" if row.values.get(q) is None else repr(row.values[q])) for q in QUANTITIES]
        keys = [csv_text(k) for k in row.key]
        writer.writerow([_iso(report.start), _iso(report.end), *keys, *values])


def write_json(report: UsageReport, out: TextIO) -> None:
    doc = {
        "by": report.by,
        "from": _iso(report.start),
        "to": _iso(report.end),
        "rows": [
            {
                **dict(zip(report.labels, row.key, strict=True)),
                **{q: v if math.isfinite(v) else None for q, v in row.values.items()},
            }
            for row in report.rows
        ],
    }
    # allow_nan=False: NaN and Infinity are not JSON; the report holds none (they are left out).
    out.write(json.dumps(doc, indent=2, allow_nan=False) + "\n")


def run(args: argparse.Namespace) -> int:
    settings = prometheus_settings(args, "usage")
    if settings is None:
        raise ConfigError(
            "usage: give --prometheus URL, the Prometheus that scrapes vgpumon and loads its "
            "metering rules"
        )
    start, end = time_range(args, time.time())
    client = UsageClient(settings.client(USAGE_TIMEOUT_SECONDS))
    report = asyncio.run(_report(client, args.by, start, end))
    {"csv": write_csv, "json": write_json}.get(args.format, write_table)(report, sys.stdout)
    if report.not_finite:
        print(
            f"vgpumon usage: {report.not_finite} value(s) Prometheus gave as NaN or infinite "
            "were left out of the rows and totals",
            file=sys.stderr,
        )
    if not report.rows:
        print(
            "vgpumon usage: no usage in that range (are the metering rules loaded in that "
            "Prometheus? packaging/prometheus/vgpumon-metering.rules.yml)",
            file=sys.stderr,
        )
    return 0


async def _report(client: UsageClient, by: str, start: float, end: float) -> UsageReport:
    try:
        return await client.report(by, start, end)
    finally:
        await client.client.close()
