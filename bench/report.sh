#!/usr/bin/env bash
# bench/report.sh — issue 3, benchmark 3: the time of `tracectl report <id> --json` (the whole
# CLI process) on sessions of 1 M and 10 M entries while another session is ingesting.
#
#   bash bench/report.sh [BUILD_DIR (build-bench)]      RUNS=10 (timed runs per session)
#   STORAGE_FORMAT=blocks bash bench/report.sh           (tracectld --storage-format; default rows)
#
# Starts the built tracectld on a temporary socket and data dir, builds the two sessions with
# tc_bench_ingest --attach (16 producers, blocking mode), starts a background producer session
# (2 producers, until the end), then times both reports with hyperfine (Debian `hyperfine`;
# else a loop over `date +%s%N`). Prints one JSON line on stdout (medians, min, max, ratio
# report(10M) ÷ report(1M), the background ingest rate meanwhile) and a summary on stderr.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-bench}
RUNS=${RUNS:-10}
ING=$BUILD/bench/tc_bench_ingest
CLI=$BUILD/tracectl
DAEMON=$BUILD/tracectld
for f in "$ING" "$CLI" "$DAEMON"; do
    [ -x "$f" ] || { echo "report.sh: $f is not built (cmake --build $BUILD)" >&2; exit 1; }
done
command -v jq >/dev/null || { echo "report.sh: needs jq" >&2; exit 1; }

dir=$(mktemp -d /tmp/tcbench-report.XXXXXX)
sock=$dir/tracectl.sock
dpid="" bgpid=""
cleanup() {
    [ -n "$bgpid" ] && kill -TERM "$bgpid" 2>/dev/null && wait "$bgpid" 2>/dev/null || true
    [ -n "$dpid" ] && kill -TERM "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT

FORMAT=${STORAGE_FORMAT:-rows}
"$DAEMON" --socket "$sock" --data-dir "$dir/data" --log-level warn --storage-format "$FORMAT" &
dpid=$!
for _ in $(seq 100); do [ -S "$sock" ] && break; sleep 0.1; done
tc() { "$CLI" --socket "$sock" "$@"; }

echo "report.sh: building the 1 M and 10 M entry sessions" >&2
"$ING" --attach "$sock" --session report-1m --producers 16 --entries 62500 >/dev/null
"$ING" --attach "$sock" --session report-10m --producers 16 --entries 625000 >/dev/null
id1=$(tc sessions --json | jq -r '.[] | select(.name == "report-1m") | .id')
id10=$(tc sessions --json | jq -r '.[] | select(.name == "report-10m") | .id')
n1=$(tc report "$id1" --json | jq '.session.entries')
n10=$(tc report "$id10" --json | jq '.session.entries')
[ "$n1" = 1000000 ] && [ "$n10" = 10000000 ] ||
    { echo "report.sh: sessions hold $n1 and $n10 entries, not 1 M and 10 M" >&2; exit 1; }

echo "report.sh: background ingest on, timing $RUNS runs of each report" >&2
"$ING" --attach "$sock" --session report-bg --producers 2 --entries 1000000000 --seconds 900 \
    >/dev/null 2>&1 &
bgpid=$!
sleep 2
before=$(tc status --json | jq '.entries')
t0=$(date +%s%N)

# stat: median, min, max in seconds of the numbers on stdin
stat() { sort -g | awk '{v[NR]=$1} END {m = NR % 2 ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2;
                                         printf "{\"median\":%.6f,\"min\":%.6f,\"max\":%.6f,\"n\":%d}", m, v[1], v[NR], NR}'; }
if command -v hyperfine >/dev/null; then
    tool=hyperfine
    hyperfine -N --warmup 2 --runs "$RUNS" --export-json "$dir/h.json" \
        "$CLI --socket $sock report $id1 --json" "$CLI --socket $sock report $id10 --json" \
        >/dev/null 2>&1
    s1=$(jq -r '.results[0].times[]' "$dir/h.json" | stat)
    s10=$(jq -r '.results[1].times[]' "$dir/h.json" | stat)
else
    tool=date-loop
    time_runs() {
        for _ in $(seq "$RUNS"); do
            a=$(date +%s%N); tc report "$1" --json >/dev/null; b=$(date +%s%N)
            echo "($b - $a) / 1000000000" | bc -l
        done
    }
    s1=$(time_runs "$id1" | stat)
    s10=$(time_runs "$id10" | stat)
fi
after=$(tc status --json | jq '.entries')
t1=$(date +%s%N)
bg_rate=$(echo "($after - $before) / (($t1 - $t0) / 1000000000)" | bc -l)
m1=$(echo "$s1" | jq '.median')
m10=$(echo "$s10" | jq '.median')
ratio=$(echo "$m10 / $m1" | bc -l)
printf '{"bench":"report","kind":"summary","format":"%s","tool":"%s","report_1m_s":%s,"report_10m_s":%s,"ratio":%.4f,"background_ingest_per_s":%.0f}\n' \
    "$FORMAT" "$tool" "$s1" "$s10" "$ratio" "$bg_rate"
printf 'report: 1 M entries %.1f ms, 10 M entries %.1f ms (median of %d, %s), ratio %.2f; background ingest %.0f entries/s\n' \
    "$(echo "$m1 * 1000" | bc -l)" "$(echo "$m10 * 1000" | bc -l)" "$RUNS" "$tool" "$ratio" "$bg_rate" >&2
