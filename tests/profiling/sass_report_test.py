#!/usr/bin/env python3
"""profiling/sass_report.py on made-up SASS listings: instructions counted by kind, the token loop found
as the innermost loop with the most shuffles (not the loop around it, not a loop with fewer), a verify
kernel named as verify_variants.cuh names its member with the state elements a thread holds, registers,
stack and static shared memory from --dump-resource-usage lines (a listing's, an object's through a
stand-in cuobjdump, kept across inputs), local memory (LDL/STL or a stack frame) flagged with exit status
1, and an input with no kernel exit status 2. Exit 0: passed, 1: failed."""
import io
import os
import shutil
import sys
import tempfile
from contextlib import redirect_stderr, redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "profiling"))
import sass_report  # noqa: E402

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)


# verify_kernel<VerifyTile<128, 32, 4, 4, 4>, decayed_state, none, false, false, bf16, float, block_a_unit>,
# as nvcc mangles the library's copy (kernels/verify.cu); PERSISTENT, the same tile's persistent member.
VERIFY = ("_ZN8kdagraph41_GLOBAL__N__591f7c0d_9_verify_cu_36edfe6313verify_kernelINS_13verify_detail10VerifyTileILi128E"
          "Li32ELi4ELi4ELi4EEELNS2_13OutputFormulaE0ELNS2_11VerifyProbeE0ELb0ELb0ENS_4math4bf16EfLNS2_14VerifyScheduleE0EEE"
          "vNS_12VerifyParamsE")
PERSISTENT = VERIFY.replace("VerifyScheduleE0", "VerifyScheduleE1")


def listing(function, body):
    """A cuobjdump --dump-sass function: `body` is (opcode and operands) per instruction, 16 bytes apart."""
    lines = ["", "\t\tFunction : " + function, '\t.headerflags\t@"EF_CUDA_SM90"']
    for i, ins in enumerate(body):
        lines.append(f"        /*{16 * i:04x}*/                   {ins} ;    /* 0x000 */")
        lines.append("                                                /* 0x000 */")
    return lines


def table_row(md):
    """The first kernel row of a --md table, and its cells."""
    row = next((r for r in open(md).read().splitlines() if r.startswith("| `")), "")
    return row, [x.strip() for x in row.strip("|").split("|")]


def usage(function, reg, stack=0, shared=0):
    """A cuobjdump --dump-resource-usage entry of `function`."""
    return [" Function " + function + ":",
            f"  REG:{reg} STACK:{stack} SHARED:{shared} LOCAL:0 CONSTANT[0]:904 TEXTURE:0 SURFACE:0 SAMPLER:0"]


# 0..: prologue; an outer loop [0x30, 0xd0] around an inner one [0x50, 0x90] with 3 shuffles; a later
# innermost loop [0xe0, 0x110] with 1 shuffle.
BODY = [
    "LDG.E R2, desc[UR4][R2.64]",          # 0x00
    "BAR.SYNC.DEFER_BLOCKING 0x0",         # 0x10
    "LDGSTS.E.BYPASS.128 [R5], desc[UR4][R6.64]",  # 0x20
    "LDS R8, [R9]",                        # 0x30 outer loop start
    "FFMA R1, R2, R3, R4",                 # 0x40
    "SHFL.BFLY PT, R0, R1, 0x1, 0x1f",     # 0x50 inner loop start
    "SHFL.BFLY PT, R0, R1, 0x2, 0x1f",     # 0x60
    "@P0 SHFL.BFLY PT, R0, R1, 0x4, 0x1f",  # 0x70
    "FADD R1, R1, R0",                     # 0x80
    "@P1 BRA 0x50",                        # 0x90 inner loop end
    "STS [R9], R1",                        # 0xa0
    "STG.E desc[UR4][R2.64], R1",          # 0xb0
    "MUFU.EX2 R4, R4",                     # 0xc0
    "@!P2 BRA 0x30",                       # 0xd0 outer loop end
    "SHFL.IDX PT, R0, R1, R2, 0x1f",       # 0xe0 second innermost loop
    "FMUL R1, R1, R1",                     # 0xf0
    "BRA 0x120",                           # 0x100 a forward branch: no loop
    "@P3 BRA 0xe0",                        # 0x110
    "EXIT",                                # 0x120
]

kernels = sass_report.parse(listing(VERIFY, BODY) + listing("_Z5otherv", ["STL [R1], R2", "LDL R2, [R1]", "EXIT"]))
check(len(kernels) == 2, f"two functions, found {len(kernels)}")
k = kernels[0]
c = k.counts()
expected = {"all": 19, "fp": 4, "shfl": 4, "bar": 1, "ldg": 1, "stg": 1, "cp.async": 1, "lds": 1, "sts": 1, "local": 0}
check(c == expected, f"counts {c}, expected {expected}")
check(sorted(k.loops()) == [(0x30, 0xd0), (0x50, 0x90), (0xe0, 0x110)], f"loops {k.loops()}")
check(k.token_loop() == (0x50, 0x90), f"the token loop is the inner one with 3 shuffles, found {k.token_loop()}")
loop = k.counts(*k.token_loop())
check(loop["all"] == 5 and loop["shfl"] == 3 and loop["fp"] == 1, f"token loop counts {loop}")
check(kernels[1].counts()["local"] == 2, f"STL and LDL are local memory: {kernels[1].counts()}")
check(k.unit == "verify.cu", f"the kernel's unit from its anonymous namespace: {k.unit}")

