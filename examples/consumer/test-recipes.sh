#!/bin/sh
# test-recipes.sh BUILD_DIR SOURCE_DIR MODEL: run docs/getting-started.md's install, CMake and pkg-config
# recipes exactly as written there (the fenced block after each `<!-- recipe: NAME -->` line) as a new user
# would: HOME is a temporary folder and CMAKE_PREFIX_PATH, PKG_CONFIG_PATH and LD_LIBRARY_PATH are unset;
# app.c is examples/consumer/consumer.c. Then run both programs on MODEL. Exit 0 = all good.
set -eu
bin=$1 src=$2 model=$3
doc=$src/docs/getting-started.md
tmp=$(mktemp -d "${TMPDIR:-/tmp}/memra-recipes-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

# recipe NAME: the lines of the first fenced block after `<!-- recipe: NAME -->`
recipe() {
    awk -v mark="<!-- recipe: $1 -->" '
        $0 == mark { found = 1; next }
        found && /^```/ { if (inside) exit; inside = 1; next }
        found && inside { print }' "$doc"
}
for r in install cmake-lists cmake pkg-config; do
    recipe "$r" > "$tmp/$r"
    [ -s "$tmp/$r" ] || fail "docs/getting-started.md has no '<!-- recipe: $r -->' block"
done

work=$tmp/work
pcwork=$tmp/pc                   # the pkg-config recipe's folder: app.c, and ./app as its output
mkdir -p "$work/app" "$pcwork" "$tmp/home"
ln -s "$bin" "$work/build"       # the recipes run from the source root, where the build folder is build/
cp "$src/examples/consumer/consumer.c" "$work/app/app.c"
cp "$src/examples/consumer/consumer.c" "$pcwork/app.c"
cp "$tmp/cmake-lists" "$work/app/CMakeLists.txt"

clean_env() { env -u CMAKE_PREFIX_PATH -u PKG_CONFIG_PATH -u LD_LIBRARY_PATH HOME="$tmp/home" "$@"; }
for r in install cmake pkg-config; do
    dir=$work; [ "$r" = pkg-config ] && dir=$pcwork
    (cd "$dir" && clean_env sh -eu "$tmp/$r") > "$tmp/$r.log" 2>&1 || { cat "$tmp/$r.log" >&2; fail "recipe '$r' as written"; }
    echo "recipe '$r': ran as written"
done
[ -x "$work/app/build/app" ] || fail "the CMake recipe built no app/build/app"
[ -x "$pcwork/app" ] || fail "the pkg-config recipe built no ./app"
clean_env "$work/app/build/app" "$model" || fail "the CMake-built program does not run without LD_LIBRARY_PATH"
clean_env "$pcwork/app" "$model" || fail "the pkg-config-built program does not run without LD_LIBRARY_PATH"
echo "getting-started recipes: OK"
