"""Every torchvision classification and segmentation model through kiln, next to PyTorch.

Each model (random weights, eval mode; torch.manual_seed(0)) is exported with
torch.onnx.export (dynamo=False, opset 17, dynamic batch), then:

  --device cpu   kiln fp32 on the CPU (`kiln run --device cpu`) against PyTorch fp32 on the
                 CPU: max relative error (max |kiln - torch| / max |torch|), and top-1
                 agreement. The coverage check (issue 13, "Coverage"); no timings.
  --device cuda  (the default) on the GPU machine, in the same process as PyTorch:
                 - fp32: kiln (`kiln run --strict-fp32`: no TF32) against PyTorch fp32 with TF32 off;
                 - fp16: top-1 agreement of kiln --fp16 with PyTorch fp32 on --fp16-inputs
                   inputs (1,024; segmentation: per pixel, on --seg-inputs images), next to
                   PyTorch fp16's (channels_last) own agreement. BatchNorm statistics are
                   first set by 8 training-mode passes on random inputs (as
                   bench/side_by_side.py --init-bn-stats does), so activations have a trained
                   network's scales (weights stay random);
                 - time, per batch of --batches ("big" = 256, or 128 for the models of BIG128):
                   kiln fp16 (`kiln bench --fp16`: GPU compute median, events around CUDA-graph
                   replays, inputs resident, as bench/zoo.py), PyTorch eager fp16 channels_last
                   and torch.compile (fp16, channels_last, --compile-mode, dynamic=False, one
                   compile per batch size; events around calls, median of 5 runs of N calls).
                   torch.compile's compile time (first call) is recorded too (compile_s).

Robust for long runs: every model runs in a child process with a time limit (--model-timeout,
and what is left of --time-budget), so a crash, hang or out-of-memory costs that model only;
each model's row is appended to --out (JSON lines) as soon as it is done, and models already
in --out are skipped (run a slice per call with the same --out; --redo to run them again).
A failing stage records its error in the row and the rest of the model goes on.

    python3 bench/zoo_all.py --kiln build/kiln --device cpu --models resnet18,vit_b_16
    python3 bench/zoo_all.py --kiln KILN --models all --batches 1,big --time-budget 520 --out zoo.jsonl
    python3 bench/zoo_all.py --kiln KILN --models all --gpus 4 --time-budget 540 --out zoo.jsonl
    python3 bench/zoo_all.py --table zoo.jsonl          # the table of what --out holds

--gpus N (a machine with N GPUs): N models at a time from one queue, each child on its own GPU
(CUDA_VISIBLE_DEVICES), its own 1/N of the CPUs (sched_setaffinity, and as many PyTorch
threads: torch.compile's workers and its launches stay on that share) and its own kiln algorithm
cache. Each timing is still one process on one GPU; what the models share is the host's memory
bandwidth and disk. A model stopped by --time-budget is written with "incomplete": true and runs
again in the next call with the same --out.

Time. What a model costs: the export (5-20 s, CPU), BatchNorm passes, the fp32 match, fp16
agreement (one `kiln run --batch 256` of 1,024 inputs: one plan), two `kiln bench`es, eager, and
torch.compile once per batch size. Measured on H100s with 16 CPU cores a model (bench/NOTES.md,
the sixteenth session): 90-350 s a model with compile, the largest first (compile 15-110 s per
batch size: 15 for convnext_base, 60 for efficientnet_v2_l, 80-110 for maxvit_t and the
densenets); 4 GPUs (--gpus 4) did 9 of the largest models in a 530 s call. --compile-mode
max-autotune-no-cudagraphs (Triton autotuning of every product and convolution) costs several
times more. compile_s in each row is the first call's time; the table's torch.compile column is
mode "default" unless --compile-mode says.

--models: names, or the groups all, classification, segmentation (comma-separated; the
groups leave out SKIP, the largest models; name one to run it). On the GPU machine run it
through `bench/gpu.sh zoo` (ZOO_ARGS), which unpacks the carried kiln and sets the library
path. Needs torch, torchvision, onnx, numpy.
"""
import argparse, json, math, os, re, shutil, signal, statistics, subprocess, sys, tempfile, threading, time, traceback

