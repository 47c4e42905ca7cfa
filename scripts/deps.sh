#!/usr/bin/env bash
# Installs the Debian 12 packages tracectl builds and tests with (as root, or
# through sudo). Does nothing when they are all present already.
set -euo pipefail
# libclang-rt-14-dev: clang's libFuzzer and sanitizer runtimes (only a Recommends of clang);
# systemd: systemd-analyze and systemd-socket-activate, for test_systemd;
# python3-dev: the Python package (client/python); python3-torch (~250 MB): its torch bridge;
# bsdutils: script(1), the terminal test_import gives the import's progress line;
# tmux: the terminal test_top runs `tracectl top` in and reads with capture-pane;
# Open MPI, hpcc, NetPIPE and mpi4py: libtracectl-mpi and test_mpi; gfortran: its Fortran
# program (mpif90);
# libotf2-trace-dev and otf2-tools: `tracectl export --format otf2` and its test (otf2-print);
# help2man and groff-base: the man pages (scripts/manpages.sh, tests/man/check.sh);
# chromium: test_html loads `report --html` pages in headless Chromium (and docs/ screenshots);
# libcurl4-openssl-dev: the daemon's ClickHouse sink (HTTP); clickhouse-server and
# clickhouse-client: test_clickhouse starts a private server (docs/clickhouse.md);
# libssl-dev: the peer port's TLS 1.3 with a pre-shared key (daemon/peer/peerlink.c); iproute2:
# tests/hosts (network namespaces joined by veth pairs); nftables: tests/hosts/test_jitter.sh
# drops a share of the peer port's segments (nft's numgen random);
# firefox-esr (~300 MB): tests/viewers/test_firefox.py loads `report --html` pages in
# headless Firefox too.
PKGS=(build-essential cmake pkg-config libuv1-dev libmsgpack-dev libsqlite3-dev
      libcriterion-dev sqlite3 clang clang-format protobuf-compiler libyajl-dev zlib1g-dev
      libclang-rt-14-dev systemd python3-dev python3-torch bsdutils tmux
      openmpi-bin libopenmpi-dev gfortran hpcc netpipe-openmpi python3-mpi4py
      libotf2-trace-dev otf2-tools help2man groff-base chromium libcurl4-openssl-dev
      clickhouse-server clickhouse-client libssl-dev iproute2 nftables firefox-esr)
# npm: tests/viewers installs speedscope (the npm package) into the build directory at test
# time and loads exports into it in headless Chromium. Any npm will do (a Node.js from
# elsewhere brings its own): Debian's only when there is none.
command -v npm >/dev/null 2>&1 || PKGS+=(npm)
missing=()
for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
