#!/usr/bin/env python3
"""choice_bisect.py — which timed choice makes a run fail, when only some runs fail.

kiln's timed choices (cuDNN algorithms, cuBLASLt ranks, the graphs' engines, the depthwise
paths) are kept in one cache file (KILN_CACHE_DIR/cudnn-algos.txt, a line per problem). Runs
with fresh caches each time their choices, so when some of them fail, the choice set may be
what decides. This script:

  1. runs `kiln bench MODEL` with fresh caches until it has a failing and a passing run
     (at most --runs);
  2. replays each one's cache (the same choices, nothing timed where the cache has the
     problem): does the failure follow the cache?
  3. if it does, bisects the problems whose choice differs between the two caches: a cache
     of the passing run's choices with a subset of the failing run's put back, halving the
     subset while it still fails, down to the choice (or the pair) that fails;
  4. replays the failing choice alone under CUDA_LAUNCH_BLOCKING=1 (the error then names the
     faulting node) and, with --sanitize, under compute-sanitizer memcheck.

    bench/choice_bisect.py --kiln KILN --model M.onnx [--batch 128] [--flags "--fp16"]
                           [--runs 8] [--logs DIR] [--budget SECONDS]

With --opts 'SET|SET|...' it asks the question before: which option sets fail at all. Each set
(a word with '=' an environment variable, others flags of kiln bench; the empty set is the
default) runs --runs times with fresh caches, and the failures are counted:

    bench/choice_bisect.py --kiln KILN --model M.onnx --runs 3 \
        --opts '|--disable autotune|--disable conv-gemm|KILN_CUDA_DW_GRAPH=0'

Every run's output is kept under --logs (one file per run; the caches beside them).
Written for efficientnet_b7's intermittent launch failure at batch 128 (bench/NOTES.md).
"""
import argparse
import os
import shutil
import subprocess
import sys
import time

CACHE = "cudnn-algos.txt"


def parse_cache(path):
    """{key: line} of a cache file ('GPU|version|key|choice' lines; comments skipped)."""
    out = {}
    if not os.path.exists(path):
        return out
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            parts = line.split("|")
            if len(parts) < 4:
                continue
            out["|".join(parts[:3])] = line
    return out


def write_cache(dir_, lines):
    os.makedirs(dir_, exist_ok=True)
    with open(os.path.join(dir_, CACHE), "w") as f:
        f.write("# kiln: written by choice_bisect.py\n")
        for line in lines.values():
            f.write(line + "\n")


