#!/bin/sh
# memra-run --spec K must print exactly what plain greedy prints.
# Usage: spec_equals_greedy.sh MEMRA_RUN MODEL STAGES [TOKENS=40 [CTX]]
# With CTX (--ctx-size CTX, which TOKENS overfills): both runs must also end where the context fills, saying so
# with the same count of generated tokens, and exit 0.
set -eu
run=$1 model=$2 stages=$3 n=${4:-40} ctx=${5:-}
prompt='def add(a, b):
    return a + b

def sub(a, b):
    return a - b

def mul(a, b):'
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
set -- -m "$model" -p "$prompt" -n "$n" --temp 0 --stages "$stages"
[ -z "$ctx" ] || set -- "$@" --ctx-size "$ctx"
"$run" "$@" > "$tmp/greedy" 2> "$tmp/greedy.err" || { echo "greedy exits $?:"; cat "$tmp/greedy.err"; exit 1; }
"$run" "$@" --spec 4 > "$tmp/spec" 2> "$tmp/spec.err" || { echo "spec exits $?:"; cat "$tmp/spec.err"; exit 1; }
cat "$tmp/spec.err" >&2
if cmp -s "$tmp/greedy" "$tmp/spec"; then
  echo "spec output identical to greedy ($(wc -c < "$tmp/spec") bytes)"
else
  echo "spec output DIFFERS from greedy"; diff "$tmp/greedy" "$tmp/spec" || true; exit 1
fi
grep -q "speculative:" "$tmp/spec.err"
if [ -n "$ctx" ]; then
  g=$(grep -o "the context (--ctx-size $ctx) filled after [0-9]* generated tokens" "$tmp/greedy.err") ||
    { echo "greedy did not end where the context filled:"; cat "$tmp/greedy.err"; exit 1; }
  s=$(grep -o "the context (--ctx-size $ctx) filled after [0-9]* generated tokens" "$tmp/spec.err") ||
    { echo "spec did not end where the context filled"; exit 1; }
  [ "$g" = "$s" ] || { echo "greedy: $g; spec: $s"; exit 1; }
  echo "both: $g"
fi
