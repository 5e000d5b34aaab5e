# Starverse: `make run` starts the whole platform; `make test` installs and runs the whole suite.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
SUDO   := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: run test install install-test browser translations lint format clean-data screenshots

run: install translations
	$(BIN)/python -m launcher run

test: install-test browser translations
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/python -m pytest $(PYTEST_ARGS)

install: $(VENV)/.installed

# The zh-hans catalogs (locale/*.po) compiled to .mo, with Babel (no GNU gettext needed).
translations: install
	$(BIN)/python -m portal.translations
install-test: $(VENV)/.installed-test

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet --editable '.[all]'
	touch $@

$(VENV)/.installed-test: pyproject.toml sdk/pyproject.toml $(VENV)/.installed
	$(BIN)/pip install --quiet --editable '.[all,test]' --editable ./sdk
	touch $@

# The browser tests drive Debian's Chromium through Playwright (Playwright's own download can't work here).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		($(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium chromium-driver)

# PNGs of the pricing, train, job and bids pages at 1366x900 and 390x844 in artifacts/screenshots/: the test that
# takes them (tests/system/browser/test_responsive_layout.py, marked `screenshots`) also runs in `make test`, so it can't rot.
screenshots: install-test browser
	$(BIN)/python -m pytest -q -m screenshots tests/system/browser/test_responsive_layout.py

lint:
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/ruff format --check .

format:
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

clean-data:
	rm -rf .data
