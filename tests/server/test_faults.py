#!/usr/bin/python3
"""The fault suite: what a hostile client, a broken upstream, a signal or a crash must not cost.
Each case is the regression test of a failure found by the hostile and fault battery (issue 62):

  drain_serve     SIGTERM on `coda serve` with 8 streams and 8 non-streaming requests in flight:
                  /health turns 503 "draining", new requests get 503 with Retry-After; the requests
                  in flight finish (the scheduler is resumed during the drain), and exit status 0;
                  with --shutdown-timeout run out, every stream ends with an error event then
                  [DONE] and every non-streaming request gets 503 with Retry-After (never 400);
                  a second signal exits at once (status 143)
  drain_proxy     the same for `coda proxy` in front of the scripted upstream: the requests finish,
                  or at the timeout every upstream generation still held is cancelled (the upstream
                  sees each connection closed) and the clients get their terminal answer
  labels          10,000 requests with distinct 1 KB model names leave /metrics under 64 KiB (the
                  model label is a model the upstream serves, or "other"); --metrics-auth
  torn_journal    a study file whose last line was torn by a crash is repaired on resume (Optuna
                  then loads it), and each trial's start precedes its completion
  empty_upstream  a 200 stream (or body) without a single OpenAI choice is a 502 bad_upstream_response;
                  a reset after connect and a refused connection are 502s with codes of their own
  secrets         planted secrets (API keys, URL credentials) never appear on /health, /metrics,
                  stderr or in error bodies; an --upstream URL with credentials is refused
  paths           the /v1 pass-through forwards the path as written, with its query, and refuses
                  dot segments and encoded slashes with 400
  fields          the proxy answers a malformed field it forwards (max_tokens "lots") with 400

Every wait is on a condition (the server's own counters, the upstream's /stats, a process's exit);
deadlines only bound a hang and are far above any plausible run, so a busy machine is slower, not red.

Usage: /usr/bin/python3 tests/server/test_faults.py build/coda WORK_DIR [CASE ...]
"""
import http.client
import json
import os
import random
import signal
import socket
import string
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "proxy"))
import test_server as ts  # noqa: E402  (SseParser, Server, check, failures)
import test_proxy as tp  # noqa: E402  (Proc, socket_count)

check = ts.check
HANG_S = 300  # bounds a hang only: no verdict depends on it


def wait_until(what, cond, deadline_s=HANG_S):
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    check(False, f"condition never held within {deadline_s} s: {what}")
    return False


class Proc(tp.Proc):
    """Any process that prints 'listening on ...:PORT' (coda proxy, the scripted upstream), which a
    test may let exit by itself."""

    def finish(self):
        """Waits for the process to exit by itself; returns (status, stderr)."""
        try:
            rc = self.proc.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            check(False, f"pid {self.proc.pid} did not exit within {HANG_S} s")
            self.proc.kill()
            rc = self.proc.wait()
        return rc, self.proc.stderr.read()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def serve(coda, *args):
    p = ts.Server(coda, *args)
    p.finish = Proc.finish.__get__(p)
    p.close = Proc.close.__get__(p)
    return p


def scripted(*args):
    return Proc([sys.executable, os.path.join(HERE, "..", "proxy", "scripted_upstream.py"), *args])


def proxy(coda, upstream_port, *args):
    return Proc([coda, "proxy", "--upstream", f"http://127.0.0.1:{upstream_port}", "--port", "0", *args])


def upstream_stats(up):
    return up.json("GET", "/stats")[2]


