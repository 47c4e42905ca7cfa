#!/usr/bin/env bash
# The main job, on a fresh Debian 12 machine: installs, builds, starts
# tracectld on its embedded defaults, runs the demo "training job" (8 ranks,
# one of them slow) against it, and prints `tracectl sessions` and
# `tracectl report`. The daemon is stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" --target tracectld tracectl_cli tc_demo >/dev/null
BIN=$PWD/$BUILD_DIR

"$BIN/tracectld" --log-level warn &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null; wait $daemon 2>/dev/null || true' EXIT
for _ in $(seq 50); do "$BIN/tracectl" status >/dev/null 2>&1 && break; sleep 0.1; done

session="demo-$(date +%H%M%S)"
"$BIN/tc_demo" --session "$session" --ranks 8 --steps 20 --slow-rank 3
echo
echo "\$ tracectl sessions"
"$BIN/tracectl" sessions
echo
echo "\$ tracectl report $session"
"$BIN/tracectl" report "$session"
