"""The Python API: broadcasting, input and output dtypes, jit / vmap / grad, bad inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from reference import seed_reference

import jaxmodel
from jaxmodel import InputError, SeedInputs, seed_model
from jaxmodel.precision import computing

MODEL = jaxmodel.get_model("seed")
SEED = MODEL.defaults


def reference(**changes):
    inputs = {**SEED, **changes}
    return seed_reference(**{k: int(v) if MODEL.input_field(k).integer else float(v)
                             for k, v in inputs.items()})


def seed_inputs(dtype=jnp.float64, **changes) -> SeedInputs:
    """The seed with ``changes``, every leaf broadcast to the changes' common shape."""
    values = {k: np.asarray(v, np.float64) for k, v in {**SEED, **changes}.items()}
    shape = np.broadcast_shapes(*(v.shape for v in values.values()))
    return SeedInputs(**{k: jnp.asarray(np.broadcast_to(v, shape), dtype)
                         for k, v in values.items()})


# --- the default model ------------------------------------------------------


def test_the_default_model_is_refined_and_the_seed_is_one_name_away():
    """Issue 27 item 1: the realistic model is the default everywhere (every command
    and the API take jaxmodel.DEFAULT_MODEL); the seed stays exact by name."""
    assert jaxmodel.DEFAULT_MODEL == "refined"
    default, refined = jaxmodel.evaluate(), jaxmodel.evaluate("refined")
    assert type(default) is type(refined) and float(default.mfu_percent) == float(
        refined.mfu_percent)
    assert float(default.mfu_percent) < 60  # the refined model at its defaults: 41%
    want = seed_reference(**{k: int(v) if jaxmodel.get_model("seed").input_field(k).integer
                             else v for k, v in SEED.items()})
    assert float(jaxmodel.evaluate("seed", x64=True).mfu_percent) == pytest.approx(
        want["mfu_percent"], rel=1e-12)


# --- broadcasting ---------------------------------------------------------


def test_scalars_give_zero_dimensional_outputs():
    out = jaxmodel.evaluate("seed")
    assert all(np.shape(v) == () for v in out)


def test_scalar_broadcasts_with_array():
    bw = np.array([100.0, 450.0, 900.0])
    out = jaxmodel.evaluate("seed", x64=True, link_bandwidth_gb_s=bw, num_gpus=128)
    assert out.step_time_ms.shape == (3,)
    for i, b in enumerate(bw):
        ref = reference(link_bandwidth_gb_s=b, num_gpus=128)
        assert out.step_time_ms[i] == pytest.approx(ref["step_time_ms"], rel=1e-12)
        assert out.data_parallel[i] == ref["data_parallel"] == 4


def test_two_dimensional_batch_shapes():
    gpus = np.array([[32], [64], [96]])  # (3, 1)
    bw = np.array([100.0, 450.0])  # (2,)
    out = jaxmodel.evaluate("seed", x64=True, num_gpus=gpus, link_bandwidth_gb_s=bw)
    for v in out:
        assert v.shape == (3, 2)
    for i, g in enumerate(gpus[:, 0]):
        for j, b in enumerate(bw):
            ref = reference(num_gpus=g, link_bandwidth_gb_s=b)
            assert out.tokens_per_step[i, j] == ref["tokens_per_step"]
            assert out.mfu_percent[i, j] == pytest.approx(ref["mfu_percent"], rel=1e-12)


def test_shapes_that_do_not_broadcast_raise():
    with pytest.raises(InputError) as e:
        jaxmodel.evaluate("seed", num_gpus=[64, 128], link_bandwidth_gb_s=[1.0, 2.0, 3.0])
    assert e.value.field == "inputs" and "broadcast" in e.value.allowed


# --- input dtypes -------------------------------------------------------


