#!/usr/bin/env python3
"""Fails when two modules of one crate import each other.

For every crate of the workspace (the `members` of the root `Cargo.toml`), the module tree
is read from `src/lib.rs` and `src/main.rs` down through `mod name;` declarations (and
inline `mod name { … }` blocks). Every `crate::…` and `super::…` path in the code — in
`use` trees and in expressions, comments and string literals left out — is resolved to the
module it names, following `use` re-exports (`crate::Election` is the module that
`lib.rs` imports `Election` from).

A reference from module C to module M counts between the two siblings under their
deepest common ancestor that contain C and M: `a::x` using `b::y` is `a` using `b`. A
module using its own parent or child (a child using the items of its parent's `mod.rs`,
a parent using its children) is the normal shape and is not counted. A cycle is a set of
siblings that reach each other (`a` uses `b` and `b` uses `a`, or longer rings): each
is printed with one place per import, and the script exits 1.

A cycle listed in `KNOWN` below is printed as known and does not fail the check; a
`KNOWN` entry that no longer occurs fails it, so the list only shrinks.

Usage: scripts/check-cycles.py [workspace root]   (default: the folder above this script)
"""

import re
import sys
from pathlib import Path

# (crate folder, parent module, the modules of the cycle): why the cycle is still there.
KNOWN: dict = {}


def strip_code(text):
    """`text` with comments, string and char literals replaced by spaces (newlines kept)."""
    out = []
    i, n = 0, len(text)

    def blank(segment):
        out.append(re.sub(r"[^\n]", " ", segment))

    while i < n:
        c = text[i]
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            blank(text[i:end])
            i = end
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            blank(text[i:j])
            i = j
        elif (m := re.compile(r'b?r(#*)"').match(text, i)) and (i == 0 or not text[i - 1].isalnum() and text[i - 1] != "_"):
            closing = '"' + m.group(1)
            end = text.find(closing, m.end())
            end = n if end < 0 else end + len(closing)
            blank(text[i:end])
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            blank(text[i : j + 1])
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}'), not a lifetime ('a).
            m = re.compile(r"'(\\u\{[0-9a-fA-F]+\}|\\.|[^\\'])'").match(text, i)
            if m:
                blank(m.group(0))
                i = m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def expand_use_tree(tree):
    """`a::{b, c::{d as e, self}}` → the paths it imports with the names it binds:
    [(["a", "b"], "b"), (["a", "c", "d"], "e"), (["a", "c"], "c")]."""
    tree = re.sub(r"\s*(::|\{|\}|,)\s*", r"\1", re.sub(r"\s+", " ", tree)).strip()
    results = []

    def split_top(s):
        parts, depth, start = [], 0, 0
        for k, ch in enumerate(s):
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
            elif ch == "," and depth == 0:
                parts.append(s[start:k])
                start = k + 1
        parts.append(s[start:])
        return [part for part in parts if part]

    def parse(s, prefix):
        brace = s.find("{")
        if brace >= 0:
            base = prefix + [seg for seg in s[:brace].split("::") if seg]
            for part in split_top(s[brace + 1 : s.rindex("}")]):
                parse(part, base)
            return
        alias = None
        m = re.fullmatch(r"(.*) as ([A-Za-z_][A-Za-z0-9_]*)", s)
        if m:
            s, alias = m.group(1), m.group(2)
        segs = prefix + [seg for seg in s.split("::") if seg]
        if segs and segs[-1] == "self":
            segs = segs[:-1]
        results.append((segs, alias or (segs[-1] if segs else None)))

    parse(tree, [])
    return results


class Module:
    def __init__(self, path, file, line):
        self.path = path  # tuple of names from the crate root
        self.file = file
        self.line = line
        self.children = set()
        self.bindings = {}  # name -> (raw segments, importing module path, line)


