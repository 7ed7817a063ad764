#!/usr/bin/env python3
"""Load driver for memra-server (docs/bench/server.md): C clients on loopback, each sending greedy completions
back to back for S seconds (half streamed, half not), then a report and checks.

  server_load.py URL [--clients C] [--seconds S] [--max-tokens T]

Checks (exit 1 when one fails): no request failed; every answer equals the greedy reference of its prompt
(asked once before the load: a lost or duplicated token changes the text) with usage.completion_tokens equal to
the reference's; afterwards /metrics shows no request in flight or running (every slot freed).
Prints requests/s, completion tokens/s and the latency percentiles (whole request; first byte for streams)."""
import argparse
import http.client
import json
import sys
import threading
import time
import urllib.parse

PROMPTS = ["The capital of France is", "Once upon a time", "The three primary colors are",
           "def fibonacci(n):", "In 1969, the first person to walk on the moon"]


def post(host, port, body, timeout=300):
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    t0 = time.monotonic()
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    first = None
    if body.get("stream"):
        text, usage, events = [], None, 0
        for line in r:
            if first is None:
                first = time.monotonic() - t0
            if not line.startswith(b"data: ") or line.strip() == b"data: [DONE]":
                continue
            ev = json.loads(line[6:])
            events += 1
            if ev.get("usage"):
                usage = ev["usage"]["completion_tokens"]
            if ev.get("choices"):
                text.append(ev["choices"][0]["text"])
        out = (r.status, "".join(text), usage)
    else:
        data = r.read()
        j = json.loads(data) if r.status == 200 else {"error": data}
        out = (r.status, j["choices"][0]["text"] if r.status == 200 else j,
               j["usage"]["completion_tokens"] if r.status == 200 else None)
    c.close()
    total = time.monotonic() - t0
    return out, total, first if first is not None else total


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100.0 * len(xs)))] if xs else float("nan")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--max-tokens", type=int, default=16)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    host, port = u.hostname, u.port
    ref = {}
    for p in PROMPTS:
        (st, text, n), _, _ = post(host, port, {"prompt": p, "max_tokens": a.max_tokens, "temperature": 0})
        if st != 200:
            sys.exit("reference request failed: %s %s" % (st, text))
        ref[p] = (text, n)
    lat, ttfb, errors = [], [], []
    tokens = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + a.seconds

    def client(i):
        k = 0
        while time.monotonic() < stop_at:
            p = PROMPTS[(i + k) % len(PROMPTS)]
            stream = (i + k) % 2 == 0
            body = {"prompt": p, "max_tokens": a.max_tokens, "temperature": 0, "stream": stream}
            if stream:
                body["stream_options"] = {"include_usage": True}
            try:
                (st, text, n), total, first = post(host, port, body)
            except Exception as e:  # noqa: BLE001 (a failed request is reported, not raised)
                with lock:
                    errors.append("client %d: %r" % (i, e))
                return
            with lock:
                if st != 200 or (text, n) != ref[p]:
                    errors.append("client %d %s: status %s, %r (%s tokens), want %r" % (
                        i, "stream" if stream else "plain", st, text, n, ref[p]))
                else:
                    lat.append(total)
                    ttfb.append(first)
                    tokens[0] += n
            k += 1

    t0 = time.monotonic()
    ts = [threading.Thread(target=client, args=(i,)) for i in range(a.clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=a.seconds + 600)
    wall = time.monotonic() - t0
    c = http.client.HTTPConnection(host, port, timeout=30)
    c.request("GET", "/metrics")
    metrics = {}
    for line in c.getresponse().read().decode().splitlines():
        if line and not line.startswith("#"):
            key, v = line.rsplit(" ", 1)
            metrics[key] = float(v)
    print("clients %d, %.1f s: %d requests, %.2f requests/s, %.1f completion tokens/s; latency p50 %.3f s p99 "
          "%.3f s; streamed first byte p50 %.3f s p99 %.3f s; errors %d" % (
              a.clients, wall, len(lat), len(lat) / wall, tokens[0] / wall, pct(lat, 50), pct(lat, 99),
              pct(ttfb, 50), pct(ttfb, 99), len(errors)))
    ok = True
    if errors:
        print("FAIL: %d requests failed, first: %s" % (len(errors), errors[:3]))
        ok = False
    if metrics.get("memra_requests_in_flight") != 0 or metrics.get("memra_requests_running") != 0:
        print("FAIL: requests still held after the load: in flight %s, running %s" % (
            metrics.get("memra_requests_in_flight"), metrics.get("memra_requests_running")))
        ok = False
    if not lat:
        print("FAIL: no request completed")
        ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
