#!/usr/bin/env python3
"""Checks a memra trace (Chrome Trace Event JSON) with Python's json parser: it parses, every begin has its
end on its track (B/E nested, b/e by id), every stage's actor and stream and the readback have a track with
events, each step's flow goes stage 0 -> stage 1 -> ... -> readback in time order, every step that walked lists
its requests (the scheduler's "requests" event) and each queued request's steps walk every stage and are read back.
Usage: trace_check.py TRACE.json STAGES"""
import json
import sys


def fail(msg):
    print("trace_check: FAIL: " + msg)
    sys.exit(1)


def main():
    path, stages = sys.argv[1], int(sys.argv[2])
    with open(path) as f:
        doc = json.load(f)
    evs = doc["traceEvents"]
    if doc["otherData"]["dropped"] != 0:
        fail("records dropped: %d" % doc["otherData"]["dropped"])
    names = {e["tid"]: e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    tid_of = {v: k for k, v in names.items()}
    used = {}
    for e in evs:
        if e["ph"] != "M":
            used[e["tid"]] = used.get(e["tid"], 0) + 1
    want = ["stage %d actor" % s for s in range(stages)] + ["stage %d stream" % s for s in range(stages)]
    want += ["boundary %d hops" % s for s in range(stages - 1)] + ["readback"]
    for w in want:
        if w not in tid_of or used.get(tid_of[w], 0) == 0:
            fail("no events on the track '%s'" % w)
    # every B has its E on the same track, properly nested; every b its e (by id)
    stack, open_async, spans = {}, {}, 0
    for e in evs:
        ph, tid = e["ph"], e.get("tid")
        if ph == "B":
            stack.setdefault(tid, []).append(e)
            spans += 1
        elif ph == "E":
            st = stack.get(tid)
            if not st:
                fail("an end without a begin on %s at %s" % (names.get(tid), e["ts"]))
            b = st.pop()
            if b["name"] != e["name"] or b["ts"] > e["ts"]:
                fail("span %s at %s on %s ends as %s at %s" % (b["name"], b["ts"], names.get(tid), e["name"], e["ts"]))
        elif ph == "b":
            open_async[(e["cat"], e["id"])] = e
        elif ph == "e":
            if open_async.pop((e["cat"], e["id"]), None) is None:
                fail("an async end without its begin: %s" % e["id"])
    left = [names.get(t) for t, st in stack.items() if st]
    if left or open_async:
        fail("begins without an end on %s, async %s" % (left, list(open_async)[:5]))
    # flows: one per step, through every stage's stream in order, then the readback
    flows = {}
    for e in evs:
        if e["ph"] in "stf":
            flows.setdefault(e["id"], []).append(e)
    if not flows:
        fail("no flow events")
    order = [tid_of["stage %d stream" % s] for s in range(stages)] + [tid_of["readback"]]
    for fid, fl in flows.items():
        fl.sort(key=lambda e: "stf".index(e["ph"]) * 0 + order.index(e["tid"]))
        if [e["tid"] for e in fl] != order:
            fail("flow %s visits %s, not %s" % (fid, [names[e["tid"]] for e in fl], [names[t] for t in order]))
        if fl[0]["ph"] != "s" or fl[-1]["ph"] != "f" or any(e["ph"] != "t" for e in fl[1:-1]):
            fail("flow %s is not s, t.., f: %s" % (fid, [e["ph"] for e in fl]))
        if any(fl[i]["ts"] > fl[i + 1]["ts"] for i in range(len(fl) - 1)):
            fail("flow %s goes back in time: %s" % (fid, [e["ts"] for e in fl]))
    # requests: every step that walked lists its requests; each queued request's steps walk every stage and
    # are read back (the path the viewer highlights)
    steps_of = {}
    listed = set()
    for e in evs:
        if e["ph"] == "i" and e["name"] == "requests":
            listed.add(e["args"]["step"])
            for q in e["args"]["reqs"]:
                steps_of.setdefault(q, set()).add(e["args"]["step"])
    walked = {e["args"]["step"] for e in evs if e["ph"] == "B" and e["name"] == "walk"}
    if walked - listed:
        fail("steps without their requests: %s" % sorted(walked - listed)[:10])
    queued = {e["args"]["req"] for e in evs if e["ph"] == "i" and e["name"] == "queued"}
    if not queued:
        fail("no request was queued")
    where = {}
    for e in evs:
        if e["ph"] == "B" and e["name"] in ("walk", "readback"):
            where.setdefault(e["args"]["step"], set()).add(e["tid"])
    for q in sorted(queued):
        if not steps_of.get(q):
            fail("request %d is in no step's requests" % q)
        seen = set().union(*(where.get(s, set()) for s in steps_of[q]))
        if not set(order) <= seen:
            fail("request %d's steps miss %s" % (q, [names[t] for t in set(order) - seen]))
    print("trace_check: OK: %d events, %d spans, %d flows across %d stages and the readback, %d requests whose "
          "steps walk every stage" % (len(evs), spans, len(flows), stages, len(queued)))


main()
