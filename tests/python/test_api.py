"""test_api.py — the tracectl Python API against a real daemon.

Each test runs its own tracectld (harness.Daemon) and checks what reached the
session's SQLite file or `tracectl report --json`, with counts the test
computes itself.
"""

import csv
import errno
import io
import json
import os
import re
import signal
import sys
import threading
import time
import unittest
import warnings

import harness
import tracectl


class Api(harness.DaemonTest):
    def entries(self, session, where="1"):
        s = self.d.session(session)
        return self.d.rows(s["id"], "SELECT op, step, device, start_ns, dur_ns, mem_bytes, rank "
                           "FROM trace WHERE %s ORDER BY start_ns, id" % where)

    def test_nested_regions_each_record_their_span(self):
        tc = self.open("nest", rank=0, world=1, device="cpu:0")
        for _ in range(25):
            with tc.op("outer"):
                with tc.op("middle"):
                    with tc.op("inner", out_shape=(64, 64), in_shapes=[(64, 128), (128, 64)],
                               mem=16384):
                        pass
                with tc.op("inner"):
                    pass
        self.assertEqual(tc.recorded, 100)
        tc.close()
        self.assertEqual(tc.dropped, 0)
        rows = self.entries("nest")
        self.assertEqual(len(rows), 100)
        by = {}
        for r in rows:
            by.setdefault(r[0], []).append(r)
        self.assertEqual({k: len(v) for k, v in by.items()},
                         {"outer": 25, "middle": 25, "inner": 50})
        # Each inner and middle lies within its outer: no outer was cut short.
        for i, o in enumerate(by["outer"]):
            o_end = o[3] + o[4]
            for r in by["middle"][i:i + 1] + by["inner"][2 * i:2 * i + 2]:
                self.assertGreaterEqual(r[3], o[3])
                self.assertLessEqual(r[3] + r[4], o_end)
        out = self.d.cli("export", "nest", "--format", "csv")
        shaped = [r for r in csv.DictReader(io.StringIO(out)) if r["mem_bytes"] == "16384"]
        self.assertEqual(len(shaped), 25)
        self.assertEqual(shaped[0]["out_shape"], "[64,64]")
        self.assertEqual(shaped[0]["in_shapes"], "[[64,128],[128,64]]")
        self.assertEqual(shaped[0]["elements"], "4096")

    def test_decorators_and_exceptions_in_regions(self):
        tc = self.open("deco", rank=0)

        @tc.trace
        def plain(x):
            return x + 1

        @tracectl.trace("named", category="comm")
        def named():
            return "ok"

        @tc.trace("fails")
        def fails():
            raise KeyError("boom")

        for i in range(7):
            self.assertEqual(plain(i), i + 1)
        for _ in range(5):
            self.assertEqual(named(), "ok")
        for _ in range(3):
            with self.assertRaises(KeyError):
                fails()
        with self.assertRaises(ZeroDivisionError):
            with tc.op("region_raises"):
                1 / 0
        tc.close()
        self.assertIsNone(tracectl.current())
        rep = self.d.report("deco")
        calls = {o["op"]: (o["calls"], o["category"]) for o in rep["ops"]}
        qual = plain.__qualname__
        self.assertEqual(calls, {qual: (7, "compute"), "named": (5, "comm"),
                                 "fails": (3, "compute"), "region_raises": (1, "compute")})

    def test_record_steps_and_meta(self):
        tc = self.open("rec", rank=3, world=4, device="cpu:3")
        t0 = tracectl.now_ns()
        for s in range(3):
            for i in range(4):
                tc.record("opaque", t0 + 1000 * (4 * s + i), 500 + i, mem=8,
                          out_shape=[2, 3], device="dev:x" if i == 3 else None)
            tc.step()
        tc.set_step(10)
        tc.record(tc.op_id("by_id", category="io"), t0, 7)
        tc.meta("lr", 0.5)
        tc.meta("model", "tiny")
        tc.meta("epochs", 3)
        tc.meta("ddp", True)
        tc.flush(timeout=10)
        rows = self.entries("rec")
        self.assertEqual(len(rows), 13)
        steps = [r[1] for r in rows if r[0] == "opaque"]
        self.assertEqual(sorted(steps), [0] * 4 + [1] * 4 + [2] * 4)
        first = [r for r in rows if r[0] == "opaque"][0]
        self.assertEqual((first[3], first[4], first[5], first[6], first[2]),
                         (t0, 500, 8, 3, "cpu:3"))
        self.assertEqual(sum(1 for r in rows if r[2] == "dev:x"), 3)
        self.assertEqual([(r[1], r[4]) for r in rows if r[0] == "by_id"], [(10, 7)])
        meta = dict(self.d.rows(tc.session_id, "SELECT key, value FROM meta"))
        self.assertEqual((meta["lr"], meta["model"], meta["epochs"], meta["ddp"]),
                         (0.5, "tiny", 3, 1))
        tc.close()

    def test_errors_are_exceptions(self):
        tc = self.open("errs")
        with self.assertRaises(ValueError):
            tc.op("")
        with self.assertRaises(ValueError):
            tc.op("x", out_shape=[1] * 17)
        with self.assertRaises(TypeError):
            tc.op("x", out_shape=["a"])
        with self.assertRaises(OverflowError):
            tc.record("x", -1, 1)
        with self.assertRaises(TypeError):
            tc.meta("k", [1])
        with self.assertRaises(TypeError):
            tc.op("x", bogus=1)
        tc.close()
        tc.close()  # a second close does nothing
        with self.assertRaises(tracectl.Error) as cm:
            tracectl.open(socket=os.path.join(self.d.dir, "none.sock"), blocking=True)
        e = cm.exception
        self.assertIsInstance(e, OSError)
        self.assertEqual((e.errno, e.code), (errno.ENOENT, "ENOENT"))
        self.assertIn("open", e.message)

    def test_shapes_are_recorded_exactly(self):
        # Shapes as tuples, lists, a tuple subclass and a generic sequence, with
        # 0 dimensions, 16 dimensions, zero and INT64_MAX-sized dimensions, each
        # recorded through op() and record(), with the same objects again, an
        # equal copy, and lists changed in place between two regions (the
        # binding remembers the last shapes by their tuples' identity). mem_bytes
        # tells the entries apart; the expected CSV is built here from the ints.
        big = 2**63 - 1

        class Size(tuple):
            pass

        mutable = [3, 4]
        out, shared = (1, 2), [(1, 2), (3,)]
        cases = [
            ((64, 64), [(64, 128), (128, 64)]),
            ([64, 64], ([64, 128], (128, 64))),
            ((), [()]),
            (tuple(range(1, 17)), [tuple(range(16, 0, -1)), [0] * 16]),
            ((big,), [(0, big, 1), (big,) * 16]),
            (None, [(7,)]),
            ((5, 0), None),
            (Size((2, 3)), (Size((4,)),)),
            (range(2, 5), [range(3)]),
            ((1,), [(i,) for i in range(9)]),  # past 8 inputs they are left out
            (mutable, [mutable]),
            (mutable, [mutable]),  # mutable[1] is 5 by then
            (out, shared),
            (out, shared),  # shared[1] is (4,) by then
            (out, shared),  # shared has a third shape
            (out, shared[:2]),
        ]
        change = {
            11: lambda: mutable.__setitem__(1, 5),
            13: lambda: shared.__setitem__(1, (4,)),
            14: lambda: shared.append((5, 6)),
        }
        tc = self.open("shapes", rank=0)
        want = {}
        for i, (out, ins) in enumerate(cases):
            if i in change:
                change[i]()
            o = None if out is None else list(out)
            n = None if ins is None else [list(x) for x in ins][:8]
            for j in range(3):  # op(), op() again, record() with an equal copy
                mem = 100 * (i + 1) + j
                want[mem] = (o, n)
                if j < 2:
                    with tc.op("shaped", out_shape=out, in_shapes=ins, mem=mem):
                        pass
                else:
                    tc.record("shaped", tracectl.now_ns(), 1, mem=mem,
                              out_shape=None if o is None else tuple(o),
                              in_shapes=None if ins is None else [tuple(x) for x in ins])
        tc.close()
        self.assertEqual((tc.recorded, tc.dropped), (len(want), 0))

        def js(v):
            return "" if v is None else json.dumps(v, separators=(",", ":"))

        out = self.d.cli("export", "shapes", "--format", "csv")
        got = {int(r["mem_bytes"]): (r["out_shape"], r["in_shapes"])
               for r in csv.DictReader(io.StringIO(out))}
        self.assertEqual(got, {m: (js(o), js(n)) for m, (o, n) in want.items()})

    def test_bad_shapes_are_exceptions(self):
        tc = self.open("badshapes")
        bad = [
            ((-1,), OverflowError, "-1"),
            ((2, -3), OverflowError, "-3"),
            ((2**64,), OverflowError, str(2**64)),
            ([1] * 17, ValueError, "at most 16 dimensions, not 17"),
            (("a",), TypeError, "not str"),
            ((1.0,), TypeError, "not float"),
            ((None,), TypeError, "not NoneType"),
            (5, TypeError, "a shape must be a sequence of ints"),
        ]
        for shape, exc, msg in bad:
            for kw in ({"out_shape": shape}, {"in_shapes": [(1,), shape]}):
                with self.subTest(kw=kw):
                    with self.assertRaisesRegex(exc, re.escape(msg)):
                        tc.op("x", **kw)
                    with self.assertRaisesRegex(exc, re.escape(msg)):
                        tc.record("x", 1, 1, **kw)
        with self.assertRaisesRegex(TypeError, "in_shapes must be a sequence of shapes"):
            tc.op("x", in_shapes=5)
        # Nothing was recorded by the failed calls, and the client still works.
        with tc.op("x", out_shape=(1,)):
            pass
        self.assertEqual(tc.recorded, 1)
        tc.close()
        self.assertEqual(tc.dropped, 0)

    def test_offline_client_counts_drops(self):
        with self.assertWarns(tracectl.OfflineWarning):
            tc = tracectl.open(socket=os.path.join(self.d.dir, "none.sock"))
        self.assertFalse(tc.enabled)
        self.assertEqual(tc.open_error, errno.ENOENT)
        for _ in range(10):
            with tc.op("lost"):
                pass
        tc.record("lost", 1, 1)
        tc.flush()  # nothing to send: no error
        self.assertEqual(tc.dropped, 11)
        tc.close()
        self.assertEqual(tc.dropped, 11)

    def test_offline_open_warns_once_why(self):
        path = os.path.join(self.d.dir, "none.sock")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            tc = tracectl.open(socket=path)
        tc.close()
        self.assertEqual([x.category for x in w], [tracectl.OfflineWarning])
        msg = str(w[0].message)
        self.assertIn("tracectl: this process is not recorded: cannot connect to " + path, msg)
        self.assertIn("TRACECTL_QUIET=1", msg)
        self.assertEqual(w[0].filename, __file__, "the warning points at the caller's open()")
        # silenced; and no warning for a client that is online or disabled
        for env, sock in (("TRACECTL_QUIET", path), (None, self.d.sock),
                          ("TRACECTL_DISABLE", path)):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                if env:
                    os.environ[env] = "1"
                try:
                    tc = tracectl.open(session="warn", socket=sock)
                finally:
                    if env:
                        del os.environ[env]
            tc.close()
            self.assertEqual(w, [], env or "online")

    def test_drops_counted_with_the_daemon_stopped(self):
        tc = self.open("stopped", ring_entries=64)
        for _ in range(50):
            with tc.op("kept"):
                pass
        tc.flush(timeout=10)
        sid = tc.session_id
        self.d.stop(signal.SIGKILL)
        st = tc.flush(timeout=10)  # the connection is gone: a status, no exception
        self.assertFalse(st["ok"])
        self.assertEqual(st["error"].errno, errno.ENOTCONN)
        for _ in range(200):
            with tc.op("lost"):
                pass
        self.assertEqual(tc.recorded, 250)
        # The library's writer thread discards what the rings hold once it knows the
        # connection is gone (each flush interval): wait for that event, 10 s at most.
        deadline = time.monotonic() + 10
        while tc.dropped < 200 and time.monotonic() < deadline:
            time.sleep(0.005)
        self.assertEqual(tc.dropped, 200)
        with self.assertRaises(tracectl.Error):
            tc.flush(timeout=10, strict=True)
        st = tc.close()
        self.assertFalse(st["ok"])
        self.assertEqual((st["recorded"], st["dropped"]), (250, 200))
        self.assertEqual(tc.dropped, 200)
        self.d.start()
        self.assertEqual(self.d.rows(sid, "SELECT op, count(*) FROM trace GROUP BY op"),
                         [("kept", 50)])

    def test_threads_record_exact_counts(self):
        tc = self.open("threads")

        def work(n):
            for _ in range(1000):
                with tc.op("t%d" % n):
                    pass
        ts = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        tc.close()
        rep = self.d.report("threads")
        self.assertEqual(sorted((o["op"], o["calls"]) for o in rep["ops"]),
                         [("t0", 1000), ("t1", 1000), ("t2", 1000), ("t3", 1000)])
        self.assertEqual(rep["session"]["dropped"], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
