# The README's two commands: `make run` and `make test`.  Both create .venv if
# it is missing and install the project into it first.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run run-seed test test-all bench lint docs clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test,plot,dashboard]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/jaxmodel sweep sweeps/default.toml --overwrite
	$(BIN)/jaxmodel plot heatmap out/default --x link_bandwidth_gb_s --y compute_tflops \
		--value mfu_percent --where "tensor_parallel * pipeline_parallel >= 16" \
		-o out/default-mfu.png
	$(BIN)/jaxmodel report out/default -o out/default-report.html
	@echo "browse the sweep: $(BIN)/jaxmodel dashboard out/default"
	@echo "the same grid on the seed model: make run-seed"

# The seed model's own sweep (its MFU runs up to 100%: compute at peak).
run-seed: $(STAMP)
	$(BIN)/jaxmodel sweep sweeps/seed_default.toml --overwrite
	$(BIN)/jaxmodel plot heatmap out/seed_default --x link_bandwidth_gb_s --y compute_tflops \
		--value mfu_percent --where "tensor_parallel * pipeline_parallel >= 16" \
		-o out/seed_default-mfu.png

# On a workstation `make test` runs the fast set (pyproject's addopts skip
# `slow`); under CI (CI=true, as .ci/run is run) the same command runs everything.
TEST_MARKS := $(if $(filter true,$(CI)),-m '',)
# Tests run in TEST_WORKERS pytest-xdist processes.  The full run (CI) takes
# three on a 2-core machine, because a worker often waits (on the jaxmodel
# processes, kills and browser a test drives): in the full CI run on 2 workers
# the workers themselves used 98 CPU-minutes in 71 minutes, and one ran alone
# for the last 15.  The fast set keeps both cores busy with two: 147 s against
# 168 s with three (2 cores, 2026-12-04, back to back).  worksteal keeps each
# worker on a contiguous run of tests, so tests of one module share that
# process's compiled programs.  A worker that crashes fails only its test, which
# tests/conftest.py reruns once in a fresh worker.
TEST_WORKERS ?= $(if $(filter true,$(CI)),3,2)
# The 25 slowest tests are listed at the end, so a slow CI run says where it went.
PYTEST := $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=25

test: $(STAMP)
	$(PYTEST) $(TEST_MARKS)

test-all: $(STAMP)
	$(PYTEST) -m ''

bench: $(STAMP)
	$(BIN)/python bench/sweep_throughput.py
	$(BIN)/python bench/search.py
	$(BIN)/python bench/sensitivity.py
	$(BIN)/python bench/calibrate.py

# Every generated page of docs/ (tests fail when one is stale): the reference pages
# from the code, and the validation table (a minute or two: it runs every set).
docs: $(STAMP)
	$(BIN)/jaxmodel docs docs/reference
	$(BIN)/jaxmodel validate --all --format markdown -o docs/validation.md

lint: $(STAMP)
	$(BIN)/ruff check .

clean:
	rm -rf $(VENV) out .pytest_cache
