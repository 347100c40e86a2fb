# Two commands for a fresh machine: `make demo` (install + quickstart) and `make test` (install + whole suite);
# `make lint` runs ruff and the import contracts (pyproject.toml), as .ci/run does before the tests.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: demo test lint install clean

# The headless Chromium of the browser tests (tests/browser.py, docs/browser.md): Debian's chromium-headless-shell,
# installed with apt-get (root, as on every machine of this project) when its binary is missing.
CHROMIUM := /usr/lib/chromium/chromium-headless-shell

install: $(STAMP) $(CHROMIUM)

$(CHROMIUM):
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium-headless-shell

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	# torch first and in the same command: the pinned CPU build, never a CUDA one
	$(VENV)/bin/pip install --quiet --disable-pip-version-check torch==2.13.0 -e ".[dev,train,cluster,trackers]"
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/python scripts/quickstart.py

# Two test processes, each taking whole files (a file's tests share its fixtures and run in order): most of a
# test's time is a server or worker process starting or waiting, so two share the two cores of CI well.
test: $(STAMP) $(CHROMIUM)
	$(VENV)/bin/python -m pytest -n 2 --dist loadfile --durations=25

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks scripts
	$(VENV)/bin/lint-imports

clean:
	rm -rf $(VENV) .pytest_cache