if shutil.which("c++filt") or shutil.which("cu++filt"):
    name, elements = sass_report.readable(sass_report.demangle([VERIFY])[0], VERIFY)
    check(name == "rows16-lanes32-R4-w4-b4 (K 128, bf16 / f32)", f"the member's name: {name}")
    check(elements == 16, f"4 rows of 128 / 32 channels a thread: {elements}")
    name, _ = sass_report.readable(sass_report.demangle([PERSISTENT])[0], PERSISTENT)
    check(name == "rows16-lanes32-R4-w4-b4-persistent (K 128, bf16 / f32)", f"the persistent member's name: {name}")
else:
    print("sass_report_test: no c++filt, the name check is skipped")

with tempfile.TemporaryDirectory() as d:
    dump = os.path.join(d, "dump.sass")
    with open(dump, "w") as f:
        f.write("\n".join(listing(VERIFY, BODY)) + "\n")
    md = os.path.join(d, "table.md")
    out = io.StringIO()
    with redirect_stdout(out):
        rc = sass_report.main([dump, "--md", md])
    check(rc == 0, f"a clean kernel exits 0, got {rc}")
    row, cells = table_row(md)
    demangled = bool(shutil.which("c++filt") or shutil.which("cu++filt"))
    check(len(cells) == 23 and cells[2:5] == ["-"] * 3 and cells[5] == "19" and cells[15] == "5" and
          cells[21] == ("16" if demangled else "-"),
          f"the table row (kernel, unit, registers, stack, shared, all, kinds..., loop counts, elements): {row}")

    # The resource usage after the SASS, as an object's dump gives it; other kernels' entries around it.
    with open(dump, "a") as f:
        f.write("\n".join(["", "Resource usage:", " Common:", "  GLOBAL:0"] + usage("_Z5otherv", 40) +
                          usage(VERIFY, 128, shared=14464) + usage("_Z5laterv", 64, shared=99)) + "\n")
    with redirect_stdout(io.StringIO()):
        rc = sass_report.main([dump, "--md", md])
    row, cells = table_row(md)
    check(rc == 0 and cells[2:6] == ["128", "0", "14464", "19"],
          f"registers, stack and static shared memory of the kernel's own entry (rc {rc}): {row}")

    framed = os.path.join(d, "framed.sass")
    with open(framed, "w") as f:
        f.write("\n".join(listing(VERIFY, BODY) + usage(VERIFY, 255, stack=16)) + "\n")
    with redirect_stdout(io.StringIO()):
        rc = sass_report.main([framed])
    check(rc == 1, f"a stack frame is local memory: exits 1, got {rc}")
    # The same kernel again in a listing without resource lines keeps what the first input said.
    bare = os.path.join(d, "bare.sass")
    with open(bare, "w") as f:
        f.write("\n".join(listing(VERIFY, BODY)) + "\n")
    with redirect_stdout(io.StringIO()):
        rc = sass_report.main([framed, bare, "--md", md])
    row, _ = table_row(md)
    check(rc == 1 and "| 255 | 16 |" in row, f"a later listing without resources keeps them (rc {rc}): {row}")

    # An object: sass_report runs cuobjdump twice, --dump-sass and --dump-resource-usage (a stand-in here).
    obj = os.path.join(d, "kernels.o")
    with open(obj, "wb") as f:
        f.write(b"\x7fELF not really")
    with open(os.path.join(d, "sass.txt"), "w") as f:
        f.write("\n".join(listing(VERIFY, BODY)) + "\n")
    with open(os.path.join(d, "usage.txt"), "w") as f:
        f.write("\n".join(usage(VERIFY, 96, shared=7552)) + "\n")
    tool = os.path.join(d, "cuobjdump")
    with open(tool, "w") as f:
        f.write(f"#!/bin/sh\ncase \"$1\" in --dump-sass) cat {d}/sass.txt;; --dump-resource-usage) cat {d}/usage.txt;; "
                "*) exit 9;; esac\n")
    os.chmod(tool, 0o755)
    with redirect_stdout(io.StringIO()):
        rc = sass_report.main([obj, "--cuobjdump", tool, "--md", md])
    row, cells = table_row(md)
    check(rc == 0 and cells[2:6] == ["96", "0", "7552", "19"], f"an object's SASS and resource usage (rc {rc}): {row}")
    with open(os.path.join(d, "usage.txt"), "w") as f:
        f.write(" Function " + VERIFY + ":\n  REGISTERS 96\n")  # a format the script does not read
    err = io.StringIO()
    with redirect_stdout(io.StringIO()), redirect_stderr(err):
        rc = sass_report.main([obj, "--cuobjdump", tool])
    check(rc == 0 and "no REG/STACK/SHARED line" in err.getvalue(),
          f"an object whose kernels get no resources is warned of (rc {rc}): {err.getvalue()!r}")

    with open(dump, "a") as f:
        f.write("\n".join(listing("_Z5otherv", ["STL [R1], R2", "EXIT"])) + "\n")
    with redirect_stdout(io.StringIO()):
        rc = sass_report.main([dump])
    check(rc == 1, f"local memory exits 1, got {rc}")

    empty = os.path.join(d, "empty.sass")
    open(empty, "w").close()
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        rc = sass_report.main([empty])
    check(rc == 2, f"no kernel exits 2, got {rc}")

for f in failures:
    print("FAILED:", f)
print("sass_report_test:", "failed" if failures else "passed")
sys.exit(1 if failures else 0)
