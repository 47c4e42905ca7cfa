"""test_checksum.py — checksums of an op's output from Python, end to end.

tracectl.checksum() against the published FNV-1a 64 vectors and this file's
own implementation; record(checksum=) and Region.checksum reach the session
file's entry_ext table (read with sqlite3) and `tracectl diff --divergence`
names the entry whose checksum differs between two runs.
"""

import array
import json
import os
import subprocess
import unittest

import harness
import tracectl


def fnv1a64(data, h=0xcbf29ce484222325):
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xffffffffffffffff
    return h


class Checksum(harness.DaemonTest):
    def test_checksum_is_fnv1a_64_over_any_buffer(self):
        # the published vectors (draft-eastlake-fnv), then random bytes in several buffers
        self.assertEqual(tracectl.checksum(b""), 0xcbf29ce484222325)
        self.assertEqual(tracectl.checksum(b"a"), 0xaf63dc4c8601ec8c)
        self.assertEqual(tracectl.checksum(b"foobar"), 0x85944171f73967e8)
        data = os.urandom(200000)  # above the size where the GIL is released
        self.assertEqual(tracectl.checksum(data), fnv1a64(data))
        self.assertEqual(tracectl.checksum(bytearray(data)), fnv1a64(data))
        self.assertEqual(tracectl.checksum(memoryview(data)[10:20]), fnv1a64(data[10:20]))
        floats = array.array("d", [1.5, -2.25, 3.0])
        self.assertEqual(tracectl.checksum(floats), fnv1a64(floats.tobytes()))
        self.assertEqual(tracectl.checksum(data[100:], start=tracectl.checksum(data[:100])),
                         fnv1a64(data))
        with self.assertRaises(TypeError):
            tracectl.checksum("text")
        with self.assertRaises(BufferError):
            tracectl.checksum(memoryview(data)[::2])  # not contiguous
        with self.assertRaises(OverflowError):
            tracectl.checksum(b"", start=-1)

    def run_job(self, session, salt):
        tc = tracectl.open(session=session, rank=0, world=1, socket=self.d.sock, blocking=True)
        for step in range(3):
            tc.record("load", tracectl.now_ns(), 10, checksum=(2 ** 64 - 1) if step == 0 else step)
            with tc.op("matmul") as r:
                r.checksum = tracectl.checksum(b"out%d%s" % (step, salt if step == 2 else b""))
            with tc.op("plain"):
                pass
            with tc.op("cleared") as r:
                r.checksum = 5
                r.checksum = None
            tc.step()
        tc.close()
        self.assertEqual(tc.dropped, 0)
        return self.d.session(session)["id"]

    def test_record_and_region_carry_the_checksum(self):
        sid = self.run_job("ck", b"")
        rows = self.d.rows(sid, "SELECT o.name, e.step, x.checksum FROM entries e "
                           "JOIN ops o ON o.id = e.op_id "
                           "LEFT JOIN entry_ext x ON x.entry_rowid = e.rowid ORDER BY e.rowid")
        got = {(name, step): (None if c is None else c & 0xffffffffffffffff)
               for name, step, c in rows}
        self.assertEqual(len(rows), 12)
        for step in range(3):
            self.assertEqual(got[("load", step)], (2 ** 64 - 1) if step == 0 else step)
            self.assertEqual(got[("matmul", step)], fnv1a64(b"out%d" % step))
            self.assertIsNone(got[("plain", step)])
            self.assertIsNone(got[("cleared", step)])

    def test_divergence_names_the_entry_that_differs(self):
        self.run_job("good", b"")
        self.run_job("bad", b"!")
        r = subprocess.run([harness.TRACECTL, "--socket", self.d.sock, "diff", "good", "bad",
                            "--divergence", "--json"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 1, r.stderr)
        first = json.loads(r.stdout)["first"]
        # rank 0's sequence in start order: load, matmul, plain, cleared per step
        self.assertEqual((first["rank"], first["step"], first["position"], first["op"],
                          first["kind"]), (0, 2, 2 * 4 + 1, "matmul", "checksum"))
        self.assertEqual(first["checksum_a"], fnv1a64(b"out2"))
        self.assertEqual(first["checksum_b"], fnv1a64(b"out2!"))


if __name__ == "__main__":
    unittest.main()
