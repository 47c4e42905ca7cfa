"""test_install.py — the Python guide (docs/pytorch.md), as a new user follows it.

- A package without its C extension (a build tree configured but not built,
  or a copy of the .py files alone) fails to import with an ImportError that
  says how to build it, never as an empty namespace package.
- `cmake --install` of this build tree into a temporary prefix gives an
  importable package that records into a real daemon.
- The Python example of docs/pytorch.md, taken as written, runs against
  a real daemon and prints what the guide shows.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

import harness
import tracectl

SRC = os.path.dirname(os.path.abspath(os.environ["TRACECTL_EXAMPLES"]))
BUILD = os.path.dirname(os.path.abspath(os.path.dirname(tracectl.__path__[0])))


def python(code, pythonpath, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=pythonpath, **env), timeout=120)


class Install(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="tcinstall.")
        self.addCleanup(shutil.rmtree, self.tmp)

    def assert_clear_import_error(self, pythonpath):
        r = python("import tracectl", pythonpath)
        self.assertNotEqual(r.returncode, 0, "importing a package without its extension worked")
        self.assertIn("ImportError: tracectl: cannot load its C extension tracectl._tracectl",
                      r.stderr)
        self.assertIn("cmake --build build --target tracectl_python", r.stderr)

    def test_package_without_extension_fails_clearly(self):
        pkg = os.path.join(self.tmp, "tracectl")
        os.mkdir(pkg)
        for f in glob.glob(os.path.join(tracectl.__path__[0], "*.py")):
            shutil.copy(f, pkg)
        self.assert_clear_import_error(self.tmp)

    def test_configured_build_tree_fails_clearly(self):
        # configured, nothing built: the package's files are there, its extension is not
        build = os.path.join(self.tmp, "build")
        subprocess.run(["cmake", "-S", SRC, "-B", build, "-DBUILD_TESTING=OFF",
                        "-DPython3_EXECUTABLE=" + sys.executable],
                       check=True, capture_output=True, timeout=300)
        self.assertTrue(os.path.exists(os.path.join(build, "python", "tracectl", "__init__.py")))
        self.assert_clear_import_error(os.path.join(build, "python"))

    def test_cmake_install_gives_a_working_package(self):
        prefix = os.path.join(self.tmp, "prefix")
        r = subprocess.run(["cmake", "--install", BUILD, "--prefix", prefix],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        inits = glob.glob(os.path.join(prefix, "lib", "python3*", "*-packages", "tracectl",
                                       "__init__.py"))
        self.assertEqual(len(inits), 1, "one installed package")
        site = os.path.dirname(os.path.dirname(inits[0]))
        self.assertTrue(glob.glob(os.path.join(site, "tracectl", "_tracectl*.so")))
        d = harness.Daemon()
        self.addCleanup(d.cleanup)
        r = python("import tracectl\n"
                   "assert tracectl.__file__.startswith(%r), tracectl.__file__\n"
                   "tc = tracectl.open(session='installed', rank=0, world=1)\n"
                   "tc.record('x', 1, 2)\n"
                   "tc.close()\n"
                   "print(tc.recorded, tc.dropped)" % site, site, TRACECTL_SOCKET=d.sock)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "1 0\n")

    def test_readme_example_runs_as_written(self):
        with open(os.path.join(SRC, "docs", "pytorch.md"), encoding="utf-8") as f:
            readme = f.read()
        section = readme[readme.index("## Python and PyTorch"):]
        code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
        self.assertIn('tracectl.open(session="py-demo"', code)
        d = harness.Daemon()
        self.addCleanup(d.cleanup)
        r = python(code, os.environ["PYTHONPATH"], TRACECTL_SOCKET=d.sock)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, "recorded 9 dropped 0\n")  # 3 steps of 3 regions
        self.assertIn("train_step", d.cli("report", "py-demo"))


if __name__ == "__main__":
    unittest.main()
