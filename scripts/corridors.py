"""How far a reader walks through the package to follow one thing: the corridor figures of issue 44.

A corridor is the part of the static call graph a reader must read to follow one thing from a
command to where it is used: the functions reachable from the command's entry function that can
themselves reach one of the targets. The walk reads it as a debugger's step-into would, depth
first in source order, each function once; it notes the module at every call and every return,
merged while it stays in one module.

- **stops**: how many times the walk changes module (a call into another module or a return to the
  caller's).
- **back**: how many of those arrive at a module the walk had already been in: back-and-forth
  between modules (a return to the caller is one; so is `trust` calling `trust_family` calling
  `trust` again).

The call graph comes from the source alone (`ast`): calls and references to a function by name,
through `import` aliases, `from ... import` (re-exports followed), `self.method` and nested
functions; a module-level name bound to an expression (`x = stage_task(stages.x)`, a registry's
tuple of entries) is a node of its own, leading to every function its value names. Calls through a
protocol (`backend.generate`) are not followed.

The two walks of issue 44, named by what they follow:

- ``config``: the generators' ``max_new_tokens`` from ``judgebias run`` to every function that
  reads the field (``.max_new_tokens``).
- ``figure``: DBG from ``judgebias analyze`` to its estimator (``dbg_score``) and to the calls that
  send metrics to MLflow (``mlflow.log_metrics`` / ``log_metric``).

    python scripts/corridors.py                   # this checkout
    python scripts/corridors.py --root /tmp/old    # another checkout (git worktree add /tmp/old REV)

The issue's earlier figures (62 / 20 and 31 / 9, 147 / 45 and 144 / 39) were counted by a method
no file records; these figures are comparable with each other, measured at two commits by this
script, not with those.
"""
from __future__ import annotations

import argparse
import ast
import os
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

PACKAGE = "judgebias"

Node = tuple[str, str]  # (module, qualified name inside it)


@dataclass
class Module:
    name: str
    tree: ast.Module
    is_package: bool
    functions: dict[str, ast.AST] = field(default_factory=dict)  # qualname -> def, class or bound value
    aliases: dict[str, tuple[str, str | None]] = field(default_factory=dict)  # local name -> (module, attr)


def iter_sources(root: Path) -> Iterator[tuple[str, Path]]:
    base = root / PACKAGE
    for folder, _dirs, files in os.walk(base, followlinks=True):
        for f in sorted(files):
            if f.endswith(".py"):
                path = Path(folder) / f
                rel = path.relative_to(base).with_suffix("")
                parts = [PACKAGE, *rel.parts]
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                yield ".".join(parts), path


def resolve_relative(module: Module, level: int, name: str | None) -> str:
    parts = module.name.split(".")
    if not module.is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join(parts + ([name] if name else []))


def load(root: Path) -> dict[str, Module]:
    modules: dict[str, Module] = {}
    for name, path in iter_sources(root):
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        modules[name] = Module(name, tree, path.name == "__init__.py")
    for m in modules.values():
        index(m)
    return modules


def index(m: Module) -> None:
    def defs(body: Iterable[ast.stmt], prefix: str) -> None:
        for st in body:
            if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
                q = prefix + st.name
                m.functions[q] = st
                defs(st.body, q + ".")
            elif isinstance(st, ast.ClassDef):
                m.functions[prefix + st.name] = st
                defs(st.body, prefix + st.name + ".")

    defs(m.tree.body, "")
    for st in ast.walk(m.tree):
        if isinstance(st, ast.Import):
            for a in st.names:
                if a.asname:
                    m.aliases[a.asname] = (a.name, None)
                else:
                    m.aliases[a.name.split(".")[0]] = (a.name.split(".")[0], None)
        elif isinstance(st, ast.ImportFrom):
            base = resolve_relative(m, st.level, st.module) if st.level else (st.module or "")
            for a in st.names:
                m.aliases[a.asname or a.name] = (base, a.name)
    # A module-level name bound to an expression (``x = stage_task(stages.x)``, a registry's tuple of
    # entries) is a node too: reading it leads to every function its value names.
    for st in m.tree.body:
        target = st.targets[0] if isinstance(st, ast.Assign) and len(st.targets) == 1 else \
            st.target if isinstance(st, ast.AnnAssign) and st.value is not None else None
        if isinstance(target, ast.Name) and target.id not in m.functions:
            m.functions[target.id] = st.value


