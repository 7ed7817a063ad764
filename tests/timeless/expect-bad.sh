#!/bin/sh
# Usage: expect-bad.sh PYTHON CHECK DIR: CHECK on the bad fixture must exit 1 and name exactly these offences.
out=$("$1" "$2" "$3" 2>&1); rc=$?
printf '%s\n' "$out"
[ "$rc" = 1 ] || { echo "expect-bad: exit $rc, want 1"; exit 1; }
for want in 'src.c:2: run-number' 'src.c:3: run-number' 'src.c:4: diary' 'notes.md:2: design-doc' \
            'notes.md:3: diary' 'notes.md:6: run-number' 'docs/bench/page.md:6: diary' 'docs/bench/page.md:7: design-doc'; do
  printf '%s\n' "$out" | grep -qF "$want" || { echo "expect-bad: missing $want"; exit 1; }
done
n=$(printf '%s\n' "$out" | grep -c ': [a-z-]*: ')
[ "$n" = 8 ] || { echo "expect-bad: $n offences, want 8 (a string literal or an evidence table row was flagged)"; exit 1; }
