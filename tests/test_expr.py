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
