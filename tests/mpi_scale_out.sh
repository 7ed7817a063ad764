#!/bin/sh
# Stages in several processes (docs/scale-out.md), as a user launches them: mpirun -np P with stage s on rank s.
# Usage: mpi_scale_out.sh MODE MPIRUN BIN_DIR MODEL [ARGS]
#   MODEL          a GGUF path, or synthetic:SHAPE:TYPE (gate only): every rank generates that shape's weights
#   gate ARM P [VAR=VALUE...]  memra-gate ARM under mpirun -np P (the doors given exported to every rank) passes
#                  (bit-identical to the unsplit arm, its counter advanced) and says it ran over P ranks
#   run P          memra-run --temp 0 under mpirun -np P prints the text of the single-process run, byte for byte
#   load P         memra-run under mpirun -np P with MEMRA_PP_LOAD_REPORT=1: each rank holds only its stages' layers
#                  (strictly fewer weight bytes than the whole model), the ranks' layers and bytes sum to the
#                  single-process load's, the head is on the last rank only, the embedding table on rank 0 only,
#                  and the text is the single-process text
#   kill SIG R     mpirun -np 2 memra-run mid-generation, rank R gets SIG (KILL: dead; STOP: stuck): every process
#                  ends, non-zero, within 5 s, with an error on stderr; R = mpirun: mpirun gets SIG (INT: Ctrl-C)
#   refuse         rank 1 finds another file under the model's path: it refuses with a message naming the
#                  difference, rank 0's create fails with it, every process ends non-zero
#   netns          two network namespaces joined by a veth pair stand in for two hosts: mpirun over TCP between
#                  them only; the gates pass (skips, exit 77, without the rights to make namespaces)
#   pick BACKEND DEVICES NCCL P [VAR=VALUE...]  memra-gate replay under mpirun -np P on BACKEND (cpu, cuda) with
#                  MEMRA_PP_DEVICES=DEVICES (stage s on device DEVICES[s] of its rank; - leaves it unset) passes, and
#                  every boundary's line on stderr names the transport it must take: NCCL between two GPUs with NCCL
#                  built (NCCL=1) and the door open, else host-staged MPI with its reason; on cuda it skips (77)
#                  with fewer GPUs than DEVICES names
# With MEMRA_TEST_NCCL_EMU=1 in the environment, gate, run, kill and pick also require every boundary between
# ranks to have taken the shared-memory stand-in for NCCL (tests/mpi.cmake's mpi_nccl_stand_in_* tests).
# mpirun runs as root in CI containers (OMPI_ALLOW_RUN_AS_ROOT*), oversubscribed (2 cores, P ranks), and without
# the shared-memory single-copy mechanism containers often forbid.
set -eu
mode=$1 mpirun=$2 bin=$3 model=$4
shift 4
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MEMRA_BACKEND=cpu
mpi="$mpirun --oversubscribe --mca btl_vader_single_copy_mechanism none"
tmp=$(mktemp -d)
mpid=
cleanup() {
  [ -n "$mpid" ] && kill -9 "$mpid" 2>/dev/null
  [ -n "${ns_made:-}" ] && { ip netns del memra-h0 2>/dev/null; ip netns del memra-h1 2>/dev/null; }
  rm -rf "$tmp"
}
trap cleanup EXIT
case "$model" in
synthetic:*) s=${model#synthetic:}; margs="--synthetic ${s%%:*} --type ${s#*:}" ;;
*) margs="-m $model"; [ -r "$model" ] || { echo "no model at $model (scripts/setup fetches it)"; exit 1; } ;;
esac

# procs: the PIDs running this build's memra-run (from /proc: no procps needed)
procs() {
  for d in /proc/[0-9]*; do
    c=$(tr '\0' ' ' < "$d/cmdline" 2>/dev/null) || continue
    case "$c" in "$bin/memra-run "*) echo "${d#/proc/}" ;; esac
  done
}

# MEMRA_TEST_NCCL_EMU=1 (the shared-memory stand-in for NCCL, transport/bnd_shm.h) with the door open: every
# boundary line in FILE says the boundary took it, so a run that passes without it fails
emu_check() {
  [ "${MEMRA_TEST_NCCL_EMU:-}" = 1 ] && [ "${MEMRA_PP_NCCL:-auto}" = auto ] || return 0
  grep -q "^memra: boundary .*): NCCL (MEMRA_TEST_NCCL_EMU=1" "$1" || { echo "FAIL: no boundary took the NCCL stand-in"; exit 1; }
  if grep "^memra: boundary " "$1" | grep -vF "): NCCL (MEMRA_TEST_NCCL_EMU=1"; then
    echo "FAIL: a boundary above did not take the NCCL stand-in"; exit 1
  fi
}

