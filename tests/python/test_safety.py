"""test_safety.py — the tool never fails the job, and never sends what the daemon must refuse.

A daemon stopped (SIGSTOP) or killed under a client: close() and flush() return a
status with the counts and the error instead of raising, and raise only with
strict=True. Bad arguments (an op id never defined, names, categories, meta,
ranks, session names over the protocol's limits, NULs) are refused at the call
with a short message that names the limit, and the entries recorded around
them are stored. Counts are the test's own.
"""

import errno
import json
import os
import signal
import subprocess
import sys
import time
import unittest

import harness
import tracectl

try:
    import torch  # noqa: F401
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

# A message quotes at most 40 characters of the value: a readable line.
MAX_MESSAGE = 300

# A training job's end: the bridge's close, then a checkpoint. It records 20 entries,
# says "ready" and waits for a line on stdin (the test kills the daemon meanwhile).
JOB = """
import json, sys
import tracectl.torch as tct
tc = tct.open(session="job", device="cpu:0")
for _ in range(20):
    with tc.op("train_step"):
        pass
assert tc.flush(timeout=30)["ok"]
print("ready", flush=True)
sys.stdin.readline()
st = tct.close(strict=sys.argv[1] == "strict")
open(sys.argv[2], "w").write("checkpoint")
print(json.dumps({k: (v if k != "error" else v is not None) for k, v in st.items()}))
"""


