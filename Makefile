# torchmpi — the surfaces every issue shares.  See README.md.
SHELL := /bin/bash
VENV  := .venv
PY    := $(VENV)/bin/python
ENV   := . ./setup-env.sh &&

.PHONY: setup venv spack test check mutate lint demo bench clean install-site gpu-wheels

setup: venv spack  ## venv + pinned Spack + torch 2.6.0 reference (idempotent)
	@bash scripts/check-system.sh
	@bash scripts/get-reference.sh

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps -e .
	@touch $@

spack:
	@bash scripts/get-spack.sh

# Both cores (pytest-xdist).  --dist loadgroup: tests that read one session or
# module fixture (a solve) carry the same xdist_group (tests/conftest.py), so
# each solve is done once, on the worker whose tests read it.
WORKERS ?= 2
XDIST   := -n $(WORKERS) --dist loadgroup

# Bytecode is cached in __pycache__/ (ignored by git) even where the shell sets
# PYTHONDONTWRITEBYTECODE, as this project's machines do: without the cache each
# xdist worker rewrites the asserts of every test module again on every run, and
# every torchmpi child (a rank, a probe, a verb) compiles the tool's modules again.
PYTEST  := env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest

# The 25 slowest steps (fixtures included) end every full run's log: the suite's
# 30-minute budget is planned from them (docs/testing.md).
test: setup  ## everything; what .ci/run calls
	$(ENV) $(PYTEST) tests $(XDIST) --durations=25 $(PYTEST_ARGS)

check: setup  ## the fast tests: no Spack, no solve, no compile or pip (minutes; for iteration)
	$(ENV) $(PYTEST) tests $(XDIST) -m "not spack and not concretize and not build" $(PYTEST_ARGS)

mutate: setup  ## plant one-line bugs, run each module's tests, list survivors (docs/testing.md)
# MUTATE_ARGS="--generated 10 --budget 3600 --head": cosmic-ray's mutants instead, 10 per
# wrapper module, cut after an hour; --spack: the package mutants too (minutes each).
	$(ENV) $(PY) scripts/mutate.py $(MUTATE_ARGS)

lint: venv
	$(VENV)/bin/ruff check spack_repo wrapper tests scripts

demo: setup  ## render + concretize the local site (the embedded default) and print the summary
	$(ENV) torchmpi render local && torchmpi concretize local

bench: setup  ## concretize timings and build counts per site (slow; not a test)
	$(ENV) $(PY) scripts/bench.py $(BENCH_ARGS)

install-site:  ## register spack_repo/torchmpi with the site's Spack (SCOPE=site|spack; docs/admins.md)
	@bash scripts/install-site.sh $(or $(SCOPE),site)

clean:
	rm -rf $(VENV) .spack-user .pytest_cache

# The wheels scripts/gpu-check.sh installs on a GPU node that has no network
# (docs/performance.md): the tool's pure-Python dependencies and pytest for the
# node's Python (GPU_PYTHON, default 3.12 as on the lent H200), into wheels/.
GPU_PYTHON ?= 3.12
gpu-wheels: venv  ## wheels/ for a GPU node without network (scripts/gpu-check.sh)
	$(PY) -m pip download --quiet --dest wheels --only-binary=:all: \
	  --python-version $(GPU_PYTHON) --platform manylinux2014_x86_64 \
	  --platform manylinux_2_17_x86_64 pyyaml==6.0.3 ruamel.yaml==0.19.1 \
	  jsonschema==4.26.0 archspec==0.2.7 pytest==9.2.0 pytest-xdist==3.8.0