@pytest.mark.parametrize(
    "gpus",
    [
        np.array([64, 96], np.int8),
        np.array([64, 96], np.uint16),
        np.array([64, 96], np.float16),
        np.array([64, 96], np.int64),
        [64, 96],
        (64.0, 96.0),
        jnp.array([64, 96], jnp.int32),
        jnp.array([64, 96], jnp.float32),
        jnp.array([64, 96], jnp.bfloat16),
    ],
    ids=["int8", "uint16", "float16", "int64", "list", "tuple", "jax_int32", "jax_float32",
         "jax_bfloat16"],
)
def test_any_numeric_input_dtype(gpus):
    out = jaxmodel.evaluate("seed", x64=True, num_gpus=gpus, link_bandwidth_gb_s=np.float16(450))
    want = jaxmodel.evaluate("seed", x64=True, num_gpus=np.array([64.0, 96.0]))
    for got, expect in zip(out, want, strict=True):
        np.testing.assert_array_equal(got, expect)


# --- output dtypes ------------------------------------------------------


@pytest.mark.parametrize("x64", [False, True], ids=["float32", "float64"])
def test_output_dtypes(x64):
    out = jaxmodel.evaluate("seed", x64=x64, num_gpus=[64, 16])  # one valid, one invalid
    expected = {"int": np.int64, "float": np.float64 if x64 else np.float32, "bool": np.bool_,
                "category": np.int32}
    for field, value in zip(MODEL.outputs, out, strict=True):
        assert value.dtype == expected[field.kind], field.name
        assert isinstance(value, np.ndarray), field.name
    assert out.valid_layout.tolist() == [True, False]


def test_precision_is_not_changed_globally():
    before = jax.config.jax_enable_x64
    jaxmodel.evaluate("seed", x64=True)
    assert jax.config.jax_enable_x64 == before


# --- jit, vmap, grad ----------------------------------------------------


def test_model_jits():
    with computing():
        x = seed_inputs()
        eager = seed_model(x)
        jitted = jax.jit(seed_model)(x)
    for a, b in zip(eager, jitted, strict=True):
        assert np.asarray(a) == pytest.approx(np.asarray(b), rel=1e-14)
    ref = reference()
    assert float(jitted.step_time_ms) == pytest.approx(ref["step_time_ms"], rel=1e-12)


def test_vmap_of_vmap_over_nested_batch_axes():
    gpus = np.array([[32.0, 64.0, 16.0], [128.0, 96.0, 2048.0]])
    bw = np.array([[100.0, 450.0, 900.0], [50.0, 5.0, 5000.0]])
    with computing():
        x = seed_inputs(num_gpus=gpus, link_bandwidth_gb_s=bw)
        nested = jax.jit(jax.vmap(jax.vmap(seed_model)))(x)
    flat = jaxmodel.evaluate("seed", x64=True, num_gpus=gpus, link_bandwidth_gb_s=bw)
    for name, a, b in zip(MODEL.output_names, nested, flat, strict=True):
        np.testing.assert_array_equal(np.asarray(a), b, err_msg=name)
    assert not flat.valid_layout[0, 2]  # 16 GPUs < t p = 32: masked, not an error


def _step_time(model_inputs, bw):
    return seed_model(model_inputs._replace(link_bandwidth_gb_s=bw)).step_time_ms


@pytest.mark.parametrize(
    "changes",
    [
        {},  # the seed: DP all-reduce hidden
        dict(tensor_parallel=1, pipeline_parallel=1, gradient_accum_steps=1, seq_length=128),
    ],
    ids=["seed_dp_hidden", "dp_exposed"],
)
def test_grad_of_step_time_wrt_bandwidth_is_the_hand_derivative(changes):
    # Every communication term is c / B, so d/dB = -(term)/B; the exposed DP
    # term is max(0, raw - backward) with raw = c / B, so it contributes
    # -raw / B where exposed and 0 where hidden:
    #   d step / dB = -(tp + pp + [dp > 0] raw) / B.
    ref = reference(**changes)
    bw = SEED["link_bandwidth_gb_s"]
    exposed = ref["dp_allreduce_ms"] > 0
    assert exposed == bool(changes)
    hand = -(ref["tp_comm_ms"] + ref["pp_comm_ms"] + exposed * ref["dp_allreduce_raw_ms"]) / bw
    with computing():
        x = seed_inputs(**changes)
        got = float(jax.jit(jax.grad(_step_time, argnums=1))(x, jnp.float64(bw)))
        h = 1e-3
        central = (float(_step_time(x, jnp.float64(bw + h)))
                   - float(_step_time(x, jnp.float64(bw - h)))) / (2 * h)
    assert got == pytest.approx(hand, rel=1e-12)
    assert got == pytest.approx(central, rel=1e-6)
    if not changes:  # at the seed point the exposed DP term is zero
        assert got == pytest.approx(-(1336.212 + 4.772) / 450, rel=1e-5)


