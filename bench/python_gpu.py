"""The GPU checks of issue 16's Python package, for the GPU machine:

1. zero copy: a CUDA PyTorch tensor through kiln.Session.run and back to PyTorch, printing
   the pointers (input torch == kiln input tensor; kiln output == torch.from_dlpack(out))
   and checking the values against PyTorch;
2. ResNet-50 (torchvision, random weights, exported to ONNX here) at fp16, batch 1, run
   from Python with device tensors and preallocated outputs (IO binding): CUDA events on
   kiln's stream, warm-up, median of --iters (>= 200), against `kiln bench` on the same
   file; onnxruntime's IO binding too where onnxruntime's CUDA provider is importable.

Where kiln comes from:
  --kiln-build DIR   a CMake build dir of kiln configured with -DKILN_PYTHON=ON (its
                     python/_kiln.abi3.so and libkiln.so.0 are copied beside
                     python/kiln/__init__.py into a temporary package) whose `kiln` command
                     is the CLI; e.g.
                       cmake -S . -B .carry/kiln -DKILN_PYTHON=ON -DKILN_TESTS=OFF \\
                             -DKILN_SHARED_STATIC_PROTOBUFC=ON -DCMAKE_BUILD_TYPE=Release \\
                             -DCMAKE_CUDA_ARCHITECTURES=90
                       cmake --build .carry/kiln -j --target _kiln kiln_cli
                     (or a folder holding _kiln.abi3.so, libkiln.so.0 and kiln, each may be .gz);
                     libkiln.so's libraries must be on LD_LIBRARY_PATH before Python starts
                     (`. bench/common.sh; kiln_env DIR` finds cuDNN, cuBLASLt and NVRTC)
  (none)             the installed `kiln` package and `kiln` on PATH (--kiln-cli PATH).

  bench/python_gpu_pack.sh build-cuda .carry/py                 # here: the pack to carry
  python bench/python_gpu.py --kiln-build .carry/py [--iters 300] [--onnx resnet50.onnx]
  python bench/python_gpu.py --export-only resnet50.onnx      # the ONNX file alone (CPU)
  python bench/python_gpu.py --cpu-check --kiln-build build    # the CPU path of check 1

Prints one line per fact; exits non-zero when a check fails.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def from_dir(build, names):
    """The first of names found in build (a .gz is unpacked into a temporary folder)."""
    for n in names:
        f = os.path.join(build, n)
        if os.path.exists(f):
            return f
        if os.path.exists(f + ".gz"):
            import gzip
            out = os.path.join(tempfile.mkdtemp(prefix="kiln_gz_"), os.path.basename(n))
            with gzip.open(f + ".gz", "rb") as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
            os.chmod(out, 0o755)
            return out
    return None


def import_kiln(build):
    """The kiln package of a build dir (copied into a temporary package) or the installed one."""
    if build:
        ext = from_dir(build, ["python/_kiln.abi3.so", "_kiln.abi3.so"])
        lib = from_dir(build, ["libkiln.so.0"])
        if not ext or not lib:
            sys.exit(f"python_gpu: no _kiln.abi3.so or libkiln.so.0 in {build}: configure it with "
                     "-DKILN_PYTHON=ON and build _kiln")
        pkg = os.path.join(tempfile.mkdtemp(prefix="kiln_py_"), "kiln")
        os.makedirs(pkg)
        for f in os.listdir(os.path.join(ROOT, "python", "kiln")):
            src = os.path.join(ROOT, "python", "kiln", f)
            if os.path.isfile(src):
                shutil.copy(src, pkg)
        shutil.copy(ext, pkg)
        shutil.copy(lib, pkg)  # found through the extension's rpath $ORIGIN
        sys.path.insert(0, os.path.dirname(pkg))
    import kiln
    print(f"kiln {kiln.version()} from {os.path.dirname(kiln.__file__)}")
    return kiln


def onnx_export(net, example, path, inp, out):
    """PyTorch's TorchScript exporter at opset 17 with a symbolic batch, as bench/common.sh's
    r50_onnx (every ResNet-50 timing in bench/NOTES.md); the torch.export one where that
    exporter is gone."""
    import warnings
    import torch
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(net, (example,), path, dynamo=False, opset_version=17, input_names=[inp],
                              output_names=[out], dynamic_axes={inp: {0: "batch"}, out: {0: "batch"}})
    except Exception as e:  # noqa: BLE001
        print(f"TorchScript ONNX export failed ({type(e).__name__}: {e}); torch.export's exporter instead")
        torch.onnx.export(net, (example,), path, input_names=[inp], output_names=[out],
                          dynamic_shapes=({0: "batch"},))


def export_resnet50(path, batch=1):
    import torch
    import torchvision
    torch.manual_seed(0)
    net = torchvision.models.resnet50(weights=None).eval()
    x = torch.randn(max(batch, 2), 3, 224, 224)
    t = time.time()
    onnx_export(net, x, path, "x", "y")
    print(f"exported torchvision resnet50 (random weights) to {path} in {time.time() - t:.1f} s")
    return net


def tiny_model(path):
    """A small CNN exported from PyTorch (for the pointer check)."""
    import torch
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                              torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10)).eval()
    onnx_export(net, torch.randn(2, 3, 32, 32), path, "x", "y")
    return net


def check_zero_copy(kiln, device, work):
    """Check 1: device tensor in, device tensor out, pointers printed."""
    import torch
    path = os.path.join(work, "tiny.onnx")
    net = tiny_model(path)
    tdev = "cuda" if device.startswith("cuda") else "cpu"
    net = net.to(tdev)
    sess = kiln.Session(path, device=device)
    x = torch.randn(4, 3, 32, 32, device=tdev)
    kx = kiln.from_dlpack(x, sess.stream)
    out = sess.run({"x": kx})["y"]
    ty = torch.from_dlpack(out)
    with torch.no_grad():
        want = net(x)
    err = (ty - want).abs().max().item()
    print(f"zero copy ({device}): input  torch {x.data_ptr():#x} == kiln {kx.data_ptr:#x}: {x.data_ptr() == kx.data_ptr}")
    print(f"zero copy ({device}): output kiln {out.data_ptr:#x} == torch.from_dlpack {ty.data_ptr():#x}: "
          f"{out.data_ptr == ty.data_ptr()}")
    print(f"zero copy ({device}): kiln input on {kx.device}, output on {out.device}, torch view on {ty.device}; "
          f"max |kiln - torch| = {err:.3g}")
    # IO binding into a torch tensor on the device: its pointer does not move.
    y = torch.empty(4, 10, device=tdev)
    p = y.data_ptr()
    res = sess.run({"x": x}, outputs={"y": y})
    ok = (x.data_ptr() == kx.data_ptr and out.data_ptr == ty.data_ptr() and res["y"] is y
          and y.data_ptr() == p and (y - want).abs().max().item() < 1e-3 and err < 1e-3
          and out.device == (device if device != "cuda" else "cuda:0"))
    print(f"zero copy ({device}): IO binding wrote torch's own tensor {p:#x}: {res['y'] is y}; check "
          f"{'PASSED' if ok else 'FAILED'}")
    return ok


def median_events(fn, stream, iters, warmup):
    """Median ms of fn() between CUDA events recorded on stream (each iteration synchronized)."""
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for _ in range(iters):
        start.record(stream)
        fn()
        end.record(stream)
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), min(times)


def median_wall(fn, iters, warmup):
    import torch
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(iters):
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t) * 1e3)
    return statistics.median(times), min(times)


def find_number(obj, words):
    """(key path, value) of the numbers in a JSON object whose key path holds all words."""
    hits = []

    def walk(o, path):
        if isinstance(o, dict):
            for k, v in o.items():
                walk(v, path + [str(k)])
        elif isinstance(o, (int, float)) and not isinstance(o, bool):
            key = ".".join(path).lower()
            if all(w in key for w in words):
                hits.append((".".join(path), float(o)))

    walk(obj, [])
    return hits


def kiln_bench(cli, onnx_path, iters, work):
    """`kiln bench` on the file: --json when the CLI has it, else its printed report."""
    helptext = subprocess.run([cli, "bench", "--help"], capture_output=True, text=True)
    has_json = "--json" in (helptext.stdout + helptext.stderr)
    cmd = [cli, "bench", onnx_path, "--batch", "1", "--device", "cuda", "--fp16", "--iters", str(iters)]
    jpath = os.path.join(work, "bench.json")
    if has_json:
        cmd += ["--json", jpath]
    print("$ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    print(r.stdout + r.stderr)
    if r.returncode != 0:
        print(f"kiln bench failed ({r.returncode})")
        return None
    if has_json and os.path.exists(jpath):
        with open(jpath) as f:
            data = json.load(f)
        print("kiln bench --json:", json.dumps(data)[:2000])
        hits = find_number(data, ["compute_ms", "median"])
        if len(hits) == 1:
            return hits[0][1]
        print(f"kiln bench --json: GPU median not found unambiguously ({hits}); compare by hand")
    return None


def bench_resnet(kiln, args, work):
    import torch
    path = args.onnx or os.path.join(work, "resnet50.onnx")
    if not args.onnx:
        export_resnet50(path)
    dev = torch.device("cuda")
    # One session for both loops: a second session of the same model in a process planned
    # 3-8% slower than the first (tests/gpu/test_cuda_io.c --bench; bench/NOTES.md, v2.1), and
    # `kiln bench` times the first session of its process.
    user = torch.cuda.Stream()
    sess = kiln.Session(path, device="cuda", precision="fp16", stream=user)
    print(f"session: inputs {sess.inputs}, outputs {sess.outputs}")
    x = torch.randn(1, 3, 224, 224, device=dev)
    kx = kiln.from_dlpack(x, sess.stream)                 # bound once: no copy, no allocation
    out = torch.empty(1, 1000, device=dev)
    ko = kiln.from_dlpack(out, sess.stream)
    feeds, outs = [kx], {sess.outputs[0].name: ko}
    run = lambda: sess.run(feeds, outputs=outs)  # noqa: E731
    ev_med, ev_min = median_events(run, user, args.iters, args.warmup)
    wall_med, wall_min = median_wall(run, args.iters, args.warmup)
    print(f"kiln from Python, resnet50 fp16 batch 1, device tensors, IO binding, each run waited for: CUDA events "
          f"median {ev_med:.4f} ms (min {ev_min:.4f}); wall per run median {wall_med:.4f} ms (min {wall_min:.4f}); "
          f"{args.iters} runs after {args.warmup} warm-up")
    # Queued: on its caller's stream a run with all its IO on the device returns without
    # waiting, so runs go back to back as in a serving loop; kiln bench's method: an event
    # after each run, the median of the intervals.
    for _ in range(args.warmup):
        run()
    torch.cuda.synchronize()
    evs = [torch.cuda.Event(enable_timing=True) for _ in range(args.iters + 1)]
    evs[0].record(user)
    for e in evs[1:]:
        run()
        e.record(user)
    evs[-1].synchronize()
    per_run = sorted(evs[i].elapsed_time(evs[i + 1]) for i in range(args.iters))
    piped = statistics.median(per_run)
    print(f"kiln from Python, queued on the caller's stream: {piped:.4f} ms per run (median of {args.iters} "
          f"intervals, min {per_run[0]:.4f}); whole queue {evs[0].elapsed_time(evs[-1]) / args.iters:.4f} ms per run")
    ok = True
    if args.kiln_cli:
        ref = kiln_bench(args.kiln_cli, path, args.iters, work)
        if ref is not None:
            # kiln bench's GPU time is graph replays back to back: the pipelined loop is the
            # like-for-like figure; the synchronized one adds the host's work per call.
            ratio = piped / ref
            ok = ratio <= 1.05
            print(f"python (pipelined) / kiln bench GPU median: {piped:.4f} / {ref:.4f} ms = {ratio:.3f} "
                  f"({'within' if ok else 'NOT within'} 5%)")
            print(f"python (each run waited for) / kiln bench GPU median: {ev_med:.4f} / {ref:.4f} ms = "
                  f"{ev_med / ref:.3f}")
        else:
            ok = False
            print("kiln bench's GPU median not found: compare by hand with its 'GPU compute' line above")
    bench_onnxruntime(path, args, x, out)
    return ok


def bench_onnxruntime(path, args, x, out):
    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime: not importable, skipped")
        return
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        print(f"onnxruntime {ort.__version__}: no CUDAExecutionProvider ({ort.get_available_providers()}), skipped")
        return
    import numpy as np
    import torch
    so = ort.InferenceSession(path, providers=["CUDAExecutionProvider"])
    io = so.io_binding()
    name_in, name_out = so.get_inputs()[0].name, so.get_outputs()[0].name
    io.bind_input(name_in, "cuda", 0, np.float32, list(x.shape), x.data_ptr())
    io.bind_output(name_out, "cuda", 0, np.float32, list(out.shape), out.data_ptr())
    med, mn = median_wall(lambda: so.run_with_iobinding(io), args.iters, args.warmup)
    print(f"onnxruntime {ort.__version__} CUDA EP (fp32 model), IO binding, wall per run median {med:.4f} ms "
          f"(min {mn:.4f})")
    del torch


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kiln-build", help="kiln CMake build dir (-DKILN_PYTHON=ON): python/_kiln.abi3.so, kiln")
    ap.add_argument("--kiln-cli", help="the kiln command (default: KILN_BUILD/kiln, else kiln on PATH)")
    ap.add_argument("--onnx", help="an exported resnet50.onnx to use instead of exporting one")
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=50)
    ap.add_argument("--export-only", metavar="PATH", help="write resnet50.onnx to PATH and stop (no GPU needed)")
    ap.add_argument("--cpu-check", action="store_true", help="run check 1 on the CPU (no GPU needed)")
    ap.add_argument("--work", help="folder for the files written (default: a temporary one)")
    args = ap.parse_args()
    if args.iters < 200 and not args.cpu_check:
        sys.exit("python_gpu: --iters must be >= 200")
    if args.export_only:
        export_resnet50(args.export_only)
        return 0
    work = args.work or tempfile.mkdtemp(prefix="kiln_gpu_")
    os.makedirs(work, exist_ok=True)
    if not args.kiln_cli:
        args.kiln_cli = from_dir(args.kiln_build, ["kiln"]) if args.kiln_build else shutil.which("kiln")
    kiln = import_kiln(args.kiln_build)
    import torch
    if args.cpu_check:
        return 0 if check_zero_copy(kiln, "cpu", work) else 1
    if not torch.cuda.is_available():
        sys.exit("python_gpu: torch sees no CUDA device (--cpu-check runs the CPU path)")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    ok = bench_resnet(kiln, args, work)  # first: the process's first session, as kiln bench's is
    ok = check_zero_copy(kiln, "cuda", work) and ok
    print("python_gpu: " + ("PASSED" if ok else "FAILED"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
