#!/usr/bin/env bash
# The decoding tests again on the oldest transformers release that pyproject.toml admits
# ("transformers>=X"), in a side environment that shares every other installed package with
# the project environment (so only transformers, and whatever it pins, is installed anew).
#   bash scripts/test_oldest_transformers.sh [VENV]   (default .venv, as the Makefile makes it)
set -euo pipefail
cd "$(dirname "$0")/.."
py="${1:-.venv}/bin/python"
oldest=$(sed -n 's/.*"transformers>=\([0-9.]*\)".*/\1/p' pyproject.toml)
[ -n "$oldest" ] || { echo "pyproject.toml names no transformers>=X" >&2; exit 1; }
side=$(mktemp -d)/venv
"$py" -m venv "$side"
shared=$("$py" -c "import sysconfig; print(sysconfig.get_path('purelib'))")
echo "$shared" > "$("$side/bin/python" -c "import sysconfig; print(sysconfig.get_path('purelib'))")/_shared.pth"
"$side/bin/python" -m pip install -q -c constraints.txt "transformers==$oldest"
"$side/bin/python" -m pip install -q --no-deps -e .
echo "decoding tests on transformers $("$side/bin/python" -c 'import transformers; print(transformers.__version__)')"
"$side/bin/python" -m pytest -n 2 -p no:cacheprovider -q tests/test_decoding.py tests/test_decoding_models.py \
  tests/test_decoding_compile.py tests/test_decoding_roots.py tests/test_decoding_results.py tests/test_profiling.py
