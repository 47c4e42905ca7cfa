"""test_viewers.py — timelines right in real viewers, for every kind of session (issue 31 item 3).

Each test makes a session of one kind against a real daemon — a C producer with
known nested regions (nest_producer.c), the torch bridge's light mode, its
profiler mode under DistributedDataParallel, an MPI job through
libtracectl-mpi, an imported Kineto trace — exports it and checks:

- with check_trace.py, which reads the files with nothing of tracectl's: the
  Chrome JSON (`export --format chrome`) and the Perfetto trace (`--format
  perfetto`, decoded by protoc with Perfetto's own schema) nest properly on
  every track (no partial overlap, a parent's duration at least its
  children's), zero-length entries are instants, names carry no args; the
  pairs the test knows from the producer are parent and child;
- in speedscope (npm package, installed into the build directory at test
  time; SPEEDSCOPE_DIR) under headless Chromium, network off: the export
  (`--no-args`) is loaded as speedscope's own command line loads a file
  (`index.html#localProfilePath=...`), shown in its Sandwich view, whose table
  (a DOM table, read with --dump-dom) gives each frame's total and self time
  in the profile shown (the first track). A parent's total minus its self
  time is the time of its children: it must cover each known child's total,
  which it cannot when the child is drawn outside it; frame names must be
  the ops' names, without args.
"""

import base64
import collections
import gzip
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))
sys.path.insert(0, HERE)

import check_trace  # noqa: E402
import harness  # noqa: E402

DATA = os.environ.get("TEST_DATA_DIR", os.path.join(HERE, "..", "data"))
PROTO = os.path.join(DATA, "perfetto", "perfetto_trace.proto")
NEST_BIN = os.environ.get("NEST_PRODUCER_BIN", "build/tests/nest_producer")
SPEEDSCOPE_DIR = os.environ.get("SPEEDSCOPE_DIR", "build/speedscope")
SPEEDSCOPE_VERSION = "1.25.0"  # the Sandwich table's layout is this version's
MPI_LIB = os.environ.get("TRACECTL_MPI_LIB", "")
MPIEXEC = os.environ.get("MPIEXEC_BIN", "")
MPI_P2P = os.environ.get("MPI_P2P_BIN", "")

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False


# ---- speedscope -------------------------------------------------------------------------

def speedscope_index() -> str:
    """speedscope's index.html, npm-installed into SPEEDSCOPE_DIR on first use."""
    index = os.path.join(SPEEDSCOPE_DIR, "node_modules", "speedscope", "dist", "release",
                         "index.html")
    if not os.path.exists(index):
        r = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--prefix",
                            SPEEDSCOPE_DIR, "speedscope@" + SPEEDSCOPE_VERSION],
                           capture_output=True, text=True)
        if r.returncode != 0 or not os.path.exists(index):
            raise AssertionError("npm could not install speedscope %s into %s: %s" %
                                 (SPEEDSCOPE_VERSION, SPEEDSCOPE_DIR, r.stderr[-2000:]))
    return index


class _Sandwich(html.parser.HTMLParser):
    """The rows of speedscope's Sandwich table: [total text, self text, name text]."""

    def __init__(self) -> None:
        super().__init__()
        self.rows = []
        self.profile = None
        self._row = None
        self._cell = None

    def handle_starttag(self, tag, attrs):
        if tag == "tr":
            self._row = []
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if len(self._row) == 3:
                self.rows.append(self._row)
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


_UNITS = {"ns": 1e-3, "µs": 1.0, "ms": 1e3, "s": 1e6}


def _us(text: str):
    """'702.00µs (18%)' → (702.0, half a unit of its last digit: the display's rounding)."""
    m = re.match(r"([0-9.]+)(ns|µs|ms|s)\b", text)
    if m is None:
        raise AssertionError("not a speedscope duration: %r" % text)
    digits = m.group(1).split(".")
    half = 0.5 * 10 ** -(len(digits[1]) if len(digits) > 1 else 0)
    return float(m.group(1)) * _UNITS[m.group(2)], half * _UNITS[m.group(2)]


_TIME = re.compile(r"[0-9.]+(ns|µs|ms|s)\b")  # a Sandwich cell's time, "1.20ms"


