#!/usr/bin/env bash
# Real-GPU checks for vgpumon, run on a real GPU host from the repository root:
#   bash bench/device/run_checks.sh PHASE OUTDIR
# PHASE "facts": environment, nvidia-smi, `vgpumon snapshot`, `vgpumon record`, the gpu-marked tests.
# PHASE "validate": `vgpumon validate` twice in process (table + JSON) and once through `vgpumon serve`.
# PHASE "validate-url": `vgpumon validate --url` twice against `vgpumon serve --process-series --interval 1`
#   with serve's default cadences (GPM and processes read every 5 s); JSON, logs and a summary table.
# PHASE "cost": what the exporter costs: every NVML call timed (bench/nvml_call_costs.py), a py-spy
#   profile and per-thread CPU of `vgpumon serve` over 30 s, then bench/exporter_cost.py against
#   nvitop-exporter and the serial floor (wheels: nvitop, nvitop-exporter, py-spy).
# PHASE "big-host": the whole `vgpumon serve` with its own sampler on the simulated 16 GPU x 48 vGPU
#   host, open loop of 100 scrapes/s (OpenMetrics, gzip) at --interval 1 and 5, with the serving
#   process's event-loop stalls (bench/serve_probe.py): on the simulator, on the NVML stand-in
#   (bench/shim/nvml_standin.py: the H100's per-call costs spent with the interpreter released; it
#   builds a small C function with the host's cc, else sleeps, and says which), and the server
#   alone on a synthetic host of the same size (bench/scrape_latency.py). About 4 minutes.
# PHASE "serve-31": "big-host", then "cost" (issue 31's figures in one go, about 10 minutes; under 8
#   with SECONDS_LOAD=15 PROFILE=0 COST_ARGS="--quick --rounds 2 --window 20": 6 minutes rehearsed).
# Wheels for packages the machine lacks (h11, pytest-asyncio, nvitop, nvitop-exporter, py-spy) are
# installed from .whl/ when that folder exists (a GPU host without PyPI access); everything
# writes into OUTDIR.
set -uo pipefail
phase=$1
out=$2
mkdir -p "$out"
export PYTHONUNBUFFERED=1
if [ -d .whl ]; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target /tmp/site .whl/*.whl >/dev/null 2>&1
    export PYTHONPATH=/tmp/site:.
else
    export PYTHONPATH=.
fi
vgpumon() { python3 -m vgpumon.cli "$@"; }

case "$phase" in
facts)
    {
        date -u
        nvidia-smi --query-gpu=name,uuid,memory.total,driver_version,mig.mode.current,serial \
            --format=csv,noheader
        python3 --version
        python3 -c 'import pynvml, importlib.metadata as m; print("nvidia-ml-py", m.version("nvidia-ml-py"))'
        python3 -c 'import importlib.metadata as m; print("cuda-core", m.version("cuda-core"))'
    } >"$out/env.txt" 2>&1
    nvidia-smi -q >"$out/nvidia-smi-q.txt" 2>&1
    vgpumon snapshot --json >"$out/snapshot.json" 2>"$out/snapshot.err"
    echo "snapshot exit $?" >>"$out/env.txt"
    vgpumon snapshot >"$out/snapshot.txt" 2>&1
    vgpumon record --output "$out/recorded-h200.yaml" 2>"$out/record.err"
    echo "record exit $?" >>"$out/env.txt"
    python3 -m pytest -p no:cacheprovider -q -m gpu tests/gpu/test_gpu_real.py tests/collect/test_vgpu_passthrough.py \
        tests/gpu/test_loadgen_gpu.py tests/gpu/test_validate_gpu.py 2>&1 | tee "$out/gpu-tests.log"
    ;;
validate)
    for run in 1 2; do
        vgpumon validate --device 0 --no-progress --json >"$out/validate-$run.json" 2>"$out/validate-$run.err"
        echo "validate run $run exit $?" | tee -a "$out/validate.log"
    done
    vgpumon validate --device 0 --no-progress 2>&1 | tee "$out/validate-table.txt"
    echo "validate table exit ${PIPESTATUS[0]}" | tee -a "$out/validate.log"
    vgpumon serve --web.listen-address 127.0.0.1:9839 --process-series --interval 1 >"$out/serve.log" 2>&1 &
    server=$!
    sleep 4
    vgpumon validate --device 0 --url http://127.0.0.1:9839 --no-progress 2>&1 | tee "$out/validate-url.txt"
    echo "validate --url exit ${PIPESTATUS[0]}" | tee -a "$out/validate.log"
    kill "$server"
    wait "$server"
    ;;
validate-url)
    # The exporter as installed: only --process-series and --interval 1, every cadence at its default.
    vgpumon serve --web.listen-address 127.0.0.1:9839 --process-series --interval 1 >"$out/serve.log" 2>&1 &
    server=$!
    python3 bench/device/validate_url_summary.py --wait-ready http://127.0.0.1:9839 \
        >"$out/exporter.txt" 2>&1
    for run in 1 2; do
        timeout 290 python3 -m vgpumon.cli validate --device 0 --url http://127.0.0.1:9839 \
            --no-progress --json >"$out/validate-url-$run.json" 2>"$out/validate-url-$run.err"
        echo "validate --url run $run exit $?" | tee -a "$out/validate-url.log"
    done
    kill "$server"
    wait "$server"
    python3 bench/device/validate_url_summary.py "$out/validate-url-1.json" \
        "$out/validate-url-2.json" 2>&1 | tee "$out/validate-url-summary.md"
    ;;
cost)
    # SIM=SCENARIO rehearses the phase on the simulator (quick exporter_cost on a 1-GPU host).
    label=${LABEL:-gpu}
    sim=()
    cost=()
    if [ -n "${SIM:-}" ]; then sim=(--sim "$SIM"); cost=(--sim --hosts 1x0 --quick); fi
    nvidia-smi --query-gpu=name,driver_version,mig.mode.current --format=csv,noheader >"$out/env.txt" 2>&1
    python3 bench/nvml_call_costs.py "${sim[@]}" --label "$label" --out "$out" >/dev/null 2>"$out/calls.err"
    echo "call costs exit $?" >>"$out/env.txt"
    if [ "${PROFILE:-1}" != 0 ]; then  # PROFILE=0: no per-thread split nor py-spy (70 s less)
        spy=$(command -v py-spy || echo /tmp/site/bin/py-spy)
        python3 -m vgpumon.cli serve "${sim[@]}" --web.listen-address 127.0.0.1:9839 --interval 1 >"$out/serve.log" 2>&1 &
        server=$!
        sleep 8
        python3 bench/device/thread_cpu.py "$server" 30 >"$out/threads-$label.txt" 2>&1
        # py-spy after the split: its sampling would inflate the split
        "$spy" record -r 250 -d 30 -f raw --threads -p "$server" -o "$out/pyspy-$label.txt" >"$out/pyspy.log" 2>&1
        kill "$server"
        wait "$server"
    fi
    # shellcheck disable=SC2086 # COST_ARGS: extra arguments, e.g. "--rounds 1 --window 20"
    python3 bench/exporter_cost.py "${cost[@]}" ${COST_ARGS:-} --label "$label" --out "$out" 2>&1 | tail -25
    ;;
big-host)
    {
        date -u
        nproc
        python3 --version
        command -v cc || echo "no C compiler: the stand-in's calls sleep instead of spinning"
    } >"$out/env-big-host.txt" 2>&1
    python3 bench/scrape_latency.py --intervals 1,5 --seconds "${SECONDS_LOAD:-15}" \
        --columns sim,standin,synthetic --json "$out/scrape-latency-whole-16x48.json" \
        >"$out/scrape-latency-whole-16x48.md" 2>"$out/scrape-latency-whole-16x48.err"
    echo "big-host exit $?" | tee -a "$out/env-big-host.txt"
    cat "$out/scrape-latency-whole-16x48.md"
    ;;
serve-31)
    date -u +"start %T" | tee "$out/times.txt"
    bash "$0" big-host "$out"
    date -u +"big-host done %T" | tee -a "$out/times.txt"
    bash "$0" cost "$out"
    date -u +"cost done %T" | tee -a "$out/times.txt"
    ;;
*)
    echo "unknown phase $phase" >&2
    exit 2
    ;;
esac