class Crate:
    def __init__(self, name, src):
        self.name = name
        self.src = src
        self.modules = {}
        self.refs = []  # (from module path, raw segments, file, line)

    def read(self, root_file):
        self.read_file(root_file, (), root_file.parent)

    def read_file(self, file, path, child_dir):
        text = strip_code(file.read_text(encoding="utf-8"))
        self.modules.setdefault(path, Module(path, file, 1))
        line_of = _line_index(text)
        # Scopes: the inline `mod name { … }` blocks, by brace depth.
        inline = {m.end() - 1: m.group(1) for m in re.finditer(r"\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*\{", text)}
        stack = [(path, child_dir, 0)]  # (module path, folder of its file children, depth inside)
        depth = 0
        scopes = []  # (position, module path, depth of that module's items)
        scopes.append((0, path, 0))
        for k, ch in enumerate(text):
            if ch == "{":
                depth += 1
                if k in inline:
                    parent, parent_dir, _ = stack[-1]
                    name = inline[k]
                    sub = parent + (name,)
                    self.modules.setdefault(sub, Module(sub, file, line_of(k)))
                    self.modules[parent].children.add(name)
                    stack.append((sub, parent_dir / name, depth))
                    scopes.append((k, sub, depth))
            elif ch == "}":
                if len(stack) > 1 and stack[-1][2] == depth:
                    stack.pop()
                    scopes.append((k, stack[-1][0], stack[-1][2]))
                depth -= 1

        def scope_at(pos):
            current = scopes[0]
            for scope in scopes:
                if scope[0] > pos:
                    break
                current = scope
            return current

        def depth_at(pos):
            return text.count("{", 0, pos) - text.count("}", 0, pos)

        # `mod name;`: a file module.
        for m in re.finditer(r"\bmod\s+([A-Za-z_][A-Za-z0-9_]*)\s*;", text):
            _, parent, _ = scope_at(m.start())
            parent_dir = child_dir
            for name in parent[len(path) :]:
                parent_dir = parent_dir / name
            name = m.group(1)
            candidates = [parent_dir / f"{name}.rs", parent_dir / name / "mod.rs"]
            found = next((c for c in candidates if c.is_file()), None)
            if found is None:
                continue
            self.modules[parent].children.add(name)
            sub = parent + (name,)
            self.read_file(found, sub, parent_dir / name)

        # `use` trees: bindings at module level, references everywhere.
        used = []
        for m in re.finditer(r"\buse\s+([^;]+);", text):
            used.append((m.start(), m.end()))
            _, module, items_depth = scope_at(m.start())
            line = line_of(m.start())
            for segs, name in expand_use_tree(m.group(1)):
                if not segs:
                    continue
                self.refs.append((module, segs, file, line))
                if name and name != "*" and depth_at(m.start()) == items_depth:
                    self.modules[module].bindings.setdefault(name, (segs, module, line))
        # Paths in expressions, types, macros: `crate::…`, `$crate::…`, `super::…`.
        masked = re.sub(r"\bpub\s*\(\s*in\s+[^)]*\)", lambda m: " " * len(m.group(0)), text)
        for m in re.finditer(r"(?<![A-Za-z0-9_])(crate|super)((?:\s*::\s*(?:super|[A-Za-z_][A-Za-z0-9_]*))+)", masked):
            if any(start <= m.start() < end for start, end in used):
                continue
            segs = [m.group(1)] + [s for s in re.split(r"\s*::\s*", m.group(2)) if s]
            _, module, _ = scope_at(m.start())
            self.refs.append((module, segs, file, line_of(m.start())))

    def resolve(self, module, segs, seen=frozenset()):
        """The deepest module of this crate that `segs`, written in `module`, names (None:
        an outside crate's), and whether every segment named a module."""
        first = segs[0] if segs else None
        if first in ("crate", "$crate"):
            current, rest = (), segs[1:]
        elif first in ("super", "self"):
            current, rest = module, segs
            while rest and rest[0] in ("super", "self"):
                current = current[:-1] if rest[0] == "super" else current
                rest = rest[1:]
        elif first in self.modules[module].children or first in self.modules[module].bindings:
            current, rest = module, segs
        else:
            return None, False
        for seg in rest:
            node = self.modules.get(current)
            if node is not None and seg in node.children:
                current = current + (seg,)
                continue
            binding = node.bindings.get(seg) if node is not None else None
            if binding is None or (current, seg) in seen:
                return current, False
            target, whole = self.resolve(binding[1], binding[0], seen | {(current, seg)})
            if target is None:
                return current, False
            current = target
            if not whole:
                return current, False
        return current, True

    def edges(self):
        """(parent, from child, to child) → the places that make the edge."""
        found = {}
        for module, segs, file, line in self.refs:
            target, _ = self.resolve(module, segs)
            if target is None:
                continue
            common = 0
            while common < min(len(module), len(target)) and module[common] == target[common]:
                common += 1
            if common == len(module) or common == len(target):
                continue  # the same module, or a parent and its child
            parent = module[:common]
            key = (parent, module[common], target[common])
            found.setdefault(key, []).append((file, line))
        return found


def _line_index(text):
    starts = [0]
    for k, ch in enumerate(text):
        if ch == "\n":
            starts.append(k + 1)

    def line_of(pos):
        lo, hi = 0, len(starts)
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            if starts[mid] <= pos:
                lo = mid
            else:
                hi = mid
        return lo + 1

    return line_of


def strongly_connected(nodes, graph):
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                result.append(sorted(component))

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return result


def workspace_crates(root):
    manifest = (root / "Cargo.toml").read_text(encoding="utf-8")
    m = re.search(r"^members\s*=\s*\[([^\]]*)\]", manifest, re.M)
    if not m:
        sys.exit(f"check-cycles: no `members` in {root / 'Cargo.toml'}")
    return [root / name for name in re.findall(r'"([^"]+)"', m.group(1))]


def main():
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent
    cycles, seen_known = 0, set()
    for folder in workspace_crates(root):
        for root_file in (folder / "src" / "lib.rs", folder / "src" / "main.rs"):
            if not root_file.is_file():
                continue
            crate = Crate(folder.name, folder / "src")
            crate.read(root_file)
            edges = crate.edges()
            by_parent = {}
            for parent, a, b in edges:
                by_parent.setdefault(parent, {}).setdefault(a, set()).add(b)
            for parent, graph in sorted(by_parent.items()):
                nodes = set(graph) | {b for targets in graph.values() for b in targets}
                for component in strongly_connected(nodes, graph):
                    where = "::".join(("crate",) + parent)
                    key = (folder.name, where, tuple(component))
                    if key in KNOWN:
                        seen_known.add(key)
                        print(f"{folder.name}: known cycle between {', '.join(component)} in {where}: {KNOWN[key]}")
                        continue
                    cycles += 1
                    print(f"{folder.name} ({root_file.name}): modules of {where} import each other: {', '.join(component)}")
                    for a in component:
                        for b in sorted(graph.get(a, ())):
                            if b in component:
                                file, line = edges[(parent, a, b)][0]
                                more = len(edges[(parent, a, b)]) - 1
                                extra = f" (and {more} more)" if more else ""
                                print(f"    {a} -> {b}: {file.relative_to(root)}:{line}{extra}")
    status = 0
    if cycles:
        print(f"check-cycles: {cycles} import cycle(s) between modules; move what both sides need into a module beneath them")
        status = 1
    for crate_name, where, component in sorted(set(KNOWN) - seen_known):
        print(f"check-cycles: the known cycle between {', '.join(component)} in {crate_name}'s {where} is gone: remove it from KNOWN")
        status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
