#!/usr/bin/env python3
"""A big trace stays usable: a synthetic 2-stage trace of about SIZE_MB (100 by default; one event per line, as
memra writes them) is generated, `memra-trace summary` reads it streaming within MAX_RSS_MB of memory (the whole
file is never held, let alone cJSON's tree of it) and counts every walk, `memra-trace html` writes its viewer within
the same bound, and, where Chromium is installed, the viewer's first draw of the whole trace stands for every event
with marks bounded by the pixels (a few per pixel column per lane), not by the events.
Usage: trace_big.py MEMRA_TRACE_BIN WORK_DIR [SIZE_MB=100] [MAX_RSS_MB=256]"""
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from html.parser import HTMLParser


def fail(msg):
    print("trace_big: FAIL: " + msg)
    sys.exit(1)


def generate(path, size):
    """A 2-stage trace: per step the scheduler's requests, both actors' enqueues, both walks, the hop, the readback."""
    rnd = random.Random(1)
    meta = [(1, "stage 0 actor"), (2, "stage 1 actor"), (101, "stage 0 stream"), (102, "stage 1 stream"),
            (201, "boundary 0 hops"), (300, "readback"), (301, "scheduler")]
    with open(path, "w") as out:
        out.write('{"displayTimeUnit":"ns","otherData":{"producer":"memra","stages":2},\n"traceEvents":[\n')
        out.write(",\n".join('{"ph":"M","pid":1,"tid":%d,"name":"thread_name","args":{"name":"%s"}}' % m for m in meta))
        t, step, events = 0.0, 0, len(meta)
        while out.tell() < size:
            t += 30
            ev = [
                '{"ph":"i","pid":1,"tid":301,"ts":%.3f,"s":"t","name":"requests","args":{"step":%d,"reqs":[%d,%d]}}'
                % (t, step, step % 7, step % 5 + 7),
                '{"ph":"B","pid":1,"tid":1,"ts":%.3f,"name":"enqueue","cat":"enqueue","args":{"step":%d,"rows":2}}' % (t, step),
                '{"ph":"E","pid":1,"tid":1,"ts":%.3f,"name":"enqueue","cat":"enqueue"}' % (t + 5),
                '{"ph":"B","pid":1,"tid":101,"ts":%.3f,"name":"walk","cat":"walk","args":{"step":%d,"rows":2}}' % (t + 6, step),
                '{"ph":"E","pid":1,"tid":101,"ts":%.3f,"name":"walk","cat":"walk"}' % (t + 20),
                '{"ph":"b","pid":1,"tid":201,"ts":%.3f,"name":"hop","cat":"hop","id":"%d.201","args":{"step":%d,"slot":%d}}'
                % (t + 20, step, step, step % 2),
                '{"ph":"e","pid":1,"tid":201,"ts":%.3f,"name":"hop","cat":"hop","id":"%d.201"}' % (t + 22, step),
                '{"ph":"B","pid":1,"tid":2,"ts":%.3f,"name":"enqueue","cat":"enqueue","args":{"step":%d,"rows":2}}' % (t + 8, step),
                '{"ph":"E","pid":1,"tid":2,"ts":%.3f,"name":"enqueue","cat":"enqueue"}' % (t + 12),
                '{"ph":"B","pid":1,"tid":102,"ts":%.3f,"name":"walk","cat":"walk","args":{"step":%d,"rows":2}}' % (t + 22, step),
                '{"ph":"E","pid":1,"tid":102,"ts":%.3f,"name":"walk","cat":"walk"}' % (t + 36 + rnd.random() * 3),
                '{"ph":"B","pid":1,"tid":300,"ts":%.3f,"name":"readback","cat":"readback","args":{"step":%d,"rows":2}}' % (t + 30, step),
                '{"ph":"E","pid":1,"tid":300,"ts":%.3f,"name":"readback","cat":"readback"}' % (t + 40),
            ]
            out.write(",\n" + ",\n".join(ev))
            step += 1
            events += len(ev)
        out.write("\n]}\n")
    return step


def run(cmd, max_rss_mb, what):
    """cmd's stdout; fails when it fails or its peak RSS exceeds the bound (getrusage of this child alone)."""
    t0 = time.time()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, ru = os.wait4(p.pid, 0)
    out, err = p.stdout.read(), p.stderr.read()
    rss_mb = ru.ru_maxrss / 1024.0
    if os.waitstatus_to_exitcode(status) != 0:
        fail("%s exited %d: %s" % (what, os.waitstatus_to_exitcode(status), err[-500:]))
    if rss_mb > max_rss_mb:
        fail("%s peaked at %.0f MB of memory (bound %d MB)" % (what, rss_mb, max_rss_mb))
    print("trace_big: %s: %.1f s, peak RSS %.0f MB" % (what, time.time() - t0, rss_mb))
    return out


class Dom(HTMLParser):
    def __init__(self):
        super().__init__()
        self.lanes, self.status = [], {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "lane" in (a.get("class") or "").split() and "data-name" in a:
            self.lanes.append(a)
        if a.get("id") == "status":
            self.status = a


def main():
    tool, work = sys.argv[1], sys.argv[2]
    size_mb = float(sys.argv[3]) if len(sys.argv) > 3 else 100
    max_rss = int(sys.argv[4]) if len(sys.argv) > 4 else 256
    os.makedirs(work, exist_ok=True)
    path, html = os.path.join(work, "trace-big.json"), os.path.join(work, "trace-big.html")
    try:
        steps = generate(path, int(size_mb * 1024 * 1024))
        print("trace_big: %s: %.0f MB, %d steps" % (path, os.path.getsize(path) / 1048576.0, steps))
        out = run([tool, "summary", path], max_rss, "summary")
        for s in (0, 1):
            if ("stage %d: %d walks," % (s, steps)) not in out:
                fail("summary does not count the %d walks of stage %d:\n%s" % (steps, s, out))
        if "\nbubble " not in out:
            fail("summary has no bubble line:\n%s" % out)
        run([tool, "html", path, "-o", html], max_rss, "html")
        chrome = shutil.which("chromium") or shutil.which("chromium-browser")
        if not chrome:
            print("trace_big: the viewer's draw not checked: chromium not installed")
        else:
            t0 = time.time()
            dom = subprocess.run([chrome, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                                  "--window-size=1400,420", "--virtual-time-budget=20000", "--dump-dom",
                                  "file://" + html], capture_output=True, text=True, timeout=600).stdout
            d = Dom()
            d.feed(dom)
            if not d.lanes or "data-items" not in d.status:
                fail("the viewer did not draw (status %s)" % d.status)
            events = sum(int(a.get("data-events", "0")) for a in d.lanes)
            items = int(d.status["data-items"])
            # every span, instant and async pair of the file is one event of the viewer
            want = steps * 7
            if events != want:
                fail("the first draw stands for %d events, the trace has %d" % (events, want))
            if items > 3 * 1400 * len(d.lanes):
                fail("%d marks drawn for %d lanes 1400 px wide: not decimated" % (items, len(d.lanes)))
            print("trace_big: viewer: %d events drawn as %d marks in %s ms (chromium %.1f s)"
                  % (events, items, d.status.get("data-ms"), time.time() - t0))
    finally:
        for f in (path, html):
            if os.path.exists(f):
                os.remove(f)
    print("trace_big: OK")


main()
