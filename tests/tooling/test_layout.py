"""The import graph of ``seccomm/``: no import circles, and the CLI on top (the CLI imports the
tools; no tool imports the CLI).

The graph is read from the source with ``ast``: absolute and relative imports, at module level
and inside functions, as /work/shared/hooks/import_circles.py reads it.  A package ``__init__``
that imports its own submodules (which import names back from it, as ``collectives/`` registers
its records) is not a circle of concern.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2] / "seccomm"
#: ``python -m seccomm`` runs the CLI: the entry point, not a tool, and nothing imports it
ENTRY_POINTS = {"seccomm.__main__"}


def modules(root: Path) -> dict[str, Path]:
    """Dotted module name -> source file, for every ``.py`` file under the package ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _known(name: str, mods) -> str | None:
    """``name`` or its closest enclosing module that is in ``mods`` (``a.b.Class`` -> ``a.b``)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def imports(name: str, path: Path, mods) -> set[str]:
    """The modules of ``mods`` that module ``name`` (source ``path``) imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {_known(a.name, mods) for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            out |= {_known(f"{base}.{a.name}", mods) for a in node.names}  # a submodule, or a name of base
    return out - {None, name}


def graph(root: Path = ROOT) -> dict[str, set[str]]:
    mods = modules(root)
    return {m: imports(m, p, mods) for m, p in mods.items()}


def circles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), sorted, leaving out a
    package and its own submodules importing each other."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while not comp or comp[-1] != v:
                comp.append(stack.pop())
                on.discard(comp[-1])
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return [c for c in found if not _one_package(c)]


def _one_package(comp: list[str]) -> bool:
    top = min(comp, key=len)
    return all(m == top or m.startswith(top + ".") for m in comp)


def test_no_import_circles():
    found = circles(graph())
    assert not found, "import circles:\n" + "\n".join("  " + " <-> ".join(c) for c in found)


def test_no_tool_imports_the_cli():
    g = graph()
    bad = sorted(
        f"{m} imports {t}"
        for m, deps in g.items()
        for t in deps
        if (t == "seccomm.cli" or t.startswith("seccomm.cli."))
        and not m.startswith("seccomm.cli.")
        and m != "seccomm.cli"
        and m not in ENTRY_POINTS
    )
    assert not bad, "the CLI imports the tools, never the reverse:\n  " + "\n  ".join(bad)


def test_commands_do_not_import_the_registry():
    """``seccomm.cli`` lists the command modules; they must not import it back (a circle the
    package exemption above would not report)."""
    g = graph()
    bad = sorted(m for m, deps in g.items() if m.startswith("seccomm.cli.") and "seccomm.cli" in deps)
    assert not bad, bad
    assert {
        "seccomm.cli.bench",
        "seccomm.cli.train",
        "seccomm.cli.project",
        "seccomm.cli.attack",
        "seccomm.cli.report",
    } <= g["seccomm.cli"]


def test_the_checks_can_fail(tmp_path):
    """A made-up package: a circle through an import inside a function and a relative import is
    found; a package importing its own submodules is not a circle; a tool importing the CLI is
    seen as an edge."""
    pkg = tmp_path / "seccomm"
    (pkg / "cli").mkdir(parents=True)
    (pkg / "sub").mkdir()
    files = {
        "__init__.py": "",
        "a.py": "def f():\n    from .b import g\n",
        "b.py": "import seccomm.c.x as y\n",
        "c.py": "from seccomm import a\n",
        "tool.py": "from .cli import main\n",
        "cli/__init__.py": "from . import cmd\n",
        "cli/cmd.py": "from .. import tool\n",
        "sub/__init__.py": "from . import one\nX = 1\n",
        "sub/one.py": "from . import X\n",
    }
    for rel, text in files.items():
        (pkg / rel).write_text(text)
    g = graph(pkg)
    assert g["seccomm.b"] == {"seccomm.c"} and "seccomm.cli" in g["seccomm.tool"]
    assert circles(g) == [
        ["seccomm.a", "seccomm.b", "seccomm.c"],
        ["seccomm.cli", "seccomm.cli.cmd", "seccomm.tool"],
    ]


