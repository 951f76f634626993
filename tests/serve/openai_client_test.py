"""`veloxquant serve` through the official `openai` Python client, on 127.0.0.1 with the real model.

  openai_client_test.py VELOXQUANT MODEL

Checks: completions and chat, streamed and not; stop sequences; usage against the tokenizer;
16 concurrent streaming clients at temperature 0 each get exactly `veloxquant generate`'s text for
their prompt alone (same --kv); a second chat turn prefills only the new turn (usage's cached
tokens and /metrics); the OpenAI-style errors (bad JSON, wrong types, n > 1, a prompt past the
context, a body over the limit, a missing or wrong key); a client that leaves mid-stream frees its
sequence. Exits non-zero with a message on the first failure.
"""
import concurrent.futures as cf
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import openai

VQ, MODEL = sys.argv[1], sys.argv[2]
KV = "q4"
KEY = "test-key"
CTX = 512


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check(cond, what):
    if not cond:
        raise SystemExit(f"FAIL: {what}")


def http(port, path, body=None, key=KEY, raw=None, method=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def metrics(port):
    status, text = http(port, "/metrics")
    check(status == 200, "/metrics answers")
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def generate_alone(prompt, n):
    out = subprocess.run([VQ, "generate", "-m", MODEL, "-p", prompt, "-n", str(n), "--kv", KV, "-c", str(CTX),
                          "-t", "2"], capture_output=True, text=True, check=True).stdout
    check(out.startswith(prompt), "generate echoes its prompt")
    return out[len(prompt):].rstrip("\n")


def main():
    port = free_port()
    server = subprocess.Popen([VQ, "serve", "-m", MODEL, "--kv", KV, "-c", str(CTX), "--port", str(port),
                               "--api-key", KEY, "--parallel", "16", "--max-body", "64K", "-t", "2"],
                              stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(600):
            try:
                if http(port, "/health", key=None)[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        else:
            raise SystemExit("FAIL: the server did not start")
        run(port)
        check(server.poll() is None, "the server is still running")
    finally:
        server.terminate()
        server.wait(timeout=30)
    print("serve: all checks passed")


def run(port):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)
    models = client.models.list()
    check(len(models.data) == 1, "/v1/models lists the model")

    # Completions, not streamed: greedy text equals generate's; usage counts match the tokenizer.
    prompt = "The capital of France is"
    want = generate_alone(prompt, 12)
    c = client.completions.create(model="m", prompt=prompt, max_tokens=12, temperature=0)
    check(c.choices[0].text == want, f"completion text {c.choices[0].text!r} == generate's {want!r}")
    check(c.choices[0].finish_reason == "length", "finish_reason length at max_tokens")
    n_prompt = len(json.loads(http(port, "/tokenize", {"content": prompt, "add_special": True})[1])["tokens"])
    check(c.usage.prompt_tokens == n_prompt, f"prompt_tokens {c.usage.prompt_tokens} == tokenizer's {n_prompt}")
    check(c.usage.completion_tokens == 12, "completion_tokens == 12")
    check(c.usage.total_tokens == n_prompt + 12, "total_tokens")

    # Streamed, the same text in pieces, ending with a finish reason (and usage when asked for).
    pieces, finish, usage = [], None, None
    for ev in client.completions.create(model="m", prompt=prompt, max_tokens=12, temperature=0, stream=True,
                                        stream_options={"include_usage": True}):
        if ev.choices:
            pieces.append(ev.choices[0].text)
            finish = ev.choices[0].finish_reason or finish
        if ev.usage:
            usage = ev.usage
    check("".join(pieces) == want, "streamed text == generate's")
    check(finish == "length" and usage and usage.completion_tokens == 12, "stream finish and usage")

    # Stop sequences: the text ends before the first stop, finish_reason stop.
    stop = want.split()[2]
    c = client.completions.create(model="m", prompt=prompt, max_tokens=12, temperature=0, stop=[stop, "zzz"])
    check(c.choices[0].finish_reason == "stop" and c.choices[0].text == want[:want.index(stop)],
          f"stop at {stop!r}: {c.choices[0].text!r}")
    pieces = [ev.choices[0].text for ev in client.completions.create(
        model="m", prompt=prompt, max_tokens=12, temperature=0, stop=stop, stream=True) if ev.choices]
    check("".join(pieces) == want[:want.index(stop)], "streamed stop")

    # logprobs on completions.
    c = client.completions.create(model="m", prompt=prompt, max_tokens=3, temperature=0, logprobs=2)
    lp = c.choices[0].logprobs
    check(len(lp.tokens) == 3 and len(lp.top_logprobs[0]) >= 1 and lp.token_logprobs[0] <= 0, "logprobs")

    # Chat, not streamed and streamed; a seeded sampled reply repeats.
    msgs = [{"role": "user", "content": "Name a color."}]
    a = client.chat.completions.create(model="m", messages=msgs, max_tokens=10, temperature=0)
    s = "".join(ev.choices[0].delta.content or "" for ev in client.chat.completions.create(
        model="m", messages=msgs, max_tokens=10, temperature=0, stream=True) if ev.choices)
    check(a.choices[0].message.content == s and len(s) > 0, "chat streamed == not streamed")
    r1 = client.chat.completions.create(model="m", messages=msgs, max_tokens=10, temperature=1.0, seed=7)
    r2 = client.chat.completions.create(model="m", messages=msgs, max_tokens=10, temperature=1.0, seed=7)
    check(r1.choices[0].message.content == r2.choices[0].message.content, "a seed repeats a sampled reply")

    # A second turn prefills only the new turn: the first turn's cache is reused.
    turn1 = [{"role": "user", "content": "Tell me about the sea."}]
    a1 = client.chat.completions.create(model="m", messages=turn1, max_tokens=16, temperature=0)
    before = metrics(port)
    turn2 = turn1 + [{"role": "assistant", "content": a1.choices[0].message.content},
                     {"role": "user", "content": "And about rivers?"}]
    a2 = client.chat.completions.create(model="m", messages=turn2, max_tokens=8, temperature=0)
    cached = a2.usage.prompt_tokens_details.cached_tokens
    after = metrics(port)
    reused = after["veloxquant_prompt_tokens_reused_total"] - before["veloxquant_prompt_tokens_reused_total"]
    check(cached >= a1.usage.prompt_tokens and reused == cached,
          f"second turn reuses the first ({cached} cached of {a2.usage.prompt_tokens}; metrics {reused})")

    # 16 concurrent streaming clients at temperature 0: each gets generate's text for its prompt.
    prompts = [f"Here is fact number {i} about the ocean:" for i in range(16)]
    alone = {p: generate_alone(p, 16) for p in prompts}

    def streamed(p):
        cl = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key=KEY, max_retries=0)
        return "".join(ev.choices[0].text for ev in cl.completions.create(
            model="m", prompt=p, max_tokens=16, temperature=0, stream=True) if ev.choices)

    before = metrics(port)
    with cf.ThreadPoolExecutor(16) as ex:
        got = dict(zip(prompts, ex.map(streamed, prompts)))
    for p in prompts:
        check(got[p] == alone[p], f"concurrent {p!r}: {got[p]!r} != alone {alone[p]!r}")
    after = metrics(port)
    passes = after["veloxquant_forward_passes_total"] - before["veloxquant_forward_passes_total"]
    tokens = after["veloxquant_generated_tokens_total"] - before["veloxquant_generated_tokens_total"]
    check(tokens == 16 * 16 and passes < tokens / 2, f"the 16 streams shared passes ({passes} for {tokens} tokens)")

    # Errors: OpenAI-style objects with the right statuses, and the server keeps serving.
    def err(status_want, path, body=None, raw=None, key=KEY):
        status, text = http(port, path, body, key=key, raw=raw)
        check(status == status_want, f"{path} {raw or body}: status {status}, want {status_want}: {text}")
        e = json.loads(text)["error"]
        check(set(e) >= {"message", "type", "code"}, f"error object {e}")

    err(400, "/v1/completions", raw=b"{not json")
    err(400, "/v1/completions", {"prompt": 5})
    err(400, "/v1/completions", {"prompt": "x", "max_tokens": "ten"})
    err(400, "/v1/completions", {"prompt": "x", "temperature": -1})
    err(400, "/v1/completions", {"prompt": "x", "n": 2})
    err(400, "/v1/chat/completions", {"messages": "hi"})
    err(400, "/v1/chat/completions", {"messages": [{"role": "wizard", "content": "x"}]})
    err(400, "/v1/completions", {"prompt": "word " * (CTX + 10)})
    err(413, "/v1/completions", raw=json.dumps({"prompt": "x" * 100000}).encode())
    err(401, "/v1/completions", {"prompt": "x"}, key=None)
    err(401, "/v1/completions", {"prompt": "x"}, key="wrong")
    err(404, "/v1/nothing", {"prompt": "x"})
    with_key_model = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="wrong", max_retries=0)
    try:
        with_key_model.completions.create(model="m", prompt="x", max_tokens=1)
        check(False, "a wrong key is refused")
    except openai.AuthenticationError:
        pass

    # A client that leaves mid-stream: its sequence is freed, nothing else is disturbed.
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions",
                                 data=json.dumps({"prompt": "Once upon a time", "max_tokens": 400,
                                                  "temperature": 0, "stream": True}).encode())
    req.add_header("Authorization", f"Bearer {KEY}")
    r = urllib.request.urlopen(req, timeout=60)
    r.read(200)
    r.close()
    for _ in range(200):
        if metrics(port)["veloxquant_sequences_active"] == 0:
            break
        time.sleep(0.1)
    check(metrics(port)["veloxquant_sequences_active"] == 0, "a client that left frees its sequence")
    c = client.completions.create(model="m", prompt=prompt, max_tokens=12, temperature=0)
    check(c.choices[0].text == want, "the server still answers the same after all that")


if __name__ == "__main__":
    main()
