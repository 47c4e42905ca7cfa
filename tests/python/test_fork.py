"""test_fork.py — fork of a Python process after tracectl.open().

The C library's fork rule (tracectl.h): the child records as a new process of
the same session, the parent's connection stays intact. A test of its own,
because it needs libtracectl's fork fix (issue 9, item 3).
"""

import os
import unittest

import harness
import tracectl


class Fork(harness.DaemonTest):
    def test_fork_after_open(self):
        """The C library's fork rule (tracectl.h): the child is a new process of the same
        session, the parent's connection stays intact. Needs the fork fix in libtracectl."""
        tc = self.open("fork", rank=0)
        for _ in range(10):
            with tc.op("before"):
                pass
        tc.flush(timeout=10)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                for _ in range(100):
                    with tc.op("child"):
                        pass
                tc.close()
                code = 0 if tc.dropped == 0 else 2
            except BaseException as e:  # the parent's assertion names the child's failure
                os.write(2, ("child: %r\n" % (e,)).encode())
            finally:
                os._exit(code)
        for _ in range(20):
            with tc.op("parent"):
                pass
        _, st = os.waitpid(pid, 0)
        self.assertEqual(os.waitstatus_to_exitcode(st), 0)
        tc.close()
        self.assertEqual(tc.dropped, 0)
        s = self.d.session("fork")
        self.assertEqual((s["processes"], s["entries"], s["dropped"]), (2, 130, 0))
        self.assertEqual(sorted(self.d.rows(s["id"], "SELECT op, count(*) FROM trace GROUP BY op")),
                         [("before", 10), ("child", 100), ("parent", 20)])


if __name__ == "__main__":
    unittest.main(verbosity=2)
