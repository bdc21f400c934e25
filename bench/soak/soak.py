#!/usr/bin/env python3
"""Soak driver for a running Tandem cluster (bench/soak/run.sh starts one with deploy/cluster.sh).

Drives the router at a steady concurrency with a deterministic mix of requests and checks every
answer:

  normal       greedy /v1/completions (streamed or not) over fixed token-id prompts; the text must
               equal the reference captured for that prompt before the load starts (twice through
               the cluster, and equal to the single-process tandem-generate with --generate), with
               finish_reason "length" and exactly max_tokens completion tokens
  cancelled    streamed; the client closes the connection after k < max_tokens chunks; what
               arrived must be a prefix of the reference (or, if the server finished first, all of it)
  timeout_http streamed with a client deadline far below the request's run time; the client gives
               up at the deadline; what arrived must be a prefix of the reference
  timeout_grpc the `tandem` CLI over gRPC with --timeout_ms (a gRPC deadline the router and nodes
               see); it must fail with DEADLINE_EXCEEDED (or finish identical to the reference),
               its text a prefix of the reference
  invalid      out-of-vocabulary token id, max_tokens 0, unknown model, prompt + max_tokens beyond
               the context, n = 2, malformed JSON: each must get its precise HTTP status and message

Every 10 s (--sample_s) it samples each process of the cluster (the pid files in --run_dir): RSS,
open fds and threads from /proc, and from the /metrics endpoints the nodes' KV blocks in use,
leases, running and waiting requests and the router's running requests and outcome counters.

Verdict (exit 1 on any failure, each printed as "FAIL: ..."):
  * every answer checked as above; every request sent is accounted for (one outcome each), and the
    router's success + failure counters grew by exactly the number of requests that reached it
    (timed-out requests that got no answer may not have reached it, and may be counted or not);
  * once the load stops the cluster is idle within 60 s: zero KV blocks in use, zero leases, nothing
    running or waiting on every node, nothing running in the router;
  * no lease expired, except those explained by a known race (docs/RELIABILITY.md, "Soak"): a
    prefill that succeeded for a request the router logged as cancelled before its first token
    (its Prefill call was cancelled while the answer was on its way) — counted from the logs;
  * a warm-up load (--warmup_s or --warmup_requests) comes first; then the cluster must be idle and
    its idle baseline is taken, and the main load (--minutes or --requests) follows;
  * each process's open fds and threads at the end (idle) are at most their idle baseline plus
    --fd_slack / --thread_slack (default 4: connection and thread-pool jitter, see below);
  * RSS: the median RSS of the last third of the main phase's samples may exceed the median of
    its first third by at most max(--rss_slack_mb MiB, --rss_slack_pct %) (judged when the main
    phase has at least 9 samples, i.e. runs of 90 s or more at the default --sample_s).
"""

import argparse
import csv
import json
import os
import random
import re
import statistics
import subprocess
import sys
import threading
import time

import httpx

KINDS = ("normal", "normal_nostream", "cancelled", "timeout_http", "timeout_grpc", "invalid")
# Out of 100 requests: how many of each kind.
MIX = {"normal": 45, "normal_nostream": 10, "cancelled": 17, "timeout_http": 8,
       "timeout_grpc": 8, "invalid": 12}
INVALID_VARIANTS = ("vocab", "max_tokens", "model", "context", "n", "json")
# Invalid requests the router does not count in its outcome counters (tandem_request_*_total):
# none since 3fa859c — the HTTP front end's own refusals (parse errors, unsupported parameters,
# an unknown model) count as failures by code there too.
NOT_COUNTED_BY_ROUTER = ()


def log(msg):
    print(f"[soak {time.strftime('%H:%M:%S', time.gmtime())}] {msg}", flush=True)


# ---- prompts ----------------------------------------------------------------------------------

def make_prompts(vocab, seed):
    """Short prompts (normal, cancelled) and long-running ones (timeouts)."""
    rng = random.Random(seed)
    short = []
    for i in range(12):
        n = 4 + (i * 37) % 90
        short.append(([3 + rng.randrange(vocab - 3) for _ in range(n)], 8 + (i * 5) % 25))
    long = []
    for i in range(3):
        n = 16 + i * 40
        long.append(([3 + rng.randrange(vocab - 3) for _ in range(n)], 240))
    return short, long


