#!/usr/bin/env python3
"""Writes a varied, deterministic test corpus for tokenizer comparisons: one {"text": ...} JSON
object per line, at least --min-bytes in all.

Sources: this repository's own code and docs; translations of Debian's programs
(/usr/share/locale/*/LC_MESSAGES/*.mo: dozens of languages and scripts); and generated text
aimed at tokenizer edge cases (emoji and ZWJ sequences, digits, whitespace runs of every kind,
special-token strings and near misses, text that is not in NFC, case-folding traps, code points
from many Unicode blocks). Needs only the standard library.
"""
import argparse
import glob
import json
import os
import random
import struct

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>",
            "<|begin_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>",
            "<|reserved_special_token_5|>", "<|im_sta", "im_end|>", "<|", "|>", "<<|im_end|>>"]


def mo_strings(path):
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 28:
        return []
    magic = struct.unpack("<I", data[:4])[0]
    end = "<" if magic == 0x950412de else ">"
    try:
        _, count, _, table = struct.unpack(end + "4I", data[4:20])
        out = []
        for i in range(count):
            length, offset = struct.unpack(end + "2I", data[table + 8 * i: table + 8 * i + 8])
            s = data[offset: offset + length].decode("utf-8")
            if s and not s.startswith("Project-Id-Version"):
                out.extend(p for p in s.split("\0") if p)
        return out
    except (struct.error, UnicodeDecodeError):
        return []


def chunks(text, size):
    for i in range(0, len(text), size):
        yield text[i: i + size]


def repo_docs(root, rng):
    files = []
    for pattern in ("**/*.cc", "**/*.h", "**/*.py", "**/*.md", "**/*.yaml", "**/*.sh", "**/*.proto", "**/*.txt"):
        files += glob.glob(os.path.join(root, pattern), recursive=True)
    files = sorted(f for f in files if "/build" not in f and "/.git/" not in f)
    for f in files:
        try:
            text = open(f, encoding="utf-8").read()
        except (UnicodeDecodeError, OSError):
            continue
        for piece in chunks(text, rng.randint(300, 3000)):
            yield piece


def translations(rng, per_language):
    by_lang = {}
    for path in sorted(glob.glob("/usr/share/locale/*/LC_MESSAGES/*.mo")):
        lang = path.split("/")[4]
        by_lang.setdefault(lang, []).append(path)
    langs = sorted(by_lang)
    rng.shuffle(langs)
    for lang in langs:
        paths = by_lang[lang]
        strings = []
        for p in paths:
            strings += mo_strings(p)
            if sum(map(len, strings)) > per_language:
                break
        rng.shuffle(strings)
        text = "\n".join(strings)[:per_language]
        for piece in chunks(text, 1500):
            yield piece


BLOCKS = [(0x20, 0x7E), (0xA0, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x530, 0x58F), (0x590, 0x5FF),
          (0x600, 0x6FF), (0x900, 0x97F), (0x980, 0x9FF), (0xE00, 0xE7F), (0x10A0, 0x10FF), (0x1100, 0x11FF),
          (0x1E00, 0x1EFF), (0x2000, 0x206F), (0x20A0, 0x20CF), (0x2100, 0x214F), (0x2190, 0x21FF),
          (0x2200, 0x22FF), (0x2500, 0x257F), (0x3000, 0x303F), (0x3040, 0x30FF), (0x4E00, 0x4FFF),
          (0xAC00, 0xAD00), (0xFF00, 0xFFEF), (0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F900, 0x1F9FF),
          (0x10000, 0x1007F), (0x1D400, 0x1D4FF), (0x20000, 0x2007F)]
EMOJI = ["😀", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇩🇪", "🇯🇵", "❤️", "🧑🏿‍💻", "🤖", "✨", "🔥", "1️⃣", "©️"]
WS = [" ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", "\u00a0", "\u3000", "\u2009", " \n ", "\t\t\n", "\u2028",
      "\u0085", "\u200b", "\x0b", "\x0c"]


def generated(rng, count):
    for _ in range(count):
        kind = rng.randrange(7)
        parts = []
        for _ in range(rng.randint(20, 120)):
            r = rng.random()
            if kind == 0 or r < 0.15:
                lo, hi = rng.choice(BLOCKS)
                parts.append("".join(chr(rng.randint(lo, hi)) for _ in range(rng.randint(1, 8))))
            elif kind == 1 or r < 0.3:
                parts.append(rng.choice(EMOJI) * rng.randint(1, 3))
            elif kind == 2 or r < 0.45:
                parts.append(rng.choice([str(rng.randint(0, 10 ** rng.randint(1, 18))), "3.14159", "1,000,000",
                                         "2026-11-22", "0x1F", "1e-10", "٣٤٥", "१२३", "¾", "²"]))
            elif kind == 3 or r < 0.6:
                parts.append(rng.choice(WS) * rng.randint(1, 40))
            elif kind == 4 or r < 0.7:
                parts.append(rng.choice(SPECIALS))
            elif kind == 5 or r < 0.8:
                # Not in NFC: decomposed accents, Hangul jamo, compatibility forms, case traps.
                parts.append(rng.choice(["e\u0301", "A\u030a", "\u1100\u1161\u11a8", "ﬁ", "Ⅻ", "K", "ſ",
                                         "İstanbul", "ß", "ǅ", "o\u0308\u0304", "\u0915\u094d\u0937",
                                         "n\u0303", "Å", "Ω"]))
            else:
                parts.append(rng.choice(["don't", "I'LL", "we'Re", "it'ſ", "'s", "'S", "can't",
                                         "def f(x):\n    return x**2\n", "if (a && b) { c(); }",
                                         "naïve café", "Привет, мир!", "你好，世界。", "مرحبا بالعالم",
                                         "こんにちは世界", "안녕하세요", "שלום", "γειά σου κόσμε"]))
            if rng.random() < 0.5:
                parts.append(rng.choice([" ", "", "\n", ", ", ". "]))
        yield "".join(parts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--repo", required=True)
    ap.add_argument("--min-bytes", type=int, default=1 << 20)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    docs = []
    total = 0
    stats = {}

    def take(name, source, budget):
        nonlocal total
        used = 0
        for text in source:
            if used >= budget:
                break
            docs.append(text)
            n = len(text.encode("utf-8"))
            used += n
            total += n
        stats[name] = stats.get(name, 0) + used

    take("generated", generated(rng, 10 ** 6), 400_000)
    take("translations", translations(rng, 2500), 700_000)
    take("code", repo_docs(args.repo, rng), 300_000)
    take("generated", generated(rng, 10 ** 6), max(0, args.min_bytes - total))
    with open(args.out, "w", encoding="utf-8") as f:
        for d in docs:
            f.write(json.dumps({"text": d}, ensure_ascii=False) + "\n")
    print(json.dumps({"documents": len(docs), "bytes": total, "by_source": stats}))


if __name__ == "__main__":
    main()
