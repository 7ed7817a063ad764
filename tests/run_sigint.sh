#!/bin/sh
# memra-run stops cleanly on SIGINT/SIGTERM: the text generated so far is printed (one prompt: exactly what an
# uninterrupted run of as many tokens prints; several: each request's lines prefixed [i]), stderr says why it
# stopped, and the exit status is 130 (SIGINT) / 143 (SIGTERM). Usage: run_sigint.sh MEMRA_RUN MEMRA_MKGGUF
set -eu
run=$1 mkgguf=$2
tmp=$(mktemp -d)
pid=
trap '[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$tmp"' EXIT
"$mkgguf" -o "$tmp/m.gguf" --layers 4 --ctx 32768 > /dev/null

# wait_for FILE PATTERN: until grep finds PATTERN in FILE (at most 60 s)
wait_for() {
  i=0
  while ! grep -q "$2" "$1" 2>/dev/null; do
    i=$((i + 1)); [ $i -le 600 ] || { echo "timed out waiting for '$2' in $1"; cat "$tmp"/*.err; exit 1; }
    sleep 0.1
  done
}

# stop SIG OUT ARGS...: start memra-run, signal it once it has generated text, and check how it ended
stop() {
  sig=$1 out=$2; shift 2
  "$run" -m "$tmp/m.gguf" -c 32768 -n 30000 "$@" > "$tmp/$out" 2> "$tmp/$out.err" &
  pid=$!
  wait_for "$tmp/$out.err" "loading: done"
  i=0
  while [ ! -s "$tmp/$out" ] && [ $i -lt 100 ]; do i=$((i + 1)); sleep 0.1; done # one prompt: text is out
  sleep 1
  kill -"$sig" "$pid"
  set +e; wait "$pid"; rc=$?; set -e; pid=
  want=130; [ "$sig" = TERM ] && want=143
  [ "$rc" -eq "$want" ] || { echo "$out: exit $rc, want $want"; cat "$tmp/$out.err"; exit 1; }
  grep -q "memra-run: interrupted by SIG$sig after [0-9]* generated tokens" "$tmp/$out.err" ||
    { echo "$out: no interruption message"; cat "$tmp/$out.err"; exit 1; }
  n=$(sed -n "s/.*interrupted by SIG$sig after \([0-9]*\) generated tokens.*/\1/p" "$tmp/$out.err")
  [ "$n" -gt 0 ] && [ "$n" -lt 30000 ] || { echo "$out: stopped after $n tokens: not mid-run"; exit 1; }
  echo "$out: exit $rc after $n tokens, $(wc -c < "$tmp/$out") bytes of text"
}

# one prompt, greedy: the partial text is exactly what a run of that many tokens prints
stop INT one -p "Once upon a time" --temp 0
"$run" -m "$tmp/m.gguf" -c 32768 -n "$n" -p "Once upon a time" --temp 0 > "$tmp/ref" 2> "$tmp/ref.err"
[ -s "$tmp/one" ] && cmp -s "$tmp/one" "$tmp/ref" ||
  { echo "one: the interrupted text is not the first $n tokens' text"; cmp "$tmp/one" "$tmp/ref"; exit 1; }

# two prompts in flight: both requests' text so far, each line prefixed with its prompt's number
stop INT two -p "Once upon a time" -p "The capital of France is" --temp 0
grep -q '^\[1\] ' "$tmp/two" && grep -q '^\[2\] ' "$tmp/two" ||
  { echo "two: missing a request's prefixed text"; head -c 400 "$tmp/two"; exit 1; }

stop TERM term -p "Once upon a time" --temp 0
[ -s "$tmp/term" ] || { echo "term: no text"; exit 1; }
echo "memra-run stops cleanly on SIGINT and SIGTERM"
