# tests/hosts/lib.sh — hosts on one machine for tests: each "host" is a network
# namespace joined to the home's by a veth pair, with its own tracectld, data
# dir and producers. Sourced by tests/hosts/test_*.sh (bash).
#
#   hosts_need_root            exit 77 (ctest: skipped) with a reason unless root with ip(8)
#   hosts_init                 a work dir ($HOSTS_DIR) and a prefix for names; cleanup on exit
#   hosts_add NAME             a namespace for host NAME (lo up)
#   hosts_link A B N           a veth pair A <-> B on 10.$HOSTS_NET.N.0/24: A is .1, B is .2
#   hosts_addr A B N           prints B's side's view of A's address (10.$HOSTS_NET.N.1)
#   hosts_exec NAME CMD...     runs CMD in NAME's namespace (and its clock, hosts_time)
#   hosts_time NAME SECONDS    NAME's CLOCK_MONOTONIC is SECONDS off the machine's (may be
#                              negative): its daemon and commands run in a time namespace
#                              with that offset (one per process: equal offsets, equal clocks)
#   hosts_have_timens          true when time namespaces work here (unshare --time)
#   hosts_daemon NAME ARGS...  starts tracectld in NAME's namespace on $HOSTS_DIR/NAME.sock,
#                              data in $HOSTS_DIR/NAME.data, log $HOSTS_DIR/NAME.log
#   hosts_stop NAME            SIGTERM to NAME's daemon, waits for it
#   hosts_link_set A N up|down the A side of link N up or down
#   hosts_coll4 SESSION        4 ranks (2 per host) of synchronizing allreduces, rank 3 late
#   fail MESSAGE               says it, prints every log's tail, exits 1
#   hosts_wait SECONDS CMD...  polls CMD every 0.1 s until it succeeds; fails past SECONDS
# Needs TRACECTLD (the daemon binary).

hosts_need_root() {
    if [ "$(id -u)" -ne 0 ]; then
        echo "SKIP: network namespaces need root (CI runs as root)"
        exit 77
    fi
    if ! command -v ip >/dev/null; then
        echo "SKIP: ip(8) from iproute2 is not installed"
        exit 77
    fi
}

HOSTS_NS=()
declare -A HOSTS_PID
declare -A HOSTS_TIME

hosts_cleanup() {
    local n
    for n in "${!HOSTS_PID[@]}"; do
        hosts_kill "${HOSTS_PID[$n]}"
    done
    for n in "${!HOSTS_PID[@]}"; do
        wait "${HOSTS_PID[$n]}" 2>/dev/null
    done
    for n in "${HOSTS_NS[@]}"; do
        ip netns del "$n" 2>/dev/null
    done
    if [ -n "${HOSTS_KEEP:-}" ]; then
        echo "kept $HOSTS_DIR"
    else
        rm -rf "$HOSTS_DIR"
    fi
}

hosts_init() {
    HOSTS_DIR=$(mktemp -d /tmp/tc_hosts.XXXXXX)
    # A prefix short enough for interface names (15 bytes) and unique per run.
    HOSTS_PFX="t$(( $$ % 100000 ))"
    HOSTS_NET=$(( 100 + $$ % 100 ))
    trap hosts_cleanup EXIT
}

hosts_add() {
    local ns="${HOSTS_PFX}$1"
    ip netns add "$ns" || return 1
    HOSTS_NS+=("$ns")
    ip -n "$ns" link set lo up
}

hosts_link() {
    local a="${HOSTS_PFX}$1" b="${HOSTS_PFX}$2" n=$3
    ip link add "${HOSTS_PFX}l${n}a" type veth peer name "${HOSTS_PFX}l${n}b" || return 1
    ip link set "${HOSTS_PFX}l${n}a" netns "$a"
    ip link set "${HOSTS_PFX}l${n}b" netns "$b"
    ip -n "$a" addr add "10.$HOSTS_NET.$n.1/24" dev "${HOSTS_PFX}l${n}a"
    ip -n "$b" addr add "10.$HOSTS_NET.$n.2/24" dev "${HOSTS_PFX}l${n}b"
    ip -n "$a" link set "${HOSTS_PFX}l${n}a" up
    ip -n "$b" link set "${HOSTS_PFX}l${n}b" up
}

hosts_addr() {
    echo "10.$HOSTS_NET.$3.1"
}

hosts_have_timens() {
    unshare --time --monotonic 1 --fork true 2>/dev/null
}

hosts_time() {
    HOSTS_TIME[$1]=$2
}

# The command prefix that puts a process on NAME's clock (nothing when it has none).
hosts_clock() {
    local off=${HOSTS_TIME[$1]:-}
    [ -n "$off" ] && echo "unshare --time --monotonic $off --fork --kill-child=SIGTERM"
}

hosts_exec() {
    local ns="${HOSTS_PFX}$1" clock
    clock=$(hosts_clock "$1")
    shift
    ip netns exec "$ns" $clock "$@"
}

hosts_daemon() {
    local name=$1 clock
    shift
    clock=$(hosts_clock "$name")
    ip netns exec "${HOSTS_PFX}$name" $clock "$TRACECTLD" --socket "$HOSTS_DIR/$name.sock" \
        --data-dir "$HOSTS_DIR/$name.data" "$@" >>"$HOSTS_DIR/$name.log" 2>&1 &
    HOSTS_PID[$name]=$!
    hosts_wait 10 test -S "$HOSTS_DIR/$name.sock"
}

# SIGTERM to a process we started and to its children: unshare --fork (hosts_time) waits for
# its child and does not pass SIGTERM on.
hosts_kill() {
    kill $(pgrep -P "$1") "$1" 2>/dev/null
}

hosts_stop() {
    hosts_kill "${HOSTS_PID[$1]}"
    wait "${HOSTS_PID[$1]}" 2>/dev/null
    unset "HOSTS_PID[$1]"
}

hosts_link_set() {
    ip -n "${HOSTS_PFX}$1" link set "${HOSTS_PFX}l${2}a" "$3"
}

hosts_wait() {
    local deadline=$(( $(date +%s%N) + $1 * 1000000000 ))
    shift
    until "$@"; do
        if [ "$(date +%s%N)" -gt "$deadline" ]; then
            echo "timed out waiting for: $*" >&2
            return 1
        fi
        sleep 0.1
    done
}

# The failure of a test: what it says, then the tail of every log of the run.
fail() {
    echo "FAIL: $*"
    for f in "$HOSTS_DIR"/*.log; do
        echo "== $f"
        tail -20 "$f"
    done
    exit 1
}

# Session $1, 20 allreduces that really synchronize through $HOSTS_DIR/coll: ranks 0, 1 on
# the home and 2, 3 on m1, rank 3 sleeping 20 ms before each (hosts_producer.c, $PRODUCER).
# Returns non-zero when a producer failed.
hosts_coll4() {
    local pids=() rc=0 host rank
    mkdir -p "$HOSTS_DIR/coll"
    for rank in 0 1 2 3; do
        host=home
        [ "$rank" -ge 2 ] && host=m1
        hosts_exec "$host" env HOSTS_COLL_DIR="$HOSTS_DIR/coll" HOSTS_COLL_N=20 \
            HOSTS_LATE_RANK=3 HOSTS_LATE_US=20000 "$PRODUCER" "$HOSTS_DIR/$host.sock" "$1" \
            "$rank" 4 0 &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    return $rc
}
