#!/usr/bin/env bash
# Builds the writer-thread stress program with ThreadSanitizer in its own build
# dir and runs it; any data race (or a wrong row count) fails.
#   scripts/tsan.sh [ROUNDS]       default 1000
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-1000}
BUILD_DIR=${TSAN_BUILD_DIR:-build-tsan}
echo "== TSan: stress_store ($ROUNDS rounds)"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Debug -DWERROR=ON -DTSAN=ON >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" --target stress_store
TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1} \
    "$BUILD_DIR/tests/stress_store" "$ROUNDS"
