"""test_ddp.py — examples/ddp_train.py: a real 4-rank DDP job (gloo, CPU) with a slowed rank.

The job runs against a real daemon; the test knows what each rank records
(per step: 4 forward + 4 backward + the Sequential's forward, a region around them, +
optimizer.step + DDP's one bucket's allreduce_async and allreduce_wait in light mode, plus
one barrier at the end) and checks the
session holds exactly that, that a report taken while the job is paused shows the steps
done so far, that the report names the slowed rank's device as the slowest, and that the other
ranks lose more time waiting at the collectives. Collectives carry the
communicator and sequence number the daemon matches them by (ext comm + seq):
the test computes the ids itself and checks the analysis names the slowed rank
as the one arriving last; with two subgroups, instances are told apart by
communicator where matching by op and occurrence would merge them.
"""

import collections
import json
import os
import re
import subprocess
import sys
import unittest

import harness
import test_torch_modules

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

EXAMPLE = os.path.join(os.environ.get("TRACECTL_EXAMPLES", "../../examples"), "ddp_train.py")
RANKS, STEPS, PAUSE, SLOW = 4, 6, 3, 2
MODULES = ("0:Linear", "1:ReLU", "2:Throttle", "3:Linear")
# forward and backward per leaf module, the Sequential's forward (a region around them: light
# mode nests modules), optimizer.step, the bucket's allreduce_async (its launch) and
# allreduce_wait (the rank's wait for it)
PER_STEP = 2 * len(MODULES) + 4


def fnv1a(data):
    """FNV-1a 64, written out here: the comm id of a process group is that of its name."""
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def u64(v):
    """A uint64 the session file stores as the int64 of the same bits, back as unsigned."""
    return v & 0xFFFFFFFFFFFFFFFF


def collectives(d, sid):
    """Per rank, the comm entries in the order of their start: (op, comm, seq, peer)."""
    rows = d.rows(sid, "SELECT p.rank, o.name, x.comm, x.seq, x.peer FROM entries e "
                  "JOIN ops o ON o.id = e.op_id JOIN processes p ON p.id = e.process_id "
                  "LEFT JOIN entry_ext x ON x.entry_rowid = e.rowid "
                  "WHERE o.category = 'comm' ORDER BY p.rank, e.start_ns, e.rowid")
    per = {}
    for r, op, comm, seq, peer in rows:
        per.setdefault(r, []).append((op, None if comm is None else u64(comm), seq, peer))
    return per