extra= wrap= # mpirun options and a program prefix (netns)
gate() { # gate ARM P
  arm=$1 np=$2
  rc=0
  # prime: 16 chunks of 8 rows (the gate's default is 3), so that chunks stay in flight longer than a hand-off
  # between oversubscribed ranks and the overlap counter the gate requires advances even on a loaded machine
  aargs=; [ "$arm" = prime ] && aargs="--prompt 128"
  timeout 300 $mpi $extra -np "$np" $wrap "$bin/memra-gate" "$arm" $aargs $margs > "$tmp/gate.out" 2>&1 || rc=$?
  cat "$tmp/gate.out"
  [ "$rc" = 0 ] || { echo "FAIL: memra-gate $arm under mpirun -np $np exited $rc"; exit 1; }
  grep -q "ranks $np" "$tmp/gate.out" || { echo "FAIL: the gate did not run over $np ranks"; exit 1; }
  grep -q "^PASS" "$tmp/gate.out" || { echo "FAIL: no PASS line"; exit 1; }
  emu_check "$tmp/gate.out"
}

case "$mode" in
gate)
  arm=$1 np=$2
  shift 2
  for kv in "$@"; do export "$kv"; extra="$extra -x ${kv%%=*}"; done
  gate "$arm" "$np"
  ;;
run)
  np=$1
  set -- -m "$model" -p "The capital of France is" -n 48 --temp 0
  "$bin/memra-run" "$@" > "$tmp/one.txt" 2> "$tmp/one.err"
  timeout 300 $mpi -np "$np" "$bin/memra-run" "$@" > "$tmp/many.txt" 2> "$tmp/many.err" ||
    { cat "$tmp/many.err"; echo "FAIL: memra-run under mpirun -np $np"; exit 1; }
  grep -q "$np stage(s)" "$tmp/many.err" || { cat "$tmp/many.err"; echo "FAIL: not $np stages"; exit 1; }
  cat "$tmp/many.txt"
  cmp "$tmp/one.txt" "$tmp/many.txt" || { echo "FAIL: the text differs from the single-process run:"; cat "$tmp/one.txt"; exit 1; }
  emu_check "$tmp/many.err"
  echo "PASS: mpirun -np $np prints the single-process text"
  ;;
load)
  np=$1
  set -- -m "$model" -p "The capital of France is" -n 16 --temp 0
  export MEMRA_PP_LOAD_REPORT=1
  "$bin/memra-run" "$@" > "$tmp/one.txt" 2> "$tmp/one.err" || { cat "$tmp/one.err"; echo "FAIL: memra-run"; exit 1; }
  timeout 300 $mpi -np "$np" -x MEMRA_PP_LOAD_REPORT "$bin/memra-run" "$@" > "$tmp/many.txt" 2> "$tmp/many.err" ||
    { cat "$tmp/many.err"; echo "FAIL: memra-run under mpirun -np $np"; exit 1; }
  grep "^memra: load rank" "$tmp/one.err" > "$tmp/one.load" || true
  grep "^memra: load rank" "$tmp/many.err" | sort -n -k4 > "$tmp/many.load" || true
  cat "$tmp/one.load" "$tmp/many.load"
  # memra: load rank R stages A..B layers N of L [a, b) head H embeddings E weight_bytes W
  awk -v np="$np" '
    FNR == NR { whole = $18; L = $10; n1 = $8; h1 = $14; e1 = $16; one++; next }
    { if ($4 != seen) bad = bad " rank " $4 " out of order;"; seen++
      if ($18 >= whole) bad = bad " rank " $4 " holds " $18 " of " whole " bytes;"
      if ($8 >= L) bad = bad " rank " $4 " holds every layer;"
      if ($14 != ($4 == np - 1)) bad = bad " rank " $4 " head " $14 ";"
      if ($16 != ($4 == 0)) bad = bad " rank " $4 " embeddings " $16 ";"
      bytes += $18; layers += $8; ranks++ }
    END { if (one != 1 || n1 != L || h1 != 1 || e1 != 1) bad = bad " the single-process load is not the whole model;"
          if (ranks != np) bad = bad " " ranks " load lines for " np " ranks;"
          if (bytes != whole) bad = bad " the ranks hold " bytes " bytes, the whole model " whole ";"
          if (layers != L) bad = bad " the ranks hold " layers " layers of " L ";"
          if (bad != "") { print "FAIL:" bad; exit 1 }
          print "each of " np " ranks holds its own layers: " bytes " bytes in all, as one process" }
  ' "$tmp/one.load" "$tmp/many.load" || exit 1
  cmp "$tmp/one.txt" "$tmp/many.txt" || { echo "FAIL: the text differs from the single-process run"; exit 1; }
  echo "PASS: mpirun -np $np loads each rank's layers only, the single-process text"
  ;;
