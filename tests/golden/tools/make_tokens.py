#!/usr/bin/env python3
"""Drive llama-tokenize over a fixed list of strings; write golden/tokens.json.
Each string is written byte-exact to a temp file and passed with
  llama-tokenize -m MODEL -f FILE --ids --no-escape --log-disable [--no-bos]
(also without --ids to capture the pieces). parse_special stays at the default (on)."""
import json, subprocess, tempfile, os, sys, re

LLAMA = "/work/oracle/llama.cpp/build/bin/llama-tokenize"
MODEL = "/work/oracle/gemma-3-270m-q4_k_m.gguf"
WIKI = "/work/shared/data/wikitext-2-raw-test.txt"
OUT = "/work/oracle/golden/tokens.json"

lines = open(WIKI, encoding="utf-8").read().split("\n")
def wl(n):  # 1-based line number, without the trailing LF
    return lines[n - 1]

cases = [
    ("wikitext line 1 (title)", wl(1)),
    ("wikitext line 1 with its trailing LF", wl(1) + "\n"),
    ("wikitext line 2 (long, @-@)", wl(2)),
    ("wikitext line 1180 (@,@)", wl(1180)),
    ("wikitext line 738 (@.@)", wl(738)),
    ("wikitext line 1176 (é)", wl(1176)),
    ("wikitext line 5 (– en dash)", wl(5)),
    ("wikitext line 16 (– and CJK)", wl(16)),
    ("wikitext lines 1-3 joined with LF", "\n".join(lines[0:3]) + "\n"),
    ("CJK", "日本語のテキストと中文文本。"),
    ("emoji", "I love 🦙 and 🤖! 👍🏽"),
    ("accented", "Café naïve façade — résumé, Ångström, São Paulo"),
    ("Cyrillic", "Привет, мир! Съешь же ещё этих мягких французских булок."),
    ("newlines run", "\n\n\n"),
    ("text with newline runs", "a\n\nb\n\n\nc"),
    ("spaces run", "a    b"),
    ("tabs", "a\tb\t\tc\n\tindented"),
    ("leading space", " Hello"),
    ("trailing spaces", "Hello   "),
    ("only spaces", "    "),
    ("empty string", ""),
    ("python code", "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n"),
    ("digits", "12345678"),
    ("mixed", "Hello, world!"),
    ("prompt: capital", "The capital of France is"),
    ("prompt: fibonacci", "def fibonacci(n):"),
    ("prompt: once", "Once upon a time,"),
    ("special token text (parse_special on)", "<start_of_turn>user\nHi<end_of_turn>\n"),
    ("URL and punctuation", "See https://example.com/a?b=1&c=2 (v1.2.3) -- ok..."),
    ("CRLF", "line1\r\nline2\r\n"),
]

def tok(path, bos, ids=True):
    cmd = [LLAMA, "-m", MODEL, "-f", path, "--no-escape", "--log-disable"]
    if ids: cmd.append("--ids")
    if not bos: cmd.append("--no-bos")
    r = subprocess.run(cmd, capture_output=True, check=True)
    return r.stdout.decode("utf-8", errors="replace")

out = []
with tempfile.TemporaryDirectory() as td:
    for i, (label, text) in enumerate(cases):
        p = os.path.join(td, f"s{i}.txt")
        with open(p, "wb") as f:
            f.write(text.encode("utf-8"))
        ids_bos = json.loads(tok(p, True).strip().splitlines()[-1])
        ids_nobos = json.loads(tok(p, False).strip().splitlines()[-1])
        pieces_raw = tok(p, False, ids=False)
        out.append({"label": label, "text": text, "utf8_bytes": len(text.encode("utf-8")),
                    "add_bos": True, "ids": ids_bos, "ids_no_bos": ids_nobos,
                    "pieces_no_bos_raw": pieces_raw})
        print(f"{label!r}: {len(ids_bos)} tokens", file=sys.stderr)

with open(OUT, "w", encoding="utf-8") as f:
    json.dump(out, f, ensure_ascii=False, indent=1)
print("wrote", OUT, len(out), "cases", file=sys.stderr)
