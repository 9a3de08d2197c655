"""file_circles.py - the half of the layering check that looks below the folders:
which .c file calls a function, or uses a global, that another .c file defines,
and whether those uses go round in a circle.

Read from the sources, so that it needs no build and is the same with every
compiler flag: each .c file of module/ and client/ is stripped of comments,
strings and character constants; the functions and variables it defines at
file scope without `static` are its symbols; every identifier in it (outside
`#include` lines, and not a member after `.` or `->`) that is another file's
symbol, and not a name it defines or declares static itself, is a use of
that file (so is a prototype or extern declaration of another's symbol). The
uses form a graph of files; every strongly connected component of more than
one file is a circle, reported with the symbols on each of its edges.

Used by check_layers.py; check(root) returns one problem string per circle.
"""
import os
import re

SCAN_DIRS = ("module", "client")
TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|->|\S")
KEYWORDS = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else",
    "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "register",
    "restrict", "return", "short", "signed", "sizeof", "static", "struct", "switch", "typedef",
    "union", "unsigned", "void", "volatile", "while", "_Bool", "_Static_assert", "_Thread_local",
    "__thread", "__attribute__", "__typeof__", "typeof", "_Alignas", "_Atomic",
}


def strip_c(text):
    """text without comments, string and character literals (each becomes a
    space, newlines kept), so that only code is left to tokenize."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j == -1 else j + 2
            out.append("\n" * text.count("\n", i, j) or " ")
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j == -1 else j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" ")
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def split_directives(code):
    """(code without preprocessor lines, code without #include lines only):
    the first is what declares things, the second what may use them (a
    macro's body uses what it names)."""
    decl, use = [], []
    in_directive = False
    for line in code.split("\n"):
        starts = line.lstrip().startswith("#")
        directive = in_directive or starts
        in_directive = directive and line.rstrip().endswith("\\")
        decl.append("" if directive else line)
        include = starts and re.match(r"\s*#\s*include\b", line)
        use.append("" if include else line)
    return "\n".join(decl), "\n".join(use)


def top_level_chunks(tokens):
    """Split tokens into file-scope declarations and definitions: a chunk ends
    at a ';' outside braces and parentheses, or at the '}' that closes a
    function body."""
    chunk, depth, paren, body = [], 0, 0, False
    for i, t in enumerate(tokens):
        chunk.append(t)
        if t == "(":
            paren += 1
        elif t == ")":
            paren -= 1
        elif t == "{":
            if depth == 0 and paren == 0 and len(chunk) >= 2 and chunk[-2] == ")" \
                    and "=" not in chunk:
                body = True
            depth += 1
        elif t == "}":
            depth -= 1
            if depth == 0 and body:
                yield chunk
                chunk, body = [], False
        elif t == ";" and depth == 0 and paren == 0:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def drop_attributes(tokens):
    """tokens without any __attribute__((...)) (its words name no symbol)."""
    out, i = [], 0
    while i < len(tokens):
        if tokens[i] == "__attribute__" and i + 1 < len(tokens) and tokens[i + 1] == "(":
            depth, i = 0, i + 1
            while i < len(tokens):
                depth += {"(": 1, ")": -1}.get(tokens[i], 0)
                i += 1
                if depth == 0:
                    break
            continue
        out.append(tokens[i])
        i += 1
    return out


def declared_names(chunk):
    """(names, defines, local) of one file-scope chunk: the names it
    declares, whether it defines them (a function body, or a variable that is
    not extern), and whether they are file-local (static)."""
    if not chunk or chunk[0] == "typedef" or chunk[0] == "_Static_assert":
        return [], False, False
    chunk = drop_attributes(chunk)
    head = []
    depth = 0
    for t in chunk:  # the chunk without anything inside braces
        if t == "{":
            depth += 1
        if depth == 0:
            head.append(t)
        if t == "}":
            depth -= 1
    local = "static" in head
    names = []
    # A function (definition or prototype): the identifier before the first
    # '(' that is not an attribute; a function pointer variable names itself
    # inside "(*name)".
    for i, t in enumerate(head):
        if t == "(":
            prev = head[i - 1] if i else ""
            if prev in ("__typeof__", "typeof", "(") or prev == "":
                continue
            if re.match(r"[A-Za-z_]", prev) and prev not in KEYWORDS:
                is_body = chunk[-1] == "}" and "=" not in head
                return [prev], is_body, local
            if i + 2 < len(head) and head[i + 1] == "*" and re.match(r"[A-Za-z_]", head[i + 2]):
                return [head[i + 2]], "extern" not in head, local
            break
        if t in ("=", "["):
            break
    # Variables: the last identifier before '=', '[', ',' or the end, per
    # declarator (the commas of initializers are inside braces or parentheses).
    if chunk[-1] == "}" and "=" not in head:
        return [], False, local  # a struct, union or enum definition
    declarator, depth = [], 0
    for t in head + [","]:
        if t in "([":
            depth += 1
        elif t in ")]":
            depth -= 1
        if depth == 0 and t in (",", ";"):
            cut = next((k for k, x in enumerate(declarator) if x in ("=", "[")), len(declarator))
            kept = declarator[:cut]
            idents = [x for k, x in enumerate(kept) if re.match(r"[A-Za-z_]", x)
                      and x not in KEYWORDS
                      and (k == 0 or kept[k - 1] not in ("struct", "union", "enum"))]
            if idents and len(declarator[:cut]) > 1:
                names.append(idents[-1])
            declarator = []
        elif depth >= 0:
            declarator.append(t)
    return names, "extern" not in head, local


def scan_file(path):
    """(symbols it defines for other files, the file-scope names it defines or
    keeps static, the identifiers it may use)."""
    with open(path, errors="replace") as f:
        decl, use = split_directives(strip_c(f.read()))
    exported, own = set(), set()
    for chunk in top_level_chunks(TOKEN.findall(decl)):
        names, defines, local = declared_names(chunk)
        if local or defines:  # a prototype or extern of another's is a use
            own.update(names)
        if defines and not local:
            exported.update(names)
    used, prev = set(), ""
    for t in TOKEN.findall(use):
        if re.match(r"[A-Za-z_]", t) and prev not in (".", "->"):
            used.add(t)
        prev = t
    return exported, own, used


def c_files(root):
    for base in SCAN_DIRS:
        for dirpath, dirs, files in os.walk(os.path.join(root, base)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith(".c"):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def file_graph(root):
    """{file: {file it uses: sorted symbols}} over the .c files of root."""
    scans = {rel: scan_file(os.path.join(root, rel)) for rel in c_files(root)}
    definer = {}
    for rel, (exported, _, _) in scans.items():
        for sym in exported:
            definer.setdefault(sym, []).append(rel)
    graph = {}
    for rel, (_, own, used) in scans.items():
        edges = graph.setdefault(rel, {})
        for sym in used:
            if sym in own:
                continue
            for target in definer.get(sym, ()):
                if target != rel:
                    edges.setdefault(target, []).append(sym)
        for syms in edges.values():
            syms.sort()
    return graph


def strongly_connected(graph):
    """The strongly connected components of graph (Tarjan), each sorted."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
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
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check(root):
    """One problem string per circle between files under root."""
    graph = file_graph(root)
    problems = []
    for comp in strongly_connected(graph):
        if len(comp) < 2:
            continue
        members = set(comp)
        lines = [f"{len(comp)} files use each other in a circle: " + ", ".join(comp)]
        for src in comp:
            for dst in sorted(graph[src]):
                if dst in members:
                    lines.append(f"    {src} -> {dst}: " + ", ".join(graph[src][dst]))
        problems.append("\n".join(lines))
    return problems
