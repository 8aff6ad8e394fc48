# lit-fl: `make install demo` sets up and runs the quickstart, `make test` runs the tests.
PYTHON ?= python3
PIP ?= $(PYTHON) -m pip
PYTEST_ARGS ?=
# pytest-xdist workers: one per core this process may run on (at most 8); TEST_WORKERS=0 runs in this process
TEST_WORKERS ?= $(shell $(PYTHON) -c "import os; print(min(8, len(os.sched_getaffinity(0))))")

.PHONY: install demo test test-fast fuzz mutate lint bench reproduce clean

install:  ## install lit-fl and its test tools (pulls torch with its CUDA build from PyPI)
	$(PIP) install -e ".[dev]"

demo:  ## DFML on the bundled MNIST subset, then decentralized FedAvg on the same federation
	lit-fl fit --config experiments/quickstart.yaml --name quickstart-dfml-$$(date +%Y%m%d-%H%M%S)
	lit-fl fit --config experiments/quickstart_fedavg.yaml --name quickstart-fedavg-$$(date +%Y%m%d-%H%M%S)

# one torch thread per test process: the workers already fill the cores, and more threads would only oversubscribe
# them (the equivalence records are one-thread runs too)
TEST_ENV = WANDB_MODE=offline WANDB_SILENT=true OMP_NUM_THREADS=1 MKL_NUM_THREADS=1

test:  ## the whole suite, one worker per core, a file's tests on one worker (a few end-to-end tests are marked slow; all run here)
	$(TEST_ENV) $(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

test-fast:  ## everything but the slow end-to-end tests
	$(TEST_ENV) $(PYTHON) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not slow" $(PYTEST_ARGS)

fuzz:  ## the property-based tests (tests/test_fuzz_*.py) with random examples, 100 times as many as in make test
	LIT_FL_HYPOTHESIS=fuzz WANDB_MODE=offline WANDB_SILENT=true $(PYTHON) -m pytest -q tests/test_fuzz_compare.py \
		tests/test_fuzz_sweep.py tests/test_fuzz_resume.py tests/test_fuzz_file_kinds.py --hypothesis-show-statistics $(PYTEST_ARGS)

mutate:  ## break the science on purpose, one semantic mutation at a time (tests/mutation/mutations.yaml): every mutant must fail a fast test
	$(PYTHON) tests/mutation/run.py $(MUTATIONS)

reproduce:  ## the CPU-scale reproduction sweeps of every paper (about two hours on 2 cores), then docs/reproductions.md; REPRODUCE_ARGS="--only NAME" runs one
	WANDB_MODE=offline WANDB_SILENT=true $(PYTHON) -m lit_fl.suite.reproduce $(REPRODUCE_ARGS)

lint:
	$(PYTHON) -m ruff check lit_fl tests benchmarks examples

bench:  ## every benchmark: round time, FedAvg vs plain loop, scale, CLI latency, 2 processes vs 1, evaluation floor, kernels per phase, GPU s/round (~40 min on 2 cores)
	$(PYTHON) benchmarks/round_time.py
	$(PYTHON) benchmarks/fedavg_vs_plain.py
	$(PYTHON) benchmarks/scale.py
	$(PYTHON) benchmarks/cli_latency.py
	$(PYTHON) benchmarks/multi_process.py
	$(PYTHON) benchmarks/eval_floor.py
	$(PYTHON) benchmarks/kernels.py
	$(PYTHON) benchmarks/gpu_round.py

clean:
	rm -rf runs wandb .pytest_cache
