#!/usr/bin/env bash
# Runs the benchmarks of issue 3 with their defaults and appends the results (JSON lines, with
# date, machine and commit) to docs/BENCHMARKS.md. Builds in Release (-O2, no sanitizers) in a
# build dir of its own. Installs what it needs with apt-get (as root, or through sudo).
#   scripts/bench.sh                 everything (about 15 minutes on 2 cores)
#   BUILD_DIR=... INGEST_ARGS="--entries 200000 --runs 5" scripts/bench.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
# Only the benchmarks need these: the report timer, the LTTng-UST comparison, JSON in shell.
PKGS=(hyperfine liblttng-ust-dev lttng-tools jq bc)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "bench: installing ${missing[*]}" >&2
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq
    $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

BUILD_DIR=${BUILD_DIR:-build-bench}
INGEST_ARGS=${INGEST_ARGS:-}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" \
      -DASAN=OFF -DUBSAN=OFF -DTSAN=OFF -DBUILD_TESTING=OFF >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"
B=$BUILD_DIR/bench
out=$(mktemp /tmp/tcbench-results.XXXXXX)
trap 'rm -f "$out"' EXIT

# shellcheck disable=SC2086  # INGEST_ARGS is a list of flags
{
    echo "== ingest: 16 producers x 1 M entries (16 M), and the ceiling, 5 runs" >&2
    "$B/tc_bench_ingest" --runs 5 $INGEST_ARGS
    echo "== ingest: 16 producers x 62 500 entries (1 M total), for the RSS comparison" >&2
    "$B/tc_bench_ingest" --entries 62500 --runs 5
    echo "== backpressure: the daemon SIGSTOPped mid-run" >&2
    "$B/tc_bench_ingest" --backpressure --runs 5
    echo "== client overhead" >&2
    "$B/tc_bench_client"
    echo "== report on 1 M and 10 M entries while a session ingests" >&2
    bash bench/report.sh "$BUILD_DIR"
    if [ -e "$BUILD_DIR/libtracectl-mpi.so" ]; then
        echo "== libtracectl-mpi: added cost per MPI call" >&2
        bash bench/mpi.sh "$BUILD_DIR"
    fi
} | tee "$out"

model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')
mem=$(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain 2>/dev/null | grep -q . && echo " (with uncommitted changes)" || true)
{
    echo
    echo "### scripts/bench.sh run, $(date -u '+%Y-%m-%d %H:%M UTC')"
    echo
    echo "Machine: $(nproc) CPUs, $model, $mem RAM. Commit: $commit$dirty."
    echo "INGEST_ARGS: \`${INGEST_ARGS:-(defaults)}\`."
    echo
    echo '```json'
    cat "$out"
    echo '```'
} >> docs/BENCHMARKS.md
echo "bench: results appended to docs/BENCHMARKS.md" >&2
