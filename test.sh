#!/usr/bin/env bash
# Runs the whole test-suite (CPU only, a few minutes on 2 cores). Sets up Python itself on a fresh machine
# (tools/python_env.sh: the same interpreter as run.sh and tools/py). Extra arguments go to pytest, e.g.
# ./test.sh -k loader -x
set -euo pipefail
cd "$(dirname "$0")"
source tools/python_env.sh
echo "+ $PYTHON -m pytest tests $*"
exec env CUDA_VISIBLE_DEVICES="" "$PYTHON" -m pytest tests "$@"
