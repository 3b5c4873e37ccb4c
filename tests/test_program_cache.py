"""Lowered programs kept on disk (jaxmodel.program_cache, issue 26): a hit gives the
uncached path's outputs bit for bit, any change of key misses, and a damaged entry
is ignored.  Speed is measured in bench/first_answer.py, not here."""

import dataclasses
import functools

import jax
import numpy as np
import pytest

import jaxmodel
from jaxmodel import api, program_cache, sensitivity, solving
from jaxmodel.api import resolve_inputs
from jaxmodel.precision import computing
from jaxmodel.program import Plan
from jaxmodel.program_cache import (
    CachedProgram,
    digest_of,
    enable_program_cache,
    read_entry,
    write_entry,
)
from jaxmodel.searching import search
from jaxmodel.xla_options import quick_compile

N = 16


@pytest.fixture
def cache(tmp_path):
    """The program cache on in tmp_path for one test, then off again, with the
    in-process programs forgotten so that each test starts as a fresh process."""
    forget()
    directory = enable_program_cache(tmp_path)
    yield directory
    enable_program_cache(None)
    forget()


def forget():
    """Drop the in-process programs, as a fresh process starts."""
    api.batched.cache_clear()
    sensitivity._CACHE.clear()
    solving._CACHE.clear()


def seed_inputs(n=N):
    model = jaxmodel.get_model("seed")
    rng = np.random.default_rng(26)
    values = {"link_bandwidth_gb_s": rng.uniform(25, 900, n),
              "micro_batch": rng.integers(1, 8, n).astype(float)}
    arrays = resolve_inputs(model, values)
    return model, model.inputs_type(*(a.astype(np.float32) for a in arrays.values()))


@functools.cache
def reference():
    """The seed model over seed_inputs() by plain ``jax.jit``, no program cache involved."""
    model, flat = seed_inputs()
    with computing():
        jitted = jax.jit(jax.vmap(model.apply), compiler_options=quick_compile(True))
        return jax.device_get(jitted(flat))


def run_batched(model, flat):
    with computing():
        return jax.device_get(api.batched(model, quick=True)(flat))


def assert_identical(a, b):
    assert type(a) is type(b)
    for x, y in zip(a, b, strict=True):
        x, y = np.asarray(x), np.asarray(y)
        assert x.dtype == y.dtype and x.shape == y.shape
        np.testing.assert_array_equal(x, y)  # NaN equals NaN here


def entries(directory):
    return sorted(directory.glob("*.jaxprog")) if directory.exists() else []


def test_directory_follows_the_compile_cache_and_can_be_turned_off(tmp_path):
    try:
        assert enable_program_cache(tmp_path, {}) == tmp_path / "exported"
        assert program_cache.program_dir() == tmp_path / "exported"
        for off in ("0", "off", "no", ""):
            assert enable_program_cache(tmp_path, {program_cache.ENV: off}) is None
        assert enable_program_cache(None, {}) is None  # JAXMODEL_COMPILE_CACHE=0
        assert program_cache.program_dir() is None
    finally:
        enable_program_cache(None)


def test_a_hit_gives_the_uncached_outputs_bit_for_bit(cache):
    model, flat = seed_inputs()
    enable_program_cache(None)
    plain = run_batched(model, flat)
    assert_identical(plain, reference())
    api.batched.cache_clear()
    enable_program_cache(cache.parent)
    first = run_batched(model, flat)  # miss: exported and written
    assert len(entries(cache)) == 1
    api.batched.cache_clear()  # as a fresh process
    second = run_batched(model, flat)
    assert_identical(first, plain)
    assert_identical(second, plain)
    assert len(entries(cache)) == 1


def forbid_export(monkeypatch):
    def no_export(*args, **kwargs):
        raise AssertionError("traced and exported again where the entry should be read")

    monkeypatch.setattr(jax.export, "export", no_export)


def test_a_hit_neither_traces_nor_exports(cache, monkeypatch):
    model, flat = seed_inputs()
    run_batched(model, flat)
    api.batched.cache_clear()
    forbid_export(monkeypatch)
    run_batched(model, flat)


