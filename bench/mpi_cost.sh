#!/usr/bin/env bash
# What libtracectl-mpi adds to each point-to-point message (issue 29 item 7), in figures that
# hold on a loaded machine, plus the paired wall-clock ones:
# - instructions per MPI call with valgrind --tool=callgrind (2 ranks, bench/mpi_pingpong.c,
#   CG_N round trips of 8 bytes): the interposer's own (inclusive cost of each MPI_Send /
#   MPI_Recv wrapper minus its PMPI_* call, per call) and the writer thread's (per call);
# - the ping-pong's wall time per round trip, ROUNDS times in turn without the interposer
#   ("none"), with it ("entries": an entry per call, a daemon of this build on a temporary
#   socket), with TRACECTL_MPI_P2P=counters ("counters") and with TRACECTL_MPI_P2P=auto
#   ("auto", the default rate: it switches to counters within the first 100 ms), medians;
# - NetPIPE's small-message latency (NPopenmpi -l 1 -u 8 -p 0 -n REPS: 1-8 byte messages, each
#   a half round trip), paired the same way, medians of the 1 and 8 byte figures, and the KiB
#   each NetPIPE run adds to the daemon's data directory.
# Prints JSON lines on stdout, a summary on stderr (medians and best runs). For the CPU
# time per message without busy-polling: mpirun -np 1 mpi_pingpong 1000000 null, with and
# without LD_PRELOAD.
#   bash bench/mpi_cost.sh [BUILD_DIR]        (default build-bench, built by scripts/bench.sh)
#   ROUNDS=5 N=200000 REPS=20000 CG_N=20000 bash bench/mpi_cost.sh build-rel
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build-bench}
ROUNDS=${ROUNDS:-5}
N=${N:-200000}
REPS=${REPS:-20000}
CG_N=${CG_N:-20000}
LIB=$(readlink -f "$B/libtracectl-mpi.so")
tmp=$(mktemp -d /tmp/tcbench-mpicost.XXXXXX)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpicc -O2 -g -o "$tmp/pp" bench/mpi_pingpong.c
"$B/tracectld" --socket "$tmp/s.sock" --data-dir "$tmp/data" --linger 1 --log-level error &
dpid=$!
trap 'kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do [ -S "$tmp/s.sock" ] && break; sleep 0.1; done
export TRACECTL_SOCKET=$tmp/s.sock

run() { # mode, then the command
    local mode=$1
    shift
    case $mode in
    none) mpirun --oversubscribe -np 2 "$@" ;;
    entries) mpirun --oversubscribe -np 2 -x LD_PRELOAD="$LIB" "$@" ;;
    counters) mpirun --oversubscribe -np 2 -x LD_PRELOAD="$LIB" -x TRACECTL_MPI_P2P=counters "$@" ;;
    auto) mpirun --oversubscribe -np 2 -x LD_PRELOAD="$LIB" -x TRACECTL_MPI_P2P=auto "$@" ;;
    esac
}

# Instructions: rank 0's profile (both ranks run the same calls).
for mode in entries counters auto; do
    run $mode valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$mode.%p" "$tmp/pp" \
        "$CG_N" >/dev/null 2>&1
    cg=$(ls "$tmp"/cg.$mode.* | head -1)
    callgrind_annotate --inclusive=yes "$cg" 2>/dev/null >"$tmp/cg.txt"
    python3 - "$tmp/cg.txt" "$CG_N" "$mode" <<'PY'
import re, sys
inc = {}
for line in open(sys.argv[1]):
    m = re.match(r"\s*([\d,]+) \(.*?\)\s+\S*?:(\S+) \[(\S+)\]", line)
    if m:
        inc.setdefault(m.group(2), int(m.group(1).replace(",", "")))
calls = 2 * (int(sys.argv[2]) + 1000)  # each rank: a Send and a Recv per round trip
ins = lambda f: inc.get(f, 0)
wrap = ins("MPI_Send") - ins("PMPI_Send") + ins("MPI_Recv") - ins("PMPI_Recv")
print('{"bench": "mpi_cost", "mode": "%s", "calls": %d, "interposer_ir_per_call": %.1f, '
      '"writer_ir_per_call": %.1f}' % (sys.argv[3], calls, wrap / calls,
                                       ins("writer_thread") / calls))
PY
done

for round in $(seq "$ROUNDS"); do
    for mode in none entries counters auto; do
        pp=$(run $mode "$tmp/pp" "$N" | grep pingpong_ns)
        before=$(du -sb "$tmp/data" | cut -f1)
        run $mode NPopenmpi -l 1 -u 8 -p 0 -n "$REPS" -o "$tmp/np.out" >/dev/null 2>&1
        after=$(du -sb "$tmp/data" | cut -f1)
        lat=$(awk '{printf "%s\"%d\": %.1f", (NR > 1 ? ", " : ""), $1, $3 * 1e9}' "$tmp/np.out")
        echo "{\"bench\": \"mpi_cost\", \"round\": $round, \"mode\": \"$mode\"," \
            "\"pingpong_ns\": $(echo "$pp" | sed 's/.*"pingpong_ns": \([0-9.]*\).*/\1/')," \
            "\"netpipe_kib\": $(((after - before) / 1024)), \"netpipe_ns\": {$lat}}"
    done
done | tee "$tmp/out"

python3 - "$tmp/out" >&2 <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
med = {}
for mode in ("none", "entries", "counters", "auto"):
    r = [x for x in rows if x.get("mode") == mode]
    med[mode] = {k: statistics.median(v) for k, v in {
        "pp": [x["pingpong_ns"] for x in r], "kib": [x["netpipe_kib"] for x in r],
        "np1": [x["netpipe_ns"]["1"] for x in r], "np8": [x["netpipe_ns"]["8"] for x in r]}.items()}
    m = med[mode]
    print(f"{mode:9s} ping-pong {m['pp']:9.1f} ns/round trip   netpipe 1 B {m['np1']:7.1f} ns"
          f"  8 B {m['np8']:7.1f} ns   {m['kib']:.0f} KiB per netpipe run")
# On a loaded machine the medians swing by microseconds; the best run of each mode is what
# the interposer adds when nothing else ran in between.
best = {m: {k: min(x[f] if f != "np" else x["netpipe_ns"][s] for x in rows
                   if x.get("mode") == m)
            for k, f, s in (("pp", "pingpong_ns", None), ("np1", "np", "1"), ("np8", "np", "8"))}
        for m in ("none", "entries", "counters", "auto")}
for mode in ("entries", "counters", "auto"):
    for k, name in (("pp", "per round trip"), ("np1", "netpipe 1 B"), ("np8", "netpipe 8 B")):
        d = med[mode][k] - med["none"][k]
        b = best[mode][k] - best["none"][k]
        print(f"{mode:9s} added {name:15s} {d:+8.1f} ns (medians), {b:+8.1f} ns (best runs)")
PY
