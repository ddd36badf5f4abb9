"""onnxruntime on the ONNX files kiln saves gives kiln's outputs.

    python test_onnx_export_ort.py KILN SRC_DIR WORK_DIR [FASHION_MNIST_DIR]
    python test_onnx_export_ort.py KILN --node-tests NODE_DIR WORK_DIR
    python test_onnx_export_ort.py KILN --files DIR WORK_DIR

The files come from the kiln command line:
  - `kiln convert` of examples/tiny_cnn.onnx: re-saved as loaded (--disable all), rewritten by
    the CPU fp32 passes (fused convolutions written back as Conv/Add/Relu...), by the CUDA
    passes (layout conversions) and by the fp16 precision pass (Casts);
  - `kiln train mnist-net ... --export`: a trained-then-exported inference graph (when the
    data set is there);
  - `kiln convert` of a small torchvision VisionTransformer (exported here, batch symbolic)
    through the path of models with over 256 MiB of weights, whose dtypes are inferred on
    the model itself (KILN_SAVE_PROBE_MAX_BYTES=0): vit_b_16's attention scale, a fused
    elementwise constant, had no dtype there and could not be saved;
  - `kiln convert` (CPU and CUDA passes, fp32 and fp16) of tests/data/attn_{vit,swin,maxvit}
    _tiny.onnx: every attention block is fused (kiln.Attention reading q, k and v through
    views) and saved as the ops it stands for (save_attention: pieces named
    "<node>/MatMulQK"): as many such pieces as the export has Softmax nodes.
Each saved file must pass onnx.checker, load in onnxruntime (CPU), and give what `kiln run`
gives on the same file and on the original model: |ort - kiln| <= 1e-5 |kiln| + 1e-6 for
fp32 (fp16: 1e-2). Symbolic input dims keep their dim_param names.

With --files, every DIR/export_kop_*.onnx (the models test_onnx_export writes: each of
kiln's internal ops alone, saved as the ONNX ops it stands for) runs in onnxruntime and in
kiln on random inputs (integer inputs: class indices below 10) with the same tolerance.

With --node-tests, every ONNX node-test model that kiln loads and onnxruntime runs is
re-saved by kiln (`kiln convert --disable all`); onnxruntime must load the saved file and
compute exactly (bit for bit) what it computes from the original on the case's inputs.
"""
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort


FAILS = []


def check(cond, msg):
    if not cond:
        FAILS.append(msg)
        print("FAIL", msg)


def sh(*args):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError("%s failed (%d):\n%s%s" % (" ".join(map(str, args)), r.returncode, r.stdout, r.stderr))
    return r.stdout


def kiln_run(kiln, model, inputs, work, tag, extra=()):
    args = [kiln, "run", model]
    for i, x in enumerate(inputs):
        p = os.path.join(work, "%s_in%d.npy" % (tag, i))
        np.save(p, x)
        args += ["--input", p]
    out = os.path.join(work, "%s_out.npy" % tag)
    sh(*args, "--output", out, *extra)
    return np.load(out)


def ort_run(model, inputs):
    sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feed = {i.name: x for i, x in zip(sess.get_inputs(), inputs)}
    return sess.run(None, feed)[0]


def compare(a, b, rtol, atol, what):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        check(False, "%s: shapes %s vs %s" % (what, a.shape, b.shape))
        return
    err = np.abs(a - b)
    ok = bool(np.all(err <= atol + rtol * np.abs(b)))
    worst = float(np.max(err / (atol + rtol * np.abs(b)))) if a.size else 0.0
    print("%-48s max |diff| %.3g (%.2f of the budget)" % (what, float(err.max()) if a.size else 0.0, worst))
    check(ok, "%s: ort and kiln differ beyond rtol %g atol %g" % (what, rtol, atol))


def saved_ok(path, what):
    m = onnx.load(path)
    onnx.checker.check_model(m, full_check=True)
    domains = {n.domain for n in m.graph.node}
    check(domains <= {"", "ai.onnx"}, "%s: nodes of domains %s" % (what, domains))
    return m


