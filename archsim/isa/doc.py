"""Render docs/isa.md from the opcode table (scripts/gen_isa_doc.py writes it; a test compares)."""

from __future__ import annotations

from archsim.isa.table import IsaTable, OpcodeSpec, OperandSpec, load_table

HEADER = "<!-- Generated from isa/opcodes.yaml by scripts/gen_isa_doc.py. Do not edit by hand. -->"


def _syntax(op: OpcodeSpec) -> str:
    return f"{op.mnemonic} {', '.join(o.name for o in op.operands)}".rstrip()


def _range(operand: OperandSpec) -> str:
    if operand.kind == "enum":
        return ", ".join(operand.enum_values)
    if operand.kind == "f32":
        return "IEEE binary32"
    if operand.kind == "reg":
        return f"r{operand.minimum}..r{operand.maximum}"
    return f"{operand.minimum}..{operand.maximum}"


def _bits(operand: OperandSpec) -> str:
    return f"[{operand.msb}:{operand.lsb}]" if operand.bits > 1 else f"[{operand.lsb}]"


def render_isa_markdown(table: IsaTable | None = None) -> str:
    table = table or load_table()
    top = table.word_bits - 1
    low = table.operand_bits
    out = [HEADER, "", "# PNM instruction set", "",
           f"Fixed-width {table.word_bits}-bit little-endian words. Bits [{top}:{low}] hold the opcode; "
           f"operand fields are packed from bit {low - 1} downwards in the order shown; unused bits must "
           f"be zero. {table.register_count} scalar registers r0..r{table.register_count - 1} (64-bit; r0 "
           f"reads as 0). "
           f"Zero-overhead loops nest {table.loop_stack_depth} deep; labels are absolute instruction "
           f"indices ({table.label_bits} bits). Assembly syntax, directives and the kernels are described in "
           f"isa/README.md.", "", "## Summary", "",
           "| mnemonic | opcode | class | unit | latency class | summary |", "|---|---|---|---|---|---|"]
    for op in table.opcodes:
        out.append(f"| `{op.mnemonic}` | 0x{op.code:02X} | {op.group} | {op.unit} | {op.latency} "
                   f"| {op.summary} |")
    out += ["", "## Instruction classes", ""]
    out += [f"- **{name}**: {doc}" for name, doc in table.classes.items()]
    out += ["", "## Execution units", ""]
    out += [f"- **{name}**: {doc}" for name, doc in table.units.items()]
    out += ["", "## Latency classes", "",
            "Every opcode names one; the timing model gives each class a cost. `scales with` names the "
            "per-instruction counters (from the functional run) that the cost grows with.", "",
            "| class | unit | scales with | meaning |", "|---|---|---|---|"]
    for latency in table.latency_classes.values():
        scales = ", ".join(latency.scales_with) or "fixed"
        out.append(f"| {latency.name} | {latency.unit} | {scales} | {latency.doc} |")
    out += ["", "## Counters", "", "Recorded per executed instruction by the functional executor.", ""]
    out += [f"- `{name}`: {doc}" for name, doc in table.counters.items()]
    out += ["", "## Enumerations", ""]
    for name, values in table.enums.items():
        sizes = ", ".join(f"{i} = {v} ({table.element_bytes[v]} B)" for i, v in enumerate(values))
        out += [f"- **{name}**: {sizes}. {table.enum_docs[name]}"]
    for group in table.classes:
        out += ["", f"## {group.replace('_', ' ').capitalize()} instructions"]
        for op in (o for o in table.opcodes if o.group == group):
            out += ["", f"### `{_syntax(op)}`", "", op.summary, "",
                    f"Opcode 0x{op.code:02X}; unit `{op.unit}`; latency class `{op.latency}`.", ""]
            if op.operands:
                out += ["| operand | bits | kind | range |", "|---|---|---|---|"]
                out += [f"| {o.name} | {_bits(o)} | {o.kind_text} | {_range(o)} |" for o in op.operands]
                out.append("")
            out.append(op.semantics)
            if op.counters:
                out += ["", "Counters: " + ", ".join(f"`{c}`" for c in op.counters) + "."]
    return "\n".join(out) + "\n"