def metric_sum(server, name, **labels):
    _, _, raw = server.request("GET", "/metrics")
    total = 0.0
    for line in raw.decode().splitlines():
        if (line.startswith(name + "{") or line.startswith(name + " ")) and all(
                f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


# --- clients that record what they received -------------------------------------------------------

class Outcome:
    def __init__(self, kind):
        self.kind = kind  # "stream" or "json"
        self.status = None
        self.retry_after = None
        self.events = []  # stream: the JSON events
        self.done = False  # stream: [DONE] came
        self.body = None
        self.broken = None  # the connection broke (an exception's text)
        self.sent = threading.Event()  # the request's bytes are out

    def describe(self):
        if self.broken:
            return f"connection broke: {self.broken}"
        if self.kind == "json":
            code = (self.body or {}).get("error", {}).get("code") if isinstance(self.body, dict) else None
            fin = None
            if isinstance(self.body, dict) and self.body.get("choices"):
                fin = self.body["choices"][0].get("finish_reason")
            return f"HTTP {self.status}" + (f" finish_reason {fin}" if fin else "") + (
                f" error {code}" if code else "") + (f" Retry-After {self.retry_after}" if self.retry_after else "")
        errs = [e["error"].get("code") for e in self.events if "error" in e]
        fins = [c.get("finish_reason") for e in self.events for c in e.get("choices", []) if c.get("finish_reason")]
        return (f"HTTP {self.status}, {len(self.events)} events" + (f", finish_reason {fins[-1]}" if fins else "") +
                (f", error event {errs[-1]}" if errs else "") + (", [DONE]" if self.done else ", no [DONE]") +
                (f" error {self.body.get('error', {}).get('code')}" if isinstance(self.body, dict) else ""))


def send(port, path, body, outcome):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG_S)
        c.request("POST", path, body=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
        outcome.sent.set()
        r = c.getresponse()
        outcome.status = r.status
        outcome.retry_after = r.getheader("Retry-After")
        if outcome.kind == "json" or r.status != 200:
            raw = r.read()
            try:
                outcome.body = json.loads(raw)
            except ValueError:
                outcome.body = raw
        else:
            parser = ts.SseParser()
            while True:
                chunk = r.read1(4096)
                if not chunk:
                    break
                for data in parser.feed(chunk):
                    if data == "[DONE]":
                        outcome.done = True
                    else:
                        outcome.events.append(json.loads(data))
        c.close()
    except Exception as e:  # noqa: BLE001  (the outcome records it; the checks judge it)
        outcome.broken = repr(e)
        outcome.sent.set()


def launch(port, path, streams, plain, body_of):
    """`streams` streaming and `plain` non-streaming requests at once; returns (outcomes, threads)."""
    outs, threads = [], []
    for i in range(streams + plain):
        o = Outcome("stream" if i < streams else "json")
        b = dict(body_of(i), stream=i < streams)
        t = threading.Thread(target=send, args=(port, path, b, o), daemon=True)
        t.start()
        outs.append(o)
        threads.append(t)
    return outs, threads


def join(threads):
    for t in threads:
        t.join(HANG_S)
        check(not t.is_alive(), "a client never got its answer")


def report(title, outs, seconds):
    print(f"{title}: drain took {seconds:.2f} s")
    for i, o in enumerate(outs):
        print(f"  request {i + 1:2d} ({o.kind}): {o.describe()}")


def check_all(outs, ok, what):
    check(all(ok(o) for o in outs), what + ": " + "; ".join(o.describe() for o in outs if not ok(o)))


def complete(o):
    if o.broken or o.status != 200:
        return False
    if o.kind == "json":
        return isinstance(o.body, dict) and o.body.get("choices", [{}])[0].get("finish_reason") in (
            "stop", "length", "repetition")
    return o.done and not any("error" in e for e in o.events) and any(
        c.get("finish_reason") for e in o.events for c in e.get("choices", []))


def shut_down_answer(o):
    """The terminal answer of a request cut by the shutdown: 503 + Retry-After, or an error event then [DONE]."""
    if o.broken:
        return False
    if o.status == 503:
        return o.retry_after is not None and isinstance(o.body, dict) and \
            o.body.get("error", {}).get("code") == "server_shutting_down"
    if o.kind == "stream" and o.status == 200:
        errs = [e for e in o.events if "error" in e]
        return o.done and len(errs) == 1 and errs[0]["error"].get("code") == "server_shutting_down"
    return False


# --- drain: coda serve ----------------------------------------------------------------------------

def drain_serve(coda, work):
    chat = {"messages": [{"role": "user", "content": "In the beginning"}], "max_tokens": 48}

    def signal_with_16_queued(s):
        """8 streams and 8 plain requests queued in a paused coda serve, then SIGTERM; returns
        (outcomes, client threads, when the signal went)."""
        s.json("POST", "/admin/pause")
        outs, threads = launch(s.port, "/v1/chat/completions", 8, 8, lambda i: chat)
        wait_until("16 requests queued in coda serve", lambda: s.metric("coda:num_requests_waiting") == 16)
        s.proc.send_signal(signal.SIGTERM)
        return outs, threads, time.monotonic()

    # 1. Everything in flight finishes: the requests wait in a paused scheduler, the signal comes,
    #    then the operator resumes it and the drain lets them end.
    s = serve(coda, "--enable-admin-api", "--max-num-seqs", "8", "--guard", "observe")
    try:
        outs, threads, t0 = signal_with_16_queued(s)
        wait_until("/health says draining", lambda: s.request("GET", "/health")[0] == 503)
        st, hdrs, body = s.request("GET", "/health")
        check(json.loads(body).get("status") == "draining", f"/health while draining: {body!r}")
        st, hdrs, body = s.request("POST", "/v1/chat/completions", chat)
        check(st == 503 and "Retry-After" in hdrs and json.loads(body)["error"]["code"] == "server_shutting_down",
              f"a new request while draining: {st} {hdrs.get('Retry-After')} {body[:200]!r}")
        s.json("POST", "/admin/resume")
        join(threads)
        rc, err = s.finish()
        report("coda serve, SIGTERM, requests finish", outs, time.monotonic() - t0)
        check(rc == 0, f"coda serve's exit status after a drain: {rc}\n{err[-2000:]}")
        check_all(outs, complete, "a request in flight did not finish during the drain")
        check("every request in flight finished" in err, f"coda serve's drain message: {err[-500:]}")
    finally:
        s.close()

    # 2. The timeout runs out: nothing can finish (the scheduler stays paused), so everything ends
    #    with the shutdown's answer.
    s = serve(coda, "--enable-admin-api", "--max-num-seqs", "8", "--shutdown-timeout", "1")
    try:
        outs, threads, t0 = signal_with_16_queued(s)
        join(threads)
        rc, err = s.finish()
        report("coda serve, SIGTERM, --shutdown-timeout 1 runs out", outs, time.monotonic() - t0)
        check(rc == 0, f"coda serve's exit status after a timed-out drain: {rc}\n{err[-2000:]}")
        check_all(outs, shut_down_answer, "a request cut by the shutdown got no proper terminal answer")
        check(not any(o.status == 400 for o in outs), "a request cut by the shutdown got 400")
    finally:
        s.close()

    # 3. A second signal exits at once, whatever is in flight.
    s = serve(coda, "--enable-admin-api")
    try:
        s.json("POST", "/admin/pause")
        outs, threads = launch(s.port, "/v1/chat/completions", 1, 0, lambda i: chat)
        wait_until("a request queued", lambda: s.metric("coda:num_requests_waiting") == 1)
        s.proc.send_signal(signal.SIGTERM)
        wait_until("/health says draining", lambda: s.request("GET", "/health")[0] == 503)
        s.proc.send_signal(signal.SIGTERM)
        rc, _ = s.finish()
        check(rc == 128 + signal.SIGTERM, f"coda serve after a second SIGTERM: exit status {rc}, expected 143")
        join(threads)
    finally:
        s.close()


# --- drain: coda proxy ----------------------------------------------------------------------------

def drain_proxy(coda, work):
    up = scripted()
    try:
        # 1. The generations finish during the drain (each paced, 12 tokens at 100 ms).
        px = proxy(coda, up.port, "--shutdown-timeout", "120")
        try:
            before = upstream_stats(up)
            outs, threads = launch(px.port, "/v1/completions", 8, 8,
                                   lambda i: {"prompt": f"[pace:100] [tag:r{i}] go", "max_tokens": 64})
            wait_until("16 generations open upstream",
                       lambda: upstream_stats(up)["requests"] - before["requests"] == 16 and
                       upstream_stats(up)["open"] == 16)
            t0 = time.monotonic()
            px.proc.send_signal(signal.SIGTERM)
            wait_until("the proxy's /health says draining", lambda: px.request("GET", "/health")[0] == 503)
            st, hdrs, body = px.request("POST", "/v1/completions", {"prompt": "[text] late", "max_tokens": 8})
            check(st == 503 and "Retry-After" in hdrs, f"a new request while the proxy drains: {st} {body[:200]!r}")
            join(threads)
            rc, err = px.finish()
            after = upstream_stats(up)
            report("coda proxy, SIGTERM, requests finish", outs, time.monotonic() - t0)
            print(f"  upstream: {after['completed'] - before['completed']} generations completed, "
                  f"{after['cancelled'] - before['cancelled']} cancelled")
            check(rc == 0, f"coda proxy's exit status after a drain: {rc}\n{err[-2000:]}")
            check_all(outs, complete, "a request through the proxy did not finish during the drain")
            check(after["cancelled"] == before["cancelled"], "the drain cancelled a generation it should have let finish")
        finally:
            px.close()

        # 2. The timeout runs out: the streams hang after five tokens, the others before any; every
        #    upstream generation is cancelled and every client gets its terminal answer.
        px = proxy(coda, up.port, "--shutdown-timeout", "1")
        try:
            before = upstream_stats(up)
            outs, threads = launch(px.port, "/v1/completions", 8, 8,
                                   lambda i: {"prompt": "[hang-mid] go" if i < 8 else "[hang-first] go",
                                              "max_tokens": 64})
            wait_until("16 requests upstream", lambda: upstream_stats(up)["requests"] - before["requests"] == 16)
            # The streams have their first text before the signal (a started stream ends with an event).
            wait_until("8 streams started", lambda: all(o.status == 200 for o in outs[:8]))
            t0 = time.monotonic()
            px.proc.send_signal(signal.SIGTERM)
            join(threads)
            rc, err = px.finish()
            took = time.monotonic() - t0
            wait_until("the upstream saw 16 cancellations",
                       lambda: upstream_stats(up)["cancelled"] - before["cancelled"] == 16)
            after = upstream_stats(up)
            report("coda proxy, SIGTERM, --shutdown-timeout 1 runs out", outs, took)
            print(f"  upstream: {after['cancelled'] - before['cancelled']} of 16 generations cancelled")
            check(rc == 0, f"coda proxy's exit status after a timed-out drain: {rc}\n{err[-2000:]}")
            check_all(outs, shut_down_answer, "a request the proxy cut at shutdown got no proper terminal answer")
        finally:
            px.close()
    finally:
        up.close()

    # 3. In front of coda serve, whose scheduler holds the 16 requests queued (paused): first the
    #    drain lets them finish once it is resumed; then, with the timeout run out, each upstream
    #    request is cancelled, which coda serve counts as an abort as soon as it notices, paused.
    chat = {"messages": [{"role": "user", "content": "In the beginning"}], "max_tokens": 48}
    s = serve(coda, "--enable-admin-api", "--max-num-seqs", "8", "--guard", "observe")
    try:
        for timeout, resume_during in (("120", True), ("1", False)):
            s.json("POST", "/admin/pause")
            waiting0 = s.metric("coda:num_requests_waiting")
            aborts0 = s.metric('coda:request_success_total{finished_reason="abort"}')
            sockets0 = tp.socket_count(s.proc.pid)
            px = proxy(coda, s.port, "--shutdown-timeout", timeout, "--guard", "observe")
            try:
                outs, threads = launch(px.port, "/v1/chat/completions", 8, 8, lambda i: chat)
                wait_until("16 requests queued in coda serve behind the proxy",
                           lambda: s.metric("coda:num_requests_waiting") == waiting0 + 16)
                t0 = time.monotonic()
                px.proc.send_signal(signal.SIGTERM)
                if resume_during:
                    wait_until("the proxy's /health says draining", lambda: px.request("GET", "/health")[0] == 503)
                    s.json("POST", "/admin/resume")
                join(threads)
                rc, err = px.finish()
                took = time.monotonic() - t0
                check(rc == 0, f"coda proxy's exit status: {rc}\n{err[-2000:]}")
                if resume_during:
                    report("coda proxy in front of coda serve, SIGTERM, requests finish", outs, took)
                    check_all(outs, complete, "a request through the proxy did not finish")
                else:
                    # coda serve notices each closed connection at its next keep-alive write, and
                    # drops the queued request at once, paused as it is, counting an abort: all 16
                    # before anything is resumed (a request resumed before its client's departure was
                    # noticed would run to its end).
                    wait_until("coda serve counts the 16 cancelled requests as aborts, while paused",
                               lambda: s.metric('coda:request_success_total{finished_reason="abort"}') == aborts0 + 16)
                    check(s.metric("coda:num_requests_waiting") == waiting0,
                          "coda serve still holds a dropped request in its queue")
                    wait_until("coda serve has closed the proxy's 16 connections",
                               lambda: tp.socket_count(s.proc.pid) <= sockets0)
                    s.json("POST", "/admin/resume")
                    report("coda proxy in front of coda serve, SIGTERM, --shutdown-timeout 1 runs out", outs, took)
                    aborted = s.metric('coda:request_success_total{finished_reason="abort"}') - aborts0
                    print(f"  coda serve: {aborted:.0f} of 16 requests aborted (their client, the proxy, had gone)")
                    check_all(outs, shut_down_answer, "a request cut at the proxy's shutdown")
            finally:
                px.close()
        s.json("POST", "/admin/resume")
    finally:
        s.close()


# --- bounded labels -------------------------------------------------------------------------------

def rss_kib(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def made_up_models(port, n, rng, headers=None, clients=8):
    """`n` short completions, each naming a new random 1 KB model, from `clients` keep-alive clients
    at once; returns the statuses that were not 200."""
    lock = threading.Lock()
    left = iter(range(n))
    bad = []

    def client():
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=HANG_S)
        while True:
            with lock:
                if next(left, None) is None:
                    break
                name = "".join(rng.choice(string.ascii_letters) for _ in range(1024))
            body = json.dumps({"model": name, "prompt": "[text] hi", "max_tokens": 4}).encode()
            c.request("POST", "/v1/completions", body=body, headers={"Content-Type": "application/json",
                                                                     **(headers or {})})
            r = c.getresponse()
            r.read()
            if r.status != 200:
                bad.append(r.status)
        c.close()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return bad


def labels(coda, work, n=10000):
    up = scripted()
    px = proxy(coda, up.port, "--api-key", "k-labels", "--metrics-auth")
    try:
        auth = {"Authorization": "Bearer k-labels"}
        st, _, _ = px.request("GET", "/metrics")
        check(st == 401, f"/metrics without the key under --metrics-auth: {st}")
        st, _, _ = px.request("GET", "/health")
        check(st == 200, f"/health stays open under --api-key: {st}")
        st, _, _ = px.request("GET", "/v1/health")
        check(st == 200, f"/v1/health is not behind the key: {st}")
        st, _, _ = px.request("POST", "/v1/completions", {"model": "scripted", "prompt": "[text] hi"}, auth)
        check(st == 200, f"a request for the served model: {st}")
        rss0 = rss_kib(px.proc.pid)
        t0 = time.monotonic()
        bad = made_up_models(px.port, n, random.Random(62), auth)
        st, _, raw = px.request("GET", "/metrics", headers=auth)
        rss1 = rss_kib(px.proc.pid)
        print(f"labels: {n} requests with random 1 KB model names in {time.monotonic() - t0:.1f} s: /metrics "
              f"{len(raw)} bytes, proxy RSS {rss0 // 1024} -> {rss1 // 1024} MiB")
        check(not bad, f"{len(bad)} of the {n} requests failed: {sorted(set(bad))}")
        check(st == 200 and len(raw) < 64 * 1024, f"/metrics after {n} model names: {len(raw)} bytes (at most 64 KiB)")
        text = raw.decode()
        check('model="scripted"' in text and 'model="other"' in text,
              "the served model keeps its label and the made-up ones count as other")
        longest = max((len(v) for line in text.splitlines() for v in line.split('"')[1::2]), default=0)
        check(longest <= 128, f"a label value of {longest} bytes")
    finally:
        px.close()
        up.close()


# --- a torn study file ----------------------------------------------------------------------------

def torn_journal(coda, work):
    study = os.path.join(work, "torn-study.jsonl")
    if os.path.exists(study):
        os.remove(study)
    # The in-process engine on the bundled model, so that a trial takes real time (milliseconds),
    # far more than the microseconds between two time stamps taken together.
    model = os.environ.get("CODA_MODEL", os.path.join(HERE, "..", "..", "models", "coda-tiny-en-it-f16.gguf"))
    tune = [coda, "tune", "-m", model, "-t", "1", "--requests", "2", "-n", "8", "--rate", "6000", "--phase2-top", "0",
            "--tune-seed", "5", "--study", study]
    r = subprocess.run(tune + ["--trials", "2", "-o", os.path.join(work, "torn-1")], capture_output=True, text=True,
                       timeout=HANG_S)
    check(r.returncode == 0, f"coda tune, 2 trials: {r.returncode} {r.stderr[-1500:]}")
    raw = open(study, "rb").read()
    check(raw.endswith(b"\n"), "the study file ends with a whole line")
    with open(study, "wb") as f:  # a crash mid-write: the last line loses its end
        f.write(raw[:-17])
    r = subprocess.run(tune + ["--trials", "3", "-o", os.path.join(work, "torn-2")], capture_output=True, text=True,
                       timeout=HANG_S)
    check(r.returncode == 0, f"coda tune resumed on a torn study: {r.returncode} {r.stderr[-1500:]}")
    check("cut short by an interrupted write" in r.stderr, f"the repair is logged: {r.stderr[-800:]}")
    lines = open(study, "rb").read().splitlines()
    for n, line in enumerate(lines):
        try:
            json.loads(line)
        except ValueError:
            check(False, f"line {n + 1} of the repaired study is not JSON: {line[:120]!r}")
    # Optuna loads it: the reference reader of its own format.
    script = ("import optuna,sys\n"
              "from optuna.storages import JournalStorage\n"
              "try:\n from optuna.storages.journal import JournalFileBackend as B\n"
              "except ImportError:\n from optuna.storages import JournalFileStorage as B\n"
              "s=optuna.load_study(study_name=None,storage=JournalStorage(B(sys.argv[1])))\n"
              "ok=sorted((t for t in s.trials if t.state.name=='COMPLETE'),key=lambda t:t.datetime_complete)\n"
              "d=[(t.datetime_complete-t.datetime_start).total_seconds() for t in ok]\n"
              "g=[(b.datetime_complete-a.datetime_complete).total_seconds() for a,b in zip(ok,ok[1:])]\n"
              "print(len(ok), min(d), max(x/y for x,y in zip(d[1:],g)))\n")
    r = subprocess.run(["/usr/bin/python3", "-c", script, study], capture_output=True, text=True, timeout=HANG_S)
    check(r.returncode == 0, f"Optuna loads the repaired study: {r.stderr[-1500:]}")
    if r.returncode == 0:
        complete_n, shortest, share = r.stdout.split()
        print(f"torn journal: repaired; Optuna loads {complete_n} complete trials; shortest duration {shortest} s; "
              f"a trial's duration is up to {float(share):.0%} of the time since the previous one completed")
        check(int(complete_n) >= 3, f"complete trials after the resume: {complete_n}")
        # Each trial's start is when its evaluation began: within one run its duration is most of the
        # time between two completions (the rest is the sampler's proposal; the pair across the resume
        # also holds the restart). Stamped at completion, every duration was about 0.
        check(float(share) > 0.5, f"a trial's recorded duration is {float(share):.1%} of the time it took")


# --- an upstream that answers without a choice ----------------------------------------------------

def empty_upstream(coda, work):
    up = scripted()
    px = proxy(coda, up.port)
    try:
        for marker in ("[no-choice]", "[empty-choices]"):
            for chat in (False, True):
                path = "/v1/chat/completions" if chat else "/v1/completions"
                for stream in (False, True):
                    body = {"messages": [{"role": "user", "content": marker}]} if chat else {"prompt": marker}
                    body.update(stream=stream, max_tokens=8)
                    st, _, raw = px.request("POST", path, body)
                    code = None
                    try:
                        code = json.loads(raw)["error"]["code"]
                    except (ValueError, KeyError, TypeError):
                        pass
                    check(st == 502 and code == "bad_upstream_response",
                          f"{marker} {path} stream={stream}: {st} {raw[:200]!r}")
        # The 502's code says which failure it was: reset after the connection was accepted, or refused.
        st, _, raw = px.request("POST", "/v1/completions", {"prompt": "[drop] x", "max_tokens": 8})
        check(st == 502 and json.loads(raw)["error"]["code"] == "upstream_connection_reset",
              f"an upstream that drops the connection mid-answer: {st} {raw[:200]!r}")
        dead = socket.socket()
        dead.bind(("127.0.0.1", 0))
        port = dead.getsockname()[1]
        dead.close()  # nothing listens there now
        px2 = proxy(coda, port)
        try:
            st, _, raw = px2.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 8})
            check(st == 502 and json.loads(raw)["error"]["code"] == "upstream_unreachable",
                  f"an upstream that refuses the connection: {st} {raw[:200]!r}")
        finally:
            px2.close()
    finally:
        px.close()
        up.close()


# --- secrets --------------------------------------------------------------------------------------

def secrets(coda, work):
    key = "sk-planted-client-key-5f1e"
    upkey = "sk-planted-upstream-key-9a3c"
    password = "planted-password-77b2"
    keyfile = os.path.join(work, "upstream.key")
    with open(keyfile, "w") as f:
        f.write(upkey + "\n")
    os.chmod(keyfile, 0o600)
    planted = (key, upkey, password)
    seen = []

    def scan(where, text):
        if isinstance(text, bytes):
            text = text.decode("utf-8", "replace")
        for s in planted:
            if s in text:
                seen.append(f"{s} in {where}")

    # Credentials in the upstream URL are refused, and the refusal does not repeat them.
    r = subprocess.run([coda, "proxy", "--upstream", f"http://user:{password}@127.0.0.1:9", "--port", "0"],
                       capture_output=True, text=True, timeout=HANG_S)
    check(r.returncode != 0 and "--upstream-api-key-file" in r.stderr, f"an --upstream URL with credentials: {r.stderr}")
    scan("the refusal of a URL with credentials", r.stdout + r.stderr)

    up = scripted()
    px = proxy(coda, up.port, "--api-key", key, "--upstream-api-key-file", keyfile)
    try:
        auth = {"Authorization": f"Bearer {key}"}
        for method, path, body, hdrs in [
                ("GET", "/health", None, {}),
                ("GET", "/metrics", None, {}),
                ("POST", "/v1/completions", {"prompt": "[text] hi"}, auth),
                ("POST", "/v1/completions", {"prompt": "[text] hi"}, {"Authorization": f"Bearer {key}x"}),
                ("POST", "/v1/completions", {"prompt": "[error500] hi"}, auth),
                ("POST", "/v1/completions", {"prompt": "[malformed] hi", "stream": True}, auth),
                ("POST", "/v1/completions", {"prompt": "[no-choice] hi"}, auth),
                ("POST", "/v1/completions", {"prompt": "x", "max_tokens": "lots"}, auth),
                ("POST", "/v1/nope", {"x": 1}, auth),
                ("GET", "/v1/models", None, auth),
                ("GET", "/slots", None, auth)]:
            st, h, raw = px.request(method, path, body, hdrs)
            scan(f"{method} {path} (HTTP {st})", raw)
            scan(f"{method} {path} headers", json.dumps(h))
        sent = up.json("GET", "/last-authorizations")[2]
        check(f"Bearer {upkey}" in sent, "the upstream key is sent upstream")
    finally:
        px.close()
        out, err = px.proc.communicate()
        scan("the proxy's stdout", out or "")
        scan("the proxy's stderr", err or "")
        up.close()
    # coda serve with the same planted client key.
    s = serve(coda, "--api-key", key)
    try:
        auth = {"Authorization": f"Bearer {key}"}
        for method, path, body, hdrs in [
                ("GET", "/health", None, {}),
                ("GET", "/metrics", None, {}),
                ("POST", "/v1/completions", {"prompt": "Hi", "max_tokens": 2}, auth),
                ("POST", "/v1/completions", {"prompt": "Hi"}, {"Authorization": f"Bearer {key}x"}),
                ("POST", "/v1/completions", {"prompt": "Hi", "temperature": 9}, auth),
                ("GET", "/v1/nope", None, auth),
                ("GET", "/slots", None, auth)]:
            st, h, raw = s.request(method, path, body, hdrs)
            scan(f"coda serve {method} {path} (HTTP {st})", raw)
            scan(f"coda serve {method} {path} headers", json.dumps(h))
    finally:
        s.proc.terminate()
        out, err = s.proc.communicate()
        scan("coda serve's stdout", out or "")
        scan("coda serve's stderr", err or "")
    check(not seen, "a planted secret appeared: " + "; ".join(seen))


