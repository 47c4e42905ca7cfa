#!/usr/bin/env python3
"""python_ddp.py — examples/ddp_train.py's step time in each mode (not a test).

Runs the example (--ranks R, --steps S, no slowed rank) --runs times in each
mode, the modes interleaved so that the machine's drift hits all alike:
  off       no tracing (the baseline of light mode);
  light     tracectl.torch light mode;
  chrome    plain torch.profiler writing a Chrome trace per cycle (the baseline
            of profiler mode);
  profiler  tracectl.torch profiler mode (streaming each cycle; no Chrome file).
A run's figure is the median over ranks of each rank's median step time; the
mode's figure is the median of its runs. JSON lines on stdout, a table on
stderr. The daemon at $TRACECTL_SOCKET must run.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "ddp_train.py")
MODES = ("off", "light", "chrome", "profiler")


def run(mode, a, chrome_dir):
    cmd = [sys.executable, EXAMPLE, "--ranks", str(a.ranks), "--steps", str(a.steps),
           "--mode", mode, "--session", "bench-ddp-" + mode]
    if mode == "chrome":
        cmd += ["--chrome-dir", chrome_dir]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit("%s: exit %d\n%s" % (" ".join(cmd), r.returncode, r.stderr[-3000:]))
    out = r.stdout
    meds = [int(x) for x in re.findall(r"step_median_ns (\d+)", out)]
    assert len(meds) == a.ranks, out
    return statistics.median(meds)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    res = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as chrome_dir:
        for _ in range(a.runs):
            for m in MODES:
                res[m].append(run(m, a, chrome_dir))
    med = {m: statistics.median(v) for m, v in res.items()}
    for m in MODES:
        print(json.dumps({"bench": "python_ddp", "mode": m, "step_median_ns": med[m],
                          "runs_ns": res[m], "ranks": a.ranks, "steps": a.steps}))
    print("%-9s %12s  runs" % ("mode", "step (ms)"), file=sys.stderr)
    for m in MODES:
        print("%-9s %12.3f  %s" % (m, med[m] / 1e6, " ".join("%.3f" % (x / 1e6) for x in res[m])),
              file=sys.stderr)
    print("light ÷ off: %.3f; profiler ÷ chrome: %.3f" %
          (med["light"] / med["off"], med["profiler"] / med["chrome"]), file=sys.stderr)


if __name__ == "__main__":
    main()
