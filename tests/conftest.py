import json
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "reference"


@pytest.fixture(scope="session")
def seed_example() -> dict:
    return json.loads((DATA / "seed_example.json").read_text())
