# One command per workflow. `make test` and `make dev` bootstrap everything they need.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAGE ?= dev

export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20
export CDK_DISABLE_CLI_TELEMETRY := true
export AWS_EC2_METADATA_DISABLED := true
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: docs docs-serve bootstrap test lint format typecheck pytest coverage bench dev demo synth deps-layer deploy lock clean

## Tools (venv, node_modules), then the Lambda dependency layer's cache (pip, once per lock; a
## failure here is not fatal: synth builds the layer itself or fails saying what to do).
bootstrap: $(BIN)/.bootstrapped node_modules/.bootstrapped
	-@$(BIN)/python scripts/build_deps_layer.py --quiet

$(BIN)/.bootstrapped: requirements/dev.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -r requirements/dev.txt
	$(BIN)/pip install --quiet --no-deps -e .
	touch $@

node_modules/.bootstrapped: package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	touch $@

## The whole test suite: lint, types, unit + integration + infra tests, API fuzzing, `sam validate --lint`.
test: bootstrap lint typecheck pytest fuzz sam-validate docs

lint: bootstrap
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: bootstrap
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

typecheck: bootstrap
	$(BIN)/mypy cdk cli functions layers tests scripts

## pytest-xdist: one worker per core; each test file runs on one worker (its module's local stack is
## started once), the infra files together (the CDK synths: tests/conftest.py). PYTEST_WORKERS=0 runs serially.
PYTEST_WORKERS ?= auto
PYTEST_XDIST = -n $(PYTEST_WORKERS) --dist loadfile

pytest: bootstrap browser
	$(BIN)/pytest $(PYTEST_XDIST) $(PYTEST_ARGS)

## The console's browser tests drive Debian's `chromium`: installed here with apt when missing and
## apt is usable (root, or CI); otherwise tests/browser skip and say what is missing.
.PHONY: browser
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  { if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	      apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium; \
	    else echo "no chromium and no usable apt: the browser tests will skip"; fi; }

## The same tests under coverage (branch coverage about doubles the suite's time, so not in `make test`).
coverage: bootstrap
	$(BIN)/pytest $(PYTEST_XDIST) --cov --cov-report=term-missing:skip-covered $(PYTEST_ARGS)

## Performance figures as ratios against baselines measured in the same run (prints, asserts nothing).
bench: bootstrap
	$(BIN)/python scripts/benchmark.py
	$(BIN)/python scripts/benchmark_deployed.py
	$(BIN)/python scripts/benchmark_local.py
	$(BIN)/python scripts/benchmark_cli.py

## Fuzz the HTTP API from its OpenAPI document (schemathesis against the local stack, three keys; ~2 min).
## schemathesis lives in its own venv: its dependency pins clash with the project's.
.PHONY: fuzz
FUZZ_VENV := .venv-fuzz
SCHEMATHESIS_VERSION := 4.32.5
fuzz: bootstrap $(FUZZ_VENV)/.bootstrapped-$(SCHEMATHESIS_VERSION)
	$(BIN)/python scripts/fuzz_api.py $(FUZZ_ARGS)

$(FUZZ_VENV)/.bootstrapped-$(SCHEMATHESIS_VERSION):
	rm -rf $(FUZZ_VENV) && $(PYTHON) -m venv $(FUZZ_VENV)
	echo '*' > $(FUZZ_VENV)/.gitignore
	$(FUZZ_VENV)/bin/pip install --quiet --upgrade pip
	$(FUZZ_VENV)/bin/pip install --quiet "schemathesis==$(SCHEMATHESIS_VERSION)"
	touch $@

## The docs site (mkdocs-material, in its own venv pinned by requirements/docs.txt): the reference
## pages are written from the code, then `mkdocs build --strict` fails on a broken link or a page
## missing from the navigation. `make docs-serve` serves it with live reload on localhost:8000.
DOCS_VENV := .venv-docs
export NO_MKDOCS_2_WARNING := 1
docs: bootstrap $(DOCS_VENV)/.bootstrapped
	$(BIN)/python scripts/docs_reference.py
	$(DOCS_VENV)/bin/mkdocs build --strict --quiet
	@echo "docs: build/site/index.html"

docs-serve: docs
	$(DOCS_VENV)/bin/mkdocs serve

$(DOCS_VENV)/.bootstrapped: requirements/docs.txt
	rm -rf $(DOCS_VENV) && $(PYTHON) -m venv $(DOCS_VENV)
	echo '*' > $(DOCS_VENV)/.gitignore
	$(DOCS_VENV)/bin/pip install --quiet --upgrade pip
	$(DOCS_VENV)/bin/pip install --quiet -r requirements/docs.txt
	touch $@

## Start the whole system locally (moto, HTTP API on localhost:8080, pollers, schedules). Ctrl-C stops it.
dev: bootstrap
	$(BIN)/aijobs dev --port $(or $(PORT),8080) --info-file .aijobs/local.json

## Synthesize the stage's template into cdk.out/ (no AWS account or Docker; with the dependency
## layer cached, no network either). Plain `npx cdk synth`/`deploy` build the layer the same way.
synth: bootstrap
	npx cdk synth --no-notices -q -c stage=$(STAGE)

