#!/usr/bin/env python3
"""Edits an mlt plan file in place of a hostile user (standard library only).

  edit_plan.py IN OUT EDIT... [--keep-checksum]

Reads the plan IN (a FlatBuffer of include/mlt/Plan/Plan.fbs, then
the 8-byte trailer "MLTC" + CRC-32 of PlanFormat.h), applies the edits in
order, and writes OUT with the checksum recomputed over the edited content,
so that what mlt-run reports is the semantic check behind the checksum
(--keep-checksum keeps the old trailer: what a damaged file looks like).
Each edit rewrites a value where it lies, so the file keeps its layout:

  flip:OFFSET[:MASK]              XOR byte OFFSET of the content (negative:
                                  from its end) with MASK (default 0xff)
  truncate:SIZE                   keep the first SIZE bytes (no trailer)
  version:N                       the plan's format_version
  microbatches:N                  the model info's micro-batches per step
  vocab:N                         the model info's vocab_size
  chunks:N                        the model info's sequence_chunks (present
                                  only in a plan that has some)
  int:PROGRAM:KERNEL:ATTR:VALUE   integer attribute ATTR (its position) of
                                  the first KERNEL launch of PROGRAM (rank 0)
  float:PROGRAM:KERNEL:ATTR:VALUE the same, of a float attribute
  output:PROGRAM:KERNEL:POS:NAME  output POS of that launch: buffer NAME
  input:PROGRAM:KERNEL:POS:NAME   input POS of that launch: buffer NAME
                                  (KERNEL#N: the N-th launch of KERNEL,
                                  from 0, for int, float, output, input)
  config:OLD|NEW                  in the model's hf_config text, OLD replaced
                                  by NEW (of the same length)
"""
import struct
import sys
import zlib

# Field positions (the schema's declaration order).
PLAN_VERSION, PLAN_MODEL, PLAN_RANKS = 0, 2, 4
MODEL_CONFIG, MODEL_VOCAB, MODEL_MICROBATCHES, MODEL_CHUNKS = 0, 1, 5, 6
RANK_BUFFERS, RANK_PROGRAMS = 2, 3
BUFFER_NAME = 0
PROGRAM_NAME, PROGRAM_INSTRUCTIONS = 0, 1
INST_KERNEL, INST_INPUTS, INST_OUTPUTS, INST_INTS, INST_FLOATS = 0, 1, 2, 3, 4


class Plan:
    """Just enough of a FlatBuffers reader to find a field's bytes."""

    def __init__(self, data):
        self.data = bytearray(data)

    def u32(self, at):
        return struct.unpack_from("<I", self.data, at)[0]

    def field(self, table, index):
        """The position of field `index` of the table at `table`; None when
        the field is absent (it has the schema's default)."""
        vtable = table - struct.unpack_from("<i", self.data, table)[0]
        vsize = struct.unpack_from("<H", self.data, vtable)[0]
        if 4 + 2 * index >= vsize:
            return None
        offset = struct.unpack_from("<H", self.data, vtable + 4 + 2 * index)[0]
        return table + offset if offset else None

    def ref(self, table, index):
        """What an offset field (table, vector, string) points to."""
        at = self.field(table, index)
        if at is None:
            sys.exit(f"edit_plan.py: field {index} is absent")
        return at + self.u32(at)

    def vector(self, at):
        """(count, position of element 0)."""
        return self.u32(at), at + 4

    def tables(self, table, index):
        count, first = self.vector(self.ref(table, index))
        return [first + 4 * i + self.u32(first + 4 * i) for i in range(count)]

    def string(self, table, index):
        count, first = self.vector(self.ref(table, index))
        return bytes(self.data[first:first + count])

    def root(self):
        return self.u32(0)

    def launch(self, program_name, kernel):
        """The first launch of `kernel` in rank 0's program `program_name`
        (`kernel#n`: the n-th, from 0)."""
        kernel, _, nth = kernel.partition("#")
        nth = int(nth) if nth else 0
        rank = self.tables(self.root(), PLAN_RANKS)[0]
        for program in self.tables(rank, RANK_PROGRAMS):
            if self.string(program, PROGRAM_NAME).decode() != program_name:
                continue
            for inst in self.tables(program, PROGRAM_INSTRUCTIONS):
                if self.string(inst, INST_KERNEL).decode() == kernel:
                    if nth == 0:
                        return inst
                    nth -= 1
        sys.exit(f"edit_plan.py: no {kernel} launch in program {program_name}")

    def buffer_index(self, name):
        rank = self.tables(self.root(), PLAN_RANKS)[0]
        for i, buffer in enumerate(self.tables(rank, RANK_BUFFERS)):
            if self.string(buffer, BUFFER_NAME).decode() == name:
                return i
        sys.exit(f"edit_plan.py: no buffer {name}")

    def set_scalar(self, table, index, fmt, value, what):
        at = self.field(table, index)
        if at is None:
            sys.exit(f"edit_plan.py: the plan has no {what} to edit")
        struct.pack_into(fmt, self.data, at, value)