# ---- the cluster's processes and metrics --------------------------------------------------------

class Cluster:
    def __init__(self, run_dir):
        self.run_dir = run_dir
        self.processes = {}  # name -> pid
        for f in sorted(os.listdir(run_dir)):
            if f.endswith(".pid"):
                with open(os.path.join(run_dir, f)) as fh:
                    self.processes[f[:-4]] = int(fh.read().split()[0])
        if "router" not in self.processes:
            raise SystemExit(f"no router.pid in {run_dir}")
        self.metrics_urls = {}
        for name in self.processes:
            port_file = os.path.join(run_dir, "router.http_port" if name == "router"
                                     else f"{name}.metrics_port")
            with open(port_file) as fh:
                self.metrics_urls[name] = f"http://127.0.0.1:{int(fh.read())}/metrics"
        with open(os.path.join(run_dir, "router.addr")) as fh:
            self.router_grpc = fh.read().strip()
        with open(os.path.join(run_dir, "router.http_port")) as fh:
            self.router_http = f"http://127.0.0.1:{int(fh.read())}"

    @staticmethod
    def proc_sample(pid):
        out = {"rss_kb": -1, "fds": -1, "threads": -1}
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmRSS:"):
                        out["rss_kb"] = int(line.split()[1])
                    elif line.startswith("Threads:"):
                        out["threads"] = int(line.split()[1])
            targets = []
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    targets.append(re.sub(r"\[\d+\]$", "[]", os.readlink(f"/proc/{pid}/fd/{fd}")))
                except OSError:
                    pass  # closed between listdir and readlink
            out["fds"] = len(targets)
            out["fd_kinds"] = targets
        except (FileNotFoundError, ProcessLookupError):
            pass
        return out

    def metrics(self, client, name):
        """Sums of each metric over its label sets, e.g. {"tandem_kv_blocks_used": 0.0, ...}."""
        text = client.get(self.metrics_urls[name], timeout=5).text
        values = {}
        for line in text.splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([^}]*)\})?\s+(\S+)", line)
            if not m:
                continue
            metric, labels, value = m.group(1), m.group(3) or "", float(m.group(4))
            if metric == "tandem_kv_blocks_used":
                # Every rank pool has the same count: keep the largest, not the sum.
                values[metric] = max(values.get(metric, 0.0), value)
                continue
            values[metric] = values.get(metric, 0.0) + value
            if metric == "tandem_request_failure_total":
                code = re.search(r'code="([^"]*)"', labels)
                key = f"failure[{code.group(1) if code else '?'}]"
                values[key] = values.get(key, 0.0) + value
        return values

    def sample(self, client):
        rows = {}
        for name, pid in self.processes.items():
            row = self.proc_sample(pid)
            try:
                m = self.metrics(client, name)
            except httpx.HTTPError as e:
                m = {"error": str(e)}
            row["metrics"] = m
            rows[name] = row
        return rows


def idle_problems(sample):
    """What keeps the cluster from being idle in one sample (empty list: idle)."""
    problems = []
    for name, row in sample.items():
        m = row["metrics"]
        if "error" in m:
            problems.append(f"{name}: metrics unreadable ({m['error']})")
            continue
        if name == "router":
            keys = ("tandem_num_requests_running",)
        else:
            keys = ("tandem_kv_blocks_used", "tandem_num_requests_running",
                    "tandem_num_requests_waiting")
            if name.startswith("prefill"):
                keys += ("tandem_kv_leases_active",)
        for k in keys:
            if m.get(k, 0.0) != 0.0:
                problems.append(f"{name}: {k}={m.get(k):g}")
    return problems


def router_total(sample):
    m = sample["router"]["metrics"]
    return m.get("tandem_request_success_total", 0.0) + m.get("tandem_request_failure_total", 0.0)


def expired_total(sample):
    return sum(r["metrics"].get("tandem_kv_leases_expired_total", 0.0)
               for n, r in sample.items() if n.startswith("prefill"))


# ---- requests ---------------------------------------------------------------------------------

