"""test_accounting.py — the status close() returns is the C library's own accounting.

Issue 26 item 4: per process, recorded = stored + dropped + unconfirmed, where
stored is what the daemon acknowledged, dropped what was never sent and
unconfirmed what was sent without an ack when the connection ended. The
status dict reads libtracectl's tc_close_stats(), and the daemon's report
(completeness.clients) holds the same figures, which it learned from the
client, plus how many of the unconfirmed it did store. Counts are the test's
own (its loops, the session file read with SQLite).
"""

import os
import signal
import time
import unittest

import harness
import tracectl


class Accounting(harness.DaemonTest):
    def setUp(self):
        super().setUp()
        old = os.environ.get("TRACECTL_CLOSE_TIMEOUT")
        os.environ["TRACECTL_CLOSE_TIMEOUT"] = "1"
        self.addCleanup(lambda: os.environ.pop("TRACECTL_CLOSE_TIMEOUT")
                        if old is None else os.environ.__setitem__("TRACECTL_CLOSE_TIMEOUT", old))

    def record(self, tc, name, n):
        for _ in range(n):
            with tc.op(name):
                pass

    def wait_ended(self, name, seconds=30):
        deadline = time.monotonic() + seconds
        while self.d.session(name)["state"] != "ended":
            self.assertLess(time.monotonic(), deadline, "session %s did not end" % name)
            time.sleep(0.05)
        return self.d.session(name)["id"]

    def test_stopped_close_status_is_what_the_daemon_reports(self):
        tc = tracectl.open(session="py-acct", socket=self.d.sock, rank=0, world=1)
        self.record(tc, "before", 500)
        st = tc.flush(timeout=30)
        self.assertEqual((st["ok"], st["stored"], st["unconfirmed"]), (True, 500, 0), st)
        os.kill(self.d.proc.pid, signal.SIGSTOP)
        try:
            self.record(tc, "during", 300)
            st = tc.close()  # times out after 1 s: the daemon is stopped
        finally:
            os.kill(self.d.proc.pid, signal.SIGCONT)
        self.assertFalse(st["ok"])
        self.assertEqual(st["recorded"], 800)
        self.assertEqual(st["recorded"], st["stored"] + st["dropped"] + st["unconfirmed"], st)
        self.assertEqual((st["stored"], st["dropped"], st["unconfirmed"]), (500, 0, 300), st)

        sid = self.wait_ended("py-acct")
        self.d.stop(signal.SIGTERM)  # everything it took is committed: the file is still
        entries = self.d.rows(sid, "SELECT count(*) FROM entries WHERE process_id = 1")[0][0]
        self.d.start()
        rows = self.d.report(sid)["completeness"]["clients"]
        self.assertEqual(len(rows), 1, rows)
        c = rows[0]
        self.assertTrue(c["final"], c)  # the bye went out with the counters
        self.assertEqual((c["recorded"], c["dropped"], c["acked"], c["unconfirmed"]),
                         (st["recorded"], st["dropped"], st["stored"], st["unconfirmed"]), c)
        self.assertEqual(c["stored"], entries)
        self.assertEqual(c["unconfirmed_stored"], entries - st["stored"])
        self.assertEqual(c["unconfirmed_stored"], 300)  # resumed, it stored all it was sent

    def test_offline_client_counts_what_it_recorded(self):
        tc = tracectl.open(session="py-offline", socket=os.path.join(self.d.dir, "none.sock"))
        self.assertFalse(tc.enabled)
        self.record(tc, "x", 631)
        self.assertEqual((tc.recorded, tc.dropped), (631, 631))
        st = tc.close()
        self.assertEqual((st["recorded"], st["dropped"], st["stored"], st["unconfirmed"]),
                         (631, 631, 0, 0), st)


if __name__ == "__main__":
    unittest.main()
