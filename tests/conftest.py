import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# The CLI keeps jax's compilation cache in the user's cache directory; the
# suite (and every console script it starts) uses a scratch one instead, so
# tests never write there and start from an empty cache.
_COMPILE_CACHE = tempfile.mkdtemp(prefix="jaxmodel-test-compile-cache-")
os.environ["JAXMODEL_COMPILE_CACHE"] = _COMPILE_CACHE

# Every program the suite compiles is short (a few configurations, at most a
# small sweep), so it compiles with jaxmodel.xla_options' quick options, which
# the product itself uses for a program of up to QUICK_ROWS rows: through
# XLA_FLAGS, they reach the programs of this process and of every console script
# a test starts (a test that sets its own XLA_FLAGS leaves them out).  They change
# no HLO, only LLVM's code, to within 4 units in the last place
# (tests/test_xla_options.py, which compiles its reference with XLA's own
# defaults); the fast set took 185 s without them and 144 s with them on 2 cores
# (bench/README.md).  Set before jax is imported, which reads XLA_FLAGS once.
def _quick_xla_flags() -> str:
    from jaxmodel.xla_options import QUICK_OPTIONS

    def flag(name, value):
        return f"--{name}={str(value).lower() if isinstance(value, bool) else value}"

    return " ".join(flag(name, value) for name, value in QUICK_OPTIONS.items())


_QUICK_XLA_FLAGS = _quick_xla_flags()
if _QUICK_XLA_FLAGS not in os.environ.get("XLA_FLAGS", ""):  # once: workers inherit it
    os.environ["XLA_FLAGS"] = " ".join(filter(None, (os.environ.get("XLA_FLAGS"),
                                                     _QUICK_XLA_FLAGS)))


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_COMPILE_CACHE, ignore_errors=True)


# `make test` runs the suite in pytest-xdist workers.  A worker that dies
# (a signal inside jaxlib's native code: CI saw one segfault and one abort,
# each once, after more than half an hour in one process) fails only the test
# it was running, and that test is run once more in a fresh worker; a test
# that crashes twice fails.  Each such rerun is listed at the end of the run.
CRASH_RERUNS = 1
_crashes: dict[str, int] = {}


@pytest.hookimpl(optionalhook=True)
def pytest_handlecrashitem(crashitem, report, sched):
    _crashes[crashitem] = _crashes.get(crashitem, 0) + 1
    if _crashes[crashitem] <= CRASH_RERUNS:
        sched.mark_test_pending(crashitem)
        report.outcome = "rerun"


def pytest_report_teststatus(report, config):
    if report.outcome == "rerun":
        return "rerun", "R", ("RERUN", {"yellow": True})
    return None


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    for nodeid, count in _crashes.items():
        terminalreporter.write_line(
            f"worker crashed while running {nodeid} ({count} time(s); "
            f"rerun {min(count, CRASH_RERUNS)} time(s) in a fresh worker)",
            yellow=True)


# Each worker keeps every program it compiled (jax's caches and the engine's
# own); over the suite one grew past 10 GB, and three such workers on CI's
# 24 GB machine ran out (the kernel killed one).  After a test that leaves the
# worker above this resident size, its caches are dropped and the freed heap
# returned to the system; the next test that needs a program compiles it again.
RSS_LIMIT_BYTES = 4 * 2**30


def _resident_bytes() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def drop_compiled_programs() -> None:
    """Forget every compiled program in this process and give the memory back."""
    import ctypes
    import gc
    import sys

    jax = sys.modules.get("jax")
    if jax is not None:
        jax.clear_caches()
    for name in ("jaxmodel.sensitivity", "jaxmodel.solving"):
        module = sys.modules.get(name)
        if module is not None:
            module._CACHE.clear()
    for name, function in (("jaxmodel.api", "batched"), ("jaxmodel.reduce", "jitted")):
        module = sys.modules.get(name)
        if module is not None:
            getattr(module, function).cache_clear()
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


@pytest.fixture(autouse=True)
def _bounded_worker_memory():
    yield
    if _resident_bytes() > RSS_LIMIT_BYTES:
        drop_compiled_programs()


@pytest.fixture(autouse=True, scope="session")
def _no_compile_cache_in_this_process():
    """Tests that call ``jaxmodel.cli.main`` in this process leave jax's cache off.

    Turned on here it stays on for the rest of the session, and jax then
    serialises every one of the suite's hundreds of programs; one such CPU
    serialisation crashed the whole suite once in CI (a segfault inside jax's
    ``put_executable_and_time``).  The console scripts the tests start use the
    scratch cache above, and test_compile_cache checks the cache through them.
    """
    from unittest import mock

    with mock.patch("jaxmodel.cli.enable_compile_cache", lambda: None):
        yield

DATA = Path(__file__).parent / "data"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "reference"


@pytest.fixture(scope="session")
def seed_example() -> dict:
    return json.loads((DATA / "seed_example.json").read_text())
