#!/usr/bin/env bash
# Several GPM readers on one multi-GPU host, and the idle exporter's per-thread CPU:
#   bash bench/device/gpm_readers.sh OUTDIR
# Each case runs for a fixed time with faulthandler on; a reader that segfaults shows as exit 139
# (or -11 for a process killed by the signal) with its Python stacks in its .err file (all of them
# end up in OUTDIR/case-logs.tgz). SERVE_SECONDS (default 20) is how long each serve case runs.
set -uo pipefail
out=$1
mkdir -p "$out"
export PYTHONPATH=. PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
log="$out/gpm-readers.txt"
{
    date -u
    nvidia-smi --query-gpu=index,name,driver_version,mig.mode.current --format=csv,noheader
    nvidia-smi topo -m | head -6
} >"$log" 2>&1

pynvml_case() { # NAME NPROC ARGS...
    local name=$1 nproc=$2
    shift 2
    local pids=()
    for k in $(seq "$nproc"); do
        python3 bench/device/gpm_concurrency.py --seconds 15 "$@" >"$out/$name-$k.err" 2>&1 &
        pids+=($!)
        sleep 0.5
    done
    local codes=()
    for p in "${pids[@]}"; do wait "$p"; codes+=($?); done
    echo "$name ($nproc x gpm_concurrency.py $*): exit ${codes[*]}; $(grep -h 'ok:' "$out/$name"-*.err | tr '\n' ';')" >>"$log"
}

serve_case() { # NAME NPROC ARGS...
    local name=$1 nproc=$2
    shift 2
    local pids=()
    for k in $(seq "$nproc"); do
        python3 -m vgpumon.cli serve --web.listen-address "127.0.0.1:$((9850 + k))" --interval 1 "$@" \
            >"$out/$name-$k.err" 2>&1 &
        pids+=($!)
        sleep 0.5
    done
    sleep "${SERVE_SECONDS:-20}"
    local states=()
    for k in $(seq "$nproc"); do
        local p=${pids[$((k - 1))]}
        if kill -0 "$p" 2>/dev/null; then
            code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$((9850 + k))/metrics")
            states+=("alive(/metrics $code)")
            kill "$p"
            wait "$p"
        else
            wait "$p"
            states+=("died(exit $?)")
        fi
    done
    echo "$name ($nproc x serve $*): ${states[*]}" >>"$log"
}

pynvml_case pynvml-2proc-serial 2 --vgpumon-ids
pynvml_case pynvml-2proc-threads 2 --vgpumon-ids --threads
pynvml_case pynvml-1proc-threads 1 --vgpumon-ids --threads
pynvml_case pynvml-1proc-threads-fast 1 --vgpumon-ids --threads --period 0.01
serve_case serve-1-parallel 1 --dispatch parallel
serve_case serve-2-serial 2 --dispatch serial
serve_case serve-2-parallel 2 --dispatch parallel
serve_case serve-2-nogpm 2 --no-collector.gpm

# Per-thread CPU of one idle exporter (default settings), 60 s: two NVLink reads at the 30 s cadence.
python3 -m vgpumon.cli serve --web.listen-address 127.0.0.1:9860 --interval 1 >"$out/threads.err" 2>&1 &
server=$!
sleep 8
python3 bench/device/thread_cpu.py "$server" 60 >"$out/threads.txt" 2>&1
curl -s "http://127.0.0.1:9860/metrics" | grep -E '^vgpumon_(sampler_dispatch|gpu_nvlink_up)' | head -8 >>"$out/threads.txt"
kill "$server"
wait "$server"
cat "$log"
# the per-case logs travel as one archive (easier to bring back from a remote GPU host)
(cd "$out" && tar czf case-logs.tgz ./*.err && rm -f ./*.err)
