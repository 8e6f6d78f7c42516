# Sourced by the one-call GPU bench scripts: `gpu_preflight NAME` makes brotli importable for $PY (from the carried
# .whl/ wheels into /tmp/site when the image lacks it; the recipes compress with brotli) and checks that DATA_PATH
# and TOKENIZER_PATH exist; a failure exits 2 with one line naming NAME.
gpu_preflight() {
  if ! "$PY" -c "import brotli" 2>/dev/null; then
    if ! ls .whl/*.whl >/dev/null 2>&1; then
      echo "$1: $PY has no brotli module and .whl/ holds no wheel (the recipe compresses with brotli)" >&2
      exit 2
    fi
    "$PY" -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl || exit 2
    export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
  fi
  for path in "$DATA_PATH" "$TOKENIZER_PATH"; do
    [ -e "$path" ] || { echo "$1: $path does not exist (DATA_PATH / TOKENIZER_PATH)" >&2; exit 2; }
  done
}
