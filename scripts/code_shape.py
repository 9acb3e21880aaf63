#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The shape rules of CONTRIBUTING.md, checked on the C++ tree.

  scripts/code_shape.py [--root DIR] [--list-functions N]

Reports, and exits 1 when any is found:
  - a source file over 800 lines whose opening comment does not say why
    ("long because ...");
  - a function over 120 lines (signature to closing brace) whose first
    comment (the lines just above it, or the first lines of its body) does
    not say why ("long because ...");
  - two modules that include each other: a module is a header and its .cc
    (x.h, x.cc); x and y include each other when a file of x includes y.h
    and a file of y includes x.h.
Checked folders: the libraries' (base, plan, scheduler, hf, compiler,
datalayer, datasets, launcher, runtime, cli, bench). Function detection
relies on clang-format's layout (a definition starts at column 0, or at
column 2 inside a class body, and ends with a lone "}" at its own column),
which scripts/format.sh keeps.
"""
import argparse
import os
import re
import sys
from collections import defaultdict

FOLDERS = ["base", "plan", "scheduler", "hf", "compiler", "datalayer", "datasets", "launcher", "runtime", "cli",
           "bench"]
MAX_FILE_LINES = 800
MAX_FUNCTION_LINES = 120
REASON = re.compile(r"long because", re.IGNORECASE)
NOT_A_FUNCTION = re.compile(r"^(#|//|/\*|\*|namespace\b|class\b|struct\b|enum\b|union\b|using\b|typedef\b|"
                            r"template\s*<|static_assert\b|extern\b|friend\b|}|\)|public:|private:|protected:)")


def sources(root):
    for folder in FOLDERS:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if name.endswith((".cc", ".h")):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def opening_comment(lines):
    text = []
    for line in lines:
        if line.startswith("//"):
            text.append(line)
        elif line.strip() == "" and not text:
            continue
        else:
            break
    return "\n".join(text)


CONTROL = re.compile(r"^\s*(if|for|while|switch|else|do|try|catch|return|case|default)\b")


def functions(lines):
    """(name, first line index, last line index) of each definition: at
    column 0, or a member defined inside a class body (indented by 2)."""
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i]
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if (indent not in (0, 2) or not body or NOT_A_FUNCTION.match(body) or CONTROL.match(line) or
                "(" not in line or (indent == 2 and i > 0 and lines[i - 1].rstrip().endswith(","))):
            i += 1
            continue
        head = body.split("(", 1)[0]
        if "=" in head or "[" in head or head.endswith(("return", "new")):
            i += 1
            continue
        # The signature runs to a line ending in "{" (a definition) or ";" (a declaration).
        j = i
        while j < n and not lines[j].rstrip().endswith("{") and not lines[j].rstrip().endswith(";"):
            if j > i and lines[j] and len(lines[j]) - len(lines[j].lstrip(" ")) <= indent:
                break
            j += 1
        if j >= n or not lines[j].rstrip().endswith("{"):
            i = j + 1 if j > i else i + 1
            continue
        close = " " * indent + "}"
        k = j + 1
        while k < n and lines[k].rstrip() != close:
            k += 1
        if k >= n:
            break
        name = head.split()[-1] if head.split() else head
        yield name, i, k
        i = k + 1


def first_comment_says_why(lines, start, body):
    above = []
    m = start - 1
    while m >= 0 and (lines[m].lstrip().startswith("//") or lines[m].startswith("template")):
        above.append(lines[m])
        m -= 1
    inside = []
    for line in lines[body + 1:body + 8]:
        if line.lstrip().startswith("//"):
            inside.append(line)
        elif inside:
            break
    return bool(REASON.search("\n".join(above)) or REASON.search("\n".join(inside)))


def module_of(path):
    return os.path.splitext(path)[0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--list-functions", type=int, default=0, metavar="N",
                        help="also print every function of N lines or more")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    problems = []
    includes = defaultdict(set)  # module -> modules it includes
    modules = set()
    for path in sources(root):
        with open(os.path.join(root, path), encoding="utf-8") as f:
            lines = f.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        modules.add(module_of(path))
        for line in lines:
            m = re.match(r'#include "([^"]+)\.h"', line)
            if m:
                includes[module_of(path)].add(m.group(1))
        if len(lines) > MAX_FILE_LINES and not REASON.search(opening_comment(lines)):
            problems.append(f"{path}: {len(lines)} lines (over {MAX_FILE_LINES}) and its opening comment does not "
                            f"say why (\"long because ...\"): split it, or say why")
        for name, start, end in functions(lines):
            length = end - start + 1
            body = start
            while body <= end and not lines[body].rstrip().endswith("{"):
                body += 1
            if args.list_functions and length >= args.list_functions:
                print(f"{path}:{start + 1}: {name}: {length} lines")
            if length > MAX_FUNCTION_LINES and not first_comment_says_why(lines, start, body):
                problems.append(f"{path}:{start + 1}: function {name} is {length} lines (over {MAX_FUNCTION_LINES}) "
                                f"and its first comment does not say why (\"long because ...\"): split it, or say why")
    seen = set()
    for a in sorted(includes):
        for b in sorted(includes[a]):
            if b != a and b in modules and a in includes.get(b, ()) and (b, a) not in seen:
                seen.add((a, b))
                problems.append(f"{a}.{{h,cc}} and {b}.{{h,cc}} include each other: move what both need into a "
                                f"third file, or invert one dependency")
    for p in problems:
        print(p)
    print(f"code_shape: {len(problems)} problem(s)" if problems else "code_shape: clean", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