class Graph:
    def __init__(self, modules: dict[str, Module]):
        self.modules = modules
        self._edges: dict[Node, list[Node]] = {}

    def lookup(self, module: str, attr: str, depth: int = 0) -> Node | None:
        """The function, class or bound name ``module.attr`` names, following re-exports."""
        if depth > 8 or module not in self.modules:
            return None
        m = self.modules[module]
        if attr in m.functions:
            return (module, attr)
        if attr in m.aliases:
            target_mod, target_attr = m.aliases[attr]
            if target_attr is None:
                return None
            sub = f"{target_mod}.{target_attr}"
            if sub in self.modules:
                return None
            return self.lookup(target_mod, target_attr, depth + 1)
        return None

    def module_of(self, m: Module, expr: ast.expr) -> str | None:
        """The module an expression names (``stages``, ``judgebias.stats``), if it names one."""
        if isinstance(expr, ast.Name) and expr.id in m.aliases:
            mod, attr = m.aliases[expr.id]
            full = mod if attr is None else f"{mod}.{attr}"
            return full if full in self.modules else None
        if isinstance(expr, ast.Attribute):
            base = self.module_of(m, expr.value)
            if base and f"{base}.{expr.attr}" in self.modules:
                return f"{base}.{expr.attr}"
        return None

    def references(self, m: Module, body: ast.AST, cls: str | None, qualname: str = "") -> Iterator[Node]:
        """Functions a body calls or names, in source order (``qualname``: the body's, for nested defs)."""
        pieces = qualname.split(".") if qualname else []
        scopes = [".".join(pieces[:i]) for i in range(len(pieces), 0, -1)]
        for node in (body, *walk_in_order(body)):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                nested = next((q for q in (f"{scope}.{node.id}" for scope in scopes)
                               if q in m.functions), None)
                if nested:
                    yield (m.name, nested)
                elif node.id in m.functions:
                    yield (m.name, node.id)
                elif node.id in m.aliases:
                    mod, attr = m.aliases[node.id]
                    if attr is not None:
                        hit = self.lookup(mod, attr)
                        if hit:
                            yield hit
            elif isinstance(node, ast.Attribute):
                if isinstance(node.value, ast.Name) and node.value.id == "self" and cls:
                    q = f"{cls}.{node.attr}"
                    if q in m.functions:
                        yield (m.name, q)
                    continue
                mod = self.module_of(m, node.value)
                if mod:
                    hit = self.lookup(mod, node.attr)
                    if hit:
                        yield hit

    def edges(self, n: Node) -> list[Node]:
        if n not in self._edges:
            m = self.modules[n[0]]
            fn = m.functions[n[1]]
            # ``self.x`` inside a class, or inside one of its methods, names the class's ``x``
            owner = n[1] if isinstance(fn, ast.ClassDef) else n[1].rpartition(".")[0]
            cls = owner if isinstance(m.functions.get(owner), ast.ClassDef) else None
            out: list[Node] = []
            for ref in self.references(m, fn, cls, n[1]):
                if ref != n and ref not in out:
                    out.append(ref)
            self._edges[n] = out
        return self._edges[n]


