"""The CLI's persistent compilation cache and its "compiling..." status (issue 17 item 8).

Speed is measured in bench/startup.py, not here."""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from jaxmodel.compile_cache import ENV, CompileStatus, cache_dir, show_compile_status

CONSOLE_SCRIPT = Path(sys.executable).parent / "jaxmodel"


def test_cache_dir_follows_xdg_and_can_be_moved_or_turned_off(tmp_path):
    home = Path.home()
    assert cache_dir({}) == home / ".cache" / "jaxmodel" / "jax"
    assert cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "jaxmodel" / "jax"
    assert cache_dir({"XDG_CACHE_HOME": "x", ENV: str(tmp_path / "c")}) == tmp_path / "c"
    for off in ("0", "off", "OFF", "false", "no", ""):
        assert cache_dir({ENV: off}) is None


def test_the_suite_never_uses_the_user_cache():
    assert os.environ[ENV] and Path(os.environ[ENV]) != Path.home() / ".cache" / "jaxmodel"


def _run(args, env):
    return subprocess.run([str(CONSOLE_SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=600)


# A command that compiles: a search of the seed model (eval answers on the host,
# with no program, since issue 26).
SEARCH = ["best", "--model", "seed", "--num-gpus", "64", "--format", "json"]


@pytest.mark.slow
def test_console_script_fills_the_cache_under_xdg_cache_home(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    result = _run(SEARCH, env)
    assert result.returncode == 0, result.stderr
    entries = list((tmp_path / "xdg" / "jaxmodel" / "jax").iterdir())
    assert any(p.name.endswith("-cache") for p in entries)
    # not a terminal: no status written, stdout is the JSON document alone
    assert "compiling" not in result.stderr + result.stdout
    env[ENV] = "0"
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg2")
    assert _run(SEARCH, env).returncode == 0
    assert not (tmp_path / "xdg2").exists()


@pytest.mark.slow
def test_a_truncated_cache_entry_is_recompiled_silently(tmp_path):
    """jax writes an entry in place, so a full disk or a file size limit can
    leave it cut short; the next run recompiles it with no warning on stderr."""
    env = {k: v for k, v in os.environ.items() if k != ENV}
    env["XDG_CACHE_HOME"] = str(tmp_path / "xdg")
    first = _run(SEARCH, env)
    assert first.returncode == 0, first.stderr
    entries = [p for p in (tmp_path / "xdg" / "jaxmodel" / "jax").iterdir()
               if p.name.endswith("-cache")]
    assert entries
    for entry in entries:
        entry.write_bytes(entry.read_bytes()[: entry.stat().st_size // 2])
    again = _run(SEARCH, env)
    assert again.returncode == 0 and again.stderr == ""
    assert json.loads(again.stdout)["top"] == json.loads(first.stdout)["top"]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_status_shows_while_compiling_and_is_erased():
    status = CompileStatus(io.StringIO())
    status.on_duration("/jax/core/compile/jaxpr_to_mlir_module_duration", 0.1)
    assert status.stream.getvalue() == "compiling..."
    status.on_duration("/jax/core/compile/backend_compile_duration", 0.5)
    assert status.stream.getvalue() == "compiling...\r\033[K"
    status.on_event("/jax/compilation_cache/cache_hits")  # nothing shown: nothing to erase
    assert status.stream.getvalue() == "compiling...\r\033[K"
    assert show_compile_status(io.StringIO()) is None  # not a terminal


def test_status_on_a_real_compile():
    from jax import monitoring

    term = _Terminal()
    status = show_compile_status(term)
    try:
        jax.block_until_ready(jax.jit(lambda x: jnp.sin(x) * 3.25 + 1)(jnp.arange(7.0)))
    finally:
        monitoring.unregister_event_duration_listener(status.on_duration)
        monitoring.unregister_event_listener(status.on_event)
    assert term.getvalue().startswith("compiling...")
    assert term.getvalue().endswith("\r\033[K")