try:
    import numpy as np
except ImportError:  # --table needs only the standard library (the ctest zoo_all_table)
    np = None

# Left out of the groups (name them to run them): too large for this script's budget.
SKIP = {
    "vit_h_14": "632M parameters (2.5 GB ONNX: torch.onnx writes external data files); 167 GFLOP",
    "regnet_y_128gf": "645M parameters (2.6 GB ONNX in external data files, which kiln loads); 127 GFLOP",
}
# Timed at batch 128 instead of 256 ("big"): the largest models (activations and time).
BIG128 = {"vit_l_16", "vit_l_32", "vit_h_14", "regnet_y_32gf", "regnet_x_32gf", "regnet_y_128gf",
          "efficientnet_b7", "efficientnet_b6", "efficientnet_v2_l", "convnext_large", "swin_b", "swin_v2_b",
          "wide_resnet101_2", "vgg19_bn", "vgg19", "deeplabv3_resnet101", "fcn_resnet101"}


def zoo():
    import torchvision
    cls = torchvision.models.list_models(module=torchvision.models)
    seg = torchvision.models.list_models(module=torchvision.models.segmentation)
    return cls, seg


def pick(spec):
    cls, seg = zoo()
    out = []
    for s in spec.split(","):
        s = s.strip()
        if s in ("all", "classification", "segmentation"):
            group = (cls if s != "segmentation" else []) + (seg if s != "classification" else [])
            out += [m for m in group if m not in SKIP]
        elif s:
            if s not in cls and s not in seg:
                raise SystemExit(f"zoo_all: unknown model '{s}' (torchvision.models.list_models())")
            out.append(s)
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------- one model (child process)

def build(name):
    import torch, torchvision
    torch.manual_seed(0)
    _, seg = zoo()
    if name in seg:
        m = torchvision.models.get_model(name, weights=None, weights_backbone=None)

        class Out(torch.nn.Module):  # the dict's "out" (aux_loss is off without weights)
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, x):
                return self.m(x)["out"]
        return nonzero(Out(m)), True
    kw = {"init_weights": True} if name in ("googlenet", "inception_v3") else {}
    if name == "inception_v3":  # its training-mode aux head needs 299x299 (the BatchNorm passes)
        kw["aux_logits"] = False
    return nonzero(torchvision.models.get_model(name, weights=None, **kw)), False


def nonzero(model):
    """Weight matrices initialised to zero (ViT's head) drawn at random instead: an output
    of zeros would match anything."""
    import torch
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() >= 2 and not p.any():
                p.normal_(0, 0.02)
    return model


def init_bn_stats(model, size, device, passes=8, batch=32):
    """BatchNorm running statistics measured on random inputs (bench/side_by_side.py
    --init-bn-stats): each layer gets a trained network's unit scale; weights stay random."""
    import torch
    bns = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not bns:
        return False
    for m in bns:
        m.momentum = None  # cumulative average over the passes
        m.reset_running_stats()
    model.train().to(device)
    with torch.no_grad():
        g = torch.Generator(device=device).manual_seed(3)
        for _ in range(passes):
            model(torch.randn(batch, 3, size, size, device=device, generator=g))
    model.eval()
    return True


