#!/usr/bin/python3
"""Reference chat-template rendering: Jinja2 configured as Hugging Face transformers configures it
for apply_chat_template (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loop controls,
its own tojson, raise_exception and strftime_now).

Usage: hf_chat_template.py CASES.json OUT.json
  CASES: [{"template": "...", "variables": {...}}, ...]
  OUT:   [{"ok": true, "text": "..."} | {"ok": false, "error": "...", "raised": bool}, ...]
Needs Debian's python3-jinja2 (run with /usr/bin/python3).
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Raised(Exception):
    pass


def raise_exception(message):
    raise Raised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def main():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    with open(sys.argv[1], encoding="utf-8") as f:
        cases = json.load(f)
    out = []
    for case in cases:
        try:
            text = env.from_string(case["template"]).render(**case["variables"])
            out.append({"ok": True, "text": text})
        except Raised as e:
            out.append({"ok": False, "raised": True, "error": str(e)})
        except Exception as e:  # noqa: BLE001 - any template error is an expected outcome here
            out.append({"ok": False, "raised": False, "error": f"{type(e).__name__}: {e}"})
    with open(sys.argv[2], "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
