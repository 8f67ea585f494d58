#!/usr/bin/env python3
"""Generates the per-opcode code of the runtime and the writer from the op
table (include/moe/Runtime/Artifact/OpTable.td, read as the JSON that
`llvm-tblgen --dump-json` prints).

  OpTableGen.py TABLE.json OUTDIR

writes into OUTDIR:
  Opcode.fbs       the schema's Opcode enum (Program.fbs includes it)
  Opcode.h         the runtime's Opcode enum and the attribute enums
  OpViews.h        per opcode: a named accessor view, a builder for the
                   writer, and the dispatcher template
  OpTable.cpp      the op table as data (names, dtypes, attribute layouts,
                   layout fingerprints) for the verifier and the disassembler
  OpVerifier.inc   the verifier's per-opcode shape and attribute checks
"""
import json
import os
import re
import sys


def camel(name):
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def pascal(name):
    return "".join(part[:1].upper() + part[1:] for part in name.split("_"))


def fail(message):
    sys.exit(f"OpTableGen: error: {message}")


class Table:
    def __init__(self, records):
        self.records = records
        self.enums = [records[n] for n in records["!instanceof"]["Enum"]]
        self.enums.sort(key=lambda e: e["!name"])
        ops = [records[n] for n in records["!instanceof"]["Op"]]
        ops.sort(key=lambda op: op["value"])
        self.ops = [Op(self, r) for r in ops]
        values = [op.value for op in self.ops]
        if values != list(range(len(values))):
            fail(f"opcode values must be 0..{len(values) - 1}, found {values}")

    def deref(self, value):
        return self.records[value["def"]]


class Value:
    def __init__(self, table, record, name, index):
        self.name, self.index = name, index
        self.shape = record["shape"]
        self.dtypes = [table.deref(t)["name"] for t in record["dtypes"]]
        self.dtype_of = record["dtypeOf"]
        self.optional = bool(record["optional"])
        self.variadic = bool(record["variadic"])


class Attr:
    def __init__(self, table, record, name, index):
        self.name, self.index = name, index
        self.kind = record["kind"]
        self.constraint = record["constraint"]
        self.requirement = record["requirement"]
        self.optional_set = record["optionalSet"]
        self.per_operand = bool(record["perOperand"])
        self.enum = table.deref(record["enumType"]) if record["enumType"] else None
        self.enum_cases = [table.deref(c) for c in self.enum["cases"]] if self.enum else []
        self.vector = "floats" if self.kind == "float" else "ints"

    @property
    def cpp_type(self):
        return {"float": "float", "bool": "bool", "enum": self.enum and self.enum["name"]}.get(
            self.kind, "int64_t")

    def decode(self, element):
        if self.kind == "bool":
            return f"{element} != 0"
        if self.kind == "enum":
            return f"static_cast<{self.enum['name']}>({element})"
        return element


