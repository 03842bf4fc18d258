# The two commands a fresh machine needs: `make test` and `make demo`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: test test-quick test-hosts test-containers demo lint type bench bench-compare soak clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	# PyTorch for tests/test_torch.py: the machine's local CPU wheel (a pin, so
	# pip never pulls a CUDA build); without it those tests skip.
	$(PY) -m pip install --quiet 'torch==2.13.0' || echo "note: no torch 2.13.0 here: tests/test_torch.py is skipped"
	touch $(STAMP)

# tests/hosts runs hosts as network namespaces: needs root and `ip`; without them
# it is skipped with a loud line (ZMQDATA_NO_NETNS=1 skips it on purpose).
# The suite runs on JOBS processes at once (pytest-xdist): most tests wait on
# timers, sockets and child processes, not on the CPU; those marked `exclusive`
# run alone (tests/exclusive.py). JOBS=0 runs it in this one process.
JOBS ?= 4
test: $(STAMP)
	$(PY) -m pytest tests zmqdata cli -q -n $(JOBS) --dist worksteal --durations=25

# The suite without the slow process-churn, chaos and soak tests (CI runs them all).
test-quick: $(STAMP)
	$(PY) -m pytest tests zmqdata cli -q -m 'not slow'

test-hosts: $(STAMP)
	$(PY) -m pytest tests/hosts -q

# configs/Dockerfile built and configs/docker-compose.yaml run with podman and
# podman-compose, on a base image debootstrapped offline, read end to end by a
# trainer container (docs/deployment.md). Needs no venv; installs podman & co
# with apt-get when missing (root); prints "SKIPPED: containers: <reason>"
# where containers cannot run.
test-containers:
	PYTHON=$(PYTHON) bash tests/containers/run.sh

# The demo needs only the core dependencies: a light .venv of its own stamp
# (seconds to install), which a later `make test` completes with the dev extras.
CORE_STAMP := $(VENV)/.core-installed

$(CORE_STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	[ $(STAMP) -nt pyproject.toml ] || $(PY) -m pip install --quiet -e .
	touch $(CORE_STAMP)

demo: $(CORE_STAMP)
	$(PY) examples/demo.py

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

type: $(STAMP)
	$(VENV)/bin/mypy zmqdata cli

# Benchmarks (bench/run.py --help): BENCH_ARGS=--quick for a run under a minute.
BENCH_STAMP := $(VENV)/.bench-installed
BENCH_ARGS ?=

$(BENCH_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[bench,peers]' || { \
	  echo "note: no peers extra (Ray Data, grain, SPDL): bench/peers.py skips them"; \
	  $(PY) -m pip install --quiet -e '.[bench]' || echo "note: no bench extra (matplotlib, Pillow): no plots, no images section"; }
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP)
	$(PY) bench/codec.py
	$(PY) bench/run.py $(BENCH_ARGS)

bench-compare: $(STAMP)
	$(PY) bench/compare.py $(BENCH_ARGS)

# The churn soak, then the generated-pipeline tier with a long random draw
# (tests/service/test_generated_pipelines.py; make test runs a short fixed one).
soak: $(STAMP)
	ZMQDATA_SOAK_S=$${ZMQDATA_SOAK_S:-180} $(PY) -m pytest -q tests/service/test_churn.py -k soak
	ZMQDATA_SOAK_EXAMPLES=$${ZMQDATA_SOAK_EXAMPLES:-200} $(PY) -m pytest -q tests/service/test_generated_pipelines.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache
