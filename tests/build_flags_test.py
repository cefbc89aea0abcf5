#!/usr/bin/env python3
"""Every unit of this build that can compile the kernels' code does so with the exact arithmetic flags:
every CUDA unit with --fmad=false, every C++ unit with the source root on its include path (kernels/ is
reached from there, as kdagraph_internal and the SIMT build give it) with -ffp-contract=off. The last
such flag on a command line wins.

The kernels spell their fused multiply-adds out (math::fmadd) and every mode, every tile of the verify
family and every backend must run the same instruction sequence (docs/modes.md). A unit compiled without the
flag lets the compiler fuse a product into a sum on its own (nvcc with fmad on turns the inlined expf of
softplus and sigmoid into other FMAs), so a kernel built there rounds differently from the library's:
bench_verify_sweep's members, checked bitwise against the library on the GPU, would all differ. No test
without a GPU can see that, so this reads the build's compile_commands.json instead.

    build_flags_test.py --source DIR --build DIR
Exit 0: every unit has its flag; 1: a unit lacks it (each named); 2: no compile_commands.json."""
import argparse
import json
import os
import shlex
import sys

# Per language, how a source file is recognised, the flag (name=value) its command line must end on, and
# whether only units that see the source root are held to it (C++: the install test's consumer units see
# the public headers alone, as a user's code does, and are the user's to compile).
RULES = {".cu": ("--fmad", "false", ("--fmad", "-fmad"), False),
         ".cpp": ("-ffp-contract", "off", ("-ffp-contract",), True),
         ".cc": ("-ffp-contract", "off", ("-ffp-contract",), True)}
# Not ours: GoogleTest built from source (KDAGRAPH_GTEST_SOURCE_DIR, e.g. the carried .gtest/ folder).
THIRD_PARTY = ("googletest", "googlemock", ".gtest")


def last_value(args, names):
    """The value the last of `names` sets on this command line (--x=v or --x v), or None."""
    value = None
    for i, a in enumerate(args):
        for n in names:
            if a.startswith(n + "="):
                value = a.split("=", 1)[1]
            elif a == n and i + 1 < len(args):
                value = args[i + 1]
    return value


def includes(args, directory, root):
    """Whether the command line puts `root` on the include path (-Idir, -I dir, -isystem dir)."""
    dirs = [a[2:] for a in args if a.startswith("-I") and len(a) > 2]
    dirs += [b for a, b in zip(args, args[1:]) if a in ("-I", "-isystem")]
    return any(os.path.realpath(os.path.join(directory, d)) == root for d in dirs)


def ours(path, roots):
    real = os.path.realpath(path)
    inside = any(os.path.commonpath([real, r]) == r for r in roots)
    return inside and not any(part in THIRD_PARTY for part in real.split(os.sep))


def check(entries, roots):
    """(units checked per extension, the units that break their rule as 'file: why')."""
    checked, broken = {}, []
    for e in entries:
        path = os.path.join(e.get("directory", ""), e["file"])
        ext = os.path.splitext(path)[1]
        if ext not in RULES or not ours(path, roots):
            continue
        flag, want, names, seeing_root = RULES[ext]
        args = e["arguments"] if "arguments" in e else shlex.split(e["command"])
        if seeing_root and not includes(args, e.get("directory", ""), roots[0]):
            continue
        got = last_value(args, names)
        checked[ext] = checked.get(ext, 0) + 1
        if got != want:
            broken.append(f"{os.path.relpath(path, roots[0])}: {flag}={got or '(not given)'}, must be {flag}={want}")
    return checked, broken


def self_test():
    """The rule itself on made-up entries, so a checker that accepts everything fails here."""
    root = os.path.realpath(os.sep + "src")
    inc = "-I" + root
    entries = [{"directory": root, "file": "a.cu", "command": "nvcc -O3 --fmad=false -c a.cu"},
               {"directory": root, "file": "b.cu", "command": "nvcc -O3 -c b.cu"},
               {"directory": root, "file": "c.cu", "command": "nvcc --fmad=false --fmad=true -c c.cu"},
               {"directory": root, "file": "d.cpp", "arguments": ["g++", "-I", root, "-ffp-contract=off", "-c", "d.cpp"]},
               {"directory": root, "file": "e.cpp", "command": f"g++ {inc} -ffp-contract=fast -c e.cpp"},
               {"directory": root, "file": "g.cpp", "command": f"g++ -isystem {root} -c g.cpp"},
               {"directory": root, "file": "h.cpp", "command": f"g++ {inc}/include -c h.cpp"},
               {"directory": root, "file": ".gtest/googletest/src/gtest-all.cc", "command": f"g++ {inc} -c x.cc"},
               {"directory": os.sep + "elsewhere", "file": "f.cpp", "command": f"g++ {inc} -c f.cpp"}]
    checked, broken = check(entries, [root])
    named = sorted(b.split(":")[0] for b in broken)
    return checked == {".cu": 3, ".cpp": 3} and named == ["b.cu", "c.cu", "e.cpp", "g.cpp"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", required=True)
    ap.add_argument("--build", required=True)
    args = ap.parse_args()
    if not self_test():
        print("build_flags_test: the check's own rule fails on made-up entries")
        return 1
    db = os.path.join(args.build, "compile_commands.json")
    if not os.path.isfile(db):
        print(f"build_flags_test: no {db} (CMAKE_EXPORT_COMPILE_COMMANDS is set in CMakeLists.txt)")
        return 2
    with open(db) as f:
        entries = json.load(f)
    roots = [os.path.realpath(args.source), os.path.realpath(args.build)]
    checked, broken = check(entries, roots)
    print("units checked: " + ", ".join(f"{n} {ext}" for ext, n in sorted(checked.items())))
    for b in broken:
        print("  " + b)
    if not checked.get(".cpp"):
        print("build_flags_test: no C++ unit of the project in the database")
        return 1
    print(f"{len(broken)} units without their flag")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
