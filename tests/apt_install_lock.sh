#!/bin/sh
# scripts/apt-install waits for a held apt/dpkg lock, saying so, and gives up after MEMRA_APT_LOCK_WAIT
# seconds with the lock's message. apt-get and sudo are fakes on PATH: the lock is "held" for LOCKED calls.
# Usage: apt_install_lock.sh SOURCE_DIR
set -eu
src=$1
tmp=$(mktemp -d "${TMPDIR:-/tmp}/memra-apt-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/apt-get" <<'FAKE'
#!/bin/sh
n=$(cat "$FAKE_DIR/count" 2>/dev/null || echo 0); n=$((n + 1)); echo "$n" > "$FAKE_DIR/count"
if [ "$n" -le "$LOCKED" ]; then
  echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (unattended-upgr)" >&2
  exit 100
fi
echo "apt-get $*" >> "$FAKE_DIR/calls"
FAKE
printf '#!/bin/sh\nexec "$@"\n' > "$tmp/sudo"
chmod +x "$tmp/apt-get" "$tmp/sudo"
export FAKE_DIR=$tmp PATH="$tmp:$PATH" MEMRA_APT_LOCK_POLL=0.1

# held for 3 attempts: it waits, says so, then installs exactly what was asked
LOCKED=3 "$src/scripts/apt-install" liburcu-dev cmake 2> "$tmp/err1" || { cat "$tmp/err1"; echo "FAIL: gave up on a lock that frees"; exit 1; }
grep -q "waiting for the apt/dpkg lock" "$tmp/err1" || { cat "$tmp/err1"; echo "FAIL: no waiting message"; exit 1; }
grep -qx "apt-get install -y -qq liburcu-dev cmake" "$tmp/calls" || { cat "$tmp/calls"; echo "FAIL: install not run"; exit 1; }

# held for good: bounded by MEMRA_APT_LOCK_WAIT, then a clear failure naming the lock
rm -f "$tmp/count" "$tmp/calls"
if LOCKED=1000000 MEMRA_APT_LOCK_WAIT=1 "$src/scripts/apt-install" cmake 2> "$tmp/err2"; then
  echo "FAIL: succeeded while the lock was held"; exit 1
fi
grep -qE "gave up after [0-9]+ s waiting for the apt/dpkg lock: Could not get lock /var/lib/dpkg/lock-frontend" "$tmp/err2" \
  || { cat "$tmp/err2"; echo "FAIL: no clear give-up message"; exit 1; }
[ ! -e "$tmp/calls" ] || { echo "FAIL: installed while locked"; exit 1; }
echo "apt-install lock: OK"
