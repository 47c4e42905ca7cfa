#!/usr/bin/env bash
# Generates the man pages tracectl(1) and tracectld(8) from the programs'
# own --help texts with help2man, so that they cannot drift from them:
# tracectl.1 gets a COMMANDS section holding every command's --help.
# libtracectl(3) is written by hand (docs/man/libtracectl.3) and copied.
#   scripts/manpages.sh BUILD_DIR OUT_DIR
set -euo pipefail
build=${1:?usage: manpages.sh BUILD_DIR OUT_DIR}
out=${2:?usage: manpages.sh BUILD_DIR OUT_DIR}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Plain text as groff: backslashes escaped, no line starting with a control character.
roff_text() {
    sed -e 's/\\/\\e/g' -e "s/^\\([.']\\)/\\\\\\&\\1/" -e 's/-/\\-/g'
}

{
    echo "[COMMANDS]"
    echo "Each command's own --help (\\fBtracectl\\fR \\fIcommand\\fR \\fB\\-\\-help\\fR):"
    for cmd in $("$build/tracectl" --help | awk '/^Commands:/{f=1; next} f && /^  [a-z]/{print $1} f && /^$/{exit}'); do
        [ "$cmd" = help ] && continue
        echo ".SS $cmd"
        echo ".nf"
        "$build/tracectl" "$cmd" --help | roff_text
        echo ".fi"
    done
    echo "[SEE ALSO]"
    echo ".BR tracectld (8),"
    echo ".BR libtracectl (3)"
} >"$tmp/tracectl.h2m"

{
    echo "[SEE ALSO]"
    echo ".BR tracectl (1),"
    echo ".BR libtracectl (3)"
} >"$tmp/tracectld.h2m"

help2man --no-info --section 1 --include "$tmp/tracectl.h2m" \
    --name "the command-line client of tracectld" \
    --output "$out/tracectl.1" "$build/tracectl"
help2man --no-info --section 8 --include "$tmp/tracectld.h2m" \
    --name "the tracectl profiler daemon" \
    --output "$out/tracectld.8" "$build/tracectld"
cp "$src/docs/man/libtracectl.3" "$out/libtracectl.3"
