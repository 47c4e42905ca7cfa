#!/usr/bin/env bash
# bench/hosts.sh — a home and MEMBERS members on this machine (127.0.0.1, no
# namespaces: no root needed), each member with RANKS live producers of one
# session (tests/hosts/hosts_producer, N entries of two ops each, then held
# open so the session stays live). Once the home has every entry, measures
# over 10 s: the bytes the home receives per member per second (ss), the
# home's CPU per member (the run time of all its threads in ns,
# /proc/PID/task/*/schedstat: /proc/PID/stat's 10 ms ticks round a home's
# few ms a second to 0 or 10), and the latency of the home's merged
# `tracectl report --json` (20 runs). Prints one JSON line.
#   bench/hosts.sh BUILD_DIR [MEMBERS] [RANKS] [N]      defaults 8 16 1000
set -euo pipefail
B=${1:?usage: bench/hosts.sh BUILD_DIR [MEMBERS] [RANKS] [N]}
MEMBERS=${2:-8} RANKS=${3:-16} N=${4:-1000}
D=$(mktemp -d /tmp/tc_bench_hosts.XXXXXX)
PORT=$((20000 + $$ % 20000))
pids=()
cleanup() {
    touch "$D/go"
    sleep 0.5
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$D"
}
trap cleanup EXIT
openssl rand -hex 32 >"$D/key" && chmod 600 "$D/key"
"$B/tracectld" --socket "$D/home.sock" --data-dir "$D/home" --peer-listen "127.0.0.1:$PORT" \
    --peer-key "$D/key" --host home --log-level warn 2>"$D/home.log" &
home=$!
pids+=("$home")
for m in $(seq 1 "$MEMBERS"); do
    "$B/tracectld" --socket "$D/m$m.sock" --data-dir "$D/m$m" --home "127.0.0.1:$PORT" \
        --peer-key "$D/key" --host "m$m" --log-level warn 2>"$D/m$m.log" &
    pids+=("$!")
done
for m in $(seq 1 "$MEMBERS"); do
    until [ -S "$D/m$m.sock" ]; do sleep 0.05; done
    for r in $(seq 0 $((RANKS - 1))); do
        "$B/tests/hosts_producer" "$D/m$m.sock" bench "$r" "$RANKS" "$N" "$D/go" &
        pids+=("$!")
    done
done
want=$((MEMBERS * RANKS * 2 * N))
entries() {
    "$B/tracectl" --socket "$D/home.sock" report --json bench 2>/dev/null |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["session"]["entries"])' 2>/dev/null ||
        echo 0
}
t0=$(date +%s)
until [ "$(entries)" -eq "$want" ]; do
    [ $(($(date +%s) - t0)) -lt 120 ] || { echo "the home never had $want entries" >&2; exit 1; }
    sleep 0.5
done
rx() { ss -tinH state established "( sport = :$PORT )" | grep -o 'bytes_received:[0-9]*' |
       cut -d: -f2 | awk '{s += $1} END {print s + 0}'; }
cpu() { cat /proc/"$home"/task/*/schedstat | awk '{s += $1} END {printf "%d\n", s}'; }
b0=$(rx) c0=$(cpu)
sleep 10
b1=$(rx) c1=$(cpu)
lat=()
for i in $(seq 1 20); do
    s=$(date +%s%N)
    "$B/tracectl" --socket "$D/home.sock" report --json bench >/dev/null
    lat+=($(( ($(date +%s%N) - s) / 1000 )))
done
med=$(printf '%s\n' "${lat[@]}" | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')
max=$(printf '%s\n' "${lat[@]}" | sort -n | tail -1)
printf '{"members": %d, "ranks": %d, "entries": %d, "bytes_per_s_per_member": %d, "home_cpu_ms_per_s_per_member": %.3f, "report_ms_median": %.1f, "report_ms_max": %.1f}\n' \
    "$MEMBERS" "$RANKS" "$want" $(( (b1 - b0) / 10 / MEMBERS )) \
    "$(echo "($c1 - $c0) / 1000000 / 10 / $MEMBERS" | bc -l)" \
    "$(echo "$med / 1000" | bc -l)" "$(echo "$max / 1000" | bc -l)"
