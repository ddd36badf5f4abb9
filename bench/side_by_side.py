"""kiln and PyTorch side by side on the GPU machine, in one call.

For each torchvision model (random weights): export to ONNX with PyTorch's exporters,
run PyTorch (fp32, TF32 off) and kiln (CPU and CUDA) on the same random inputs, compare
outputs (max relative error, top-1 agreement), then time both at batch 1 and a large
batch (kiln bench: device events around CUDA-graph replays, inputs resident; PyTorch: events
around eager calls, inputs resident, as bench/reference/torch_infer.py does).

    python3 bench/side_by_side.py --kiln KILN [--models resnet18,resnet50] [--dynamo]

Prints one table; JSON to $OUT/side_by_side.json. Run it through `bench/gpu.sh side`
(arguments in SIDE_ARGS), which unpacks the carried kiln and sets its library path.
"""
import argparse, json, os, re, subprocess, sys, tempfile, time

import numpy as np
import torch
import torchvision

OUT = os.environ.get("OUT", tempfile.gettempdir())
BIG = {"resnet18": 256, "resnet50": 256, "mobilenet_v2": 256, "vgg16": 128}


def export(model, name, dynamo, tmp):
    path = os.path.join(tmp, f"{name}{'_dynamo' if dynamo else ''}.onnx")
    x = torch.randn(2, 3, 224, 224)
    t0 = time.time()
    if dynamo:
        batch = torch.export.Dim("batch", min=1, max=1024)
        torch.onnx.export(model, (x,), path, dynamo=True, dynamic_shapes={"x": {0: batch}}, input_names=["x"])
    else:
        torch.onnx.export(model, (x,), path, dynamo=False, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}}, opset_version=17)
    return path, time.time() - t0


