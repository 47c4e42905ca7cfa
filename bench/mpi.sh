#!/usr/bin/env bash
# libtracectl-mpi's added cost per MPI call (issue 13): in one run, ROUNDS times in turn,
# - a tight loop of 8-byte MPI_Allreduce (tc_bench_mpi_allreduce) on 1 rank (the call's own
#   cost is a copy: the interposer's cost stands alone) and on 2 ranks, and
# - NetPIPE's small-message latency (NPopenmpi -l 1 -u 8 -p 0 -n REPS, 2 ranks: 1, 2, 4 and
#   8-byte messages, each a half round trip of MPI_Send + MPI_Recv),
# each with nothing preloaded ("none"), with libtracectl-mpi ("tracectl", a daemon of this
# build on a temporary socket) and with mpi_callcount, a bare PMPI counter ("pmpi": the floor
# of any PMPI tool; Debian 12 has no mpiP, Score-P, Caliper or TAU package).
# Prints JSON lines on stdout, medians on stderr.
#   bash bench/mpi.sh [BUILD_DIR]        (default build-bench, built by scripts/bench.sh)
#   ROUNDS=5 ITERS=200000 REPS=20000 bash bench/mpi.sh build
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-bench}
ROUNDS=${ROUNDS:-5}
ITERS=${ITERS:-200000}
REPS=${REPS:-20000}
LIB=$(readlink -f "$B/libtracectl-mpi.so")
AR=$(readlink -f "$B/bench/tc_bench_mpi_allreduce")
tmp=$(mktemp -d /tmp/tcbench-mpi.XXXXXX)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpicc -O2 -shared -fPIC -o "$tmp/callcount.so" tests/mpi/mpi_callcount.c
"$B/tracectld" --socket "$tmp/s.sock" --data-dir "$tmp/data" --linger 1 --log-level error &
dpid=$!
trap 'kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do [ -S "$tmp/s.sock" ] && break; sleep 0.1; done
export TRACECTL_SOCKET=$tmp/s.sock

run() { # mode, ranks, then the command
    local mode=$1 np=$2
    shift 2
    case $mode in
    none) mpirun --oversubscribe -np "$np" "$@" ;;
    tracectl) mpirun --oversubscribe -np "$np" -x LD_PRELOAD="$LIB" "$@" ;;
    pmpi) mpirun --oversubscribe -np "$np" -x LD_PRELOAD="$tmp/callcount.so" "$@" ;;
    esac
}

for round in $(seq "$ROUNDS"); do
    for mode in none tracectl pmpi; do
        ar1=$(run $mode 1 "$AR" "$ITERS" | grep allreduce_ns)
        ar=$(run $mode 2 "$AR" "$ITERS" | grep allreduce_ns)
        run $mode 2 NPopenmpi -l 1 -u 8 -p 0 -n "$REPS" -o "$tmp/np.out" >/dev/null 2>&1
        lat=$(awk '{printf "%s\"%d\": %.1f", (NR > 1 ? ", " : ""), $1, $3 * 1e9}' "$tmp/np.out")
        echo "{\"bench\": \"mpi\", \"round\": $round, \"mode\": \"$mode\", \"one_rank\": $ar1, ${ar#\{}" |
            sed "s/}\$/, \"netpipe_ns\": {$lat}}/"
    done
done | tee "$tmp/out"
"$B/tracectl" sessions >&2

# Medians per mode: the allreduce wall and CPU ns, NetPIPE's 1-byte and 8-byte latency.
python3 - "$tmp/out" >&2 <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
med = {}
for mode in ("none", "tracectl", "pmpi"):
    r = [x for x in rows if x["mode"] == mode]
    med[mode] = {k: statistics.median(v) for k, v in {
        "ar1": [x["one_rank"]["allreduce_ns"] for x in r],
        "cpu1": [x["one_rank"]["allreduce_cpu_ns"] for x in r],
        "ar": [x["allreduce_ns"] for x in r], "cpu": [x["allreduce_cpu_ns"] for x in r],
        "np1": [x["netpipe_ns"]["1"] for x in r],
        "np8": [x["netpipe_ns"]["8"] for x in r]}.items()}
    print(f"{mode:9s} allreduce 1 rank {med[mode]['ar1']:7.1f} ns wall {med[mode]['cpu1']:7.1f} ns cpu")
    print(f"{mode:9s} allreduce {med[mode]['ar']:7.1f} ns wall {med[mode]['cpu']:7.1f} ns cpu"
          f"   netpipe 1 B {med[mode]['np1']:7.1f} ns  8 B {med[mode]['np8']:7.1f} ns")
for mode in ("tracectl", "pmpi"):
    for k, name in (("ar1", "1-rank wall"), ("cpu1", "1-rank cpu"), ("ar", "allreduce wall"), ("cpu", "allreduce cpu"),
                    ("np1", "netpipe 1 B"), ("np8", "netpipe 8 B")):
        d = med[mode][k] - med["none"][k]
        print(f"{mode:9s} added {name:15s} {d:+7.1f} ns = {d / med['none'][k]:+.1%} of the call")
PY
