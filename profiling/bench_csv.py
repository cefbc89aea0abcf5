"""Reading a `kdagraph bench --csv` file: its points, the variants that tell them apart, what the run shares.

profiling/plot.py draws from a Bench. The columns are the command line's (tools/, profiling/README.md);
a column this file does not know is kept: when it tells points apart (a kernel variant, a launch
attribute) it is one more variant, when it never varies it describes the run.
"""
import csv
import math
import statistics
import sys

# What the sweep varies along the x axis and across panels, and the variants every bench CSV has.
AXES = ("tokens", "batch")
KNOWN_VARIANTS = ("mode", "exec", "sampler")
# Results, and settings that follow from the point (bucket = batch here): never a variant.
MEASURED = {"bucket", "host_ms", "device_ms", "tokens_per_s", "state_bytes_per_round", "bandwidth_gbs",
            "copy_ceiling_gbs", "graph_nodes", "graph_us_traced", "idle_pct", "largest_gap_us"}
SHAPE = (("L", "layers"), ("H", "heads"), ("HV", "value_heads"), ("K", "head_k"), ("V", "head_v"))
DESCRIBED = {"backend", "io_dtype", "state_dtype", "conv_width", "rounds"} | {c for _, c in SHAPE}


def number(text):
    """A float from a CSV cell; None when empty or not a number."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def load(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"plot.py: {path} has no rows")
    for need in ("mode", "exec", "tokens", "batch", "host_ms"):
        if need not in rows[0]:
            sys.exit(f"plot.py: {path} has no column '{need}'; is it a kdagraph bench CSV?")
    return rows


def round_time(row):
    """Device time per round when the CSV has it (CUDA), else host time (CPU)."""
    device = number(row.get("device_ms"))
    return device if device is not None else number(row["host_ms"])


def duplicates(rows, columns):
    """How many rows repeat a point already seen, points told apart by these columns."""
    return len(rows) - len({tuple(r.get(c) for c in columns) for r in rows})


def extra_variants(rows):
    """Columns beyond the known ones that tell points apart (say `pdl` on/off, or two presets in one
    file): tried fewest values first, each kept only when it separates points the others did not, so a
    new measured column (many values, separating nothing new) is never one."""
    key = list(AXES + KNOWN_VARIANTS)
    distinct = {c: len({r[c] for r in rows}) for c in rows[0] if c not in key and c not in MEASURED}
    chosen = []
    for c in sorted((c for c, n in distinct.items() if n > 1), key=distinct.get):
        before = duplicates(rows, key + chosen)
        if before == 0:
            break
        if duplicates(rows, key + chosen + [c]) < before:
            chosen.append(c)
    return chosen


def in_order(values):
    """Distinct values in first-seen order, ascending when all are numbers."""
    seen = list(dict.fromkeys(values))
    if all(number(v) is not None for v in seen):
        seen.sort(key=float)
    return seen


class Bench:
    """The CSV's points. A facet is one row of panels: an execution and a value of each extra variant."""

    def __init__(self, rows):
        self.rows = rows
        self.extras = extra_variants(rows)
        self.modes = in_order(r["mode"] for r in rows)
        self.samplers = in_order(self.sampler_of(r) for r in rows)
        self.tokens = sorted({int(r["tokens"]) for r in rows})
        self.batches = sorted({int(r["batch"]) for r in rows})
        self.facets = list(dict.fromkeys(self.facet_of(r) for r in rows))
        self.repeated = duplicates(rows, list(AXES + KNOWN_VARIANTS) + self.extras)
        self.on_device = any(number(r.get("device_ms")) is not None for r in rows)

    @staticmethod
    def sampler_of(row):
        return row.get("sampler") or "in"  # CSVs from before the sampler column ran it in the round

    def facet_of(self, row):
        return (row["exec"],) + tuple(row[c] for c in self.extras)

    def facet_name(self, facet):
        return ", ".join([facet[0]] + [f"{c} {v}" for c, v in zip(self.extras, facet[1:])])

    def series(self, value, mode, sampler, facet, tokens):
        """(batch, value) of one line, batches ascending: the median where a point repeats, points without
        a value left out."""
        by_batch = {}
        for r in self.rows:
            if (r["mode"], self.sampler_of(r), self.facet_of(r), int(r["tokens"])) == (mode, sampler, facet, tokens):
                v = value(r)
                if v is not None:
                    by_batch.setdefault(int(r["batch"]), []).append(v)
        return [(b, statistics.median(vs)) for b, vs in sorted(by_batch.items())]

    def shared(self, column):
        """The column's one value over the whole file; None when absent, empty or varying."""
        values = {r.get(column) for r in self.rows}
        return values.pop() or None if len(values) == 1 else None

    def describe(self):
        """What every point shares: backend, shape, dtypes, conv, any unknown column that never varies."""
        parts = []
        if self.shared("backend"):
            parts.append(f"{self.shared('backend')} backend")
        shape = " ".join(f"{sym}={self.shared(c)}" for sym, c in SHAPE if self.shared(c))
        if shape:
            parts.append(shape)
        for label, c in (("io", "io_dtype"), ("state", "state_dtype")):
            if self.shared(c):
                parts.append(f"{label} {self.shared(c)}")
        conv = self.shared("conv_width")
        if conv:
            parts.append("no short conv" if conv == "0" else f"conv W={conv}")
        known = set(AXES + KNOWN_VARIANTS) | MEASURED | DESCRIBED
        parts += [f"{c} {self.shared(c)}" for c in self.rows[0] if c not in known and self.shared(c)]
        if self.shared("rounds"):
            parts.append(f"median of {self.shared('rounds')} rounds")
        return ", ".join(parts)
