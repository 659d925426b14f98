#!/usr/bin/env python3
"""Lists functions longer than a limit (default 60 lines, body included).

Relies on the project's clang-format layout: a function defined at namespace scope starts on a
line at column 0 and its body ends with a `}` at column 0. Member functions defined inside a
class body are found by their indentation in the same way. Lambdas count toward the function
that holds them.

usage: test/tools/function_sizes.py [--limit N] [paths...]   (default: every .cpp/.h outside test/)
"""
import argparse
import os
import re
import subprocess
import sys

NOT_FUNCTION = re.compile(r'^\s*(namespace|struct|class|enum|union|extern|template\s*<[^>]*>\s*(struct|class))\b')


def functions(path):
    with open(path, encoding='utf-8', errors='replace') as f:
        lines = f.read().split('\n')
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.rstrip()
        if stripped.endswith('{') and not NOT_FUNCTION.match(stripped) and ')' in stripped \
                and not stripped.lstrip().startswith(('//', '#', 'if ', 'for ', 'while ', 'switch ', '} else', 'else', 'do ', 'try', 'catch')) \
                and '=' not in stripped.split('(')[0]:
            # The signature may start on earlier lines (wrapped parameters).
            start = i
            while start > 0 and lines[start - 1].strip() and not lines[start - 1].rstrip().endswith((';', '{', '}', '*/', ':')) \
                    and not lines[start - 1].lstrip().startswith(('//', '#')):
                start -= 1
            indent = len(lines[start]) - len(lines[start].lstrip())
            end = i + 1
            closing = ' ' * indent + '}'
            while end < len(lines) and not (lines[end].startswith(closing) and
                                             (len(lines[end]) == indent + 1 or lines[end][indent + 1] in ' ;/')):
                end += 1
            name = lines[start].strip()
            out.append((end - start + 1, start + 1, name[:90]))
            i = end + 1
            continue
        i += 1
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--limit', type=int, default=60)
    ap.add_argument('paths', nargs='*')
    args = ap.parse_args()
    root = subprocess.run(['git', 'rev-parse', '--show-toplevel'], capture_output=True, text=True,
                          check=True).stdout.strip()
    paths = args.paths
    if not paths:
        files = subprocess.run(['git', 'ls-files', '*.cpp', '*.h'], capture_output=True, text=True,
                               cwd=root, check=True).stdout.split()
        paths = [os.path.join(root, p) for p in files if not p.startswith('test/')]
    found = 0
    for p in sorted(paths):
        for length, line, name in functions(p):
            if length > args.limit:
                found += 1
                print(f'{length:5d} {os.path.relpath(p, root)}:{line}  {name}')
    return 1 if found else 0


if __name__ == '__main__':
    sys.exit(main())
