#!/usr/bin/env python3
"""memra-server end to end, on the real model with the CPU backend.

  server_test.py openai SERVER MEMRA_RUN MODEL   the official openai client: completions and chat, streamed and
                                                 not; greedy text = memra-run --temp 0; stop sequences; 16
                                                 concurrent clients; a client that leaves frees its slot
  server_test.py http SERVER MODEL               plain http.client: SSE framing, errors (400 naming the field,
                                                 401, 404, 405, 413, 429), 200 malformed requests only 4xx
  server_test.py fuzz SERVER MODEL               1,000 malformed requests and a huge header (any model with a
                                                 tokenizer: the sanitizer legs run it on a tiny one), with --trace
  server_test.py curl SERVER MODEL               curl: SSE framing, a 400's JSON error, a plain answer
  server_test.py load SERVER LOAD MODEL C S      C concurrent clients for S seconds (tests/server_load.py)
  server_test.py mpi SERVER MPIRUN MODEL         mpirun -np 2 memra-server --stages 2 (stage 1 in rank 1): a
                                                 greedy chat through the openai client = the one-process server's,
                                                 each rank loads only its layers, SIGTERM on rank 0 ends every
                                                 process with status 0, a stuck rank 1 ends them all non-zero
                                                 naming it (exit 77 without mpirun or openai)

Each mode starts memra-server on port 0 with 2 stages, reads the port it prints, and ends it with SIGTERM
(exit status 0 asked). Exit 77 (skip) when the openai package is missing. The backend is the CPU's, or
SERVER_TEST_BACKEND's (scripts/gpu-check's `server` step gives cuda, with MEMRA_BATCH_INVARIANT=1 so concurrent
requests keep memra-run's greedy text)."""
import http.client
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time

BACKEND = os.environ.get("SERVER_TEST_BACKEND", "cpu")
DEADLINE = time.monotonic() + 590  # every wait below is bounded (ctest gives 300 to 600 s); a normal run takes seconds


def fail(msg):
    print("FAIL: " + msg, flush=True)
    sys.exit(1)


def skip(reason):
    """Exit 77 (ctest's skip) with the reason; under CI (CI=true), where .ci/run installs everything, a failure."""
    if os.environ.get("CI") == "true":
        fail(reason + " (CI=true: .ci/run installs it, so the test must run)")
    print("SKIP: " + reason)
    sys.exit(77)


def check(cond, msg):
    if not cond:
        fail(msg)


class Server:
    def __init__(self, binary, model, *extra, launcher=(), env_extra=None):
        env = dict(os.environ, MEMRA_BACKEND=BACKEND, **(env_extra or {}))
        self.p = subprocess.Popen([*launcher, binary, "-m", model, "--port", "0", "--stages", "2", *extra],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
        line = self.p.stdout.readline()
        m = re.match(r"listening on http://127\.0\.0\.1:(\d+)$", line.strip())
        if not m:
            self.p.kill()
            fail("memra-server did not print 'listening on http://127.0.0.1:PORT' (got %r; stderr: %s)"
                 % (line, self.p.stderr.read()))
        self.port = int(m.group(1))
        self.base = "http://127.0.0.1:%d" % self.port

    def conn(self, timeout=60):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=60):
        c = self.conn(timeout)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        try:
            c.request(method, path, body=body, headers=h)
        except (BrokenPipeError, ConnectionResetError):
            pass  # an early answer (413) closes the connection while the body is still being sent
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, r.getheader("Content-Type") or "", data

    def metrics(self):
        st, _, data = self.request("GET", "/metrics")
        check(st == 200, "/metrics answered %d" % st)
        out = {}
        for line in data.decode().splitlines():
            if line and not line.startswith("#"):
                k, v = line.rsplit(" ", 1)
                out[k] = float(v)
        return out

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        try:
            rc = self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            fail("memra-server did not exit within 30 s of SIGTERM")
        err = self.p.stderr.read()
        check(rc == 0, "memra-server exited %d after SIGTERM (stderr: %s)" % (rc, err))
        check("SIGTERM: stopping" in err, "memra-server's stderr does not say it stops on SIGTERM: %s" % err)


