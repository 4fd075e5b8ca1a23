# The two commands of the README: `make reproduce` and `make test`. Both set up .venv first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.frag-installed
PROFILE ?= smol
SELECT ?=
FORCE ?=
# runs side by side (each with FRAG_THREADS / JOBS threads); GPUS: this machine's GPUs, one run on each;
# SNAKEMAKE_ARGS: passed on, e.g. "--profile profiles/slurm" or "-n"
JOBS ?= 1
GPUS ?=
SNAKEMAKE_ARGS ?=
# records (default): each job on the CPU kernel path of the records it extends; native: this CPU's own
KERNELS ?= records
export FRAG_PROGRESS ?= 0

.PHONY: setup test lint test-package test-notebooks reproduce verify bench clean-scratch

$(STAMP): requirements.txt requirements-embedded.txt pyproject.toml Makefile
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -r requirements-embedded.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	$(PY) -m ipykernel install --sys-prefix --name frag --display-name "Python (frag)" > /dev/null
	touch $(STAMP)

setup: $(STAMP)

test: lint test-package test-notebooks

# ruff's rules and their exceptions are in pyproject.toml
lint: $(STAMP)
	$(PY) -m ruff check frag_utils tests bench scripts

# two workers of one thread each (pytest-xdist): a third faster on 2 cores than one worker of two
# threads, as many tests wait on kernels and processes. The embedded model's safetensors copy is
# made first, so that the workers do not both make it. tests/conftest.py keeps the tests of a module with a
# costly module fixture (the dry run) on one worker, so that it is made once.
test-package: $(STAMP)
	$(PY) -c "from frag_utils import models; models.load_tokenizer(models.SMOLLM2)"
	FRAG_THREADS=1 $(PY) -m pytest tests/ -q -n 2

# the same two workers, a notebook to each (its cells share one kernel, in order): 95 s against 171 s for one
test-notebooks: $(STAMP)
	FRAG_THREADS=1 $(PY) -m pytest --nbval-lax notebooks/ -q -p no:cacheprovider -n 2 --dist loadfile

# Snakemake's local executor runs the grid (workflow/Snakefile): it skips complete runs and makes first what a run reads
reproduce: $(STAMP)
	$(PY) -m frag_utils reproduce --profile $(PROFILE) --jobs $(JOBS) --kernels $(KERNELS) $(if $(GPUS),--gpus $(GPUS),) \
	  $(if $(SELECT),--select $(SELECT),) $(if $(FORCE),--force,) $(if $(SNAKEMAKE_ARGS),-- $(SNAKEMAKE_ARGS),)

# make verify RUN=02_target_and_gold/tiny: remake a recorded run (and what it reads) from an empty cache and print
# its drift against the record; fails only outside papermill_runs/tolerance.yaml
verify: $(STAMP)
	@test -n "$(RUN)" || { echo "make verify needs RUN=<notebook>/<run folder>, e.g. RUN=02_target_and_gold/tiny"; exit 2; }
	$(PY) -m frag_utils verify $(RUN)

bench: $(STAMP)
	$(PY) bench/run_all.py
