#!/usr/bin/env python3
"""The router's OpenAI-compatible HTTP API driven by the real `openai` Python client.

    openai_api_test.py --base-url http://HOST:PORT/v1 --router HOST:PORT --client PATH/tandem
                       --router-log RUN_DIR/router.log --decode-pid-file RUN_DIR/decode-0.pid

Runs against a running cluster with a synthetic model (tests/e2e/openai_api_e2e_test.sh starts
it): chat and text completions, streamed and not; stop strings across token boundaries; usage
(with prompt_tokens_details.cached_tokens from the prefix cache); x-request-id; /v1/models
(max_model_len), system_fingerprint, /tokenize, /detokenize and /health; the field rule (known
fields refused with 400 naming them, an unknown field answered and logged once in the router's
log); every error status (400 with the gRPC validation's messages, 404 and 405 as JSON error
objects whose code is the status, 400 for a prompt longer than the context, 503 without a
decode node); a client
that disconnects mid-stream, whose request must be cancelled and its KV blocks and leases freed
(checked through ClusterStatus, via `tandem status`). The last test kills the decode node.
"""
import argparse
import json
import re
import signal
import os
import subprocess
import sys
import unittest
import urllib.error
import urllib.request

import openai

import openai_support
from openai_support import (MESSAGES, MODEL, PROMPT, check_schema, client, http_get, http_post,
                            idle, random_schema, router_log_lines, wait_for)

ARGS = None