## Build the Lambda dependency layer into .cache/deps-layer/ with pip's cross-platform options
## (never Docker); REBUILD=1 ignores the cache.
deps-layer: bootstrap
	$(BIN)/python scripts/build_deps_layer.py $(if $(REBUILD),--rebuild)

## Deploy one stage. CDK asks before a change that widens IAM or security groups ("broadening");
## a pipeline that reviewed the diff first runs `make deploy APPROVAL=never`.
deploy: deps-layer
	npx cdk deploy --no-notices --require-approval $(or $(APPROVAL),broadening) -c stage=$(STAGE)

## Re-pin requirements/dev.txt from requirements/dev.in in a throwaway venv.
lock:
	rm -rf .lock-venv && $(PYTHON) -m venv .lock-venv
	.lock-venv/bin/pip install --quiet --upgrade pip && .lock-venv/bin/pip install --quiet -r requirements/dev.in
	( echo "# Pinned by \`make lock\` from requirements/dev.in (pip freeze of a clean venv). Do not edit by hand."; \
	  .lock-venv/bin/pip freeze ) > requirements/dev.txt
	rm -rf .lock-venv

## Submit a mix of jobs to the running local stack and watch them finish.
demo: bootstrap
	$(BIN)/aijobs demo --info-file .aijobs/local.json

## Chaos soak on its own local stack, then the invariant report (exit 1 on any violation).
## `make soak JOBS=3000 USERS=20` is the long run; CI runs a short one inside `make test`.
.PHONY: soak
soak: bootstrap
	$(BIN)/aijobs soak --jobs $(or $(JOBS),300) --users $(or $(USERS),6) --seed $(or $(SEED),1)

clean:
	rm -rf $(VENV) node_modules cdk.out build .pytest_cache .mypy_cache .ruff_cache .coverage
	rm -rf $(FUZZ_VENV)
	rm -rf $(SAM_VENV)

## `sam local invoke` (README "sam local invoke"): the --env-vars file with each function's real
## resource names. sam-env: the deployed stage aijobs-$(STAGE) (credentials from AWS_PROFILE /
## AWS_REGION); sam-env-local: the running `make dev` stack (ENDPOINT_HOST=127.0.0.1 with
## `sam local invoke --docker-network host` on Linux). Both synthesize first: names follow the template.
.PHONY: sam-cli sam-env sam-env-local sam-validate events
SAM_VENV := .venv-sam
SAM_VERSION := 1.170.0
SAM_ENV_FILE := .aijobs/sam-env.json
SAM_OUT := build/sam
sam-env: synth
	$(BIN)/python -m aijobs_cli.local.sam_env --template cdk.out/aijobs-$(STAGE).template.json \
	  --stack aijobs-$(STAGE) --out $(SAM_ENV_FILE)

sam-env-local: synth
	$(BIN)/python -m aijobs_cli.local.sam_env --template cdk.out/aijobs-$(STAGE).template.json \
	  --info-file .aijobs/local.json --out $(SAM_ENV_FILE) $(if $(ENDPOINT_HOST),--endpoint-host $(ENDPOINT_HOST))

## The sample events alone (sam-env and sam-env-local write them too, with the stage's real queue
## names): an SQS batch per job kind and the input of each cron of .env.$(STAGE), plus events/.
events: bootstrap
	$(BIN)/aijobs events --stage $(STAGE) --out .aijobs/events

## `sam validate --lint` on the dev and prod templates (CI runs it in `make test`). Only CDK's own
## redundant-DependsOn warning (W3005) is filtered: scripts/sam_validate.py. The SAM CLI lives in
## its own venv (.venv-sam): its pins (boto3, pydantic, click) clash with the project's.
## Both stages synthesize in parallel (each is mostly one single-threaded jsii/node process).
sam-validate: bootstrap sam-cli
	$(MAKE) --no-print-directory -j2 sam-synth-dev sam-synth-prod
	$(BIN)/python scripts/sam_validate.py --sam $(SAM_VENV)/bin/sam \
	  $(SAM_OUT)/dev/aijobs-dev.template.json $(SAM_OUT)/prod/aijobs-prod.template.json

.PHONY: sam-synth-dev sam-synth-prod
sam-synth-dev:
	npx cdk synth --no-notices -q -c stage=dev -o $(SAM_OUT)/dev
# Production refuses to synthesize without an alert destination: any address does for linting.
sam-synth-prod:
	npx cdk synth --no-notices -q -c stage=prod -c ALERT_EMAIL=ops@example.com -o $(SAM_OUT)/prod

sam-cli: $(SAM_VENV)/.bootstrapped-$(SAM_VERSION)

$(SAM_VENV)/.bootstrapped-$(SAM_VERSION):
	rm -rf $(SAM_VENV) && $(PYTHON) -m venv $(SAM_VENV)
	echo '*' > $(SAM_VENV)/.gitignore
	$(SAM_VENV)/bin/pip install --quiet --upgrade pip
	$(SAM_VENV)/bin/pip install --quiet "aws-sam-cli==$(SAM_VERSION)"
	touch $@
