#!/bin/sh
# The memra-trace html viewer in headless Chromium on a real 2-stage SmolLM2 trace: a screenshot (request 1's path
# followed) is taken and the
# DOM after the viewer's first draw proves both stages' stream lanes hold drawn walks and hop arrows are drawn; opened
# at #req=1, the steps the trace lists for request 1 are the ones highlighted on both streams and the readback.
# Usage: trace_html.sh BIN_DIR SRC_DIR MODEL [SCREENSHOT.png]   (exit 77 = skipped, with the reason)
set -eu
bin=$1 src=$2 model=$3 shot=${4:-}
chrome=$(command -v chromium || command -v chromium-browser || true)
if [ -z "$chrome" ]; then # a skip, except under CI (CI=true), where .ci/run installs it
  echo "SKIP: chromium not installed (Debian: apt-get install chromium; MEMRA_SETUP_CHROMIUM=1 scripts/setup)"
  [ "${CI:-}" = true ] && { echo "FAIL: CI=true: .ci/run installs chromium, so the viewer test must run"; exit 1; }
  exit 77
fi
[ -s "$model" ] || { echo "SKIP: model $model absent (scripts/setup fetches it)"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
MEMRA_BACKEND=cpu "$bin/memra-run" -m "$model" -p "The capital of France is" -p "Once upon a time" -n 12 --temp 0 \
  --stages 2 --trace "$tmp/t.json" > /dev/null 2> "$tmp/run.log" || { cat "$tmp/run.log"; exit 1; }
"$bin/memra-trace" html "$tmp/t.json" -o "$tmp/t.html"
flags="--headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,420 --virtual-time-budget=3000"
# shellcheck disable=SC2086
timeout 120 "$chrome" $flags --dump-dom "file://$tmp/t.html" > "$tmp/dom.html" 2> "$tmp/chrome.log" || { tail -5 "$tmp/chrome.log"; exit 1; }
# shellcheck disable=SC2086
timeout 120 "$chrome" $flags --dump-dom "file://$tmp/t.html#req=1" > "$tmp/dom-req.html" 2> "$tmp/chrome.log" || { tail -5 "$tmp/chrome.log"; exit 1; }
python3 - "$tmp/dom.html" "$tmp/dom-req.html" "$tmp/t.json" <<'PY'
import json
import sys
from html.parser import HTMLParser
class P(HTMLParser):
    def __init__(self):
        super().__init__(); self.lanes = {}; self.status = None; self.hl = []
    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "lane" in (a.get("class") or "").split() and "data-name" in a:
            self.lanes[a["data-name"]] = int(a.get("data-drawn", "0"))
            self.hl.append(a)
        if a.get("id") == "status":
            self.status = a
def dom(path):
    p = P(); p.feed(open(path).read()); return p
p = dom(sys.argv[1])
for lane in ("stage 0 stream", "stage 1 stream", "stage 0 actor", "stage 1 actor", "readback"):
    if p.lanes.get(lane, 0) <= 0:
        sys.exit("trace_html: FAIL: lane '%s' has nothing drawn (lanes: %s)" % (lane, p.lanes))
if not p.status or int(p.status.get("data-arrows", "0")) <= 0:
    sys.exit("trace_html: FAIL: no hop arrow drawn (status: %s)" % p.status)
# request 1 selected (#req=1): its steps, as the trace lists them, are the ones highlighted on every stream
evs = json.load(open(sys.argv[3]))["traceEvents"]
steps = {e["args"]["step"] for e in evs if e["ph"] == "i" and e["name"] == "requests" and 1 in e["args"]["reqs"]}
q = dom(sys.argv[2])
hl = {a.get("data-name"): int(a.get("data-hl", "0")) for a in q.hl}
if not steps or int(q.status.get("data-sel-steps", "0")) != len(steps):
    sys.exit("trace_html: FAIL: request 1 has %d steps in the trace, the viewer follows %s" % (len(steps), q.status))
for lane in ("stage 0 stream", "stage 1 stream", "readback"):
    if hl.get(lane) != len(steps):
        sys.exit("trace_html: FAIL: request 1: %d of its %d steps highlighted on '%s' (%s)" % (hl.get(lane, 0), len(steps), lane, hl))
if hl.get("scheduler", 0) < 3 + len(steps): # queued, first token, done and each step's requests point at least
    sys.exit("trace_html: FAIL: request 1's scheduler points not highlighted (%s)" % hl)
print("trace_html: OK: lanes %s, %s hop arrows, %s bubbles; request 1: %d steps highlighted on each stream and the readback"
      % (p.lanes, p.status["data-arrows"], p.status["data-bubbles"], len(steps)))
PY
if [ -n "$shot" ]; then
  # shellcheck disable=SC2086
  timeout 120 "$chrome" $flags --screenshot="$shot" "file://$tmp/t.html#req=1" 2> "$tmp/chrome.log" > /dev/null
  [ -s "$shot" ] || { echo "trace_html: FAIL: no screenshot written"; exit 1; }
  echo "trace_html: screenshot $shot"
fi
