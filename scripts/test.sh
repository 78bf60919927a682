#!/usr/bin/env bash
# Sets everything up, then runs all tests: the engine's GoogleTest suite and pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
PY=${PYTHON:-python3}

echo "== GoogleTest (engine) =="
./build/tiny_engine_tests --gtest_brief=1
gtest_rc=$?

echo "== pytest (torch) =="
TINY_STRICT=1 $PY -m pytest -q -p no:cacheprovider tests "$@"
pytest_rc=$?

[ $gtest_rc -eq 0 ] && [ $pytest_rc -eq 0 ]
