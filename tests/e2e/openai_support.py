"""What tests/e2e/openai_api_test.py shares between its tests: the `openai` client and plain
HTTP calls against the cluster under test, the fleet's state through `tandem status`, bounded
waits, and random JSON Schemas with a checker for what structured output returns.

`ARGS` is set by the test's main() before any test runs (its command-line arguments).
"""
import json
import re
import subprocess
import time
import urllib.error
import urllib.request

import openai

ARGS = None
MODEL = "tandem-synthetic"
PROMPT = "The quick brown fox"
MESSAGES = [{"role": "user", "content": "Tell me a story."}]


def client(timeout=60):
    # No retries: a test must see the first answer, 429/503 included.
    return openai.OpenAI(base_url=ARGS.base_url, api_key="unused", max_retries=0,
                         timeout=timeout)


def http_get(path):
    url = ARGS.base_url.rsplit("/v1", 1)[0] + path
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def http_post(path, body, method="POST"):
    url = ARGS.base_url.rsplit("/v1", 1)[0] + path
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def router_log_lines(needle):
    with open(ARGS.router_log, encoding="utf-8", errors="replace") as log:
        return [line for line in log if needle in line]


def fleet():
    """Rows of `tandem status` (the router's ClusterStatus): role, running, queued, free, total,
    leases."""
    out = subprocess.run([ARGS.client, "status", "--router", ARGS.router, "--timeout_ms=5000"],
                         capture_output=True, text=True, timeout=30, check=True).stdout
    rows = []
    for line in out.splitlines():
        m = re.match(r"^(prefill|decode)\s+\S+\s+(yes|no)\s+\S+\s+(\d+)\s+(\d+)\s+(\d+)/(\d+)\s+(\d+)",
                     line)
        if m:
            rows.append({"role": m[1], "healthy": m[2] == "yes", "running": int(m[3]),
                         "queued": int(m[4]), "free": int(m[5]), "total": int(m[6]),
                         "leases": int(m[7])})
    return rows, out


def wait_for(predicate, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while True:
        ok, detail = predicate()
        if ok:
            return detail
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout_s}s: {detail}")
        time.sleep(0.1)


def idle():
    rows, out = fleet()
    busy = [r for r in rows if r["running"] or r["queued"] or r["leases"] or r["free"] != r["total"]]
    return bool(rows) and not busy, out


def random_schema(rng, depth):
    """A small JSON Schema of the kinds structured output supports, bounded so that a random
    model can finish it."""
    kinds = ["integer", "boolean", "enum", "string", "null", "number"]
    if depth < 2:
        kinds += ["object", "array", "anyOf"]
    kind = rng.choice(kinds)
    if kind == "integer":
        lo = rng.randrange(-50, 50)
        return {"type": "integer", "minimum": lo, "maximum": lo + rng.randrange(0, 200)}
    if kind == "number":
        return {"type": "number"}
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "null":
        return {"type": "null"}
    if kind == "enum":
        return {"enum": rng.sample(["red", "green", "blue", 7, True, None, "a b"], rng.randrange(1, 4))}
    if kind == "string":
        return {"type": "string", "maxLength": rng.randrange(0, 8)}
    if kind == "anyOf":
        return {"anyOf": [random_schema(rng, depth + 1), random_schema(rng, depth + 1)]}
    if kind == "array":
        lo = rng.randrange(0, 3)
        return {"type": "array", "items": random_schema(rng, depth + 1), "minItems": lo,
                "maxItems": lo + rng.randrange(0, 3)}
    names = rng.sample(["a", "b", "c", "d", "e"], rng.randrange(1, 4))
    return {"type": "object", "properties": {n: random_schema(rng, depth + 1) for n in names},
            "required": [n for n in names if rng.random() < 0.7], "additionalProperties": False}


def check_schema(value, schema):
    """'' when `value` validates against `schema` (the keywords random_schema uses), else why
    not."""
    if "anyOf" in schema:
        problems = [check_schema(value, s) for s in schema["anyOf"]]
        return "" if "" in problems else f"no anyOf branch: {problems}"
    if "enum" in schema:
        ok = any(value == e and type(value) is type(e) for e in schema["enum"])
        return "" if ok else f"{value!r} not in enum"
    t = schema["type"]
    if t == "integer":
        if type(value) is not int:
            return f"{value!r} is not an integer"
        return "" if schema["minimum"] <= value <= schema["maximum"] else f"{value} out of range"
    if t == "number":
        return "" if type(value) in (int, float) else f"{value!r} is not a number"
    if t == "boolean":
        return "" if type(value) is bool else f"{value!r} is not a boolean"
    if t == "null":
        return "" if value is None else f"{value!r} is not null"
    if t == "string":
        if type(value) is not str:
            return f"{value!r} is not a string"
        return "" if len(value) <= schema["maxLength"] else f"{value!r} too long"
    if t == "array":
        if type(value) is not list:
            return f"{value!r} is not an array"
        if not schema["minItems"] <= len(value) <= schema["maxItems"]:
            return f"{len(value)} items"
        for v in value:
            p = check_schema(v, schema["items"])
            if p:
                return p
        return ""
    if type(value) is not dict:
        return f"{value!r} is not an object"
    for k in schema["required"]:
        if k not in value:
            return f"missing {k}"
    for k, v in value.items():
        if k not in schema["properties"]:
            return f"unexpected property {k}"
        p = check_schema(v, schema["properties"][k])
        if p:
            return p
    return ""
