#!/usr/bin/env bash
# Fuzzes the wire-format decoder with libFuzzer (clang): decode → re-encode →
# decode must be stable, and nothing may crash or trip ASan/UBSan. Then the
# block decoder of session files (tests/fuzz/fuzz_block.c), the clock probes with their
# estimator (tests/fuzz/fuzz_peerclock.c) and the peer snapshot decoder
# (tests/fuzz/fuzz_peersnap.c) and the peer arrivals decoder (tests/fuzz/fuzz_peerarr.c) for
# up to 10 s each.
#   scripts/fuzz.sh [SECONDS]      default 60
# Builds in build-fuzz (CC=clang, -DFUZZ=ON) and runs on a copy of
# tests/fuzz/corpus in build-fuzz/corpus, which keeps what it finds between
# runs; a crashing input is left in build-fuzz/ as crash-<sha1>: add it to
# tests/fuzz/corpus once fixed.
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-60}
OUT=${FUZZ_BUILD_DIR:-build-fuzz}
CC=clang cmake -S . -B "$OUT" -DFUZZ=ON -DBUILD_TESTING=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DWERROR=ON >/dev/null
cmake --build "$OUT" -j"$(nproc)" --target fuzz_decode fuzz_block fuzz_peerclock fuzz_peersnap \
    fuzz_peerarr
# fuzz NAME SECONDS MAX_LEN CORPUS: runs tests/fuzz/NAME on CORPUS (made if absent), its log in
# $OUT/NAME.log; a failure prints the log's tail and stops the script.
fuzz() {
    local name=$1 secs=$2 max_len=$3 corpus=$4
    mkdir -p "$corpus"
    echo "== $name for ${secs}s"
    if ! "$OUT/tests/fuzz/$name" -max_total_time="$secs" -max_len="$max_len" -timeout=10 \
        -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$OUT/" "$corpus" \
        >"$OUT/$name.log" 2>&1; then
        tail -n 80 "$OUT/$name.log"
        echo "fuzz: $name failed: the input is in $OUT/ (crash-*, leak-*, timeout-*)" >&2
        exit 1
    fi
    tail -n 12 "$OUT/$name.log"
}

mkdir -p "$OUT/corpus" "$OUT/corpus_peersnap" "$OUT/corpus_peerarr"
# -n: keep what earlier runs found
cp -n tests/fuzz/corpus/* "$OUT/corpus/" || true
cp -n tests/fuzz/corpus_peersnap/* "$OUT/corpus_peersnap/" 2>/dev/null || true
cp -n tests/fuzz/corpus_peerarr/* "$OUT/corpus_peerarr/" 2>/dev/null || true
BLOCK_SECONDS=$((SECONDS_TO_RUN < 10 ? SECONDS_TO_RUN : 10))
fuzz fuzz_decode "$SECONDS_TO_RUN" 4096 "$OUT/corpus"
fuzz fuzz_block "$BLOCK_SECONDS" 65536 "$OUT/corpus_block"
fuzz fuzz_peerclock "$BLOCK_SECONDS" 1024 "$OUT/corpus_peerclock"
fuzz fuzz_peersnap "$BLOCK_SECONDS" 8192 "$OUT/corpus_peersnap"
fuzz fuzz_peerarr "$BLOCK_SECONDS" 8192 "$OUT/corpus_peerarr"