def speedscope_frames(trace: str, workdir: str):
    """Loads trace into speedscope under headless Chromium (network refused) and reads its
    Sandwich view: (the profile shown, {frame name: (total µs, self µs, rounding µs)})."""
    index = speedscope_index()
    loader = os.path.join(workdir, "load-%s.js" % os.path.basename(trace))
    with open(trace, "rb") as f:
        b64 = base64.b64encode(f.read()).decode()
    with open(loader, "w") as f:  # what speedscope's own command line writes
        f.write("speedscope.loadFileFromBase64(%s, %s)" % (json.dumps(os.path.basename(trace)),
                                                         json.dumps(b64)))
    url = "file://%s#localProfilePath=%s&view=sandwich" % (index, loader)
    # The table's rows are drawn in animation frames once its size is known: with virtual
    # time, only --run-all-compositor-stages-before-draw runs them before the DOM is taken
    # (without it about half the runs show the header alone; on a loaded machine it still
    # may, rarely: the page is loaded again). A tall window shows every row.
    for attempt in range(5):
        dom = subprocess.run(
            ["timeout", "120", "chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
             "--no-first-run", "--user-data-dir=" + os.path.join(workdir, "chromium"),
             "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
             "--window-size=1600,20000", "--run-all-compositor-stages-before-draw",
             "--virtual-time-budget=30000", "--dump-dom", url],
            capture_output=True, text=True, check=True).stdout
        p = _Sandwich()
        p.feed(dom)
        # the profile list's rows ("#", name, weight) come before the table's: only a
        # frame's row (a time in its first cell) says the table was drawn
        if any(_TIME.match(total) for total, _, _ in p.rows):
            break
    frames = {}
    for total, self_, name in p.rows:
        if not _TIME.match(total):
            continue  # the profile list's rows: "#", name, weight
        t, ht = _us(total)
        s, hs = _us(self_)
        frames[name] = (t, s, ht + hs)
    m = re.search(r"<span>([^<]*\(tid [0-9]+\)) <span", dom)
    return (m.group(1) if m else None), frames


# ---- the test ---------------------------------------------------------------------------

