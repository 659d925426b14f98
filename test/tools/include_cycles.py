#!/usr/bin/env python3
"""Finds include cycles between the files of a directory tree and between its subdirectories.

A file-level cycle: a.h includes b.h which (through any chain) includes a.h. A directory-level
cycle: a file of agent/status includes a header of agent/ while a file of agent/ includes one of
agent/status (the .cpp files count: they are where the dependency is used).

usage: test/tools/include_cycles.py [dir=agent]    exit status 1 when a cycle is found
"""
import os
import re
import subprocess
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def edges(root, top):
    files = subprocess.run(['git', 'ls-files', top], capture_output=True, text=True, cwd=root,
                           check=True).stdout.split()
    graph = {}
    for f in files:
        if not f.endswith(('.h', '.cpp')):
            continue
        deps = set()
        with open(os.path.join(root, f), encoding='utf-8', errors='replace') as fh:
            for line in fh:
                m = INCLUDE.match(line)
                if m and m.group(1).startswith(top + '/'):
                    deps.add(m.group(1))
        graph[f] = deps
    return graph


def find_cycle(graph):
    state = {}
    stack = []

    def visit(n):
        state[n] = 1
        stack.append(n)
        for d in sorted(graph.get(n, ())):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state:
                c = visit(d)
                if c:
                    return c
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state:
            c = visit(n)
            if c:
                return c
    return None


def main():
    top = sys.argv[1] if len(sys.argv) > 1 else 'agent'
    root = subprocess.run(['git', 'rev-parse', '--show-toplevel'], capture_output=True, text=True,
                          check=True).stdout.strip()
    graph = edges(root, top)
    # File level: headers only (a .cpp is never included).
    cycle = find_cycle({f: d for f, d in graph.items() if f.endswith('.h')})
    bad = False
    if cycle:
        print('file include cycle: ' + ' -> '.join(cycle))
        bad = True
    dirs = {}
    why = {}
    for f, deps in graph.items():
        a = os.path.dirname(f)
        for d in deps:
            b = os.path.dirname(d)
            if a != b:
                dirs.setdefault(a, set()).add(b)
                why.setdefault((a, b), f + ' includes ' + d)
    cycle = find_cycle(dirs)
    if cycle:
        print('directory include cycle: ' + ' -> '.join(cycle))
        for a, b in zip(cycle, cycle[1:]):
            print('  ' + why[(a, b)])
        bad = True
    if not bad:
        print(f'no include cycle in {top}/ ({len(graph)} files, {len(dirs)} directories with '
              'dependencies)')
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
