#!/usr/bin/env python3
"""Checks the CUDA kernels memra-bench --kernel-trace merges into a runtime trace (--trace): kernel events exist on
"gpu D stream S kernels" lanes, and the kernels that ran while the traced steps walked lie inside a walk span of a
stage stream (the walks are the device stamps of actors/pp_readback.c, the kernels CUPTI's records; both mapped
onto the host's CLOCK_MONOTONIC, docs/trace.md), within TOL us. Prints a table; exit 1 below MIN_FRACTION.
Usage: trace_kernels_check.py TRACE.json [TOL_US=20] [MIN_FRACTION=0.9]"""
import bisect
import json
import sys


def main():
    path = sys.argv[1]
    tol = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
    need = float(sys.argv[3]) if len(sys.argv) > 3 else 0.9
    with open(path) as f:
        evs = json.load(f)["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    kern = [e for e in evs if e["ph"] == "X" and e.get("cat") == "kernel"]
    open_b, walks = {}, []
    for e in evs:
        if e["ph"] == "B" and e["name"] == "walk":
            open_b.setdefault(e["tid"], []).append(e["ts"])
        elif e["ph"] == "E" and e["name"] == "walk" and open_b.get(e["tid"]):
            walks.append((open_b[e["tid"]].pop(), e["ts"]))
    if not kern:
        print("trace_kernels_check: FAIL: no kernel event (cat \"kernel\") in %s" % path)
        sys.exit(1)
    if not walks:
        print("trace_kernels_check: FAIL: no walk span in %s" % path)
        sys.exit(1)
    walks.sort()
    lo, hi = walks[0][0], max(w[1] for w in walks)
    merged = []  # the union of the walks
    for a, b in walks:
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    starts = [m[0] for m in merged]
    inside = outside = 0
    worst = 0.0
    per_lane = {}
    for k in kern:
        a, b = k["ts"], k["ts"] + k.get("dur", 0)
        if b < lo or a > hi:  # outside the traced steps' window (warm-up, the drain)
            continue
        i = bisect.bisect_right(starts, a + tol) - 1
        ok = i >= 0 and merged[i][0] - tol <= a and b <= merged[i][1] + tol
        lane = names.get(k["tid"], str(k["tid"]))
        n_in, n_all = per_lane.get(lane, (0, 0))
        per_lane[lane] = (n_in + ok, n_all + 1)
        if ok:
            inside += 1
        else:
            outside += 1
            d = min(abs(a - merged[i][1]) if i >= 0 else 1e18, abs(merged[i + 1][0] - a) if i + 1 < len(merged) else 1e18)
            worst = max(worst, d)
    total = inside + outside
    frac = inside / total if total else 0.0
    print("%-28s %9s %9s %8s" % ("lane", "kernels", "in walks", "share"))
    for lane in sorted(per_lane):
        n_in, n_all = per_lane[lane]
        print("%-28s %9d %9d %7.1f%%" % (lane, n_all, n_in, 100.0 * n_in / n_all))
    print("%-28s %9d %9d %7.1f%%" % ("all (tolerance %.0f us)" % tol, total, inside, 100.0 * frac))
    print("walks %d on %d lanes, window %.1f us; kernels outside: %d (farthest %.1f us from a walk)"
          % (len(walks), len({e["tid"] for e in evs if e["ph"] == "B" and e["name"] == "walk"}), hi - lo, outside, worst))
    if total == 0 or frac < need:
        print("trace_kernels_check: FAIL: %.1f%% of the kernels in the window lie in a walk (need %.0f%%)"
              % (100.0 * frac, 100.0 * need))
        sys.exit(1)
    print("trace_kernels_check: OK")


main()
