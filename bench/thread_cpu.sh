#!/usr/bin/env bash
# Runs a benchmark command and splits the CPU time of each tracectld it starts
# by thread: the loop thread (the main thread: wire decoding, interning,
# connections) and the others (the writer thread, libuv's pool), from
# /proc/PID/task/*/stat sampled every 100 ms until the daemon exits.
#   bench/thread_cpu.sh CMD [ARGS...]
# Prints the command's stdout, then one JSON line per daemon on stdout:
#   {"bench":"thread_cpu","pid":P,"loop_cpu_s":L,"writer_cpu_s":W,"other_cpu_s":O}
# writer is the busiest thread other than the loop thread. Clock ticks are
# read with getconf CLK_TCK.
set -euo pipefail
"$@" &
cmd=$!
hz=$(getconf CLK_TCK)
declare -A ticks # "pid tid" -> utime + stime, last seen
while kill -0 "$cmd" 2>/dev/null; do
    for pid in $(pgrep -P "$cmd" -x tracectld || true); do
        for st in /proc/"$pid"/task/*/stat; do
            read -r line <"$st" 2>/dev/null || continue
            rest=${line##*) }
            read -r -a f <<<"$rest"
            tid=${st#/proc/"$pid"/task/}
            tid=${tid%/stat}
            ticks["$pid $tid"]=$((f[11] + f[12]))
        done
    done
    sleep 0.1
done
wait "$cmd" || true
declare -A seen
for key in "${!ticks[@]}"; do
    seen[${key%% *}]=1
done
for pid in "${!seen[@]}"; do
    loop=0 writer=0 other=0
    for key in "${!ticks[@]}"; do
        [[ ${key%% *} == "$pid" ]] || continue
        t=${ticks[$key]}
        if [[ ${key##* } == "$pid" ]]; then
            loop=$t
        elif ((t > writer)); then
            other=$((other + writer))
            writer=$t
        else
            other=$((other + t))
        fi
    done
    awk -v p="$pid" -v l="$loop" -v w="$writer" -v o="$other" -v hz="$hz" 'BEGIN {
        printf "{\"bench\":\"thread_cpu\",\"pid\":%d,\"loop_cpu_s\":%.2f,\"writer_cpu_s\":%.2f,\"other_cpu_s\":%.2f}\n",
            p, l / hz, w / hz, o / hz }'
done