def export(model, path, size):
    import torch
    t0 = time.time()
    torch.onnx.export(model.cpu(), (torch.randn(2, 3, size, size),), path, dynamo=False, opset_version=17,
                      input_names=["x"], output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
    return time.time() - t0


def run_cmd(args, timeout):
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timed out after {timeout:.0f} s: {' '.join(args[:3])}"
    if r.returncode:
        lines = [l for l in (r.stderr + r.stdout).strip().splitlines() if l.strip()]
        return None, (" | ".join(lines[-3:]) or f"exit status {r.returncode}")[-500:]
    return r, ""


def kiln_run(a, path, x, device, prec, tmp, deadline, batch=0):
    """`kiln run` of x; batch > 0: in slices of that many rows, one plan (`kiln run --batch`)."""
    xi, yo = os.path.join(tmp, "x.npy"), os.path.join(tmp, "y.npy")
    np.save(xi, x)
    r, err = run_cmd([a.kiln, "run", path, "--input", xi, "--output", yo, "--device", device, prec] +
                     (["--batch", str(batch)] if batch else []), max(10, deadline - time.time()))
    os.unlink(xi)
    if r is None:
        return None, err
    y = np.load(yo)
    os.unlink(yo)
    return y, ""


def kiln_bench(a, path, batch, dev, deadline):
    iters = 100 if batch == 1 else 20
    if dev == "cpu":  # --dry-run: end-to-end latency, few iterations
        iters = 3
    r, err = run_cmd([a.kiln, "bench", path, "--device", dev, "--batch", str(batch), "--fp16", "--iters",
                      str(iters), "--warmup", "5" if dev == "cuda" else "1"], max(10, deadline - time.time()))
    if r is None:
        return None, err
    line = "GPU compute" if dev == "cuda" else "latency"
    m = re.search(line + r"[^\n]*?median\s+([0-9.]+)", r.stdout)
    return (float(m.group(1)), "") if m else (None, f"no '{line}' line: " + r.stdout[-200:])


def rel(y, ref):
    return float(np.abs(y.astype(np.float64) - ref).max() / max(float(np.abs(ref).max()), 1e-30))


def agree(y, ref):
    return float((y.argmax(1) == ref.argmax(1)).mean())


def torch_ms(model, x, iters):
    import torch
    if x.device.type == "cpu":  # --dry-run: wall clock, few iterations
        with torch.inference_mode():
            model(x)
            ts = []
            for _ in range(3):
                t0 = time.perf_counter()
                model(x)
                ts.append((time.perf_counter() - t0) * 1e3)
        return statistics.median(ts)
    with torch.inference_mode():
        for _ in range(5):
            model(x)
        torch.cuda.synchronize()
        ts = []
        for _ in range(5):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            for _ in range(iters):
                model(x)
            e.record()
            e.synchronize()
            ts.append(s.elapsed_time(e) / iters)
    return statistics.median(ts)


PARTIAL = None  # the child's row so far, written after each stage (kept if the child is killed)


def checkpoint(row):
    if PARTIAL:
        with open(PARTIAL + ".tmp", "w") as f:
            json.dump(row, f)
        os.replace(PARTIAL + ".tmp", PARTIAL)


def stage(row, key, fn):
    """Runs one stage; an exception is recorded in row[key + '_error'] and the model goes on."""
    try:
        return fn()
    except Exception as e:  # noqa: BLE001 (a failing stage is a result)
        row[key + "_error"] = (f"{type(e).__name__}: {e}").strip()[:500]
        if os.environ.get("ZOO_TRACE"):
            traceback.print_exc()
        return None
    finally:
        checkpoint(row)


def devtag(a):
    return a.device + ("-dry-run" if a.dry_run else "")


def degenerate(row):
    """An output too small or too large for a trained network's, or one that barely depends on
    the input (the last layer's bias: deeplabv3_mobilenet_v3_large, googlenet)."""
    m = row.get("ref_max_abs")
    return m is not None and (m < 1e-3 or m > 1e6 or row.get("input_sensitivity", 1) < 1e-2)


def big_batch(name):
    return 128 if name in BIG128 else 256


def one(a, name, deadline, tmp):
    import torch
    torch.set_num_threads(max(1, a.threads or torch.get_num_threads()))
    row = {"model": name, "device": devtag(a)}
    # which code measured the row (the table mixes rows of several sessions)
    row["kiln_git"] = kiln_git(a.kiln)
    row["torch"] = torch.__version__
    path = os.path.join(tmp, name + ".onnx")
    size = a.size
    model, is_seg = build(name)
    row["task"] = "segmentation" if is_seg else "classification"
    row["params_M"] = round(sum(p.numel() for p in model.parameters()) / 1e6, 2)
    dev = a.device
    full = dev == "cuda" or a.dry_run  # the GPU's stages (--dry-run: on the CPU, small)
    if dev == "cuda":
        row["gpu_name"] = torch.cuda.get_device_name()  # ratios only within a row: H100 and H200 rows may mix
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cudnn.benchmark = True
    if full:
        row["bn_stats"] = stage(row, "bn_stats", lambda: init_bn_stats(model, size, dev, *((2, 2) if a.dry_run else ())))
    model = model.eval().cpu()
    row["export_s"] = stage(row, "export", lambda: round(export(model, path, size), 1))
    if row["export_s"] is None:
        return row
    row["onnx_MB"] = round(os.path.getsize(path) / 2**20, 1)

    # fp32 match
    def fp32():
        x = np.random.default_rng(1).standard_normal((a.match_batch, 3, size, size)).astype(np.float32)
        m = model.to(dev)
        with torch.inference_mode():
            ref = m(torch.from_numpy(x).to(dev)).double().cpu().numpy()
        # --strict-fp32: no TF32 on CUDA (kiln's --fp32 uses it for convolutions and products),
        # as PyTorch here; on the CPU it changes nothing
        y, err = kiln_run(a, path, x, dev, "--strict-fp32", tmp, deadline)
        if y is None:
            raise RuntimeError(err)
        if y.shape != ref.shape:
            raise RuntimeError(f"output shape {y.shape}, PyTorch's {ref.shape}")
        row["ref_max_abs"] = float(np.abs(ref).max())
        if row["ref_max_abs"] == 0:
            raise RuntimeError("PyTorch's output is all zeros: no comparison")
        with torch.inference_mode():  # how much the output depends on the input at all
            ref2 = m(torch.from_numpy(x[::-1].copy() * 0.5 + 0.25).to(dev)).double().cpu().numpy()
        row["input_sensitivity"] = rel(ref2, ref)
        row["fp32_max_rel_err"] = rel(y, ref)
        row["fp32_top1_agree"] = agree(y, ref)
        row["fp32_ok"] = row["fp32_max_rel_err"] <= a.tol
        if not row["fp32_ok"]:
            # over tolerance: is it kiln, or the network's conditioning? Both fp32 results
            # against PyTorch in float64 (the exact function up to fp64 rounding; on the GPU too)
            m64 = model.double()
            with torch.inference_mode():
                r64 = m64(torch.from_numpy(x).double().to(dev)).cpu().numpy()
            model.float()
            row["fp64_kiln_rel_err"] = rel(y, r64)
            row["fp64_torch32_rel_err"] = rel(ref, r64)
            # kiln as close to the exact function as PyTorch's own fp32: the network's conditioning
            row["fp32_as_torch"] = row["fp64_kiln_rel_err"] <= 1.5 * row["fp64_torch32_rel_err"]
    t0 = time.time()
    stage(row, "fp32", fp32)
    if not full and degenerate(row):
        # torchvision's initial BatchNorm statistics (mean 0, var 1) leave some models' outputs
        # at 1e-14 (efficientnet) or 1e11 (inception_v3), or the logits equal to the last bias
        # (googlenet): statistics from two training-mode passes give the comparison its meaning
        row["degenerate"] = {k: row.pop(k) for k in ("ref_max_abs", "fp32_max_rel_err", "input_sensitivity")
                             if k in row}
        if stage(row, "bn_stats", lambda: init_bn_stats(model.cpu(), size, "cpu", 2, 2)):
            row["bn_stats"] = True
            model.eval()
            export(model, path, size)
            stage(row, "fp32", fp32)
    row["fp32_s"] = round(time.time() - t0, 1)
    if not full:
        return row

    # fp16 top-1 agreement with PyTorch fp32 (kiln's and PyTorch fp16's own)
    def fp16():
        n = a.seg_inputs if is_seg else a.fp16_inputs
        chunk = min(n, a.fp16_chunk, big_batch(name))
        x = np.random.default_rng(2).standard_normal((n, 3, size, size)).astype(np.float32)
        mf = model.to(dev).float()
        with torch.inference_mode():
            ref = torch.cat([mf(torch.from_numpy(x[i:i + chunk]).to(dev)).float().cpu()
                             for i in range(0, n, chunk)]).numpy()
        mh = model.half().to(memory_format=torch.channels_last)
        with torch.inference_mode():
            t16 = torch.cat([mh(torch.from_numpy(x[i:i + chunk]).to(dev).half()
                                .to(memory_format=torch.channels_last)).float().cpu()
                             for i in range(0, n, chunk)]).numpy()
        model.float()
        row["fp16_inputs"] = n
        row["torch16_top1_agree"] = agree(t16, ref)
        row["torch16_max_rel_err"] = rel(t16, ref)
        y, err = kiln_run(a, path, x, dev, "--fp16", tmp, deadline, batch=chunk)  # one session, chunks
        if y is None:
            raise RuntimeError(err)
        row["kiln16_top1_agree"] = agree(y, ref)
        row["kiln16_max_rel_err"] = rel(y, ref)
        row["fp16_ok"] = row["kiln16_top1_agree"] >= row["torch16_top1_agree"] - 0.005
    if not a.skip_fp16:
        stage(row, "fp16", fp16)

    # times
    for b in a.batches.split(","):
        bs = big_batch(name) if b == "big" else int(b)
        k = f"bs{bs}"
        if time.time() > deadline - 20:
            row[k + "_error"] = "time limit reached before this batch"
            break
        ms, err = kiln_bench(a, path, bs, dev, deadline)
        row[k + "_kiln16_ms"] = ms
        if ms is None:
            row[k + "_kiln16_error"] = err
        checkpoint(row)
        iters = 50 if bs == 1 else 10
        xh = torch.randn(bs, 3, size, size, device=dev, dtype=torch.half).to(memory_format=torch.channels_last)
        mh = model.to(dev).half().to(memory_format=torch.channels_last)
        row[k + "_eager16_ms"] = stage(row, k + "_eager16", lambda: round(torch_ms(mh, xh, iters), 4))
        if not a.skip_compile:
            def comp():
                torch._dynamo.reset()
                mc = torch.compile(mh, mode=None if a.compile_mode == "default" else a.compile_mode, dynamic=False)
                t0 = time.time()
                with torch.inference_mode():
                    mc(xh)
                if dev == "cuda":
                    torch.cuda.synchronize()
                row[k + "_compile_s"] = round(time.time() - t0, 1)
                return round(torch_ms(mc, xh, iters), 4)
            row[k + "_compile16_ms"] = stage(row, k + "_compile16", comp)
            row["compile_mode"] = a.compile_mode
        if ms and row.get(k + "_compile16_ms"):
            row[k + "_vs_compile"] = round(row[k + "_compile16_ms"] / ms, 3)
        if ms and row.get(k + "_eager16_ms"):
            row[k + "_vs_eager"] = round(row[k + "_eager16_ms"] / ms, 3)
        del xh
        model.float().cpu()
        if dev == "cuda":
            torch.cuda.empty_cache()
    return row


def child(a):
    global PARTIAL
    PARTIAL = a.partial
    deadline = time.time() + a.child_limit
    row = {"model": a.one, "device": devtag(a)}
    try:
        work = a.workdir or tempfile.mkdtemp(prefix="zoo_")
        try:
            row = one(a, a.one, deadline, work)
        finally:
            if not a.workdir:
                shutil.rmtree(work, ignore_errors=True)
    except Exception as e:  # noqa: BLE001
        row["error"] = f"{type(e).__name__}: {e}"[:500]
    print("ZOO_ROW " + json.dumps(row), flush=True)


# ---------------------------------------------------------------- driver

def done_models(path):
    done = set()
    if os.path.exists(path):
        for line in open(path):
            try:
                r = json.loads(line)
                if not r.get("incomplete"):  # stopped by a time budget: run again
                    done.add(r["model"])
            except (ValueError, KeyError):
                pass
    return done


def fmt(v, f):
    return f % v if isinstance(v, (int, float)) and not isinstance(v, bool) else "-"


def first_error(r):
    for k, v in r.items():
        if k.endswith("error") and v:
            return f"{k}: {v}"
    return ""


def table(path, device=None):
    rows = {}
    for line in open(path):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if device is None or r.get("device") == device:
            rows[(r.get("device"), r["model"])] = r  # the last row of a model wins (a --redo)
    cpu = sorted((r for r in rows.values() if r.get("device") == "cpu"), key=lambda r: (r.get("task", ""), r["model"]))
    gpu = [r for r in rows.values() if r.get("device") != "cpu"]
    if cpu:
        print(f"{'model':30s} {'load+run':8s} {'max rel err':>11s} {'top1':>5s}  {'s':>5s}  error")
        for r in cpu:
            ok = "fp32_max_rel_err" in r
            over = "over tolerance"
            if "fp64_kiln_rel_err" in r:
                over += (f" (vs PyTorch float64: kiln {r['fp64_kiln_rel_err']:.1e}, PyTorch fp32 "
                         f"{r['fp64_torch32_rel_err']:.1e})")
            print(f"{r['model']:30s} {'ok' if ok else 'FAIL':8s} {fmt(r.get('fp32_max_rel_err'), '%.2e'):>11s} "
                  f"{fmt(r.get('fp32_top1_agree'), '%.2f'):>5s}  {fmt(r.get('fp32_s'), '%.0f'):>5s}  "
                  f"{'' if ok and r['fp32_ok'] else first_error(r)[:150] or over}")
        good = sum(1 for r in cpu if r.get("fp32_ok"))
        cond = sum(1 for r in cpu if not r.get("fp32_ok") and r.get("fp32_as_torch"))
        print(f"\n{good} of {len(cpu)} match (fp32 max rel err <= tolerance)" +
              (f"; {cond} more over it but as close to PyTorch float64 as PyTorch fp32 is" if cond else ""))
    if gpu:
        bss = sorted({int(k[2:].split("_")[0]) for r in gpu for k in r if re.match(r"bs\d+_kiln16_ms", k)})
        head = f"{'model':30s} {'fp32 err':>8s} {'agree k16/t16':>13s} "
        for b in bss:
            head += f"| bs{b} kiln/compile/eager ms (x compile) "
        print(head)
        geo = {b: [] for b in bss}
        for r in gpu:
            line = (f"{r['model']:30s} {fmt(r.get('fp32_max_rel_err'), '%.1e'):>8s} "
                    f"{fmt(r.get('kiln16_top1_agree'), '%.3f'):>6s}/{fmt(r.get('torch16_top1_agree'), '%.3f'):6s} ")
            for b in bss:
                k = f"bs{b}"
                if k + "_kiln16_ms" not in r:
                    line += f"| {'':36s}"
                    continue
                line += (f"| {fmt(r.get(k + '_kiln16_ms'), '%.3f')}/{fmt(r.get(k + '_compile16_ms'), '%.3f')}/"
                         f"{fmt(r.get(k + '_eager16_ms'), '%.3f')} ({fmt(r.get(k + '_vs_compile'), '%.2f')}) ")
                if r.get(k + "_vs_compile"):
                    geo[b].append(r[k + "_vs_compile"])
            e = first_error(r)
            print(line + ("  " + e[:120] if e else ""))
        n32 = sum(1 for r in gpu if r.get("fp32_max_rel_err") is not None and r["fp32_max_rel_err"] <= 1e-4)
        n16 = sum(1 for r in gpu if r.get("fp16_ok"))
        cond = [r for r in gpu if not r.get("fp32_ok") and r.get("fp32_as_torch")]
        for r in cond:
            print(f"{r['model']}: fp32 over tolerance; against PyTorch float64: kiln {r['fp64_kiln_rel_err']:.1e}, "
                  f"PyTorch fp32 {r['fp64_torch32_rel_err']:.1e}")
        print(f"fp32 max rel err <= 1e-4 on {n32} of {len(gpu)} models" +
              (f" ({len(cond)} more over it but as close to PyTorch float64 as PyTorch fp32 is)" if cond else "") +
              f"; kiln fp16 top-1 agreement no lower than PyTorch fp16's minus 0.5 point on {n16}")
        for b in bss:
            if geo[b]:
                g = math.exp(sum(math.log(v) for v in geo[b]) / len(geo[b]))
                print(f"bs{b}: geometric mean of torch.compile/kiln over {len(geo[b])} models: {g:.3f}, "
                      f"kiln at least as fast on {sum(1 for v in geo[b] if v >= 1)}")


def run_one(a, passthrough, name, limit, env=None, cpus=None):
    """One model in a child process (its own process group, killed at `limit`); its row."""
    t0 = time.time()
    cmd = [sys.executable, os.path.abspath(__file__)] + passthrough + ["--one", name, "--child-limit",
                                                                         str(max(limit - 15, 5))]
    if cpus is not None:
        cmd += ["--threads", str(len(cpus))]
    row = None
    work = tempfile.mkdtemp(prefix="zoo_")  # the ONNX (up to GBs) and inputs; removed after
    partial = os.path.join(work, "partial.json")
    cmd += ["--partial", partial, "--workdir", work]

    def so_far(error, incomplete=False):  # what the child finished before it died or was stopped
        try:
            r = json.load(open(partial))
        except (OSError, ValueError):
            r = {"model": name, "device": devtag(a)}
        r["error"] = error
        if incomplete:
            r["incomplete"] = True  # stopped by the run's time budget: not counted as done
        return r

    def pin():
        if cpus is not None:
            os.sched_setaffinity(0, cpus)
    # its own process group: a kill at the time limit also ends the kiln it is running
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, env=env, preexec_fn=pin if cpus is not None else None)
    try:
        out, err = p.communicate(timeout=limit)
        for line in out.splitlines():
            if line.startswith("ZOO_ROW "):
                row = json.loads(line[8:])
        if row is None:
            tail = [l for l in (err + out).strip().splitlines() if l.strip()][-3:]
            row = so_far(f"child exit status {p.returncode}: " + " | ".join(tail)[-500:])
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        by_budget = limit < a.model_timeout
        row = so_far(f"{'run time budget' if by_budget else 'model time limit'} ({limit:.0f} s) reached", by_budget)
    shutil.rmtree(work, ignore_errors=True)
    if limit < a.model_timeout and any("time limit" in str(v) or "timed out" in str(v)
                                       for k, v in row.items() if k.endswith("error")):
        row["incomplete"] = True  # a stage cut short by the run's budget, not by the model's own limit
    row["wall_s"] = round(time.time() - t0, 1)
    return row