class Runner:
    def __init__(self, a):
        self.a = a
        self.n = 0
        self.t0 = time.time()

    def left(self):
        return self.a.budget - (time.time() - self.t0)

    def run(self, label, cache_lines=None, env_extra=None, prefix=(), iters=20, flags=()):
        """One kiln bench in a fresh cache dir (seeded with cache_lines). (ok, first error, cache dir)."""
        self.n += 1
        tag = f"{self.n:02d}-{label}"
        cdir = os.path.join(self.a.logs, tag + ".cache")
        shutil.rmtree(cdir, ignore_errors=True)
        os.makedirs(cdir)
        if cache_lines is not None:
            write_cache(cdir, cache_lines)
        env = dict(os.environ, KILN_CACHE_DIR=cdir, KILN_CUDA_CONV_STATS_LOG="1", **(env_extra or {}))
        cmd = [*prefix, self.a.kiln, "bench", self.a.model, "--device", "cuda", "--batch", str(self.a.batch),
               *self.a.flags.split(), *flags, "--iters", str(iters), "--warmup", "3"]
        t = time.time()
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=self.a.run_timeout)
            out, rc = p.stdout + p.stderr, p.returncode
        except subprocess.TimeoutExpired as e:
            out = (e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
            rc = "timeout"
        with open(os.path.join(self.a.logs, tag + ".log"), "w") as f:
            f.write(" ".join(cmd) + "\n" + out)
        ok = rc == 0 and "GPU compute" in out
        err = ""
        if not ok:
            for line in out.splitlines():
                if ("rror" in line or "fail" in line or "ERROR" in line) and "conv-bn-stats" not in line:
                    err = line.strip()[:220]
                    break
            err = err or f"exit {rc}"
        gpu = next((l.strip() for l in out.splitlines() if "GPU compute" in l), "")
        print(f"  [{tag}] {'pass' if ok else 'FAIL'} ({time.time() - t:.0f} s) {gpu[:90] if ok else err}", flush=True)
        return ok, err, cdir


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--flags", default="--fp16")
    ap.add_argument("--runs", type=int, default=8, help="fresh-cache runs at most, to find a failing and a passing one")
    ap.add_argument("--logs", default=None)
    ap.add_argument("--budget", type=float, default=500.0, help="seconds; no run starts after it")
    ap.add_argument("--run-timeout", type=float, default=150.0)
    ap.add_argument("--sanitize", action="store_true", help="memcheck the failing choice alone at the end")
    ap.add_argument("--opts", help="option sets separated by '|': count each one's failures over --runs fresh runs "
                    "instead of bisecting choices")
    a = ap.parse_args()
    a.logs = a.logs or f"/tmp/choice-bisect-{os.getpid()}"
    os.makedirs(a.logs, exist_ok=True)
    r = Runner(a)

    if a.opts is not None:
        for k, words in enumerate(a.opts.split("|")):
            env = dict(w.split("=", 1) for w in words.split() if "=" in w)
            flags = [w for w in words.split() if "=" not in w]
            fails, first = 0, ""
            for i in range(a.runs):
                if r.left() < 30:
                    break
                ok, err, _ = r.run(f"set{k}", env_extra=env, flags=flags)
                fails += not ok
                first = first or err
            print(f"== {words or '(default)'}: {fails} of {a.runs} runs failed{' (' + first + ')' if first else ''}")
        return 0

    print(f"== 1. fresh caches (at most {a.runs} runs)")
    bad = good = None
    for i in range(a.runs):
        if r.left() < 60 or (bad and good):
            break
        ok, err, cdir = r.run("fresh")
        if ok and not good:
            good = cdir
        if not ok and not bad:
            bad = cdir
    if not (bad and good):
        print(f"== no failing and passing pair ({'a failing' if bad else 'no failing'} run, "
              f"{'a passing' if good else 'no passing'} run): stop")
        return 0
    F, P = parse_cache(os.path.join(bad, CACHE)), parse_cache(os.path.join(good, CACHE))

    print("== 2. replays: the failing run's cache (grown by each replay) and the passing run's")
    fails = 0
    for i in range(2):
        ok, _, cdir = r.run("replay-failing", F)
        fails += not ok
        F.update({k: v for k, v in parse_cache(os.path.join(cdir, CACHE)).items() if k not in F})
    passes = sum(r.run("replay-passing", P)[0] for _ in range(2))
    print(f"== failing cache: {fails} of 2 replays failed; passing cache: {passes} of 2 passed")
    if fails < 2 or passes < 2:
        print("== the failure does not follow the cache: not a choice alone (a race, or timing itself)")
        return 0

    D = sorted(k for k in set(F) | set(P) if F.get(k) != P.get(k) and k in F)
    print(f"== 3. {len(D)} problems whose choice differs ({len(F)} in the failing cache, {len(P)} in the passing)")

    def mixed(S):
        lines = dict(P)
        for k in S:
            lines[k] = F[k]
        return lines

    def fails_with(S, label):
        ok, _, _ = r.run(label, mixed(S))
        return not ok

    S = D
    if not fails_with(S, "all-differing"):
        print("== the passing cache with every differing choice of the failing one passes: stop")
        return 0
    while len(S) > 1 and r.left() > 60:
        h = len(S) // 2
        A, B = S[:h], S[h:]
        if fails_with(A, f"half{len(A)}"):
            S = A
        elif fails_with(B, f"half{len(B)}"):
            S = B
        elif fails_with(A, f"half{len(A)}-again"):
            S = A
        elif fails_with(B, f"half{len(B)}-again"):
            S = B
        else:
            print(f"== neither half fails alone: the failure needs choices from both ({len(S)} left)")
            break
    print(f"== the failing choice set ({len(S)}):")
    for k in S:
        print(f"  failing: {F[k].split('|', 2)[2][:400]}")
        print(f"  passing: {P[k].split('|', 2)[2][:400] if k in P else '(not in the passing cache)'}")

    if r.left() > 60:
        print("== 4. the failing set with CUDA_LAUNCH_BLOCKING=1 (names the faulting node)")
        r.run("blocking", mixed(S), {"CUDA_LAUNCH_BLOCKING": "1"}, iters=3)
    if a.sanitize and r.left() > 120 and shutil.which("compute-sanitizer"):
        print("== compute-sanitizer memcheck on the failing set")
        r.run("memcheck", mixed(S), prefix=("compute-sanitizer", "--tool", "memcheck", "--print-limit", "5"), iters=2)
        log = sorted(f for f in os.listdir(a.logs) if f.endswith("memcheck.log"))[-1]
        with open(os.path.join(a.logs, log)) as f:
            lines = [l for l in f if l.startswith("=========")][:40]
        print("".join(lines))
    print(f"logs: {a.logs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
