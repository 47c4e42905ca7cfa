#!/usr/bin/env bash
# bench/clickhouse.sh BUILD_DIR [PRODUCERS] [ENTRIES]: the ClickHouse sink's figures
# (docs/clickhouse.md, docs/BENCHMARKS.md), against a private clickhouse-server on this
# machine (private ports and directory, as tests/integration/test_clickhouse.c starts it).
#
# Three runs of PRODUCERS × ENTRIES synthetic entries (tc_bench_ingest --attach, blocking
# libtracectl producers):
#   base:   the daemon without --clickhouse: its ingest rate;
#   live:   the daemon with --clickhouse from the start: its ingest rate with the sink
#           running beside it, and how long until ClickHouse holds every entry;
#   drain:  base's data dir, the daemon restarted with --clickhouse: the rate at which the
#           sink empties a backlog of every entry (rows/s it sustains into the server).
# Then bytes per entry in ClickHouse (active parts' bytes on disk ÷ rows, before and after
# OPTIMIZE ... FINAL merges them). One JSON line per figure on stdout.
set -euo pipefail
build=${1:?usage: bench/clickhouse.sh BUILD_DIR [PRODUCERS] [ENTRIES]}
P=${2:-4}
N=${3:-1000000}
total=$((P * N))
server=/usr/sbin/clickhouse-server
[ -x "$server" ] || { echo "clickhouse.sh: $server is not installed" >&2; exit 2; }
tmp=$(mktemp -d /tmp/tc-chbench.XXXXXX)
chpid=""
dpid=""
cleanup() {
    [ -n "$dpid" ] && kill -KILL "$dpid" 2>/dev/null || true
    [ -n "$chpid" ] && kill -KILL "$chpid" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$tmp"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
http=$(free_port)
tcp=$(free_port)
cat > "$tmp/config.xml" <<EOF
<?xml version="1.0"?>
<yandex>
<logger><level>warning</level><log>$tmp/server.log</log><errorlog>$tmp/server.err.log</errorlog></logger>
<http_port>$http</http_port><tcp_port>$tcp</tcp_port><listen_host>127.0.0.1</listen_host>
<path>$tmp/ch/</path><tmp_path>$tmp/chtmp/</tmp_path><user_files_path>$tmp/uf/</user_files_path>
<users_config>$tmp/users.xml</users_config>
<default_profile>default</default_profile><default_database>default</default_database>
<mark_cache_size>268435456</mark_cache_size>
</yandex>
EOF
cat > "$tmp/users.xml" <<EOF
<?xml version="1.0"?>
<yandex><profiles><default/></profiles>
<users><bench><password>pw</password><networks><ip>127.0.0.1</ip></networks>
<profile>default</profile><quota>default</quota></bench></users>
<quotas><default/></quotas></yandex>
EOF
printf 'bench:pw\n' > "$tmp/auth"
chmod 600 "$tmp/auth"
"$server" --config-file="$tmp/config.xml" > "$tmp/server.out" 2>&1 &
chpid=$!
q() { curl -sS -u bench:pw "http://127.0.0.1:$http/" --data-binary "$1"; }
for _ in $(seq 200); do q "SELECT 1" > /dev/null 2>&1 && break; sleep 0.1; done
now() { date +%s.%N; }

# start_daemon DIR HOST|"" : the daemon on DIR, with the sink when HOST is given
start_daemon() {
    local args=()
    [ -n "$2" ] && args=(--clickhouse "http://127.0.0.1:$http/" --clickhouse-auth "$tmp/auth"
                         --clickhouse-host "$2")
    "$build/tracectld" --socket "$1/s.sock" --data-dir "$1/data" "${args[@]}" 2>> "$1/log" &
    dpid=$!
    for _ in $(seq 200); do [ -S "$1/s.sock" ] && break; sleep 0.05; done
}
stop_daemon() {
    kill -TERM "$dpid"
    wait "$dpid" || true
    dpid=""
}
count() { q "SELECT count() FROM tracectl.entries WHERE host = '$1'"; }
# wait_all HOST: polls until ClickHouse holds every entry of HOST; prints when it did
wait_all() {
    local first="" c
    while :; do
        c=$(count "$1" 2>/dev/null || echo 0)
        [ -z "$first" ] && [ "$c" -gt 0 ] && first=$(now)
        [ "$c" -ge "$total" ] && break
        sleep 0.05
    done
    echo "$first $(now) $c"
}
ingest() { # ingest DIR: prints the producers' entries/s
    "$build/bench/tc_bench_ingest" --attach "$1/s.sock" --session bench --producers "$P" \
        --entries "$N" 2> /dev/null | sed -n 's/.*"entries_per_s": *\([0-9.e+]*\).*/\1/p'
}

# base: no sink
mkdir -p "$tmp/base"
start_daemon "$tmp/base" ""
base_rate=$(ingest "$tmp/base")
stop_daemon
echo "{\"bench\": \"clickhouse\", \"run\": \"base\", \"entries\": $total, \"ingest_per_s\": $base_rate}"

# live: the sink from the start
mkdir -p "$tmp/live"
start_daemon "$tmp/live" live
t0=$(now)
live_rate=$(ingest "$tmp/live")
t1=$(now)
read -r first done c < <(wait_all live)
stop_daemon
echo "{\"bench\": \"clickhouse\", \"run\": \"live\", \"entries\": $c, \"ingest_per_s\": $live_rate," \
     "\"ingest_s\": $(echo "$t1 - $t0" | bc), \"all_in_clickhouse_s\": $(echo "$done - $t0" | bc)," \
     "\"sink_per_s\": $(echo "$c / ($done - $first)" | bc)}"

# drain: base's backlog, sent by a daemon started with the sink; CPU seconds of the daemon
# (its sink thread does all the work then) and of the server, from /proc (utime + stime)
cpu() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"; }
cp -r "$tmp/base" "$tmp/drain"
rm -f "$tmp/drain/s.sock"
ch0=$(cpu "$chpid")
start_daemon "$tmp/drain" drain
read -r first done c < <(wait_all drain)
d1=$(cpu "$dpid")
ch1=$(cpu "$chpid")
stop_daemon
echo "{\"bench\": \"clickhouse\", \"run\": \"drain\", \"entries\": $c," \
     "\"sink_per_s\": $(echo "$c / ($done - $first)" | bc)," \
     "\"daemon_cpu_us_per_entry\": $(echo "scale=3; $d1 * 1000000 / $c" | bc)," \
     "\"server_cpu_us_per_entry\": $(echo "scale=3; ($ch1 - $ch0) * 1000000 / $c" | bc)," \
     "\"load\": \"$(cut -d' ' -f1-3 /proc/loadavg)\"}"

parts() {
    q "SELECT sum(bytes_on_disk), sum(rows), count() FROM system.parts
       WHERE database = 'tracectl' AND table = 'entries' AND active"
}
read -r b r n < <(parts)
echo "{\"bench\": \"clickhouse\", \"run\": \"bytes\", \"merged\": false, \"parts\": $n, \"rows\": $r," \
     "\"bytes_per_entry\": $(echo "scale=2; $b / $r" | bc)}"
q "OPTIMIZE TABLE tracectl.entries FINAL" > /dev/null
read -r b r n < <(parts)
echo "{\"bench\": \"clickhouse\", \"run\": \"bytes\", \"merged\": true, \"parts\": $n, \"rows\": $r," \
     "\"bytes_per_entry\": $(echo "scale=2; $b / $r" | bc)}"
q "SELECT name, round(data_compressed_bytes / $r, 2) FROM system.columns
   WHERE database = 'tracectl' AND table = 'entries' ORDER BY data_compressed_bytes DESC
   FORMAT TSV" | tr '\n' ' ' | sed 's/^/{"bench": "clickhouse", "run": "columns", "bytes_per_entry": "/; s/ $/"}\n/'
