#!/usr/bin/env bash
# The test-suite, CPU only (README's test command; CI's .ci/run runs exactly this). Sets up Python itself on a fresh
# machine (tools/python_env.sh: the same interpreter as run.sh and tools/py) and, into ./.venv, Triton's CPU wheel,
# so that the fused-kernel tests run under Triton's interpreter (torch's CUDA builds ship Triton). A test that needs
# an optional package that is missing skips and says why (-rs lists every skip), unless REQUIRE_TRITON_TESTS=1.
# Extra arguments go to pytest, e.g. ./test.sh -k loader -x
set -euo pipefail
cd "$(dirname "$0")"
source tools/python_env.sh
if [ "$PYTHON" = "$PWD/.venv/bin/python" ] && ! "$PYTHON" -c "import triton" >/dev/null 2>&1; then
  echo "setup: installing into $PWD/.venv: triton==3.7.1 (the fused-kernel tests on the CPU)" >&2
  "$PYTHON" -m pip install -q "triton==3.7.1" >&2 \
    || { echo "setup: pip install triton failed (see above)" >&2; exit 1; }
fi
echo "+ $PYTHON -m pytest -rs tests $*"
# PASSIVE: idle OpenMP threads of the in-process tests sleep instead of spinning (the trainer does so when run)
exec env CUDA_VISIBLE_DEVICES="" OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}" "$PYTHON" -m pytest -rs tests "$@"
