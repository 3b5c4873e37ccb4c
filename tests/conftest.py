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


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_COMPILE_CACHE, ignore_errors=True)

DATA = Path(__file__).parent / "data"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "reference"


@pytest.fixture(scope="session")
def seed_example() -> dict:
    return json.loads((DATA / "seed_example.json").read_text())
