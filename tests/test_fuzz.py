"""Fuzz the parsers of what a person writes (issue 29): spec TOML, config
files (JSON and TOML), calibrate CSVs and filters.  Whatever the text, each
either parses or raises jaxmodel's own one-line error: never another
exception (a traceback), never a hang (hypothesis' deadline bounds each
example).  Slow-marked; a fixed number of examples bounds the whole run."""

import string

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxmodel.calibration import read_runs
from jaxmodel.config import load_config
from jaxmodel.errors import JaxmodelError
from jaxmodel.expr import parse
from jaxmodel.models import get_model
from jaxmodel.spec import parse_spec

pytestmark = pytest.mark.slow

MODEL = get_model("seed")
FUZZ = settings(max_examples=300, deadline=2000, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])

# Pieces of the languages, so that examples get past the first character.
WORDS = ["[axes]", "[base]", "[[zip]]", "[sample]", "[output]", "[reduce]", "[solve]",
         "filter", "num_gpus", "tensor_parallel", "link_bandwidth_gb_s", "mfu_percent",
         "valid_layout", "regime", "=", "==", ">=", "and", "or", "not", "(", ")", "[", "]",
         "{", "}", ",", "\"", "'", "\n", " ", "0x10", "1e308", "-1", "nan", "inf", "8",
         "0.5", "geomspace", "range", "powers_of_two", "choice", "uniform", "{a = [1, 2]}",
         "abs(", "min(", "log(", "measured_step_time_ms", "run", "1_000", "\x00", "é"]
TEXT = st.one_of(
    st.text(max_size=200),
    st.lists(st.sampled_from(WORDS), max_size=60).map("".join),
    st.lists(st.sampled_from(WORDS + list(string.printable)), max_size=120).map("".join),
)


def only_our_errors(call) -> None:
    try:
        call()
    except JaxmodelError as e:
        assert "\n" not in str(e).strip(), str(e)


@FUZZ
@given(TEXT)
def test_spec_parser(text):
    only_our_errors(lambda: parse_spec(text, "fuzz"))


@FUZZ
@given(TEXT)
def test_filter_parser(text):
    only_our_errors(lambda: parse(text, {"num_gpus", "mfu_percent", "valid_layout"}))


@FUZZ
@given(text=TEXT, suffix=st.sampled_from([".json", ".toml"]))
def test_config_reader(tmp_path, text, suffix):
    path = tmp_path / f"config{suffix}"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    only_our_errors(lambda: load_config(path, MODEL))


@FUZZ
@given(TEXT)
def test_calibrate_csv_reader(tmp_path, text):
    path = tmp_path / "runs.csv"
    path.write_text("num_gpus,measured_step_time_ms\n" + text, encoding="utf-8",
                    errors="surrogatepass")
    only_our_errors(lambda: read_runs(path, MODEL, MODEL.defaults))