class OpenAiApiTest(unittest.TestCase):
    # ---- completions -------------------------------------------------------------------------

    def test_chat_not_streamed_and_streamed_agree(self):
        c = client()
        whole = c.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=12,
                                          temperature=0, extra_body={"ignore_eos": True})
        self.assertEqual(whole.object, "chat.completion")
        self.assertEqual(whole.model, MODEL)
        self.assertEqual(len(whole.choices), 1)
        self.assertEqual(whole.choices[0].message.role, "assistant")
        self.assertEqual(whole.choices[0].finish_reason, "length")
        self.assertEqual(whole.usage.completion_tokens, 12)
        self.assertGreater(whole.usage.prompt_tokens, 0)
        self.assertEqual(whole.usage.total_tokens,
                         whole.usage.prompt_tokens + whole.usage.completion_tokens)
        text = whole.choices[0].message.content
        self.assertTrue(text)

        chunks = list(c.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=12, temperature=0, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True}))
        self.assertEqual(chunks[0].choices[0].delta.role, "assistant")
        streamed = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
        self.assertEqual(streamed, text)
        finishes = [ch.choices[0].finish_reason for ch in chunks if ch.choices]
        self.assertEqual(finishes[-1], "length")
        self.assertTrue(all(f is None for f in finishes[:-1]))
        # include_usage: one last chunk with no choices and the usage.
        self.assertEqual(chunks[-1].choices, [])
        self.assertEqual(chunks[-1].usage.completion_tokens, 12)
        self.assertEqual(chunks[-1].usage.prompt_tokens, whole.usage.prompt_tokens)
        self.assertTrue(all(ch.usage is None for ch in chunks[:-1]))
        self.assertTrue(all(ch.id == chunks[0].id for ch in chunks))

    def test_completion_not_streamed_and_streamed_agree(self):
        c = client()
        whole = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10, temperature=0,
                                     extra_body={"ignore_eos": True})
        self.assertEqual(whole.object, "text_completion")
        self.assertEqual(whole.choices[0].finish_reason, "length")
        self.assertEqual(whole.usage.completion_tokens, 10)
        chunks = list(c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=10,
                                           temperature=0, stream=True,
                                           extra_body={"ignore_eos": True}))
        self.assertEqual("".join(ch.choices[0].text for ch in chunks), whole.choices[0].text)
        self.assertEqual(chunks[-1].choices[0].finish_reason, "length")
        # Without include_usage no chunk carries usage.
        self.assertTrue(all(ch.usage is None for ch in chunks))

    def test_n_choices_from_one_prefill(self):
        # docs/router.md#n-choices-from-one-prefill: choice i is the n = 1 request with seed + i.
        c = client()
        args = dict(model=MODEL, messages=MESSAGES, max_tokens=8, temperature=1.0,
                    extra_body={"ignore_eos": True})
        whole = c.chat.completions.create(n=2, seed=77, **args)
        self.assertEqual([ch.index for ch in whole.choices], [0, 1])
        self.assertEqual(whole.usage.completion_tokens, 16)
        for i, choice in enumerate(whole.choices):
            self.assertEqual(choice.finish_reason, "length")
            one = c.chat.completions.create(seed=77 + i, **args)
            self.assertEqual(choice.message.content, one.choices[0].message.content)
        # Streamed: each chunk's choice names its index, the choices interleave, each ends with
        # its own finish_reason, and the usage counts both.
        chunks = list(c.chat.completions.create(n=2, seed=77, stream=True,
                                                stream_options={"include_usage": True}, **args))
        texts, finishes, order = {0: "", 1: ""}, {}, []
        for chunk in chunks:
            for choice in chunk.choices:
                if choice.delta.content:
                    order.append(choice.index)
                texts[choice.index] += choice.delta.content or ""
                if choice.finish_reason:
                    finishes[choice.index] = choice.finish_reason
        self.assertEqual(texts, {i: whole.choices[i].message.content for i in (0, 1)})
        self.assertEqual(finishes, {0: "length", 1: "length"})
        self.assertLess(order.index(1), len(order) - 1 - order[::-1].index(0), order)
        self.assertEqual(chunks[-1].usage.completion_tokens, 16)
        # Completions; greedy choices are identical; best_of = n is accepted.
        greedy = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0,
                                      n=3, best_of=3, extra_body={"ignore_eos": True})
        self.assertEqual(len(greedy.choices), 3)
        self.assertEqual(len({ch.text for ch in greedy.choices}), 1)
        self.assertEqual(greedy.usage.completion_tokens, 18)
        wait_for(idle, 20, "cluster idle after n > 1")

    def test_prompt_as_token_ids(self):
        ids = client().completions.create(model=MODEL, prompt=[5, 6, 7, 8], max_tokens=3,
                                          temperature=0, extra_body={"ignore_eos": True})
        self.assertEqual(ids.usage.prompt_tokens, 4)
        self.assertEqual(ids.usage.completion_tokens, 3)

    def test_seed_makes_sampling_repeatable(self):
        c = client()
        runs = [c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=1.0,
                                     top_p=0.9, seed=1234, extra_body={"ignore_eos": True,
                                                                       "top_k": 50})
                .choices[0].text for _ in range(2)]
        self.assertEqual(runs[0], runs[1])

    def test_max_completion_tokens(self):
        r = client().chat.completions.create(model=MODEL, messages=MESSAGES, temperature=0,
                                             max_completion_tokens=5,
                                             extra_body={"ignore_eos": True})
        self.assertEqual(r.usage.completion_tokens, 5)

    def test_stop_string_across_token_boundaries_is_not_emitted(self):
        c = client()
        pieces = [ch.choices[0].text for ch in c.completions.create(
            model=MODEL, prompt=PROMPT, max_tokens=40, temperature=0, stream=True,
            extra_body={"ignore_eos": True})]
        full = "".join(pieces)
        # A stop string made of the end of one token's text and the start of the next one's.
        boundary, k = 0, None
        for i in range(1, len(pieces)):
            boundary += len(pieces[i - 1])
            if pieces[i - 1] and pieces[i] and i > 2:
                k = boundary
                break
        self.assertIsNotNone(k, f"no token boundary in {pieces!r}")
        stop = full[k - 1:k + 1]
        expected = full[:full.find(stop)]
        for stream in (False, True):
            if stream:
                chunks = list(c.completions.create(
                    model=MODEL, prompt=PROMPT, max_tokens=40, temperature=0, stream=True,
                    stop=[stop], stream_options={"include_usage": True},
                    extra_body={"ignore_eos": True}))
                text = "".join(ch.choices[0].text for ch in chunks if ch.choices)
                finish = [ch.choices[0].finish_reason for ch in chunks if ch.choices][-1]
                usage = chunks[-1].usage
            else:
                r = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=40, temperature=0,
                                         stop=stop, extra_body={"ignore_eos": True})
                text, finish, usage = r.choices[0].text, r.choices[0].finish_reason, r.usage
            self.assertEqual(text, expected, f"stop={stop!r} stream={stream}")
            self.assertNotIn(stop, text)
            self.assertEqual(finish, "stop")
            self.assertLess(usage.completion_tokens, 40)
        # The request was cancelled once the stop string matched: nothing stays allocated.
        wait_for(idle, 20, "an idle fleet after stop-string requests")

    def test_request_id_header(self):
        raw = client().chat.completions.with_raw_response.create(
            model=MODEL, messages=MESSAGES, max_tokens=2, extra_body={"ignore_eos": True})
        rid = raw.headers.get("x-request-id")
        self.assertTrue(rid)
        self.assertEqual(raw.parse().id, "chatcmpl-" + rid)
        given = client().with_options(default_headers={"x-request-id": "my-id-42"})
        raw = given.completions.with_raw_response.create(model=MODEL, prompt="x", max_tokens=1)
        self.assertEqual(raw.headers.get("x-request-id"), "my-id-42")

    def test_models_and_health(self):
        models = client().models.list()
        self.assertEqual([m.id for m in models.data], [MODEL])
        status, body = http_get("/health")
        self.assertEqual(status, 200, body)
        status, body = http_get("/metrics")
        self.assertEqual(status, 200)
        self.assertIn("tandem_", body)

    # ---- errors ------------------------------------------------------------------------------

    def assert_error(self, exc_type, status, fn, message=None, param=None):
        with self.assertRaises(exc_type) as cm:
            fn()
        e = cm.exception
        self.assertEqual(e.status_code, status)
        body = e.body if isinstance(e.body, dict) else {}
        self.assertEqual(set(body), {"message", "type", "param", "code"}, e.body)
        if message is not None:
            self.assertEqual(body["message"], message)
        if param is not None:
            self.assertEqual(body["param"], param)
        self.assertTrue(e.response.headers.get("x-request-id"))

    def test_invalid_requests_are_400_with_the_grpc_messages(self):
        c = client()
        self.assert_error(openai.BadRequestError, 400, lambda: c.completions.create(
            model=MODEL, prompt="x", n=0), param="n", message="'n' must be in [1, 64] (got 0)")
        # The messages of the router's gRPC validation (router/request_validation.cc), verbatim.
        self.assert_error(openai.BadRequestError, 400, lambda: c.completions.create(
            model=MODEL, prompt="x", max_tokens=0), message="max_tokens must be >= 1 (got 0)")
        self.assert_error(openai.BadRequestError, 400, lambda: c.completions.create(
            model=MODEL, prompt="x", max_tokens=2, temperature=-1),
            message="temperature must be a finite number >= 0 (got -1)")
        self.assert_error(openai.BadRequestError, 400, lambda: c.chat.completions.create(
            model=MODEL, messages=[{"role": "robot", "content": "x"}], max_tokens=2))
        self.assert_error(openai.BadRequestError, 400, lambda: c.completions.create(
            model=MODEL, prompt=[10**9], max_tokens=2))
        grpc = subprocess.run([ARGS.client, "generate", "--router", ARGS.router, "--prompt", "x",
                               "--max_tokens", "2", "--temperature", "-1"],
                              capture_output=True, text=True, timeout=30)
        self.assertNotEqual(grpc.returncode, 0)
        self.assertIn("temperature must be a finite number >= 0 (got -1)", grpc.stderr)

    def test_unknown_model_is_404(self):
        self.assert_error(openai.NotFoundError, 404, lambda: client().completions.create(
            model="no-such-model", prompt="x", max_tokens=2))

    def test_prompt_longer_than_the_context_is_400(self):
        c = client()
        with self.assertRaises(openai.BadRequestError) as cm:
            c.completions.create(model=MODEL, prompt=[5] * 5000, max_tokens=2)
        self.assertIn("context length", cm.exception.body["message"])
        with self.assertRaises(openai.BadRequestError) as cm:
            c.completions.create(model=MODEL, prompt=[5] * 5000)  # no max_tokens
        self.assertIn("context length", cm.exception.body["message"])

    def test_unknown_fields_are_answered_and_logged_once(self):
        c = client()
        for _ in range(3):
            r = c.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2,
                                          user="someone",
                                          extra_body={"tandem_e2e_unknown_field": {"a": 1}})
            self.assertEqual(len(r.choices), 1)
        needle = "openai_unknown_field field=tandem_e2e_unknown_field endpoint=/v1/chat/completions"
        # The line is written before the response: it is there, and only once.
        self.assertEqual(len(router_log_lines(needle)), 1)
        self.assertEqual(router_log_lines("field=user "), [])  # `user` is known

    def test_refused_fields_are_400_naming_the_field(self):
        c = client()
        chat = lambda **kw: c.chat.completions.create(model=MODEL, messages=MESSAGES,
                                                      max_tokens=2, **kw)
        cases = [
            (lambda: chat(response_format={"type": "json_schema", "json_schema": {
                "name": "t", "schema": {"type": "object", "properties": {"tags": {
                    "type": "object", "patternProperties": {"x": {}}}}}}}),
             "response_format.json_schema.schema"),
            (lambda: chat(tools=[{"type": "function", "function": {
                "name": "f", "parameters": {"type": "object", "properties": {"tags": {
                    "type": "object", "patternProperties": {"x": {}}}}}}}]),
             "tools[0].function.parameters"),
            (lambda: chat(tool_choice="required"), "tool_choice"),
            # add_generation_prompt is honoured now; continuing the last message needs it false.
            (lambda: chat(extra_body={"continue_final_message": True}), "continue_final_message"),
            (lambda: chat(extra_body={"guided_regex": "(?=a)a"}), "guided_regex"),
            (lambda: c.chat.completions.create(
                model=MODEL, max_tokens=2,
                messages=[{"role": "user", "content": "x", "name": "bob"}]), "messages[0].name"),
            (lambda: c.completions.create(model=MODEL, prompt="x", max_tokens=2, suffix="end"),
             "suffix"),
            (lambda: c.completions.create(model=MODEL, prompt="x", max_tokens=2, echo=True),
             "echo"),
        ]
        for fn, param in cases:
            self.assert_error(openai.BadRequestError, 400, fn, param=param)
        # Their neutral values are accepted.
        r = chat(response_format={"type": "text"}, tools=[], tool_choice="none")
        self.assertEqual(len(r.choices), 1)

    def test_vllm_fields_are_honoured(self):
        c = client()
        r = c.completions.create(model=MODEL, prompt=[5, 6, 7, 8, 9, 10], max_tokens=1,
                                 extra_body={"truncate_prompt_tokens": 2})
        self.assertEqual(r.usage.prompt_tokens, 2)
        full = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0,
                                    extra_body={"ignore_eos": True}).choices[0].text
        stop = full[4:6]
        r = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=12, temperature=0,
                                 stop=stop, extra_body={"ignore_eos": True,
                                                        "include_stop_str_in_output": True})
        self.assertEqual(r.choices[0].text, full[:full.find(stop) + len(stop)])
        raw = c.completions.with_raw_response.create(
            model=MODEL, prompt="x", max_tokens=1, extra_body={"request_id": "e2e-body-id"})
        self.assertEqual(raw.headers.get("x-request-id"), "e2e-body-id")

    def test_tokenize_and_detokenize(self):
        status, body = http_post("/tokenize", {"model": MODEL, "prompt": PROMPT})
        self.assertEqual(status, 200, body)
        t = json.loads(body)
        self.assertEqual(set(t), {"count", "max_model_len", "tokens"})
        self.assertEqual(t["count"], len(t["tokens"]))
        whole = client().completions.create(model=MODEL, prompt=PROMPT, max_tokens=1)
        self.assertEqual(t["count"], whole.usage.prompt_tokens)
        status, body = http_post("/tokenize", {"messages": MESSAGES})
        self.assertEqual(status, 200, body)
        chat = client().chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=1)
        self.assertEqual(json.loads(body)["count"], chat.usage.prompt_tokens)
        status, body = http_post("/detokenize", {"model": MODEL, "tokens": t["tokens"]})
        self.assertEqual(status, 200, body)
        self.assertIn("fox", json.loads(body)["prompt"])
        status, body = http_post("/detokenize", {"tokens": [10**9]})
        self.assertEqual(status, 400, body)
        self.assertEqual(json.loads(body)["error"]["param"], "tokens")

    def test_models_max_model_len_and_system_fingerprint(self):
        model = client().models.list().data[0]
        _, body = http_post("/tokenize", {"prompt": "x"})
        self.assertEqual(model.model_extra["max_model_len"], json.loads(body)["max_model_len"])
        self.assertGreater(model.model_extra["max_model_len"], 0)
        c = client()
        a = c.completions.create(model=MODEL, prompt="x", max_tokens=1)
        self.assertRegex(a.system_fingerprint, r"^fp_[0-9a-f]{16}$")
        chunks = list(c.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=3,
                                                stream=True))
        self.assertTrue(chunks)
        self.assertTrue(all(ch.system_fingerprint == a.system_fingerprint for ch in chunks))

    def test_cached_tokens_from_the_prefix_cache(self):
        c = client()
        prompt = [(i * 7) % 200 + 5 for i in range(300)]  # a prompt no other test sends
        first = c.completions.create(model=MODEL, prompt=prompt, max_tokens=2)
        self.assertEqual(first.usage.prompt_tokens_details.cached_tokens, 0)
        second = c.completions.create(model=MODEL, prompt=prompt, max_tokens=2, stream=True,
                                      stream_options={"include_usage": True})
        usage = list(second)[-1].usage
        # The prefill node's prefix cache served the full blocks of the first request's prompt.
        self.assertGreater(usage.prompt_tokens_details.cached_tokens, 0)
        self.assertLess(usage.prompt_tokens_details.cached_tokens, usage.prompt_tokens)

    def test_unknown_route_is_404_and_wrong_method_405_with_error_objects(self):
        status, body = http_get("/v1/nothing")
        self.assertEqual(status, 404)
        error = json.loads(body)["error"]
        self.assertEqual((error["code"], error["type"]), (404, "not_found_error"))
        status, body = http_post("/v1/models", {})
        self.assertEqual(status, 405)
        error = json.loads(body)["error"]
        self.assertEqual((error["code"], error["type"]), (405, "invalid_request_error"))
        # The code is the HTTP status in every error object.
        with self.assertRaises(openai.BadRequestError) as cm:
            client().completions.create(model=MODEL, prompt="x", n=65)
        self.assertEqual(cm.exception.body["code"], 400)

    # ---- disconnect --------------------------------------------------------------------------

    # ---- the sampler: vLLM's fields (model/sampling.h) -----------------------------------------

    def token_id(self, text):
        """The one token `text` is (POST /tokenize, vLLM's shape)."""
        req = urllib.request.Request(
            ARGS.base_url.rsplit("/v1", 1)[0] + "/tokenize", method="POST",
            data=json.dumps({"model": MODEL, "prompt": text, "add_special_tokens": False}).encode(),
            headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            ids = json.loads(r.read().decode())["tokens"]
        self.assertEqual(len(ids), 1, (text, ids))
        return ids[0]

    def sample(self, max_tokens=8, **kw):
        """One text completion of PROMPT; vLLM's extra fields go in extra_body."""
        extra = {k: kw.pop(k) for k in list(kw) if k in (
            "min_p", "repetition_penalty", "min_tokens", "stop_token_ids", "ignore_eos", "top_k")}
        return client().completions.create(model=MODEL, prompt=PROMPT, max_tokens=max_tokens,
                                           extra_body=extra, **kw).choices[0]

    def test_sampler_min_p_near_one_leaves_the_greedy_token(self):
        greedy = self.sample(12, temperature=0, ignore_eos=True).text
        free = set()
        for seed in (1, 2, 3):
            self.assertEqual(self.sample(12, temperature=2.0, seed=seed, min_p=0.99,
                                         ignore_eos=True).text, greedy)
            free.add(self.sample(12, temperature=2.0, seed=seed, ignore_eos=True).text)
        self.assertNotEqual(free, {greedy})  # without min_p, temperature 2 samples freely

    def test_sampler_logit_bias_forces_and_forbids_tokens(self):
        z = self.token_id("Z")
        forced = self.sample(6, temperature=1.0, seed=3, logit_bias={str(z): 100},
                             ignore_eos=True)
        self.assertEqual(forced.text, "Z" * 6)
        first = self.sample(1, temperature=0, ignore_eos=True).text
        banned = self.sample(1, temperature=0, logit_bias={str(self.token_id(first)): -100},
                             ignore_eos=True).text
        self.assertNotEqual(banned, first)

    def test_sampler_min_tokens_defers_eos_and_ignore_eos_keeps_it(self):
        eos = str(self.token_id("<|im_end|>"))
        r = self.sample(8, temperature=0, logit_bias={eos: 100})
        self.assertEqual((r.text, r.finish_reason), ("", "stop"))
        r = client().completions.create(model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0,
                                        logit_bias={eos: 100}, extra_body={"min_tokens": 3})
        self.assertEqual(r.choices[0].finish_reason, "stop")
        self.assertEqual(r.usage.completion_tokens, 3)
        r = client().completions.create(model=MODEL, prompt=PROMPT, max_tokens=5, temperature=0,
                                        logit_bias={eos: 100}, extra_body={"ignore_eos": True})
        self.assertEqual(r.choices[0].finish_reason, "length")
        self.assertEqual(r.usage.completion_tokens, 5)

    def test_sampler_stop_token_ids_end_generation_even_with_ignore_eos(self):
        z = self.token_id("Z")
        bias = {str(z): 100}
        r = self.sample(8, temperature=0, logit_bias=bias, stop_token_ids=[z], ignore_eos=True)
        self.assertEqual((r.text, r.finish_reason), ("", "stop"))
        # min_tokens masks Z for two draws (Y, biased less, wins them), then Z stops it.
        bias[str(self.token_id("Y"))] = 50
        r = self.sample(8, temperature=0, logit_bias=bias, stop_token_ids=[z], min_tokens=2,
                        ignore_eos=True)
        self.assertEqual((r.text, r.finish_reason), ("YY", "stop"))
        chunks = client().completions.create(
            model=MODEL, prompt=PROMPT, max_tokens=8, temperature=0, logit_bias=bias,
            stream=True, extra_body={"stop_token_ids": [z], "min_tokens": 2, "ignore_eos": True})
        chunks = list(chunks)
        self.assertEqual("".join(ch.choices[0].text for ch in chunks), "YY")
        self.assertEqual(chunks[-1].choices[0].finish_reason, "stop")

    def test_sampler_penalties_apply_across_prefill_and_decode(self):
        kw = dict(temperature=0, ignore_eos=True, presence_penalty=1.5, frequency_penalty=1.0,
                  repetition_penalty=1.8)
        greedy = self.sample(24, temperature=0, ignore_eos=True).text
        penalised = self.sample(24, **kw).text
        self.assertNotEqual(penalised, greedy)
        self.assertEqual(self.sample(24, **kw).text, penalised)
        chunks = client().completions.create(model=MODEL, prompt=PROMPT, max_tokens=24,
                                             stream=True, temperature=0, presence_penalty=1.5,
                                             frequency_penalty=1.0,
                                             extra_body={"ignore_eos": True,
                                                         "repetition_penalty": 1.8})
        self.assertEqual("".join(ch.choices[0].text for ch in chunks), penalised)
        # Seeded and penalised: repeatable.
        seeded = dict(kw, temperature=0.8, seed=99, min_p=0.05)
        self.assertEqual(self.sample(16, **seeded).text, self.sample(16, **seeded).text)

    def test_sampler_fields_out_of_range_are_400(self):
        c = client()
        cases = [
            ({"extra_body": {"repetition_penalty": 0}}, "repetition_penalty must be"),
            ({"presence_penalty": 3}, "presence_penalty must be in [-2, 2]"),
            ({"extra_body": {"min_p": 1.5}}, "min_p must be in [0, 1]"),
            ({"logit_bias": {"1000000": 1}}, "logit_bias token id 1000000 is out of vocabulary"),
            ({"extra_body": {"stop_token_ids": [-1]}}, "stop_token_ids: token id -1"),
            ({"extra_body": {"min_tokens": 5}}, "min_tokens (5) must be <= max_tokens (2)"),
        ]
        for kw, message in cases:
            with self.assertRaises(openai.BadRequestError) as cm:
                c.completions.create(model=MODEL, prompt="x", max_tokens=2, **kw)
            self.assertIn(message, cm.exception.body["message"], kw)

    # ---- logprobs (model/logprobs.h: the raw model distribution) -----------------------------

    def test_logprobs_chat_whole_and_streamed(self):
        c = client()
        kw = dict(model=MODEL, messages=MESSAGES, max_tokens=8, temperature=0, logprobs=True,
                  top_logprobs=3, extra_body={"ignore_eos": True})
        whole = c.chat.completions.create(**kw).choices[0]
        content = whole.logprobs.content
        self.assertEqual(len(content), 8)
        # The tokens' raw bytes make the text (ill-formed UTF-8 shown as U+FFFD in both).
        self.assertEqual(b"".join(bytes(e.bytes) for e in content).decode("utf-8", "replace"),
                         whole.message.content)
        for e in content:
            self.assertLessEqual(e.logprob, 0)
            self.assertEqual(len(e.top_logprobs), 3)
            tops = [t.logprob for t in e.top_logprobs]
            self.assertEqual(tops, sorted(tops, reverse=True))
            # Greedy: the sampled token is the most likely one (first token from the prefill
            # node, the rest from the decode node).
            self.assertEqual(e.logprob, tops[0])
            self.assertEqual(e.token, e.top_logprobs[0].token)
        chunks = list(c.chat.completions.create(stream=True, **kw))
        streamed = [e for ch in chunks if ch.choices and ch.choices[0].logprobs
                    for e in ch.choices[0].logprobs.content]
        self.assertEqual([(e.token, e.logprob) for e in streamed],
                         [(e.token, e.logprob) for e in content])
        # Without logprobs the field is null.
        plain = c.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
        self.assertIsNone(plain.choices[0].logprobs)

    def test_logprobs_completions_shape_and_raw_distribution(self):
        c = client()
        r = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=6, temperature=0.9,
                                 seed=7, logprobs=2, extra_body={"ignore_eos": True})
        lp = r.choices[0].logprobs
        self.assertEqual(len(lp.tokens), 6)
        self.assertEqual(len(lp.token_logprobs), 6)
        self.assertEqual(len(lp.top_logprobs), 6)
        self.assertEqual(lp.text_offset[0], 0)
        self.assertEqual(lp.text_offset, sorted(lp.text_offset))
        for sampled, top in zip(lp.token_logprobs, lp.top_logprobs):
            self.assertTrue(1 <= len(top) <= 2)
            self.assertLessEqual(sampled, max(top.values()) + 1e-6)
        # Raw: logit_bias forces Z, but Z's reported logprob is the model's, and the most likely
        # token is still the unbiased greedy one.
        z = self.token_id("Z")
        greedy = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=1, temperature=0,
                                      logprobs=1, extra_body={"ignore_eos": True})
        forced = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=1, temperature=0,
                                      logprobs=1, logit_bias={str(z): 100},
                                      extra_body={"ignore_eos": True})
        self.assertEqual(forced.choices[0].text, "Z")
        self.assertEqual(forced.choices[0].logprobs.top_logprobs[0],
                         greedy.choices[0].logprobs.top_logprobs[0])
        self.assertLess(forced.choices[0].logprobs.token_logprobs[0],
                        greedy.choices[0].logprobs.token_logprobs[0])

    # ---- structured output (docs/structured_output.md) ----------------------------------------

    def test_structured_output_parse_with_a_pydantic_model(self):
        import pydantic
        from typing import List, Literal

        class Weather(pydantic.BaseModel):
            city: Literal["Paris", "Rome", "Oslo"]
            temperature_c: int
            sunny: bool
            tags: List[Literal["wind", "rain", "fog"]]

        c = client()
        for temperature in (0, 1.0):
            r = c.beta.chat.completions.parse(
                model=MODEL, messages=MESSAGES, response_format=Weather, max_tokens=300,
                temperature=temperature, seed=3)
            choice = r.choices[0]
            self.assertEqual(choice.finish_reason, "stop", choice.message.content)
            self.assertIsInstance(choice.message.parsed, Weather)
            self.assertEqual(choice.message.parsed,
                             Weather.model_validate_json(choice.message.content))

    def test_structured_output_json_object_schema_regex_choice(self):
        c = client()
        chat = lambda **kw: c.chat.completions.create(model=MODEL, messages=MESSAGES, **kw)
        r = chat(response_format={"type": "json_object"}, max_tokens=400, temperature=0)
        # The synthetic model may not close an open-ended object within the budget; what it
        # wrote is a prefix of one, and a finished one parses.
        if r.choices[0].finish_reason == "stop":
            self.assertIsInstance(json.loads(r.choices[0].message.content), dict)
        schema = {"type": "object", "properties": {
            "n": {"type": "integer", "minimum": -5, "maximum": 5},
            "word": {"type": "string", "maxLength": 6},
            "pick": {"enum": ["x", "y", 3, None]}},
            "required": ["n", "word", "pick"], "additionalProperties": False}
        for stream in (False, True):
            kw = dict(response_format={"type": "json_schema", "json_schema": {
                "name": "s", "schema": schema, "strict": True}}, max_tokens=200, temperature=0)
            if stream:
                text = "".join(ch.choices[0].delta.content or "" for ch in chat(stream=True, **kw)
                               if ch.choices)
            else:
                r = chat(**kw)
                self.assertEqual(r.choices[0].finish_reason, "stop")
                text = r.choices[0].message.content
            value = json.loads(text)
            self.assertEqual(list(value), ["n", "word", "pick"])  # the schema's order
            self.assertTrue(-5 <= value["n"] <= 5 and len(value["word"]) <= 6, text)
            self.assertIn(value["pick"], ["x", "y", 3, None])
        # vLLM's fields, on completions.
        r = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=30, temperature=1.0,
                                 seed=1, extra_body={"guided_regex": "[a-c]{2,4}-[0-9]{3}"})
        self.assertRegex(r.choices[0].text, r"^[a-c]{2,4}-[0-9]{3}$")
        r = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=30, temperature=1.0,
                                 extra_body={"guided_choice": ["alpha", "beta gamma"]})
        self.assertIn(r.choices[0].text, ["alpha", "beta gamma"])
        self.assertEqual(r.choices[0].finish_reason, "stop")

    def test_structured_output_guarantee_over_random_schemas(self):
        # Issue 25 item 2 through the cluster: random small schemas and temperatures; every
        # output that finished with "stop" parses and validates (0 invalid).
        import concurrent.futures
        import random
        rng = random.Random(2025)
        jobs = [(random_schema(rng, 0), rng.choice([0, 0.7, 1.0, 1.5]), rng.randrange(1 << 30))
                for _ in range(int(os.environ.get("TANDEM_GUARANTEE_RUNS", "200")))]
        c = client(timeout=120)

        def run(job):
            schema, temperature, seed = job
            r = c.completions.create(model=MODEL, prompt=PROMPT, max_tokens=400,
                                     temperature=temperature, seed=seed,
                                     extra_body={"guided_json": schema})
            return schema, r.choices[0].finish_reason, r.choices[0].text

        stopped = invalid = 0
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            for schema, reason, text in pool.map(run, jobs):
                if reason != "stop":
                    continue
                stopped += 1
                try:
                    problem = check_schema(json.loads(text), schema)
                except ValueError as e:
                    problem = f"does not parse: {e}"
                if problem:
                    invalid += 1
                    print(f"INVALID: {problem}\n  schema {json.dumps(schema)}\n  text {text!r}",
                          file=sys.stderr)
        print(f"guarantee: {len(jobs)} generations, {stopped} finished with stop, "
              f"{invalid} invalid", file=sys.stderr)
        self.assertEqual(invalid, 0)
        self.assertGreaterEqual(stopped, len(jobs) // 2)

    # ---- tools (docs/structured_output.md#tools) ---------------------------------------------

    TOOLS = [
        {"type": "function", "function": {
            "name": "get_weather", "description": "The weather in a city",
            "parameters": {"type": "object", "properties": {
                "city": {"enum": ["Paris", "Rome", "Oslo"]},
                "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                "required": ["city", "days"], "additionalProperties": False}}},
        {"type": "function", "function": {
            "name": "get_time", "parameters": {"type": "object", "properties": {
                "zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
                "additionalProperties": False}}},
    ]

    def call_tools(self, stream, **kw):
        """(finish_reason, content, [{id, name, arguments}]) of one chat request, assembled from
        the stream's deltas as the OpenAI client documents them."""
        c = client()
        if not stream:
            r = c.chat.completions.create(model=MODEL, **kw)
            m = r.choices[0].message
            calls = [{"id": t.id, "name": t.function.name, "arguments": t.function.arguments,
                      "type": t.type} for t in (m.tool_calls or [])]
            return r.choices[0].finish_reason, m.content, calls
        calls, content, finish = {}, "", None
        for chunk in c.chat.completions.create(model=MODEL, stream=True, **kw):
            if not chunk.choices:
                continue
            delta = chunk.choices[0].delta
            content += delta.content or ""
            for t in delta.tool_calls or []:
                entry = calls.setdefault(t.index, {"id": None, "name": "", "arguments": "",
                                                   "type": None})
                if t.id:
                    self.assertIsNone(entry["id"], "the id comes once, with the name")
                    entry["id"], entry["type"] = t.id, t.type
                if t.function and t.function.name:
                    entry["name"] += t.function.name
                if t.function and t.function.arguments:
                    self.assertTrue(entry["name"], "arguments come after the name")
                    entry["arguments"] += t.function.arguments
            finish = chunk.choices[0].finish_reason or finish
        return finish, content or None, [calls[i] for i in sorted(calls)]

    def test_tools_forced_call_and_round_trip_streamed_and_not(self):
        weather = self.TOOLS[0]["function"]["parameters"]
        for stream in (False, True):
            for choice in ("required", {"type": "function", "function": {"name": "get_weather"}}):
                finish, content, calls = self.call_tools(
                    stream, messages=MESSAGES, tools=self.TOOLS, tool_choice=choice,
                    max_tokens=200, temperature=0.8, seed=11)
                self.assertEqual(finish, "tool_calls", (stream, choice, content, calls))
                self.assertEqual(len(calls), 1, calls)
                call = calls[0]
                self.assertEqual(call["type"], "function")
                self.assertTrue(call["id"].startswith("call_"), call)
                args = json.loads(call["arguments"])
                if choice != "required":
                    self.assertEqual(call["name"], "get_weather")
                if call["name"] == "get_weather":
                    self.assertEqual(check_schema(args, {
                        "type": "object", "properties": {
                            "city": {"enum": weather["properties"]["city"]["enum"]},
                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
                        "required": ["city", "days"]}), "", args)
                else:
                    self.assertIn(args.get("zone"), ["UTC", "CET"])
                # The round trip: the call and its result go back; the model answers.
                messages = MESSAGES + [
                    {"role": "assistant", "content": None, "tool_calls": [
                        {"id": call["id"], "type": "function",
                         "function": {"name": call["name"], "arguments": call["arguments"]}}]},
                    {"role": "tool", "tool_call_id": call["id"], "content": "22 C, sunny"}]
                finish, content, calls = self.call_tools(
                    stream, messages=messages, tools=self.TOOLS, max_tokens=16, temperature=0)
                self.assertIn(finish, ("stop", "length", "tool_calls"))
                if finish == "tool_calls":  # "auto": a call the model chose is a valid one
                    for call in calls:
                        self.assertIn(call["name"], ["get_weather", "get_time"])
                        json.loads(call["arguments"])
                # tool_choice none: plain text, never calls.
                finish, content, calls = self.call_tools(
                    stream, messages=messages, tools=self.TOOLS, tool_choice="none",
                    max_tokens=8, temperature=0)
                self.assertEqual(calls, [])
                self.assertIn(finish, ("stop", "length"))

    def test_structured_output_and_tools_per_choice_with_n(self):
        # n > 1: every choice has its own matcher (docs/router.md#n-choices-from-one-prefill), so
        # each one parses and is the n = 1 answer with seed + i; tool calls are parsed per choice
        # (streamed: deltas per choice index) with ids distinct across choices.
        import pydantic
        from typing import List, Literal

        class Weather(pydantic.BaseModel):
            city: Literal["Paris", "Rome", "Oslo"]
            temperature_c: int
            sunny: bool
            tags: List[Literal["wind", "rain", "fog"]]

        c = client()
        args = dict(model=MODEL, messages=MESSAGES, response_format=Weather, max_tokens=300,
                    temperature=1.0)
        r = c.beta.chat.completions.parse(n=3, seed=5, **args)
        self.assertEqual([ch.index for ch in r.choices], [0, 1, 2])
        for i, choice in enumerate(r.choices):
            self.assertEqual(choice.finish_reason, "stop", choice.message.content)
            self.assertIsInstance(choice.message.parsed, Weather)
            one = c.beta.chat.completions.parse(seed=5 + i, **args)
            self.assertEqual(choice.message.content, one.choices[0].message.content)
        whole = c.chat.completions.create(model=MODEL, messages=MESSAGES, tools=self.TOOLS,
                                          tool_choice="required", max_tokens=200, temperature=0.8,
                                          seed=11, n=2)
        ids = []
        for choice in whole.choices:
            self.assertEqual(choice.finish_reason, "tool_calls", choice.message)
            self.assertEqual(len(choice.message.tool_calls), 1)
            json.loads(choice.message.tool_calls[0].function.arguments)
            ids.append(choice.message.tool_calls[0].id)
        self.assertEqual(len(set(ids)), 2, ids)
        streamed = {0: [], 1: []}
        finishes = {}
        for chunk in c.chat.completions.create(model=MODEL, messages=MESSAGES, tools=self.TOOLS,
                                               tool_choice="required", max_tokens=200,
                                               temperature=0.8, seed=11, n=2, stream=True):
            for choice in chunk.choices:
                streamed[choice.index] += choice.delta.tool_calls or []
                if choice.finish_reason:
                    finishes[choice.index] = choice.finish_reason
        self.assertEqual(finishes, {0: "tool_calls", 1: "tool_calls"})
        for i in (0, 1):
            name = "".join(d.function.name or "" for d in streamed[i] if d.function)
            arguments = "".join(d.function.arguments or "" for d in streamed[i] if d.function)
            self.assertEqual(name, whole.choices[i].message.tool_calls[0].function.name)
            self.assertEqual(json.loads(arguments),
                             json.loads(whole.choices[i].message.tool_calls[0].function.arguments))
        wait_for(idle, 20, "cluster idle after n > 1 with grammars")

    def test_zz_disconnect_mid_stream_cancels_and_frees_blocks(self):
        # Decoding 1,900 tokens of the synthetic model takes about a second, so a client that the
        # machine's load keeps from closing for that long finds the request already done: that
        # attempt tested nothing, and the scenario is tried again (three times at most). A router
        # that never cancels fails every attempt.
        lines = []
        for _ in range(3):
            line = self.disconnect_mid_stream()
            lines.append(line)
            if "outcome=CANCELLED" in line:
                generated = int(re.search(r"generated_tokens=(\d+)", line)[1])
                self.assertLess(generated, 1900, line)
                return
            self.assertIn("outcome=OK", line)
            self.assertIn("generated_tokens=1900", line)  # else neither cancelled nor done
        self.fail(f"no attempt was cancelled by the disconnect: {lines}")

    def disconnect_mid_stream(self):
        """Reads 5 chunks of a 1,900-token stream, closes it; the router's log line of it."""
        wait_for(idle, 20, "an idle fleet before the disconnect test")
        c = client()
        raw = c.completions.with_raw_response.create(
            model=MODEL, prompt=PROMPT, max_tokens=1900, temperature=0, stream=True,
            extra_body={"ignore_eos": True})
        rid = raw.headers.get("x-request-id")
        stream = raw.parse()
        received = 0
        for _ in stream:
            received += 1
            if received == 5:
                break
        # The client goes away at once (waiting here, e.g. for the router's next health poll,
        # would let the request finish before the disconnect).
        stream.close()
        wait_for(idle, 20, "free KV blocks and no leases after the client disconnected")
        def logged():
            with open(ARGS.router_log, encoding="utf-8", errors="replace") as log:
                for line in log:
                    if f"request_id={rid} " in line and "outcome=" in line:
                        return True, line
            return False, "no log line yet"
        return wait_for(logged, 20, f"the router's log line of {rid}")

    def test_zzz_no_decode_node_is_503(self):
        # Last: kills the decode node.
        with open(ARGS.decode_pid_file) as f:
            pid = int(f.read().split()[0])
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: (http_get("/health")[0] == 503, http_get("/health")),
                 20, "/health answering 503 without a decode node")
        # The router first waits for a healthy decode node (--unhealthy_wait_ms, 2 s here).
        self.assert_error(openai.InternalServerError, 503, lambda: client(
            timeout=30).completions.create(model=MODEL, prompt="x", max_tokens=2))


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--base-url", required=True)
    p.add_argument("--router", required=True)
    p.add_argument("--client", required=True)
    p.add_argument("--router-log", required=True)
    p.add_argument("--decode-pid-file", required=True)
    ARGS, rest = p.parse_known_args()
    openai_support.ARGS = ARGS
    unittest.main(argv=[sys.argv[0], "-v"] + rest)


if __name__ == "__main__":
    main()
