#!/bin/sh
# Configuring an already built folder again (as scripts/setup does on every call) leaves its objects up to
# date: no generated source is rewritten. Checked on the generated test source abi_leak_probe.c in a fresh
# CPU-only build folder. Usage: reconfigure_keeps_build.sh SOURCE_DIR
set -eu
src=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/memra-reconf-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cmake -S "$src" -B "$tmp" -DMEMRA_CUDA=OFF > "$tmp/cfg1.log" 2>&1 || { cat "$tmp/cfg1.log"; exit 1; }
cmake --build "$tmp" --target abi_leak_probe > "$tmp/build.log" 2>&1 || { cat "$tmp/build.log"; exit 1; }
sleep 1 # a rewrite within the same second could hide behind a coarse file clock
cmake -S "$src" -B "$tmp" > "$tmp/cfg2.log" 2>&1 || { cat "$tmp/cfg2.log"; exit 1; }
if cmake --build "$tmp" --target abi_leak_probe -- -n 2>&1 | grep -E ' -c [^ ]+\.c$'; then
  echo "FAIL: configuring again makes the objects above out of date"; exit 1
fi
echo "reconfigure keeps the build: OK"
