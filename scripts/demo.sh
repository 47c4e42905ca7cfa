#!/usr/bin/env bash
# The main job, on a fresh Debian 12 machine: installs, builds, starts
# tracectld on its embedded defaults, runs the demo "training job" (8 ranks,
# one of them slow) against it, and prints `tracectl sessions` and
# `tracectl report`; then records a few regions from Python. The daemon is
# stopped at the end. It builds everything `cmake --install` installs (the
# `installable` target: the daemon, the CLI, the libraries, the Python
# package into build/python), so `cmake --install build` works after it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
BUILD_DIR=${BUILD_DIR:-build}
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)" --target installable tc_demo >/dev/null
BIN=$(cd "$BUILD_DIR" && pwd)   # BUILD_DIR may be relative or absolute

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
echo
echo "\$ tracectl report $session --html $BUILD_DIR/demo.html    # the same, as a page"
"$BIN/tracectl" report "$session" --html "$BIN/demo.html"
echo "(open $BIN/demo.html in a browser; it needs no network)"
if [ -e "$BIN/python/tracectl/__init__.py" ]; then
    echo
    echo "\$ PYTHONPATH=$BUILD_DIR/python python3    # the Python package, from the build tree"
    PYTHONPATH="$BIN/python" python3 - "$session-py" <<'EOF'
import sys
import tracectl

tc = tracectl.open(session=sys.argv[1], rank=0, world=1, device="cpu:0")
for step in range(3):
    with tc.op("train_step"):
        with tc.op("matmul", out_shape=(64, 64), in_shapes=[(64, 128), (128, 64)], mem=16384):
            pass
    tc.step()
tc.close()
print("recorded", tc.recorded, "dropped", tc.dropped, "into session", sys.argv[1])
EOF
    echo "(cmake --install $BUILD_DIR --prefix /usr/local installs it for /usr/bin/python3)"
fi