TOOLS = (
    "seccomm.bench",
    "seccomm.bench.runner",
    "seccomm.compliance.report",
    "seccomm.compliance.doc",
    "seccomm.compliance.evidence",
    "seccomm.compliance.capture",
    "seccomm.compliance.attack",
    "seccomm.costmodel",
    "seccomm.pytest_plugin",
    "seccomm.units",
)


def test_tools_import_without_the_cli():
    """Importing every tool module loads nothing of the CLI (in a fresh interpreter)."""
    code = (
        f"import importlib, sys\nfor m in {TOOLS!r}: importlib.import_module(m)\n"
        "cli = sorted(m for m in sys.modules if m.startswith('seccomm.cli'))\nassert not cli, cli\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def _calls(path: Path) -> set[str]:
    """The names of the functions and methods ``path`` calls (``a.b.open(...)``: ``open``)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            f = node.func
            out.add(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return out


def test_a_received_frame_is_accepted_in_one_place():
    """The checks a received frame passes before its plaintext is used (the op's record where
    it rides along, the length, the tag) are written once, in ``seccomm/engine/land.py``: no
    other module of the engine, the device engine, the compiled swap's glue or the collectives
    takes a record off a frame, opens a frame under a key or builds a frame's error itself."""
    land = ROOT / "engine" / "land.py"
    assert {"take_record", "open", "AuthenticationError"} <= _calls(land)
    paths = [*(ROOT / "engine").glob("*.py"), *(ROOT / "gpu").glob("*.py"), *(ROOT / "pairswap").glob("*.py")]
    paths += [*(ROOT / "collectives").glob("*.py"), ROOT / "comm.py"]
    found = {
        f"{p.relative_to(ROOT.parent)} calls {name}"
        for p in paths
        if p != land
        for name in _calls(p) & {"take_record", "open", "AuthenticationError", "InvalidTag"}
    }
    # the device engine's batched kernel opens a step's frames at once, each landed first
    found.discard("seccomm/gpu/engine.py calls open")
    assert not found, sorted(found)


#: what a transport implements (:class:`seccomm.transports.base.Transport`, "The core")
TRANSPORT_CORE = {
    "isend", "irecv", "wait_recv", "wait_sends",  # frames
    "allgather", "scatter", "bcast",  # the setup collectives
    "cancel", "quiesce", "host_key", "close", "begin_op",
}  # fmt: skip
#: mechanisms with a default that a transport may replace by methods of its own: the MPI
#: transport's receipt channel and pair link (its records and notices are objects it names)
TRANSPORT_OWN = {
    "MPITransport": {"isend_receipt", "irecv_receipt", "pair_link"},
    "NCCLTransport": {"from_mpi"},  # (a constructor)
}


def test_transports_implement_only_the_core():
    """The transports of the package define the core of the interface and nothing else public:
    the argument records, the failure notices and the rest come from the base, through objects
    a transport names (``records``, ``notices``), so a new transport is its core."""
    found = {}
    for p in (ROOT / "transports").glob("*.py"):
        for node in ast.parse(p.read_text()).body:
            bases = {getattr(b, "id", "") for b in getattr(node, "bases", ())}
            if "Transport" not in bases or node.name == "TransportWrapper":
                continue  # (the wrapper forwards the whole interface: that is what it is for)
            public = {f.name for f in node.body if isinstance(f, ast.FunctionDef) and f.name[0] != "_"}
            extra = public - TRANSPORT_CORE - TRANSPORT_OWN.get(node.name, set())
            found[node.name] = sorted(extra)
    assert {"MPITransport", "TorchTransport", "NCCLTransport"} <= set(found)
    assert not any(found.values()), found
