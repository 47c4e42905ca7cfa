"""test_torch_modules.py — profiler mode's nn.Module regions, `report --by module`, stacks.

A real model (an nn.Sequential with named children) trains a few steps under
torch.profiler with tct.instrument(model, opt, profiler=True) against a real
daemon. The test then checks, each time against what it computes itself:
- the module regions the file holds (one per module forward, per leaf module
  backward and per optimizer.step, each step) and how they nest;
- that every operator lies under the innermost module range around it: the
  test reads the Chrome trace torch.profiler itself wrote for the same cycle
  and finds that range by its own times;
- `tracectl report --by module --json`: calls, entries, self and total time
  and share per module, summed here from the rows of the session file;
- the collapsed export's module;op stacks.
"""

import collections
import json
import os
import subprocess
import sys
import unittest

import harness

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

STEPS = 3
# The model's modules as the bridge names them: forward of each, backward of the leaves.
FORWARD = ("Sequential", "fc1:Linear", "act:ReLU", "block:Sequential", "block.fc2:Linear",
           "block.out:Tanh")
LEAVES = ("fc1:Linear", "act:ReLU", "block.fc2:Linear", "block.out:Tanh")
PARENT = {"fc1:Linear.forward": "Sequential.forward", "act:ReLU.forward": "Sequential.forward",
          "block:Sequential.forward": "Sequential.forward",
          "block.fc2:Linear.forward": "block:Sequential.forward",
          "block.out:Tanh.forward": "block:Sequential.forward"}

TRAIN = """if True:
    import collections, os, sys, torch, torch.nn as nn
    import tracectl.torch as tct
    out = sys.argv[1]
    torch.manual_seed(0)
    model = nn.Sequential(collections.OrderedDict([
        ("fc1", nn.Linear(16, 32)), ("act", nn.ReLU()),
        ("block", nn.Sequential(collections.OrderedDict([
            ("fc2", nn.Linear(32, 4)), ("out", nn.Tanh())])))]))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    tct.open(session="mods", device="cpu:0")
    tct.instrument(model, opt, profiler=True)
    x = torch.randn(8, 16)
    def chrome(p):
        p.export_chrome_trace(os.path.join(out, "trace.json"))
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                schedule=torch.profiler.schedule(wait=0, warmup=0, active=%d,
                                                                 repeat=1),
                                on_trace_ready=tct.profiler_handler(then=chrome)) as prof:
        for _ in range(%d):
            opt.zero_grad()
            model(x).sum().backward()
            opt.step()
            prof.step()
            tct.step()
    c = tct.client()
    c.flush(timeout=30)
    print("recorded", c.recorded, "dropped", c.dropped)
    tct.close()
""" % (STEPS, STEPS)


def regions():
    names = [m + ".forward" for m in FORWARD] + [m + ".backward" for m in LEAVES]
    return set(names + ["optimizer.step"])


def read_entries(d, sid):
    """The session's entries from its file: (rowid, process, op, category, dur_ns, id, parent)."""
    return d.rows(sid, "SELECT e.rowid, e.process_id, o.name, o.category, e.dur_ns, l.id, "
                  "l.parent FROM entries e JOIN ops o ON o.id = e.op_id "
                  "LEFT JOIN entry_link l ON l.entry_rowid = e.rowid ORDER BY e.rowid")


def chrome_parents(path, names):
    """(op, innermost module range around it) for each operator of a Chrome trace, found by
    the trace's own times and threads: the shortest range of names that holds the op."""
    with open(path) as f:
        ev = [e for e in json.load(f) if e.get("ph") == "X" and "dur" in e and
              not e["name"].startswith("ProfilerStep")]
    ranges = [e for e in ev if e["name"] in names]
    pairs = collections.Counter()
    for e in ev:
        if e["name"] in names:
            continue
        best = None
        for r in ranges:
            if (r["tid"] == e["tid"] and r["ts"] <= e["ts"] and
                    e["ts"] + e["dur"] <= r["ts"] + r["dur"] and
                    (best is None or r["dur"] < best["dur"])):
                best = r
        pairs[(e["name"], best["name"] if best else None)] += 1
    return pairs


def module_sums(rows):
    """What report --by module must say, summed here: per region name calls, entries,
    self and total time; per (module, op) calls and time; the total."""
    regs = {(r[1], r[5]): r for r in rows if r[5] is not None}

    def up(r):
        p = regs.get((r[1], r[6])) if r[6] is not None else None
        return p

    mods = collections.defaultdict(lambda: [0, 0, 0, 0])  # calls, entries, self, total
    pairs = collections.defaultdict(lambda: [0, 0])
    total = 0
    for r in rows:
        if r[5] is not None:
            mods[r[2]][0] += 1
            continue
        total += r[4]
        p = up(r)
        name = p[2] if p else None
        mods[name][1] += 1
        mods[name][2] += r[4]
        pairs[(name, r[2])][0] += 1
        pairs[(name, r[2])][1] += r[4]
        seen = set()
        if p is None:
            mods[None][3] += r[4]
        while p is not None:
            if p[2] not in seen:
                seen.add(p[2])
                mods[p[2]][3] += r[4]
            p = up(p)
    return mods, pairs, total


