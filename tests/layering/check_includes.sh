#!/usr/bin/env bash
# The layering rule of src/ (docs/ARCHITECTURE.md): a directory may not include headers of the
# directories listed against it below. core < config, io < tokenizer < grammar, backend < model <
# engine < server < cli (grammar and backend do not include each other); bench (the load generator and campaign) sits on core and config only, so the
# sweep cannot reach into the engine; eval (the quality evals) sits on core, config and bench (its
# HTTP client and charts); image (decoders and the image processor) sits on core alone, under model,
# engine and server; jinja (the template interpreter) sits on core and tokenizer (Python string
# formatting), under server. Violations that exist today and are being removed are
# listed in known_violations.txt ("file: include", one a line); a violation not listed fails, and
# so does a listed one that is gone (delete its line: the list only shrinks).
# Usage: check_includes.sh SRC_DIR KNOWN_VIOLATIONS_FILE. Exit 0 clean, 1 on a finding.
set -euo pipefail
src=${1:?usage: check_includes.sh SRC_DIR KNOWN_VIOLATIONS_FILE}
known_file=${2:?usage: check_includes.sh SRC_DIR KNOWN_VIOLATIONS_FILE}

declare -A forbidden=(
  [core]="image jinja config io tokenizer grammar backend model engine server bench eval cli"
  [config]="image jinja io tokenizer grammar backend model engine server bench eval cli"
  [io]="image jinja tokenizer grammar backend model engine server bench eval cli"
  [image]="jinja config io tokenizer grammar backend model engine server bench eval cli"
  [tokenizer]="image jinja grammar backend model engine server bench eval cli"
  [grammar]="image jinja config io backend model engine server bench eval cli"
  [backend]="image jinja tokenizer grammar model engine server bench eval cli"
  [model]="engine server bench eval cli"
  [engine]="server bench eval cli"
  [server]="bench eval cli"
  [bench]="image jinja grammar backend model engine server eval cli"
  [eval]="image jinja tokenizer grammar backend model engine server cli"
  [jinja]="image config io grammar backend model engine server bench eval cli"
)

found=()
for dir in "${!forbidden[@]}"; do
  [ -d "$src/$dir" ] || continue
  for bad in ${forbidden[$dir]}; do
    while IFS= read -r hit; do
      [ -n "$hit" ] || continue
      file=${hit%%:*}
      include=$(sed -E 's/.*#[[:space:]]*include[[:space:]]*"([^"]+)".*/\1/' <<<"${hit#*:}")
      found+=("src/${file#"$src"/}: $include")
    done < <(grep -rE --include='*.h' --include='*.cpp' --include='*.cu' --include='*.cuh' \
               "^[[:space:]]*#[[:space:]]*include[[:space:]]*\"$bad/" "$src/$dir" || true)
  done
done

known=()
while IFS= read -r line; do
  line=${line%%#*}
  line=$(sed -E 's/[[:space:]]+$//' <<<"$line")
  [ -n "$line" ] && known+=("$line")
done <"$known_file"

status=0
for f in "${found[@]}"; do
  if ! printf '%s\n' "${known[@]}" | grep -qxF -- "$f"; then
    echo "layering violation: $f" >&2
    status=1
  fi
done
for k in "${known[@]}"; do
  if ! printf '%s\n' "${found[@]}" | grep -qxF -- "$k"; then
    echo "known violation is gone, delete its line from $(basename "$known_file"): $k" >&2
    status=1
  fi
done
[ $status -eq 0 ] && echo "layering: ${#found[@]} known violations, no new ones"
exit $status