def kiln_git(kiln):
    """The 'git:' field of `kiln --version` (commit, -dirty for local changes), or None."""
    try:
        out = subprocess.run([kiln, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for line in out.splitlines():
        if line.startswith("git:"):
            return line.split(":", 1)[1].strip()
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln", help="the kiln executable")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--dry-run", action="store_true", help="with --device cpu: the GPU's stages (fp16 agreement, "
                    "timings, torch.compile) on the CPU, small (inputs 8, batches 1,2, size 64 unless given): checks "
                    "the script, not kiln")
    ap.add_argument("--models", default="all", help="names, or all / classification / segmentation")
    ap.add_argument("--exclude", default="", help="models to leave out")
    ap.add_argument("--batches", default="1,big", help="batches to time (cuda); big: 256, or 128 for BIG128")
    ap.add_argument("--size", type=int, default=224, help="input height and width")
    ap.add_argument("--match-batch", type=int, default=None, help="batch of the fp32 match (cpu 1, cuda 2)")
    ap.add_argument("--tol", type=float, default=1e-4, help="fp32 max relative error allowed")
    ap.add_argument("--fp16-inputs", type=int, default=1024)
    ap.add_argument("--seg-inputs", type=int, default=32, help="segmentation: images for fp16 agreement (per pixel)")
    ap.add_argument("--fp16-chunk", type=int, default=256, help="inputs per PyTorch call and per slice of the "
                    "one `kiln run --batch`")
    ap.add_argument("--skip-fp16", action="store_true")
    ap.add_argument("--skip-compile", action="store_true")
    ap.add_argument("--compile-mode", default="default",
                    choices=["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"])
    ap.add_argument("--model-timeout", type=float, default=900, help="seconds per model (child killed after)")
    ap.add_argument("--time-budget", type=float, default=0, help="seconds for the whole run (0: none); no model "
                    "starts with less than --min-left left, and the running one is stopped at the budget")
    ap.add_argument("--min-left", type=float, default=60)
    ap.add_argument("--gpus", type=int, default=1, help="run this many models at a time, each on its own GPU "
                    "(CUDA_VISIBLE_DEVICES) and its own equal share of the CPUs")
    ap.add_argument("--threads", type=int, default=0, help="PyTorch CPU threads (0: its default)")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "zoo_all.jsonl"))
    ap.add_argument("--redo", action="store_true", help="run models already in --out again")
    ap.add_argument("--table", metavar="JSONL", help="print the table of a results file and exit")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--child-limit", type=float, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--partial", help=argparse.SUPPRESS)
    ap.add_argument("--workdir", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.dry_run:
        if a.device != "cpu":
            ap.error("--dry-run is for --device cpu")
        given = set(sys.argv)
        a.fp16_inputs = a.fp16_inputs if "--fp16-inputs" in given else 8
        a.seg_inputs = a.seg_inputs if "--seg-inputs" in given else 2
        a.batches = a.batches if "--batches" in given else "1,2"
        a.size = a.size if "--size" in given else 64
    if a.match_batch is None:
        a.match_batch = 1 if a.device == "cpu" else 2
    if a.table:
        table(a.table)
        return
    if not a.kiln:
        ap.error("--kiln is required")
    a.kiln = os.path.abspath(a.kiln)
    if a.one:
        child(a)
        return
    t_start = time.time()
    models = [m for m in pick(a.models) if m not in set(a.exclude.split(","))]
    done = set() if a.redo else done_models(a.out)
    todo = [m for m in models if m not in done]
    gpus = max(1, a.gpus)
    print(f"zoo_all: {len(todo)} models to run ({len(models) - len(todo)} already in {a.out}), device {a.device}"
          + (f", {gpus} at a time (one a GPU)" if gpus > 1 else ""), flush=True)
    passthrough = [x for x in sys.argv[1:]]
    # --gpus N: N workers take models from one queue, each on its own GPU (CUDA_VISIBLE_DEVICES)
    # and its own share of this process's CPUs (so one model's torch.compile does not slow another's
    # launches), with its own kiln algorithm cache
    cpus = sorted(os.sched_getaffinity(0))
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    lock = threading.Lock()
    queue = list(todo)
    count = [0]

    def worker(w):
        env, share = None, None
        if gpus > 1:
            env = dict(os.environ)
            env["CUDA_VISIBLE_DEVICES"] = visible[w] if w < len(visible) else str(w)
            base = env.get("KILN_CACHE_DIR") or os.path.join(tempfile.gettempdir(), "zoo_all_kiln_cache")
            if env.get("KILN_CACHE_DIR", None) != "":
                env["KILN_CACHE_DIR"] = os.path.join(base, f"gpu{w}")
            per = max(1, len(cpus) // gpus)
            share = cpus[w * per:(w + 1) * per] or cpus
        while True:
            with lock:
                if not queue:
                    return
                limit = a.model_timeout
                if a.time_budget:
                    left = a.time_budget - (time.time() - t_start)
                    if left < a.min_left:
                        print(f"zoo_all: time budget spent; worker {w} stops, {len(queue)} models not started: "
                              f"{','.join(queue)}", flush=True)
                        queue.clear()
                        return
                    limit = min(limit, left)
                name = queue.pop(0)
            row = run_one(a, passthrough, name, limit, env, share)
            if gpus > 1:
                row["gpu"], row["cpus"] = w, len(share)
            with lock:
                with open(a.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                count[0] += 1
                e = first_error(row)
                print(f"[{count[0]}/{len(todo)}]{f' gpu{w}' if gpus > 1 else ''} {name}: {row['wall_s']} s" +
                      (f", fp32 max rel err {row['fp32_max_rel_err']:.2e}" if "fp32_max_rel_err" in row else "") +
                      (f"  {e[:200]}" if e else ""), flush=True)

    if gpus == 1:
        worker(0)
    else:
        threads = [threading.Thread(target=worker, args=(w,)) for w in range(gpus)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    print()
    table(a.out, devtag(a))


if __name__ == "__main__":
    main()
