#!/usr/bin/env bash
# Checks the man pages of a build (scripts/manpages.sh made them):
# - groff -man -ww finds nothing to warn about in any of them;
# - libtracectl.3, written by hand, names every public function and every
#   TRACECTL_* environment variable of client/lib/tracectl.h;
# - tracectl.1 has a section for every command `tracectl --help` lists, and
#   tracectld.8 names every option `tracectld --help` lists.
#   tests/man/check.sh BUILD_DIR MAN_DIR
set -euo pipefail
build=${1:?usage: check.sh BUILD_DIR MAN_DIR}
man=${2:?usage: check.sh BUILD_DIR MAN_DIR}
src=$(cd "$(dirname "$0")/../.." && pwd)
fail=0
bad() { echo "man pages: $*" >&2; fail=1; }

for page in "$man/tracectl.1" "$man/tracectld.8" "$man/libtracectl.3"; do
    [ -s "$page" ] || { bad "$page is missing or empty"; continue; }
    warn=$(groff -man -ww -z "$page" 2>&1 || true)
    [ -z "$warn" ] || bad "groff -man -ww warns on $page: $warn"
done

# Public names: TC_API functions (tc_begin_ is the inline tc_begin's trampoline)
# and the header's static inline functions.
names=$({ grep -oE '^TC_API [^(]*\btc_[a-z_]+\(' "$src/client/lib/tracectl.h" |
          grep -oE 'tc_[a-z_]+\(' | sed -e 's/($//' -e 's/_$//'
          grep -oE '^static inline [^(]*\btc_[a-z_]+\(' "$src/client/lib/tracectl.h" |
          grep -oE 'tc_[a-z_]+\(' | sed 's/($//'; } | sort -u)
n=0
for f in $names; do
    n=$((n + 1))
    grep -qE "(^|[^a-z_])$f( |\\(|\")" "$man/libtracectl.3" || bad "libtracectl.3 does not name $f"
done
[ "$n" -ge 20 ] || bad "found only $n public functions in tracectl.h: the pattern is stale"
for v in $(grep -oE 'TRACECTL_[A-Z_]+' "$src/client/lib/tracectl.h" | grep -v '^TRACECTL_H$' | sort -u); do
    grep -q "$v" "$man/libtracectl.3" || bad "libtracectl.3 does not document $v"
done

cmds=$("$build/tracectl" --help | awk '/^Commands:/{f=1; next} f && /^  [a-z]/{print $1} f && /^$/{exit}')
[ -n "$cmds" ] || bad "tracectl --help lists no command"
for c in $cmds; do
    [ "$c" = help ] && continue
    grep -qx ".SS $c" "$man/tracectl.1" || bad "tracectl.1 has no section for '$c'"
done
for o in $("$build/tracectld" --help | grep -oE '^  +--[a-z-]+' | tr -d ' ' | sort -u); do
    grep -qF -- "${o//-/\\-}" "$man/tracectld.8" || bad "tracectld.8 does not name $o"
done

if [ "$fail" -ne 0 ]; then
    echo "man pages: FAILED" >&2
    exit 1
fi
echo "man pages: 3 pages clean under groff -man -ww; $n library functions, $(echo "$cmds" | wc -w) commands checked"