class Driver:
    def __init__(self, args, cluster, model_name):
        self.args = args
        self.cluster = cluster
        self.model = model_name
        self.short, self.long = make_prompts(args.vocab, args.seed)
        self.ref = {}  # ("short"|"long", index) -> text
        self.lock = threading.Lock()
        self.counts = {k: {} for k in KINDS}  # kind -> outcome -> n
        self.failures = []
        self.sent = 0
        self.answered = 0
        self.reaching_router = 0
        self.maybe_reaching_router = 0  # timed out before any answer: the router may not know them
        self.next_index = 0  # request numbers (they pick the kind); run_load's lock guards it

    def completion_body(self, prompt, max_tokens, stream, **extra):
        body = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                "temperature": 0, "ignore_eos": True, "stream": stream}
        if stream:
            body["stream_options"] = {"include_usage": True}
        body.update(extra)
        return body

    def stream(self, client, body, stop_after_chunks=None, deadline_s=None):
        """Streams one completion. Returns (text, finish_reason, completion_tokens, ended_how)
        where ended_how is "done", "cancelled" (closed after stop_after_chunks) or "deadline"."""
        url = self.cluster.router_http + "/v1/completions"
        text, finish, usage, chunks = "", None, None, 0
        start = time.monotonic()
        timeout = httpx.Timeout(deadline_s if deadline_s is not None else self.args.request_timeout_s)
        try:
            with client.stream("POST", url, json=body, timeout=timeout) as r:
                if r.status_code != 200:
                    r.read()
                    raise CheckFailure(f"HTTP {r.status_code}: {r.text[:300]}")
                for line in r.iter_lines():
                    if deadline_s is not None and time.monotonic() - start > deadline_s:
                        return text, finish, usage, "deadline"
                    if not line.startswith("data: "):
                        continue
                    data = line[len("data: "):]
                    if data == "[DONE]":
                        return text, finish, usage, "done"
                    event = json.loads(data)
                    if "error" in event:
                        raise CheckFailure(f"error event mid-stream: {event['error']}")
                    if event.get("usage"):
                        usage = event["usage"]["completion_tokens"]
                    for choice in event.get("choices", []):
                        text += choice.get("text", "")
                        if choice.get("finish_reason"):
                            finish = choice["finish_reason"]
                    if event.get("choices"):
                        chunks += 1
                        if stop_after_chunks is not None and chunks >= stop_after_chunks:
                            return text, finish, usage, "cancelled"
        except httpx.TimeoutException:
            if deadline_s is not None:
                return text, finish, usage, "deadline"
            raise
        raise CheckFailure("stream ended without [DONE]")

    def capture_references(self, client):
        for group, prompts in (("short", self.short), ("long", self.long)):
            for i, (prompt, max_tokens) in enumerate(prompts):
                text, finish, usage, how = self.stream(
                    client, self.completion_body(prompt, max_tokens, True))
                if how != "done" or finish != "length" or usage != max_tokens:
                    raise SystemExit(f"reference {group}[{i}]: ended {how}, finish {finish}, "
                                     f"{usage} tokens (want length, {max_tokens})")
                # The same prompt again must give the same text (greedy is deterministic; the
                # second run may be served from a prefix cache).
                again = self.stream(client, self.completion_body(prompt, max_tokens, True))[0]
                if again != text:
                    raise SystemExit(f"reference {group}[{i}] differs between two runs: {text!r} "
                                     f"then {again!r}")
                if self.args.generate:
                    single = self.single_process(prompt, max_tokens)
                    if single.rstrip("\n") != text.rstrip("\n"):
                        raise SystemExit(f"reference {group}[{i}] differs from the single-process "
                                         f"tandem-generate: {text!r} vs {single!r}")
                self.ref[(group, i)] = text

    def single_process(self, prompt, max_tokens):
        """Greedy text of one prompt from tandem-generate (one process, no transfer)."""
        r = subprocess.run([self.args.generate, f"--model={self.args.model}",
                            "--prompt_ids=" + ",".join(map(str, prompt)),
                            f"--max_tokens={max_tokens}", "--ignore_eos"],
                           capture_output=True, timeout=self.args.request_timeout_s)
        if r.returncode != 0:
            raise SystemExit(f"tandem-generate failed: {r.stderr.decode()[-300:]}")
        return r.stdout.decode("utf-8", "replace")

    def record(self, kind, outcome, failure=None, reaches_router=True):
        """reaches_router: True, False, or "maybe" (a deadline that passed before any answer)."""
        with self.lock:
            self.answered += 1
            self.counts[kind][outcome] = self.counts[kind].get(outcome, 0) + 1
            if reaches_router == "maybe":
                self.maybe_reaching_router += 1
            elif reaches_router:
                self.reaching_router += 1
            if failure is not None:
                self.failures.append(failure)
                if len(self.failures) <= 20:
                    log(f"FAIL: {failure}")

    def one(self, client, i, rng):
        kind = pick_kind(i)
        with self.lock:
            self.sent += 1
        try:
            getattr(self, "do_" + kind)(client, i, rng)
        except CheckFailure as e:
            self.record(kind, "wrong", f"request {i} ({kind}): {e}")
        except Exception as e:  # noqa: BLE001 - any transport error is a failed request
            self.record(kind, "error", f"request {i} ({kind}): {type(e).__name__}: {e}")

    def do_normal(self, client, i, rng, stream=True):
        p = rng.randrange(len(self.short))
        prompt, max_tokens = self.short[p]
        kind = "normal" if stream else "normal_nostream"
        if stream:
            text, finish, usage, _ = self.stream(client, self.completion_body(prompt, max_tokens, True))
        else:
            r = client.post(self.cluster.router_http + "/v1/completions",
                            json=self.completion_body(prompt, max_tokens, False),
                            timeout=self.args.request_timeout_s)
            if r.status_code != 200:
                raise CheckFailure(f"HTTP {r.status_code}: {r.text[:300]}")
            j = r.json()
            text = j["choices"][0]["text"]
            finish = j["choices"][0]["finish_reason"]
            usage = j["usage"]["completion_tokens"]
        if text != self.ref[("short", p)]:
            raise CheckFailure(f"prompt {p}: text {text!r} differs from the reference "
                               f"{self.ref[('short', p)]!r}")
        if finish != "length" or usage != max_tokens:
            raise CheckFailure(f"prompt {p}: finish {finish}, {usage} tokens (want length, {max_tokens})")
        self.record(kind, "ok")

    def do_normal_nostream(self, client, i, rng):
        self.do_normal(client, i, rng, stream=False)

    def do_cancelled(self, client, i, rng):
        p = rng.randrange(len(self.short))
        prompt, max_tokens = self.short[p]
        k = rng.randrange(1, max_tokens)
        text, _, _, how = self.stream(client, self.completion_body(prompt, max_tokens, True),
                                      stop_after_chunks=k)
        ref = self.ref[("short", p)]
        if how == "done":
            if text != ref:
                raise CheckFailure(f"prompt {p}: finished with text differing from the reference")
            self.record("cancelled", "finished_first")
            return
        if not ref.startswith(text):
            raise CheckFailure(f"prompt {p}: text before the cancel {text!r} is not a prefix of "
                               f"the reference")
        self.record("cancelled", "cancelled")

    def do_timeout_http(self, client, i, rng):
        p = rng.randrange(len(self.long))
        prompt, max_tokens = self.long[p]
        text, _, _, how = self.stream(client, self.completion_body(prompt, max_tokens, True),
                                      deadline_s=self.args.timeout_ms / 1000.0)
        ref = self.ref[("long", p)]
        if how == "done":
            if text != ref:
                raise CheckFailure(f"long prompt {p}: finished before the deadline with wrong text")
            self.record("timeout_http", "finished_first")
            return
        if not ref.startswith(text):
            raise CheckFailure(f"long prompt {p}: text before the deadline is not a prefix")
        self.record("timeout_http", "timed_out", reaches_router=True if text else "maybe")

    def do_timeout_grpc(self, client, i, rng):
        p = rng.randrange(len(self.long))
        prompt, max_tokens = self.long[p]
        cmd = [self.args.cli, "generate", f"--router={self.cluster.router_grpc}",
               "--prompt_ids=" + ",".join(map(str, prompt)), f"--max_tokens={max_tokens}",
               "--ignore_eos", "--temperature=0", f"--timeout_ms={self.args.timeout_ms}"]
        r = subprocess.run(cmd, capture_output=True, timeout=self.args.request_timeout_s)
        text = r.stdout.decode("utf-8", "replace").rstrip("\n")
        err = r.stderr.decode("utf-8", "replace")
        ref = self.ref[("long", p)]
        if r.returncode == 0:
            if text != ref.rstrip("\n"):
                raise CheckFailure(f"long prompt {p}: gRPC request finished with wrong text")
            self.record("timeout_grpc", "finished_first")
            return
        if "error: DEADLINE_EXCEEDED" not in err:
            raise CheckFailure(f"long prompt {p}: CLI exit {r.returncode}, want DEADLINE_EXCEEDED: "
                               f"{err.strip()[-300:]}")
        if not ref.startswith(text):
            raise CheckFailure(f"long prompt {p}: gRPC text before the deadline is not a prefix")
        self.record("timeout_grpc", "deadline_exceeded", reaches_router=True if text else "maybe")

    def do_invalid(self, client, i, rng):
        variant = INVALID_VARIANTS[(i // 100 + i) % len(INVALID_VARIANTS)]
        vocab, context = self.args.vocab, self.args.context
        url = self.cluster.router_http + "/v1/completions"
        prompt = [5, 7, 11, 13, 17, 19, 23, 29, 31, 37]
        if variant == "vocab":
            body = self.completion_body([5, 7, vocab + 3], 4, False)
            want = (400, f"prompt token id {vocab + 3} at position 2 is outside the vocabulary "
                         f"[0, {vocab})")
        elif variant == "max_tokens":
            body = self.completion_body(prompt, 0, False)
            want = (400, "max_tokens must be >= 1 (got 0)")
        elif variant == "model":
            body = self.completion_body(prompt, 4, False, model="no-such-model")
            want = (404, f"model 'no-such-model' is not served here; this router serves "
                         f"'{self.model}'")
        elif variant == "context":
            body = self.completion_body(prompt, context, False)
            want = (400, f"prompt ({len(prompt)} tokens) + max_tokens ({context}) = "
                         f"{len(prompt) + context} exceeds the model's context length {context}")
        elif variant == "n":
            body = self.completion_body(prompt, 4, False, n=65)
            want = (400, "'n' must be in [1, 64] (got 65)")
        else:
            body = None
            want = (400, None)
        if body is None:
            r = client.post(url, content=b'{"prompt": [1, 2', timeout=self.args.request_timeout_s,
                            headers={"content-type": "application/json"})
        else:
            r = client.post(url, json=body, timeout=self.args.request_timeout_s)
        reaches = variant not in NOT_COUNTED_BY_ROUTER
        if r.status_code != want[0]:
            raise CheckFailure(f"invalid/{variant}: HTTP {r.status_code} (want {want[0]}): "
                               f"{r.text[:300]}")
        try:
            message = r.json()["error"]["message"]
        except (ValueError, KeyError, TypeError):
            raise CheckFailure(f"invalid/{variant}: no OpenAI error object: {r.text[:300]}")
        if want[1] is not None and message != want[1]:
            raise CheckFailure(f"invalid/{variant}: message {message!r}, want {want[1]!r}")
        if want[1] is None and "JSON" not in message and "json" not in message:
            raise CheckFailure(f"invalid/{variant}: message {message!r} does not name the JSON error")
        self.record("invalid", variant, reaches_router=reaches)


class CheckFailure(Exception):
    pass


def pick_kind(i):
    """Deterministic, evenly spread mix: request i's kind by its position in a 100-slot cycle."""
    slot = (i * 37) % 100  # 37 is coprime to 100: every slot once per cycle, kinds interleaved
    for kind in KINDS:
        if slot < MIX[kind]:
            return kind
        slot -= MIX[kind]
    raise AssertionError


# ---- main -------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--run_dir", required=True, help="deploy/cluster.sh run directory")
    ap.add_argument("--cli", required=True, help="the tandem CLI binary")
    ap.add_argument("--generate", help="tandem-generate: references must also equal its output")
    ap.add_argument("--model", help="the model file (for --generate)")
    ap.add_argument("--minutes", type=float, default=0,
                    help="main load phase this long (0: use --requests)")
    ap.add_argument("--requests", type=int, default=0, help="main load phase of this many requests")
    ap.add_argument("--concurrency", type=int, default=6)
    ap.add_argument("--sample_s", type=float, default=10)
    ap.add_argument("--warmup_s", type=float, default=-1,
                    help="warm-up load before the baseline (with --minutes; default: a sixth of "
                         "the run, at most 300 s)")
    ap.add_argument("--warmup_requests", type=int, default=200,
                    help="warm-up load before the baseline (with --requests)")
    ap.add_argument("--vocab", type=int, required=True)
    ap.add_argument("--context", type=int, required=True)
    ap.add_argument("--timeout_ms", type=int, default=60, help="deadline of the timeout kinds")
    ap.add_argument("--request_timeout_s", type=float, default=120)
    # gRPC opens a connection between two processes when they first talk (decode -> prefill) and
    # grows and shrinks its server thread pools with the load, so the idle counts jitter by a
    # few; a per-request leak grows with the request count (hundreds here).
    ap.add_argument("--fd_slack", type=int, default=4)
    ap.add_argument("--thread_slack", type=int, default=4)
    ap.add_argument("--rss_slack_mb", type=float, default=8)
    ap.add_argument("--rss_slack_pct", type=float, default=5)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--csv", help="write every sample here")
    ap.add_argument("--summary_json", help="write the summary here")
    args = ap.parse_args()
    if (args.minutes > 0) == (args.requests > 0):
        ap.error("give exactly one of --minutes and --requests")

    cluster = Cluster(args.run_dir)
    client = httpx.Client(limits=httpx.Limits(max_connections=args.concurrency + 4))
    model = client.get(cluster.router_http + "/v1/models", timeout=10).json()["data"][0]["id"]
    driver = Driver(args, cluster, model)
    log(f"router grpc {cluster.router_grpc} http {cluster.router_http}, model {model!r}, "
        f"processes {cluster.processes}")
    driver.capture_references(client)
    log(f"captured {len(driver.ref)} references")
    samples = []  # (t, phase, sample)
    clock = time.monotonic()

    # Warm-up: the same load, so connections, thread pools and allocator arenas reach their
    # working size before the baseline is taken.
    if args.minutes > 0:
        warmup_s = args.warmup_s if args.warmup_s >= 0 else min(300.0, args.minutes * 60 / 6)
        run_load(driver, cluster, client, args, samples, clock, "warmup", seconds=warmup_s)
    else:
        run_load(driver, cluster, client, args, samples, clock, "warmup",
                 requests=args.warmup_requests)
    fails = []
    base = wait_idle(cluster, client, 60)
    if problems := idle_problems(base):
        fails.append(f"not idle 60 s after the warm-up: {'; '.join(problems)}")
    samples.append((time.monotonic() - clock, "idle_base", base))
    counted_base = driver.reaching_router
    maybe_base = driver.maybe_reaching_router
    warmup_sent = driver.sent
    log(f"warm-up done ({driver.sent} requests); idle baseline: "
        + " ".join(f"{n}:rss={r['rss_kb'] // 1024}M,fd={r['fds']},thr={r['threads']}"
                   for n, r in base.items()))

    main_start = time.monotonic()
    if args.minutes > 0:
        run_load(driver, cluster, client, args, samples, clock, "load", seconds=args.minutes * 60)
    else:
        run_load(driver, cluster, client, args, samples, clock, "load", requests=args.requests)
    load_s = time.monotonic() - main_start
    end = wait_idle(cluster, client, 60)
    samples.append((time.monotonic() - clock, "idle_end", end))

    # ---- verdict --------------------------------------------------------------------------------
    if driver.failures:
        fails.append(f"{len(driver.failures)} answers failed their check (first: {driver.failures[0]})")
    if driver.answered != driver.sent:
        fails.append(f"lost requests: {driver.sent} sent, {driver.answered} accounted for")
    # A request whose deadline passed before the router read it (the client gave up first) never
    # reaches the router's request path: such requests may or may not be counted there.
    delta = router_total(end) - router_total(base)
    sure = driver.reaching_router - counted_base
    maybe = driver.maybe_reaching_router - maybe_base
    if not sure <= delta <= sure + maybe:
        fails.append(f"router outcome counters grew by {delta:g} in the main phase; {sure} requests "
                     f"reached it, and up to {maybe} timed out ones may have")
    if problems := idle_problems(end):
        fails.append(f"not idle 60 s after the load: {'; '.join(problems)}")
    expired = int(expired_total(end))
    race = lease_race_candidates(args.run_dir) if expired else 0
    if expired > race:
        fails.append(f"{expired} leases expired (never released) during the run, {race} of them "
                     f"explained by the cancel-vs-prefill-response race")
    elif expired:
        log(f"note: {expired} leases expired, each explained by the known race (a prefill that "
            f"succeeded for a request the router reports cancelled before its first token; "
            f"{race} such requests): freed after --lease_ms, see docs/RELIABILITY.md")
    resources = {}
    for name in cluster.processes:
        b, e = base[name], end[name]
        if e["rss_kb"] < 0:
            fails.append(f"{name} (pid {cluster.processes[name]}) is gone")
            continue
        if e["fds"] > b["fds"] + args.fd_slack:
            extra = list(e["fd_kinds"])
            for k in b["fd_kinds"]:
                if k in extra:
                    extra.remove(k)
            fails.append(f"{name}: {e['fds']} open fds when idle at the end, baseline {b['fds']} "
                         f"(more: {', '.join(sorted(extra))})")
        if e["threads"] > b["threads"] + args.thread_slack:
            fails.append(f"{name}: {e['threads']} threads when idle at the end, baseline "
                         f"{b['threads']}")
        resources[name] = rss_verdict(name, samples, args, fails)
        resources[name].update({"fds_base": b["fds"], "fds_end": e["fds"],
                                "threads_base": b["threads"], "threads_end": e["threads"],
                                "rss_idle_base_mb": b["rss_kb"] / 1024,
                                "rss_idle_end_mb": e["rss_kb"] / 1024})
        fds = [s[name]["fds"] for _, ph, s in samples if ph == "load" and s[name]["fds"] >= 0]
        if fds:
            resources[name]["fds_load_max"] = max(fds)

    if args.csv:
        write_csv(args.csv, samples)
    total_by_kind = {k: sum(v.values()) for k, v in driver.counts.items()}
    summary = {"main_load_s": round(load_s, 1), "requests_total": driver.sent,
               "requests_warmup": warmup_sent,
               "answered": driver.answered, "by_kind": driver.counts,
               "total_by_kind": total_by_kind, "router_counted_main": delta,
               "failures": len(driver.failures), "samples": len(samples),
               "resources": resources, "result": "FAIL" if fails else "PASS", "problems": fails}
    if args.summary_json:
        with open(args.summary_json, "w") as fh:
            json.dump(summary, fh, indent=2)
    log(f"{driver.sent} requests (warm-up included), main phase {load_s:.0f} s: "
        + ", ".join(f"{k}={n}" for k, n in total_by_kind.items()))
    log("outcomes: " + json.dumps(driver.counts))
    for name, r in resources.items():
        log(f"{name}: " + ", ".join(f"{k}={v:.1f}" if isinstance(v, float) else f"{k}={v}"
                                    for k, v in r.items()))
    for f in fails:
        print(f"FAIL: {f}", flush=True)
    print(f"RESULT soak={'PASS' if not fails else 'FAIL'} requests={driver.sent} "
          f"failed_checks={len(driver.failures)}", flush=True)
    return 1 if fails else 0


def run_load(driver, cluster, client, args, samples, clock, phase, seconds=None, requests=None):
    """`args.concurrency` workers send requests (numbered on from the driver's count) until
    `seconds` passed or `requests` were sent; samples every `args.sample_s` meanwhile."""
    start = time.monotonic()
    lock = threading.Lock()
    sent = [0]

    def take_index():
        with lock:
            if seconds is not None and time.monotonic() - start >= seconds:
                return None
            if requests is not None and sent[0] >= requests:
                return None
            sent[0] += 1
            driver.next_index += 1
            return driver.next_index

    def worker(w):
        rng = random.Random(hash((args.seed, phase, w)))
        wc = httpx.Client(limits=httpx.Limits(max_connections=2))
        while (i := take_index()) is not None:
            driver.one(wc, i, rng)
        wc.close()

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(args.concurrency)]
    for t in threads:
        t.start()
    next_sample = time.monotonic()
    while any(t.is_alive() for t in threads):
        now = time.monotonic()
        if now >= next_sample:
            s = cluster.sample(client)
            samples.append((now - clock, phase, s))
            log(f"{phase} t={now - start:5.0f}s answered={driver.answered} "
                f"failures={len(driver.failures)} "
                + " ".join(f"{n}:rss={r['rss_kb'] // 1024}M,fd={r['fds']}" for n, r in s.items()))
            next_sample += args.sample_s
        time.sleep(max(0.0, min(0.5, next_sample - time.monotonic())))
    for t in threads:
        t.join()


def wait_idle(cluster, client, timeout_s):
    """The first sample in which the cluster is idle, or the last one after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        s = cluster.sample(client)
        if not idle_problems(s) or time.monotonic() >= deadline:
            return s
        time.sleep(0.2)  # poll interval; bounded by the deadline above


def lease_race_candidates(run_dir):
    """Requests whose prefill succeeded (its node logged outcome=OK) while the router logged them
    CANCELLED or DEADLINE_EXCEEDED before their first token: the router's Prefill call was
    cancelled while the answer was on its way, so nobody holds the KV handle and the lease can only
    expire. Each expired lease should be one of these."""
    router = {}
    with open(os.path.join(run_dir, "router.log"), errors="replace") as fh:
        for line in fh:
            m = re.search(r" request request_id=(\S+) outcome=(\S+) .*?generated_tokens=(\d+)", line)
            if m:
                router[m.group(1)] = (m.group(2), int(m.group(3)))
    n = 0
    for f in sorted(os.listdir(run_dir)):
        if not (f.startswith("prefill") and f.endswith(".log")):
            continue
        with open(os.path.join(run_dir, f), errors="replace") as fh:
            for line in fh:
                m = re.search(r" request request_id=(\S+) (?:node_request_id=\S+ )?outcome=OK", line)
                if not m:
                    continue
                r = router.get(m.group(1))
                if r and r[0] in ("CANCELLED", "DEADLINE_EXCEEDED") and r[1] == 0:
                    n += 1
    return n


def rss_verdict(name, samples, args, fails):
    """RSS of the main load phase (after the warm-up): median of the last third of the samples
    against the median of the first third."""
    series = [s[name]["rss_kb"] / 1024 for _, ph, s in samples
              if ph == "load" and s[name]["rss_kb"] >= 0]
    out = {"rss_samples": len(series)}
    if len(series) < 9:
        out["rss_judged"] = "no (fewer than 9 samples)"
        return out
    third = len(series) // 3
    first = statistics.median(series[:third])
    last = statistics.median(series[-third:])
    bound = max(args.rss_slack_mb, first * args.rss_slack_pct / 100)
    out.update({"rss_first_third_mb": first, "rss_last_third_mb": last,
                "rss_growth_mb": last - first, "rss_bound_mb": bound, "rss_max_mb": max(series)})
    if last - first > bound:
        fails.append(f"{name}: RSS grew {last - first:.1f} MiB during the load ({first:.1f} -> "
                     f"{last:.1f} MiB, medians of the first and last third), bound {bound:.1f} MiB")
    return out


def write_csv(path, samples):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["t_s", "phase", "process", "rss_kb", "fds", "threads", "kv_blocks_used",
                    "leases", "running", "waiting"])
        for t, phase, s in samples:
            for name, r in s.items():
                m = r["metrics"]
                w.writerow([f"{t:.1f}", phase, name, r["rss_kb"], r["fds"], r["threads"],
                            m.get("tandem_kv_blocks_used", ""), m.get("tandem_kv_leases_active", ""),
                            m.get("tandem_num_requests_running", ""),
                            m.get("tandem_num_requests_waiting", "")])


if __name__ == "__main__":
    sys.exit(main())
