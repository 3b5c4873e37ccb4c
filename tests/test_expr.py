"""The filter expression language: parsing, evaluation on jax/numpy/arrow, errors."""

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from jaxmodel.errors import SpecError
from jaxmodel.expr import parse

COLS = {"a", "b", "valid_layout", "bottleneck"}
CATS = {"bottleneck": ("compute", "tp_comm", "pp_comm")}
DATA = {
    "a": np.array([1.0, 2.0, 3.0, 4.0]),
    "b": np.array([4.0, 3.0, 2.0, 1.0]),
    "valid_layout": np.array([True, False, True, True]),
    "bottleneck": np.array([0, 1, 2, 1]),
}


@pytest.mark.parametrize(
    "text, expected",
    [
        ("a > 2", [False, False, True, True]),
        ("a >= 2 and b >= 2", [False, True, True, False]),
        ("a == 1 or b == 1", [True, False, False, True]),
        ("not valid_layout", [False, True, False, False]),
        ("valid_layout && !(a < 2)", [False, False, True, True]),
        ("a * 2 - b > 0", [False, True, True, True]),
        ("-a + 5 == b", [True, True, True, True]),
        ("max(a, b) == 4", [True, False, False, True]),
        ("abs(a - b) <= 1", [False, True, True, False]),
        ('bottleneck == "tp_comm"', [False, True, False, True]),
        ("bottleneck != 'compute' and a / b >= 1", [False, False, True, True]),
        ("a > 1e0 and true", [False, True, True, True]),
    ],
)
def test_evaluates_like_python(text, expected):
    e = parse(text, COLS)
    np.testing.assert_array_equal(e.evaluate_numpy(DATA, CATS), expected)
    from jaxmodel.precision import computing

    with computing():
        import jax.numpy as jnp

        got = e.evaluate_jax({k: jnp.asarray(v) for k, v in DATA.items()}, CATS)
    np.testing.assert_array_equal(np.asarray(got), expected)
    table = pa.table({
        "a": DATA["a"], "b": DATA["b"], "valid_layout": DATA["valid_layout"],
        "bottleneck": pa.DictionaryArray.from_arrays(
            pa.array(DATA["bottleneck"], pa.int8()), pa.array(CATS["bottleneck"])),
    })
    got = table.filter(e.to_arrow())
    assert got.num_rows == sum(expected)
    assert pc.all(pc.equal(got["a"], pa.array(DATA["a"][np.array(expected)]))).as_py()


@pytest.mark.parametrize(
    "text, message",
    [
        ("mfu >= 40", "unknown column 'mfu'"),
        ("a >", "ends too early"),
        ("a > 1 < 2", "chained comparison"),
        ("a > 1)", "unexpected ')'"),
        ("(a > 1", "expected ')'"),
        ("a @ 1", "cannot read '@ 1' at position 2"),
        ("", "empty expression"),
        ("3", "not a condition"),
        ("__import__('os')", "unknown column '__import__'"),
        ("max(a) > 1", "takes 2 argument"),
    ],
)
def test_bad_expressions(text, message):
    with pytest.raises(SpecError) as info:
        parse(text, COLS)
    assert message in str(info.value)


def test_unknown_category_value():
    with pytest.raises(SpecError, match="not a value of bottleneck"):
        parse('bottleneck == "network"', COLS).evaluate_numpy(DATA, CATS)


# Issue 17 item 2: one expression keeps the same rows on the device (a sweep's
# filter, jax with its type promotion) and in a pyarrow scan of the dataset
# (plot --where), whatever the column types: float32 floats, int64 counts
# beyond 2**24, float64 (an --x64 dataset).
TYPED = {
    "matmul_efficiency": np.array([0.6, 0.7, 0.8, 0.7], np.float32),
    "tokens_per_step": np.array([4194304, 2**29, 2**33 + 1, 2**33], np.int64),
    "num_gpus": np.array([64, 1024, 16384, 63], np.int64),
    "tensor_parallel": np.array([8, 4, 8, 1], np.int64),
    "step_ms": np.array([0.1, 1e3 / 3, 7.0, 2.5], np.float64),
    "valid_layout": np.array([True, False, True, True]),
}
TYPED_EXPRESSIONS = [
    "matmul_efficiency == 0.7",
    "matmul_efficiency != 0.7 and matmul_efficiency < 0.8",
    "0.7 == matmul_efficiency",
    "tokens_per_step == 4194304",
    "tokens_per_step == 8589934593",
    "tokens_per_step >= 8589934592 or num_gpus == 64",
    "num_gpus > 63.5",
    "num_gpus <= 63.5",
    "num_gpus == 63.5",
    "num_gpus / tensor_parallel == 2048",
    "num_gpus / tensor_parallel < 7.99",
    "tensor_parallel * num_gpus >= 4096",
    "matmul_efficiency * num_gpus > 716.8",
    "matmul_efficiency * 10 == 7",
    "tokens_per_step * matmul_efficiency > 3e8",
    "log(matmul_efficiency) < log(0.7)",
    "sqrt(num_gpus) == 32",
    "max(matmul_efficiency, 0.65) == 0.7",
    "abs(-matmul_efficiency) == 0.7 and valid_layout",
    "step_ms == 1e3 / 3",
    "step_ms * matmul_efficiency > 233.33",
    "1 + 2 == 3 and num_gpus > 1000",
]


@pytest.mark.parametrize("text", TYPED_EXPRESSIONS)
def test_arrow_filter_keeps_the_rows_the_device_keeps(text):
    import jax.numpy as jnp

    from jaxmodel.precision import computing

    e = parse(text, set(TYPED))
    with computing():
        device = np.asarray(e.evaluate_jax({k: jnp.asarray(v) for k, v in TYPED.items()}, {}))
    table = pa.table(TYPED)
    kept = table.filter(e.to_arrow(table.schema))
    np.testing.assert_array_equal(kept["num_gpus"].to_numpy(), TYPED["num_gpus"][device])


def test_plot_where_matches_the_sweep_filter(tmp_path):
    """The issue's two commands: a float32 column against 0.7 (no rows before),
    an int64 count beyond 2**24 (ArrowInvalid before)."""
    import pyarrow.parquet as pq

    from jaxmodel.plot import heatmap_data, open_dataset

    table = pa.table(TYPED)
    pq.write_table(table, tmp_path / "part-0.parquet")
    dataset = open_dataset(tmp_path)
    grid = heatmap_data(dataset, "num_gpus", "tensor_parallel", "step_ms",
                        where="matmul_efficiency == 0.7")
    assert grid.counts.sum() == 2
    grid = heatmap_data(dataset, "num_gpus", "tensor_parallel", "step_ms",
                        where="tokens_per_step == 4194304")
    assert grid.counts.sum() == 1
