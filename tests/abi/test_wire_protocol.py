"""The tests' copies of the wire protocol, pinned to the mock's headers.

The raw peer of tests/support/wire_support.py speaks the mock's protocol without being
generated from it: its ``struct`` layouts, constants and the engine's bounds (which
tests/wire/test_wire_bounds.py tests) are written by hand. The fuzzer
(tests/wire_fuzz/wire.py) reads the header's layout out of mock_libs/wire/protocol.h with
regular expressions. Here the headers are parsed for the names of every field, and a
compiled probe says what the compiler makes of them (offsets, sizes, signedness, the
values of the constants); every layout and constant of those copies must agree with it.
A change on either side fails this test (the planted changes below show that it does).
"""
from __future__ import annotations

import os
import re
import shutil
import struct
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

import wire_support
from wire_fuzz import wire as fuzz_wire

REPO = Path(__file__).resolve().parents[2]
MOCK = REPO / "mock_libs"

# wire_support's layout -> (the header that defines the C struct, the struct)
LAYOUTS = {
    "HDR": ("wire/protocol.h", "msg_hdr"),
    "HELLO": ("wire/protocol.h", "hello_body"),
    "REVERSE": ("wire/protocol.h", "reverse_body"),
    "REGION": ("wire/protocol.h", "wire_region"),
    "CACHE_WIRE": ("core/cache_table.h", "cache_wire"),
    "RELEASE": ("core/keys.h", "release_req"),
    "ENDPOINT": ("wire/peer_id.h", "tp_endpoint"),
    "ID_REQUEST": ("wire/peer_id.h", "id_request"),
    "MAP_REQUEST": ("wire/peer_id.h", "map_request"),
    "MAP_DESC": ("wire/peer_id.h", "map_desc"),
}
# a constant of the tests -> the C expression it copies
CONSTANTS = {
    "MAGIC": "PROTO_MAGIC",
    "VERSION": "PROTO_VERSION",
    "TEXT_LEN": "sizeof(reply_text)",
    "HELLO_LINK": "HELLO_LINK",
    "MODE_DIRECT": "MODE_DIRECT",
}
BOUNDS = ("BOUND_HANDSHAKES", "BOUND_LINKS", "BOUND_PINS_PER_LINK", "BOUND_GONE_RECORDS")   # core/engine.h
SCALARS = {"uint8_t": "u", "uint16_t": "u", "uint32_t": "u", "uint64_t": "u",
           "int8_t": "i", "int16_t": "i", "int32_t": "i", "int64_t": "i"}


def _without_comments(text: str) -> str:
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", "", text, flags=re.S))


def struct_fields(header: str, name: str) -> list[tuple[str, str, bool]]:
    """(C type, field name, whether an array) of each field of `typedef struct name {...}
    name;`, in order."""
    text = _without_comments(header)
    body = re.search(rf"typedef struct {name} \{{(.*?)\}} {name};", text, re.S)
    assert body is not None, f"struct {name} not found"
    fields = []
    for declaration in filter(None, (part.strip() for part in body.group(1).split(";"))):
        c_type, declarators = declaration.split(None, 1)
        for declarator in declarators.split(","):
            named = re.fullmatch(r"\s*(\w+)\s*(\[.*\])?\s*", declarator, re.S)
            assert named is not None, f"struct {name}: cannot read {declaration!r}"
            fields.append((c_type, named.group(1), named.group(2) is not None))
    return fields


def message_types(header: str) -> list[str]:
    """The names of enum msg_type, in order (the enum counts from 1 without gaps)."""
    body = re.search(r"enum msg_type \{(.*?)\};", _without_comments(header), re.S)
    assert body is not None, "enum msg_type not found"
    return re.findall(r"\b(MSG_\w+)", body.group(1))