kill)
  sig=$1 victim=$2 other=
  [ "$victim" = mpirun ] || other=$((1 - victim))
  : > "$tmp/out.txt" # before the background start: the loop below reads it at once
  $mpi -np 2 "$bin/memra-run" -m "$model" -p "Once upon a time" -n 4000 --temp 0 > "$tmp/out.txt" 2> "$tmp/err.txt" &
  mpid=$!
  i=0 # until text flows (at most 120 s): the pipeline is mid-generation
  while [ "$(wc -c < "$tmp/out.txt")" -lt 40 ]; do
    i=$((i + 1)); [ $i -le 1200 ] || { cat "$tmp/err.txt"; echo "FAIL: no text after 120 s"; exit 1; }
    sleep 0.1
  done
  r1=
  [ "$victim" != mpirun ] || r1=$mpid
  for p in $(procs); do
    [ "$victim" != mpirun ] || break # the victim: the process whose environment names its rank
    tr '\0' '\n' < /proc/"$p"/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$victim" && r1=$p
  done
  [ -n "$r1" ] || { echo "FAIL: rank $victim's process not found"; exit 1; }
  t0=$(date +%s%N)
  kill -"$sig" "$r1"
  i=0 # bounded: a launch that outlives every rank's 5 s by far is a failure, never a hang of the suite
  while kill -0 "$mpid" 2> /dev/null && [ $i -lt 300 ]; do i=$((i + 1)); sleep 0.1; done
  if kill -0 "$mpid" 2> /dev/null; then
    for p in $(procs); do echo "left: $p $(tr '\0' ' ' < /proc/"$p"/cmdline) state $(awk '{print $3}' /proc/"$p"/stat)"; done
    cat "$tmp/err.txt"
    kill -CONT "$r1" 2> /dev/null; kill -KILL "$mpid" $(procs) 2> /dev/null
    echo "FAIL: mpirun still running 30 s after rank $victim got SIG$sig"; exit 1
  fi
  rc=0
  wait "$mpid" || rc=$?
  mpid=
  t1=$(date +%s%N)
  kill -CONT "$r1" 2>/dev/null || true
  left=$(procs)
  [ -z "$left" ] || { echo "FAIL: processes left: $left"; exit 1; }
  dt=$(( (t1 - t0) / 1000000 ))
  echo "rank $victim got SIG$sig; mpirun ended $dt ms later with status $rc; stderr:"
  cat "$tmp/err.txt"
  [ "$rc" != 0 ] || { echo "FAIL: exit status 0 after a rank was lost"; exit 1; }
  [ "$dt" -le 5000 ] || { echo "FAIL: took $dt ms (allowed 5000)"; exit 1; }
  emu_check "$tmp/err.txt"
  if [ "$sig" = STOP ]; then # stuck, not dead: only our heartbeat can tell
    grep -q "rank $other: rank $victim silent" "$tmp/err.txt" || { echo "FAIL: no 'rank $victim silent' error"; exit 1; }
  elif [ "$victim" != mpirun ]; then
    grep -qiE "silent|exited on signal|killed|failed" "$tmp/err.txt" || { echo "FAIL: no error message"; exit 1; }
  fi
  echo "PASS: every rank ended, non-zero, within 5 s"
  ;;
refuse)
  mkdir "$tmp/r0" "$tmp/r1"
  ln -s "$model" "$tmp/r0/m.gguf"
  "$bin/memra-mkgguf" -o "$tmp/r1/m.gguf" --layers 4 > /dev/null
  cat > "$tmp/cd.sh" << 'EOF'
#!/bin/sh
cd "$(dirname "$0")/r$OMPI_COMM_WORLD_RANK" && exec "$@"
EOF
  chmod +x "$tmp/cd.sh"
  rc=0
  timeout 120 $mpi -np 2 "$tmp/cd.sh" "$bin/memra-gate" eager -m m.gguf > "$tmp/out.txt" 2>&1 || rc=$?
  cat "$tmp/out.txt"
  [ "$rc" != 0 ] || { echo "FAIL: exit status 0 with two different model files"; exit 1; }
  grep -q "rank 1 refused the runtime: rank 1: the model m.gguf differs from rank 0's" "$tmp/out.txt" ||
    { echo "FAIL: no refusal naming the difference"; exit 1; }
  echo "PASS: the rank with another model file refused, with the message"
  ;;
