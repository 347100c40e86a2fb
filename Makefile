# Two commands for a fresh machine: `make demo` (install + quickstart) and `make test` (install + whole suite);
# `make lint` runs ruff and the import contracts (pyproject.toml), as .ci/run does before the tests.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test lint install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	# torch first and in the same command: the pinned CPU build, never a CUDA one
	$(VENV)/bin/pip install --quiet --disable-pip-version-check torch==2.13.0 -e ".[dev,train,cluster]"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/python scripts/quickstart.py

# Two test processes, each taking whole files (a file's tests share its fixtures and run in order): most of a
# test's time is a server or worker process starting or waiting, so two share the two cores of CI well.
test: $(STAMP)
	$(VENV)/bin/python -m pytest -n 2 --dist loadfile

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks scripts
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache
