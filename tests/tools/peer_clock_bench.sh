#!/usr/bin/env bash
# peer_clock_bench.sh BUILD_DIR [RUNS] [BURSTS] — the clock bound between two daemons against
# clockprobe's under the same jitter, interleaved (docs/BENCHMARKS.md). Each run: a home and a
# member m1 (3 s ahead, a time namespace) in network namespaces joined by a veth pair, m1's
# links through tests/tools/jitter_relay --many in m1's namespace (0-1 ms each way), nothing
# else running: BURSTS bursts of the home (32 probes, 1 s apart); then clockprobe across the
# same hops (home -> veth -> relay -> responder in m1's namespace), BURSTS bursts of 32.
# WITH_REPORTS=1 adds a third: the daemons again, with a report asked of the home every
# 0.1 s (and a python3 started), as test_jitter.sh's waits do. Prints, per run and source, the median bound of the bursts past the first two and the median
# bound of their minimum-round-trip samples alone. Needs root.
set -u
BD=$1 RUNS=${2:-3} BURSTS=${3:-12}
TRACECTLD=$BD/tracectld
. "$(dirname "$0")/../hosts/lib.sh"
hosts_need_root
hosts_init
if [ -n "${NICE:-}" ]; then # NICE=-10: the daemons (and clockprobe) at that nice value
    printf '#!/bin/sh\nexec nice -n %s %s "$@"\n' "$NICE" "$BD/tracectld" >"$HOSTS_DIR/tracectld"
    chmod +x "$HOSTS_DIR/tracectld"
    TRACECTLD=$HOSTS_DIR/tracectld
fi
hosts_add home && hosts_add m1 && hosts_link home m1 1 || exit 2
hosts_time m1 3
openssl rand -hex 32 >"$HOSTS_DIR/key" && chmod 600 "$HOSTS_DIR/key"
HOME_ADDR=$(hosts_addr home m1 1) M1_ADDR=10.$HOSTS_NET.1.2
med() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

daemons() { # [reports]: prints "daemons MEDIAN RTT_MEDIAN"
    set -- "${1:-}"
    rm -rf "$HOSTS_DIR"/*.data "$HOSTS_DIR"/*.log "$HOSTS_DIR"/*.sock
    hosts_daemon home --peer-listen 0.0.0.0:7700 --peer-key "$HOSTS_DIR/key" --host home \
        --log-level debug || return 1
    ip netns exec "${HOSTS_PFX}m1" "$BD/tests/jitter_relay" --many --bind 127.0.0.1 \
        --jitter-us 1000 --to "$HOME_ADDR:7700" >"$HOSTS_DIR/relay.out" 2>/dev/null &
    HOSTS_PID[relay]=$!
    hosts_wait 10 grep -q '^port ' "$HOSTS_DIR/relay.out" || return 1
    hosts_daemon m1 --home "127.0.0.1:$(awk '/^port /{print $2}' "$HOSTS_DIR/relay.out")" \
        --peer-key "$HOSTS_DIR/key" --host m1 || return 1
    n() { [ "$(grep -c 'peer m1: clock burst' "$HOSTS_DIR/home.log")" -ge "$BURSTS" ]; }
    if [ "${1:-}" = reports ]; then # a report at the home every 0.1 s, as test_jitter.sh's waits do
        n() {
            "$BD/tracectl" --socket "$HOSTS_DIR/home.sock" report --json none >/dev/null 2>&1
            python3 -c 'pass'
            [ "$(grep -c 'peer m1: clock burst' "$HOSTS_DIR/home.log")" -ge "$BURSTS" ]
        }
    fi
    hosts_wait $((BURSTS + 15)) n || return 1
    hosts_stop m1; hosts_stop relay; hosts_stop home
    sed -n 's/.*peer m1: clock burst: offset -\{0,1\}[0-9]* ns within \([0-9]*\) ns (the minimum round trip.s alone: \([0-9]*\) ns).*/\1 \2/p' \
        "$HOSTS_DIR/home.log" | tail -n +3 >"$HOSTS_DIR/b"
    echo "daemons${1:+ with $1} $(awk '{print $1}' "$HOSTS_DIR/b" | med) $(awk '{print $2}' "$HOSTS_DIR/b" | med)"
}

probe() { # run: prints "clockprobe MEDIAN RTT_MEDIAN"
    hosts_exec m1 nice -n "${NICE:-0}" "$BD/tests/clockprobe" serve --bind 127.0.0.1 >"$HOSTS_DIR/srv" 2>&1 &
    HOSTS_PID[srv]=$!
    hosts_wait 10 grep -q '^port ' "$HOSTS_DIR/srv" || return 1
    ip netns exec "${HOSTS_PFX}m1" "$BD/tests/jitter_relay" --bind "$M1_ADDR" --jitter-us 1000 \
        --to "127.0.0.1:$(awk '/^port /{print $2}' "$HOSTS_DIR/srv")" >"$HOSTS_DIR/relay2.out" 2>/dev/null &
    HOSTS_PID[relay2]=$!
    hosts_wait 10 grep -q '^port ' "$HOSTS_DIR/relay2.out" || return 1
    hosts_exec home nice -n "${NICE:-0}" "$BD/tests/clockprobe" probe \
        --connect "$M1_ADDR:$(awk '/^port /{print $2}' "$HOSTS_DIR/relay2.out")" \
        --bursts "$BURSTS" --probes 32 --interval-ms 1000 >"$HOSTS_DIR/probe" 2>&1
    hosts_stop relay2; hosts_stop srv
    grep '"burst"' "$HOSTS_DIR/probe" | tail -n +3 |
        sed -n 's/.*"bound_ns": \([0-9]*\).*"rtt_bound_ns": \([0-9]*\).*/\1 \2/p' >"$HOSTS_DIR/p"
    echo "clockprobe $(awk '{print $1}' "$HOSTS_DIR/p" | med) $(awk '{print $2}' "$HOSTS_DIR/p" | med)"
}

for r in $(seq "$RUNS"); do
    daemons || echo "daemons: run $r failed"
    probe || echo "clockprobe: run $r failed"
    [ -z "${WITH_REPORTS:-}" ] || daemons reports || echo "daemons with reports: run $r failed"
done