def test_sensitivities_hit_gives_the_uncached_columns(cache):
    request = {"inputs": {"link_bandwidth_gb_s": np.array([50.0, 400.0, 900.0])},
               "wrt": ["link_bandwidth_gb_s", "compute_tflops", "num_gpus"],
               "model": "seed"}
    enable_program_cache(None)
    plain = jaxmodel.sensitivities(**request)
    sensitivity._CACHE.clear()
    enable_program_cache(cache.parent)
    jaxmodel.sensitivities(**request)
    assert len(entries(cache)) == 1
    sensitivity._CACHE.clear()
    cached = jaxmodel.sensitivities(**request)
    assert cached.columns.keys() == plain.columns.keys()
    for name in plain.columns:
        np.testing.assert_array_equal(cached.columns[name], plain.columns[name], err_msg=name)
    for name in plain.values:
        np.testing.assert_array_equal(cached.values[name], plain.values[name])
    np.testing.assert_array_equal(cached.stepped_to["num_gpus"], plain.stepped_to["num_gpus"])
    np.testing.assert_array_equal(cached.valid, plain.valid)


@pytest.mark.slow
def test_solve_hit_gives_the_uncached_solution(cache):
    request = {"inputs": {"micro_batch": np.array([1.0, 2.0, 4.0])},
               "target": ("mfu_percent", 40.0), "vary": "link_bandwidth_gb_s",
               "model": "seed"}
    enable_program_cache(None)
    plain = jaxmodel.solve(**request)
    forget()
    enable_program_cache(cache.parent)
    jaxmodel.solve(**request)
    assert len(entries(cache)) == 1
    forget()
    cached = jaxmodel.solve(**request)
    for name in ("solved", "reached", "limit", "limit_at", "blocked", "start_value"):
        a, b = getattr(cached, name), getattr(plain, name)
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b, err_msg=name)


def seed_search(**changes):
    """A small search of the seed model (46 GPUs, idle allowed) with all three
    reducers, over chunks of 64 candidates on one device."""
    seed = jaxmodel.get_model("seed")
    values = dict(seed.defaults, model_params_b=13.0, num_gpus=46.0, hidden_dim=5120.0,
                  num_layers=40.0, seq_length=2048.0, link_bandwidth_gb_s=100.0)
    return search(seed, {**values, **changes}, global_batch=96, top=7, allow_idle=True,
                  group_by=("tensor_parallel",), chunk=64, devices=jax.devices()[:1],
                  pareto=("used_gpus", "throughput_tokens_s", True, False))


def assert_same_search(a, b):
    assert (a.candidates, a.valid, a.chunks) == (b.candidates, b.valid, b.chunks)
    for part in ("top", "per_group", "pareto"):
        x, y = getattr(a, part), getattr(b, part)
        assert x.keys() == y.keys()
        for name in x:
            assert x[name].dtype == y[name].dtype, (part, name)
            np.testing.assert_array_equal(x[name], y[name], err_msg=f"{part} {name}")


def test_search_hit_gives_the_uncached_result_without_tracing(cache, monkeypatch):
    enable_program_cache(None)
    plain = seed_search()
    assert plain.valid > 7 and plain.chunks > 1  # every chunk folds through the program
    enable_program_cache(cache.parent)
    first = seed_search()  # miss: exported and written
    assert len(entries(cache)) == 1

    def no_trace(*args, **kwargs):
        raise AssertionError("the reduce step was traced where the entry should be read")

    # a second process: a new Plan, which must not trace its step
    monkeypatch.setattr(Plan, "_reduce_fn", no_trace)
    second = seed_search()
    assert_same_search(first, plain)
    assert_same_search(second, plain)
    assert len(entries(cache)) == 1
    # another search (another fixed input, so other candidates' outputs) misses
    monkeypatch.undo()
    other = seed_search(link_bandwidth_gb_s=200.0)
    assert len(entries(cache)) == 2
    assert not np.array_equal(other.top["throughput_tokens_s"], plain.top["throughput_tokens_s"])


def test_a_search_the_key_cannot_fix_is_not_kept(cache):
    own = dataclasses.replace(jaxmodel.get_model("seed"), description="a caller's own variant")
    assert api.program_key(own) is None
    values = dict(own.defaults, num_gpus=46.0, hidden_dim=5120.0, num_layers=40.0,
                  seq_length=2048.0)
    search(own, values, global_batch=96, allow_idle=True, chunk=64, devices=jax.devices()[:1])
    assert entries(cache) == []


