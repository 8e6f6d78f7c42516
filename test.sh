#!/usr/bin/env bash
# The test-suite, CPU only (README's test command; CI's .ci/run runs exactly this). Sets up Python itself on a fresh
# machine (tools/python_env.sh: the same interpreter as run.sh and tools/py) and, into ./.venv, Triton's CPU wheel,
# so that the fused-kernel tests run under Triton's interpreter (torch's CUDA builds ship Triton). A test that needs
# an optional package that is missing skips and says why (-rs lists every skip), unless REQUIRE_TRITON_TESTS=1.
# The test files run in TEST_WORKERS (default 2) processes of pytest-xdist (also installed into ./.venv), each file
# whole in one process (its module fixtures made once), one OpenMP thread each; TEST_WORKERS=0: in this process.
# Extra arguments go to pytest, e.g. ./test.sh -k loader -x
set -euo pipefail
cd "$(dirname "$0")"
source tools/python_env.sh
if [ "$PYTHON" = "$PWD/.venv/bin/python" ] && ! "$PYTHON" -c "import triton" >/dev/null 2>&1; then
  echo "setup: installing into $PWD/.venv: triton==3.7.1 (the fused-kernel tests on the CPU)" >&2
  "$PYTHON" -m pip install -q "triton==3.7.1" >&2 \
    || { echo "setup: pip install triton failed (see above)" >&2; exit 1; }
fi
if [ "$PYTHON" = "$PWD/.venv/bin/python" ] && ! "$PYTHON" -c "import xdist" >/dev/null 2>&1; then
  echo "setup: installing into $PWD/.venv: pytest-xdist==3.8.0 (test files in TEST_WORKERS processes)" >&2
  "$PYTHON" -m pip install -q "pytest-xdist==3.8.0" >&2 \
    || { echo "setup: pip install pytest-xdist failed (see above)" >&2; exit 1; }
fi
workers=${TEST_WORKERS:-2}
if [ "$workers" -gt 0 ] && ! "$PYTHON" -c "import xdist" >/dev/null 2>&1; then
  echo "setup: pytest-xdist is not installed ($PYTHON): TEST_WORKERS=0, the test files run one after another" >&2
  workers=0
fi
xdist=()
[ "$workers" -gt 0 ] && xdist=(-n "$workers" --dist loadfile)
[ "$workers" -gt 1 ] && export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"  # the processes share the cores
echo "+ $PYTHON -m pytest -rs ${xdist[*]:+${xdist[*]} }tests $*"
# PASSIVE: idle OpenMP threads of the in-process tests sleep instead of spinning (the trainer does so when run)
exec env CUDA_VISIBLE_DEVICES="" OMP_WAIT_POLICY="${OMP_WAIT_POLICY:-PASSIVE}" \
  "$PYTHON" -m pytest -rs "${xdist[@]}" tests "$@"
