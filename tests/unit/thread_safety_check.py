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

usage: thread_safety_check.py --compile-commands FILE --clang CLANG [--jobs N] --source-root DIR
                              --target NAME SOURCE_DIR SOURCES [--target ...]
Sources that cannot break the rules are skipped, and counted: those that see no lock annotation,
because neither they nor any header of the project (under --source-root) they include, directly
or through others, includes common/thread_annotations.h or spells clang's attributes out. clang
only reports on annotated declarations, so their verdict is known without parsing them (most of
the trainer: LibTorch's headers make each such source cost seconds).

SOURCES is a ';'-separated list (CMake's $<TARGET_PROPERTY:NAME,SOURCES>); relative names are
taken relative to SOURCE_DIR. Only .cc files are checked (headers are checked through them).
"""
import argparse
import concurrent.futures
import json
import re
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


ANNOTATIONS_HEADER = "common/thread_annotations.h"
RAW_ATTRIBUTES = re.compile(r"__attribute__\s*\(\(\s*(capability|scoped_lockable|guarded_by|pt_guarded_by|"
                            r"requires_capability|locks_excluded|acquire_capability|release_capability|"
                            r"lock_returned)\b")
QUOTED_INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


class AnnotationFinder:
    """Whether a source sees any lock annotation, through the project's headers it includes
    (quoted includes, looked up next to the includer, then in the entry's -I/-iquote folders);
    headers outside `root` (system, LibTorch, generated protobuf) cannot carry the project's."""

    def __init__(self, root):
        self.root = os.path.realpath(root) + os.sep
        self.memo = {}  # path -> annotated (True/False), or None while being visited (include cycles)

    def annotated(self, source, include_dirs):
        return self._visit(os.path.realpath(source), include_dirs)

    def _visit(self, path, include_dirs):
        if path in self.memo:
            return bool(self.memo[path])
        self.memo[path] = None
        try:
            with open(path, errors="replace") as f:
                text = f.read()
        except OSError:
            text = ""
        found = path.endswith(os.sep + ANNOTATIONS_HEADER) or bool(RAW_ATTRIBUTES.search(text))
        for name in QUOTED_INCLUDE.findall(text):
            if found:
                break
            for folder in [os.path.dirname(path)] + include_dirs:
                candidate = os.path.realpath(os.path.join(folder, name))
                if os.path.isfile(candidate):
                    found = candidate.startswith(self.root) and self._visit(candidate, include_dirs)
                    break
        self.memo[path] = found
        return found


def include_dirs_of(flags, cwd):
    dirs, i = [], 0
    while i < len(flags):
        if flags[i] in ("-I", "-iquote") and i + 1 < len(flags):
            dirs.append(os.path.join(cwd, flags[i + 1]))
            i += 2
            continue
        if flags[i].startswith("-I") and len(flags[i]) > 2:
            dirs.append(os.path.join(cwd, flags[i][2:]))
        i += 1
    return dirs


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
    p.add_argument("--source-root", required=True)
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
    finder = AnnotationFinder(opts.source_root)
    skipped = []
    for s in sources:
        flags, pch = parse_flags(entries[s])
        cwd = entries[s].get("directory", ".")
        if finder.annotated(s, include_dirs_of(flags, cwd)):
            plans[s] = (flags, pch, cwd)
        else:
            skipped.append(s)
    sources = [s for s in sources if s in plans]
    print(f"{len(skipped)} source(s) skipped: they see no lock annotation")
    if not sources:
        print("nothing left to check: no source of these targets sees a lock annotation "
              f"({ANNOTATIONS_HEADER}); is --source-root right?")
        return 1
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
