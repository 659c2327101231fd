# Two entry points (see README): `make demo` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
INDEX_DIR ?= .skb/hpo

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: demo test test-unit test-all install bytecode lint typecheck bench clean metaqa metaqa-bench docs docs-build

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, pinned: an unpinned resolve pulls the multi-GB CUDA build
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[test,ray,mapped]'
	touch $(STAMP)

install: $(STAMP)

# Bytecode for the project's own modules: an editable install leaves them uncompiled, and where
# PYTHONDONTWRITEBYTECODE is set every `skb` start recompiles them (~0.2 s of a cold `skb ask`).
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q graphs tools agent evals prompts

# First answer early: the core stage (graph, statistics, BM25, store; no model) answers while the complete
# index (node and phrase vectors) is built and swapped in; a complete index makes the core step a no-op.
demo: $(STAMP) bytecode
	$(BIN)/skb index --dataset hpo --index-dir $(INDEX_DIR) --stage core
	$(BIN)/skb ask "Which rare disease is characterized by brachyturricephaly, proptosis, midface retrusion and cutaneous syndactyly of toes?" --index-dir $(INDEX_DIR)
	$(BIN)/skb index --dataset hpo --index-dir $(INDEX_DIR)
	$(BIN)/skb search "seizures, microcephaly and global developmental delay" --index-dir $(INDEX_DIR) --mode hybrid --type Disease --k 10
	$(BIN)/skb ask "Which rare disease is characterized by brachyturricephaly, proptosis, midface retrusion and cutaneous syndactyly of toes?" --index-dir $(INDEX_DIR)

test: $(STAMP)
	bash scripts/ensure_chromium.sh
	$(BIN)/ruff check graphs tools agent evals tests
	$(BIN)/mypy
	$(BIN)/lint-imports
	$(BIN)/python -m pytest -q -m "not slow" tests

# The fast run: no server, no model (tests/conftest.py marks each test unit or integration).
test-unit: $(STAMP)
	$(BIN)/python -m pytest -q -m "unit and not slow" tests

# The documentation site (mkdocs.yml, docs/): served at http://127.0.0.1:8000 with live reload; `make test` builds
# it with --strict and runs every example in README.md and docs/ (tests/docs/test_site.py, tests/docs/test_examples.py).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 PYTHONPATH=$(CURDIR) $(BIN)/mkdocs serve

docs-build: $(STAMP)
	NO_MKDOCS_2_WARNING=1 PYTHONPATH=$(CURDIR) $(BIN)/mkdocs build --strict --site-dir site

test-all: $(STAMP)
	$(BIN)/python -m pytest -q tests

lint: $(STAMP)
	$(BIN)/ruff check graphs tools agent evals tests
	$(BIN)/lint-imports

typecheck: $(STAMP)
	$(BIN)/mypy

bench: $(STAMP)
	$(BIN)/skb eval --bench ../shared/bench/hpo_cases_dev.csv --index-dir $(INDEX_DIR) --method bm25 --method vss --method hybrid --method agent --method agent+sage --out runs/hpo-dev

METAQA ?= ../shared/metaqa

# MetaQA (WikiMovies KB; Zhang et al., AAAI 2018; CC BY 3.0): the triples loader with the shipped profile
metaqa: $(STAMP)
	$(BIN)/skb index --dataset metaqa --data $(METAQA)/kb.txt --index-dir .skb/metaqa

metaqa-bench: metaqa
	$(BIN)/skb eval --bench $(METAQA)/metaqa_dev.csv --index-dir .skb/metaqa --method agent --out runs/metaqa-dev

clean:
	rm -rf .skb runs site