def _probe(root: Path, tmp_path: Path) -> SimpleNamespace:
    """What the compiler makes of the headers under root: per struct, its size and per
    field (name, offset, size, kind); the value of every constant and message type."""
    headers = {path: (root / path).read_text() for path, _ in LAYOUTS.values()}
    fields = {name: struct_fields(headers[path], name) for path, name in LAYOUTS.values()}
    types = message_types(headers["wire/protocol.h"])
    lines = [f'#include "{path}"' for path in sorted(headers)] + ["#include <stdio.h>", "int main(void)", "{"]
    for name, members in fields.items():
        lines.append(f'    printf("struct {name} %zu\\n", sizeof({name}));')
        for c_type, member, array in members:
            kind = "b" if array else SCALARS.get(c_type, "b")
            lines.append(f'    printf("field {name} {member} %zu %zu {kind}\\n", offsetof({name}, {member}), '
                         f'sizeof((({name} *)0)->{member}));')
    for expr in [*CONSTANTS.values(), *BOUNDS, *types]:
        lines.append(f'    printf("const {expr.replace(" ", "")} %llu\\n", (unsigned long long)({expr}));')
    lines += ["    return 0;", "}"]
    source = tmp_path / "probe.c"
    source.write_text("#include <stddef.h>\n" + "\n".join(lines) + "\n")
    binary = tmp_path / "probe"
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    subprocess.run([os.environ.get("CC", "cc"), "-std=c11", "-D_GNU_SOURCE", f"-I{REPO / 'include'}", f"-I{root}",
                    str(source), "-o", str(binary)], check=True, env=env)
    out = subprocess.run([str(binary)], check=True, capture_output=True, text=True, env=env).stdout
    sizes, layouts, values = {}, {name: [] for name in fields}, {}
    for line in out.splitlines():
        what, *rest = line.split()
        if what == "struct":
            sizes[rest[0]] = int(rest[1])
        elif what == "field":
            layouts[rest[0]].append((rest[1], int(rest[2]), int(rest[3]), rest[4]))
        else:
            values[rest[0]] = int(rest[1])
    return SimpleNamespace(sizes=sizes, layouts=layouts, values=values, types=types)


def python_layout(fmt: struct.Struct) -> list[tuple[int, int, str]]:
    """(offset, size, kind) of each item of a packed ("=") struct format; kind u, i or b."""
    assert fmt.format[0] == "=", f"{fmt.format}: the wire is host-endian, packed"
    items, at = [], 0
    for count, code in re.findall(r"(\d*)([a-zA-Z])", fmt.format[1:]):
        n = int(count or 1)
        if code in "sx":
            size, kind = n, "b"
        else:
            assert n == 1, f"{fmt.format}: write repeated items out"
            size, kind = struct.calcsize("=" + code), "i" if code.islower() else "u"
        if code != "x":
            items.append((at, size, kind))
        at += size
    return items


def mismatches(probe: SimpleNamespace, support: object,
               fuzz: tuple[tuple[tuple[str, int, int], ...], dict[int, str], int]) -> list[str]:
    """Every way the tests' copies differ from the compiled headers, one line each."""
    found = []
    for layout, (_, name) in LAYOUTS.items():
        fmt: struct.Struct = getattr(support, layout)
        c_items = [(offset, size, kind) for _, offset, size, kind in probe.layouts[name]]
        if python_layout(fmt) != c_items or fmt.size != probe.sizes[name]:
            found.append(f"{layout} {fmt.format} (size {fmt.size}) is not struct {name} "
                         f"{probe.layouts[name]} (size {probe.sizes[name]})")
    for constant, expr in CONSTANTS.items():
        if getattr(support, constant) != probe.values[expr.replace(" ", "")]:
            found.append(f"{constant} = {getattr(support, constant)}, the header's {expr} is "
                         f"{probe.values[expr.replace(' ', '')]}")
    for name in probe.types:
        if hasattr(support, name) and getattr(support, name) != probe.values[name]:
            found.append(f"{name} = {getattr(support, name)}, the header's is {probe.values[name]}")
    extra = sorted(n for n in dir(support) if n.startswith("MSG_") and n not in probe.types)
    found += [f"{name}: no such message type in the header" for name in extra]
    found += [f"{name} = {getattr(support, name)}, the header's is {probe.values[name]}" for name in BOUNDS
              if getattr(support, name) != probe.values[name]]
    fields, type_names, magic = fuzz
    c_header = [(field, offset, size) for field, offset, size, _ in probe.layouts["msg_hdr"]]
    if list(fields) != c_header:
        found.append(f"the fuzzer reads msg_hdr as {fields}, the compiler lays it out as {c_header}")
    c_types = {probe.values[name]: name.removeprefix("MSG_") for name in probe.types}
    if type_names != c_types:
        found.append(f"the fuzzer's message types {type_names} are not the header's {c_types}")
    if magic != probe.values["PROTO_MAGIC"]:
        found.append(f"the fuzzer's magic {magic:#x} is not the header's")
    return found