def wait_idle(srv, what, cancelled_at_least=0):
    """Poll /metrics until no request is in flight and the scheduler counted the cancellations."""
    t_end = time.monotonic() + 20
    while True:
        m = srv.metrics()
        if (m.get("memra_requests_in_flight") == 0 and m.get("memra_requests_running") == 0 and
                m.get('memra_scheduler_requests_total{event="cancelled"}', 0) >= cancelled_at_least):
            return m
        if time.monotonic() > t_end:
            fail("%s: the server still holds requests after 20 s: %s" % (what, m))
        time.sleep(0.1)


PROMPT = "The capital of France is"


def memra_run_greedy(run, model, prompt, n):
    out = subprocess.run([run, "-m", model, "-p", prompt, "-n", str(n), "--temp", "0"], capture_output=True,
                         text=True, timeout=120, env=dict(os.environ, MEMRA_BACKEND=BACKEND))
    check(out.returncode == 0, "memra-run failed: %s" % out.stderr)
    check(out.stdout.startswith(prompt), "memra-run's stdout does not start with the prompt: %r" % out.stdout)
    check(out.stdout.endswith("\n"), "memra-run's stdout does not end with its newline: %r" % out.stdout)
    return out.stdout[len(prompt):-1]  # memra-run ends its one prompt's text with a newline of its own


