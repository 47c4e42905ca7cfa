"""test_links.py — nested `with` regions of the Python package give real stacks.

The regions are recorded by this process against a real daemon; the collapsed
export must show each region under the ones around it, with call counts the
test knows from its own loop, and time weights the test computes itself from
the session file (each entry's duration less its children's, by the parent
ids the file holds), not with the exporter's code.
"""

import collections
import threading
import unittest

import harness
import tracectl


class Links(unittest.TestCase):
    def setUp(self):
        self.d = harness.Daemon()
        self.addCleanup(self.d.cleanup)

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


if __name__ == "__main__":
    unittest.main()
