# Sourced by run.sh, test.sh, tools/py and .ci/run, so that all of them use one interpreter. Sets and exports
# PYTHON: a Python >= 3.10 that has every package requirements.txt names (at its >= version), the first of
#   1. $PYTHON, when the caller set it: used as it is (an error if it lacks something; nothing is installed)
#   2. ./.venv/bin/python, when ./.venv exists: what it lacks, and only that, is installed into it
#   3. python3, when it has everything (nothing is installed)
#   4. a new ./.venv made by python3 that sees python3's packages (a GPU machine's torch is used, not
#      replaced), with what those lack installed into it.
# Installed torch is the CPU build 2.13.0 on a machine without nvidia-smi (TORCH_SPEC overrides, e.g.
# TORCH_SPEC="torch==2.9.1"), else requirements.txt's line. Messages go to stderr: tools/py's stdout is the
# program's own.
_project_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
_venv="$_project_root/.venv"

_missing_requirements() {  # prints the lines of requirements.txt that interpreter $1 lacks; status 3: Python < 3.10
  "$1" - "$_project_root/requirements.txt" <<'EOF'
import importlib.util, re, sys
if sys.version_info < (3, 10):
    print("Python %d.%d (3.10 or newer is needed)" % sys.version_info[:2])
    sys.exit(3)
import importlib.metadata


def numbers(version):
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


for line in open(sys.argv[1]):
    spec = line.split("#", 1)[0].strip()
    match = re.match(r"([A-Za-z0-9_.-]+)\s*(?:>=\s*([0-9][0-9.]*))?", spec)
    if not match:
        continue
    name, minimum = match.groups()
    if importlib.util.find_spec(name.replace("-", "_")) is None:
        print(spec)
        continue
    try:
        installed = importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:  # importable, from a distribution of another name
        continue
    if minimum and numbers(installed) < numbers(minimum):
        print(spec)
EOF
}

_install_into_venv() {  # the missing requirement lines as arguments
  local spec specs=() still_missing
  for spec in "$@"; do
    if [[ $spec =~ ^torch([^A-Za-z0-9_.-]|$) ]] && ! command -v nvidia-smi >/dev/null 2>&1; then
      spec=${TORCH_SPEC:-torch==2.13.0}
    fi
    specs+=("$spec")
  done
  echo "setup: installing into $_venv: ${specs[*]}" >&2
  "$_venv/bin/python" -m pip install -q "${specs[@]}" >&2 \
    || { echo "setup: pip install into $_venv failed (see above)" >&2; exit 1; }
  still_missing=$(_missing_requirements "$_venv/bin/python") || true
  if [ -n "$still_missing" ]; then
    echo "setup: after installing, $_venv/bin/python still lacks: ${still_missing//$'\n'/, }" >&2
    exit 1
  fi
}

_complete_venv() {  # installs into ./.venv what it lacks
  local missing missing_list
  if ! missing=$(_missing_requirements "$_venv/bin/python"); then
    echo "setup: $_venv/bin/python: ${missing:-does not run}; remove $_venv to make a new one" >&2
    exit 1
  fi
  if [ -n "$missing" ]; then
    mapfile -t missing_list <<<"$missing"
    _install_into_venv "${missing_list[@]}"
  fi
}

if [ -n "${PYTHON:-}" ]; then
  _status=0
  _missing=$(_missing_requirements "$PYTHON" 2>&1) || _status=$?
  if [ "$_status" -ne 0 ] || [ -n "$_missing" ]; then
    case $_status in
      0) echo "setup: PYTHON=$PYTHON lacks: ${_missing//$'\n'/, }" >&2 ;;
      3) echo "setup: PYTHON=$PYTHON is $_missing" >&2 ;;
      *) echo "setup: PYTHON=$PYTHON does not run: $_missing" >&2 ;;
    esac
    echo "setup: install requirements.txt into it, or unset PYTHON to use ./.venv (made once if needed)" >&2
    exit 1
  fi
elif [ -x "$_venv/bin/python" ]; then
  _complete_venv
  PYTHON="$_venv/bin/python"
else
  if ! command -v python3 >/dev/null 2>&1; then
    echo "setup: no python3 on PATH: install Python 3.10 or newer, or set PYTHON" >&2
    exit 1
  fi
  _status=0
  _missing=$(_missing_requirements python3) || _status=$?
  if [ "$_status" -eq 3 ]; then
    echo "setup: python3 is $_missing: set PYTHON to a newer interpreter" >&2
    exit 1
  fi
  if [ "$_status" -eq 0 ] && [ -z "$_missing" ]; then
    PYTHON=python3
  else
    echo "setup: python3 lacks ${_missing//$'\n'/, }; making $_venv (once)" >&2
    python3 -m venv --system-site-packages "$_venv" >&2 \
      || { echo "setup: python3 -m venv failed (on Debian/Ubuntu: apt-get install python3-venv)" >&2
           rm -rf "$_venv"; exit 1; }
    "$_venv/bin/python" -m pip install -q --upgrade pip >&2
    _complete_venv
    PYTHON="$_venv/bin/python"
  fi
fi
export PYTHON
