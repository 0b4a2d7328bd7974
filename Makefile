# The README's commands: `make demo` (the main job), `make test` (the tests) and
# `make synth` / `make deploy` (the AWS deployment). Each creates its virtualenv and installs
# what it needs on first use: the demo only the CLI (the `cli` extra, with the handlers'
# runtime), the tests everything (`dev`), the deployment only the construct library and the
# CDK (`cdk`, in .venv-deploy) and the CDK CLI pinned in package.json.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20

DEPLOY_VENV ?= .venv-deploy
DEPLOY_STAMP := $(DEPLOY_VENV)/.installed
# The Lambda asset's locked wheels, downloaded once by `make deploy-tools`: every synth and
# deploy bundles from here with no index (infra/sandbox_ledger_cdk/bundling.py).
WHEELHOUSE ?= $(DEPLOY_VENV)/wheelhouse
WHEELHOUSE_STAMP := $(WHEELHOUSE)/.filled
LAMBDA_LOCKS := infra/sandbox_ledger_cdk/lambda-requirements.txt \
	infra/sandbox_ledger_cdk/lambda-tracing-requirements.txt
# Offline CDK CLI: no notices fetched, no telemetry, no version check, no index.
CDK := PATH="$(abspath $(DEPLOY_VENV))/bin:$$PATH" CDK_DISABLE_CLI_TELEMETRY=true \
	CDK_DISABLE_VERSION_CHECK=1 npm_config_update_notifier=false \
	SANDBOX_LEDGER_WHEELHOUSE="$(abspath $(WHEELHOUSE))" npx cdk
CDK_ARGS ?=

.PHONY: demo test test-all lint typecheck check clean verify mutation test-newest-moto deploy-tools synth deploy deploy-smoke soak soak-short test-aws test-aws-clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	touch $(STAMP)

