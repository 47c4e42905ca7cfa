#!/bin/bash
# clock_ns.sh CLOCKPROBE JITTER_RELAY — the clock estimate of daemon/peer/peerclock.h
# against a truth known exactly: the probe responder runs in a time namespace
# whose CLOCK_MONOTONIC is 5 s ahead (unshare --time --monotonic 5), the
# requester outside. Every burst's estimate, the interpolation between bursts
# and the extension to the present must be within its bound of 5 s (clockprobe
# --truth-ns checks them and exits 1 otherwise):
#   1. over loopback TCP;
#   2. across a veth pair into a network namespace (skipped with a reason if
#      one cannot be made);
#   3. through jitter_relay, which holds every chunk 0–1 ms each way.
# Exit 77 (ctest: skipped) when not root or time namespaces are missing.
set -u
PROBE=$1
RELAY=$2
TRUTH=5000000000
TMP=$(mktemp -d /tmp/tc_clock_ns.XXXXXX)
NS=tcc$$
VA=tcc$$a
VB=tcc$$b
NET=10.213.$(($$ % 250)).
PIDS=()

cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
    ip netns del "$NS" 2>/dev/null
    ip link del "$VA" 2>/dev/null
    rm -rf "$TMP"
}
trap cleanup EXIT

skip() { echo "SKIP: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }

[ "$(id -u)" = 0 ] || skip "needs root for time namespaces (unshare --time)"
out=$(unshare --time --monotonic 5 --fork cat /proc/self/timens_offsets 2>&1) ||
    skip "time namespaces unsupported here: $out"
echo "$out" | grep -q '^monotonic *5 ' || skip "time namespace offset not applied: $out"

# Waits for "port N" in file $1 (a tool prints it once listening) and prints N.
port_of() {
    local deadline=$((SECONDS + 10))
    while [ $SECONDS -lt $deadline ]; do
        local p
        p=$(awk '/^port /{print $2}' "$1" 2>/dev/null)
        [ -n "$p" ] && { echo "$p"; return 0; }
        sleep 0.02
    done
    cat "$1" >&2
    return 1
}

# run NAME PREFIX BIND [RELAY]: a responder 5 s ahead (PREFIX runs it, e.g. in a
# network namespace), bound to BIND; probes it directly or through the relay.
run() {
    local name=$1 prefix=$2 bind=$3 relay=${4:-}
    $prefix unshare --time --monotonic 5 --fork --kill-child \
        "$PROBE" serve --bind "$bind" >"$TMP/$name.srv" 2>&1 &
    PIDS+=($!)
    local port target
    port=$(port_of "$TMP/$name.srv") || fail "$name: the responder did not start"
    target=$bind:$port
    if [ -n "$relay" ]; then
        "$RELAY" --to "$target" --jitter-us 1000 --seed $$ >"$TMP/$name.rel" 2>&1 &
        PIDS+=($!)
        port=$(port_of "$TMP/$name.rel") || fail "$name: the relay did not start"
        target=127.0.0.1:$port
    fi
    "$PROBE" probe --connect "$target" --bursts 10 --probes 16 --interval-ms 100 \
        --truth-ns $TRUTH >"$TMP/$name.out" 2>&1
    local rc=$?
    cat "$TMP/$name.out"
    [ $rc = 0 ] || fail "$name: an estimate was not within its bound of 5 s (rc $rc)"
    # a bound so wide that it says nothing would pass the check above: bound it too
    local maxb
    maxb=$(sed -n 's/.*"last_bound_ns": \([0-9]*\).*/\1/p' "$TMP/$name.out")
    [ -n "$maxb" ] && [ "$maxb" -lt 20000000 ] || fail "$name: last bound ${maxb:-?} ns ≥ 20 ms"
    echo "ok: $name"
}

run loopback "" 127.0.0.1

# the check has teeth: the same against a truth 1 ms off must fail
"$PROBE" serve >"$TMP/off.srv" 2>&1 &
PIDS+=($!)
port=$(port_of "$TMP/off.srv") || fail "off: the responder did not start"
"$PROBE" probe --connect 127.0.0.1:$port --bursts 2 --probes 8 --interval-ms 10 \
    --truth-ns 1000000 >"$TMP/off.out" 2>&1
rc=$?
[ $rc = 1 ] || { cat "$TMP/off.out"; fail "a truth 1 ms off was not caught (rc $rc)"; }
echo "ok: a truth 1 ms off is caught"

if ip netns add "$NS" 2>"$TMP/ns.err" &&
    ip link add "$VA" type veth peer name "$VB" 2>>"$TMP/ns.err" &&
    ip link set "$VB" netns "$NS" && ip addr add "${NET}1/30" dev "$VA" &&
    ip link set "$VA" up && ip -n "$NS" addr add "${NET}2/30" dev "$VB" &&
    ip -n "$NS" link set "$VB" up && ip -n "$NS" link set lo up 2>>"$TMP/ns.err"; then
    run veth "ip netns exec $NS" "${NET}2"
else
    echo "veth skipped: could not make a network namespace: $(cat "$TMP/ns.err")"
fi

run jitter "" 127.0.0.1 relay
exit 0
