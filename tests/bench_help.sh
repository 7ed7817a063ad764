#!/bin/sh
# Every memra-bench subcommand answers -h with its usage on stdout and exit status 0 (memra-bench's own usage says
# "subcommand -h for its options"). gpu-kernels is left out: a build without CUDA refuses it whole.
# Usage: bench_help.sh MEMRA_BENCH
b=$1
for s in mailbox decode hop pp-scaling prime sample serve tokenize cpu-kernels; do
  out=$("$b" "$s" -h 2>/dev/null) || { echo "FAIL: memra-bench $s -h exits $?"; exit 1; }
  case $out in
    "usage: memra-bench $s "*) ;;
    *) echo "FAIL: memra-bench $s -h printed no usage on stdout: $out"; exit 1 ;;
  esac
done
echo "bench_help: OK"