def test_grad_of_vmap_equals_vmap_of_grad():
    bws = jnp.array([20.0, 100.0, 450.0, 900.0, 5000.0])
    with computing():
        x = seed_inputs(tensor_parallel=1, pipeline_parallel=1, gradient_accum_steps=1,
                        seq_length=128)
        per_point = jax.jit(jax.vmap(jax.grad(_step_time, argnums=1), in_axes=(None, 0)))(x, bws)
        of_sum = jax.jit(jax.grad(
            lambda b: jax.vmap(_step_time, in_axes=(None, 0))(x, b).sum()))(bws)
        assert np.isfinite(per_point).all()
    np.testing.assert_allclose(per_point, of_sum, rtol=1e-14)


def test_gradients_finite_for_invalid_layouts():
    # An invalid row is masked to NaN in values, but its gradient must not be
    # NaN-poisoning a sweep's reduction through the masked branch: with d = 0
    # the model computes with d = 1 and the where() selects NaN, whose
    # derivative through the unselected side is 0.
    with computing():
        x = seed_inputs(num_gpus=16.0)
        g = jax.grad(lambda b: jnp.nan_to_num(_step_time(x, b)))(jnp.float64(450.0))
    assert float(g) == 0.0


# --- bad inputs ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("num_gpus", 0, 0),
        ("num_gpus", -8, -8),
        ("num_gpus", 64.5, 64.5),
        ("tensor_parallel", float("nan"), "nan"),
        ("pipeline_parallel", float("inf"), "inf"),
        ("gradient_accum_steps", 2**24 + 1, 2**24 + 1),
        ("link_bandwidth_gb_s", 0.0, 0.0),
        ("compute_tflops", -1.0, -1.0),
        ("model_params_b", float("-inf"), "-inf"),
        ("num_gpus", np.array([64, 0, 128]), 0),  # names the offending element
        ("micro_batch", jnp.array([1.0, 2.5]), 2.5),
    ],
)
def test_out_of_domain_value_raises_naming_field_value_and_allowed(name, value, shown):
    with pytest.raises(InputError) as e:
        jaxmodel.evaluate("seed", **{name: value})
    err = e.value
    assert err.field == name
    assert str(err.value) == str(shown)
    assert err.allowed == MODEL.input_field(name).allowed()
    assert str(err) == f"{name}: got {err.value!r}; allowed: {err.allowed}"
    assert "\n" not in str(err)


@pytest.mark.parametrize("value", ["64", "abc", True, 1 + 2j, np.array(["a", "b"]), {}])
def test_non_numeric_values_raise(value):
    with pytest.raises(InputError) as e:
        jaxmodel.evaluate("seed", num_gpus=value)
    assert e.value.field == "num_gpus" and "whole number" in e.value.allowed


def test_none_means_default():
    np.testing.assert_array_equal(jaxmodel.evaluate("seed", num_gpus=None).step_time_ms,
                                  jaxmodel.evaluate("seed").step_time_ms)


def test_unknown_input_name_raises():
    with pytest.raises(InputError) as e:
        jaxmodel.evaluate("seed", num_gpu=64)
    assert e.value.field == "num_gpu" and "num_gpus" in e.value.allowed


def test_unknown_model_raises():
    with pytest.raises(InputError) as e:
        jaxmodel.evaluate("nonesuch")
    assert e.value.field == "model" and e.value.value == "nonesuch" and "seed" in e.value.allowed


@pytest.mark.parametrize("function, module", [("sweep", "sweeping"), ("search", "searching"),
                                              ("solve", "solving"),
                                              ("calibrate", "calibration")])
