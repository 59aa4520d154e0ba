# Every target sets up what it needs on a fresh clone: the first run creates
# .venv from the pinned requirements, later runs reuse it. The stamp records the
# directory the venv was built for: its editable install points there, so a
# .venv copied along with the repository (cp -r) is rebuilt, not reused.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
REQUIREMENTS := requirements-dev.txt handler/requirements.txt handler/runledger/requirements.txt infra/requirements.txt infra/requirements-sdk.txt policies/requirements.txt

DIR ?= .
# Empty: the only Pulumi.<stack>.yaml in DIR (with several, the tools list them and stop).
STACK ?=
# Optional: a --policy-pack-config JSON file, as `pulumi preview` takes it.
POLICY_CONFIG ?=
# Optional: the program's own virtualenv (default: Pulumi.yaml runtime.options.virtualenv).
VIRTUALENV ?=

.PHONY: help venv test test-jobs lint fix plan policy-check policy-check-all demo demo-stop bench simulate ops clean

help:
	@echo "make demo          run the stack's schedule locally (emulator + handler + Scheduler simulator)"
	@echo "make demo ARGS=--keep  ... and leave emulator and handler running; make demo-stop ends them"
	@echo "make test          lint + the whole test suite against the Firestore and Pub/Sub emulators"
	@echo "make test-jobs     only your jobs' tests (tests/test_jobs.py)"
	@echo "make fix           ruff's fixes and formatting (what make lint asks for)"
	@echo "make plan          what 'pulumi up' would create for STACK (offline, under mocks)"
	@echo "make policy-check  the policy pack against DIR/STACK (offline, under mocks)"
	@echo "make policy-check-all  the same for every Pulumi.<stack>.yaml in DIR (what CI runs)"
	@echo "make bench         handler vs the guide's sample algorithm, side by side"
	@echo "make bench ARGS=--coldstart  only the cold start (fresh processes of both sides)"
	@echo "make simulate ARGS=\"--seeds 100\"  the whole system, simulated, against its oracle; --seed S replays one"
	@echo "make ops ARGS=...  the operator CLI (python -m runledger.ops), e.g. ARGS=\"failed --job J\""

ifneq ($(shell cat $(STAMP) 2>/dev/null),$(CURDIR))
$(STAMP): FORCE
endif

FORCE:

$(STAMP): $(REQUIREMENTS) pyproject.toml
	@if [ -d $(VENV) ] && [ "$$(cat $(STAMP) 2>/dev/null)" != "$(CURDIR)" ]; then \
	  echo "$(VENV) was not built for $(CURDIR) (it is a copy); rebuilding it"; rm -rf $(VENV); fi
	@echo "creating $(VENV) and installing the pinned requirements ($(REQUIREMENTS)); the first time takes a minute or two"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	echo "$(CURDIR)" > $(STAMP)

venv: $(STAMP)

# A lint failure names the command that fixes what ruff can fix.
LINT_FAILED := echo "lint failed: make fix applies ruff's fixes and formatting; fix what is left by hand" >&2; exit 1

lint: $(STAMP)
	@$(PY) -m ruff check . || { $(LINT_FAILED); }
	@$(PY) -m ruff format --check . || { $(LINT_FAILED); }

# ruff's fixes and formatting, what `make lint` asks for.
fix: $(STAMP)
	$(PY) -m ruff check --fix .
	$(PY) -m ruff format .

# Six pytest-xdist workers, each with its own Firestore emulator (tests/conftest.py):
# many tests wait on an emulator, a served handler, a subprocess or a lease to run
# out rather than on the CPU, so on 2 cores three workers a core keep both busy
# (four left them idle about half the time). `--dist loadgroup` hands each worker a
# test at a time, the longest first (tests/conftest.py), so no worker ends the session
# alone behind a queue, and runs tests/test_wheel.py on one worker (tests/conftest.py).
# Long simulations run in `make simulate` (CI runs both). pytest exits non-zero on any
# failure, error, a missing emulator or no tests at all (5).
test: lint
	$(PY) -m pytest -n 6 --dist loadgroup

# The tests of your jobs only: tests/test_jobs.py (and any tests/test_jobs_*.py you add).
test-jobs: $(STAMP)
	$(PY) -m pytest -q $(wildcard tests/test_jobs.py tests/test_jobs_*.py)

plan: $(STAMP)
	$(PY) -m scheduler_dedup.offline.plan --dir $(DIR) $(if $(STACK),--stack $(STACK)) $(if $(VIRTUALENV),--virtualenv $(VIRTUALENV))

# make exits 2 whenever a recipe fails; its "Error N" line keeps the check's own status
# (1 mandatory violation, 2 tool or program failure). CI that needs that status as the
# exit code runs the command itself: .venv/bin/python -m scheduler_dedup.offline.policy_check ...
policy-check: $(STAMP)
	$(PY) -m scheduler_dedup.offline.policy_check --dir $(DIR) $(if $(STACK),--stack $(STACK)) $(if $(POLICY_CONFIG),--policy-pack-config $(POLICY_CONFIG)) $(if $(VIRTUALENV),--virtualenv $(VIRTUALENV))

# Every stack file of DIR, one check each; fails if any of them fails.
policy-check-all: $(STAMP)
	@stacks="$$($(PY) -m scheduler_dedup.offline.stack_file --dir $(DIR))" || exit 2; \
	test -n "$$stacks" || { echo "error: no Pulumi.<stack>.yaml in $(DIR)" >&2; exit 2; }; \
	status=0; for stack in $$stacks; do \
	  $(PY) -m scheduler_dedup.offline.policy_check --dir $(DIR) --stack $$stack $(if $(POLICY_CONFIG),--policy-pack-config $(POLICY_CONFIG)) $(if $(VIRTUALENV),--virtualenv $(VIRTUALENV)) || status=1; \
	done; exit $$status

demo: $(STAMP)
	$(PY) -m scheduler_dedup.localrun.demo $(ARGS)

# Stops what `make demo ARGS=--keep` left running (the emulator and the handler).
demo-stop: $(STAMP)
	$(PY) -m scheduler_dedup.localrun.demo_keep stop

bench: $(STAMP)
	$(PY) -m bench $(ARGS)

# The deterministic simulation (scheduler_dedup/localrun/simulation, docs/reliability.md "The simulator"):
# ARGS="--seeds N" runs N seeds, ARGS="--seed S" prints one seed's trace.
simulate: $(STAMP)
	$(PY) -m scheduler_dedup.localrun.simulation $(ARGS)

# google.api_core warns at import that it will drop Python 3.11 in 2027; that
# says nothing about the command, so only that warning is silenced.
ops: $(STAMP)
	cd handler && ../$(PY) -W "ignore:You are using a Python version:FutureWarning" -m runledger.ops $(ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