# --- paths ----------------------------------------------------------------------------------------

def raw_request(port, method, target):
    """A request with its target written as given (http.client would not send some of these)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=HANG_S)
    body = b'{"x": 1}' if method == "POST" else b""
    s.sendall(f"{method} {target} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body)
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            break
        data += chunk
    s.close()
    head, _, rest = data.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    try:
        return status, json.loads(rest)
    except ValueError:
        return status, rest


def paths(coda, work):
    up = scripted()
    px = proxy(coda, up.port)
    try:
        for target in ["/v1/%2e%2e/admin/pause", "/v1/../admin/pause", "/v1/./x", "/v1/a%2fb", "/v1/a%2Fb",
                       "/v1/a%5cb", "/v1/x/%2E%2E/y"]:
            for method in ("GET", "POST"):
                st, body = raw_request(px.port, method, target)
                check(st == 400, f"{method} {target} through the pass-through: {st} {str(body)[:160]}")
        for target in ["/v1/echo-path/a%20b?x=1&y=%2F", "/v1/echo-path?q=a%2e%2e"]:
            for method in ("GET", "POST"):
                st, body = raw_request(px.port, method, target)
                check(st == 200 and isinstance(body, dict) and body.get("target") == target,
                      f"{method} {target} reached the upstream as {body}")
    finally:
        px.close()
        up.close()


# --- fields the proxy forwards --------------------------------------------------------------------

def fields(coda, work):
    up = scripted()
    px = proxy(coda, up.port)
    try:
        before = upstream_stats(up)["requests"]
        for body, param in [({"prompt": "x", "max_tokens": "lots"}, "max_tokens"),
                            ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
                            ({"prompt": "x", "temperature": 9}, "temperature"),
                            ({"prompt": "x", "top_p": "high"}, "top_p"),
                            ({"prompt": "x", "stop": [1, 2]}, "stop"),
                            ({"prompt": "x", "logprobs": 99}, "logprobs"),
                            ({"prompt": "x", "seed": 1.5}, "seed")]:
            st, _, raw = px.request("POST", "/v1/completions", body)
            err = json.loads(raw).get("error", {})
            check(st == 400 and err.get("param") == param, f"{body}: {st} {raw[:200]!r}")
        check(upstream_stats(up)["requests"] == before, "a malformed field reached the upstream")
        st, _, raw = px.request("POST", "/v1/completions", {"prompt": "[text] x", "max_tokens": 8,
                                                            "some_engine_field": {"a": 1}})
        check(st == 200, f"an unknown field passes on: {st} {raw[:200]!r}")
        check(up.json("GET", "/last-bodies")[2][-1].get("some_engine_field") == {"a": 1},
              "the unknown field reached the upstream untouched")
    finally:
        px.close()
        up.close()


CASES = {"drain_serve": drain_serve, "drain_proxy": drain_proxy, "labels": labels, "torn_journal": torn_journal,
         "empty_upstream": empty_upstream, "secrets": secrets, "paths": paths, "fields": fields}


def main():
    coda, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    names = sys.argv[3:] or list(CASES)
    for name in names:
        t0 = time.monotonic()
        n0 = len(ts.failures)
        CASES[name](coda, work)
        print(f"{name}: {'ok' if len(ts.failures) == n0 else 'FAILED'} ({time.monotonic() - t0:.1f} s)", flush=True)
    if ts.failures:
        print(f"{len(ts.failures)} failure(s)")
        sys.exit(1)
    print("all fault cases passed")


if __name__ == "__main__":
    main()