netns)
  command -v ip > /dev/null || { echo "SKIP: no ip(8) (iproute2)"; exit 77; }
  ip netns add memra-h0 2> "$tmp/ns.err" || { echo "SKIP: cannot make network namespaces: $(cat "$tmp/ns.err")"; exit 77; }
  ns_made=1
  ip netns add memra-h1
  ip link add memra-v0 netns memra-h0 type veth peer name memra-v1 netns memra-h1 2> "$tmp/ns.err" ||
    { echo "SKIP: cannot make a veth pair: $(cat "$tmp/ns.err")"; exit 77; }
  ip -n memra-h0 addr add 10.231.0.1/30 dev memra-v0
  ip -n memra-h1 addr add 10.231.0.2/30 dev memra-v1
  for n in 0 1; do ip -n memra-h$n link set lo up; ip -n memra-h$n link set memra-v$n up; done
  # mpirun runs in "host" h0 and starts its daemon on "host" h1 through a launch agent that stands in for ssh (it
  # enters h1 instead of logging in); the daemon calls back and the ranks talk over TCP on the veth's /30 only.
  cat > "$tmp/agent.sh" << 'EOF'
#!/bin/sh
shift # the host (10.231.0.2): always memra-h1
exec ip netns exec memra-h1 sh -c "$*"
EOF
  chmod +x "$tmp/agent.sh"
  mpi="ip netns exec memra-h0 $mpirun --oversubscribe"
  # --bind-to none: both "hosts" share this machine's cores, and each daemon would bind its rank to core 0, so the
  # two polling ranks would take turns on one core (milliseconds a message; real hosts have cores of their own)
  extra="--host 10.231.0.1:1,10.231.0.2:1 --mca plm_rsh_agent $tmp/agent.sh --mca plm_rsh_no_tree_spawn 1
    --mca btl self,tcp --mca btl_tcp_if_include 10.231.0.0/30 --mca oob_tcp_if_include 10.231.0.0/30 --bind-to none"
  # each rank sees its own "host"'s network only: the veth end and its address, nothing of this machine's
  timeout 120 $mpi $extra -np 2 ip -o -4 addr show > "$tmp/addr.out" 2>&1 || { cat "$tmp/addr.out"; exit 1; }
  cat "$tmp/addr.out"
  grep -q "memra-v0 .*10.231.0.1/30" "$tmp/addr.out" && grep -q "memra-v1 .*10.231.0.2/30" "$tmp/addr.out" ||
    { echo "FAIL: the ranks are not in the two namespaces"; exit 1; }
  [ "$(grep -vc -e ' lo ' -e ' memra-v' "$tmp/addr.out")" = 0 ] || { echo "FAIL: a rank sees another network"; exit 1; }
  for arm in eager replay batch prime; do
    gate "$arm" 2
  done
  ;;
pick)
  backend=$1 devs=$2 built=$3 np=$4
  shift 4
  export MEMRA_BACKEND="$backend"
  need=$(echo "$devs" | tr ',' '\n' | sort -u | wc -l)
  if [ "$backend" = cuda ]; then
    have=$(nvidia-smi -L 2> /dev/null | grep -c '^GPU ' || true)
    [ "$have" -gt 0 ] || have=$(ls /dev/nvidia[0-9]* 2> /dev/null | wc -l)
    [ "$have" -ge "$need" ] || { echo "SKIP: MEMRA_PP_DEVICES=$devs needs $need GPU(s), $have visible"; exit 77; }
  fi
  [ "$devs" = - ] || export MEMRA_PP_STAGES="$np" MEMRA_PP_DEVICES="$devs"
  for kv in "$@"; do export "$kv"; done
  if [ "${MEMRA_PP_NCCL:-auto}" = 0 ]; then want="host-staged MPI (MEMRA_PP_NCCL=0"
  elif [ "${MEMRA_TEST_NCCL_EMU:-}" = 1 ]; then want="NCCL (MEMRA_TEST_NCCL_EMU=1"
  elif [ "$backend" != cuda ]; then want="host-staged MPI (a stage of the pair is not on a GPU"
  elif [ "$built" != 1 ]; then want="host-staged MPI (NCCL is not built on both ranks"
  elif [ "$need" = 1 ]; then want="host-staged MPI (both stages are on one GPU"
  else want="NCCL (two GPUs"
  fi
  gate replay "$np"
  b=0
  while [ "$b" -lt $((np - 1)) ]; do # boundary b's producer rank prints it (rank b: one stage per rank)
    line=$(grep "^memra: boundary $b (stage $b on rank $b," "$tmp/gate.out" | head -n 1)
    [ -n "$line" ] || { echo "FAIL: no line on stderr saying which transport boundary $b takes"; exit 1; }
    case "$line" in *"): $want"*) ;; *) echo "FAIL: boundary $b should say '$want'"; exit 1 ;; esac
    b=$((b + 1))
  done
  if grep "^memra: boundary " "$tmp/gate.out" | grep -vF "): $want"; then # every runtime the gate made
    echo "FAIL: a boundary line above does not say '$want'"; exit 1
  fi
  echo "PASS: the $((np - 1)) boundaries say '$want', the gate bit-identical"
  ;;
*)
  echo "usage: mpi_scale_out.sh gate|run|kill|refuse|netns|pick MPIRUN BIN_DIR MODEL [ARGS]"; exit 2 ;;
esac