def test_an_entry_point_and_its_module_do_not_shadow_each_other(function, module):
    # ``import jaxmodel.search as s`` once gave the function ``search``: the
    # package attribute named like the module was the re-exported function.
    import importlib
    import types

    mod = importlib.import_module(f"jaxmodel.{module}")
    assert isinstance(mod, types.ModuleType)
    assert getattr(jaxmodel, module) is mod
    assert callable(getattr(jaxmodel, function))
    assert getattr(jaxmodel, function) is getattr(mod, function)


def test_batches_of_one_size_class_share_a_compiled_program():
    """evaluate pads a batch to the next power of two, at least 512 rows (the last row
    repeated), so that batches of 1 to 512 rows run one compiled program, and drops
    the extra rows: each row's outputs are those of the host evaluation of that row
    alone."""
    from jax import monitoring

    from jaxmodel.api import batched, evaluate_on_host, padded_rows

    batched.cache_clear()  # (programs other tests compiled would hide the count)
    assert [padded_rows(n) for n in (0, 1, 2, 97, 300, 512, 513, 1500)] == [
        0, 512, 512, 512, 512, 512, 1024, 2048]
    traced = []

    def listen(event, duration, **kwargs):
        if event == "/jax/core/compile/jaxpr_trace_duration":
            traced.append(duration)

    monitoring.register_event_duration_secs_listener(listen)
    try:
        gpus = 64.0 * np.arange(1, 514)
        counts = []
        for n in (1, 300, 513):
            out = jaxmodel.evaluate("seed", x64=True, num_gpus=gpus[:n] * 7)
            counts.append(len(traced))
            assert out.step_time_ms.shape == (n,)
            for i in (0, n // 2, n - 1):
                one = evaluate_on_host("seed", num_gpus=gpus[i] * 7)
                assert float(out.step_time_ms[i]) == float(one.step_time_ms)
    finally:
        monitoring.unregister_event_duration_listener(listen)
    # 1 row traced a program (padded to 512), 300 rows reused it, 513 traced another
    # (1024).
    assert counts[1] == counts[0] and counts[2] == counts[1] + 1


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("name", ["seed", "refined", "toy"])
def test_apply_rows_calls_an_elementwise_model_once_and_gives_each_rows_numbers(
        name, shared, monkeypatch):
    """Model.apply_rows runs a model that declares on_host (elementwise over a batch)
    once on the batch, never through vmap, whether every input is a column or some
    are scalars every row shares (a sweep's fixed inputs: the refined model's stacks
    of per-pass values must then still agree in shape); any other model through vmap.
    Either way each row's outputs are its own configuration's: those of the NumPy
    evaluation on the host (for the toy, which does not run there, of vmap's one
    configuration at a time)."""
    from jaxmodel.api import evaluate_on_host
    from tests.models.test_model_contract import TOY
    from tests.test_xla_options import random_inputs

    model = TOY if name == "toy" else jaxmodel.get_model(name)
    n = 16
    columns = random_inputs(model, n, seed=7)
    names = model.input_names
    # every other input shared by all rows (a scalar), as a sweep's fixed inputs are;
    # the pairs of an ordering rule (an FP8 peak at least the bf16 one) stay columns
    ordered = {k for pair in model.at_least for k in pair}
    one = [shared and i % 2 == 1 and k not in ordered for i, k in enumerate(names)]
    x = model.inputs_type(*(np.float64(columns[k][0]) if o else columns[k]
                            for o, k in zip(one, names, strict=True)))
    with computing():
        if model.on_host:
            want = evaluate_on_host(model, **x._asdict())
        else:
            axes = type(x)(*(None if o else 0 for o in one))
            want = jax.jit(jax.vmap(model.apply, in_axes=(axes,)))(x)
        calls = []
        real_vmap = jax.vmap
        monkeypatch.setattr(jax, "vmap", lambda *a, **k: calls.append(1) or real_vmap(*a, **k))
        got = jax.jit(lambda x: model.apply_rows(x, n))(x)
    assert bool(calls) == (not model.on_host)
    for field, a, b in zip(model.outputs, want, got, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape == (n,) and a.dtype == b.dtype, field.name
        if a.dtype.kind != "f":
            np.testing.assert_array_equal(a, b, err_msg=field.name)
        else:
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=0, err_msg=field.name)
