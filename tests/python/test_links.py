"""test_links.py — nested `with` regions of the Python package give real stacks.

The regions are recorded by this process against a real daemon; the collapsed
export must show each region under the ones around it, with call counts the
test knows from its own loop, and time weights the test computes itself from
the session file (each entry's duration less its children's, by the parent
ids the file holds), not with the exporter's code.
"""

import collections
import json
import os
import subprocess
import threading
import unittest

import harness
import tracectl


class Links(harness.DaemonTest):
    def record(self, name):
        tc = tracectl.open(session=name, rank=0, world=1, device="cpu:0", socket=self.d.sock)
        for _ in range(5):
            with tc.op("step"):
                with tc.op("forward"):
                    with tc.op("matmul"):
                        pass
                    with tc.op("matmul"):
                        pass
                with tc.op("backward"):
                    pass
            tc.step()
        with tc.op("lone"):
            pass

        def worker():  # a thread's regions nest on their own chain
            with tc.op("thread_outer"):
                with tc.op("thread_inner"):
                    pass
        t = threading.Thread(target=worker)
        t.start()
        t.join()
        self.assertEqual(tc.recorded, 28)
        tc.close()
        self.assertEqual(tc.dropped, 0)

    def collapsed(self, name, weight):
        out = self.d.cli("export", name, "--format", "collapsed", "--weight", weight)
        return dict((line.rsplit(" ", 1)[0], int(line.rsplit(" ", 1)[1]))
                    for line in out.splitlines())

    def test_nested_with_blocks_are_stacks(self):
        self.record("py-nest")
        self.assertEqual(self.collapsed("py-nest", "calls"), {
            "py-nest;cpu:0;lone": 1,
            "py-nest;cpu:0;step": 5,
            "py-nest;cpu:0;step;backward": 5,
            "py-nest;cpu:0;step;forward": 5,
            "py-nest;cpu:0;step;forward;matmul": 10,
            "py-nest;cpu:0;thread_outer": 1,
            "py-nest;cpu:0;thread_outer;thread_inner": 1,
        })

    def test_time_weights_are_self_times_from_the_file(self):
        self.record("py-self")
        sid = self.d.session("py-self")["id"]
        rows = self.d.rows(sid, "SELECT e.rowid, e.process_id, o.name, e.dur_ns, l.id, l.parent "
                           "FROM entries e JOIN ops o ON o.id = e.op_id "
                           "LEFT JOIN entry_link l ON l.entry_rowid = e.rowid")
        by_id = {(r[1], r[4]): r for r in rows if r[4] is not None}
        child = collections.Counter()
        for r in rows:
            if r[5] is not None and (r[1], r[5]) in by_id:
                child[by_id[(r[1], r[5])][0]] += r[3]
        want = collections.Counter()
        for r in rows:
            names, p = [r[2]], r
            while p[5] is not None and (p[1], p[5]) in by_id:
                p = by_id[(p[1], p[5])]
                names.insert(0, p[2])
            self_ns = max(r[3] - child[r[0]], 0)
            us = self_ns // 1000 + (1 if self_ns % 1000 >= 500 else 0)
            want["py-self;cpu:0;" + ";".join(names)] += max(us, 1)
        self.assertEqual(self.collapsed("py-self", "time"), dict(want))

    def test_record_sends_the_ext_keys_it_is_given(self):
        """record(comm=, seq=, comm_size=, peer=, stream=, id=, parent=) reaches the file's
        entry_ext and entry_link tables as given, None keys absent; region_id() hands out
        distinct ids; a comm_size out of 1 .. 2**31 - 1 is a ValueError."""
        tc = tracectl.open(session="py-ext", rank=0, world=1, socket=self.d.sock, blocking=True)
        ids = [tc.region_id() for _ in range(3)]
        self.assertEqual(len(set(ids)), 3)
        self.assertNotIn(0, ids)
        t = tracectl.now_ns()
        tc.record("all_reduce", t, 10, comm=2 ** 64 - 1, seq=7, comm_size=2, category="comm")
        tc.record("send", t, 20, comm=5, peer=3, seq=None, category="comm")
        tc.record("kernel", t, 30, stream=2, parent=ids[0])
        tc.record("block", t, 40, id=ids[0], parent=ids[1])
        tc.record("plain", t, 50)
        with self.assertRaises(OverflowError):
            tc.record("bad", t, 1, seq=-1)
        with self.assertRaises(TypeError):
            tc.record("bad", t, 1, comm="world")
        with self.assertRaises(TypeError):
            tc.record("bad", t, 1, nothing=1)
        for bad in (0, 2 ** 31):
            with self.assertRaises(ValueError):
                tc.record("bad", t, 1, comm=1, seq=0, comm_size=bad)
        tc.close()
        sid = self.d.session("py-ext")["id"]
        rows = self.d.rows(sid, "SELECT o.name, x.stream, x.peer, x.comm, x.seq, l.id, l.parent, "
                           "x.comm_size "
                           "FROM entries e JOIN ops o ON o.id = e.op_id "
                           "LEFT JOIN entry_ext x ON x.entry_rowid = e.rowid "
                           "LEFT JOIN entry_link l ON l.entry_rowid = e.rowid ORDER BY e.dur_ns")
        self.assertEqual(rows, [("all_reduce", None, None, -1, 7, None, None, 2),
                                ("send", None, 3, 5, None, None, None, None),
                                ("kernel", 2, None, None, None, None, ids[0], None),
                                ("block", None, None, None, None, ids[0], ids[1], None),
                                ("plain", None, None, None, None, None, None, None)])

    def test_report_by_module_survives_any_links(self):
        """report --by module on links no producer of ours makes: a loop of parents, a region
        that is its own parent, a parent no entry has, and an id of 2**64-1 beside entries
        without a parent. The sums are the test's own, by the rules of the README."""
        tc = tracectl.open(session="py-loops", rank=0, world=1, socket=self.d.sock,
                           blocking=True)
        t, top = tracectl.now_ns(), 2 ** 64 - 1
        tc.record("A", t, 1000, id=1, parent=2)
        tc.record("B", t, 1000, id=2, parent=1)
        tc.record("C", t, 1000, id=3, parent=3)
        tc.record("D", t, 1000, id=top)
        for op, dur, parent in (("x", 10, 1), ("y", 20, 3), ("z", 40, 99), ("w", 80, None),
                                ("v", 5, top), ("v", 7, None)):
            tc.record(op, t, dur, parent=parent)
        tc.close()
        r = subprocess.run([harness.TRACECTL, "--socket", self.d.sock, "report", "py-loops",
                            "--by", "module", "--json"], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        rep = json.loads(r.stdout)
        self.assertEqual(rep["total_ns"], 162)
        self.assertEqual({m["module"]: (m["calls"], m["entries"], m["self_ns"], m["total_ns"])
                          for m in rep["modules"]},
                         {"A": (1, 1, 10, 10), "B": (1, 0, 0, 10), "C": (1, 1, 20, 20),
                          "D": (1, 1, 5, 5), None: (0, 3, 127, 127)})
        self.assertEqual({(p["module"], p["op"]): (p["calls"], p["total_ns"])
                          for p in rep["pairs"]},
                         {("A", "x"): (1, 10), ("C", "y"): (1, 20), ("D", "v"): (1, 5),
                          (None, "z"): (1, 40), (None, "w"): (1, 80), (None, "v"): (1, 7)})

    def test_report_by_on_a_trace_file_without_a_daemon(self):
        """report FILE --by launcher|module: the same grouping as after an import into a daemon
        (the session's id and name aside)."""
        trace = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "kineto",
                             "hta", "sampled_rank-0.json.gz")
        self.d.cli("import", trace, "--session", "hta", "--quiet")
        for by in ("launcher", "module"):
            online = json.loads(self.d.cli("report", "hta", "--by", by, "--json"))
            r = subprocess.run([harness.TRACECTL, "report", trace, "--by", by, "--json"],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            offline = json.loads(r.stdout)
            self.assertEqual((offline["by"], offline["session"]["id"]), (by, 1))
            del online["session"], offline["session"]
            self.assertEqual(offline, online)
        self.assertGreater(len(online["pairs"]), 0)


if __name__ == "__main__":
    unittest.main()
