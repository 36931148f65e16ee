#!/usr/bin/env python3
"""thread_safety_check.py against a small project of its own, checked by the real clang: a source that
breaks a GUARDED_BY fails the check, one that keeps it passes, and one that sees no annotation is
skipped uncompiled (it could not fail: clang reports only on annotated declarations). The project
uses the repository's own common/mutex.h and common/thread_annotations.h, so the check is tried on
the annotations the code base uses.

usage: thread_safety_check_test.py CLANG
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHECK = os.path.join(HERE, "thread_safety_check.py")
CLANG = sys.argv[1] if len(sys.argv) > 1 else "clang++"

COUNTER_H = """#pragma once
#include "common/mutex.h"
class Counter {
 public:
  void Add();
  int count_ GUARDED_BY(mu_) = 0;
  eft::Mutex mu_;
};
"""
# Reaches the annotations only through two project headers: the check follows includes.
WRAPPER_H = '#pragma once\n#include "lib/counter.h"\n'
BREAKS = '#include "lib/wrapper.h"\nvoid Counter::Add() { ++count_; }\n'
KEEPS = '#include "lib/counter.h"\nvoid Bump(Counter* c) { eft::MutexLock lock(&c->mu_); ++c->count_; }\n'
# Not valid C++ at all: a check that compiled it would fail, so passing shows it was skipped.
UNANNOTATED = '#include "lib/plain.h"\nthis does not compile;\n'
PLAIN_H = "#pragma once\n#include <vector>\n"


class ThreadSafetyCheckTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="eft-tsc-test-")
        self.addCleanup(shutil.rmtree, self.root)
        os.makedirs(os.path.join(self.root, "common"))
        for name in ("mutex.h", "thread_annotations.h"):
            shutil.copy(os.path.join(ROOT, "common", name), os.path.join(self.root, "common", name))
        self.write("lib/counter.h", COUNTER_H)
        self.write("lib/wrapper.h", WRAPPER_H)
        self.write("lib/plain.h", PLAIN_H)

    def write(self, name, text):
        path = os.path.join(self.root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text)
        return path

    def check(self, sources):
        """Runs the check over `sources` ({name: text}); returns (exit code, output)."""
        paths = [self.write(name, text) for name, text in sources.items()]
        commands = [{"directory": self.root, "file": p,
                     "command": f"/usr/bin/c++ -I{self.root} -std=c++17 -Wall -o x.o -c {p}"} for p in paths]
        db = self.write("compile_commands.json", json.dumps(commands))
        proc = subprocess.run([sys.executable, CHECK, "--compile-commands", db, "--clang", CLANG,
                               "--source-root", self.root, "--target", "lib", self.root, ";".join(paths)],
                              capture_output=True, text=True, timeout=300)
        return proc.returncode, proc.stdout + proc.stderr

    def test_a_broken_rule_fails_and_names_the_source(self):
        rc, out = self.check({"lib/breaks.cc": BREAKS, "lib/keeps.cc": KEEPS})
        self.assertEqual(rc, 1, out)
        self.assertRegex(out, r"FAIL .*lib/breaks\.cc")
        self.assertIn("requires holding mutex 'mu_'", out)
        self.assertRegex(out, r"ok .*lib/keeps\.cc")
        self.assertIn("1 of 2 sources pass", out)

    def test_a_source_without_annotations_is_skipped_and_counted(self):
        rc, out = self.check({"lib/keeps.cc": KEEPS, "lib/unannotated.cc": UNANNOTATED})
        self.assertEqual(rc, 0, out)
        self.assertIn("1 source(s) skipped: they see no lock annotation", out)
        self.assertNotIn("unannotated.cc", out.replace("skipped", ""))
        self.assertIn("1 of 1 sources pass", out)

    def test_nothing_to_check_is_a_failure_not_a_pass(self):
        rc, out = self.check({"lib/unannotated.cc": UNANNOTATED})
        self.assertEqual(rc, 1, out)
        self.assertIn("nothing left to check", out)


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
