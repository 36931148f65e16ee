#!/usr/bin/env python3
"""Checks the lock annotations (common/thread_annotations.h) of some libraries with clang.

Compiles every .cc of the given targets with clang++ -fsyntax-only -Wthread-safety
-Werror=thread-safety, using the include paths, defines and standard of its entry in the build's
compile_commands.json (whatever compiler the build itself uses). Fails when clang reports a
violation, when a source has no entry (so the check cannot pass by checking nothing), or when
clang++ is missing.

Sources that use the build's precompiled LibTorch header (-include .../cmake_pch.hxx, whose .gch is
GCC's and unreadable to clang) get a clang one instead, made once per set of flags in a temporary
folder: parsing ATen for each source would take 10 s, the header made once takes about as long
and each source then about 3 s.

usage: thread_safety_check.py --compile-commands FILE --clang CLANG [--jobs N]
                              --target NAME SOURCE_DIR SOURCES [--target ...]
SOURCES is a ';'-separated list (CMake's $<TARGET_PROPERTY:NAME,SOURCES>); relative names are
taken relative to SOURCE_DIR. Only .cc files are checked (headers are checked through them).
"""
import argparse
import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

# From the build's flags, only what decides how the code parses is kept: clang does not know every
# GCC flag, and warnings other than thread safety are the build's business, not this check's.
KEPT_PREFIXES = ("-I", "-D", "-U", "-std=", "-isystem", "-iquote", "-include", "-pthread")
TAKES_VALUE = {"-I", "-D", "-U", "-isystem", "-iquote", "-include"}
CLANG_FLAGS = ["-Wthread-safety", "-Werror=thread-safety", "-Wno-unknown-warning-option"]


def parse_flags(entry):
    """The kept flags, and the build's precompiled header (None when the entry has none)."""
    args = entry.get("arguments") or shlex.split(entry["command"])
    kept, pch = [], None
    i = 1  # args[0] is the compiler
    while i < len(args):
        a = args[i]
        if a in TAKES_VALUE and i + 1 < len(args):
            if a == "-include" and os.path.exists(args[i + 1] + ".gch"):
                pch = args[i + 1]
            else:
                kept += [a, args[i + 1]]
            i += 2
            continue
        if a.startswith(KEPT_PREFIXES):
            kept.append(a)
        i += 1
    return kept, pch


def run(cmd, cwd):
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    return proc.returncode, " ".join(shlex.quote(c) for c in cmd), proc.stdout + proc.stderr, time.monotonic() - start


def make_pch(clang, header, flags, cwd, out):
    """clang's own precompiled `header` for sources compiled with `flags`; falls back to including
    the header as text (slower, same verdict) if clang cannot make one."""
    cmd = [clang, "-x", "c++-header", "-Wno-pragma-system-header-outside-header"] + flags + [header, "-o", out]
    rc, line, output, _ = run(cmd, cwd)
    if rc == 0:
        return ["-include-pch", out]
    print(f"note: clang could not precompile {header}; including it as text\n  {line}\n{output}")
    # -Xclang: past the driver, which would otherwise look for (GCC's) header.gch and refuse it.
    return ["-Xclang", "-include", "-Xclang", header]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--compile-commands", required=True)
    p.add_argument("--clang", required=True)
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--target", nargs=3, action="append", required=True, metavar=("NAME", "SOURCE_DIR", "SOURCES"))
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
    for name, source_dir, listed in opts.target:
        paths = [os.path.realpath(s if os.path.isabs(s) else os.path.join(source_dir, s))
                 for s in filter(None, listed.split(";"))]
        mine = [path for path in paths if path.endswith(".cc")]
        if not mine:
            print(f"no .cc sources given for {name}")
            return 1
        sources += [path for path in mine if path not in sources]
    missing = [s for s in sources if s not in entries]
    if missing:
        print("no compile command for: " + ", ".join(missing))
        return 1

    start = time.monotonic()
    plans = {}  # source -> (flags, build's precompiled header or None, directory)
    for s in sources:
        flags, pch = parse_flags(entries[s])
        plans[s] = (flags, pch, entries[s].get("directory", "."))
    with tempfile.TemporaryDirectory(prefix="eft-thread-safety-") as tmp, \
            concurrent.futures.ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        # One clang header per distinct (header, flags), made before the sources that use it.
        wanted = {(pch, tuple(flags)): cwd for flags, pch, cwd in plans.values() if pch}
        keys = list(wanted)
        made = pool.map(lambda i: make_pch(clang, keys[i][0], list(keys[i][1]), wanted[keys[i]],
                                           os.path.join(tmp, f"{i}.pch")), range(len(keys)))
        pch_flags = dict(zip(keys, made))
        if keys:
            print(f"{len(keys)} precompiled header(s) in {time.monotonic() - start:.0f} s")

        def check(source):
            flags, pch, cwd = plans[source]
            extra = pch_flags[(pch, tuple(flags))] if pch else []
            return run([clang, "-fsyntax-only"] + CLANG_FLAGS + flags + extra + [source], cwd)

        failed = 0
        for source, (rc, cmd, output, seconds) in zip(sources, pool.map(check, sources)):
            if rc == 0:
                print(f"ok   {seconds:4.1f} s  {source}")
                continue
            failed += 1
            print(f"FAIL {seconds:4.1f} s  {source}\n  {cmd}\n{output}")
    print(f"{len(sources) - failed} of {len(sources)} sources pass clang's thread safety analysis "
          f"({time.monotonic() - start:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
