#!/bin/bash
# clock_bench.sh BUILD_DIR [RUNS] [PROBES] — the figures of docs/BENCHMARKS.md for the clock
# bound: the probe responder in a network namespace across a veth pair and in a time
# namespace 5 s ahead; RUNS runs (default 7) of 20 bursts of PROBES probes (default 16),
# 1 s apart, on the quiet link and through jitter_relay (0-1 ms each way). Prints each run's
# summary line (clockprobe) and the medians over runs of each run's median bound. Needs root.
set -u
B=$1/tests
RUNS=${2:-7}
PROBES=${3:-16}
NS=tcb$$
VA=tcb$$a
VB=tcb$$b
NET=10.214.$(($$ % 250)).
TMP=$(mktemp -d /tmp/tc_clock_bench.XXXXXX)
trap 'ip netns del $NS 2>/dev/null; ip link del $VA 2>/dev/null; rm -rf $TMP' EXIT
ip netns add $NS && ip link add $VA type veth peer name $VB && ip link set $VB netns $NS &&
    ip addr add ${NET}1/30 dev $VA && ip link set $VA up &&
    ip -n $NS addr add ${NET}2/30 dev $VB && ip -n $NS link set $VB up || exit 2

port_of() {
    for _ in $(seq 500); do
        p=$(awk '/^port /{print $2}' "$1" 2>/dev/null)
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.02
    done
    return 1
}

one() { # one MODE: prints the run's summary line
    ip netns exec $NS unshare --time --monotonic 5 --fork --kill-child \
        "$B/clockprobe" serve --bind ${NET}2 >$TMP/srv 2>&1 &
    local target=${NET}2:$(port_of $TMP/srv)
    if [ "$1" = jitter ]; then
        "$B/jitter_relay" --to "$target" --jitter-us 1000 >$TMP/rel 2>&1 &
        target=127.0.0.1:$(port_of $TMP/rel)
    fi
    "$B/clockprobe" probe --connect "$target" --bursts 20 --probes "$PROBES" \
        --interval-ms 1000 --truth-ns 5000000000 | grep summary
    wait
}

med() { sort -n | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

for mode in quiet jitter; do
    for r in $(seq "$RUNS"); do
        echo "$mode $(one $mode)" | tee -a $TMP/all
    done
    for k in median_bound_ns median_rtt_bound_ns median_midway_bound_ns max_error_ns failures; do
        printf '%s %s: median over runs %s (range %s)\n' "$mode" "$k" \
            "$(grep "^$mode" $TMP/all | sed -n "s/.*\"$k\": \([0-9]*\).*/\1/p" | med)" \
            "$(grep "^$mode" $TMP/all | sed -n "s/.*\"$k\": \([0-9]*\).*/\1/p" | sort -n |
                sed -n '1p;$p' | paste -sd- -)"
    done
done
