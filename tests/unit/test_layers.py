"""The package's layers (docs/architecture.md): each imports only the layers below it."""

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "ingest"
# Bottom to top. A module at the top level that is not named here is a face.
LAYERS = ["errors", "platform", "spec", "kafka", "batch", "stream", "audit"]
FACES = len(LAYERS)
# Subpackages that are faces: they may import any layer, and no layer imports them.
FACE_PACKAGES = {"cli"}


def layer_of(module: str) -> int:
    parts = module.split(".")
    if parts[0] != "ingest" or len(parts) == 1:
        return FACES
    return LAYERS.index(parts[1]) if parts[1] in LAYERS else FACES


def imports_of(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "ingest":
                found += [f"ingest.{alias.name}" for alias in node.names]
            else:
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return [name for name in found if name == "ingest" or name.startswith("ingest.")]


def modules():
    for path in sorted(PACKAGE.rglob("*.py")):
        dotted = ".".join(("ingest", *path.relative_to(PACKAGE).with_suffix("").parts))
        yield dotted.removesuffix(".__init__"), path


@pytest.mark.parametrize("module,path", list(modules()), ids=lambda v: str(v) if isinstance(v, str) else "")
def test_imports_point_down(module, path):
    own = layer_of(module)
    upward = [name for name in imports_of(path)
              if layer_of(name) > own and not (own == FACES and layer_of(name) == FACES)]
    assert not upward, f"{module} (layer {own}) imports from above: {upward}"


def test_every_subpackage_is_a_known_layer():
    subpackages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert subpackages <= set(LAYERS) | FACE_PACKAGES, subpackages - set(LAYERS) - FACE_PACKAGES


# One home per concept: the checkpoint's file layout and the choice between a table's
# catalog name and its path are spelled in one module each, so a second reader of
# either cannot come back unseen.
CHECKPOINT_PATHS = re.compile(r"/(sources/0/0|offsets|commits)(/|$)")
DELTA_OPENERS = ("forName", "forPath")


def string_parts(tree: ast.AST) -> list[str]:
    """The string literals of a module, f-strings' literal parts included, docstrings not."""
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [node.value for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings]


def spelled_in(found) -> dict[str, list[str]]:
    homes: dict[str, list[str]] = {}
    for module, path in modules():
        for what in found(ast.parse(path.read_text())):
            homes.setdefault(what, []).append(module)
    return homes


def test_the_checkpoint_layout_is_read_in_one_module():
    def paths(tree):
        return {found.group(1) for s in string_parts(tree) if (found := CHECKPOINT_PATHS.search(s))}
    homes = spelled_in(paths)
    assert homes == {p: ["ingest.kafka.checkpoint"] for p in ("sources/0/0", "offsets", "commits")}, homes


def test_a_delta_table_is_opened_by_name_or_path_in_one_module():
    def openers(tree):
        return {node.attr for node in ast.walk(tree)
                if isinstance(node, ast.Attribute) and node.attr in DELTA_OPENERS}
    assert spelled_in(openers) == {name: ["ingest.platform.delta"] for name in DELTA_OPENERS}


# Inside `batch/`, bottom to top: the staged columns, the formats that decode into them,
# the commits (txn id, conflicts, crash points), the record steps, the MERGE, and the
# batch itself. A district may import its own tier and the tiers below it.
BATCH_TIERS = [{"staged"}, {"formats"}, {"commit"}, {"transform", "uid", "schema_evolution", "bounds"}, {"merge"},
               {"lost_ranges", "processor", "routing", "message_columns", "message_key"}]


def batch_tier(module: str) -> int:
    district = module.split(".")[2]
    return next(n for n, tier in enumerate(BATCH_TIERS) if district in tier)


BATCH_MODULES = [(m, p) for m, p in modules() if m.startswith("ingest.batch.")]


def test_every_batch_module_has_a_tier():
    known = set().union(*BATCH_TIERS)
    assert not [m for m, _ in BATCH_MODULES if m.split(".")[2] not in known]


def batch_imports(path: Path) -> list[str]:
    """The `ingest.batch.<district>` names a module imports, `from ingest.batch import x` included."""
    found = [name for name in imports_of(path) if name.startswith("ingest.batch.")]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module == "ingest.batch":
            found += [f"ingest.batch.{alias.name}" for alias in node.names]
    return found


@pytest.mark.parametrize("module,path", BATCH_MODULES, ids=lambda v: str(v) if isinstance(v, str) else "")
def test_batch_imports_point_down_its_tiers(module, path):
    own = batch_tier(module)
    upward = [name for name in batch_imports(path) if batch_tier(name) > own]
    assert not upward, f"{module} (batch tier {own}) imports from above: {upward}"


# No private names across modules (in ingest/ and bench/; tests may reach in): a name with a
# leading underscore is its module's own, so another module that needs it asks for it to be
# made public, in the module that owns it, instead of coupling to its insides.
BENCH = PACKAGE.parent / "bench"
OURS = ("ingest", "bench")


def source_modules():
    for root in (PACKAGE, BENCH):
        for path in sorted(root.rglob("*.py")):
            dotted = ".".join((root.name, *path.relative_to(root).with_suffix("").parts))
            yield dotted.removesuffix(".__init__"), path


def is_private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_reaches(path: Path) -> list[str]:
    """`from ours.x import _name`, and `x._name` where `x` is one of our modules imported here."""
    tree = ast.parse(path.read_text())
    found, modules_here = [], set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0 \
                and node.module.split(".")[0] in OURS:
            found += [f"{node.module}.{alias.name}" for alias in node.names if is_private(alias.name)]
            modules_here |= {alias.asname or alias.name for alias in node.names}
        elif isinstance(node, ast.Import):
            modules_here |= {alias.asname or alias.name for alias in node.names
                             if alias.name.split(".")[0] in OURS and (alias.asname or "." not in alias.name)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_private(node.attr) and isinstance(node.value, ast.Name) \
                and node.value.id in modules_here:
            found.append(f"{node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("module,path", list(source_modules()), ids=lambda v: str(v) if isinstance(v, str) else "")
def test_no_private_name_is_imported_across_modules(module, path):
    assert not private_reaches(path), f"{module} uses private names of other modules: {private_reaches(path)}"


# No circles, in ingest/ or bench/: an import inside a function is still an import (it only
# waits until the call), so two modules that import each other, at any depth, are one module
# split in two, and the next import moved to the top fails at start.
def import_graph() -> dict[str, set[str]]:
    known = dict(source_modules())
    graph: dict[str, set[str]] = {module: set() for module in known}
    for module, path in known.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                named = [f"{node.module}.{alias.name}" for alias in node.names]
                graph[module] |= {name for name in named if name in known}
                if node.module in known and not all(name in known for name in named):
                    graph[module].add(node.module)
            elif isinstance(node, ast.Import):
                graph[module] |= {alias.name for alias in node.names if alias.name in known}
        graph[module].discard(module)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for imported in sorted(graph[module]):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def test_circles_are_found_through_imports_inside_functions():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle():
    graph = import_graph()
    found = circles(graph)
    assert not found, "import circles:\n" + "\n".join(
        "  " + ", ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c) for c in found)


# One module, one job: a module past 500 lines is doing two (the developers' guide).
MAX_LINES = 500


@pytest.mark.parametrize("module,path", list(source_modules()), ids=lambda v: str(v) if isinstance(v, str) else "")
def test_no_module_is_over_500_lines(module, path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{module} has {lines} lines, over {MAX_LINES}: split it by job"