class Op:
    def __init__(self, table, record):
        self.name = record["!name"]
        self.value = record["value"]
        self.version = record["version"]
        self.in_place = bool(record["inPlace"])
        self.communicates = bool(record["communicates"])
        self.rules = record["rules"]

        def values(dag):
            return [Value(table, table.deref(v), n, i) for i, (v, n) in enumerate(dag["args"])]

        self.operands = values(record["operands"])
        self.results = values(record["results"])
        self.attrs = [Attr(table, table.deref(v), n, i)
                      for i, (v, n) in enumerate(record["attributes"]["args"])]
        self.check()
        self.layouts = self.attr_layouts()

    def check(self):
        names = [v.name for v in self.operands + self.results + self.attrs]
        if len(set(names)) != len(names):
            fail(f"{self.name}: operand, result and attribute names must be distinct")
        for values in (self.operands, self.results):
            for v in values[:-1]:
                if v.optional or v.variadic:
                    fail(f"{self.name}: only the last operand may be optional or variadic")
        for attr in self.attrs:
            if attr.per_operand:
                if not self.operands or not self.operands[-1].variadic or len(self.operands) != 1:
                    fail(f"{self.name}: a per-operand attribute needs one variadic operand")
                if [a for a in self.attrs if a.vector == attr.vector] != [attr]:
                    fail(f"{self.name}: a per-operand attribute must be the only one of its kind")

    def sets(self, vector):
        """The optional sets of attributes in `vector`, in order."""
        sets = []
        for attr in self.attrs:
            if attr.vector == vector and attr.optional_set and attr.optional_set not in sets:
                sets.append(attr.optional_set)
        return sets

    def all_sets(self):
        """The optional sets of both vectors, each once: a set may hold int
        and float attributes alike (RoPE's scaling)."""
        return list(dict.fromkeys(self.sets("ints") + self.sets("floats")))

    def attr_layouts(self):
        """Every way the attributes can be present: for each, the int and
        float counts (-1: one per operand), the present sets and each
        attribute's slot (-1: absent). The counts must tell them apart."""
        all_sets = self.all_sets()
        layouts = []
        for mask in range(1 << len(all_sets)):
            present = {s for i, s in enumerate(all_sets) if mask >> i & 1}
            counts, slots = {"ints": 0, "floats": 0}, []
            for attr in self.attrs:
                if attr.optional_set and attr.optional_set not in present:
                    slots.append(-1)
                elif attr.per_operand:
                    counts[attr.vector] = -1
                    slots.append(0)
                else:
                    slots.append(counts[attr.vector])
                    counts[attr.vector] += 1
            layouts.append((counts["ints"], counts["floats"], mask, slots))
        # Each vector's count alone must tell which of its sets are present
        # (the views switch on it).
        for v, vector in ((0, "ints"), (1, "floats")):
            bits = [i for i, s in enumerate(all_sets) if s in self.sets(vector)]
            seen = {}
            for layout in layouts:
                present = tuple(layout[2] >> i & 1 for i in bits)
                if seen.setdefault(layout[v], present) != present:
                    fail(f"{self.name}: the count of its {vector} attributes does not "
                         "tell which optional ones are present")
        return layouts

    def layout_text(self):
        """What the layout fingerprint covers: positions, names, dtypes and
        attribute encodings (not the shape rules)."""
        def value(v):
            flags = ("?" if v.optional else "") + ("..." if v.variadic else "")
            return f"{v.name}{flags}:{'|'.join(v.dtypes)}{'=' + v.dtype_of if v.dtype_of else ''}"

        def attr(a):
            text = f"{a.name}:{a.kind}"
            if a.enum:
                text += "{" + ",".join(f"{c['name']}={c['value']}" for c in a.enum_cases) + "}"
            if a.optional_set:
                text += f"?{a.optional_set}"
            if a.per_operand:
                text += "[]"
            return text

        return (f"{self.value}:{self.name}({','.join(map(value, self.operands))})"
                f"->({','.join(map(value, self.results))})"
                f"{{{','.join(map(attr, self.attrs))}}}")


def fnv1a64(text):
    h = 0xCBF29CE484222325
    for byte in text.encode():
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


HEADER = "// Generated by lib/Runtime/Artifact/OpTableGen.py from OpTable.td; do not edit.\n"


def gen_fbs(table):
    lines = [HEADER, "namespace moe.artifact;", "", "enum Opcode : uint16 {"]
    lines += [f"  {op.name} = {op.value}," for op in table.ops]
    lines += ["}", ""]
    return "\n".join(lines)


def gen_opcode_h(table):
    out = [HEADER, "#ifndef MOE_RUNTIME_ARTIFACT_OPCODE_H",
           "#define MOE_RUNTIME_ARTIFACT_OPCODE_H", "", "#include <cstdint>", "",
           "namespace moe::rt {", "", "enum class Opcode : uint16_t {"]
    out += [f"  {op.name} = {op.value}," for op in table.ops]
    out += ["};", f"inline constexpr int kNumOpcodes = {len(table.ops)};", ""]
    for enum in table.enums:
        cases = [table.deref(c) for c in enum["cases"]]
        out.append(f"enum class {enum['name']} : int64_t {{")
        out += [f"  {pascal(c['name'])} = {c['value']}," for c in cases]
        out += ["};", ""]
    out += ["} // namespace moe::rt", "", "#endif", ""]
    return "\n".join(out)


def accessor_switch(op, attr, body, absent):
    """Code returning `body(slot)` for the attribute's slot in the
    instruction's layout, or `absent` where it has none."""
    by_slot = {}
    for ints, floats, _, slots in op.layouts:
        count = ints if attr.vector == "ints" else floats
        by_slot.setdefault(slots[attr.index], set()).add(count)
    vector = "intAttrs" if attr.vector == "ints" else "floatAttrs"
    if len(by_slot) == 1 and -1 not in by_slot:
        return f"    return {body(f'instruction.{vector}[{next(iter(by_slot))}]')};"
    lines = [f"    switch (instruction.{vector}.size()) {{"]
    for slot, counts in sorted(by_slot.items()):
        if slot == -1:
            continue
        lines += [f"    case {c}:" for c in sorted(counts)]
        lines.append(f"      return {body(f'instruction.{vector}[{slot}]')};")
    lines += ["    default:", f"      return {absent};", "    }"]
    return "\n".join(lines)


