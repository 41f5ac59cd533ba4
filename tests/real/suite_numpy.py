"""NumPy's own test suite (Debian's python3-numpy ships it), run by pytest, one test file a
program: arrays whose data buffers are malloc, calloc and realloc of every size (PyDataMem),
aligned and unaligned views, buffers handed between threads, masked arrays, linear algebra
through LAPACK, the random generators, file I/O and pickling; and test_mem_policy, which
compiles an extension that swaps NumPy's data allocator at run time and frees through the one
it replaced.

PYTHONMALLOC=malloc in every column (glibc's too), as for CPython's suite (suite_cpython.py):
every Python object is then a malloc as well, not only the arrays' data. The tests NumPy
marks slow are left out (-m "not slow", what np.test() runs by default): 1,270 of the 28,239
outside f2py and distutils, among them those that ask for 10-18 GiB free, two of which held
more than 9 GiB here with two files running at once.

A test file is one program, as an installed test is (suite_installed.py runs them, two at a
time, with a timeout, a fresh working directory and HOME each): pass when pytest exits 0,
skip when it collects nothing (5), fail otherwise, with pytest's FAILED and ERROR lines as
the detail. With -v pytest prints each test as it ends, so a file killed at its timeout hung
in the test after the last one printed.
"""
import glob
import os
import subprocess

from suite_installed import Suite

PYTHON = "/usr/bin/python3"
ROOT = "/usr/lib/python3/dist-packages/numpy"

# Every test file but those that only build extensions with a compiler (f2py's Fortran,
# distutils' flags).
EXCLUDE_DIRS = ("f2py/", "distutils/")

# Quick: ~25 s under glibc. The core types' tests that allocate the most, by kind: arrays
# and their operations, iterators over several arrays, ufuncs with buffering, regressions
# from bug reports (many of them leaks and frees of the wrong buffer), masked arrays, NaN
# functions; and FFTs from several threads at once (test_pocketfft).
QUICK = ["core/tests/test_numeric.py", "core/tests/test_regression.py",
         "core/tests/test_nditer.py", "core/tests/test_umath.py", "core/tests/test_einsum.py",
         "core/tests/test_scalarmath.py", "core/tests/test_item_selection.py",
         "core/tests/test_shape_base.py", "ma/tests/test_core.py",
         "lib/tests/test_nanfunctions.py", "lib/tests/test_arraypad.py",
         "fft/tests/test_pocketfft.py"]
QUICK_SUBSET = ["core/tests/test_regression.py", "core/tests/test_nditer.py",
                "core/tests/test_einsum.py", "fft/tests/test_pocketfft.py"]

# Test cases whose result depends on where the allocator puts an array, left out by pytest's
# --deselect. NumPy 1.24 runs a ufunc's SIMD loop only when the output lies 64 bytes or more
# from the input, its scalar loop otherwise, and the two can differ in the last bit: under
# glibc, np.arccos(0.5) into an output 32 bytes after its input is 0x1.0c152382d7366p+0, 48
# bytes or more 0x1.0c152382d7365p+0; np.power(10, 1.5) 56 bytes after is
# 0x1.f9f6e4990f227p+4, 64 or more ...228p+4. These three compare such results to the last bit,
# computed once from one array and once from others: allocators that place small blocks side
# by side fail the first (frugal, jemalloc and tcmalloc, with PYTHONMALLOC=malloc), and
# frugal's guarded and sampled blocks, placed where the countdown says, the second and the
# third now and then (np.exp's against np.ma.exp's: 1 ulp in 2 of 8 elements, once in several
# quick runs; passed when run again).
# test_new_policy runs all of NumPy's core and masked-array tests again, in its own process,
# under a data allocator of the test's: 6 minutes and a 17 GiB peak under glibc, for tests the
# suite runs anyway (test_mem_policy's other cases stay).
DESELECT = ["ma/tests/test_core.py::TestMaskedArrayArithmetic::test_basic_ufuncs",
            "ma/tests/test_core.py::TestUfuncs::test_testUfuncRegression",
            "core/tests/test_function_base.py::TestLogspace::test_start_stop_array",
            "core/tests/test_mem_policy.py::test_new_policy"]


class NumpySuite(Suite):
    def test_files(self):
        found = glob.glob(os.path.join(ROOT, "**", "tests", "test_*.py"), recursive=True)
        names = sorted(os.path.relpath(p, ROOT) for p in found)
        return {n: os.path.join(ROOT, n) for n in names if not n.startswith(EXCLUDE_DIRS)}

    def available(self):
        probe = subprocess.run([PYTHON, "-c", "import numpy, pytest, hypothesis"],
                               capture_output=True, text=True, check=False)
        if probe.returncode != 0 or not self.test_files():
            return ("numpy's tests, pytest or hypothesis are missing (apt-get install "
                    "python3-numpy python3-pytest python3-hypothesis)")
        return None

    def command(self, test):
        # Node ids relative to NumPy's directory, as DESELECT names them.
        deselect = [a for d in DESELECT if d.startswith(test + "::") for a in ("--deselect", d)]
        return ["env", "PYTHONMALLOC=malloc", PYTHON, "-m", "pytest", "-v", "-rfE",
                "-p", "no:cacheprovider", "-m", "not slow", "--rootdir", ROOT, *deselect,
                self.test_files()[test]]

    def run_one(self, test, env, outdir, label, timeout):
        res = super().run_one(test, env, outdir, label, timeout)
        log_path = os.path.join(outdir, f"{label}.logs", test + ".log")
        try:
            with open(log_path, errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            lines = []
        if res["status"] == "fail" and res["verdict"] == "exit 5":  # pytest: nothing to run
            res.update(status="skip", verdict="skipped")
        if res["status"] in ("fail", "timeout"):
            res["detail"] += [l[:200] for l in lines if l.startswith(("FAILED ", "ERROR "))][:5]
        return res

    def hung_case(self, test, lines, timeout, memory=False):
        why = "held over its memory bound" if memory else f"hung (no result after {timeout} s)"
        done = [l.split(" ", 1)[0] for l in lines if "::" in l and l.rstrip().endswith("%]")]
        return f"{why} after {done[-1]}" if done else f"{why} before its first test ended"


NUMPY = NumpySuite(
    "numpy", None, "python3-numpy", guard_every=1000,
    why="NumPy's own tests: array data buffers of every size by malloc, calloc and realloc, "
        "aligned views, masked arrays, LAPACK, random generators, file I/O, pickling, an "
        "extension that swaps NumPy's data allocator at run time; Python and C",
    full=None, exclude=[], quick=QUICK, quick_subset=QUICK_SUBSET,
)