$(DEMO_STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip>=24"
	$(BIN)/python -m pip install --quiet -e ".[cli]"
	touch $(DEMO_STAMP)

# Remade when pyproject.toml changes (any edit of it, not only of the `cdk` extra): with what
# the venv holds still satisfying it, this needs no index (no --upgrade, no build isolation:
# hatchling is installed in the venv), so a synth after an edit stays offline; pip reaches
# the index only for what is missing.
$(DEPLOY_STAMP): pyproject.toml package.json package-lock.json
	test -x $(DEPLOY_VENV)/bin/python || $(PYTHON) -m venv $(DEPLOY_VENV)
	$(DEPLOY_VENV)/bin/python -m pip install --quiet "pip>=24" "hatchling>=1.27" editables
	$(DEPLOY_VENV)/bin/python -m pip install --quiet --no-build-isolation -e ".[cdk]"
	test -x node_modules/.bin/cdk || npm ci --no-audit --no-fund --silent
	touch $(DEPLOY_STAMP)

$(WHEELHOUSE_STAMP): $(LAMBDA_LOCKS) | $(DEPLOY_STAMP)
	$(DEPLOY_VENV)/bin/python -m sandbox_ledger_cdk.wheelhouse $(WHEELHOUSE)
	touch $(WHEELHOUSE_STAMP)

# What `cdk synth` and `cdk deploy` need, and nothing of the test suite; the only step that
# needs the package index (and npm's registry).
deploy-tools: $(DEPLOY_STAMP) $(WHEELHOUSE_STAMP)

synth: $(DEPLOY_STAMP) $(WHEELHOUSE_STAMP)
	$(CDK) synth --no-notices $(CDK_ARGS)

# e.g. make deploy CDK_ARGS="-c table_name=sandbox-ledger"
deploy: $(DEPLOY_STAMP) $(WHEELHOUSE_STAMP)
	$(CDK) deploy --no-notices $(CDK_ARGS)

# A scratch stack on the account of your credentials, exercised and destroyed (docs/deploy.md);
# refuses to start without SANDBOX_LEDGER_AWS_TESTS=1.
deploy-smoke: $(DEPLOY_STAMP) $(WHEELHOUSE_STAMP)
	$(DEPLOY_VENV)/bin/python -m sandbox_ledger_cdk.smoke --cdk '$(CDK)'

demo: $(DEMO_STAMP)
	$(BIN)/sandbox-ledger demo

# Scale and soak tests carry the `slow` marker, and the contract suite on further
# configurations of a store (a one-shard table, the embedded server with an adjustment off)
# the `variant` marker: `make test-all` (and CI) runs them too.
# The tests run on one pytest-xdist worker per core and one more (many tests wait on a child
# process, a server or a timeout; a second more costs more CPU than the waits it fills:
# docs/benchmarks.md has the figures by worker count); each
# worker starts its own moto and PostgreSQL servers and the CLI tests' fork server.
# --dist loadscope keeps a module's test functions (and a class's methods) on one worker,
# and the CDK modules together (tests/conftest.py): they share one jsii runtime and one
# synthesized template.
# PYTHONDONTWRITEBYTECODE is cleared for the tests: with it set, every worker rewrites and
# compiles each test module's asserts anew (about 5 s of CPU per worker) instead of reading
# pytest's cache in __pycache__ (git-ignored).
TEST_WORKERS ?= $(shell $(PYTHON) -c 'import os; print(len(getattr(os, "sched_getaffinity", lambda _: range(os.cpu_count() or 1))(0)) + 1)')
test: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -m "not slow and not variant" -n $(TEST_WORKERS) --dist loadscope --durations=15

test-all: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadscope --durations=25

# The embedded server's tests against the newest moto that pyproject.toml allows, in a venv of
# their own: an adjustment of moto that no longer fits is left off with its warning (shown,
# not an error, here), and the tests must still pass (CI runs this).
NEWEST_MOTO_VENV ?= .venv-newest-moto
test-newest-moto:
	test -x $(NEWEST_MOTO_VENV)/bin/python || $(PYTHON) -m venv $(NEWEST_MOTO_VENV)
	$(NEWEST_MOTO_VENV)/bin/python -m pip install --quiet --upgrade "pip>=24"
	$(NEWEST_MOTO_VENV)/bin/python -m pip install --quiet --upgrade -e ".[dev]" "moto[server,cloudformation]"
	$(NEWEST_MOTO_VENV)/bin/python -c "import moto; print('moto', moto.__version__)"
	$(NEWEST_MOTO_VENV)/bin/python -m pytest -q -m "not slow" -n 2 -p no:cacheprovider \
		-W "default::sandbox_ledger.local.adjustments.MotoAdjustmentWarning" \
		tests/local/test_local.py tests/local/test_local_server.py tests/local/test_local_degraded.py \
		tests/dynamodb/test_dynamodb_conformance.py

# Long model-based verification runs (docs/verification.md); VERIFY_PROFILE=deep for CI's budget.
VERIFY_PROFILE ?= long
verify: $(STAMP)
	SANDBOX_LEDGER_VERIFY=$(VERIFY_PROFILE) $(BIN)/python -m pytest -q -s -p no:cacheprovider tests/verification

# The fleet under faults (docs/reliability.md): worker processes killed at any instant, lost
# responses, the strict embedded DynamoDB's throttling, then the history checked. SOAK_SECONDS
# (default 1800, per store) and SOAK_SEED; soak-short is CI's (a minute per store).
SOAK_SECONDS ?= 1800
SOAK_SEED ?= 1
soak: $(STAMP)
	for store in dynamodb postgresql sqlite; do \
		$(BIN)/python -m sandbox_ledger.soak --store $$store --seconds $(SOAK_SECONDS) --seed $(SOAK_SEED) --workers 6 --think 0.2 || exit 1; \
	done

# The SQL stores' workers pause between rounds (tens of thousands of entries, not the
# hundred thousand of a flat-out minute on SQLite: the final round trip takes each through
# four stores, and a SQLite store's took 621 s at 17,000 appends); the strict DynamoDB's
# rates are its own pacing.
soak-short: $(STAMP)
	$(BIN)/python -m sandbox_ledger.soak --store dynamodb --seconds 60 --seed $(SOAK_SEED) --workers 4
	$(BIN)/python -m sandbox_ledger.soak --store postgresql --seconds 60 --seed $(SOAK_SEED) --workers 4 --think 0.05
	$(BIN)/python -m sandbox_ledger.soak --store sqlite --seconds 60 --seed $(SOAK_SEED) --workers 4 --think 0.3

# The library's suites against a real AWS account (docs/deploy.md, "The suites on a real
# account"): refuses without SANDBOX_LEDGER_AWS_TESTS=1 and credentials; one on-demand table
# made for the run, tagged, deleted at its end (also on a failure, Ctrl-C or SIGTERM).
# AWS_TEST_ARGS, e.g. "--suite conformance" or "-- -x". test-aws-clean deletes what runs
# left, found by their tag (AWS_CLEAN_ARGS, e.g. "--min-age 0": younger than 2 hours spared).
AWS_TEST_ARGS ?=
AWS_CLEAN_ARGS ?=
test-aws: $(STAMP)
	$(BIN)/python -m sandbox_ledger.awstest run $(AWS_TEST_ARGS)

test-aws-clean: $(STAMP)
	$(BIN)/python -m sandbox_ledger.awstest clean $(AWS_CLEAN_ARGS)

# Mutation score of the core (docs/verification.md), with mutmut 3, one module at a time, e.g.
# make mutation MUTATION_MODULES="summary.py cursor.py" (default: every module listed in
# tests/verification/mutation/run_mutmut.py). mutmut 3 imports the code it mutates from ./, src/ or source/,
# and ours is adapter/sandbox_ledger: each module runs in a generated copy,
# .mutation/<module>/ (git-ignored), holding sandbox_ledger/, tests/ and a pyproject.toml whose
# [tool.mutmut] names the module and only its fast tests; mutmut runs there under nice -n 15,
# MUTATION_CHILDREN (default 2) mutants at a time.
MUTATION_MODULES ?=
mutation: $(STAMP)
	$(BIN)/python tests/verification/mutation/run_mutmut.py $(MUTATION_MODULES)

lint: $(STAMP)
	$(BIN)/ruff check adapter lambdas tests benchmarks infra examples
	$(BIN)/ruff format --check adapter lambdas tests benchmarks infra examples

typecheck: $(STAMP)
	$(BIN)/mypy --strict adapter/sandbox_ledger lambdas infra

check: lint typecheck test

clean:
	rm -rf $(VENV) $(DEPLOY_VENV) .pytest_cache .mypy_cache .ruff_cache
