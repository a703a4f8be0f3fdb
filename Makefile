# newsmon: the two set-up commands of the README are `make demo` (the main job on the embedded defaults)
# and `make test`; `make eval` runs the offline evaluation. Both create .venv on first use: the CPU build of torch first (pip takes it from local
# disk on our machines), then this package with its test extras.
PY ?= python3
VENV ?= .venv
DATA ?= ../shared/data/sentinews_sl
TUNE ?= 50
BIN := $(VENV)/bin

$(BIN)/newsmon: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[cpu,test]'
	touch $@

.PHONY: install demo eval test
install: $(BIN)/newsmon

demo: install
	$(BIN)/newsmon demo --data $(DATA)

eval: install
	$(BIN)/newsmon eval --data $(DATA) --methods rae,zshot,mlknn,svm,logreg --tune $(TUNE)

test: install
	$(BIN)/python -m pytest -q

# The Helm chart: render helm/newsmon with Helm's Go SDK (helm-python-sdk, in .venv-helm, created on first use)
# for values.yaml, values-gpu.yaml and ci/full-values.yaml, lint it, and validate every manifest against the
# Kubernetes schemas. Manifests and report in build/helm/.
.PHONY: helm-check
helm-check:
	$(PY) scripts/helm_check.py --out build/helm