def _fuzz_reading() -> tuple[tuple[tuple[str, int, int], ...], dict[int, str], int]:
    return fuzz_wire.FIELDS, fuzz_wire.TYPE_NAMES, fuzz_wire.MAGIC


@pytest.fixture(scope="module")
def probe(tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    return _probe(MOCK, tmp_path_factory.mktemp("probe"))


def test_the_tests_copies_of_the_protocol_agree_with_the_headers(probe: SimpleNamespace) -> None:
    assert mismatches(probe, wire_support, _fuzz_reading()) == []
    # not vacuous: every layout was compared field by field, every message type by value
    assert len(probe.layouts["hello_body"]) == 15 and probe.sizes["msg_hdr"] == 40
    assert probe.values["MSG_HELLO"] == 1 and len(probe.types) >= 27


def test_a_change_of_the_header_fails_the_comparison(tmp_path: Path) -> None:
    changed = tmp_path / "mock_libs"
    shutil.copytree(MOCK, changed, ignore=shutil.ignore_patterns("*.c", "*.py", "__pycache__"))
    protocol = changed / "wire" / "protocol.h"
    text = protocol.read_text()
    text = text.replace("    uint32_t hixl;", "    uint32_t hixl;\n    uint32_t planted;", 1)        # a field
    text = text.replace("    MSG_UNPIN,", "    MSG_PLANTED,\n    MSG_UNPIN,", 1)                     # a type
    text = text.replace("#define PROTO_VERSION 2u", "#define PROTO_VERSION 3u", 1)                  # a constant
    protocol.write_text(text)
    keys = changed / "core" / "keys.h"
    keys.write_text(keys.read_text().replace("    uint32_t all;", "    uint64_t all;", 1))          # a width
    engine_h = changed / "core" / "engine.h"
    engine_h.write_text(engine_h.read_text().replace("BOUND_LINKS = 256", "BOUND_LINKS = 255", 1))  # a bound
    probe = _probe(changed, tmp_path)
    found = mismatches(probe, wire_support, _fuzz_reading())
    assert [line.split(" ", 1)[0] for line in found] == [
        "HELLO", "RELEASE", "VERSION", "MSG_UNPIN", "MSG_READ", "MSG_READ_REPLY", "MSG_WRITE", "MSG_WRITE_REPLY",
        "MSG_RESOLVE", "MSG_RESOLVE_REPLY", "MSG_RELEASE", "MSG_RELEASE_REPLY", "MSG_PIN_ADDR", "MSG_PIN_ADDR_REPLY",
        "MSG_IDENTIFY", "MSG_IDENTIFY_REPLY", "MSG_DISCONNECT_CHALLENGE", "MSG_DISCONNECT_PROOF", "MSG_MAP",
        "MSG_MAP_REPLY", "MSG_MAP_CHALLENGE", "MSG_MAP_PROOF", "BOUND_LINKS", "the"]


def test_a_change_of_a_copy_fails_the_comparison(probe: SimpleNamespace) -> None:
    support = SimpleNamespace(**{name: getattr(wire_support, name) for name in dir(wire_support)
                                 if name.isupper()})
    support.REGION = struct.Struct("=IIQI")           # a width
    support.MSG_HELLO_REPLY = 3                        # a number
    support.MSG_NO_SUCH = 99                           # a type the header does not have
    support.BOUND_PINS_PER_LINK = 65
    fields, type_names, magic = _fuzz_reading()
    fuzz = (fields[:-1], type_names, magic ^ 1)        # the fuzzer misses a field, misreads the magic
    found = mismatches(probe, support, fuzz)
    assert [line.split(" ", 1)[0] for line in found] == ["REGION", "MSG_HELLO_REPLY", "MSG_NO_SUCH:",
                                                         "BOUND_PINS_PER_LINK", "the", "the"]