def gen_views(table):
    out = [HEADER, "//", "// Named access to a verified instruction's buffers and attributes, one",
           "// view per opcode; builders that encode an instruction's attributes; the",
           "// dispatcher calling backend.run(view) for an instruction.", "",
           "#ifndef MOE_RUNTIME_ARTIFACT_OPVIEWS_H", "#define MOE_RUNTIME_ARTIFACT_OPVIEWS_H", "",
           '#include "moe/Runtime/Program.h"', "", "#include <cstddef>", "#include <cstdint>", "#include <optional>",
           "#include <utility>", "#include <vector>", "", "namespace moe::rt::ops {", "",
           "/// An instruction's opcode and attributes as the artifact encodes them.",
           "struct EncodedAttrs {", "  Opcode opcode;", "  std::vector<int64_t> ints;",
           "  std::vector<float> floats;", "};", ""]
    for op in table.ops:
        out += view_class(op) + builder(op)
    out += ["/// Calls `backend.run(XView(instruction))` for the instruction's opcode;",
            "/// `backend.unknownOpcode(instruction)` for a value outside the table.",
            "template <class Backend>",
            "auto dispatch(Backend &backend, const Instruction &instruction) {",
            "  switch (instruction.opcode) {"]
    for op in table.ops:
        out += [f"  case Opcode::{op.name}:",
                f"    return backend.run({op.name}View(instruction));"]
    out += ["  }", "  return backend.unknownOpcode(instruction);", "}", "",
            "} // namespace moe::rt::ops", "", "#endif", ""]
    return "\n".join(out)


def view_class(op):
    out = [f"/// {op.name}: ({', '.join(v.name for v in op.operands)}) -> "
           f"({', '.join(v.name for v in op.results)})"
           + (f" {{{', '.join(a.name for a in op.attrs)}}}" if op.attrs else "") + ".",
           f"class {op.name}View {{", "public:",
           f"  static constexpr Opcode kOpcode = Opcode::{op.name};",
           f"  explicit {op.name}View(const Instruction &instruction)",
           "      : instruction(instruction) {}", ""]
    for values, vector in ((op.operands, "operands"), (op.results, "results")):
        for v in values:
            role = "Operand" if vector == "operands" else "Result"
            out.append(f"  static constexpr size_t k{pascal(v.name)}{role} = {v.index};")
            if v.variadic:
                out.append(f"  const std::vector<uint32_t> &{camel(v.name)}() const "
                           f"{{ return instruction.{vector}; }}")
            elif v.optional:
                out += [f"  std::optional<uint32_t> {camel(v.name)}() const {{",
                        f"    if (instruction.{vector}.size() <= {v.index})",
                        "      return std::nullopt;",
                        f"    return instruction.{vector}[{v.index}];", "  }"]
            else:
                out.append(f"  uint32_t {camel(v.name)}() const "
                           f"{{ return instruction.{vector}[{v.index}]; }}")
    for attr in op.attrs:
        out.append(f"  static constexpr size_t k{pascal(attr.name)}Attr = {attr.index};")
        if attr.per_operand:
            vector = "intAttrs" if attr.vector == "ints" else "floatAttrs"
            out.append(f"  const std::vector<{'float' if attr.vector == 'floats' else 'int64_t'}> "
                       f"&{camel(attr.name)}s() const {{ return instruction.{vector}; }}")
        elif attr.optional_set:
            out += [f"  std::optional<{attr.cpp_type}> {camel(attr.name)}() const {{",
                    accessor_switch(op, attr, attr.decode, "std::nullopt"), "  }"]
        else:
            out += [f"  {attr.cpp_type} {camel(attr.name)}() const {{",
                    accessor_switch(op, attr, attr.decode, "{}"), "  }"]
    out += ["", "  const Instruction &instruction;", "};", ""]
    return out


# The <Set>Attrs structs emitted so far, by name.
SET_STRUCTS = {}


