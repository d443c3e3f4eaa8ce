#!/usr/bin/env python3
"""Builds the benchmark corpus: prompt files nobody picked, from sources any
Debian machine with Python and cargo can install.

    apt-get install manpages-de manpages-fr manpages-es manpages-ja manpages-zh
    scripts/corpus.py [--out target/corpus] [--seed 13] [--bytes 300000] [--only a,b]
    engram bench --model M --corpus target/corpus ...

One file per prompt (the bench runs every file of the directory):

  code-python.txt   the Python standard library of the interpreter running this
  code-rust.txt     crate sources in the cargo registry (~/.cargo/registry/src)
  man-de/-es/-fr/-ja/-zh.txt
                    Debian's translated man pages, roff markup stripped
  chat.txt          a chat-like mix: user turns of man-page prose in every
                    language, assistant turns of code and prose

Selection is deterministic for a given seed and the same installed sources:
files are listed in sorted order, shuffled by a seeded generator, and taken
(each capped, so no single file dominates) until the prompt holds --bytes
bytes (300,000 by default; measured with the vendored tokenizer, this
corpus holds 3.5 to 4.0 bytes per token, so every prompt has more than the
65,536 + 1,000 tokens of a 64K prefill and 1,000 decode steps). The output is build output (under target/,
ignored by git): nothing of it is committed. A hidden `.sources` file lists
what each prompt took.
"""

import argparse
import gzip
import os
import random
import re
import sys
import sysconfig
from pathlib import Path

LANGS = {
    "de": ["de"],
    "es": ["es"],
    "fr": ["fr"],
    "ja": ["ja"],
    "zh": ["zh_CN", "zh_TW"],
}
MAN_ROOT = Path("/usr/share/man")
# Caps per source document, so a prompt mixes many files.
CODE_CAP = 24_000
PROSE_CAP = 16_000


def listing(root, patterns, skip=()):
    """Sorted files under root matching any glob pattern, without skipped parts."""
    files = set()
    for pattern in patterns:
        for path in root.glob(pattern):
            if path.is_file() and not any(part in skip for part in path.parts):
                files.add(path)
    return sorted(files)


ESCAPES = [
    (re.compile(r"\\f(\(..|\[[^\]]*\]|.)"), ""),  # font changes
    (re.compile(r"\\s[+-]?\d+"), ""),  # size changes
    (re.compile(r"\\\*(\(..|\[[^\]]*\]|.)"), ""),  # strings
    (re.compile(r"\\\((em|en)"), "-"),
    (re.compile(r"\\\(aq"), "'"),
    (re.compile(r"\\\((lq|rq|dq)"), '"'),
    (re.compile(r"\\\(bu"), "*"),
    (re.compile(r"\\\(..|\\\[[^\]]*\]"), ""),  # other named glyphs
    (re.compile(r"\\[&|^%:]"), ""),  # zero-width marks
    (re.compile(r"\\-"), "-"),
    (re.compile(r"\\e"), "\\\\"),
    (re.compile(r"\\(.)"), r"\1"),  # any other escape: the character
]
# Requests whose arguments are text worth keeping.
TEXT_REQUESTS = {"SH", "SS", "TP", "IP", "B", "I", "BI", "BR", "IB", "IR", "RB", "RI", "SM", "SB", "UR", "MT", "Nm", "Nd", "Sh", "Ss", "It", "Fl", "Ar"}


def strip_roff(text):
    """Man page source to plain text: requests dropped (their text kept for
    headings and font macros), escapes resolved or dropped."""
    out = []
    for line in text.splitlines():
        if line.startswith(('.\\"', "'\\\"", '.\\#')) or line.strip() == ".":
            continue
        if line.startswith((".", "'")):
            parts = line[1:].strip().split(None, 1)
            if not parts or parts[0] not in TEXT_REQUESTS or len(parts) == 1:
                continue
            line = parts[1].replace('"', "")
        for pattern, replacement in ESCAPES:
            line = pattern.sub(replacement, line)
        out.append(line)
    text = "\n".join(out)
    return re.sub(r"\n{3,}", "\n\n", text).strip() + "\n"


def read_man(path):
    raw = path.read_bytes()
    if path.suffix == ".gz":
        raw = gzip.decompress(raw)
    text = raw.decode("utf-8", errors="replace")
    # A page that only includes another (`.so man1/foo.1`) says nothing.
    if text.lstrip().startswith(".so "):
        return ""
    return strip_roff(text)


