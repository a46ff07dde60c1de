# Two commands on a fresh machine: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test bench clean-demo study

$(STAMP): setup.py constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e '.[test,hf]'
	$(PY) -m pip check
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" bash demo.sh

test: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest -q tests

bench: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) bench/bench_train_step.py

# The study on data you already have (it downloads nothing): make study OUT=study C4_DIR=... TASKS_DIR=...
# [PRESET=cpu-small VARIANTS="bert-a bert-r tupe-a tupe-r"]; see train_scripts/study.sh --help.
study: $(STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" train_scripts/study.sh

clean-demo:
	rm -rf demo_out
