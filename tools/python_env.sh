# Sourced by run.sh and test.sh. Sets PYTHON to an interpreter that has everything the project needs:
# the current python3 when it already has it (nothing is reinstalled), else ./.venv, created and filled from
# requirements.txt once. On a machine without an NVIDIA GPU, torch is pinned to the CPU build 2.13.0
# (override with TORCH_SPEC, e.g. TORCH_SPEC="torch==2.9.1").
_project_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_required_modules="torch, numpy, sentencepiece, huggingface_hub, tqdm${PYTHON_EXTRA_MODULES:+, $PYTHON_EXTRA_MODULES}"

_has_requirements() {
  "$1" -c "import $_required_modules" >/dev/null 2>&1
}

PYTHON=${PYTHON:-python3}
if _has_requirements "$PYTHON"; then
  :
elif [ -x "$_project_root/.venv/bin/python" ] && _has_requirements "$_project_root/.venv/bin/python"; then
  PYTHON="$_project_root/.venv/bin/python"
else
  echo "setup: $PYTHON lacks some of: $_required_modules; installing requirements into $_project_root/.venv (once)"
  python3 -m venv "$_project_root/.venv"
  "$_project_root/.venv/bin/python" -m pip install -q --upgrade pip
  if ! command -v nvidia-smi >/dev/null 2>&1; then
    "$_project_root/.venv/bin/python" -m pip install -q "${TORCH_SPEC:-torch==2.13.0}"
  fi
  "$_project_root/.venv/bin/python" -m pip install -q -r "$_project_root/requirements.txt"
  PYTHON="$_project_root/.venv/bin/python"
  _has_requirements "$PYTHON" || { echo "setup: installation into .venv failed" >&2; exit 1; }
fi
export PYTHON