def builder(op):
    """build<Op>(...): the attributes in the artifact's encoding. An optional
    set of several attributes is one std::optional struct, <Set>Attrs,
    shared by the ops whose set has the same members."""
    params, body, structs = [], [], []
    sets_done = set()
    for attr in op.attrs:
        push = "ints" if attr.vector == "ints" else "floats"
        if attr.per_operand:
            params.append(f"std::vector<{'float' if push == 'floats' else 'int64_t'}> {camel(attr.name)}s")
            body.append(f"  encoded.{push} = std::move({camel(attr.name)}s);")
        elif attr.optional_set:
            members = [a for a in op.attrs if a.optional_set == attr.optional_set]
            if len(members) == 1:
                params.append(f"std::optional<{attr.cpp_type}> {camel(attr.name)}")
                body += [f"  if ({camel(attr.name)})",
                         f"    encoded.{push}.push_back(static_cast<{'float' if push == 'floats' else 'int64_t'}>(*{camel(attr.name)}));"]
            elif attr.optional_set not in sets_done:
                sets_done.add(attr.optional_set)
                struct = f"{pascal(attr.optional_set)}Attrs"
                text = [f"struct {struct} {{"] + [f"  {m.cpp_type} {camel(m.name)};" for m in members] + ["};", ""]
                if struct not in SET_STRUCTS:
                    SET_STRUCTS[struct] = text
                    structs += text
                elif SET_STRUCTS[struct] != text:
                    fail(f"{op.name}: optional set {attr.optional_set} differs from another op's")
                params.append(f"std::optional<{struct}> {camel(attr.optional_set)}")
                body.append(f"  if ({camel(attr.optional_set)}) {{")
                for m in members:
                    mpush = "ints" if m.vector == "ints" else "floats"
                    body.append(f"    encoded.{mpush}.push_back(static_cast<{'float' if mpush == 'floats' else 'int64_t'}>({camel(attr.optional_set)}->{camel(m.name)}));")
                body.append("  }")
        else:
            params.append(f"{attr.cpp_type} {camel(attr.name)}")
            body.append(f"  encoded.{push}.push_back(static_cast<{'float' if push == 'floats' else 'int64_t'}>({camel(attr.name)}));")
    out = structs + [f"inline EncodedAttrs build{op.name}({', '.join(params)}) {{",
                     f"  EncodedAttrs encoded{{Opcode::{op.name}, {{}}, {{}}}};"]
    out += body + ["  return encoded;", "}", ""]
    return out


def gen_table_cpp(table):
    out = [HEADER, '#include "moe/Runtime/Artifact/OpTable.h"', "", "namespace moe::rt::ops {",
           "namespace {", ""]
    for enum in table.enums:
        cases = [table.deref(c) for c in enum["cases"]]
        out.append(f"constexpr EnumCaseInfo k{enum['name']}Cases[] = {{")
        out += [f'    {{"{c["name"]}", {c["value"]}}},' for c in cases]
        out += ["};", f'constexpr EnumInfo k{enum["name"]}Enum = {{"{enum["name"]}", '
                f"k{enum['name']}Cases, {len(cases)}}};", ""]
    for op in table.ops:
        def values(vs, suffix):
            if not vs:
                return []
            lines = [f"constexpr ValueInfo k{op.name}{suffix}[] = {{"]
            for v in vs:
                mask = " | ".join(f"dtypeBit(DType::{t})" for t in v.dtypes)
                of = next((o.index for o in op.operands if o.name == v.dtype_of), -1)
                lines.append(f'    {{"{v.name}", {mask}, {of}, {str(v.optional).lower()}, '
                             f"{str(v.variadic).lower()}}},")
            return lines + ["};"]
        out += values(op.operands, "Operands") + values(op.results, "Results")
        if op.attrs:
            sets = op.all_sets()
            out.append(f"constexpr AttrInfo k{op.name}Attrs[] = {{")
            for a in op.attrs:
                enum = f"&k{a.enum['name']}Enum" if a.enum else "nullptr"
                set_index = sets.index(a.optional_set) if a.optional_set else -1
                out.append(f'    {{"{a.name}", AttrKind::{pascal(a.kind)}, {set_index}, '
                           f"{str(a.per_operand).lower()}, {enum}}},")
            out.append("};")
            out.append(f"constexpr AttrLayout k{op.name}Layouts[] = {{")
            for ints, floats, mask, slots in op.layouts:
                out.append(f"    {{{ints}, {floats}, {mask}u, {{{', '.join(map(str, slots))}}}}},")
            out.append("};")
        out.append("")
    out += ["} // namespace", "", "const OpInfo kOpTable[kNumOpcodes] = {"]
    for op in table.ops:
        def ref(suffix, items):
            return f"k{op.name}{suffix}, {len(items)}" if items else "nullptr, 0"
        out.append(f'    {{"{op.name}", Opcode::{op.name}, "{op.version}", '
                   f"{ref('Operands', op.operands)}, {ref('Results', op.results)}, "
                   f"{ref('Attrs', op.attrs)}, {ref('Layouts', op.layouts if op.attrs else [])}, "
                   f"{str(op.in_place).lower()}, {str(op.communicates).lower()}, "
                   f"0x{fnv1a64(op.layout_text()):016x}ull}},"
                   f"  // {op.layout_text()}")
    out += ["};", "", "} // namespace moe::rt::ops", ""]
    return "\n".join(out)


