#!/usr/bin/env python3
"""The verify kernel family compared by its machine code, between GPU runs (issue 31): per kernel of a
SASS dump, the static instruction counts by kind, and those of its token loop.

    sass_report.py DUMP_OR_OBJECT... [--cuobjdump PATH] [--arch sm_90] [--md FILE]

Each input is a `cuobjdump --dump-sass` listing, or an object or program that cuobjdump (--cuobjdump, else
cuobjdump on PATH: the CUDA toolkit's, or the one triton's wheel carries under
triton/backends/nvidia/bin) dumps for --arch; a listing may also hold `cuobjdump --dump-resource-usage`'s
lines, which an object's dump adds. For every kernel: registers a thread, stack frame and static shared
memory a block (cuobjdump's figure, with the 1 KB sm_90 reserves a block: ptxas's + 1024), what bounds the
blocks an SM holds ("-" where the inputs do not say; an object whose kernels get none is warned of);
instructions in all; floating point
(FFMA, FMUL, FADD, MUFU); shuffles (SHFL); block barriers (BAR); global loads and stores (LDG, STG), the
cp.async copies (LDGSTS); shared (LDS, STS); local memory (LDL, STL: none may appear, kernels/
CMakeLists.txt). The token loop is the innermost loop (a backward branch's range holding no other) with
the most shuffles: each token's butterflies are there, and every tile unrolls its rows and chunks inside
it, so its counts are a token's work, replayed and new tokens' paths both. Counts are static: they say
what a variant asks of an SM per token, not how long it takes; the GPU sweep (bench_verify_sweep) says
that. Verify kernels are named as profiling/verify_variants.cuh names its members. Exit status 0, or 1
when a kernel touches local memory (LDL/STL, or a stack frame), 2 when the inputs hold no kernel.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

FUNCTION = re.compile(r"^\s*Function : (\S+)")
RESOURCE_FUNCTION = re.compile(r"^\s*Function (\S+?):\s*$")  # --dump-resource-usage: "Function NAME:"
RESOURCES = re.compile(r"^\s*REG:(\d+) STACK:(\d+) SHARED:(\d+) LOCAL:(\d+)")
INSTRUCTION = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P[0-9T]\s+)?([A-Z][A-Z0-9_]*)(\.[A-Z0-9_.]+)?([^;]*);")
BRANCH_TARGET = re.compile(r"^\s*(0x[0-9a-f]+)")

# Opcode -> kind; kinds are the report's columns, in order.
KINDS = {
    "FFMA": "fp", "FMUL": "fp", "FADD": "fp", "MUFU": "fp",
    "SHFL": "shfl",
    "BAR": "bar",
    "LDG": "ldg", "STG": "stg", "LDGSTS": "cp.async",
    "LDS": "lds", "STS": "sts",
    "LDL": "local", "STL": "local",
}
COLUMNS = ["fp", "shfl", "bar", "ldg", "stg", "cp.async", "lds", "sts", "local"]


@dataclass
class Instruction:
    address: int
    opcode: str
    operands: str


@dataclass
class Kernel:
    mangled: str
    code: List[Instruction] = field(default_factory=list)
    name: str = ""
    elements: int = 0  # state elements a thread holds (a verify kernel), else 0
    resources: Optional[Dict[str, int]] = None  # reg, stack, shared (bytes), local (bytes), when known

    @property
    def local_memory(self) -> bool:
        """LDL/STL in the code, or a stack frame or local bytes in the resource usage."""
        r = self.resources or {}
        return self.counts()["local"] > 0 or r.get("stack", 0) > 0 or r.get("local", 0) > 0

    @property
    def unit(self) -> str:
        """The source file of a kernel with internal linkage (its anonymous namespace names it)."""
        m = re.search(r"_GLOBAL__N__[0-9a-f]+_\d+_(\w+?)_(cu|cpp)_[0-9a-f]{8}", self.mangled)
        return f"{m.group(1)}.{m.group(2)}" if m else "-"

    def counts(self, lo: int = 0, hi: Optional[int] = None) -> Dict[str, int]:
        out = {c: 0 for c in COLUMNS}
        out["all"] = 0
        for ins in self.code:
            if ins.address < lo or (hi is not None and ins.address > hi):
                continue
            out["all"] += 1
            kind = KINDS.get(ins.opcode)
            if kind:
                out[kind] += 1
        return out

    def loops(self) -> List[Tuple[int, int]]:
        """[target, branch] of every backward branch."""
        out = []
        for ins in self.code:
            if ins.opcode != "BRA":
                continue
            m = BRANCH_TARGET.match(ins.operands)
            if m and int(m.group(1), 16) <= ins.address:
                out.append((int(m.group(1), 16), ins.address))
        return out

    def token_loop(self) -> Optional[Tuple[int, int]]:
        loops = self.loops()
        innermost = [a for a in loops if not any(b != a and a[0] <= b[0] and b[1] <= a[1] for b in loops)]
        best = None
        for lo, hi in innermost:
            shfl = self.counts(lo, hi)["shfl"]
            if shfl > 0 and (best is None or shfl > best[0]):
                best = (shfl, (lo, hi))
        return best[1] if best else None


def parse_resources(lines) -> Dict[str, Dict[str, int]]:
    """Mangled name -> reg, stack, shared, local, from `cuobjdump --dump-resource-usage` lines."""
    out: Dict[str, Dict[str, int]] = {}
    name = None
    for line in lines:
        m = RESOURCE_FUNCTION.match(line)
        if m:
            name = m.group(1)
            continue
        m = RESOURCES.match(line)
        if m and name:
            out[name] = dict(zip(("reg", "stack", "shared", "local"), map(int, m.groups())))
            name = None
    return out


def parse(lines) -> List[Kernel]:
    lines = list(lines)
    usage = parse_resources(lines)
    kernels: List[Kernel] = []
    for line in lines:
        m = FUNCTION.match(line)
        if m:
            kernels.append(Kernel(m.group(1)))
            continue
        m = INSTRUCTION.match(line)
        if m and kernels:
            kernels[-1].code.append(Instruction(int(m.group(1), 16), m.group(2), m.group(4).strip()))
    for k in kernels:
        k.resources = usage.get(k.mangled)
    return kernels


def demangle(names: List[str]) -> List[str]:
    tool = shutil.which("cu++filt") or shutil.which("c++filt")
    if tool and names:
        run = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True)
        if run.returncode == 0 and len(run.stdout.splitlines()) == len(names):
            return run.stdout.splitlines()
    return list(names)


VERIFY = re.compile(r"verify_kernel<verify_detail::VerifyTile<(\d+), (\d+), (\d+), (\d+), (\d+)>, "
                    r"\(verify_detail::OutputFormula\)(\d), \(verify_detail::VerifyProbe\)(\d), (true|false), "
                    r"(true|false), ([\w:]+), ([\w:]+)(?:, \(verify_detail::VerifySchedule\)(\d))?(?:, (true|false))?>")


def dtype(name: str) -> str:
    return "bf16" if name.endswith("bf16") else "f16" if name.endswith("f16") else "f32" if name == "float" else name


def readable(demangled: str, mangled: str) -> Tuple[str, int]:
    """A verify kernel as verify_variants.cuh names its member (rows64-lanes16-R4-w8-b2, -post, -nostores,
    -prologue, -persistent), its conv, tree and stochastic-rounding switches and io / state dtypes, with the state elements a
    thread holds; any other kernel by its demangled name (and 0)."""
    name = re.sub(r"\(anonymous namespace\)::|kdagraph::", "", demangled)
    m = VERIFY.search(name)
    if not m:
        return (re.sub(r"^void ", "", name).split("(")[0] if demangled != mangled else mangled), 0
    k, lanes, rows, warps, blocks, formula, probe, conv, tree, io, state, schedule, stochastic = m.groups()
    tile_v = int(warps) * (32 // int(lanes)) * int(rows)
    name = f"rows{tile_v}-lanes{lanes}-R{rows}-w{warps}-b{blocks}"
    name += "-post" if formula == "1" else ""
    name += {"1": "-nostores", "2": "-prologue"}.get(probe, "")
    name += "-persistent" if schedule == "1" else ""
    name += " +conv" if conv == "true" else ""
    name += " +tree" if tree == "true" else ""
    name += " +stochastic" if stochastic == "true" else ""
    return f"{name} (K {k}, {dtype(io)} / {dtype(state)})", int(rows) * int(k) // int(lanes)


def is_object(path: str) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def load(path: str, obj: bool, cuobjdump: Optional[str], arch: str) -> List[str]:
    if not obj:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    tool = cuobjdump or shutil.which("cuobjdump")
    if tool is None:
        sys.exit(f"sass_report: {path} is an object file and no cuobjdump was given or found on PATH")
    out = []
    for what in ("--dump-sass", "--dump-resource-usage"):
        run = subprocess.run([tool, what, "-arch", arch, path], capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"sass_report: {tool} {what} -arch {arch} {path} failed:\n{run.stderr}")
        out += run.stdout.splitlines()
    return out


def markdown(kernels: List[Kernel]) -> str:
    head = ("| kernel | unit | registers | stack | static shared (+1 KB reserve) | all | " + " | ".join(COLUMNS) +
            " | token loop: all | fp | shfl | lds | sts | stg | state elements a thread | loop all per element |\n"
            "|---|---|" + "---:|" * (len(COLUMNS) + 12) + "\n")
    rows = []
    for k in sorted(kernels, key=lambda k: (k.name, k.unit)):
        c = k.counts()
        loop = None if "-prologue" in k.name else k.token_loop()  # the probe stops before the token loop
        t = k.counts(*loop) if loop else None
        mark = " **LOCAL MEMORY**" if k.local_memory else ""
        r = k.resources
        cells = [k.unit] + ([str(r["reg"]), str(r["stack"]), str(r["shared"])] if r else ["-"] * 3)
        cells += [str(c["all"])] + [str(c[x]) for x in COLUMNS]
        cells += [str(t[x]) for x in ("all", "fp", "shfl", "lds", "sts", "stg")] if t else ["-"] * 6
        cells += [str(k.elements) if k.elements else "-",
                  f"{t['all'] / k.elements:.1f}" if t and k.elements else "-"]
        rows.append(f"| `{k.name}`{mark} | " + " | ".join(cells) + " |")
    return head + "\n".join(rows) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", help="cuobjdump --dump-sass listings, or objects/programs to dump")
    ap.add_argument("--cuobjdump", help="the cuobjdump to run on objects (default: cuobjdump on PATH)")
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--md", help="also write the table here")
    args = ap.parse_args(argv)
    kernels: Dict[str, Kernel] = {}
    for path in args.inputs:
        if not os.path.exists(path):
            sys.exit(f"sass_report: no such file: {path}")
        obj = is_object(path)
        found = parse(load(path, obj, args.cuobjdump, args.arch))
        for k in found:
            seen = kernels.get(k.mangled)
            if k.resources is None and seen is not None:
                k.resources = seen.resources  # a listing without them keeps what an earlier input said
            kernels[k.mangled] = k  # the same kernel in several inputs counts once
        bare = [k.mangled for k in found if k.resources is None]
        if bare and obj:
            print(f"sass_report: cuobjdump --dump-resource-usage gave {path}'s {len(bare)} of {len(found)} kernels "
                  f"no REG/STACK/SHARED line (a format this script does not read?), first {bare[0]}",
                  file=sys.stderr)
    if not kernels:
        print("sass_report: no kernel in the inputs", file=sys.stderr)
        return 2
    found = list(kernels.values())
    for k, d in zip(found, demangle([k.mangled for k in found])):
        k.name, k.elements = readable(d, k.mangled)
    table = markdown(found)
    local = [k.name for k in found if k.local_memory]
    verdict = f"{len(found)} kernels ({args.arch}); " + (
        f"{len(local)} touch local memory: {', '.join(local)}" if local else "none touches local memory")
    print(table + "\n" + verdict)
    if args.md:
        with open(args.md, "w") as f:
            f.write(table + "\n" + verdict + "\n")
    return 1 if local else 0


if __name__ == "__main__":
    sys.exit(main())
