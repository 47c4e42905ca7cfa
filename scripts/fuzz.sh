#!/usr/bin/env bash
# Fuzzes the wire-format decoder with libFuzzer (clang): decode → re-encode →
# decode must be stable, and nothing may crash or trip ASan/UBSan.
#   scripts/fuzz.sh [SECONDS]      default 60; new inputs go to build-fuzz/corpus
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-60}
OUT=build-fuzz
mkdir -p "$OUT/corpus"
clang -g -O1 -std=c11 -D_POSIX_C_SOURCE=200809L -D_DEFAULT_SOURCE \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -Iproto tests/fuzz/fuzz_decode.c proto/proto.c \
    $(pkg-config --cflags --libs msgpack) -o "$OUT/fuzz_decode"
cp -n tests/fuzz/corpus/* "$OUT/corpus/" 2>/dev/null || true
echo "== fuzz_decode for ${SECONDS_TO_RUN}s"
"$OUT/fuzz_decode" -max_total_time="$SECONDS_TO_RUN" -max_len=4096 -timeout=10 \
    -rss_limit_mb=2048 -print_final_stats=1 "$OUT/corpus" 2>&1 | tail -n 12
