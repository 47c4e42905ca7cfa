#!/usr/bin/env bash
# Two builds of libtracectl-mpi against each other, per point-to-point call (issue 29): what a
# change to the interposer's hot path costs. For each of none / A entries / B entries /
# A counters / B counters / B auto (TRACECTL_MPI_P2P), ROUNDS rounds in turn:
# - the calling thread's CPU per MPI_Send + MPI_Recv pair to MPI_PROC_NULL (1 rank, N pairs);
# - the wall time per 8-byte round trip of bench/mpi_pingpong.c (2 ranks, PN round trips);
# then instructions per call with valgrind --tool=callgrind (2 ranks, CG_N round trips): the
# interposer's own (inclusive MPI_Send + MPI_Recv minus their PMPI_* calls) and the writer
# thread's. Prints one line per run and per profile, then medians and paired differences.
#   bash bench/mpi_ab.sh A_BUILD_DIR B_BUILD_DIR     (release builds; B's tracectld is used)
#   ROUNDS=9 N=1000000 PN=100000 CG_N=20000 bash bench/mpi_ab.sh /tmp/base/build-rel build-rel
set -euo pipefail
cd "$(dirname "$0")/.."
A=$(readlink -f "$1/libtracectl-mpi.so")
B=$(readlink -f "$2/libtracectl-mpi.so")
ROUNDS=${ROUNDS:-9}
N=${N:-1000000}
PN=${PN:-100000}
CG_N=${CG_N:-20000}
tmp=$(mktemp -d /tmp/tcbench-mpiab.XXXXXX)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
mpicc -O2 -g -o "$tmp/pp" bench/mpi_pingpong.c
"$2/tracectld" --socket "$tmp/s.sock" --data-dir "$tmp/data" --linger 1 --log-level error &
dpid=$!
trap 'kill "$dpid" 2>/dev/null; wait "$dpid" 2>/dev/null; rm -rf "$tmp"' EXIT
for _ in $(seq 50); do [ -S "$tmp/s.sock" ] && break; sleep 0.1; done
export TRACECTL_SOCKET=$tmp/s.sock

lib() { case $1 in none) echo "" ;; a-*) echo "$A" ;; *) echo "$B" ;; esac; }
mode() { case $1 in *-counters) echo counters ;; *-auto) echo auto ;; *) echo entries ;; esac; }
run() { # config, ranks, then the command
    local cfg=$1 np=$2 l
    shift 2
    l=$(lib "$cfg")
    mpirun --oversubscribe -np "$np" -x TRACECTL_SOCKET ${l:+-x LD_PRELOAD="$l"} \
        -x TRACECTL_MPI_P2P="$(mode "$cfg")" "$@"
}

configs="none a-entries b-entries a-counters b-counters b-auto"
for r in $(seq "$ROUNDS"); do
    for cfg in $configs; do
        cpu=$(run $cfg 1 "$tmp/pp" "$N" null | sed 's/.*: \([0-9.]*\)}/\1/')
        pp=$(run $cfg 2 "$tmp/pp" "$PN" | grep pingpong | sed 's/.*"pingpong_ns": \([0-9.]*\).*/\1/')
        echo "run $r $cfg $cpu $pp"
    done
done | tee "$tmp/out"
for cfg in a-entries b-entries a-counters b-counters b-auto; do
    rm -f "$tmp"/cg.*
    run $cfg 2 valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.%p" "$tmp/pp" "$CG_N" \
        >/dev/null 2>&1
    callgrind_annotate --inclusive=yes "$(ls "$tmp"/cg.* | head -1)" 2>/dev/null >"$tmp/cg.txt"
    python3 - "$tmp/cg.txt" "$CG_N" "$cfg" <<'PY' | tee -a "$tmp/out"
import re, sys
inc = {}
for line in open(sys.argv[1]):
    m = re.match(r"\s*([\d,]+) \(.*?\)\s+\S*?:(\S+) \[(\S+)\]", line)
    if m:
        inc.setdefault(m.group(2), int(m.group(1).replace(",", "")))
calls = 2 * (int(sys.argv[2]) + 1000)  # each rank: a Send and a Recv per round trip
ins = lambda f: inc.get(f, 0)
wrap = ins("MPI_Send") - ins("PMPI_Send") + ins("MPI_Recv") - ins("PMPI_Recv")
print("cg %s %.1f %.1f" % (sys.argv[3], wrap / calls, ins("writer_thread") / calls))
PY
done
python3 - "$tmp/out" "$configs" >&2 <<'PY'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1]) if l.startswith("run ")]
for c in sys.argv[2].split():
    cpu = [float(r[3]) for r in rows if r[2] == c]
    pp = [float(r[4]) for r in rows if r[2] == c]
    print(f"{c:11s} CPU per pair median {st.median(cpu):6.1f} ns (min {min(cpu):6.1f})"
          f"   round trip median {st.median(pp):9.1f} ns (min {min(pp):9.1f})")
for a, b in (("b-entries", "a-entries"), ("b-counters", "a-counters"), ("b-auto", "a-counters")):
    d = sorted(float(x[3]) - float(y[3]) for x in rows if x[2] == a
               for y in rows if y[2] == b and y[1] == x[1])
    print(f"{a} - {b}: CPU per pair, paired differences median {st.median(d):+.1f} ns"
          f" ({d[0]:+.1f} to {d[-1]:+.1f})")
PY