@unittest.skipUnless(HAVE_TORCH, "skipped: no torch (python3-torch is not installed)")
class Modules(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.d = harness.Daemon()
        out = subprocess.run([sys.executable, "-c", TRAIN, cls.d.dir], env=cls.d.env(),
                             check=True, timeout=240, capture_output=True, text=True).stdout
        cls.recorded = out
        cls.sid = cls.d.session("mods")["id"]
        cls.rows = read_entries(cls.d, cls.sid)

    @classmethod
    def tearDownClass(cls):
        cls.d.cleanup()

    def test_regions_one_per_module_call_nested_as_the_model(self):
        self.assertRegex(self.recorded, r"recorded \d+ dropped 0")
        regs = [r for r in self.rows if r[5] is not None]
        self.assertEqual(collections.Counter(r[2] for r in regs),
                         {n: STEPS for n in regions()})
        self.assertEqual({r[3] for r in regs}, {"module"})
        by_id = {(r[1], r[5]): r for r in regs}
        got = collections.Counter((r[2], by_id[(r[1], r[6])][2] if r[6] is not None else None)
                                  for r in regs)
        want = collections.Counter({(n, PARENT.get(n)): STEPS for n in regions()})
        self.assertEqual(got, want)

    def test_every_op_is_under_its_innermost_module(self):
        by_id = {(r[1], r[5]): r[2] for r in self.rows if r[5] is not None}
        stored = collections.Counter((r[2], by_id.get((r[1], r[6])) if r[6] is not None else None)
                                     for r in self.rows if r[5] is None)
        want = chrome_parents(os.path.join(self.d.dir, "trace.json"), regions())
        self.assertEqual(stored, want)
        # what the model is made of, named: each forward's own operator inside it
        for op, mod in (("aten::linear", "fc1:Linear.forward"), ("aten::relu", "act:ReLU.forward"),
                        ("aten::linear", "block.fc2:Linear.forward"),
                        ("aten::tanh", "block.out:Tanh.forward"),
                        ("aten::tanh_backward", "block.out:Tanh.backward"),
                        ("aten::threshold_backward", "act:ReLU.backward")):
            self.assertEqual(stored[(op, mod)], STEPS, (op, mod))

    def test_report_by_module_sums_the_file(self):
        mods, pairs, total = module_sums(self.rows)
        rep = json.loads(self.d.cli("report", "mods", "--by", "module", "--json"))
        self.assertEqual((rep["by"], rep["total_ns"]), ("module", total))
        got = {m["module"]: [m["calls"], m["entries"], m["self_ns"], m["total_ns"]]
               for m in rep["modules"]}
        self.assertEqual(got, dict(mods))
        for m in rep["modules"]:
            self.assertAlmostEqual(m["share"], m["self_ns"] / total)
        self.assertAlmostEqual(sum(m["share"] for m in rep["modules"]), 1.0)
        self.assertEqual({(p["module"], p["op"]): [p["calls"], p["total_ns"]]
                          for p in rep["pairs"]}, dict(pairs))
        selfs = [m["self_ns"] for m in rep["modules"]]
        self.assertEqual(selfs, sorted(selfs, reverse=True))
        # the root's total is every entry of its forward, children included
        fwd = [r for r in self.rows if r[2] == "Sequential.forward"]
        self.assertEqual(got["Sequential.forward"][:3], [STEPS, 0, 0])
        self.assertGreater(got["Sequential.forward"][3], got["fc1:Linear.forward"][3])
        self.assertEqual(len(fwd), STEPS)

    def test_report_by_module_table(self):
        out = self.d.cli("report", "mods", "--by", "module", "--top", "3")
        self.assertIn("Time by enclosing module (- : none; first 3 of %d)" % (len(regions()) + 1),
                      out)
        self.assertRegex(out, r"MODULE +CALLS +ENTRIES +SELF +TOTAL +SHARE")
        self.assertIn("By module and op (first 3 of", out)
        self.assertIn("--by module", self.d.cli("report", "--help"))

    def test_collapsed_stacks_are_module_then_op(self):
        out = self.d.cli("export", "mods", "--format", "collapsed", "--weight", "calls")
        stacks = dict((line.rsplit(" ", 1)[0], int(line.rsplit(" ", 1)[1]))
                      for line in out.splitlines())
        for stack in ("Sequential.forward;fc1:Linear.forward;aten::linear",
                      "Sequential.forward;block:Sequential.forward;block.out:Tanh.forward;"
                      "aten::tanh", "block.out:Tanh.backward;aten::tanh_backward"):
            self.assertEqual(stacks.get("mods;cpu:0;" + stack), STEPS, stack)


if __name__ == "__main__":
    unittest.main(verbosity=2)
