#!/usr/bin/python3
"""Compares the operators `dsopt --list-ops` prints (the importer's table)
with the list of docs/importer.md between its supported-ops markers: the
same names, in each domain, with the counts the page states."""

import re
import subprocess
import sys


def listed(dsopt):
    out = subprocess.run([dsopt, "--list-ops"], check=True,
                         capture_output=True, text=True).stdout
    ops, domain = {}, None
    for line in out.splitlines():
        if not line.startswith("  "):
            domain = line.split(" ")[0]
            ops[domain] = []
        else:
            ops[domain].append(line.split()[0])
    return ops


def documented(page):
    text = open(page).read()
    block = re.search(r"<!-- supported-ops: begin -->(.*)<!-- supported-ops: end -->",
                      text, re.S)
    if not block:
        sys.exit(f"{page}: no supported-ops list")
    ops = {}
    for item in re.split(r"\n\* ", "\n" + block.group(1).strip()):
        if not item.strip():
            continue
        m = re.match(r"`([^`]+)`[^(]*\((\d+)\): (.*)", " ".join(item.split()), re.S)
        if not m:
            sys.exit(f"{page}: unreadable entry: {item!r}")
        names = [n.strip() for n in m.group(3).split(",")]
        if len(names) != int(m.group(2)):
            sys.exit(f"{page}: {m.group(1)} says {m.group(2)} operators "
                     f"but names {len(names)}")
        ops[m.group(1)] = names
    return ops


def main():
    dsopt, page = sys.argv[1], sys.argv[2]
    table, docs = listed(dsopt), documented(page)
    problems = []
    for domain in sorted(set(table) | set(docs)):
        t, d = set(table.get(domain, [])), set(docs.get(domain, []))
        for name in sorted(t - d):
            problems.append(f"{domain}: {name} is supported but not in {page}")
        for name in sorted(d - t):
            problems.append(f"{domain}: {name} is in {page} but not supported")
    for p in problems:
        print("MISMATCH:", p)
    total = sum(len(v) for v in table.values())
    print(f"list-ops: {total} operators in {len(table)} domains; "
          f"{len(problems)} mismatches")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
