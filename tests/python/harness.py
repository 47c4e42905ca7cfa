"""harness.py — the Python tests' real daemon, as tests/helpers/harness.c does it.

A Daemon runs build/tracectld on a socket and data dir of its own under a
fresh temporary directory; cli() runs build/tracectl against it; rows() reads a
session's SQLite file directly (the daemon's WAL allows a reader beside it).
DaemonTest is a TestCase with a Daemon of its own per test (self.d).
Paths come from the environment ctest sets: TRACECTLD_BIN, TRACECTL_BIN.
"""

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import tempfile
import time
import unittest

TRACECTLD = os.environ.get("TRACECTLD_BIN", "build/tracectld")
TRACECTL = os.environ.get("TRACECTL_BIN", "build/tracectl")
# The blocks format's SQLite module, built next to the daemon.
BLOCKS_SO = os.path.join(os.path.dirname(TRACECTLD), "tracectl_blocks.so")
# TRACECTL_TEST_STORAGE=rows: every daemon writes the row format (as harness.c).
STORAGE = os.environ.get("TRACECTL_TEST_STORAGE", "")


class Daemon:
    def __init__(self, *extra):
        self.dir = tempfile.mkdtemp(prefix="tcpy.")
        self.sock = os.path.join(self.dir, "tracectl.sock")
        self.data = os.path.join(self.dir, "data")
        self.extra = list(extra)
        self.proc = None
        self.start()

    def start(self):
        """Starts the daemon and returns once it answers on its socket (5 s at most)."""
        storage = ["--storage-format", STORAGE] if STORAGE else []
        self.proc = subprocess.Popen([TRACECTLD, "--socket", self.sock, "--data-dir", self.data,
                                      "--log-level", "warn", *storage, *self.extra])
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                s.connect(self.sock)
                return
            except OSError:
                if self.proc.poll() is not None:
                    raise RuntimeError("tracectld exited at start-up")
                time.sleep(0.02)  # readiness poll, as harness.c does
            finally:
                s.close()
        raise RuntimeError("tracectld did not answer within 5 s")

    def stop(self, sig=signal.SIGTERM):
        if self.proc is not None:
            self.proc.send_signal(sig)
            rc = self.proc.wait(10)
            self.proc = None
            return rc
        return None

    def cleanup(self):
        if self.proc is not None:
            self.stop(signal.SIGKILL)
        shutil.rmtree(self.dir, ignore_errors=True)

    def env(self, **more):
        """The environment for a producer process talking to this daemon."""
        e = dict(os.environ, TRACECTL_SOCKET=self.sock)
        e.update({k: str(v) for k, v in more.items()})
        return e

    def cli(self, *args, check=True):
        r = subprocess.run([TRACECTL, "--socket", self.sock, *args], capture_output=True,
                           text=True)
        if check and r.returncode != 0:
            raise AssertionError("tracectl %s: exit %d: %s" % (args, r.returncode, r.stderr))
        return r.stdout

    def report(self, session):
        return json.loads(self.cli("report", str(session), "--json"))

    def sessions(self):
        return json.loads(self.cli("sessions", "--json"))

    def session(self, name):
        """The catalog row of the newest session named name."""
        rows = [s for s in self.sessions() if s["name"] == name]
        if not rows:
            raise AssertionError("no session %r" % name)
        return max(rows, key=lambda s: s["id"])

    def rows(self, session_id, sql, args=()):
        path = os.path.join(self.data, "sessions", "%d.db" % session_id)
        db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
        try:
            # A blocks file (the default format) reads through the module the README
            # loads; a row file needs nothing.
            if os.path.exists(BLOCKS_SO):
                db.enable_load_extension(True)
                db.load_extension(BLOCKS_SO)
            return db.execute(sql, args).fetchall()
        finally:
            db.close()


class DaemonTest(unittest.TestCase):
    """A test case whose every test has a daemon of its own, self.d, removed after it."""

    def setUp(self):
        self.d = Daemon()
        self.addCleanup(self.d.cleanup)

    def open(self, session, **kw):
        """tracectl.open(session=session, **kw) on this test's daemon (unless kw names a socket)."""
        import tracectl
        kw.setdefault("socket", self.d.sock)
        return tracectl.open(session=session, **kw)
