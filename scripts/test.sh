#!/usr/bin/env bash
# Runs every test: installs what it needs, checks formatting, builds with
# warnings as errors under ASan+UBSan, and runs the Criterion suites (unit and
# integration, the latter against a real daemon) through ctest, seven
# integration suites twice: with the default storage format (blocks) and with
# rows (integ_rows_*, TRACECTL_TEST_STORAGE=rows); then the writer-thread
# stress program under TSan (scripts/tsan.sh) and the decoder's fuzzer for
# FUZZ_SECONDS (default 30: the suite stays well inside 10 minutes on 2 cores;
# scripts/fuzz.sh).
#   scripts/test.sh            all of it
#   BUILD_DIR=... scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/deps.sh
BUILD_DIR=${BUILD_DIR:-build-test}

echo "== clang-format"
bad=$(find proto daemon client tests examples bench -name '*.[ch]' 2>/dev/null |
      xargs -r clang-format --dry-run 2>&1 | grep -c warning || true)
if [ "$bad" != "0" ]; then
    find proto daemon client tests examples bench -name '*.[ch]' | xargs clang-format --dry-run
    echo "clang-format: $bad places differ (run: clang-format -i on them)" >&2
    exit 1
fi

echo "== self-contained"
# A user's clone has nothing beside it: no tracked file may read outside the repository.
if git rev-parse --git-dir >/dev/null 2>&1 &&
   git grep -n -E -e '[.][.]/shared|/shared[/]data' -- ':!tests/data/README.md'; then
    echo "the files above refer to the workplace's shared folder, outside the repository" >&2
    exit 1
fi

echo "== build (WERROR, ASan+UBSan)"
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Debug -DWERROR=ON -DASAN=ON -DUBSAN=ON >/dev/null
cmake --build "$BUILD_DIR" -j"$(nproc)"

echo "== build (WERROR, Release: -O2 finds warnings a Debug build does not)"
cmake -S . -B "$BUILD_DIR-release" -DCMAKE_BUILD_TYPE=Release -DWERROR=ON >/dev/null
cmake --build "$BUILD_DIR-release" -j"$(nproc)" --target tracectld tracectl_cli tracectl_shared

echo "== tests"
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
ctest --test-dir "$BUILD_DIR" --output-on-failure -j2

echo "== TSan (the writer thread)"
bash scripts/tsan.sh

echo "== fuzz (the decoder, ${FUZZ_SECONDS:-30} s; scripts/fuzz.sh SECONDS runs it longer)"
bash scripts/fuzz.sh "${FUZZ_SECONDS:-30}"
