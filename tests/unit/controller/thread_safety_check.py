#!/usr/bin/env python3
"""Checks the controller's lock annotations (common/thread_annotations.h) with clang.

Compiles each given source with clang++ -fsyntax-only -Wthread-safety -Werror=thread-safety, using
the include paths, defines and standard of its entry in the build's compile_commands.json (whatever
compiler the build itself uses). Fails when clang reports a violation, when a source has no entry
(so the check cannot pass by checking nothing), or when clang++ is missing.

usage: thread_safety_check.py --compile-commands FILE --clang CLANG --source-dir DIR SOURCES
SOURCES may be ';'-separated lists (CMake's $<TARGET_PROPERTY:...,SOURCES>); relative names are
taken relative to --source-dir. Only .cc files are checked (headers are checked through them).
"""
import argparse
import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys

# From the build's flags, only what decides how the code parses is kept: clang does not know every
# GCC flag, and warnings other than thread safety are the build's business, not this check's.
KEPT_PREFIXES = ("-I", "-D", "-U", "-std=", "-isystem", "-iquote", "-include", "-pthread")
TAKES_VALUE = {"-I", "-D", "-U", "-isystem", "-iquote", "-include"}


def parse_flags(entry):
    args = entry.get("arguments") or shlex.split(entry["command"])
    kept = []
    i = 1  # args[0] is the compiler
    while i < len(args):
        a = args[i]
        if a in TAKES_VALUE and i + 1 < len(args):
            kept += [a, args[i + 1]]
            i += 2
            continue
        if a.startswith(KEPT_PREFIXES):
            kept.append(a)
        i += 1
    return kept


def check(clang, source, entry):
    cmd = [clang, "-fsyntax-only", "-Wthread-safety", "-Werror=thread-safety", "-Wno-unknown-warning-option"]
    cmd += parse_flags(entry) + [source]
    proc = subprocess.run(cmd, cwd=entry.get("directory", "."), capture_output=True, text=True)
    return proc.returncode, " ".join(shlex.quote(c) for c in cmd), proc.stdout + proc.stderr


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--compile-commands", required=True)
    p.add_argument("--clang", required=True)
    p.add_argument("--source-dir", required=True)
    p.add_argument("sources", nargs="+")
    opts = p.parse_args()

    clang = shutil.which(opts.clang) if opts.clang else None
    if not clang:
        print(f"clang++ not found ({opts.clang!r}): scripts/install-deps.sh installs it (Debian package clang)")
        return 1
    try:
        with open(opts.compile_commands) as f:
            entries = {os.path.realpath(os.path.join(e.get("directory", "."), e["file"])): e for e in json.load(f)}
    except (OSError, ValueError) as e:
        print(f"cannot read {opts.compile_commands}: {e} (configure with CMAKE_EXPORT_COMPILE_COMMANDS)")
        return 1

    sources = []
    for arg in opts.sources:
        for s in filter(None, arg.split(";")):
            path = os.path.realpath(s if os.path.isabs(s) else os.path.join(opts.source_dir, s))
            if path.endswith(".cc"):
                sources.append(path)
    if not sources:
        print("no .cc sources given")
        return 1
    missing = [s for s in sources if s not in entries]
    if missing:
        print("no compile command for: " + ", ".join(missing))
        return 1

    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        results = pool.map(lambda s: (s, *check(clang, s, entries[s])), sources)
        for source, rc, cmd, output in results:
            if rc == 0:
                print(f"ok   {source}")
                continue
            failed += 1
            print(f"FAIL {source}\n  {cmd}\n{output}")
    print(f"{len(sources) - failed} of {len(sources)} sources pass clang's thread safety analysis")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
