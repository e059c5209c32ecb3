#!/usr/bin/env python3
"""Rewrites a CUDA source into C++ for the CUDA emulation (docs/runtime.md,
"The CUDA emulation"):

  callee<<<grid, block[, shared[, stream]]>>>(args...);
becomes
  ::dsemu::launch("callee", ::dsemu::config(grid, block, ...),
                  [&](auto &...dsemu_a) { callee(dsemu_a...); }, args...);

(the arguments are evaluated once, each emulated thread calls the kernel with
copies; a launch whose `shared` is not the literal 0 also passes the kernel's
address, `::dsemu::config(...).of(&callee)`, so that the emulation checks
its dynamic shared memory against what the kernel opted in to with
cudaFuncSetAttribute), and `extern __shared__ T name[];` becomes a pointer to the launch's
dynamic shared memory. A static `__shared__ T name...;` is followed, on its
line, by `::dsemu::fresh_shared(&name, sizeof(name));`: the first thread of
a block to pass the declaration fills the variable with all-ones bytes, as
the section of `__shared__` statics is at the block's start (GCC leaves a
static of a function template out of that section). Everything else is left as it is; a `#line` keeps the
compiler's messages on the original file's lines.

usage: rewrite_launches.py IN.cu OUT.cpp
"""
import re
import sys


class RewriteError(Exception):
    pass


def line_of(text, pos):
    return text.count("\n", 0, pos) + 1


def skip_back_space(text, i):
    while i >= 0 and text[i].isspace():
        i -= 1
    return i


def callee_start(text, end):
    """The start of the kernel expression that ends just before `end`:
    a (possibly qualified) name with template arguments."""
    i = skip_back_space(text, end - 1)
    while True:
        if i >= 0 and text[i] == ">":
            depth = 0
            while i >= 0:
                if text[i] == ">":
                    depth += 1
                elif text[i] == "<":
                    depth -= 1
                    if depth == 0:
                        break
                i -= 1
            if i < 0:
                raise RewriteError("unbalanced template arguments before <<<")
            i = skip_back_space(text, i - 1)
        j = i
        while j >= 0 and (text[j].isalnum() or text[j] == "_"):
            j -= 1
        if j == i:
            raise RewriteError("no kernel name before <<<")
        i = j
        if i >= 1 and text[i - 1:i + 1] == "::":
            i -= 2
            continue
        return i + 1


def balanced(text, start, open_ch, close_ch):
    """The index just past the `close_ch` matching text[start] == open_ch."""
    depth = 0
    i = start
    while i < len(text):
        c = text[i]
        if c in "\"'":
            i += 1
            while i < len(text) and text[i] != c:
                i += 2 if text[i] == "\\" else 1
            i += 1
            continue
        if c == open_ch:
            depth += 1
        elif c == close_ch:
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise RewriteError("unbalanced " + open_ch + close_ch)


def top_level_args(text):
    """The comma-separated arguments of `text` outside parentheses,
    brackets and braces."""
    args, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif c == "," and depth == 0:
            args.append(text[start:i].strip())
            start = i + 1
    args.append(text[start:].strip())
    return args


def rewrite(text):
    out = []
    pos = 0
    count = 0
    while True:
        k = text.find("<<<", pos)
        if k < 0:
            break
        line_start = text.rfind("\n", 0, k) + 1
        if "//" in text[line_start:k]:
            pos = k + 3  # in a comment
            continue
        start = callee_start(text, k)
        callee = text[start:k].strip()
        close = text.find(">>>", k)
        if close < 0:
            raise RewriteError("line %d: <<< without >>>" % line_of(text, k))
        config = text[k + 3:close].strip()
        p = close + 3
        while p < len(text) and text[p].isspace():
            p += 1
        if p >= len(text) or text[p] != "(":
            raise RewriteError("line %d: no argument list after >>>" % line_of(text, k))
        end = balanced(text, p, "(", ")")
        args = text[p + 1:end - 1].strip()
        name = re.sub(r"\s+", "", callee)
        parts = top_level_args(config)
        of = (".of(reinterpret_cast<const void *>(&%s))" % callee
              if len(parts) >= 3 and parts[2] != "0" else "")
        call = ('::dsemu::launch("%s", ::dsemu::config(%s)%s, '
                "[&](auto &...dsemu_a) { %s(dsemu_a...); }%s)"
                % (name, config, of, callee, (", " + args) if args else ""))
        # Keep the line count: the newlines of the launch follow it.
        newlines = text.count("\n", start, end) - call.count("\n")
        out.append(text[pos:start])
        out.append(call + "\n" * newlines)
        pos = end
        count += 1
    out.append(text[pos:])
    result = "".join(out)
    result = re.sub(
        r"extern\s+__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([\w:<>\s\*]+?)\s+(\w+)\s*\[\s*\]\s*;",
        lambda m: "%s *%s = static_cast<%s *>(::dsemu::dynamic_shared());"
        % (m.group(1), m.group(2), m.group(1)),
        result)
    result = SHARED.sub(fresh_shared, result)
    return result, count


SHARED = re.compile(r"(\bextern\s+)?\b__shared__\s+(?:__align__\(\s*\d+\s*\)\s+)?([^;{}()=]+?)\s*;")


def fresh_shared(m):
    """A static `__shared__` declaration followed by its fill."""
    text = m.string
    line_start = text.rfind("\n", 0, m.start()) + 1
    if m.group(1) or "//" in text[line_start:m.start()]:
        return m.group(0)
    decl = m.group(2)
    if "," in re.sub(r"<[^<>]*>", "", decl):
        raise RewriteError("line %d: a __shared__ declaration of several variables"
                           % line_of(text, m.start()))
    name = re.search(r"(\w+)\s*(?:\[[^\]]*\]\s*)*$", decl)
    if not name:
        raise RewriteError("line %d: no name in the __shared__ declaration" % line_of(text, m.start()))
    return "%s ::dsemu::fresh_shared(&%s, sizeof(%s));" % (m.group(0), name.group(1), name.group(1))


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    src, dst = sys.argv[1], sys.argv[2]
    with open(src, encoding="utf-8") as f:
        text = f.read()
    try:
        result, _ = rewrite(text)
    except RewriteError as e:
        sys.exit("rewrite_launches.py: %s: %s" % (src, e))
    with open(dst, "w", encoding="utf-8") as f:
        f.write('#line 1 "%s"\n' % src)
        f.write(result)


if __name__ == "__main__":
    main()
