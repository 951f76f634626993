"""Hostile and malformed requests mixed with valid ones against `veloxquant serve`.

  hostile_test.py VELOXQUANT MODEL [N]

Sends N requests (default 1000) from several threads: garbage bytes, broken request lines and
headers, bodies that are not JSON or JSON of the wrong shape, wrong types and ranges, invalid
UTF-8, deep nesting, huge numbers, oversized bodies, bodies shorter than their Content-Length,
clients that stall or vanish mid-request or mid-stream; one in ten is a valid request whose
answer is checked against the same request sent alone first. Fails on a crash, a lost or wrong
valid answer, a hostile request answered 2xx, an error that is not an OpenAI error object, or a
sequence left active at the end.
"""
import concurrent.futures as cf
import json
import random
import socket
import subprocess
import sys
import time

VQ, MODEL = sys.argv[1], sys.argv[2]
N = int(sys.argv[3]) if len(sys.argv) > 3 else 1000


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fail(what):
    raise SystemExit(f"FAIL: {what}")


def raw_exchange(port, data, read=True, timeout=60):
    """Sends bytes and returns (status, body) of the reply, or (None, b'') when the server closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        if not read:
            return None, b""
        chunks = []
        while True:
            try:
                b = s.recv(65536)
            except (ConnectionResetError, socket.timeout):
                break
            if not b:
                break
            chunks.append(b)
    reply = b"".join(chunks)
    if not reply.startswith(b"HTTP/1.1 "):
        return None, reply
    head, _, body = reply.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    if b"transfer-encoding: chunked" in head.lower():
        out, rest = b"", body
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line.split(b";")[0] or b"0", 16)
            if size == 0:
                break
            out, rest = out + rest[:size], rest[size + 2:]
        body = out
    return status, body


def post(path, body, headers=()):
    head = f"POST {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: {len(body)}\r\n"
    head += "".join(f"{h}\r\n" for h in headers)
    return head.encode() + b"\r\n" + body


def valid_request(i):
    body = {"prompt": f"Number {i % 7} is", "max_tokens": 3, "temperature": 0}
    return post("/v1/completions", json.dumps(body).encode(), ["Content-Type: application/json"])


def hostile_request(rng):
    k = rng.randrange(22)
    js = lambda o: post("/v1/completions", json.dumps(o).encode())
    if k == 0:
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 400)))
    if k == 1:
        return b"GARBAGE / HTTP/9.9\r\n\r\n"
    if k == 2:
        return b"POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n"
    if k == 3:
        return b"POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"prompt\""  # short body
    if k == 4:
        return post("/v1/completions", b"{\"prompt\": \"\xff\xfe\xfd\", \"max_tokens\": 1, \"temperature\": 0, ")
    if k == 5:
        return post("/v1/completions", b"[" * 50000 + b"]" * 50000)
    if k == 6:
        return js({"prompt": "x", "max_tokens": 10 ** 30})
    if k == 7:
        return js({"prompt": "x", "temperature": "hot"})
    if k == 8:
        return js({"prompt": ["a", "b"]})
    if k == 9:
        return js({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})
    if k == 10:
        return js({"prompt": "x", "stop": [""]})
    if k == 11:
        return js({"prompt": "x", "top_p": 3})
    if k == 12:
        return post("/v1/chat/completions", json.dumps({"messages": []}).encode())
    if k == 13:
        return post("/v1/chat/completions", json.dumps({"messages": [{"content": "no role"}]}).encode())
    if k == 14:
        return post("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": 5}]}).encode())
    if k == 15:
        return post("/v1/completions", b"x" * (300 * 1024))  # over --max-body
    if k == 16:
        return b"POST /v1/completions HTTP/1.1\r\n" + b"X-Long: " + b"a" * 20000 + b"\r\n\r\n"
    if k == 17:
        return js({"prompt": "x", "logprobs": 99})
    if k == 18:
        return js({"prompt": "x", "max_tokens": -1})
    if k == 19:
        return js({"prompt": "x", "n": 3})
    if k == 20:
        return b"GET /v1/completions HTTP/1.1\r\n\r\n"
    return js({"prompt": {"nested": 1}})


def main():
    port = free_port()
    server = subprocess.Popen([VQ, "serve", "-m", MODEL, "--kv", "kivi", "-c", "256", "--port", str(port),
                               "--max-body", "256K", "--timeout", "2", "--parallel", "8", "-t", "2"],
                              stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(1200):
            try:
                if raw_exchange(port, b"GET /health HTTP/1.1\r\nConnection: close\r\n\r\n")[0] == 200:
                    break
            except OSError:
                time.sleep(0.1)
        else:
            fail("the server did not start")
        run(port)
        if server.poll() is not None:
            fail(f"the server exited: {server.stderr.read()[-2000:]}")
    finally:
        server.terminate()
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()
            fail("the server did not stop")
    print(f"hostile: {N} requests, no crash, every valid answer right")


def run(port):
    expected = {}
    for i in range(7):
        status, body = raw_exchange(port, valid_request(i))
        if status != 200:
            fail(f"valid request alone: {status} {body[:300]}")
        expected[i % 7] = json.loads(body)["choices"][0]["text"]
    rng = random.Random(1)
    plan = [("valid", i) if i % 10 == 0 else ("hostile", rng.random()) for i in range(N)]

    def one(item):
        kind, arg = item
        if kind == "valid":
            status, body = raw_exchange(port, valid_request(arg))
            if status != 200:
                return f"valid request {arg}: status {status} {body[:200]}"
            text = json.loads(body)["choices"][0]["text"]
            return None if text == expected[arg % 7] else f"valid request {arg}: {text!r} != {expected[arg % 7]!r}"
        r = random.Random(arg)
        data = hostile_request(r)
        if r.random() < 0.1:  # a client that vanishes, or stalls past the read timeout
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                    s.sendall(data[: max(1, len(data) // 2)])
                    if r.random() < 0.3:
                        time.sleep(2.5)
            except OSError:
                pass
            return None
        try:
            status, body = raw_exchange(port, data)
        except OSError:
            return None  # the server closed a connection it could not parse
        if status is None:
            return None
        if 200 <= status < 300:
            return f"hostile request answered {status}: {data[:120]!r}"
        if status >= 400 and body:
            try:
                e = json.loads(body)["error"]
                if not {"message", "type", "code"} <= set(e):
                    return f"error without message/type/code: {body[:200]}"
            except (ValueError, KeyError, TypeError):
                return f"an error that is not an OpenAI error object: {status} {body[:200]}"
        return None

    with cf.ThreadPoolExecutor(16) as ex:
        for problem in ex.map(one, plan):
            if problem:
                fail(problem)
    # A stream whose client vanishes mid-way, then the server must have nothing active.
    data = post("/v1/completions", json.dumps({"prompt": "Tell a story", "max_tokens": 200, "temperature": 0,
                                               "stream": True}).encode())
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        s.recv(100)
    for _ in range(300):
        status, body = raw_exchange(port, b"GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n")
        if b"veloxquant_sequences_active 0\n" in body:
            break
        time.sleep(0.1)
    else:
        fail("a sequence is still active after every client left")


if __name__ == "__main__":
    main()