def edit(plan, spec):
    kind, _, rest = spec.partition(":")
    root = plan.root()
    if kind == "flip":
        at, _, mask = rest.partition(":")
        plan.data[int(at)] ^= int(mask, 0) if mask else 0xFF
    elif kind == "truncate":
        del plan.data[int(rest):]
    elif kind == "version":
        plan.set_scalar(root, PLAN_VERSION, "<I", int(rest), "format_version")
    elif kind in ("microbatches", "vocab", "chunks"):
        model = plan.ref(root, PLAN_MODEL)
        index = {"microbatches": MODEL_MICROBATCHES, "vocab": MODEL_VOCAB,
                 "chunks": MODEL_CHUNKS}[kind]
        plan.set_scalar(model, index, "<q", int(rest), kind)
    elif kind in ("int", "float", "output", "input"):
        program, kernel, position, value = rest.split(":", 3)
        inst = plan.launch(program, kernel)
        index = {"int": INST_INTS, "float": INST_FLOATS,
                 "output": INST_OUTPUTS, "input": INST_INPUTS}[kind]
        count, first = plan.vector(plan.ref(inst, index))
        position = int(position)
        if position >= count:
            sys.exit(f"edit_plan.py: the {kernel} launch has {count} {kind}s")
        if kind == "int":
            struct.pack_into("<q", plan.data, first + 8 * position, int(value))
        elif kind == "float":
            struct.pack_into("<d", plan.data, first + 8 * position,
                             float(value))
        else:  # (an output or an input: a buffer index)
            struct.pack_into("<I", plan.data, first + 4 * position,
                             plan.buffer_index(value))
    elif kind == "config":
        old, new = rest.split("|", 1)
        if len(old) != len(new):
            sys.exit("edit_plan.py: config:OLD|NEW needs OLD and NEW of one "
                     "length")
        model = plan.ref(root, PLAN_MODEL)
        count, first = plan.vector(plan.ref(model, MODEL_CONFIG))
        text = bytes(plan.data[first:first + count])
        if old.encode() not in text:
            sys.exit(f"edit_plan.py: the hf_config has no {old!r}")
        plan.data[first:first + count] = text.replace(old.encode(),
                                                      new.encode(), 1)
    else:
        sys.exit(f"edit_plan.py: unknown edit {spec!r}\n{__doc__}")


def main(argv):
    args = [a for a in argv[1:] if a != "--keep-checksum"]
    keep = len(args) != len(argv) - 1
    if len(args) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    data = open(args[0], "rb").read()
    if data[-8:-4] != b"MLTC":
        sys.exit("edit_plan.py: the input has no checksum trailer")
    trailer = data[-8:]
    plan = Plan(data[:-8])
    truncated = False
    for spec in args[2:]:
        edit(plan, spec)
        truncated |= spec.startswith("truncate:")
    out = bytes(plan.data)
    if not truncated:
        out += trailer if keep else b"MLTC" + struct.pack(
            "<I", zlib.crc32(out) & 0xFFFFFFFF)
    open(args[1], "wb").write(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