def node_tests(kiln, root, work):
    import glob
    from onnx import numpy_helper
    ort.set_default_logger_severity(3)
    os.makedirs(work, exist_ok=True)
    same = skipped = 0
    cases = [c for c in sorted(os.listdir(root)) if os.path.isfile(os.path.join(root, c, "model.onnx"))]

    # One `kiln convert` of many IN OUT pairs per core: a CUDA build's process start maps
    # cuDNN, cuBLASLt and NVRTC (~0.2 s, most of a small model's conversion), so one process
    # per model made this test ~90 s on two cores. A pair converted is one "IN (n nodes) ->
    # OUT (m nodes)" line; a pair kiln does not load is an error line, and the rest go on.
    def convert(chunk):
        args = [kiln, "convert", "--disable", "all"]
        for case in chunk:
            out = os.path.join(work, case + ".onnx")
            if os.path.exists(out):
                os.unlink(out)
            args += [os.path.join(root, case, "model.onnx"), out]
        r = subprocess.run(args, capture_output=True, text=True)
        done = {line.rsplit(" -> ", 1)[1].rsplit(" (", 1)[0] for line in r.stdout.splitlines() if " -> " in line}
        return {case: 0 if os.path.join(work, case + ".onnx") in done else 1 for case in chunk}

    from concurrent.futures import ThreadPoolExecutor
    workers = max(2, os.cpu_count() or 2)
    chunks = [cases[i::workers] for i in range(workers)]
    codes = {}
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for part in pool.map(convert, chunks):
            codes.update(part)
    for case in cases:
        d = os.path.join(root, case)
        src = os.path.join(d, "model.onnx")
        out = os.path.join(work, case + ".onnx")
        if codes[case] != 0:
            skipped += 1  # kiln does not load it
            continue
        ins = [numpy_helper.to_array(onnx.load_tensor(p))
               for p in sorted(glob.glob(os.path.join(d, "test_data_set_0", "input_*.pb")))]
        try:
            s0 = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
            want = s0.run(None, {i.name: x for i, x in zip(s0.get_inputs(), ins)})
        except Exception:
            skipped += 1  # onnxruntime does not run the original (or its test data)
            continue
        try:
            s1 = ort.InferenceSession(out, providers=["CPUExecutionProvider"])
            got = s1.run(None, {i.name: x for i, x in zip(s1.get_inputs(), ins)})
        except Exception as e:
            check(False, "%s: onnxruntime on kiln's file: %s" % (case, str(e).splitlines()[0][:300]))
            continue
        ok = len(got) == len(want) and all(
            g.dtype == w.dtype and g.shape == w.shape and
            (np.array_equal(g, w, equal_nan=True) if g.dtype.kind in "fc" else np.array_equal(g, w))
            for g, w in zip(got, want))
        check(ok, "%s: onnxruntime computes something else on kiln's file" % case)
        same += ok
    print("node tests: onnxruntime on %d files kiln saved computes what it computes on the originals "
          "(%d skipped: kiln or onnxruntime does not run them)" % (same, skipped))
    check(same >= 500, "only %d node tests checked" % same)
    if FAILS:
        print("%d failures" % len(FAILS))
        return 1
    print("all passed")
    return 0


NP_DTYPES = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.DOUBLE: np.float64,
             onnx.TensorProto.FLOAT16: np.float16, onnx.TensorProto.INT64: np.int64}


def files(kiln, src_dir, work):
    import glob
    ort.set_default_logger_severity(3)
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(1)
    paths = sorted(glob.glob(os.path.join(src_dir, "export_kop_*.onnx")))
    check(len(paths) >= 10, "only %d export_kop_*.onnx files in %s (test_onnx_export writes them)" % (len(paths), src_dir))
    for path in paths:
        name = os.path.basename(path)
        m = saved_ok(path, name)
        ins = []
        for vi in m.graph.input:
            tt = vi.type.tensor_type
            shape = [d.dim_value for d in tt.shape.dim]
            dt = NP_DTYPES[tt.elem_type]
            if dt == np.int64:
                ins.append(rng.integers(0, 10, size=shape).astype(np.int64))
            else:
                ins.append(rng.uniform(-1, 1, size=shape).astype(dt))
        lowp = any(x.dtype == np.float16 for x in ins)
        got = ort_run(path, ins)
        want = kiln_run(kiln, path, ins, work, name.replace(".onnx", ""), ["--disable", "all"])
        compare(got, want, 1e-3 if lowp else 1e-5, 1e-3 if lowp else 1e-6, "%s: ort vs kiln" % name)
    if FAILS:
        print("%d failures" % len(FAILS))
        return 1
    print("all passed")
    return 0


def main():
    if len(sys.argv) == 5 and sys.argv[2] == "--files":
        return files(sys.argv[1], sys.argv[3], sys.argv[4])
    if len(sys.argv) == 5 and sys.argv[2] == "--node-tests":
        return node_tests(sys.argv[1], sys.argv[3], sys.argv[4])
    kiln, src, work = sys.argv[1], sys.argv[2], sys.argv[3]
    data = sys.argv[4] if len(sys.argv) > 4 else "/usr/share/datasets/fashion-mnist"
    os.makedirs(work, exist_ok=True)
    rng = np.random.default_rng(0)

    cnn = os.path.join(src, "examples", "tiny_cnn.onnx")
    orig = onnx.load(cnn)
    x = rng.standard_normal((3, 3, 32, 32)).astype(np.float32)
    want = kiln_run(kiln, cnn, [x], work, "orig")
    cases = [
        ("as loaded", ["--disable", "all"], 1e-5, 1e-6, []),
        ("cpu fp32 passes", [], 1e-5, 1e-6, []),
        ("cuda passes", ["--device", "cuda"], 1e-5, 1e-6, []),
        ("fp16 passes", ["--fp16"], 1e-2, 1e-2, ["--fp16"]),
        ("cuda fp16 passes", ["--device", "cuda", "--fp16"], 1e-2, 1e-2, ["--fp16"]),
    ]
    for name, flags, rtol, atol, run_flags in cases:
        out = os.path.join(work, "tiny_cnn_%s.onnx" % name.replace(" ", "_"))
        sh(kiln, "convert", cnn, out, *flags)
        m = saved_ok(out, name)
        check(m.graph.input[0].type.tensor_type.shape.dim[0].dim_param ==
              orig.graph.input[0].type.tensor_type.shape.dim[0].dim_param,
              "%s: the batch dim's name is lost" % name)
        y_ort = ort_run(out, [x])
        y_kiln = kiln_run(kiln, out, [x], work, "saved", run_flags)
        compare(y_ort, y_kiln, rtol, atol, "tiny_cnn %s: ort vs kiln (saved)" % name)
        compare(y_ort, want, rtol, atol, "tiny_cnn %s: ort vs kiln (original)" % name)

    if os.path.isdir(data):
        trained = os.path.join(work, "mnist_trained.onnx")
        log = sh(kiln, "train", "mnist-net", "--data", data, "--max-steps", "3", "--batch", "32",
                 "--threads", "2", "--export", trained)
        check("exported" in log, "kiln train --export said nothing about the export")
        saved_ok(trained, "trained mnist-net")
        img = rng.standard_normal((5, 1, 28, 28)).astype(np.float32)
        compare(ort_run(trained, [img]), kiln_run(kiln, trained, [img], work, "trained"), 1e-5, 1e-6,
                "trained mnist-net: ort vs kiln")
    else:
        print("no data set at %s: the trained-export case is not run" % data)
        check(False, "data set %s missing" % data)

    vit_large_model_path(kiln, work, rng)
    attention_saved(kiln, src, work, rng)

    if FAILS:
        print("%d failures" % len(FAILS))
        return 1
    print("all passed")
    return 0


