# Every target sets up what it needs on a fresh clone: the first run creates
# .venv from the pinned requirements, later runs reuse it.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
REQUIREMENTS := requirements-dev.txt handler/requirements.txt infra/requirements.txt infra/requirements-sdk.txt policies/requirements.txt

DIR ?= .
STACK ?= example
# Optional: a --policy-pack-config JSON file, as `pulumi preview` takes it.
POLICY_CONFIG ?=
# Optional: the program's own virtualenv (default: Pulumi.yaml runtime.options.virtualenv).
VIRTUALENV ?=

.PHONY: help venv test lint plan policy-check demo bench ops clean

help:
	@echo "make demo          run the example schedule locally (emulator + handler + Scheduler simulator)"
	@echo "make test          lint + the whole test suite against the Firestore emulator"
	@echo "make plan          what 'pulumi up' would create for STACK (offline, under mocks)"
	@echo "make policy-check  the policy pack against DIR/STACK (offline, under mocks)"
	@echo "make bench         handler vs the guide's sample algorithm, side by side"
	@echo "make ops ARGS=...  the operator CLI (python -m runledger.ops), e.g. ARGS=\"failed --job J\""

$(STAMP): $(REQUIREMENTS) pyproject.toml
	@echo "creating $(VENV) and installing the pinned requirements ($(REQUIREMENTS)); the first time takes a minute or two"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# Four pytest-xdist workers, each with its own Firestore emulator (tests/conftest.py):
# many tests wait on an emulator, a served handler or a subprocess rather than on
# the CPU, so on 2 cores more workers than cores keep both busy (docs/benchmarks.md).
# pytest exits non-zero on any failure, error, a missing emulator or no tests at all (5).
test: lint
	$(PY) -m pytest -n 4

plan: $(STAMP)
	$(PY) -m offline.plan --dir $(DIR) --stack $(STACK) $(if $(VIRTUALENV),--virtualenv $(VIRTUALENV))

# make exits 2 whenever a recipe fails; its "Error N" line keeps the check's own status
# (1 mandatory violation, 2 tool or program failure). CI that needs that status as the
# exit code runs the command itself: .venv/bin/python -m offline.policy_check ...
policy-check: $(STAMP)
	$(PY) -m offline.policy_check --dir $(DIR) --stack $(STACK) $(if $(POLICY_CONFIG),--policy-pack-config $(POLICY_CONFIG)) $(if $(VIRTUALENV),--virtualenv $(VIRTUALENV))

demo: $(STAMP)
	$(PY) -m localrun.demo $(ARGS)

bench: $(STAMP)
	$(PY) -m bench $(ARGS)

# google.api_core warns at import that it will drop Python 3.11 in 2027; that
# says nothing about the command, so only that warning is silenced.
ops: $(STAMP)
	cd handler && ../$(PY) -W "ignore:You are using a Python version:FutureWarning" -m runledger.ops $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