class Safety(harness.DaemonTest):
    def count(self, session):
        sid = self.d.session(session)["id"]
        return self.d.rows(sid, "SELECT count(*) FROM trace")[0][0]

    def wait_count(self, session, n, seconds=10):
        """The session's stored entries once they reach n (polled, `seconds` at most)."""
        deadline = time.monotonic() + seconds
        got = self.count(session)
        while got < n and time.monotonic() < deadline:
            time.sleep(0.02)
            got = self.count(session)
        return got

    def record(self, tc, name, n):
        for _ in range(n):
            with tc.op(name):
                pass

    def check_identity(self, st):
        """recorded = stored + dropped + unconfirmed."""
        self.assertEqual(st["recorded"], st["stored"] + st["dropped"] + st["unconfirmed"], st)

    # ---- never fail the job ------------------------------------------------------

    def stopped_close(self, session, strict):
        """A client with 100 entries acked and 40 more recorded while the daemon is stopped."""
        tc = self.open(session)
        self.record(tc, "before", 100)
        st = tc.flush(timeout=30)
        self.assertEqual((st["ok"], st["stored"], st["unconfirmed"]), (True, 100, 0), st)
        os.kill(self.d.proc.pid, signal.SIGSTOP)
        self.addCleanup(lambda: self.d.proc and os.kill(self.d.proc.pid, signal.SIGCONT))
        self.record(tc, "during", 40)
        t0 = time.monotonic()
        if strict:
            with self.assertRaises(tracectl.Error) as cm:
                tc.close(strict=True)
            st = cm.exception.status
        else:
            st = tc.close()
        elapsed = time.monotonic() - t0
        os.kill(self.d.proc.pid, signal.SIGCONT)
        return tc, st, elapsed

    def test_close_returns_the_status_while_the_daemon_is_stopped(self):
        tc, st, elapsed = self.stopped_close("stopped", strict=False)
        self.assertTrue(tc.closed)
        self.assertFalse(st["ok"])
        self.assertEqual(st["error"].errno, errno.ETIMEDOUT)
        self.assertEqual(st["recorded"], 140)
        self.assertEqual(st["dropped"], 0)
        # The 100 were acknowledged; the 40 were sent without an ack: not known
        # stored, not known lost.
        self.assertEqual((st["stored"], st["unconfirmed"]), (100, 40))
        self.check_identity(st)
        self.assertLess(elapsed, 30)
        # Resumed, the daemon stores what the socket held: all 140.
        self.assertEqual(self.wait_count("stopped", 140), 140)
        # A second close returns the same status.
        self.assertEqual(tc.close(), st)

    def test_close_strict_raises_while_the_daemon_is_stopped(self):
        _, st, _ = self.stopped_close("stopped-strict", strict=True)
        self.assertFalse(st["ok"])
        self.assertEqual(st["error"].errno, errno.ETIMEDOUT)
        self.assertEqual(st["recorded"], 140)

    def test_flush_returns_the_status_while_the_daemon_is_stopped(self):
        tc = self.open("flush-stopped")
        self.record(tc, "x", 10)
        os.kill(self.d.proc.pid, signal.SIGSTOP)
        try:
            st = tc.flush(timeout=0.5)
            self.assertFalse(st["ok"])
            self.assertEqual(st["error"].errno, errno.ETIMEDOUT)
            self.assertEqual((st["recorded"], st["stored"], st["unconfirmed"]), (10, 0, 10))
            with self.assertRaises(tracectl.Error) as cm:
                tc.flush(timeout=0.5, strict=True)
            self.assertEqual(cm.exception.errno, errno.ETIMEDOUT)
            self.assertEqual(cm.exception.status["recorded"], 10)
        finally:
            os.kill(self.d.proc.pid, signal.SIGCONT)
        st = tc.flush(timeout=30)
        self.assertEqual((st["ok"], st["stored"], st["unconfirmed"]), (True, 10, 0), st)
        self.assertEqual(tc.close()["ok"], True)

    def test_close_returns_the_status_after_the_daemon_is_killed(self):
        tc = self.open("killed")
        self.record(tc, "kept", 50)
        self.assertTrue(tc.flush(timeout=30)["ok"])
        self.d.stop(signal.SIGKILL)
        self.record(tc, "lost", 30)
        st = tc.close()
        self.assertFalse(st["ok"])
        self.assertIsInstance(st["error"], tracectl.Error)
        self.assertEqual(st["recorded"], 80)
        self.check_identity(st)
        # The 50 were acknowledged before the kill; the 30 are lost or unconfirmed.
        self.assertEqual(st["stored"], 50)
        self.assertEqual(st["dropped"] + st["unconfirmed"], 30)

    def test_close_strict_raises_after_the_daemon_is_killed(self):
        tc = self.open("killed-strict")
        self.record(tc, "kept", 5)
        self.d.stop(signal.SIGKILL)
        with self.assertRaises(tracectl.Error) as cm:
            tc.close(strict=True)
        self.assertEqual(cm.exception.status["recorded"], 5)
        self.assertTrue(tc.closed)

    def test_with_block_end_never_raises(self):
        with self.open("with") as tc:
            self.record(tc, "x", 3)
            self.d.stop(signal.SIGKILL)
        self.assertTrue(tc.closed)
        self.assertFalse(tc.close()["ok"])

    def torch_job(self, mode):
        """Runs JOB, kills the daemon once it is ready; (exit status, stdout, checkpoint made)."""
        ckpt = os.path.join(self.d.dir, "ckpt")
        p = subprocess.Popen([sys.executable, "-c", JOB, mode, ckpt], env=self.d.env(),
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        self.assertEqual(p.stdout.readline(), "ready\n")
        self.d.stop(signal.SIGKILL)
        out, err = p.communicate("go\n", timeout=60)
        return p.returncode, out, err, os.path.exists(ckpt)

    @unittest.skipUnless(HAVE_TORCH, "needs torch")
    def test_torch_bridge_close_lets_the_job_checkpoint(self):
        rc, out, err, ckpt = self.torch_job("default")
        self.assertEqual(rc, 0, err)
        self.assertTrue(ckpt)
        st = json.loads(out)
        self.assertEqual((st["ok"], st["error"], st["recorded"], st["stored"]),
                         (False, True, 20, 20), st)

    @unittest.skipUnless(HAVE_TORCH, "needs torch")
    def test_torch_bridge_close_strict_raises(self):
        rc, out, err, ckpt = self.torch_job("strict")
        self.assertEqual(rc, 1)
        self.assertIn("tracectl.Error", err)
        self.assertFalse(ckpt)

    # ---- never send what the daemon must refuse -------------------------------------

    def test_undefined_op_id_is_refused_and_later_entries_stored(self):
        tc = self.open("ids")
        a = tc.op_id("a")
        b = tc.op_id("b")
        t = tracectl.now_ns()
        for i in range(5):
            tc.record(a, t + i, 1)
        for bad in (99999, b + 1, 0):
            with self.subTest(bad=bad):
                with self.assertRaises(ValueError) as cm:
                    tc.record(bad, t, 1)
                msg = str(cm.exception)
                self.assertIn("op id %d" % bad, msg)
                self.assertIn("op_id()", msg)
                self.assertLessEqual(len(msg), MAX_MESSAGE)
        for i in range(7):
            tc.record(b, t + i, 1)
        st = tc.close()
        self.assertEqual((st["ok"], st["recorded"], st["stored"], st["dropped"]),
                         (True, 12, 12, 0), st)
        sid = self.d.session("ids")["id"]
        self.assertEqual(self.d.rows(sid, "SELECT op, count(*) FROM trace GROUP BY op ORDER BY op"),
                         [("a", 5), ("b", 7)])

    def test_bad_arguments_name_their_limit(self):
        tc = self.open("limits")
        huge = "n" * (10 << 20)
        bad = [
            (lambda: tc.op(huge), ValueError, ["op name", "10485760 bytes", "1..1024"]),
            (lambda: tc.op_id(""), ValueError, ["op name", "0 bytes", "1..1024"]),
            (lambda: tc.record(huge, 1, 1), ValueError, ["op name", "1..1024"]),
            (lambda: tc.op("a\0b"), ValueError, ["op name", "NUL"]),
            (lambda: tc.op("x", category="c" * 33), ValueError,
             ["category", "33 bytes", "1..32"]),
            (lambda: tc.record("x", 1, 1, category="c\0"), ValueError, ["category", "NUL"]),
            (lambda: tc.record("x", 1, 1, device="d" * 1025), ValueError,
             ["device", "1025 bytes", "0..1024"]),
            (lambda: tc.meta("k" * 1025, 1), ValueError, ["meta key", "1025 bytes", "1..1024"]),
            (lambda: tc.meta("", 1), ValueError, ["meta key", "1..1024"]),
            (lambda: tc.meta("k\0", 1), ValueError, ["meta key", "NUL"]),
            (lambda: tc.meta("k", huge), ValueError, ["meta value", "0..1024"]),
            (lambda: tc.meta("k", "v\0"), ValueError, ["meta value", "NUL"]),
            (lambda: tc.meta("k", 2**63), OverflowError, ["meta value", "int64"]),
            (lambda: tc.meta("k", [1]), TypeError, ["meta value", "list"]),
            (lambda: self.open("s" * 257), ValueError, ["session name", "257 bytes", "1..256"]),
            (lambda: self.open(""), ValueError, ["session name", "1..256"]),
            (lambda: self.open("a\0b"), ValueError, ["session name", "NUL"]),
            (lambda: self.open("r", rank=-1, world=2), ValueError, ["rank -1", "0 .. 2**31-1"]),
            (lambda: self.open("r", rank=5, world=2), ValueError,
             ["rank 5", "world 2", "0 <= rank < world"]),
            (lambda: self.open("r", rank=0, world=0), ValueError, ["world 0", "1 .. 2**31-1"]),
            (lambda: self.open("r", rank=2**31), ValueError, ["rank", "2**31-1"]),
            (lambda: self.open("r", device="d" * 1025), ValueError, ["device", "0..1024"]),
        ]
        for i, (call, exc, words) in enumerate(bad):
            with self.subTest(i=i, words=words):
                with self.assertRaises(exc) as cm:
                    call()
                msg = str(cm.exception)
                self.assertLessEqual(len(msg), MAX_MESSAGE, msg[:400])
                for w in words:
                    self.assertIn(w, msg)
        os.environ["TRACECTL_SESSION"] = "e" * 257
        try:
            with self.assertRaisesRegex(ValueError, r"^session name from \$TRACECTL_SESSION is "
                                        r"257 bytes: the limit is 1\.\.256 bytes$"):
                tracectl.open(socket=self.d.sock)
        finally:
            del os.environ["TRACECTL_SESSION"]
        # 1,024 distinct meta keys per process (PROTOCOL.md "Daemon limits"): the next is
        # refused here, not by the daemon ending the connection; a known key is free.
        for i in range(1024 - 2):  # "k" and "k" * 1024 are set below
            tc.meta("key%d" % i, i)
        tc.meta("k", "v" * 1024)
        tc.meta("k" * 1024, 1)
        tc.meta("key0", "again")
        with self.assertRaises(ValueError) as cm:
            tc.meta("one-more", 1)
        self.assertIn("1024 distinct keys", str(cm.exception))
        # Nothing was sent for them, and the connection still takes entries.
        self.record(tc, "ok", 3)
        st = tc.close()
        self.assertEqual((st["ok"], st["stored"]), (True, 3), st)
        self.assertEqual(self.count("limits"), 3)
        # Only this session was made: the refused open() calls sent no hello.
        self.assertEqual([s["name"] for s in self.d.sessions()], ["limits"])


if __name__ == "__main__":
    unittest.main(verbosity=2)
