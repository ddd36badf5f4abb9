"""How much of the NCCL all-reduce time overlaps computation, from a kernel trace: Nsight
Systems' or, where nsys is missing, bench/cupti_trace.c's (same columns):

    CUDA_INJECTION64_PATH=build/libkiln_cupti_trace.so KILN_CUPTI_TRACE=r50_%r.csv kiln launch ...
    python3 bench/overlap.py r50_0.csv --step-start gather_batch_kernel

    nsys profile -o r50_%q{RANK} -t cuda --cuda-graph-trace=node kiln train ...   (each rank)
    nsys stats --report cuda_gpu_trace --format csv -o r50 r50_0.nsys-rep
    python3 bench/overlap.py r50_cuda_gpu_trace.csv [--last-ms 500]

Reads the kernels of the trace (memory copies and sets are left out), keeps those of the
last --last-ms milliseconds (the steady steps), and prints: the NCCL kernels' time, the part
of it during which some other kernel ran on the same device (overlapped with computation),
and the timeline of the last step's all-reduces against its other kernels (when the first
and last all-reduce started, relative to the step's first and last kernel), which is what
"the all-reduce overlaps backward" means in numbers.
"""
import argparse
import csv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--last-ms", type=float, default=500.0)
    ap.add_argument("--step-start", default="",
                    help="a kernel name fragment that begins each step (kiln: gather_batch_kernel); "
                         "without it the last step is the kernels after the last gap of 2 ms")
    a = ap.parse_args()
    rows = []
    with open(a.csv) as f:
        for r in csv.DictReader(f):
            name = r.get("Name", "")
            start, dur = r.get("Start (ns)"), r.get("Duration (ns)")
            if not start or not dur or name.startswith("[CUDA mem"):
                continue
            rows.append((int(start), int(start) + int(dur), name, r.get("Device", ""), r.get("Strm", "")))
    if not rows:
        print("no kernels in", a.csv)
        return 1
    rows.sort()
    end = max(e for _, e, _, _, _ in rows)
    starts = [r[0] for r in rows if a.step_start and a.step_start in r[2]]
    if len(starts) >= 2:  # the steps: up to the last step start (what follows may be evaluation)
        end = starts[-1]
    rows = [r for r in rows if r[1] >= end - a.last_ms * 1e6 and r[0] < end]
    nccl = [r for r in rows if "nccl" in r[2].lower()]
    other = [r for r in rows if "nccl" not in r[2].lower()]
    # union of the other kernels' intervals
    merged = []
    for s, e, *_ in sorted(other):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    total = over = 0
    j = 0
    for s, e, *_ in nccl:
        total += e - s
        while j < len(merged) and merged[j][1] <= s:
            j += 1
        k = j
        while k < len(merged) and merged[k][0] < e:
            over += max(0, min(e, merged[k][1]) - max(s, merged[k][0]))
            k += 1
    busy = sum(e - s for s, e in merged)
    print(f"last {a.last_ms:.0f} ms of the trace{' (to the last step start)' if a.step_start else ''}: {len(other)} compute kernels ({busy / 1e6:.1f} ms busy), "
          f"{len(nccl)} NCCL kernels ({total / 1e6:.1f} ms)")
    if total:
        print(f"NCCL time overlapped with other kernels: {over / 1e6:.1f} ms of {total / 1e6:.1f} ms "
              f"({100 * over / total:.0f}%)")
    # the last step: the gap-separated group of kernels at the end (a gap > 2 ms between kernels)
    starts = [i for i, r in enumerate(rows) if a.step_start and a.step_start in r[2]]
    if starts:  # the last whole step: from the last step start in the window to its end
        step = rows[starts[-1]:]
    else:
        step = [rows[-1]]
        for r in reversed(rows[:-1]):
            if step[0][0] - r[1] > 2e6:
                break
            step.insert(0, r)
    s0, s1 = step[0][0], max(e for _, e, _, _, _ in step)
    ar = [r for r in step if "nccl" in r[2].lower()]
    print(f"last step: {len(step)} kernels over {(s1 - s0) / 1e6:.2f} ms, {len(ar)} all-reduce kernels")
    comp = [r for r in step if "nccl" not in r[2].lower()]
    if comp:
        print(f"  compute from {(comp[0][0] - s0) / 1e6:.2f} to {(max(e for _, e, *_ in comp) - s0) / 1e6:.2f} ms")
    for s, e, name, dev, strm in ar[:12]:
        print(f"  all-reduce at {(s - s0) / 1e6:8.2f} .. {(e - s0) / 1e6:8.2f} ms (stream {strm}): {name[:60]}")
    if ar:
        comp_after = [r for r in step if "nccl" not in r[2].lower() and r[0] > ar[0][0]]
        print(f"compute kernels that start after the first all-reduce began: {len(comp_after)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
