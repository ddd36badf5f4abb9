#!/usr/bin/env python3
"""prof_summary.py LOG... — `kiln bench --profile` logs summed by op: per op type the time,
its share, the node count and the time-weighted TFLOP/s and GB/s; then the N slowest nodes.
Used on the GPU machine to see where a model's step goes against the floor (METHOD.md)."""
import re
import sys


def parse(path):
    rows, total = [], None
    on = False
    for line in open(path, errors="replace"):
        if line.startswith("per-layer profile"):
            on = True
            continue
        if not on:
            continue
        m = re.match(r"\s+sum of nodes ([\d.]+) ms; whole run ([\d.]+) ms", line)
        if m:
            total = float(m.group(2))
            continue
        m = re.match(r"\s+(\d+)\s+([\d.]+)\s+([\d.]+)%\s+(\S+)\s+(\S+)\s+(\S+)\s+(.*)$", line)
        if m:
            t = float(m.group(2))
            tf = float(m.group(4)) if m.group(4) != "-" else None
            gb = float(m.group(5)) if m.group(5) != "-" else None
            rows.append((t, tf, gb, m.group(6), m.group(7).strip()))
    return rows, total


def main():
    top = 6
    for path in sys.argv[1:]:
        rows, total = parse(path)
        if not rows:
            print(f"{path}: no profile")
            continue
        s = sum(r[0] for r in rows)
        print(f"== {path}: {len(rows)} nodes, sum {s:.3f} ms, whole run {total} ms")
        ops = {}
        for t, tf, gb, op, _ in rows:
            o = ops.setdefault(op, [0.0, 0, 0.0, 0.0])
            o[0] += t
            o[1] += 1
            o[2] += (tf or 0) * t
            o[3] += (gb or 0) * t
        for op, (t, n, tft, gbt) in sorted(ops.items(), key=lambda kv: -kv[1][0])[:8]:
            print(f"   {op:22s} {t:8.3f} ms {100 * t / s:5.1f}%  {n:4d} nodes  {tft / t:7.1f} TFLOP/s  {gbt / t:7.0f} GB/s")
        for t, tf, gb, op, rest in sorted(rows, key=lambda r: -r[0])[:top]:
            print(f"     {t:7.3f} ms {op:16s} {tf if tf is not None else '-':>7} TF/s {gb if gb is not None else '-':>7} GB/s  {rest[:110]}")


if __name__ == "__main__":
    main()
