#!/usr/bin/env bash
# Runs one Python oracle test: PYTHON SCRIPT ARGS... Exits 77 (skip) when the venv or the shared
# tokenizer data it reads is missing, so a checkout without them skips instead of failing.
py="$1"; shift
if [ ! -x "$py" ]; then echo "skip: no test venv at $py (run scripts/setup.sh)"; exit 77; fi
for arg in "$@"; do
  case "$arg" in
    */data/tokenizers/qwen3/*) if [ ! -e "$arg" ]; then echo "skip: $arg is missing"; exit 77; fi ;;
  esac
done
exec "$py" "$@"