def vit_large_model_path(kiln, work, rng):
    import torch
    import torchvision
    torch.manual_seed(0)
    m = torchvision.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                                             mlp_dim=64, num_classes=10).eval()
    torch.nn.init.normal_(m.heads.head.weight, std=0.2)  # torchvision zeroes the head: outputs would all be 0
    src = os.path.join(work, "vit_small.onnx")
    torch.onnx.export(m, (torch.randn(2, 3, 32, 32),), src, dynamo=False, opset_version=17, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": {0: "b"}, "y": {0: "b"}})
    x = rng.standard_normal((3, 3, 32, 32)).astype(np.float32)
    want = ort_run(src, [x])
    for name, flags in (("cpu fp32 passes", []), ("cuda passes", ["--device", "cuda"])):
        out = os.path.join(work, "vit_small_%s.onnx" % name.replace(" ", "_"))
        r = subprocess.run([kiln, "convert", src, out] + flags, capture_output=True, text=True,
                           env=dict(os.environ, KILN_SAVE_PROBE_MAX_BYTES="0"))
        check(r.returncode == 0, "vit %s, the large models' save path: %s" % (name, r.stderr.strip()))
        if r.returncode:
            continue
        saved_ok(out, "vit " + name)
        compare(ort_run(out, [x]), want, 1e-5, 1e-6, "vit %s: ort on kiln's file vs ort on the export" % name)


def attention_saved(kiln, src, work, rng):
    # the CUDA passes fuse attention where the CUDA backend takes kiln.Attention: a build
    # without CUDA has no backend to ask, and leaves the blocks as they are
    cuda = "CUDA: not built in" not in sh(kiln, "--version")
    for model in ("vit", "swin", "maxvit"):
        path = os.path.join(src, "tests", "data", "attn_%s_tiny.onnx" % model)
        orig = onnx.load(path)
        softmax = sum(n.op_type == "Softmax" for n in orig.graph.node)
        dims = [d.dim_value or 2 for d in orig.graph.input[0].type.tensor_type.shape.dim]
        x = rng.standard_normal(dims).astype(np.float32)
        want = ort_run(path, [x])
        for name, flags, tol in (("cpu fp32 passes", [], 1e-5), ("cuda passes", ["--device", "cuda"], 1e-5),
                                 ("cuda fp16 passes", ["--device", "cuda", "--fp16"], 2e-2)):
            out = os.path.join(work, "attn_%s_%s.onnx" % (model, name.replace(" ", "_")))
            r = subprocess.run([kiln, "convert", path, out] + flags, capture_output=True, text=True)
            check(r.returncode == 0, "attn %s %s: kiln convert: %s" % (model, name, r.stderr.strip()))
            if r.returncode:
                continue
            m = saved_ok(out, "attn %s %s" % (model, name))
            fused = sum(n.name.endswith("/MatMulQK") for n in m.graph.node)
            expect = softmax if cuda or "cuda" not in name else 0
            check(fused == expect, "attn %s %s: %d attention blocks saved from kiln.Attention, want %d (the export "
                  "has %d Softmax nodes)" % (model, name, fused, expect, softmax))
            # fp16: the whole network in half precision (onnxruntime's fp16 kernels), against
            # fp32: within tol of the output's largest magnitude
            compare(ort_run(out, [x]), want, 0 if tol > 1e-4 else tol, tol * (float(np.abs(want).max()) if tol > 1e-4
                                                                               else 0.1),
                    "attn %s %s: ort on kiln's file vs ort on the export" % (model, name))


if __name__ == "__main__":
    sys.exit(main())