def walk_in_order(body: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``body``, in source order (``ast.walk`` is breadth first)."""
    for child in ast.iter_child_nodes(body):
        yield child
        yield from walk_in_order(child)


def reachable(g: Graph, start: Node) -> set[Node]:
    seen, todo = {start}, [start]
    while todo:
        for nxt in g.edges(todo.pop()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def corridor(g: Graph, forward: set[Node], targets: set[Node]) -> set[Node]:
    """The functions of ``forward`` (those reachable from the entry) that reach one of ``targets``."""
    reverse: dict[Node, set[Node]] = {}
    for n in forward:
        for nxt in g.edges(n):
            reverse.setdefault(nxt, set()).add(n)
    keep, todo = set(targets & forward), list(targets & forward)
    while todo:
        for prev in reverse.get(todo.pop(), ()):
            if prev not in keep:
                keep.add(prev)
                todo.append(prev)
    return keep


def walk(g: Graph, entry: Node, inside: set[Node]) -> list[str]:
    """The modules a depth-first read of the corridor passes through, merged while it stays in one."""
    trail = [entry[0]]
    seen = {entry}
    stack = [(entry, iter(g.edges(entry)))]  # iterative: a corridor can be deeper than the C stack
    while stack:
        pending = stack[-1][1]
        nxt = next((e for e in pending if e in inside and e not in seen), None)
        if nxt is None:  # the top function read through: back to its caller
            stack.pop()
            if stack and trail[-1] != stack[-1][0][0]:
                trail.append(stack[-1][0][0])
            continue
        seen.add(nxt)
        if trail[-1] != nxt[0]:
            trail.append(nxt[0])
        stack.append((nxt, iter(g.edges(nxt))))
    return trail


def functions_where(g: Graph, nodes: Iterable[Node], test) -> set[Node]:
    out = set()
    for n in nodes:
        fn = g.modules[n[0]].functions[n[1]]
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        # only the function's own body, not the functions nested in it (they are nodes of their own)
        own = [st for st in fn.body
               if not isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        if any(test(x) for st in own for x in [st, *walk_in_order(st)]):
            out.add(n)
    return out


def reads_max_new_tokens(x: ast.AST) -> bool:
    return isinstance(x, ast.Attribute) and x.attr == "max_new_tokens" and isinstance(x.ctx, ast.Load)


def logs_to_mlflow(x: ast.AST) -> bool:
    return (isinstance(x, ast.Call) and isinstance(x.func, ast.Attribute)
            and x.func.attr in {"log_metrics", "log_metric"}
            and isinstance(x.func.value, ast.Name) and x.func.value.id == "mlflow")


def measure(root: Path) -> dict[str, dict]:
    g = Graph(load(root))
    results = {}
    run = find(g, "judgebias.cli.pipeline", "run_cmd")
    analyze = find(g, "judgebias.cli.analyze", "analyze_cmd")
    for name, entry, targets_of in (
        ("config: generators' max_new_tokens from `judgebias run` to its readers", run,
         lambda seen: functions_where(g, seen, reads_max_new_tokens)),
        ("figure: DBG from `judgebias analyze` to dbg_score and to MLflow", analyze,
         lambda seen: {n for n in seen if n[1] == "dbg_score"} | functions_where(g, seen, logs_to_mlflow)),
    ):
        seen = reachable(g, entry)
        targets = targets_of(seen)
        inside = corridor(g, seen, targets)
        trail = walk(g, entry, inside)
        visited: set[str] = set()
        back = 0
        for mod in trail:
            back += mod in visited
            visited.add(mod)
        results[name] = {"stops": len(trail) - 1, "back": back, "functions": len(inside),
                         "modules": len(visited), "targets": len(targets), "trail": trail}
    return results


def find(g: Graph, module: str, qualname_tail: str) -> Node:
    m = g.modules.get(module)
    if m is None:
        raise SystemExit(f"corridors: no module {module}")
    hits = [q for q in m.functions if q == qualname_tail or q.endswith("." + qualname_tail)]
    if len(hits) != 1:
        raise SystemExit(f"corridors: {module} has {len(hits)} functions named {qualname_tail}")
    return (module, hits[0])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                    help="the checkout to measure (default: this one)")
    ap.add_argument("--trail", action="store_true", help="print each walk's modules in order")
    args = ap.parse_args(argv)
    for name, r in measure(args.root).items():
        print(f"{name}\n  {r['stops']} stops, {r['back']} back to a module already passed; "
              f"{r['functions']} functions in {r['modules']} modules, {r['targets']} target(s)")
        if args.trail:
            print("  " + " > ".join(m.removeprefix("judgebias.") for m in r["trail"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