@unittest.skipUnless(shutil.which("protoc"), "protoc (Debian protobuf-compiler) is needed")
class Viewers(unittest.TestCase):
    def setUp(self):
        self.d = harness.Daemon()
        self.tmp = tempfile.mkdtemp(prefix="tcviewers.")

    def tearDown(self):
        self.d.cleanup()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def exports(self, sid):
        """The session's chrome, chrome --no-args and perfetto exports: their paths."""
        paths = {}
        for key, extra in (("chrome", ["--format", "chrome"]),
                           ("speedscope", ["--format", "chrome", "--no-args"]),
                           ("perfetto", ["--format", "perfetto"])):
            paths[key] = os.path.join(self.tmp, "%d.%s" % (sid, key))
            self.d.cli("export", str(sid), *extra, "-o", paths[key])
        return paths

    def check(self, sid, pairs=(), instants=(), speedscope_pairs=(), min_slices=1,
              speedscope_some=0):
        """Checks the session's exports: nesting everywhere, pairs (child, parent) nested,
        instants (name, parent) inside a parent slice of their track; in speedscope's first
        profile, frame names and speedscope_pairs (with speedscope_some > 0: those of them
        whose names the profile has, at least that many). Returns the traces read."""
        paths = self.exports(sid)
        traces = {}
        for key in ("chrome", "speedscope", "perfetto"):
            tr = (check_trace.read_perfetto(paths[key], PROTO) if key == "perfetto"
                  else check_trace.read_chrome(paths[key]))
            errors = check_trace.nest(tr)
            for child, parent in pairs:
                errors += check_trace.nested(tr, child, parent)
            for name, parent in instants:
                errors += instant_inside(tr, name, parent)
            self.assertEqual(errors[:10], [], "%s export" % key)
            self.assertGreaterEqual(len(tr.slices()), min_slices, "%s export" % key)
            traces[key] = tr
        # the args stay in args: --no-args leaves them out, and only them
        with open(paths["chrome"]) as f:
            withargs = [e for e in json.load(f)["traceEvents"] if e["ph"] in "Xi"]
        self.assertTrue(all(isinstance(e.get("args"), dict) and "step" in e["args"]
                            for e in withargs))
        with open(paths["speedscope"]) as f:
            noargs = [e for e in json.load(f)["traceEvents"] if e["ph"] in "Xi"]
        self.assertEqual([{k: v for k, v in e.items() if k != "args"} for e in withargs], noargs)
        self.check_speedscope(paths["speedscope"], traces["speedscope"], speedscope_pairs,
                              speedscope_some)
        return traces

    def check_speedscope(self, path, tr, pairs, some=0):
        shown, frames = speedscope_frames(path, self.tmp)
        self.assertTrue(frames, "speedscope showed no Sandwich table for %s" % path)
        ops = {s.name for s in tr.slices()}
        for name in frames:
            self.assertIn(name, ops, "speedscope frame %r is no op's name (args in it?)" % name)
        if some:
            pairs = [(c, p) for c, p in pairs if c in frames and p in frames]
            self.assertGreaterEqual(len(pairs), some, "profile %s" % shown)
        for child, parent in pairs:
            self.assertIn(child, frames, "profile %s" % shown)
            self.assertIn(parent, frames, "profile %s" % shown)
            total, self_, r1 = frames[parent]
            inner = total - self_
            ctotal, _, r2 = frames[child]
            # the parent's children's time covers the child's: drawn inside it
            self.assertGreaterEqual(inner + r1 + r2, ctotal,
                                    "speedscope (%s): %r has %.2f µs in children, %r lasts "
                                    "%.2f µs: not drawn inside it" %
                                    (shown, parent, inner, child, ctotal))

    def session(self, name):
        return self.d.session(name)["id"]

    # ---- the kinds of session ----------------------------------------------------------

    def test_c_producer(self):
        r = subprocess.run([NEST_BIN, "nest"], env=self.d.env(), capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        sid = self.session("nest")
        traces = self.check(sid, pairs=[("matmul", "forward"), ("relu", "forward"),
                                        ("forward", "step"), ("backward", "step"),
                                        ("decode", "load")],
                            instants=[("marker", "step")],
                            speedscope_pairs=[("matmul", "forward"), ("forward", "step")],
                            min_slices=3 * 6)
        for tr in traces.values():
            # exact counts: 3 steps of step, forward, matmul, relu, backward; 3 load, decode
            counts = collections.Counter(s.name for s in tr.slices())
            self.assertEqual(counts, {"step": 3, "forward": 3, "matmul": 3, "relu": 3,
                                      "backward": 3, "load": 3, "decode": 3})
            self.assertEqual(sorted(n for _, n, _ in tr.instants), ["marker"] * 3)
            # the loader's regions are never drawn inside the training thread's
            for s in tr.slices("load"):
                self.assertFalse(check_trace.inside(s, "step"), s)

    @unittest.skipUnless(HAVE_TORCH, "torch is not installed")
    def test_python_light_mode(self):
        self.run_torch(profiler=False)
        sid = self.session("light")
        pairs = [("fc1:Linear.forward", "Net.forward"), ("block:Sequential.forward", "Net.forward"),
                 ("block.fc2:Linear.forward", "block:Sequential.forward")]
        self.check(sid, pairs=pairs, speedscope_pairs=pairs, min_slices=3 * 6)

    @unittest.skipUnless(HAVE_TORCH, "torch is not installed")
    def test_python_profiler_mode_ddp(self):
        self.run_torch(profiler=True)
        sid = self.session("prof")
        pairs = [("Net.forward", "DistributedDataParallel.forward"),
                 ("fc1:Linear.forward", "Net.forward"),
                 ("aten::linear", "Net.forward"),
                 ("aten::addmm", "aten::linear"),
                 ("block.fc2:Linear.forward", "block:Sequential.forward")]
        traces = self.check(sid, pairs=pairs, speedscope_pairs=pairs[:4], min_slices=50)
        for tr in traces.values():
            # the bridge's module range inside DDP's own, as parent and child of one track
            for s in tr.slices("Net.forward"):
                self.assertEqual(s.parent.name, "DistributedDataParallel.forward")
                self.assertLessEqual(s.parent.start, s.start)
                self.assertGreaterEqual(s.parent.end, s.end)

    def run_torch(self, profiler):
        script = TORCH_JOB % {"profiler": profiler, "store": os.path.join(self.tmp, "store")}
        env = self.d.env()
        r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                           text=True, timeout=240)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("dropped 0", r.stdout)

    @unittest.skipUnless(MPI_LIB and MPIEXEC and MPI_P2P, "built without MPI")
    def test_mpi(self):
        # as test_mpi.c: the tests may run as root (CI does)
        env = self.d.env(OMPI_ALLOW_RUN_AS_ROOT=1, OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1)
        r = subprocess.run(["sh", "-c", "cd '%s' && TRACECTL_BLOCKING=1 TRACECTL_SESSION=mpi "
                            "'%s' --oversubscribe -np 4 -x LD_PRELOAD='%s' '%s'" %
                            (self.tmp, MPIEXEC, MPI_LIB, MPI_P2P)],
                           env=env, capture_output=True, text=True, timeout=240)
        self.assertEqual(r.returncode, 0, r.stdout[-2000:] + r.stderr[-2000:])
        sid = self.session("mpi")
        # MPI_Sendrecv's receive side (tcmpi.recv) is a moment at the call's end, its child
        traces = self.check(sid, instants=[("tcmpi.recv", ("MPI_Sendrecv",
                                                          "MPI_Sendrecv_replace"))],
                            speedscope_pairs=(), min_slices=4 * 10)
        for tr in traces.values():
            # each of the 4 ranks makes one MPI_Sendrecv and one MPI_Sendrecv_replace
            # (mpi_p2p.c steps 3 and 5): a receive side each
            self.assertEqual(sum(1 for _, n, _ in tr.instants if n == "tcmpi.recv"), 4 * 2)

    def test_kineto_import(self):
        src = os.path.join(DATA, "kineto", "hta", "sampled_rank-0.json.gz")
        self.d.cli("import", src, "--session", "kineto", "--cpu-ops", "--quiet")
        sid = self.session("kineto")
        pairs = kineto_pairs(src)
        self.assertIn(("aten::addmm", "aten::linear"), pairs)
        self.assertIn(("aten::_to_copy", "aten::to"), pairs)  # the very same interval
        traces = self.check(sid, pairs=pairs, min_slices=2000, speedscope_pairs=pairs,
                            speedscope_some=3)
        # the time of every CPU op as the file gives it: drawn with its children, not its
        # self time (the import sends the whole span beside it)
        want = kineto_durations(src)
        for tr in traces.values():
            got = collections.Counter()
            for s in tr.slices():
                got[s.name] += s.end - s.start
            for name in ("aten::linear", "aten::addmm", "AddmmBackward0"):
                self.assertEqual(got[name], want[name], name)


