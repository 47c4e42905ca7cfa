#!/usr/bin/env python3
"""python_op.py — what a `with tc.op(...)` region costs a Python program (not a test).

In one run, ns per iteration (median of --runs runs of --n iterations each) of:
  bare         two time.perf_counter_ns() calls (the least a timed region costs);
  op           `with tc.op("matmul"):` on a connected client;
  op_shapes    the same with out_shape, in_shapes and mem;
  offline      `with tc.op("matmul"):` on a client with no daemon (counts drops);
  record_function  `with torch.autograd.profiler.record_function("matmul"):` inside an
               active torch.profiler.profile (CPU), when torch is installed.
Prints one JSON line per figure on stdout and a table on stderr. The daemon
named by --socket (or $TRACECTL_SOCKET) must run; the client is in blocking mode
so that nothing is dropped. Time is the thread's CPU time (time.thread_time_ns)
and wall time (perf_counter_ns) per iteration.
"""

import argparse
import json
import statistics
import sys
import time

import tracectl


def loop_bare(n):
    pc = time.perf_counter_ns
    for _ in range(n):
        a = pc()
        b = pc()
    return a, b


def loop_op(tc, n):
    for _ in range(n):
        with tc.op("matmul"):
            pass


def loop_op_shapes(tc, n):
    out, ins = (64, 64), [(64, 128), (128, 64)]
    for _ in range(n):
        with tc.op("matmul", out_shape=out, in_shapes=ins, mem=16384):
            pass


def loop_empty(n):
    for _ in range(n):
        pass


def measure(fn, n, runs):
    cpu, wall = [], []
    for _ in range(runs):
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        fn(n)
        cpu.append((time.thread_time_ns() - c0) / n)
        wall.append((time.perf_counter_ns() - w0) / n)
    return statistics.median(cpu), statistics.median(wall)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--n", type=int, default=200000)
    p.add_argument("--runs", type=int, default=7)
    p.add_argument("--socket")
    a = p.parse_args()
    tc = tracectl.open(session="bench-python", socket=a.socket, blocking=True)
    off = tracectl.open(socket="/nonexistent/tracectl.sock")
    res = {}
    res["loop"] = measure(loop_empty, a.n, a.runs)
    res["bare"] = measure(loop_bare, a.n, a.runs)
    res["op"] = measure(lambda n: loop_op(tc, n), a.n, a.runs)
    res["op_shapes"] = measure(lambda n: loop_op_shapes(tc, n), a.n, a.runs)
    res["offline"] = measure(lambda n: loop_op(off, n), a.n, a.runs)
    try:
        import torch
        from torch.autograd.profiler import record_function

        def loop_rf(n):
            for _ in range(n):
                with record_function("matmul"):
                    pass
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]):
            res["record_function"] = measure(loop_rf, a.n // 4, a.runs)
    except ImportError:
        pass
    tc.close()
    off.close()
    for k, (cpu, wall) in res.items():
        print(json.dumps({"bench": "python_op", "case": k, "cpu_ns": round(cpu, 1),
                          "wall_ns": round(wall, 1), "n": a.n, "runs": a.runs}))
    b = res["bare"][0]
    print("%-16s %9s %9s %8s" % ("case", "cpu ns", "wall ns", "÷ bare"), file=sys.stderr)
    for k, (cpu, wall) in res.items():
        print("%-16s %9.1f %9.1f %8.2f" % (k, cpu, wall, cpu / b), file=sys.stderr)
    if "record_function" in res:
        print("op ÷ record_function: %.3f (cpu)" % (res["op"][0] / res["record_function"][0]),
              file=sys.stderr)


if __name__ == "__main__":
    main()
