#!/usr/bin/env python3
"""The library's kernels as ptxas saw them: registers, shared memory, stack frame and spills per kernel,
read from the `ptxas info` lines a build prints (the library compiles its CUDA sources with -Xptxas=-v).

    ptxas_report.py BUILD_LOG... [--md FILE]

Prints a markdown table, one row per kernel and architecture, then a one-line verdict. Exit status: 0
when kernels were found and none spills or keeps a stack frame (local memory in a kernel that keeps its
state in registers is a performance bug, kernels/CMakeLists.txt); 1 when one does; 2 when the logs hold
no ptxas lines at all (nothing was compiled: the check checked nothing). One kernel keeps a stack frame
by design and is listed as such, not failed (a spill still fails it): the synthetic drafter of the
command line (synthetic_tree_kernel: a tree's child counts). The token-tree verify keeps its branch
states in shared memory (kernels/verify_kernel.cuh [TAG_TREE]), so a stack frame fails it like any verify.
"""

import argparse
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import List, Optional

# Mangled names of the kernels whose stack frame is by design (see the docstring).
STACK_BY_DESIGN = re.compile(r"synthetic_tree_kernel")

ENTRY = re.compile(r"ptxas info\s*: Compiling entry function '([^']+)' for '(sm_\w+)'")
PROPERTIES = re.compile(r"ptxas info\s*: Function properties for (\S+)")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"ptxas info\s*: Used (\d+) registers")


@dataclass
class Kernel:
    mangled: str
    arch: str
    registers: int = 0
    barriers: int = 0
    smem: int = 0
    stack: int = 0
    spill_stores: int = 0
    spill_loads: int = 0
    name: str = ""

    @property
    def stack_by_design(self) -> bool:
        return bool(STACK_BY_DESIGN.search(self.mangled))

    @property
    def flagged(self) -> bool:
        return (self.stack > 0 and not self.stack_by_design) or self.spill_stores > 0 or self.spill_loads > 0


def parse(lines) -> List[Kernel]:
    """Kernels in the order ptxas compiled them; a kernel compiled again (a rebuild appends to the log) as
    it was compiled last."""
    kernels: List[Kernel] = []
    current: Optional[Kernel] = None
    properties_of = None
    for line in lines:
        m = ENTRY.search(line)
        if m:
            current = Kernel(m.group(1), m.group(2))
            properties_of = None
            continue
        if current is None:
            continue
        m = PROPERTIES.search(line)
        if m:
            properties_of = m.group(1)
            continue
        m = FRAME.search(line)
        if m and properties_of == current.mangled:
            current.stack, current.spill_stores, current.spill_loads = (int(x) for x in m.groups())
            continue
        m = USED.search(line)
        if m:
            current.registers = int(m.group(1))
            for pattern, field in ((r"(\d+) barriers", "barriers"), (r"(\d+) bytes smem", "smem")):
                found = re.search(pattern, line)
                setattr(current, field, int(found.group(1)) if found else 0)
            kernels = [k for k in kernels if (k.mangled, k.arch) != (current.mangled, current.arch)] + [current]
            current = None
    return kernels


def readable(mangled: List[str]) -> List[str]:
    """Demangled (c++filt, when there is one) and shortened: no return type, parameters, versioned or
    anonymous namespaces."""
    names = list(mangled)
    tool = shutil.which("cu++filt") or shutil.which("c++filt")
    if tool and names:
        run = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True)
        if run.returncode == 0 and len(run.stdout.splitlines()) == len(names):
            names = run.stdout.splitlines()
    return [shorten(n) for n in names]


def without_parameters(name: str) -> str:
    """`f<...>(a, b<c>)` -> `f<...>`: the parameter list is the last balanced (...) group."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(name[i], 0)
        if depth == 0:
            return name[:i]
    return name


def shorten(name: str) -> str:
    name = without_parameters(re.sub(r"^void ", "", name))
    name = re.sub(r"(CUB|THRUST)_\d+_SM_\d+(_NS)?::", "", name)
    name = name.replace("(anonymous namespace)::", "").replace("kdagraph::", "")
    functor = re.search(r"for_each::static_kernel<.*op_wrapper_t<int, (\w+),", name)
    return f"thrust::for_each kernel of {functor.group(1)}" if functor else name


def markdown(kernels: List[Kernel]) -> str:
    rows = ["| kernel | arch | registers | smem bytes | stack bytes | spill stores | spill loads | barriers |",
            "|---|---|---:|---:|---:|---:|---:|---:|"]
    for k in sorted(kernels, key=lambda k: (k.name, k.arch)):
        mark = " **LOCAL MEMORY**" if k.flagged else (" (stack by design)" if k.stack > 0 else "")
        rows.append(f"| `{k.name}`{mark} | {k.arch} | {k.registers} | {k.smem} | {k.stack} | {k.spill_stores} | "
                    f"{k.spill_loads} | {k.barriers} |")
    return "\n".join(rows) + "\n"


def verdict(kernels: List[Kernel]) -> str:
    if not kernels:
        return "no ptxas lines in the build log (nothing was compiled): registers and spills not checked"
    flagged = [k for k in kernels if k.flagged]
    regs = [k.registers for k in kernels]
    archs = ", ".join(sorted({k.arch for k in kernels}))
    head = (f"{len(kernels)} kernel{'s' if len(kernels) != 1 else ''} ({archs}), {min(regs)} to {max(regs)} registers, "
            f"up to {max(k.smem for k in kernels)} bytes of static smem")
    by_design = [k for k in kernels if k.stack > 0 and not k.flagged]
    if by_design:
        head += f"; {len(by_design)} with a stack frame by design (the synthetic drafter)"
    if not flagged:
        return head + "; no spills, no other stack frames"
    return head + f"; LOCAL MEMORY in {len(flagged)}: " + ", ".join(f"{k.name} ({k.arch})" for k in flagged)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", nargs="+")
    ap.add_argument("--md", help="also write the table and verdict to this file")
    args = ap.parse_args(argv)
    lines = []
    for path in args.logs:
        try:
            with open(path, errors="replace") as f:
                lines.extend(f.read().splitlines())
        except FileNotFoundError:
            print(f"no log {path}")
    kernels = parse(lines)
    for k, name in zip(kernels, readable([k.mangled for k in kernels])):
        k.name = name
    text = (markdown(kernels) if kernels else "") + "\n" + verdict(kernels) + "\n"
    sys.stdout.write(text)
    if args.md:
        with open(args.md, "w") as f:
            f.write(text)
    if not kernels:
        return 2
    return 1 if any(k.flagged for k in kernels) else 0


if __name__ == "__main__":
    sys.exit(main())