def instant_inside(tr, name, parents):
    """Errors unless there are instants named name, each within a slice of its track named
    parents (a name, or a tuple of the names it may have)."""
    parents = (parents,) if isinstance(parents, str) else parents
    got = [(k, t) for k, n, t in tr.instants if n == name]
    bad = [(k, t) for k, t in got
           if not any(s.name in parents and s.start <= t <= s.end for s in tr.tracks.get(k, []))]
    if not got:
        return ["no instant named %r" % name]
    return ["%d of %d instants %r are in no %s of their track, e.g. at %d on %s" %
            (len(bad), len(got), name, " or ".join(parents), bad[0][1], bad[0][0])] if bad else []


def kineto_events(path):
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    return [e for e in doc["traceEvents"]
            if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")
            and not str(e.get("name", "")).startswith("ProfilerStep#")]


def kineto_pairs(path):
    """(child, parent) op names such that, in the file itself, every event of child lies
    directly inside an event of parent on its thread (a pass of the test's own). Of two
    with the very same interval (aten::to and its aten::_to_copy, 35 µs both) the caller
    is the one with the smaller External id: the profiler numbers ops as they are called."""
    parents = collections.defaultdict(set)
    by = collections.defaultdict(list)
    for e in kineto_events(path):
        by[(e["pid"], e["tid"])].append(e)
    for es in by.values():
        es.sort(key=lambda e: (e["ts"], -e["dur"], e.get("args", {}).get("External id", 0)))
        stack = []
        for e in es:
            while stack and stack[-1]["ts"] + stack[-1]["dur"] <= e["ts"]:
                stack.pop()
            inside = stack and e["ts"] + e["dur"] <= stack[-1]["ts"] + stack[-1]["dur"]
            parents[e["name"]].add(stack[-1]["name"] if inside else None)
            stack.append(e)
    return sorted((c, next(iter(p))) for c, p in parents.items()
                  if len(p) == 1 and None not in p)


def kineto_durations(path):
    """Each CPU op name's summed duration in ns, as the file gives it."""
    out = collections.Counter()
    for e in kineto_events(path):
        out[e["name"]] += int(round(float(e["dur"]) * 1000))
    return out


TORCH_JOB = """if True:
    import collections, os, sys, torch, torch.nn as nn, torch.distributed as dist
    import tracectl, tracectl.torch as tct
    profiler = %(profiler)r
    dist.init_process_group("gloo", init_method="file://%(store)s", rank=0, world_size=1)
    torch.manual_seed(0)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(16, 32)
            self.act = nn.ReLU()
            self.block = nn.Sequential(collections.OrderedDict([
                ("fc2", nn.Linear(32, 4)), ("out", nn.Tanh())]))

        def forward(self, x):
            return self.block(self.act(self.fc1(x)))

    net = Net()
    model = nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    c = tct.open(session="prof" if profiler else "light", device="cpu:0")
    tct.instrument(net, opt, profiler=profiler)
    x = torch.randn(8, 16)

    def train():
        opt.zero_grad()
        model(x).sum().backward()
        opt.step()

    if profiler:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU],
                                    schedule=torch.profiler.schedule(wait=0, warmup=1, active=3,
                                                                     repeat=1),
                                    on_trace_ready=tct.profiler_handler()) as prof:
            for _ in range(4):
                train()
                prof.step()
                tct.step()
    else:
        for _ in range(3):
            train()
            tct.step()
    c.flush(timeout=30)
    print("recorded", c.recorded, "dropped", c.dropped)
    tct.close()
    dist.destroy_process_group()
"""

if __name__ == "__main__":
    unittest.main()