def mode_openai(server, run, model):
    try:
        import openai
    except ImportError:
        skip("the openai Python package is missing (scripts/setup installs it: "
             "python3 -m pip install --break-system-packages openai)")
    want = memra_run_greedy(run, model, PROMPT, 16)
    check(len(want) > 0, "memra-run generated nothing")
    srv = Server(server, model, "--seqs", "4")
    try:
        cl = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", timeout=240, max_retries=0)
        models = cl.models.list()
        check([m.id for m in models.data] == [os.path.basename(model)], "/v1/models lists %r" % models.data)

        # greedy completion = memra-run --temp 0; usage counts
        c = cl.completions.create(model="m", prompt=PROMPT, max_tokens=16, temperature=0)
        check(c.choices[0].text == want, "greedy completion %r != memra-run's %r" % (c.choices[0].text, want))
        check(c.usage.completion_tokens == 16 and c.usage.prompt_tokens > 0 and
              c.usage.total_tokens == c.usage.prompt_tokens + 16, "usage %r" % c.usage)
        check(c.choices[0].finish_reason == "length", "finish_reason %r" % c.choices[0].finish_reason)

        # streamed: the same text, chunk by chunk
        chunks = list(cl.completions.create(model="m", prompt=PROMPT, max_tokens=16, temperature=0, stream=True))
        text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
        check(text == want, "streamed greedy completion %r != %r" % (text, want))
        check(len(chunks) >= 8, "only %d chunks for 16 tokens: not streamed token by token" % len(chunks))
        check(chunks[-1].choices[0].finish_reason == "length", "last chunk %r" % chunks[-1])

        # stop sequences cut the text and end the request, streamed or not
        cut = want.index("\n") if "\n" in want else None
        if cut is not None and cut > 0:
            c = cl.completions.create(model="m", prompt=PROMPT, max_tokens=16, temperature=0, stop=["\n", "zzz"])
            check(c.choices[0].text == want[:cut] and c.choices[0].finish_reason == "stop",
                  "stop ['\\n']: %r (%s), want %r" % (c.choices[0].text, c.choices[0].finish_reason, want[:cut]))
            check(c.usage.completion_tokens < 16, "a stop sequence did not end the request: %r" % c.usage)
            s = "".join(ch.choices[0].text for ch in cl.completions.create(
                model="m", prompt=PROMPT, max_tokens=16, temperature=0, stop="\n", stream=True) if ch.choices)
            check(s == want[:cut], "streamed stop '\\n': %r, want %r" % (s, want[:cut]))

        # chat, not streamed and streamed (the model's chat template); seeded sampling repeats
        msgs = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Name a color."}]
        a = cl.chat.completions.create(model="m", messages=msgs, max_tokens=12, temperature=0)
        check(a.choices[0].message.role == "assistant" and a.choices[0].message.content,
              "chat answer %r" % a.choices[0])
        check(0 < a.usage.completion_tokens <= 12, "chat usage %r" % a.usage)
        b = list(cl.chat.completions.create(model="m", messages=msgs, max_tokens=12, temperature=0, stream=True,
                                           stream_options={"include_usage": True}))
        bt = "".join(ch.choices[0].delta.content or "" for ch in b if ch.choices)
        check(bt == a.choices[0].message.content, "streamed chat %r != %r" % (bt, a.choices[0].message.content))
        check(b[-1].usage is not None and b[-1].usage.completion_tokens == a.usage.completion_tokens,
              "include_usage: last chunk %r" % b[-1])
        s1 = cl.completions.create(model="m", prompt=PROMPT, max_tokens=12, temperature=0.9, top_p=0.9, extra_body={"top_k": 40},
                                   seed=7)
        s2 = cl.completions.create(model="m", prompt=PROMPT, max_tokens=12, temperature=0.9, top_p=0.9, extra_body={"top_k": 40},
                                   seed=7)
        check(s1.choices[0].text == s2.choices[0].text, "seed 7 twice: %r != %r" % (s1.choices[0].text,
                                                                                    s2.choices[0].text))

        # 16 concurrent clients (4 slots): every one gets its full answer
        want8 = cl.completions.create(model="m", prompt=PROMPT, max_tokens=8, temperature=0).choices[0].text
        check(want.startswith(want8), "8 greedy tokens %r are not the start of 16 %r" % (want8, want))
        results, errors = [None] * 16, []

        def client(i):
            try:
                if i % 2:
                    r = cl.completions.create(model="m", prompt=PROMPT, max_tokens=8, temperature=0)
                    results[i] = (r.choices[0].text, r.usage.completion_tokens)
                else:
                    st = cl.completions.create(model="m", prompt=PROMPT, max_tokens=8, temperature=0, stream=True,
                                               stream_options={"include_usage": True})
                    chunks = list(st)
                    results[i] = ("".join(ch.choices[0].text for ch in chunks if ch.choices),
                                  chunks[-1].usage.completion_tokens)
            except Exception as e:  # noqa: BLE001 (any failure of a client fails the test)
                errors.append("client %d: %r" % (i, e))
        ts = [threading.Thread(target=client, args=(i,)) for i in range(16)]
        t0 = time.monotonic()
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=max(1, DEADLINE - time.monotonic()))
        check(not errors, "concurrent clients failed: %s" % errors)
        check(all(r == (want8, 8) for r in results), "concurrent answers differ from %r: %r" % (want8, results))
        print("16 concurrent clients: %.2f s" % (time.monotonic() - t0))

        # a client that leaves mid-request frees its slot: streamed (closes after 2 chunks) and not (closes
        # while waiting); then more requests than slots still finish
        before = srv.metrics().get('memra_scheduler_requests_total{event="cancelled"}', 0)
        c1 = srv.conn()
        c1.request("POST", "/v1/completions", json.dumps({"prompt": "Once upon a time", "max_tokens": 1500,
                                                          "stream": True}), {"Content-Type": "application/json"})
        r1 = c1.getresponse()
        check(r1.status == 200, "stream status %d" % r1.status)
        r1.fp.readline()
        r1.fp.readline()
        c1.sock.close()
        c1.close()
        c2 = srv.conn()
        c2.request("POST", "/v1/completions", json.dumps({"prompt": "Once upon a time", "max_tokens": 1500}),
                   {"Content-Type": "application/json"})
        time.sleep(0.3)
        c2.sock.close()
        c2.close()
        m = wait_idle(srv, "two clients left", before + 2)
        check(m.get('memra_requests_total{endpoint="/v1/completions",status="499"}', 0) >= 1,
              "the client that left while waiting is not counted as 499: %s" % m)
        done = []
        ts = [threading.Thread(target=lambda: done.append(cl.completions.create(
            model="m", prompt=PROMPT, max_tokens=4, temperature=0).usage.completion_tokens)) for _ in range(6)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(timeout=60)
        check(done == [4] * 6, "after the clients left, 6 requests on 4 slots: %r" % done)
        m = srv.metrics()
        check(m["memra_tokens_generated_total"] > 16 * 8 and
              m['memra_time_to_first_token_seconds_count'] > 16 and m['memra_inter_token_latency_seconds_count'] > 0,
              "metrics do not count the tokens: %s" % m)
        check(any(k.startswith('memra_stage_busy_fraction{stage="1"') and v > 0 for k, v in m.items()),
              "no busy fraction for stage 1: %s" % m)
    finally:
        if srv.p.poll() is None:
            srv.stop()
    print("openai: ok (backend %s)" % BACKEND)


def sse_events(body):
    check(body.endswith(b"data: [DONE]\n\n"), "the stream does not end with 'data: [DONE]\\n\\n': %r" % body[-80:])
    parts = body.split(b"\n\n")
    check(parts[-1] == b"", "the stream has bytes after the last event")
    events = parts[:-1]
    for e in events:
        check(e.startswith(b"data: ") and b"\n" not in e, "not an SSE data line: %r" % e)
    return [json.loads(e[6:]) for e in events[:-1]]


def malformed(srv, auth, count=200):
    """count malformed requests of many kinds: only 4xx, and the server still answers."""
    P = "/v1/completions"
    rnd = random.Random(42)
    good = json.dumps({"prompt": "hello", "max_tokens": 2, "temperature": 0.5, "stop": ["x"]})
    kinds = [
        lambda: good[:rnd.randrange(1, len(good) - 1)],                        # truncated JSON
        lambda: json.dumps({"prompt": "x", rnd.choice(["max_tokens", "top_k", "seed", "n"]):
                            rnd.choice(["1", 1.5, -1e308, 1e308, [], {}, True])}),
        lambda: json.dumps({"prompt": rnd.choice([1.5, {}, [[]], True, ["a", "b"], [-1], [10 ** 9]])}),
        lambda: b'{"prompt": "' + bytes(rnd.randrange(128, 256) for _ in range(8)) + b'"}',  # invalid UTF-8
        lambda: json.dumps({"prompt": "x", rnd.choice(["temperature", "top_p", "stream"]):
                            rnd.choice([-1, 3, "1", [1], {"a": 1}])}),
        lambda: json.dumps({"messages": rnd.choice([{}, "hi", [1], [{"role": 1, "content": "x"}],
                                                    [{"role": "user", "content": [{"type": "image"}]}]])}),
        lambda: json.dumps([1, 2, 3]),
        lambda: "",
        lambda: "\x00" * rnd.randrange(1, 64),
        lambda: json.dumps({"prompt": "x", "stop": rnd.choice([5, [1, 2], ["a"] * 9, [""]])}),
        lambda: "[" * 5000,
    ]
    statuses = {}
    for i in range(count):
        body = kinds[i % len(kinds)]()
        st, _, data = srv.request("POST", rnd.choice([P, "/v1/chat/completions"]), body, auth)
        statuses[st] = statuses.get(st, 0) + 1
        check(400 <= st < 500, "malformed request %r answered %d: %r" % (body[:200], st, data[:200]))
    c = srv.conn()
    c.putrequest("GET", "/health")
    c.putheader("X-Huge", "a" * 200000)
    c.endheaders()
    try:
        st = c.getresponse().status
        check(400 <= st < 500, "a 200 kB header answered %d" % st)
    except (ConnectionError, http.client.HTTPException):
        pass  # closing the connection is also a refusal
    c.close()
    check(srv.request("GET", "/health")[0] == 200, "the server no longer answers after malformed requests")
    print("malformed requests by status: %s" % statuses)


def mode_fuzz(server, model):
    """1,000 malformed requests, on any model with a tokenizer (the sanitizer legs use a tiny one), with a trace of
    the whole run (--trace): written at shutdown, it parses and holds the requests' points and both stages."""
    trace = "%s/memra-server-trace-%d.json" % (os.environ.get("TMPDIR", "/tmp"), os.getpid())
    srv = Server(server, model, "--seqs", "2", "--trace", trace)
    try:
        malformed(srv, {}, 1000)
        # a few real generations around it, so the sanitizers see the token path, a client leaving and SIGTERM
        body = {"prompt": "hello world", "max_tokens": 8, "temperature": 0}
        st, _, data = srv.request("POST", "/v1/completions", body)
        check(st == 200 and json.loads(data)["usage"]["completion_tokens"] <= 8, "tiny completion %d %r" % (st, data))
        st, _, data = srv.request("POST", "/v1/completions", dict(body, stream=True))
        check(st == 200, "tiny stream %d" % st)
        sse_events(data)
        c = srv.conn()
        c.request("POST", "/v1/completions", json.dumps(dict(body, max_tokens=200)), {})
        time.sleep(0.05)
        c.sock.close()
        c.close()
        wait_idle(srv, "a client left")
        c = srv.conn()
        c.request("POST", "/v1/completions", json.dumps(dict(body, max_tokens=200, stream=True)), {})
        c.getresponse()
        srv.stop()
        with open(trace) as f:
            t = json.load(f)
        ev = t["traceEvents"] if isinstance(t, dict) else t
        names = {e.get("name") for e in ev}
        check({"queued", "first token", "done"} <= names, "the trace lacks the requests' points: %s" % sorted(
            n for n in names if n)[:20])
        check(sum(1 for e in ev if e.get("name") == "done") >= 3, "the trace has fewer than 3 requests done")
    finally:
        if srv.p.poll() is None:
            srv.p.kill()
        if os.path.exists(trace):
            os.unlink(trace)
    print("fuzz: ok")


def mode_curl(server, model):
    """curl, as a user would: SSE framing of a streamed completion (data: lines, [DONE] last), a malformed body's
    400 with an OpenAI-style JSON error naming what is wrong, a non-streamed answer; a chat request to a model
    without a chat template is a 400 naming it, and answered with --chat-template chatml."""
    srv = Server(server, model, "--seqs", "2")
    try:
        def curl(*args):
            r = subprocess.run(["curl", "-sS", "-N", "--max-time", "120", *args], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=150)
            check(r.returncode == 0, "curl %s failed: %s" % (" ".join(args), r.stderr.decode()[:300]))
            return r.stdout
        url = srv.base + "/v1/completions"
        body = json.dumps({"prompt": "hello world", "max_tokens": 6, "temperature": 0, "stream": True})
        out = curl("-H", "Content-Type: application/json", "-d", body, url).decode()
        frames = out.split("\n\n")
        check(frames[-1] == "" and frames[-2] == "data: [DONE]", "the stream does not end with data: [DONE]: %r"
              % out[-200:])
        data = [f for f in frames[:-2] if f]
        check(data and all(f.startswith("data: {") for f in data), "a frame is not 'data: {json}': %r" % data[:3])
        for f in data:
            json.loads(f[6:])
        out = curl("-w", "\n%{http_code}", "-H", "Content-Type: application/json", "-d", '{"prompt": "x", "max_tokens"',
                   url).decode()
        body_txt, code = out.rsplit("\n", 1)
        check(code == "400", "a truncated body answered %s" % code)
        err = json.loads(body_txt)["error"]
        check(err["type"] == "invalid_request_error" and err["message"], "not an OpenAI-style error: %r" % err)
        out = curl("-H", "Content-Type: application/json", "-d", json.dumps({"prompt": "hello world", "max_tokens": 4,
                                                                              "temperature": 0}), url)
        j = json.loads(out)
        check(j["object"] == "text_completion" and j["usage"]["completion_tokens"] <= 4, "a plain answer: %r" % j)
        chat = json.dumps({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0})
        out = curl("-w", "\n%{http_code}", "-H", "Content-Type: application/json", "-d", chat,
                   srv.base + "/v1/chat/completions").decode()
        body_txt, code = out.rsplit("\n", 1)
        check(code == "400" and "chat template" in json.loads(body_txt)["error"]["message"],
              "a chat request to a model without a chat template: %s %r" % (code, body_txt[:300]))
        srv.stop()
    finally:
        if srv.p.poll() is None:
            srv.p.kill()
    # --chat-template gives such a model one: the same chat request is answered
    srv = Server(server, model, "--seqs", "1", "--chat-template", "chatml")
    try:
        r = subprocess.run(["curl", "-sS", "--max-time", "120", "-H", "Content-Type: application/json", "-d", chat,
                            srv.base + "/v1/chat/completions"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=150)
        j = json.loads(r.stdout)
        check(j.get("object") == "chat.completion" and j["choices"][0]["message"]["role"] == "assistant",
              "a chat request with --chat-template chatml: %r" % j)
        srv.stop()
    finally:
        if srv.p.poll() is None:
            srv.p.kill()
    print("curl: ok")


def mode_load(server, load, model, clients, seconds):
    """clients concurrent clients for seconds on loopback (tests/server_load.py): no error, every answer its
    greedy reference (nothing lost or duplicated), every slot free after."""
    srv = Server(server, model, "--seqs", "16", "--max-queue", "1024")
    try:
        r = subprocess.run([sys.executable, load, srv.base, "--clients", clients, "--seconds", seconds,
                            "--max-tokens", "8"], timeout=float(seconds) + 240, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        print(r.stdout)
        check(r.returncode == 0, "the load run failed (exit %d)" % r.returncode)
        srv.stop()
    finally:
        if srv.p.poll() is None:
            srv.p.kill()
    print("load: ok")


def mode_http(server, model):
    key = "sk-test-0123456789"
    auth = {"Authorization": "Bearer " + key}
    srv = Server(server, model, "--api-key", key, "--seqs", "2", "--max-queue", "1", "--ctx", "256")
    try:
        P = "/v1/completions"
        # SSE framing; the streamed text equals the text of the same request not streamed
        st, ct, body = srv.request("POST", P, {"prompt": PROMPT, "max_tokens": 10, "temperature": 0,
                                                "stream": True, "stream_options": {"include_usage": True}}, auth)
        check(st == 200 and ct.startswith("text/event-stream"), "stream: %d %s" % (st, ct))
        ev = sse_events(body)
        text = "".join(e["choices"][0]["text"] for e in ev if e["choices"])
        check(ev[-1]["usage"]["completion_tokens"] == 10, "usage chunk %r" % ev[-1])
        st, ct, body = srv.request("POST", P, {"prompt": PROMPT, "max_tokens": 10, "temperature": 0}, auth)
        j = json.loads(body)
        check(st == 200 and ct.startswith("application/json") and j["choices"][0]["text"] == text,
              "non-streamed %d %r != streamed %r" % (st, j, text))
        st, _, body = srv.request("POST", "/v1/chat/completions", {"messages": [{"role": "user", "content": [
            {"type": "text", "text": "Hi"}]}], "max_tokens": 5, "stream": True}, auth)
        ev = sse_events(body)
        check(ev[0]["choices"][0]["delta"].get("role") == "assistant" and
              ev[-1]["choices"][0]["finish_reason"] in ("stop", "length"), "chat stream events %r" % ev)

        def err(status, body, param=None, path=P, headers=auth, method="POST", text=None):
            st, ct, data = srv.request(method, path, body, headers)
            check(st == status, "%s %s %r: status %d, want %d (%r)" % (method, path, body, st, status, data))
            e = json.loads(data)["error"]
            check(set(e) == {"message", "type", "param", "code"} and e["message"], "error body %r" % e)
            check(e["param"] == param, "%r: param %r, want %r (%s)" % (body, e["param"], param, e["message"]))
            if text:
                check(text in e["message"], "%r: message %r does not say %r" % (body, e["message"], text))
            return e
        err(400, '{"prompt": "x", ', None, text="not valid JSON")
        err(400, {"prompt": "x", "max_tokens": "5"}, "max_tokens", text="integer")
        err(400, {"prompt": "x", "max_tokens": 1e300}, "max_tokens")
        err(400, {"prompt": "x", "n": 2}, "n", text="n = 1")
        err(400, {"prompt": "x", "temperature": "hot"}, "temperature")
        err(400, {"prompt": "x", "stop": [1]}, "stop")
        err(400, {"max_tokens": 3}, "prompt", text="required")
        err(400, {"messages": []}, "messages", path="/v1/chat/completions")
        err(400, {"messages": [{"role": "user"}]}, "messages[0].content", path="/v1/chat/completions")
        err(400, {"prompt": "word " * 400}, "prompt", text="the context holds 256 tokens")
        check(srv.request("POST", P, {"prompt": PROMPT, "max_tokens": 1, "zzz_unknown": [1, {"a": 2}]},
                          auth)[0] == 200, "an unknown field is not ignored")
        err(404, None, None, path="/v2/nothing", method="GET")
        err(405, None, None, path=P, method="GET")
        err(401, {"prompt": "x"}, None, headers={"Authorization": "Bearer sk-test-0123456780"})
        err(401, {"prompt": "x"}, None, headers={})
        err(413, "[" + "1," * (1 << 20) + "1]", None, text="limit")
        check(srv.request("GET", "/health", headers={})[0] == 200, "/health asks for the key")

        # more than --max-queue waiting -> 429: 2 slots + 1 queued held by streams, the 4th is refused
        held = []
        for _ in range(3):
            c = srv.conn()
            c.request("POST", P, json.dumps({"prompt": "Once upon a time", "max_tokens": 200, "stream": True}),
                      dict(auth, **{"Content-Type": "application/json"}))
            held.append(c)
        time.sleep(0.2)
        e = err(429, {"prompt": "x", "max_tokens": 1}, None)
        check(e["type"] == "rate_limit_error", "429 type %r" % e)
        for c in held:
            c.close()
        wait_idle(srv, "the held streams closed")

        malformed(srv, auth)

        # SIGTERM while a stream is in flight: the stream ends ([DONE]) and the server exits 0
        c = srv.conn()
        c.request("POST", P, json.dumps({"prompt": "Once upon a time", "max_tokens": 220, "stream": True}),
                  dict(auth, **{"Content-Type": "application/json"}))
        r = c.getresponse()
        r.fp.readline()
        srv.stop()
        rest = r.fp.read()  # raw chunked bytes (the readline above took a chunk-size line)
        check(rest.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n") and b"the server is stopping" in rest,
              "a stream cut by SIGTERM does not end with an error event and [DONE]: %r" % rest[-300:])
    finally:
        if srv.p.poll() is None:
            srv.p.kill()
    print("http: ok (backend %s)" % BACKEND)


def procs_of(binary):
    """PID -> MPI rank (None outside mpirun) of every process running binary (from /proc: no procps needed)."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/cmdline" % d, "rb") as f:
                argv = f.read().split(b"\0")
            if argv[0].decode(errors="replace") != binary:
                continue
            with open("/proc/%s/environ" % d, "rb") as f:
                env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
        except OSError:
            continue  # ended meanwhile
        r = env.get(b"OMPI_COMM_WORLD_RANK", env.get(b"PMI_RANK"))
        out[int(d)] = int(r) if r is not None else None
    return out


def check_all_gone(server):
    """Every process of this server build ends within 5 s of mpirun."""
    t_end = time.monotonic() + 5
    while procs_of(server) and time.monotonic() < t_end:
        time.sleep(0.1)
    check(not procs_of(server), "processes left after mpirun ended: %r" % procs_of(server))


def kill_all(srv, server):
    """Whatever a failed check left running: mpirun and every rank."""
    if srv.p.poll() is None:
        srv.p.kill()
    for pid in procs_of(server):
        os.kill(pid, signal.SIGKILL)


def mode_mpi(server, mpirun, model):
    try:
        import openai
    except ImportError:
        skip("the openai Python package is missing (scripts/setup installs it)")
    if not (os.path.isfile(mpirun) and os.access(mpirun, os.X_OK)):
        skip("no mpirun at %s" % mpirun)
    check(not procs_of(server), "a memra-server of this build is already running")
    msgs = [{"role": "system", "content": "You are brief."}, {"role": "user", "content": "Name a color."}]

    def chat(srv):
        cl = openai.OpenAI(base_url=srv.base + "/v1", api_key="unused", timeout=240, max_retries=0)
        a = cl.chat.completions.create(model="m", messages=msgs, max_tokens=24, temperature=0)
        check(a.choices[0].message.content, "empty chat answer %r" % a.choices[0])
        return a.choices[0].message.content, a.usage.completion_tokens

    one = Server(server, model)
    try:
        want = chat(one)
    finally:
        if one.p.poll() is None:
            one.stop()
    # as root in containers, more ranks than cores, no cross-memory attach (tests/mpi_scale_out.sh)
    launcher = (mpirun, "--oversubscribe", "--mca", "btl_vader_single_copy_mechanism", "none", "-np", "2",
                "-x", "MEMRA_BACKEND", "-x", "MEMRA_PP_LOAD_REPORT")
    srv = Server(server, model, launcher=launcher,
                 env_extra={"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
                            "MEMRA_PP_LOAD_REPORT": "1"})
    try:
        ranks = procs_of(server)
        check(sorted(ranks.values()) == [0, 1], "under mpirun -np 2 the server processes are ranks %r" % ranks)
        got = chat(srv)
        check(got == want, "chat under mpirun -np 2 %r != the one-process server's %r" % (got, want))
        rank0 = [pid for pid, r in ranks.items() if r == 0][0]
        os.kill(rank0, signal.SIGTERM)  # the user's stop: on rank 0, as a service manager sends it
        try:
            rc = srv.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            fail("mpirun did not end within 30 s of SIGTERM on rank 0 (processes: %r)" % procs_of(server))
        err = srv.p.stderr.read()
        check(rc == 0, "mpirun exited %d after SIGTERM on rank 0 (stderr: %s)" % (rc, err))
        check("SIGTERM: stopping" in err, "rank 0's stderr does not say it stops on SIGTERM: %s" % err)
        loads = sorted(re.findall(r"memra: load rank (\d+) stages \d+\.\.\d+ layers (\d+) of (\d+) .*head (\d)", err))
        check(len(loads) == 2 and [int(l[0]) for l in loads] == [0, 1], "not one load line per rank: %s" % err)
        check(all(0 < int(l[1]) < int(l[2]) for l in loads) and sum(int(l[1]) for l in loads) == int(loads[0][2]),
              "the ranks do not split the layers: %r" % loads)
        check([int(l[3]) for l in loads] == [0, 1], "the head is not on rank 1 only: %r" % loads)
        check_all_gone(server)
    finally:
        kill_all(srv, server)
    # a stuck rank 1 (SIGSTOP): rank 0 finds it silent, stops serving and ends every process, non-zero, naming it
    srv = Server(server, model, launcher=launcher,
                 env_extra={"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
    try:
        ranks = procs_of(server)
        check(sorted(ranks.values()) == [0, 1], "under mpirun -np 2 the server processes are ranks %r" % ranks)
        t0 = time.monotonic()
        os.kill([pid for pid, r in ranks.items() if r == 1][0], signal.SIGSTOP)
        try:
            rc = srv.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            fail("the server did not end within 30 s of rank 1 stopping (processes: %r)" % procs_of(server))
        took = time.monotonic() - t0
        err = srv.p.stderr.read()
        check(rc != 0, "mpirun exited 0 with rank 1 stuck (stderr: %s)" % err)
        check(re.search(r"memra-server: .*rank 1 silent.*: stopping", err),
              "rank 0's stderr does not name the silent rank: %s" % err)
        check(took < 10, "the server took %.1f s to end with rank 1 stuck (at most 10 s asked)" % took)
        check_all_gone(server)
    finally:
        kill_all(srv, server)
    print("mpi: ok: %r; a stuck rank ended the server in %.1f s" % (want, took))


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "openai" and len(sys.argv) == 5:
        mode_openai(*sys.argv[2:])
    elif len(sys.argv) >= 2 and sys.argv[1] == "http" and len(sys.argv) == 4:
        mode_http(*sys.argv[2:])
    elif len(sys.argv) >= 2 and sys.argv[1] == "fuzz" and len(sys.argv) == 4:
        mode_fuzz(*sys.argv[2:])
    elif len(sys.argv) >= 2 and sys.argv[1] == "curl" and len(sys.argv) == 4:
        mode_curl(*sys.argv[2:])
    elif len(sys.argv) >= 2 and sys.argv[1] == "load" and len(sys.argv) == 7:
        mode_load(*sys.argv[2:])
    elif len(sys.argv) >= 2 and sys.argv[1] == "mpi" and len(sys.argv) == 5:
        mode_mpi(*sys.argv[2:])
    else:
        print(__doc__)
        sys.exit(2)
