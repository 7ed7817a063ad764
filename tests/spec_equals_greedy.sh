#!/bin/sh
# memra-run --spec K must print exactly what plain greedy prints. Usage: spec_equals_greedy.sh MEMRA_RUN MODEL STAGES
set -eu
run=$1 model=$2 stages=$3
prompt='def add(a, b):
    return a + b

def sub(a, b):
    return a - b

def mul(a, b):'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$run" -m "$model" -p "$prompt" -n 40 --temp 0 --stages "$stages" > "$tmp/greedy" 2> "$tmp/greedy.err"
"$run" -m "$model" -p "$prompt" -n 40 --temp 0 --stages "$stages" --spec 4 > "$tmp/spec" 2> "$tmp/spec.err"
cat "$tmp/spec.err" >&2
if cmp -s "$tmp/greedy" "$tmp/spec"; then
  echo "spec output identical to greedy ($(wc -c < "$tmp/spec") bytes)"
else
  echo "spec output DIFFERS from greedy"; diff "$tmp/greedy" "$tmp/spec" || true; exit 1
fi
grep -q "speculative:" "$tmp/spec.err"
