"""The source tree's rules (docs/architecture.md): one folder per stage, includes only of the
same or an earlier stage, no two files that include each other, every file opens with a comment
that names it."""

import re
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "libstalloc" / "src"
LAYERS = ["base", "trace", "plan", "backends", "runtime", "sim", "interop"]
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

pytestmark = pytest.mark.skipif(not SRC.is_dir(), reason="needs the source tree")


def sources():
    return sorted(p for p in SRC.rglob("*") if p.suffix in (".c", ".h"))


def includes(path):
    return INCLUDE.findall(path.read_text())


def test_no_source_file_at_the_top_level():
    assert [p.name for p in SRC.iterdir() if p.is_file()] == []


def test_every_folder_is_a_known_stage():
    assert sorted(p.name for p in SRC.iterdir() if p.is_dir()) == sorted(LAYERS)


def test_includes_go_only_to_the_same_or_an_earlier_stage():
    bad = []
    for path in sources():
        stage = LAYERS.index(path.parent.name)
        for inc in includes(path):
            if inc.startswith("stalloc/"):
                continue  # the public header
            folder = inc.split("/")[0]
            assert folder in LAYERS, f"{path.relative_to(SRC)} includes {inc!r}: name its folder"
            assert (SRC / inc).is_file(), f"{path.relative_to(SRC)} includes missing {inc}"
            if LAYERS.index(folder) > stage:
                bad.append(f"{path.relative_to(SRC)} -> {inc}")
    assert bad == []


def test_no_two_files_include_each_other():
    graph = {str(p.relative_to(SRC)): set(i for i in includes(p) if not i.startswith("stalloc/"))
             for p in sources()}
    cycles = [(a, b) for a, incs in graph.items() for b in incs if a in graph.get(b, ())]
    assert cycles == []


def test_every_file_opens_with_its_name():
    for path in sources():
        first = path.read_text().splitlines()[0]
        assert first.startswith(f"/* {path.name} - "), f"{path.relative_to(SRC)}: {first!r}"


DECL = re.compile(r"^(?!static|typedef|extern|#|\s|/|\*|})[^;{}()]*?\b(\w+)\(([^;{}]*)\)\s*(?:__attribute__\(\(.*\)\))?\s*;",
                  re.M | re.S)
OWNER = {"base/internal.h": "base/status.c"}  # what every stage shares: error reporting


def test_each_header_declares_only_its_own_files_functions():
    bad = []
    for header in SRC.rglob("*.h"):
        rel = str(header.relative_to(SRC))
        owner = SRC / OWNER.get(rel, rel[:-2] + ".c")
        names = DECL.findall(header.read_text())
        if not names:
            continue
        defined = owner.read_text() if owner.is_file() else ""
        for name, _ in names:
            if not re.search(rf"^[^\s#/*].*\b{name}\([^;]*\)\s*{{", defined, re.M):
                bad.append(f"{rel} declares {name}, not defined in {owner.relative_to(SRC)}")
    assert bad == []