@unittest.skipUnless(HAVE_TORCH, "skipped: no torch (python3-torch is not installed)")
class Ddp(harness.DaemonTest):
    def run_job(self, session, mode, *extra):
        resume = os.path.join(self.d.dir, "resume")
        p = subprocess.Popen([sys.executable, EXAMPLE, "--ranks", str(RANKS), "--steps", str(STEPS),
                              "--slow-rank", str(SLOW), "--slow-ms", "50", "--mode", mode,
                              "--session", session, "--pause-after", str(PAUSE),
                              "--resume-file", resume, *extra],
                             stdout=subprocess.PIPE, text=True, env=self.d.env())
        self.addCleanup(lambda: p.poll() is None and p.kill())
        out, paused = [], set()
        while len(paused) < RANKS:  # every rank flushed its first PAUSE steps and waits
            line = p.stdout.readline()
            self.assertNotEqual(line, "", "the job ended before pausing: %s" % out)
            out.append(line)
            paused.update(re.findall(r"paused rank (\d+) step %d" % PAUSE, line))
        live = self.d.report(session)
        s = self.d.session(session)
        steps = self.d.rows(s["id"], "SELECT step, count(*) FROM entries GROUP BY step")
        traced = self.chrome_ops()
        open(resume, "w").close()
        rest, _ = p.communicate(timeout=240)
        self.assertEqual(p.returncode, 0, "".join(out) + rest)
        return live, steps, traced, "".join(out) + rest

    def chrome_ops(self):
        """Per rank, the operators of the Chrome traces torch.profiler itself wrote so far
        (profiler mode): what the bridge must have streamed, counted independently."""
        n = [0] * RANKS
        d = os.path.join(self.d.dir, "chrome")
        for f in os.listdir(d) if os.path.isdir(d) else []:
            with open(os.path.join(d, f)) as fp:
                ev = json.load(fp)
            n[int(re.match(r"rank(\d+)\.", f).group(1))] += sum(
                1 for e in ev if e.get("ph") == "X" and not e["name"].startswith("ProfilerStep"))
        return n

    def test_light_mode_names_the_slowed_rank(self):
        live, steps, _, out = self.run_job("ddp-light", "light")
        # While the job ran: a live session with exactly the first PAUSE steps of each rank.
        self.assertEqual(live["session"]["state"], "live")
        self.assertEqual(live["session"]["processes"], RANKS)
        self.assertEqual(live["session"]["entries"], RANKS * PAUSE * PER_STEP)
        self.assertEqual(steps, [(s, RANKS * PER_STEP) for s in range(PAUSE)])

        per_rank = STEPS * PER_STEP + 1  # + the final barrier
        done = re.findall(r"done rank (\d+) recorded (\d+) dropped (\d+)", out)
        self.assertEqual(sorted(done), [(str(r), str(per_rank), "0") for r in range(RANKS)])
        rep = self.d.report("ddp-light")
        self.assertEqual((rep["session"]["state"], rep["session"]["processes"],
                          rep["session"]["entries"], rep["session"]["dropped"]),
                         ("ended", RANKS, RANKS * per_rank, 0))
        calls = {o["op"]: (o["calls"], o["category"]) for o in rep["ops"]}
        want = {m + "." + k: (RANKS * STEPS, "compute") for m in MODULES
                for k in ("forward", "backward")}
        want.update({"Sequential.forward": (RANKS * STEPS, "module"),
                     "optimizer.step": (RANKS * STEPS, "compute"),
                     "allreduce_async": (RANKS * STEPS, "comm"),
                     "allreduce_wait": (RANKS * STEPS, "wait"), "barrier": (RANKS, "comm")})
        self.assertEqual(calls, want)
        self.assertEqual(rep["imbalance"]["slowest_device"], "cpu:%d" % SLOW)
        # Every rank's collectives carry the world's comm id and the same sequence numbers:
        # the allreduce of step k is seq k, the barrier after them seq STEPS.
        world = fnv1a(b"world")
        want = [("allreduce_async", world, k, None) for k in range(STEPS)] + [
            ("barrier", world, STEPS, None)]
        self.assertEqual(collectives(self.d, self.d.session("ddp-light")["id"]),
                         {r: want for r in range(RANKS)})
        # The analysis matched them by (comm, seq): one complete instance per allreduce, the
        # slowed rank arriving last (it sleeps 50 ms in its forward; the first step, where every
        # rank warms up, may go to another on a loaded machine).
        self.assertTrue(rep["completeness"]["collectives_matched_by"].startswith("ext comm+seq "))
        ar = [c for c in rep["collectives"] if c["op"] == "allreduce_async"]
        self.assertEqual(len(ar), 1)
        self.assertEqual((ar[0]["instances"], ar[0]["partial"], ar[0]["last_rank"]),
                         (STEPS, 0, SLOW))
        self.assertGreaterEqual(ar[0]["last_rank_count"], STEPS - 1)
        ranks = {r["rank"]: r for r in rep["ranks"]}
        self.assertEqual(sum(r["arrived_last"] for r in ranks.values()), STEPS + 1)
        self.assertEqual(max(ranks, key=lambda r: ranks[r]["arrived_last"]), SLOW)
        # The others wait for it: each loses more time waiting than the slowed rank does (the
        # analysis' wait, from the arrivals; the allreduces' durations also hold gloo's own
        # work, which a loaded machine stretches on any rank).
        for r in range(RANKS):
            if r != SLOW:
                self.assertGreater(ranks[r]["waited_ns"], ranks[SLOW]["waited_ns"],
                                   "rank %d waited less: %s" % (r, rep["ranks"]))
        self.assertEqual(ranks[SLOW]["collectives"], STEPS + 1)

    def test_profiler_mode_streams_every_operator(self):
        chrome = os.path.join(self.d.dir, "chrome")
        os.mkdir(chrome)
        live, steps, traced, out = self.run_job("ddp-prof", "profiler", "--chrome-dir", chrome)
        # Paused after PAUSE = 3 steps: the profiler's cycle of 2 steps (0 and 1) was streamed.
        self.assertEqual(live["session"]["state"], "live")
        self.assertGreater(sum(traced), 0)
        self.assertEqual(live["session"]["entries"], sum(traced))
        self.assertEqual([s for s, _ in steps], [0, 1])
        traced = self.chrome_ops()
        sid = self.d.session("ddp-prof")["id"]
        self.assertEqual(self.d.rows(sid, "SELECT rank, count(*) FROM trace GROUP BY rank"),
                         list(enumerate(traced)))
        done = re.findall(r"done rank (\d+) recorded (\d+) dropped (\d+)", out)
        self.assertEqual(sorted(done), [(str(r), str(traced[r]), "0") for r in range(RANKS)])
        rep = self.d.report("ddp-prof")
        self.assertEqual((rep["session"]["processes"], rep["session"]["entries"],
                          rep["session"]["dropped"]), (RANKS, sum(traced), 0))
        # The slowed rank's annotated throttle, once per step; c10d/gloo operators are comm.
        self.assertEqual(self.d.rows(sid, "SELECT rank, step FROM trace WHERE op = 'throttle' "
                                     "ORDER BY step"), [(SLOW, s) for s in range(STEPS)])
        cats = dict((o["op"], o["category"]) for o in rep["ops"])
        self.assertEqual((cats["c10d::allreduce_"], cats["c10d::broadcast_"], cats["aten::mm"],
                          cats["aten::broadcast_tensors"]), ("comm", "comm", "compute", "compute"))
        # One collective is recorded by c10d's operator and by gloo's record of it, on another
        # thread: the first is the collective, the second (category other) no second instance.
        self.assertEqual((cats["gloo:all_reduce"], cats["gloo:broadcast"]), ("other", "other"))
        calls = [collections.Counter() for _ in range(RANKS)]
        for f in os.listdir(chrome):
            with open(os.path.join(chrome, f)) as fp:
                calls[int(re.match(r"rank(\d+)\.", f).group(1))].update(
                    e["name"] for e in json.load(fp) if e.get("ph") == "X")
        want = {op: calls[0][op] for op in ("c10d::allreduce_", "c10d::broadcast_")}
        self.assertGreater(want["c10d::allreduce_"], 0)
        gloo = dict(self.d.rows(sid, "SELECT rank, count(*) FROM trace WHERE op = "
                                "'gloo:all_reduce' GROUP BY rank"))
        for r in range(RANKS):
            self.assertEqual({op: calls[r][op] for op in want}, want, "rank %d" % r)
            # gloo records its side on its own thread, after c10d's operator returned: the
            # cycle's last ones may fall outside the profiler's window (5 or 4 of 6, loaded),
            # so what is checked is that every gloo record torch wrote was streamed.
            self.assertLessEqual(calls[r]["gloo:all_reduce"], want["c10d::allreduce_"])
            self.assertEqual(gloo.get(r, 0), calls[r]["gloo:all_reduce"], "rank %d" % r)
        self.assertEqual({c["op"]: (c["instances"], c["partial"]) for c in rep["collectives"]},
                         {op: (n, 0) for op, n in want.items()})
        self.assertEqual([(x["rank"], x["collectives"]) for x in rep["ranks"]],
                         [(r, sum(want.values())) for r in range(RANKS)])
        self.assertEqual(rep["imbalance"]["slowest_device"], "cpu:%d" % SLOW)
        # The model's modules are regions around their operators, on every rank: the
        # operators' innermost module as the Chrome traces of each rank say, and report
        # --by module as summed from the file.
        rows = test_torch_modules.read_entries(self.d, sid)
        proc = dict(self.d.rows(sid, "SELECT id, rank FROM processes"))
        names = {m + "." + k for m in ("Sequential",) + MODULES for k in ("forward", "backward")}
        names = (names - {"Sequential.backward"}) | {"optimizer.step"}
        for r in range(RANKS):
            mine = [x for x in rows if proc[x[1]] == r]
            by_id = {x[5]: x[2] for x in mine if x[5] is not None}
            self.assertEqual(set(by_id.values()), names)
            stored = collections.Counter((x[2], by_id.get(x[6])) for x in mine if x[5] is None)
            want = collections.Counter()
            for f in os.listdir(chrome):
                if f.startswith("rank%d." % r):
                    want += test_torch_modules.chrome_parents(os.path.join(chrome, f), names)
            self.assertEqual(stored, want, "rank %d" % r)
            self.assertEqual(stored[("aten::linear", "0:Linear.forward")], STEPS)
            self.assertEqual(stored[("throttle", "2:Throttle.forward")], STEPS if r == SLOW else 0)
        mods, pairs, total = test_torch_modules.module_sums(rows)
        by = json.loads(self.d.cli("report", "ddp-prof", "--by", "module", "--json"))
        self.assertEqual(by["total_ns"], total)
        self.assertEqual({m["module"]: [m["calls"], m["entries"], m["self_ns"], m["total_ns"]]
                          for m in by["modules"]}, dict(mods))
        self.assertEqual([(p["calls"], p["total_ns"]) for p in by["pairs"]
                          if (p["module"], p["op"]) == ("2:Throttle.forward", "throttle")],
                         [tuple(pairs[("2:Throttle.forward", "throttle")])])
        self.assertEqual(pairs[("2:Throttle.forward", "throttle")][0], STEPS)

    def test_distributed_calls_and_one_session_from_torch(self):
        """tct.open() without a session name: rank 0 names one and broadcasts it; every
        wrapped torch.distributed call is one comm entry with its tensors' bytes."""
        script = """if True:
            import os, sys, tempfile, torch, torch.distributed as dist, torch.multiprocessing as mp
            import tracectl.torch as tct
            def run(rank, store):
                dist.init_process_group("gloo", init_method="file://" + store, rank=rank,
                                        world_size=2)
                tct.open()
                tct.instrument_distributed()
                t = torch.ones(4)
                dist.all_reduce(t)                              # 16 bytes, blocking
                dist.all_reduce(t, async_op=True).wait()        # 16 bytes, through its future
                dist.broadcast(torch.ones(8, dtype=torch.float64), src=0)   # 64 bytes
                dist.barrier()
                tct.close()
            with tempfile.TemporaryDirectory() as d:
                mp.start_processes(run, args=(os.path.join(d, "s"),), nprocs=2,
                                   start_method="fork")
        """
        env = self.d.env()
        for k in ("TRACECTL_SESSION", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"):
            env.pop(k, None)
        subprocess.run([sys.executable, "-c", script], env=env, check=True, timeout=120)
        ss = self.d.sessions()
        self.assertEqual(len(ss), 1)
        self.assertRegex(ss[0]["name"], r"^torch-\d{8}-\d{6}-\d+$")
        self.assertEqual((ss[0]["processes"], ss[0]["entries"], ss[0]["dropped"]), (2, 8, 0))
        rows = self.d.rows(ss[0]["id"], "SELECT rank, op, category, count(*), sum(mem_bytes), "
                           "count(device) FROM trace GROUP BY rank, op ORDER BY rank, op")
        want = []
        for r in range(2):
            want += [(r, "all_reduce", "comm", 2, 32, 0), (r, "barrier", "comm", 1, 0, 0),
                     (r, "broadcast", "comm", 1, 64, 0)]
        self.assertEqual(rows, want)

    def test_subgroups_are_matched_by_communicator(self):
        """Ranks {0, 1} and {2, 3} all_reduce on their own subgroup three times (rank 3 sleeps
        50 ms before each: it arrives last), then all of them on the world once, then 0 sends
        to 1. By (comm, seq) that is 3 + 3 instances of two arrivals and one of four, each
        complete (its comm_size: 2, 2 and 4), none partial; matched by (op, occurrence) the
        subgroups' calls would merge into 3 instances of four. Waits, last arrivals and the
        late rank are computed here from the entries the session stored."""
        script = """if True:
            import os, sys, tempfile, time, torch, torch.distributed as dist
            import torch.multiprocessing as mp
            import tracectl.torch as tct
            def run(rank, store):
                dist.init_process_group("gloo", init_method="file://" + store, rank=rank,
                                        world_size=4)
                g01, g23 = dist.new_group([0, 1]), dist.new_group([2, 3])
                tct.open(session="groups")
                tct.instrument_distributed()
                mine = g01 if rank < 2 else g23
                t = torch.ones(4)
                for _ in range(3):
                    if rank == 3:
                        time.sleep(0.05)
                    dist.all_reduce(t, group=mine)
                dist.all_reduce(t, op=dist.ReduceOp.SUM)
                dist.all_reduce(t, group=g23 if rank < 2 else g01)  # not a member: nothing
                if rank == 0:
                    dist.send(t, 1)
                elif rank == 1:
                    dist.recv(t, src=0)
                with open(sys.argv[1] + "/comm%d" % rank, "w") as f:
                    f.write("%d %d" % (tct.comm_id(mine), tct.comm_id()))
                tct.close()
            with tempfile.TemporaryDirectory() as d:
                mp.start_processes(run, args=(os.path.join(d, "s"),), nprocs=4,
                                   start_method="fork")
        """
        subprocess.run([sys.executable, "-c", script, self.d.dir], env=self.d.env(), check=True,
                       timeout=240)
        # torch names the subgroups "1" and "2" (the world is "0"), in creation order
        g01, g23, world = fnv1a(b"1:0,1"), fnv1a(b"2:2,3"), fnv1a(b"world")
        ids = []
        for rank in range(4):
            with open(os.path.join(self.d.dir, "comm%d" % rank)) as f:
                ids.append(tuple(map(int, f.read().split())))
        self.assertEqual(ids, [(g01, world), (g01, world), (g23, world), (g23, world)])
        rep = self.d.report("groups")
        ar = [c for c in rep["collectives"] if c["op"] == "all_reduce"]
        self.assertEqual([(c["instances"], c["partial"]) for c in ar], [(7, 0)])
        self.assertEqual([c["op"] for c in rep["collectives"]], ["all_reduce"])  # no p2p
        self.assertEqual(sorted((x["rank"], x["collectives"]) for x in rep["ranks"]),
                         [(r, 4) for r in range(4)])
        sid = self.d.session("groups")["id"]
        self.check_figures(rep, sid, g01, g23, world)
        per = collectives(self.d, sid)
        for rank in range(4):
            g = g01 if rank < 2 else g23
            want = [("all_reduce", g, k, None) for k in range(3)] + [
                ("all_reduce", world, 0, None)]
            want += {0: [("send", world, None, 1)], 1: [("recv", world, None, 0)]}.get(rank, [])
            self.assertEqual(per[rank], want, "rank %d" % rank)

    def check_figures(self, rep, sid, g01, g23, world):
        """The analysis against what the stored entries give by PROTOCOL.md Part 3's
        definitions: per instance (comm, seq) the last arrival (latest start), the skew, each
        arrival's wait = min(last - start, dur); per rank the sums; the step's late rank."""
        rows = self.d.rows(sid, "SELECT p.rank, x.comm, x.seq, x.comm_size, e.start_ns, e.dur_ns"
                           " FROM entries e JOIN ops o ON o.id = e.op_id"
                           " JOIN processes p ON p.id = e.process_id"
                           " JOIN entry_ext x ON x.entry_rowid = e.rowid"
                           " WHERE o.name = 'all_reduce' ORDER BY e.rowid")
        inst = collections.defaultdict(list)
        for rank, comm, seq, size, start, dur in rows:
            self.assertEqual(size, {g01: 2, g23: 2, world: 4}[u64(comm)])
            inst[(u64(comm), seq)].append((rank, start, dur))
        self.assertEqual(sorted(len(a) for a in inst.values()), [2] * 6 + [4])
        waited, last, caused = [0] * 4, [0] * 4, [0] * 4
        skews = []
        for (comm, _), arr in inst.items():
            lr, ls = max(((r, s) for r, s, _ in arr), key=lambda x: x[1])
            first = min(s for _, s, _ in arr)
            last[lr] += 1
            caused[lr] += ls - first
            skews.append(ls - first)
            for r, s, dur in arr:
                waited[r] += min(ls - s, dur)
            if comm == g23:
                self.assertEqual(lr, 3)  # rank 3 slept before each of them
        self.assertEqual(sum(waited), rep["collectives"][0]["waited_ns"])
        self.assertEqual(max(skews), rep["collectives"][0]["skew_max_ns"])
        for x in rep["ranks"]:
            r = x["rank"]
            self.assertEqual((x["waited_ns"], x["arrived_last"], x["caused_ns"]),
                             (waited[r], last[r], caused[r]), "rank %d" % r)
        spans = self.d.rows(sid, "SELECT p.rank, max(e.start_ns + e.dur_ns) - min(e.start_ns)"
                            " FROM entries e JOIN processes p ON p.id = e.process_id"
                            " GROUP BY p.rank ORDER BY p.rank")
        mean = sum(t for _, t in spans) // len(spans)
        top = max(range(4), key=lambda r: (caused[r], -r))
        late = top if caused[top] >= 0.10 * mean else None
        self.assertEqual([(st["step"], st["late_rank"]) for st in rep["steps"]], [(0, late)])
        self.assertGreaterEqual(caused[3], 3 * 50 * 10**6 * 0.9)  # the sleeps it caused


if __name__ == "__main__":
    unittest.main(verbosity=2)
