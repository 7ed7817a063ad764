#!/usr/bin/env python3
"""Cross-check memra's GGUF reader and dequantizers against the `gguf` python package.

usage: check_gguf.py MEMRA_MKGGUF [FILE.gguf ...]
With no FILE, writes synthetic models with memra-mkgguf for every tensor type memra supports (and both
architectures, v2 and v3) into a temp dir and checks each. For each file: the python reader must load it,
and `memra-mkgguf --dump` must agree with it on version, keys (names, value types, string/array lengths),
tensors (name, type, dims, offset) and on the double sum and sum of squares of every tensor's dequantized
values (gguf.quants.dequantize vs memra's krn_dequant_row). Exit 0 when everything matches.
"""
import os
import subprocess
import sys
import tempfile

import numpy as np
import gguf

VT = gguf.GGUFValueType
TYPE_NAMES = {VT.UINT8: "u8", VT.INT8: "i8", VT.UINT16: "u16", VT.INT16: "i16", VT.UINT32: "u32",
              VT.INT32: "i32", VT.FLOAT32: "f32", VT.BOOL: "bool", VT.STRING: "string", VT.ARRAY: "array",
              VT.UINT64: "u64", VT.INT64: "i64", VT.FLOAT64: "f64"}


def memra_dump(tool, path):
    out = subprocess.run([tool, "--dump", path], check=True, capture_output=True, text=True).stdout
    head, keys, tensors = {}, {}, {}
    for line in out.splitlines():
        f = line.split()
        if f[0] == "key":
            keys[f[1]] = f[2:]
        elif f[0] == "tensor":
            tensors[f[1]] = f[2:]
        else:
            head[f[0]] = int(f[1])
    return head, keys, tensors


def close(a, b):
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def check(tool, path):
    errors = []
    r = gguf.GGUFReader(path)
    head, keys, tensors = memra_dump(tool, path)
    if head["version"] != int(r.fields["GGUF.version"].contents()):
        errors.append("version differs")
    fields = {k: f for k, f in r.fields.items() if not k.startswith("GGUF.")}
    if set(fields) != set(keys):
        errors.append(f"key sets differ: {sorted(set(fields) ^ set(keys))}")
    for k, f in fields.items():
        if k not in keys:
            continue
        m = keys[k]
        if m[0] != TYPE_NAMES[f.types[0]]:
            errors.append(f"{k}: type {m[0]} vs {TYPE_NAMES[f.types[0]]}")
        elif f.types[0] == VT.ARRAY:
            if m[1] != TYPE_NAMES[f.types[1]] or int(m[2]) != len(f.data):
                errors.append(f"{k}: array {m[1:]} vs {TYPE_NAMES[f.types[1]]} {len(f.data)}")
        elif f.types[0] == VT.STRING and int(m[1]) != len(f.parts[-1]):
            errors.append(f"{k}: string length {m[1]} vs {len(f.parts[-1])}")
    if len(r.tensors) != len(tensors):
        errors.append(f"tensor count {len(tensors)} vs {len(r.tensors)}")
    for t in r.tensors:
        m = tensors.get(t.name)
        if m is None:
            errors.append(f"{t.name}: missing in memra's dump")
            continue
        ne = [int(x) for x in m[1:5]]
        shape = list(int(x) for x in t.shape) + [1] * (4 - len(t.shape))
        if m[0].lower() != t.tensor_type.name.lower() or ne != shape:
            errors.append(f"{t.name}: {m[0]} {ne} vs {t.tensor_type.name} {shape}")
        if int(m[5]) != t.data_offset - r.data_offset:
            errors.append(f"{t.name}: offset {m[5]} vs {t.data_offset - r.data_offset}")
        v = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64).ravel()
        s, sq = float(np.sum(v)), float(np.sum(v * v))
        if not (close(float(m[6]), s) and close(float(m[7]), sq)):
            errors.append(f"{t.name} ({t.tensor_type.name}): memra sum {m[6]} sumsq {m[7]}, gguf {s!r} {sq!r}")
    return errors


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    tool, files = sys.argv[1], sys.argv[2:]
    tmp = None
    if not files:
        tmp = tempfile.TemporaryDirectory()
        types = ("f32", "f16", "bf16", "q4_0", "q4_1", "q8_0", "q4_K", "q5_K", "q6_K")
        specs = [("llama", t, "256", "2") for t in types]
        specs += [("qwen2", "q4_1", "64", "3"), ("llama", "q4_K", "256", "3")]
        for i, (arch, ty, embd, ver) in enumerate(specs):
            p = os.path.join(tmp.name, f"m{i}_{arch}_{ty}_v{ver}.gguf")
            subprocess.run([tool, "-o", p, "--arch", arch, "--type", ty, "--embd-type", ty, "--embd", embd,
                            "--ff", "512" if embd == "256" else "128", "--layers", "2", "--version", ver]
                           + (["--tied"] if i % 2 else []), check=True)
            files.append(p)
    bad = 0
    for p in files:
        errs = check(tool, p)
        print(f"{'OK  ' if not errs else 'FAIL'} {p}")
        for e in errs[:20]:
            print("     ", e)
        bad += bool(errs)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
