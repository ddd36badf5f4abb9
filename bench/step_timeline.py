"""Where one training step's time goes on the GPU, from a kernel trace (bench/cupti_trace.c's
CSV, or `nsys stats --report cuda_gpu_trace`'s): the per-node profile (`kiln train
--profile`) times each node on its own, so it cannot say which kernels run beside others on
the step's side streams and which are the critical path. This can:

    CUDA_INJECTION64_PATH=libkiln_cupti_trace.so KILN_CUPTI_TRACE=r50.csv kiln train resnet50 ...
    python3 bench/step_timeline.py r50.csv --step-start gather_batch_kernel [--top 40]

For the last whole step (from the last-but-one kernel whose name holds --step-start to the
last one), it prints the step's span, the time no kernel ran (gaps), and per kernel name:
how many ran, their summed time, the time each ran alone (nothing else on the GPU: what a
faster kernel would save) and the time shared with others, slowest alone first. Kernel
names are shortened to their function name (templates and arguments dropped).
"""
import argparse
import csv
import re
from collections import defaultdict


def short(name):
    n = re.sub(r"\(.*$", "", name)          # arguments
    depth, out = 0, []
    for ch in n:                            # template arguments
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    n = "".join(out).strip()
    n = n.split(" ")[-1]                    # return type
    return n[:70]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--step-start", default="gather_batch_kernel")
    ap.add_argument("--top", type=int, default=40)
    a = ap.parse_args()
    rows = []
    with open(a.csv) as f:
        for r in csv.DictReader(f):
            name, start, dur = r.get("Name", ""), r.get("Start (ns)"), r.get("Duration (ns)")
            if not start or not dur or name.startswith("[CUDA mem"):
                continue
            rows.append((int(start), int(start) + int(dur), name, r.get("Strm", "")))
    rows.sort()
    starts = [r[0] for r in rows if a.step_start in r[2]]
    if len(starts) < 2:
        print(f"fewer than two kernels named *{a.step_start}*: no whole step in {a.csv}")
        return 1
    s0, s1 = starts[-2], starts[-1]
    step = [r for r in rows if s0 <= r[0] < s1]
    span = s1 - s0
    # sweep: each elementary interval's running set
    ev = []
    for i, (s, e, _, _) in enumerate(step):
        ev.append((s, 1, i))
        ev.append((e, -1, i))
    ev.sort()
    running, last, idle = set(), s0, 0
    alone, shared = defaultdict(int), defaultdict(float)
    for t, kind, i in ev:
        dt = t - last
        if dt > 0:
            if not running:
                idle += dt
            elif len(running) == 1:
                alone[short(step[next(iter(running))][2])] += dt
            else:
                for j in running:
                    shared[short(step[j][2])] += dt / len(running)
        last = t
        if kind == 1:
            running.add(i)
        else:
            running.discard(i)
    total, count = defaultdict(int), defaultdict(int)
    streams = defaultdict(int)
    for s, e, name, strm in step:
        total[short(name)] += e - s
        count[short(name)] += 1
        streams[strm] += e - s
    print(f"step: {span / 1e6:.3f} ms, {len(step)} kernels; no kernel running for {idle / 1e6:.3f} ms; "
          f"alone {sum(alone.values()) / 1e6:.3f} ms, overlapped {sum(shared.values()) / 1e6:.3f} ms")
    print("busy per stream (ms): " + ", ".join(f"{k}: {v / 1e6:.2f}" for k, v in sorted(streams.items(), key=lambda x: -x[1])))
    print(f"{'alone ms':>9} {'shared ms':>9} {'sum ms':>8} {'n':>4}  kernel")
    keys = sorted(total, key=lambda k: -(alone[k] + shared[k]))
    for k in keys[:a.top]:
        print(f"{alone[k] / 1e6:9.3f} {shared[k] / 1e6:9.3f} {total[k] / 1e6:8.3f} {count[k]:4d}  {k}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