def torch_time(model, x, iters):
    with torch.inference_mode():
        for _ in range(10):
            model(x)
        torch.cuda.synchronize()
        s, e = torch.cuda.Event(True), torch.cuda.Event(True)
        times = []
        for _ in range(5):
            s.record()
            for _ in range(iters):
                model(x)
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e) / iters)
    times.sort()
    return times[len(times) // 2]


def kiln_bench(kiln, path, batch, iters, prec="--fp32"):
    r = subprocess.run([kiln, "bench", path, "--batch", str(batch), "--device", "cuda", "--iters", str(iters),
                        "--warmup", "5", prec], capture_output=True, text=True)
    if r.returncode:
        return None, r.stderr.strip()[-300:]
    m = re.search(r"GPU compute \(ms, inputs resident\): min [\d.]+\s+median ([\d.]+)", r.stdout)
    first = re.search(r"plan \+ first run .*? ([\d.]+) ms", r.stdout)
    return (float(m.group(1)) if m else None), (r.stdout.strip().splitlines() if m else r.stdout[-300:])


def kiln_run(kiln, path, x, device, tmp, prec="--fp32"):
    xi, yo = os.path.join(tmp, "x.npy"), os.path.join(tmp, f"y_{device}.npy")
    np.save(xi, x)
    r = subprocess.run([kiln, "run", path, "--input", xi, "--output", yo, "--device", device, prec],
                       capture_output=True, text=True)
    if r.returncode:
        return None, r.stderr.strip()[-400:]
    return np.load(yo), ""


def rel(a, b):
    return float(np.abs(a - b).max() / max(np.abs(b).max(), 1e-30))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln", required=True)
    ap.add_argument("--models", default="resnet18,resnet50,mobilenet_v2,vgg16")
    ap.add_argument("--dynamo", action="store_true", help="also export with dynamo=True")
    ap.add_argument("--cpu", action="store_true", help="also run kiln on the CPU")
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--fp16", action="store_true", help="also fp16: agreement on 256 inputs, timing vs torch fp16")
    ap.add_argument("--compile", default="", help="models to also time with torch.compile (fp16, channels_last)")
    ap.add_argument("--init-bn-stats", default="",
                    help="models whose BatchNorm running statistics are set by training-mode passes on random "
                         "inputs (weights stay random): trained-network activation scales, which fp16 needs for "
                         "mobilenet_v2 (its outputs are ~3e-9 with torchvision's initial statistics)")
    a = ap.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = True
    tmp = tempfile.mkdtemp()
    rows = []
    for name in a.models.split(","):
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)()
        if name in a.init_bn_stats.split(",") and any(isinstance(m, torch.nn.BatchNorm2d) for m in model.modules()):
            # torchvision's initial statistics (mean 0, var 1) leave mobilenet_v2's outputs at
            # ~3e-9, below fp16's smallest subnormal; statistics measured on inputs give every
            # layer the unit scale a trained network has. Weights stay random.
            for m in model.modules():
                if isinstance(m, torch.nn.BatchNorm2d):
                    m.momentum = None  # cumulative average over the passes
                    m.reset_running_stats()
            model.train().cuda()
            with torch.no_grad():
                g = torch.Generator(device="cuda").manual_seed(3)
                for _ in range(8):
                    model(torch.randn(32, 3, 224, 224, device="cuda", generator=g))
            model.cpu()
        model = model.eval()
        for dynamo in ([False, True] if a.dynamo else [False]):
            tag = name + (" (dynamo)" if dynamo else "")
            try:
                path, secs = export(model, name, dynamo, tmp)
            except Exception as ex:  # report and go on: one exporter failing is a result too
                rows.append(dict(model=tag, error=f"export failed: {ex}"[:300]))
                print(f"{tag:24s} export failed: {str(ex)[:200]}", flush=True)
                continue
            x = np.random.default_rng(1).standard_normal((2, 3, 224, 224)).astype(np.float32)
            with torch.inference_mode():
                ref = model.cuda()(torch.from_numpy(x).cuda()).float().cpu().numpy()
            row = dict(model=tag, export_s=round(secs, 1))
            for dev in (["cuda", "cpu"] if a.cpu else ["cuda"]):
                y, err = kiln_run(a.kiln, path, x, dev, tmp)
                if y is None:
                    row[f"{dev}_error"] = err
                else:
                    row[f"{dev}_max_rel_err"] = rel(y, ref)
                    row[f"{dev}_top1_agree"] = float((y.argmax(1) == ref.argmax(1)).mean())
            if a.fp16:
                x256 = np.random.default_rng(2).standard_normal((256, 3, 224, 224)).astype(np.float32)
                with torch.inference_mode():
                    ref256 = torch.cat([model.cuda()(torch.from_numpy(x256[i:i + 64]).cuda()).float().cpu()
                                        for i in range(0, 256, 64)]).numpy()
                if not dynamo:
                    # PyTorch's own fp16 (channels_last) against its fp32, for scale
                    mh = model.half().cuda().to(memory_format=torch.channels_last)
                    with torch.inference_mode():
                        t16 = torch.cat([mh(torch.from_numpy(x256[i:i + 64]).cuda().half()
                                            .to(memory_format=torch.channels_last)).float().cpu()
                                         for i in range(0, 256, 64)]).numpy()
                    model.float()
                    row["torch16_max_rel_err"] = rel(t16, ref256)
                    row["torch16_top1_agree"] = float((t16.argmax(1) == ref256.argmax(1)).mean())
                y16, err = kiln_run(a.kiln, path, x256, "cuda", tmp, "--fp16")
                if y16 is None:
                    row["fp16_error"] = err
                else:
                    row["fp16_max_rel_err"] = rel(y16, ref256)
                    row["fp16_top1_agree"] = float((y16.argmax(1) == ref256.argmax(1)).mean())
                model.cpu()
            if not a.no_time and dynamo and a.fp16:
                # the other exporter's graph: kiln's fp16 time only (PyTorch is timed once)
                for bs in (1, BIG.get(name, 64)):
                    k16, info16 = kiln_bench(a.kiln, path, bs, 20 if bs > 1 else 100, "--fp16")
                    row[f"bs{bs}_kiln16_ms"] = k16
                    if not k16:
                        row[f"bs{bs}_kiln16_error"] = info16
            if not a.no_time and not dynamo:
                m = model.cuda()
                for bs in (1, BIG.get(name, 64)):
                    xt = torch.randn(bs, 3, 224, 224, device="cuda")
                    t_ms = torch_time(m, xt, 20 if bs > 1 else 100)
                    k_ms, info = kiln_bench(a.kiln, path, bs, 20 if bs > 1 else 100)
                    row[f"bs{bs}_torch_ms"] = round(t_ms, 4)
                    row[f"bs{bs}_kiln_ms"] = k_ms
                    if k_ms:
                        row[f"bs{bs}_speedup"] = round(t_ms / k_ms, 3)
                    else:
                        row[f"bs{bs}_kiln_error"] = info
                    if bs == 1 and k_ms:
                        row["kiln_bench_bs1"] = info
                    if a.fp16:
                        mh = model.half().cuda().to(memory_format=torch.channels_last)
                        xh = xt.half().to(memory_format=torch.channels_last)
                        row[f"bs{bs}_torch16_ms"] = round(torch_time(mh, xh, 20 if bs > 1 else 100), 4)
                        if name in a.compile.split(","):
                            mc = torch.compile(mh)
                            row[f"bs{bs}_compile16_ms"] = round(torch_time(mc, xh, 20 if bs > 1 else 100), 4)
                        k16, info16 = kiln_bench(a.kiln, path, bs, 20 if bs > 1 else 100, "--fp16")
                        row[f"bs{bs}_kiln16_ms"] = k16
                        if not k16:
                            row[f"bs{bs}_kiln16_error"] = info16
                        elif bs > 1:
                            row["kiln16_big_info"] = info16
                        model.float()
                model.cpu()
            rows.append(row)
            print(json.dumps(row), flush=True)
            json.dump(rows, open(os.path.join(OUT, "side_by_side.json"), "w"), indent=1)
    if a.fp16:
        print("\nfp16: model, kiln max rel err vs torch fp32, top-1 agreement (256 inputs), [torch fp16's own]; ms torch fp16 cl / compile / kiln fp16 at bs 1 and large")
        for r in rows:
            ks = [k for k in r if k.endswith("_kiln16_ms")]
            print(r["model"], r.get("fp16_max_rel_err"), r.get("fp16_top1_agree"), r.get("fp16_error", ""),
                  f"[{r.get('torch16_max_rel_err')}, {r.get('torch16_top1_agree')}]",
                  *[f"{k[:-10]}: {r.get(k[:-10] + '_torch16_ms')} / {r.get(k[:-10] + '_compile16_ms', '-')} / {r.get(k)}" for k in ks])
    print("\nmodel                     cuda rel err  top1   bs1 torch/kiln ms (x)     big torch/kiln ms (x)")
    for r in rows:
        big = [k for k in r if k.startswith("bs") and k.endswith("_torch_ms") and not k.startswith("bs1_")]
        bk = big[0][:-9] if big else None
        def f(v, fmt):
            return fmt % v if isinstance(v, (int, float)) else "-"
        print(f"{r['model']:24s} {f(r.get('cuda_max_rel_err'), '%.2e'):>12s} {f(r.get('cuda_top1_agree'), '%.2f'):>6s} "
              f"{f(r.get('bs1_torch_ms'), '%.3f')}/{f(r.get('bs1_kiln_ms'), '%.3f')} ({f(r.get('bs1_speedup'), '%.2f')})   "
              + (f"{f(r.get(bk + '_torch_ms'), '%.2f')}/{f(r.get(bk + '_kiln_ms'), '%.2f')} ({f(r.get(bk + '_speedup'), '%.2f')})" if bk else "")
              + ("  " + (r.get("cuda_error") or r.get("error") or "")[:120]))


if __name__ == "__main__":
    main()
