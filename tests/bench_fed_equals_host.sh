#!/bin/sh
# memra-bench pp-scaling decodes the same tokens whether greedy runs on the host (--device-argmax 0), on the device
# (1) or with each next step fed on the device (2): the timed window covers the same positions in every mode, so
# the token hashes must be equal. Usage: bench_fed_equals_host.sh MEMRA_BENCH MODEL
set -eu
bench=$1 model=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for m in 0 1 2; do
  "$bench" pp-scaling -m "$model" --stages 2 --seqs 2 --tokens 6 --device-argmax $m > "$tmp/$m" 2>&1 ||
    { cat "$tmp/$m"; exit 1; }
  grep -oE 'tokens fnv PP-2 [0-9a-f]+' "$tmp/$m" | cut -d' ' -f4 > "$tmp/$m.fnv"
  [ -s "$tmp/$m.fnv" ] || { echo "--device-argmax $m printed no token hash"; cat "$tmp/$m"; exit 1; }
done
if cmp -s "$tmp/0.fnv" "$tmp/1.fnv" && cmp -s "$tmp/0.fnv" "$tmp/2.fnv"; then
  echo "host, device and fed greedy decode the same tokens (fnv $(cat "$tmp/0.fnv"))"
else
  echo "token hashes DIFFER: host $(cat "$tmp/0.fnv"), device $(cat "$tmp/1.fnv"), fed $(cat "$tmp/2.fnv")"; exit 1
fi
