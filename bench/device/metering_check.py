"""Usage counters against known load on a real GPU (docs/metering.md, "Proof").

From the repository root on a GPU host with the [load] extra::

    python3 bench/device/metering_check.py --seconds 60 --out /tmp/metering

Starts ``vgpumon serve --process-series`` on loopback and one ``vgpumon load`` per ``--duties``
entry on the same GPU (each its own CUDA context, time-sliced by the driver), waits until the
exporter lists their processes, then reads the exposition twice ``--seconds`` apart.
Per load process:

* ``vgpumon_process_busy_seconds_total`` increase against duty x elapsed, where duty is what the
  load generator measured itself over the same window (its status lines) and, for reference, the
  nominal duty: within ``--tolerance`` (5 %) passes;
* ``vgpumon_process_memory_byte_seconds_total`` increase against the process's used memory x
  elapsed (5 %);

and per GPU, the energy split: the pods' joules plus ``unattributed`` equal the metered increase
(1 %), and the metered increase equals ``vgpumon_gpu_energy_joules_total``'s (1 %).

Writes ``metering-check.json`` into ``--out`` and prints a summary; exit 0 when every check passes.
``--cadence`` sets the process-list cadence of serve (default 1 s; serve's own default is 5 s,
which lags the counters by up to one cadence at each end of the window: run once with
``--cadence 5`` to see the difference).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse(text: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in text.splitlines():
        match = SAMPLE.match(line)
        if match and not line.startswith("#"):
            labels = dict(LABEL.findall(match.group(2) or ""))
            out.append((match.group(1), labels, float(match.group(3))))
    return out


def scrape(port: int) -> tuple[float, list[tuple[str, dict[str, str], float]]]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return time.monotonic(), parse(r.read().decode())


def pick(samples: list[Any], name: str, **labels: str) -> dict[tuple[str, ...], float]:
    got = {}
    for n, lab, v in samples:
        if n == name and all(lab.get(k) == val for k, val in labels.items()):
            got[tuple(sorted(lab.items()))] = v
    return got


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Load:
    """One ``vgpumon load --json``: its worker PIDs and measured duty, read from its output."""

    def __init__(self, duty: float, memory: str, device: str, seconds: float) -> None:
        cmd = [sys.executable, "-m", "vgpumon.cli", "load", "--json", "--duty", str(duty)]
        cmd += ["--memory", memory, "--device", device, "--duration", f"{seconds:.0f}s"]
        self.duty = duty
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        self.pids: list[int] = []
        self.statuses: list[tuple[float, float]] = []  # (monotonic, measured duty)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "started":
                self.pids = [int(p) for p in event.get("pids", [])]
            elif event.get("event") == "status" and event.get("duty") is not None:
                self.statuses.append((time.monotonic(), float(event["duty"])))

    def measured(self, t0: float, t1: float) -> float | None:
        inside = [d for t, d in self.statuses if t0 < t <= t1]
        return sum(inside) / len(inside) if inside else None

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def within(got: float, expected: float, tolerance: float) -> bool:
    return expected > 0 and abs(got - expected) / expected <= tolerance


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--duties", default="0.3,0.5", help="one load process per duty")
    p.add_argument("--memory", default="1GiB", help="memory each load holds")
    p.add_argument("--device", default="0")
    p.add_argument("--cadence", default="1", help="serve --intervals.processes (seconds)")
    p.add_argument("--tolerance", type=float, default=0.05)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    serve_cmd = [
        sys.executable,
        "-m",
        "vgpumon.cli",
        "serve",
        "--web.listen-address",
        f"127.0.0.1:{port}",
    ]
    serve_cmd += ["--process-series", "--interval", "1", "--intervals.processes", args.cadence]
    serve_cmd += ["--intervals.energy", "1"]
    log = open(args.out / "serve.log", "wb")  # noqa: SIM115 - open for the server's whole life
    serve = subprocess.Popen(serve_cmd, stdout=log, stderr=subprocess.STDOUT)
    duties = [float(d) for d in args.duties.split(",")]
    loads = [Load(d, args.memory, args.device, args.seconds + 60) for d in duties]
    report: dict[str, Any] = {"command": " ".join(sys.argv), "serve": " ".join(serve_cmd)}
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the exporter lists every load process
            time.sleep(1)
            try:
                _, samples = scrape(port)
            except OSError:
                continue
            seen = {lab.get("pid") for n, lab, _ in samples if n.startswith("vgpumon_process_")}
            if all(str(pid) in seen for load in loads for pid in load.pids) and all(
                load.pids for load in loads
            ):
                break
        else:
            print("metering-check: the exporter never listed the load processes", file=sys.stderr)
            return 2
        time.sleep(10)  # past the load's warm-up and one processes cadence
        t0, first = scrape(port)
        time.sleep(args.seconds)
        t1, last = scrape(port)
        elapsed = t1 - t0
        checks: list[dict[str, Any]] = []
        for load in loads:
            measured = load.measured(t0, t1)
            for pid in load.pids:
                busy = [
                    last_v - pick(first, "vgpumon_process_busy_seconds_total", pid=str(pid))[k]
                    for k, last_v in pick(
                        last, "vgpumon_process_busy_seconds_total", pid=str(pid)
                    ).items()
                ]
                mem_now = pick(last, "vgpumon_process_memory_used_bytes", pid=str(pid))
                mem = [
                    last_v
                    - pick(first, "vgpumon_process_memory_byte_seconds_total", pid=str(pid))[k]
                    for k, last_v in pick(
                        last, "vgpumon_process_memory_byte_seconds_total", pid=str(pid)
                    ).items()
                ]
                got = sum(busy)
                expected = (measured if measured is not None else load.duty) * elapsed
                used = sum(mem_now.values())
                checks.append(
                    {
                        "pid": pid,
                        "nominal_duty": load.duty,
                        "measured_duty": measured,
                        "busy_seconds": got,
                        "expected_busy_seconds": expected,
                        "busy_error": (got - expected) / expected if expected else None,
                        "busy_ok": within(got, expected, args.tolerance),
                        "memory_byte_seconds": sum(mem),
                        "expected_memory_byte_seconds": used * elapsed,
                        "memory_ok": within(sum(mem), used * elapsed, args.tolerance),
                    }
                )
        energy = []
        for key, metered in pick(last, "vgpumon_gpu_metered_energy_joules_total").items():
            labels = dict(key)
            gpu = {"gpu": labels["gpu"], "uuid": labels["uuid"]}
            d_metered = metered - pick(first, "vgpumon_gpu_metered_energy_joules_total", **gpu)[key]
            d_counter = sum(pick(last, "vgpumon_gpu_energy_joules_total", **gpu).values()) - sum(
                pick(first, "vgpumon_gpu_energy_joules_total", **gpu).values()
            )

            def increase(name: str, gpu: dict[str, str] = gpu, **extra: str) -> float:
                before = pick(first, name, **gpu, **extra)
                return sum(
                    v - before.get(k, 0.0) for k, v in pick(last, name, **gpu, **extra).items()
                )

            parts = increase("vgpumon_pod_energy_joules_total") + increase(
                "vgpumon_gpu_unattributed_energy_joules_total", kind="pod"
            )
            energy.append(
                {
                    **gpu,
                    "metered_increase_joules": d_metered,
                    "counter_increase_joules": d_counter,
                    "pods_plus_unattributed_joules": parts,
                    "split_ok": within(parts, d_metered, 0.01) if d_metered else None,
                    "metered_ok": within(d_metered, d_counter, 0.01) if d_counter else None,
                }
            )
        report.update(elapsed_seconds=elapsed, processes=checks, energy=energy)
    finally:
        for load in loads:
            load.stop()
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(timeout=20)
        except subprocess.TimeoutExpired:
            serve.kill()
        log.close()
    (args.out / "metering-check.json").write_text(json.dumps(report, indent=2) + "\n")
    ok = all(c["busy_ok"] and c["memory_ok"] for c in report["processes"]) and all(
        e["split_ok"] is not False and e["metered_ok"] is not False for e in report["energy"]
    )
    for c in report["processes"]:
        print(
            f"pid {c['pid']}: duty {c['nominal_duty']} (measured {c['measured_duty']}), busy "
            f"{c['busy_seconds']:.2f} s vs {c['expected_busy_seconds']:.2f} s "
            f"({(c['busy_error'] or 0) * 100:+.1f} %), memory ok {c['memory_ok']}"
        )
    for e in report["energy"]:
        print(
            f"GPU {e['gpu']}: metered {e['metered_increase_joules']:.1f} J, counter "
            f"{e['counter_increase_joules']:.1f} J, pods+unattributed "
            f"{e['pods_plus_unattributed_joules']:.1f} J"
        )
    print("metering-check:", "PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
