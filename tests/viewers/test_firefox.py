"""test_firefox.py — `tracectl report --html` in Firefox (issue 31, beside test_html's Chromium).

A real daemon records tc_demo's job (4 ranks × 5 steps); the test writes
`report --html` and `report --json`, opens the page in Debian's firefox-esr,
headless, with every request sent to a proxy that refuses (127.0.0.1:9), and
drives it through Marionette, the remote protocol built into Firefox (a small
client here: length-prefixed JSON over a loopback socket; Debian packages no
geckodriver). After the page's script ran (body data-ready="1"), every heatmap
cell (data-rank, data-step, data-ns) must hold the step time of `report
--json`, every stacked-bar segment its rank's figure, the flame graph and the
sortable tables must be there; the screenshot (kept in the build tree as
firefox_artifacts/, not committed) must be a PNG of the window's size that is
not blank.
"""

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
import unittest
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))

import harness  # noqa: E402

FIREFOX = shutil.which("firefox-esr") or shutil.which("firefox")
TC_DEMO = os.environ.get("TC_DEMO_BIN", "build/tc_demo")
ARTIFACTS = os.environ.get("FIREFOX_ARTIFACTS", "firefox_artifacts")
RANKS, STEPS = 4, 5
WIDTH, HEIGHT = 1280, 900


class Marionette:
    """Just enough of Marionette: [0, id, command, params] → [1, id, error, result]."""

    def __init__(self, port: int, deadline: float):
        while True:
            try:
                self.s = socket.create_connection(("127.0.0.1", port), timeout=30)
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)  # Firefox starting: poll until the deadline
        self.buf = b""
        self.next_id = 0
        hello = self._read()
        assert hello.get("marionetteProtocol") == 3, hello

    def _read(self):
        while b":" not in self.buf:
            self._more()
        n, rest = self.buf.split(b":", 1)
        self.buf = rest
        while len(self.buf) < int(n):
            self._more()
        msg, self.buf = self.buf[:int(n)], self.buf[int(n):]
        return json.loads(msg)

    def _more(self):
        data = self.s.recv(65536)
        if not data:
            raise ConnectionError("Marionette closed the connection")
        self.buf += data

    def call(self, command, **params):
        self.next_id += 1
        body = json.dumps([0, self.next_id, command, params]).encode()
        self.s.sendall(b"%d:%s" % (len(body), body))
        while True:
            kind, mid, err, result = self._read()
            if mid == self.next_id:
                if err:
                    raise AssertionError("%s: %s" % (command, err))
                return result

    def script(self, js):
        return self.call("WebDriver:ExecuteScript", script=js, args=[])["value"]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def png_size_and_colours(data):
    """(width, height, distinct byte values of the decoded rows): a blank page has few."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, w, h = 8, b"", 0, 0
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    return w, h, len(set(zlib.decompress(idat)))


@unittest.skipUnless(FIREFOX, "firefox-esr is not installed (scripts/deps.sh installs it)")
class FirefoxReport(unittest.TestCase):
    def setUp(self):
        self.d = harness.Daemon()
        self.tmp = tempfile.mkdtemp(prefix="tcfirefox.")
        self.ff = None
        self.m = None

    def tearDown(self):
        if self.m is not None:
            self.m.s.close()
        if self.ff is not None:
            self.ff.kill()
            self.ff.wait(30)
        self.d.cleanup()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def start_firefox(self):
        port = free_port()
        profile = os.path.join(self.tmp, "profile")
        os.mkdir(profile)
        prefs = {"marionette.port": port, "network.proxy.type": 1,
                 "network.proxy.http": "127.0.0.1", "network.proxy.http_port": 9,
                 "network.proxy.ssl": "127.0.0.1", "network.proxy.ssl_port": 9,
                 "network.proxy.allow_hijacking_localhost": True,
                 "network.proxy.no_proxies_on": "",
                 "browser.shell.checkDefaultBrowser": False,
                 "datareporting.policy.dataSubmissionEnabled": False,
                 "toolkit.telemetry.reportingpolicy.firstRun": False,
                 "app.update.disabledForTesting": True}
        with open(os.path.join(profile, "user.js"), "w") as f:
            for k, v in prefs.items():
                f.write("user_pref(%s, %s);\n" % (json.dumps(k), json.dumps(v)))
        self.ff = subprocess.Popen([FIREFOX, "--headless", "--marionette", "--no-remote",
                                    "--profile", profile, "--width", str(WIDTH),
                                    "--height", str(HEIGHT)],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   env=dict(os.environ, MOZ_HEADLESS="1"))
        return Marionette(port, time.monotonic() + 60)

    def test_report_html_in_firefox(self):
        r = subprocess.run([TC_DEMO, "--socket", self.d.sock, "--session", "demo", "--ranks",
                            str(RANKS), "--steps", str(STEPS), "--slow-ms", "1"],
                           capture_output=True, text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        page = os.path.join(self.tmp, "demo.html")
        self.d.cli("report", "demo", "--html", page)
        rep = self.d.report("demo")
        want = {(r, s["step"]): ns for s in rep["steps"] for r, ns in s["times_ns"]}
        self.assertEqual(len(want), RANKS * STEPS)

        m = self.m = self.start_firefox()
        m.call("WebDriver:NewSession", capabilities={})
        m.call("WebDriver:SetWindowRect", width=WIDTH, height=HEIGHT)
        m.call("WebDriver:Navigate", url="file://" + page)
        deadline = time.monotonic() + 30
        while m.script("return document.body.dataset.ready || ''") != "1":
            self.assertLess(time.monotonic(), deadline, "the page's script did not finish")
            time.sleep(0.1)  # poll the page until its script has drawn
        cells = m.script("return Array.from(document.querySelectorAll('i[data-rank][data-step]'))"
                         ".map(e => [+e.dataset.rank, +e.dataset.step, e.dataset.ns])")
        got = {(r, s): int(ns) for r, s, ns in cells}
        self.assertEqual(got, want)
        segs = m.script("return Array.from(document.querySelectorAll('div.seg[data-key]'))"
                        ".map(e => [+e.dataset.rank, e.dataset.key, e.dataset.ns])")
        ranks = {row["rank"]: row for row in rep["ranks"]}
        self.assertEqual(len(segs), RANKS * 5)
        for rank, key, ns in segs:
            self.assertEqual(int(ns), ranks[rank][key], (rank, key))
        # the verdict first, a flame graph, and tables a click sorts
        self.assertTrue(m.script("return document.body.textContent.length"))
        self.assertGreater(m.script("return document.querySelectorAll('table').length"), 1)
        self.assertGreater(m.script("return document.querySelectorAll('svg, canvas, "
                                    "[class*=flame], [id*=flame]').length"), 0)
        # nothing left the page: every resource it loaded is the file itself
        self.assertEqual(m.script("return performance.getEntriesByType('resource').length"), 0)
        png = base64.b64decode(m.call("WebDriver:TakeScreenshot")["value"])
        w, h, colours = png_size_and_colours(png)
        self.assertGreater(w * h, 0)
        self.assertGreater(colours, 16, "the screenshot is blank")
        os.makedirs(ARTIFACTS, exist_ok=True)
        with open(os.path.join(ARTIFACTS, "report_%dx%d.png" % (WIDTH, HEIGHT)), "wb") as f:
            f.write(png)
        m.call("WebDriver:DeleteSession")


if __name__ == "__main__":
    unittest.main()
