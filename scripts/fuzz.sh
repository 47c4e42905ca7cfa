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
mkdir -p "$OUT/corpus"
cp -n tests/fuzz/corpus/* "$OUT/corpus/" || true # -n: keep what earlier runs found
echo "== fuzz_decode for ${SECONDS_TO_RUN}s"
if ! "$OUT/tests/fuzz/fuzz_decode" -max_total_time="$SECONDS_TO_RUN" -max_len=4096 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$OUT/" "$OUT/corpus" \
    >"$OUT/fuzz.log" 2>&1; then
    tail -n 80 "$OUT/fuzz.log"
    echo "fuzz: fuzz_decode failed: the input is in $OUT/ (crash-*, leak-*, timeout-*)" >&2
    exit 1
fi
tail -n 12 "$OUT/fuzz.log"
BLOCK_SECONDS=$((SECONDS_TO_RUN < 10 ? SECONDS_TO_RUN : 10))
mkdir -p "$OUT/corpus_block"
echo "== fuzz_block for ${BLOCK_SECONDS}s"
if ! "$OUT/tests/fuzz/fuzz_block" -max_total_time="$BLOCK_SECONDS" -max_len=65536 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$OUT/" "$OUT/corpus_block" \
    >"$OUT/fuzz_block.log" 2>&1; then
    tail -n 80 "$OUT/fuzz_block.log"
    echo "fuzz: fuzz_block failed: the input is in $OUT/ (crash-*, leak-*, timeout-*)" >&2
    exit 1
fi
tail -n 12 "$OUT/fuzz_block.log"
mkdir -p "$OUT/corpus_peerclock"
echo "== fuzz_peerclock for ${BLOCK_SECONDS}s"
if ! "$OUT/tests/fuzz/fuzz_peerclock" -max_total_time="$BLOCK_SECONDS" -max_len=1024 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$OUT/" "$OUT/corpus_peerclock" \
    >"$OUT/fuzz_peerclock.log" 2>&1; then
    tail -n 80 "$OUT/fuzz_peerclock.log"
    echo "fuzz: fuzz_peerclock failed: the input is in $OUT/ (crash-*, leak-*, timeout-*)" >&2
    exit 1
fi
tail -n 12 "$OUT/fuzz_peerclock.log"
mkdir -p "$OUT/corpus_peersnap"
cp -n tests/fuzz/corpus_peersnap/* "$OUT/corpus_peersnap/" 2>/dev/null || true
echo "== fuzz_peersnap for ${BLOCK_SECONDS}s"
if ! "$OUT/tests/fuzz/fuzz_peersnap" -max_total_time="$BLOCK_SECONDS" -max_len=8192 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$OUT/" "$OUT/corpus_peersnap" \
    >"$OUT/fuzz_peersnap.log" 2>&1; then
    tail -n 80 "$OUT/fuzz_peersnap.log"
    echo "fuzz: fuzz_peersnap failed: the input is in $OUT/ (crash-*, leak-*, timeout-*)" >&2
    exit 1
fi
tail -n 12 "$OUT/fuzz_peersnap.log"
mkdir -p "$OUT/corpus_peerarr"
cp -n tests/fuzz/corpus_peerarr/* "$OUT/corpus_peerarr/" 2>/dev/null || true
echo "== fuzz_peerarr for ${BLOCK_SECONDS}s"
if ! "$OUT/tests/fuzz/fuzz_peerarr" -max_total_time="$BLOCK_SECONDS" -max_len=8192 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$OUT/" "$OUT/corpus_peerarr" \
    >"$OUT/fuzz_peerarr.log" 2>&1; then
    tail -n 80 "$OUT/fuzz_peerarr.log"
    echo "fuzz: fuzz_peerarr failed: the input is in $OUT/ (crash-*, leak-*, timeout-*)" >&2
    exit 1
fi
tail -n 12 "$OUT/fuzz_peerarr.log"
