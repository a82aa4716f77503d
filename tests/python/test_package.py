"""The installed package's surface: every module says what it exports (``__all__``, each name
defined there or a submodule of the package) and the package ships its ``py.typed`` marker
(PEP 561), so type checkers read the annotations of an installed stalloc."""

import ast
from pathlib import Path

import stalloc

PACKAGE = Path(stalloc.__file__).resolve().parent


def modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def top_level(stmts):
    """Module-level statements, including those inside a top-level try or if."""
    for node in stmts:
        yield node
        if isinstance(node, ast.Try):
            yield from top_level(node.body + node.orelse + node.finalbody +
                                 [s for h in node.handlers for s in h.body])
        elif isinstance(node, ast.If):
            yield from top_level(node.body + node.orelse)


def bound_names(tree):
    names = set()
    for node in top_level(tree.body):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        names.add(n.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def declared_all(tree):
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            return ast.literal_eval(node.value)
    return None


def test_the_installed_package_is_the_whole_package():
    assert (PACKAGE / "integrations" / "jax_backend.py").is_file()
    assert (PACKAGE / "importers" / "minimalloc_csv.py").is_file()
    assert len(modules()) > 30


def test_every_module_declares_all_with_names_it_has():
    missing, unknown = [], []
    for path in modules():
        rel = path.relative_to(PACKAGE)
        names = declared_all(ast.parse(path.read_text()))
        if names is None:
            missing.append(str(rel))
            continue
        assert len(set(names)) == len(names), f"{rel}: __all__ names a name twice"
        have = bound_names(ast.parse(path.read_text()))
        if path.name == "__init__.py":
            have |= {p.stem for p in path.parent.glob("*.py")} | \
                    {p.name for p in path.parent.iterdir() if (p / "__init__.py").is_file()}
        unknown += [f"{rel}: {n}" for n in names if n not in have]
    assert missing == []
    assert unknown == []


def test_py_typed_ships():
    assert (PACKAGE / "py.typed").is_file()