def pattern_code(op, pattern):
    """A shape pattern as the verifier's ShapePattern expression."""
    pattern = pattern.strip()
    if pattern.startswith("="):
        source = next((v for v in op.operands if v.name == pattern[1:]), None)
        if source is None:
            fail(f"{op.name}: shape '{pattern}' names no operand")
        return f"exactly(operand({source.index}).shape)"
    if not (pattern.startswith("[") and pattern.endswith("]")):
        fail(f"{op.name}: shape pattern '{pattern}' is not [...]")
    dims = [d.strip() for d in pattern[1:-1].split(",") if d.strip()]
    code = []
    for d in dims:
        if d.startswith("$"):
            attr = next((a for a in op.attrs if a.name == d[1:]), None)
            if attr is None or attr.kind != "int" or attr.optional_set:
                fail(f"{op.name}: shape '{pattern}' names no required int attribute {d}")
            code.append(f"DimPattern(op.{camel(attr.name)}())")
        elif re.fullmatch(r"-?\d+", d):
            code.append(f"DimPattern(int64_t{{{d}}})")
        else:
            code.append(f'"{d}"')
    return "ShapePattern{" + ", ".join(code) + "}"


def constraint_code(op, attr, value):
    def sub(match):
        name = match.group(1)
        if name == "_":
            return value
        other = next((a for a in op.attrs if a.name == name), None)
        if other is None or other.optional_set:
            fail(f"{op.name}: constraint of {attr.name} names no required attribute ${name}")
        return f"op.{camel(other.name)}()"
    return re.sub(r"\$(\w+)", sub, attr.constraint)


def shape_checks(op, values, role):
    lines = []
    for v in values:
        if not v.shape:
            continue
        check = f"MOE_VERIFY_OK({role}Shape(@, {pattern_code(op, v.shape)}));"
        vector = "operands" if role == "operand" else "results"
        if v.variadic:
            lines += [f"    for (size_t i = {v.index}; i < instruction.{vector}.size(); ++i)",
                      "      " + check.replace("@", "i")]
        elif v.optional:
            lines += [f"    if (instruction.{vector}.size() > {v.index})",
                      "      " + check.replace("@", str(v.index))]
        else:
            lines.append("    " + check.replace("@", str(v.index)))
    return lines


def gen_verifier(table):
    out = [HEADER, "// Included into InstructionChecker (InstructionRules.cpp): the attribute",
           "// constraints, then the shapes of the operands that use no attribute, the",
           "// op's rules, then the other shapes.", "",
           "absl::Status checkOpcode() {", "  switch (instruction.opcode) {"]
    for op in table.ops:
        out += [f"  case Opcode::{op.name}: {{", f"    [[maybe_unused]] ops::{op.name}View op(instruction);"]
        for attr in op.attrs:
            if not attr.constraint:
                continue
            if attr.optional_set:
                out += [f"    if (auto value = op.{camel(attr.name)}())",
                        f"      MOE_VERIFY_OK(requireAttr({attr.index}, "
                        f"{constraint_code(op, attr, '*value')}, \"{attr.requirement}\"));"]
            else:
                out.append(f"    MOE_VERIFY_OK(requireAttr({attr.index}, "
                           f"{constraint_code(op, attr, f'op.{camel(attr.name)}()')}, "
                           f"\"{attr.requirement}\"));")
        uses_attr = [v for v in op.operands if "$" in v.shape]
        out += shape_checks(op, [v for v in op.operands if v not in uses_attr], "operand")
        out += [f"    MOE_VERIFY_OK({rule}(op));" for rule in op.rules]
        out += shape_checks(op, uses_attr, "operand")
        out += shape_checks(op, op.results, "result")
        out += ["    return absl::OkStatus();", "  }"]
    out += ["  }", '  return error("unknown opcode");', "}", ""]
    return "\n".join(out)


def main():
    if len(sys.argv) != 3:
        fail("usage: OpTableGen.py TABLE.json OUTDIR")
    with open(sys.argv[1]) as f:
        table = Table(json.load(f))
    outputs = {
        "Opcode.fbs": gen_fbs(table),
        "Opcode.h": gen_opcode_h(table),
        "OpViews.h": gen_views(table),
        "OpTable.cpp": gen_table_cpp(table),
        "OpVerifier.inc": gen_verifier(table),
    }
    os.makedirs(sys.argv[2], exist_ok=True)
    for name, text in outputs.items():
        path = os.path.join(sys.argv[2], name)
        with open(path, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