def test_a_changed_key_misses(cache, monkeypatch):
    model, flat = seed_inputs()
    run_batched(model, flat)
    assert len(entries(cache)) == 1
    # another batch size: another program
    api.batched.cache_clear()
    run_batched(model, seed_inputs(N + 1)[1])
    assert len(entries(cache)) == 2
    # the package's files changed (an edit to the model)
    api.batched.cache_clear()
    monkeypatch.setattr(program_cache, "source_digest", lambda: "0" * 64)
    run_batched(model, flat)
    assert len(entries(cache)) == 3
    # other XLA options
    api.batched.cache_clear()
    with computing():
        api.batched(model, quick=False)(flat)
    assert len(entries(cache)) == 4


def test_a_model_the_package_does_not_fix_is_never_kept(cache):
    model, flat = seed_inputs()
    own = dataclasses.replace(model, description="a caller's own variant")
    assert api.program_key(own) is None and api.program_key(model) == {"model": "seed"}
    run_batched(own, flat)
    assert entries(cache) == []


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "empty", "other key"])
def test_a_damaged_entry_is_ignored_and_rewritten(cache, damage, monkeypatch):
    model, flat = seed_inputs()
    plain = reference()
    run_batched(model, flat)
    (entry,) = entries(cache)
    data = entry.read_bytes()
    if damage == "flip":  # a bit of the program itself
        pos = len(data) - 100
        entry.write_bytes(data[:pos] + bytes([data[pos] ^ 1]) + data[pos + 1:])
    elif damage == "truncate":
        entry.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        entry.write_bytes(b"\x00\x01garbage" * 10)
    elif damage == "empty":
        entry.write_bytes(b"")
    else:  # a sound entry, but of another program stored under this name
        head = len(program_cache.MAGIC) + 40
        size = int.from_bytes(data[head - 8:head], "little")
        write_entry(entry, "another key", data[head + size:])
    api.batched.cache_clear()
    assert_identical(run_batched(model, flat), plain)
    # rewritten whole: a fresh process now reads it
    api.batched.cache_clear()
    forbid_export(monkeypatch)
    assert_identical(run_batched(model, flat), plain)


def test_read_entry_refuses_other_inputs(tmp_path):
    def double(x):
        return (x * 2,)

    program = CachedProgram("test.double", double, {"k": 1})
    x = np.arange(4.0, dtype=np.float32)
    blob = bytes(jax.export.export(program.jitted)(
        jax.ShapeDtypeStruct(x.shape, x.dtype)).serialize())
    path = tmp_path / "e.jaxprog"
    write_entry(path, "key", blob)
    assert read_entry(path, "key", [x]) is not None
    assert read_entry(path, "key", [np.arange(5.0, dtype=np.float32)]) is None
    assert read_entry(path, "key", [x.astype(np.int32)]) is None
    assert read_entry(path, "other", [x]) is None
    assert read_entry(tmp_path / "missing.jaxprog", "key", [x]) is None
    assert not list(tmp_path.glob(".tmp-*"))  # written atomically: no leftovers


def test_the_source_digest_follows_every_file_but_bytecode(tmp_path):
    (tmp_path / "m.py").write_text("A = 1\n")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "t.csv").write_text("a\n1\n")
    before = digest_of(tmp_path)
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\x00")
    assert digest_of(tmp_path) == before
    (tmp_path / "m.py").write_text("A = 2\n")
    assert digest_of(tmp_path) != before
    (tmp_path / "m.py").write_text("A = 1\n")
    (tmp_path / "data" / "t.csv").write_text("a\n2\n")
    assert digest_of(tmp_path) != before


def test_a_program_jax_cannot_export_runs_uncached(cache, monkeypatch):
    """jax refuses to export some programs (a custom call outside its stable
    list, on some backends): the command runs as without the cache."""
    model, flat = seed_inputs()
    plain = reference()

    def refuse(*args, **kwargs):
        raise ValueError("Cannot serialize code with custom calls whose targets ...")

    monkeypatch.setattr(jax.export, "export", refuse)
    assert_identical(run_batched(model, flat), plain)
    assert entries(cache) == []


def test_an_unwritable_directory_only_costs_the_trace(cache, tmp_path):
    blocker = tmp_path / "a file"
    blocker.write_text("not a directory")
    enable_program_cache(blocker)  # exported/ cannot be made under a file
    model, flat = seed_inputs()
    assert_identical(run_batched(model, flat), reference())
    assert not list(tmp_path.rglob(".tmp-*"))
