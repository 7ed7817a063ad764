#!/bin/sh
# test-installed.sh BUILD_DIR SOURCE_DIR MODEL: install BUILD_DIR into a temporary prefix, check the layout,
# then build examples/consumer against the INSTALLED package three ways (find_package shared, find_package
# static, pkg-config) and run each on MODEL. Exit 0 = all good.
set -eu
bin=$1 src=$2 model=$3
tmp=$(mktemp -d "${TMPDIR:-/tmp}/memra-install-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
cmake --install "$bin" --prefix "$prefix" > "$tmp/install.log"
for f in include/memra/memra.h include/memra/status.h bin/memra-run; do
    [ -e "$prefix/$f" ] || { echo "missing after install: $f" >&2; exit 1; }
done
libdir=$(dirname "$(find "$prefix" -name 'libmemra.so' | head -n 1)")
for f in libmemra.a pkgconfig/memra.pc cmake/memra/memraConfig.cmake cmake/memra/memraConfigVersion.cmake; do
    [ -e "$libdir/$f" ] || { echo "missing after install: $libdir/$f" >&2; exit 1; }
done
"$src/scripts/abi-check" "$libdir/libmemra.so" > /dev/null
# the consumer project must not see the source tree: copy it out
cp -r "$src/examples/consumer" "$tmp/consumer-src"
cmake -S "$tmp/consumer-src" -B "$tmp/consumer-build" -DCMAKE_PREFIX_PATH="$prefix" > "$tmp/cfg.log"
cmake --build "$tmp/consumer-build" > "$tmp/build.log"
"$tmp/consumer-build/consumer" "$model"
"$tmp/consumer-build/consumer_static" "$model"
PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --exists --print-errors memra
# shellcheck disable=SC2046
cc -std=c17 -o "$tmp/consumer-pc" "$tmp/consumer-src/consumer.c" \
    $(PKG_CONFIG_PATH="$libdir/pkgconfig" pkg-config --cflags --libs memra)
env -u LD_LIBRARY_PATH "$tmp/consumer-pc" "$model" # memra.pc's rpath finds libmemra.so
echo "install test: OK ($prefix)"
