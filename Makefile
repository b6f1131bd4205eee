# The README's two commands. Everything runs in a project virtual environment (.venv, made by
# scripts/install.sh with the system python3), so a stock Debian/Ubuntu Python, whose pip refuses
# to install into the system (PEP 668, "externally-managed-environment"), works as it is.
# Another environment: make test VENV=/path/to/venv (it is made there if missing).
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: install report test

install:
	bash scripts/install.sh "$(VENV)"

report: install
	"$(BIN)/multidraft" report --out report --force

test: install
	"$(BIN)/python" -m pytest -n 2 -p no:cacheprovider