def read_text(path):
    return path.read_text(encoding="utf-8", errors="replace")


def fill(files, read, budget, cap, rng, header):
    """Shuffled files' texts (each capped at a line end) until budget bytes."""
    files = list(files)
    rng.shuffle(files)
    parts, taken, size = [], [], 0
    for path in files:
        if size >= budget:
            break
        try:
            text = read(path)
        except OSError:
            continue
        if len(text.strip()) < 200:
            continue
        if len(text.encode()) > cap:
            cut = text.encode()[:cap].decode("utf-8", errors="ignore")
            text = cut[: cut.rfind("\n") + 1] or cut
        part = header(path) + text
        parts.append(part)
        taken.append(str(path))
        size += len(part.encode())
    return "".join(parts), taken, size


def paragraphs(text):
    return [p.strip() for p in re.split(r"\n\s*\n", text) if len(p.strip()) > 80]


def chat(sources, budget, rng):
    """User turns of prose (any language), assistant turns of code or prose."""
    prose = [p for lang in sorted(LANGS) for p in paragraphs(sources.get("man-" + lang, ""))]
    code = [p for key in ("code-python", "code-rust") for p in paragraphs(sources.get(key, ""))]
    if not prose or not code:
        return "", 0
    turns, size = [], 0
    while size < budget:
        question = rng.choice(prose)
        answer = rng.choice(code) if rng.random() < 0.6 else rng.choice(prose)
        fence = "```\n" if answer in code else ""
        turn = f"<|User|>{question}\n\n<|Assistant|>{fence}{answer}\n{fence}\n"
        turns.append(turn)
        size += len(turn.encode())
    return "".join(turns), size


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="target/corpus", help="output directory")
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--bytes", type=int, default=300_000, help="bytes per prompt file")
    ap.add_argument("--only", default="", help="comma-separated prompt names to write (default: all)")
    ap.add_argument("--stdlib", default=sysconfig.get_paths()["stdlib"], help="Python standard library")
    ap.add_argument("--registry", default=str(Path.home() / ".cargo/registry/src"), help="cargo registry sources")
    args = ap.parse_args()

    rng = random.Random(args.seed)
    sources, taken = {}, {}
    stdlib = Path(args.stdlib)
    py = listing(stdlib, ["**/*.py"], skip={"site-packages", "__pycache__"})
    rs = listing(Path(args.registry), ["*/*/src/**/*.rs"])
    sources["code-python"], taken["code-python"], _ = fill(
        py, read_text, args.bytes, CODE_CAP, random.Random(rng.random()),
        lambda p: f"# file: {p.relative_to(stdlib)}\n")
    sources["code-rust"], taken["code-rust"], _ = fill(
        rs, read_text, args.bytes, CODE_CAP, random.Random(rng.random()),
        lambda p: f"// file: {'/'.join(p.parts[-4:])}\n")
    for lang, dirs in LANGS.items():
        pages = [f for d in dirs for f in listing(MAN_ROOT / d, ["man*/*"])]
        sources["man-" + lang], taken["man-" + lang], _ = fill(
            pages, read_man, args.bytes, PROSE_CAP, random.Random(rng.random()),
            lambda p: f"\n== {p.name} ==\n")
    sources["chat"], _ = chat(sources, args.bytes, random.Random(rng.random()))
    taken["chat"] = ["paragraphs of the prompts above"]

    only = {n for n in args.only.split(",") if n}
    unknown = only - set(sources)
    if unknown:
        sys.exit(f"corpus.py: --only names unknown prompts {sorted(unknown)} (known: {sorted(sources)})")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    manifest = []
    for name, text in sources.items():
        if only and name not in only:
            continue
        size = len(text.encode())
        if size < args.bytes:
            print(f"corpus.py: warning: {name} has {size} bytes, less than {args.bytes} "
                  f"(install its source: see the module docs)", file=sys.stderr)
        if size == 0:
            continue
        (out / f"{name}.txt").write_text(text, encoding="utf-8")
        manifest.append(f"{name}.txt: {size} bytes, {len(taken[name])} sources\n")
        manifest.extend(f"  {t}\n" for t in taken[name])
        print(f"{out / (name + '.txt')}: {size} bytes from {len(taken[name])} sources")
    (out / ".sources").write_text("".join(manifest), encoding="utf-8")


if __name__ == "__main__":
    main()
