#!/usr/bin/env python3
"""kiln's --json documents and --plot pictures, checked against the text report of the same
run (python3's standard library only):

  cli_json.py KILN SOURCE_DIR WORK_DIR CASE

  bench        bench --profile --json FILE: parses (no NaN/Infinity), every figure of the
               text equals the document's (as printed), percentiles are monotone, one
               profile row per node run, the temporary file is gone.
  bench_stdout bench --json -: stdout is one JSON document, the text report is on stderr.
  bench_escape a model path with a quote, a backslash, a tab and a byte that is not UTF-8:
               the document parses and names the path (the byte as U+FFFD).
  bench_ablate bench --ablate --json: one row per line of the text.
  json_error   --json into a folder that does not exist: exit 1 naming the file.
  run          run --stats --json: load/first-run times, plan stats, inputs and outputs.
  train        train --epochs 2 --max-steps 15 on a 10-step-per-epoch data set: 15 step
               records numbered 1..15 whose losses are the --losses file's, lr constant in
               an epoch and x0.7 after it (StepLR), epoch records as the text's lines.
  train_stdout_profile  train --max-steps 2 --profile --json -: the document on stdout, the
               text (with the profile's table) on stderr, each row's time in both.
  plot_png     train --plot x.png --plot-size 400x300: a PNG of that size, not blank.
  plot_svg     train --plot x.svg: parses as XML, an <svg> of the default 1200x900.
  plot_bad     --plot x.jpg and --plot-size 10x10 are refused (exit 2) before training.
  plot_without_cairo  (a build without cairo) --plot says so and exits 2.
"""
import ast
import json
import math
import os
import re
import struct
import subprocess
import sys
import zlib

KILN, SRC, WORK, CASE = sys.argv[1:5]
MODEL = os.path.join(SRC, "examples", "tiny_cnn.onnx")
X = os.path.join(SRC, "examples", "tiny_cnn_x.npy")


def fail(msg):
    print(f"FAIL {CASE}: {msg}")
    sys.exit(1)


def check(cond, msg):
    if not cond:
        fail(msg)


def run(args, rc=0):
    p = subprocess.run([KILN] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=WORK)
    out, err = p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")
    print("$ kiln " + " ".join(args))
    print(out, end="")
    print(err, end="", file=sys.stderr)
    check(p.returncode == rc, f"exit {p.returncode}, want {rc}: {err}")
    return out, err


def reject_constant(c):
    fail(f"non-finite number {c} in the JSON (must be null)")


def load(path_or_text, text=False):
    try:
        if text:
            return json.loads(path_or_text, parse_constant=reject_constant)
        with open(path_or_text, "rb") as f:
            return json.loads(f.read().decode("utf-8"), parse_constant=reject_constant)
    except (ValueError, UnicodeDecodeError) as e:
        fail(f"not JSON: {e}")


def same(printed, value, what):
    """printed: the text's figure (a string as printed); value: the document's number."""
    check(value is not None, f"{what}: null in the JSON, {printed} in the text")
    decimals = len(printed.split(".")[1]) if "." in printed else 0
    check(f"{value:.{decimals}f}" == printed, f"{what}: text {printed}, JSON {value}")


def find(pattern, text, what):
    m = re.search(pattern, text, re.M)
    check(m is not None, f"no {what} in the text report")
    return m


def head(d, schema):
    check(d.get("schema") == schema and d.get("schema_version") == 1, f"schema {d.get('schema')} {d.get('schema_version')}")
    check(isinstance(d.get("kiln_version"), str), "no kiln_version")


def check_bench(d, text, profile):
    head(d, "kiln-bench")
    m = find(r"^model: (.*)  batch (\d+)  device (\w+)  (\w+)  \((\d+) nodes run, (\d+) folded; arena ([\d.]+) MiB\)", text,
             "model line")
    check(d["model"] == m[1] and d["batch"] == int(m[2]) and d["device"] == m[3] and d["precision"] == m[4], "model line")
    check(d["plan"]["nodes_run"] == int(m[5]) and d["plan"]["nodes_folded"] == int(m[6]), "nodes run/folded")
    same(m[7], d["plan"]["arena_bytes"] / 1048576.0, "arena MiB")
    m = find(r"^one-time: import ([\d.]+) ms, plan \+ first run .* ([\d.]+) ms$", text, "one-time line")
    same(m[1], d["import_ms"], "import ms")
    same(m[2], d["first_run_ms"], "first run ms")
    m = find(r"^latency \(end to end, ms\): min ([\d.]+)  median ([\d.]+)  p90 ([\d.]+)  p95 ([\d.]+)  p99 ([\d.]+)$", text,
             "latency line")
    r = d["run_ms"]
    for i, k in enumerate(["min_ms", "median_ms", "p90_ms", "p95_ms", "p99_ms"]):
        same(m[i + 1], r[k], f"run {k}")
    for t in (d["run_ms"], d["compute_ms"]):
        seq = [t[k] for k in ["min_ms", "median_ms", "p90_ms", "p95_ms", "p99_ms", "max_ms"]]
        check(seq == sorted(seq), f"percentiles not monotone: {seq}")
        check(t["min_ms"] <= t["mean_ms"] <= t["max_ms"], "mean outside [min, max]")
        check(t["samples"] == d["iters"], "samples != iters")
    m = find(r"^throughput: ([\d.]+) img/s$", text, "throughput")
    same(m[1], d["throughput_per_s"], "throughput")
    check(abs(d["throughput_per_s"] - d["batch"] * 1000 / d["compute_ms"]["median_ms"]) < 1e-6 * d["throughput_per_s"],
          "throughput is not batch / median compute")
    check(len(d["inputs"]) == 1 and d["inputs"][0]["shape"][0] == d["batch"], "input shape does not carry the batch")
    if d["device"] == "cpu":
        check(d["host_to_device_ms"] is None and d["device_to_host_ms"] is None, "CPU transfers not null")
    if not profile:
        check("profile" not in d, "a profile without --profile")
        return
    p = d["profile"]
    check(len(p["nodes"]) == d["plan"]["nodes_run"], f"{len(p['nodes'])} profile rows for {d['plan']['nodes_run']} nodes")
    m = find(r"^  sum of nodes ([\d.]+) ms; whole run ([\d.]+) ms", text, "profile summary")
    same(m[1], p["sum_of_nodes_ms"], "sum of nodes")
    check(abs(sum(n["median_ms"] for n in p["nodes"]) - p["sum_of_nodes_ms"]) < 1e-6, "rows do not sum to the total")
    rows = re.findall(r"^ +\d+ +([\d.]+) +([\d.]+)% +(\S+) +(\S+)  (\S+) +(\S+) ", text, re.M)
    check(len(rows) == len(p["nodes"]), f"{len(rows)} rows in the text, {len(p['nodes'])} in the JSON")
    by_name = {n["name"]: n for n in p["nodes"]}
    for ms, share, tf, gb, op, name in rows:
        n = by_name.get(name)
        check(n is not None and n["op"] == op, f"row {name} ({op}) not in the JSON")
        same(ms, n["median_ms"], f"{name} ms")
        same(share, 100 * n["share"], f"{name} share")
        if tf == "-":
            check(n["tflop_per_s"] is None, f"{name}: TFLOP/s '-' in the text but {n['tflop_per_s']}")
        else:
            same(tf, n["tflop_per_s"], f"{name} TFLOP/s")
        if gb != "-":
            same(gb, n["gb_per_s"], f"{name} GB/s")


def mnist(d, n_train, n_test):
    """An MNIST-format data set of random images, labels 0..9 in turn."""
    os.makedirs(d, exist_ok=True)
    for name, n in (("train", n_train), ("t10k", n_test)):
        with open(os.path.join(d, f"{name}-images-idx3-ubyte"), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, n, 28, 28) + os.urandom(n * 784))
        with open(os.path.join(d, f"{name}-labels-idx1-ubyte"), "wb") as f:
            f.write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))


def png_pixels(path):
    """(width, height, rows of RGB(A) tuples) of an 8-bit RGB or RGBA PNG."""
    with open(path, "rb") as f:
        data = f.read()
    check(data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG")
    pos, idat, w = 8, b"", None
    while pos < len(data):
        n, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + n]
        if kind == b"IHDR":
            w, h, depth, ctype, _, _, interlace = struct.unpack(">IIBBBBB", body)
            check(depth == 8 and ctype in (2, 6) and interlace == 0, f"PNG depth {depth} type {ctype}")
            bpp = 3 if ctype == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + n
    check(w is not None, "no IHDR")
    raw, stride, prev, rows = zlib.decompress(idat), w * bpp, bytearray(w * bpp), []
    for y in range(h):
        ft, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if ft == 1:
                line[i] = (line[i] + a) & 255
            elif ft == 2:
                line[i] = (line[i] + b) & 255
            elif ft == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif ft == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[i:i + 3]) for i in range(0, stride, bpp)])
        prev = line
    return w, h, rows


os.makedirs(WORK, exist_ok=True)
for f in os.listdir(WORK):
    if os.path.isfile(os.path.join(WORK, f)):
        os.remove(os.path.join(WORK, f))
TRAIN = ["train", "mnist-net", "--data", os.path.join(WORK, "data"), "--batch", "32"]

if CASE == "bench":
    out, _ = run(["bench", MODEL, "--batch", "3", "--iters", "30", "--warmup", "2", "--profile", "--json", "b.json"])
    check_bench(load(os.path.join(WORK, "b.json")), out, True)
    check(os.listdir(WORK) == ["b.json"], f"files left beside the document: {os.listdir(WORK)}")
elif CASE == "bench_stdout":
    out, err = run(["bench", MODEL, "--batch", "2", "--iters", "20", "--json", "-"])
    check_bench(load(out, text=True), err, False)
elif CASE == "bench_escape":
    name = os.fsencode(os.path.join(WORK, 'a "b\\c\td')) + b"\xff.onnx"
    with open(MODEL, "rb") as src, open(name, "wb") as dst:
        dst.write(src.read())
    p = subprocess.run([os.fsencode(KILN), b"bench", name, b"--iters", b"2", b"--json", b"e.json"], cwd=WORK,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    check(p.returncode == 0, p.stderr.decode(errors="replace"))
    d = load(os.path.join(WORK, "e.json"))
    want = name.decode("utf-8", "replace")
    check(d["model"] == want, f"model {d['model']!r}, want {want!r}")
elif CASE == "bench_ablate":
    out, _ = run(["bench", MODEL, "--iters", "3", "--warmup", "1", "--ablate", "--json", "a.json"])
    d = load(os.path.join(WORK, "a.json"))
    head(d, "kiln-bench-ablation")
    rows = re.findall(r"^  (\S.*?) +([\d.]+) img/s$", out, re.M)
    check(len(rows) == len(d["rows"]) and len(rows) > 2, f"{len(rows)} text rows, {len(d['rows'])} JSON rows")
    for (name, ips), r in zip(rows, d["rows"]):
        check(r["variant"] == name, f"row {name} vs {r['variant']}")
        same(ips, r["throughput_per_s"], f"{name} img/s")
    m = find(r"^all techniques together: ([\d.]+)x", out, "speedup")
    same(m[1], d["all_on_over_all_off"], "speedup")
elif CASE == "json_error":
    _, err = run(["bench", MODEL, "--iters", "2", "--json", "no/such/dir/b.json"], rc=1)
    check("no/such/dir/b.json" in err, "the error does not name the file")
elif CASE == "run":
    out, _ = run(["run", MODEL, "--input", X, "--output", "y.npy", "--stats", "--json", "r.json"])
    d = load(os.path.join(WORK, "r.json"))
    head(d, "kiln-run")
    m = find(r"^load ([\d.]+) ms, first run \(plan \+ compute\) ([\d.]+) ms$", out, "times")
    same(m[1], d["load_ms"], "load")
    same(m[2], d["first_run_ms"], "first run")
    m = find(r"^nodes run (\d+), folded (\d+); activation arena ([\d.]+) MiB \(one buffer per value: ([\d.]+) MiB\), "
             r"constants ([\d.]+) MiB, workspace ([\d.]+) MiB$", out, "plan line")
    p = d["plan"]
    check(p["nodes_run"] == int(m[1]) and p["nodes_folded"] == int(m[2]), "nodes")
    for i, k in enumerate(["arena_bytes", "one_buffer_per_value_bytes", "constant_bytes", "workspace_bytes"]):
        same(m[i + 3], p[k] / 1048576.0, k)
    outs = re.findall(r"^(\S+) -> (\S+) (\w+)\[([\d,]*)\]$", out, re.M)
    check(len(outs) == len(d["outputs"]) == 1, "outputs")
    for (name, path, dt, shape), o in zip(outs, d["outputs"]):
        check(o["name"] == name and o["file"] == path and o["dtype"] == dt and o["shape"] == [int(v) for v in shape.split(",")],
              f"output {o} vs {name} {path} {dt}[{shape}]")
    with open(X, "rb") as f:  # the .npy header's shape
        f.read(8)
        hlen = struct.unpack("<H", f.read(2))[0]
        shape = list(ast.literal_eval(f.read(hlen).decode("latin-1"))["shape"])
    check(d["inputs"][0]["file"] == X and d["inputs"][0]["shape"] == shape, f"inputs {d['inputs']}, want shape {shape}")
elif CASE == "train":
    mnist(os.path.join(WORK, "data"), 320, 40)
    out, _ = run(TRAIN + ["--epochs", "2", "--max-steps", "15", "--losses", "losses.txt", "--json", "t.json"])
    d = load(os.path.join(WORK, "t.json"))
    head(d, "kiln-train")
    m = find(r"^mnist-net: (\d+) parameters; (\d+) steps of (\d+) per epoch; setup (\d+) ms$", out, "first line")
    check(d["param_count"] == int(m[1]) and d["steps_per_epoch"] == int(m[2]) == 10, "parameters/steps per epoch")
    check(d["config"]["batch"] == int(m[3]) and d["config"]["max_steps"] == 15, "config")
    same(m[4], d["setup_ms"], "setup")
    steps = d["steps"]
    check([s["step"] for s in steps] == list(range(1, 16)), f"step numbers {[s['step'] for s in steps]}")
    check([s["epoch"] for s in steps] == [1] * 10 + [2] * 5, "step epochs")
    with open(os.path.join(WORK, "losses.txt")) as f:
        losses = [float(v) for v in f.read().split()]
    check(len(losses) == 15, "--losses wrote {len(losses)} lines")
    for s, want in zip(steps, losses):
        check(math.isclose(s["loss"], want, rel_tol=1e-6), f"step {s['step']}: loss {s['loss']} vs {want}")
    lr1, lr2 = steps[0]["lr"], steps[10]["lr"]
    check(all(s["lr"] == lr1 for s in steps[:10]) and all(s["lr"] == lr2 for s in steps[10:]), "lr changes within an epoch")
    check(lr1 == 1.0 and math.isclose(lr2, 0.7, rel_tol=1e-6), f"lr {lr1} then {lr2}: not StepLR gamma 0.7 from 1")
    lines = re.findall(r"^epoch (\d+): ([\d.]+) s, last loss ([\d.]+), test accuracy ([\d.]+)$", out, re.M)
    check(len(lines) == len(d["epochs"]) == 2, "epoch records")
    for (e, secs, loss, acc), r in zip(lines, d["epochs"]):
        check(r["epoch"] == int(e), "epoch number")
        same(secs, r["time_s"], "epoch time")
        same(loss, r["last_loss"], "epoch last loss")
        same(acc, r["test_accuracy"], "epoch accuracy")
        check(math.isclose(r["steps_per_s"] * r["time_s"], r["steps"], rel_tol=1e-6), "steps/s x time != steps")
        check(r["last_loss"] == [s for s in steps if s["epoch"] == r["epoch"]][-1]["loss"], "last loss is not the last step's")
        check(r["end_step"] == [s for s in steps if s["epoch"] == r["epoch"]][-1]["step"], "end_step")
    check([r["steps"] for r in d["epochs"]] == [10, 5], "steps per epoch record")
    f = d["final"]
    check(f["steps_run"] == 15 and f["optimizer_steps"] == 15 and f["micro_steps"] == 15, f"final {f}")
    same(find(r"^test accuracy: ([\d.]+)$", out, "final accuracy")[1], f["test_accuracy"], "final accuracy")
elif CASE == "train_stdout_profile":
    mnist(os.path.join(WORK, "data"), 320, 40)
    out, err = run(TRAIN + ["--max-steps", "2", "--profile", "--json", "-"])
    d = load(out, text=True)
    head(d, "kiln-train")
    check(len(d["steps"]) == 2 and d["final"]["steps_run"] == 2, "2 steps")
    same(find(r"^test accuracy: ([\d.]+)$", err, "accuracy on stderr")[1], d["final"]["test_accuracy"], "accuracy")
    p = d["profile"]
    rows = re.findall(r"^ +\d+ +([\d.]+) +([\d.]+)% +\S+ +\S+  (\S+) +(\S+) ", err, re.M)
    check(len(rows) == len(p["nodes"]) > 5, f"{len(rows)} rows in the text, {len(p['nodes'])} in the JSON")
    for us, share, op, name in rows:  # the table cuts names at 28 characters, ops at 20
        n = [n for n in p["nodes"] if n["name"][:28] == name and n["op"][:20] == op]
        check(len(n) >= 1, f"row {name} not in the JSON")
        check(any(f"{1000 * x['median_ms']:.2f}" == us for x in n), f"{name}: text {us} us, JSON {[x['median_ms'] for x in n]}")
    same(find(r"^  sum of all rows ([\d.]+) us", err, "sum")[1], 1000 * p["sum_of_nodes_ms"], "sum of rows")
    same(find(r"^  whole step +([\d.]+) us", err, "whole step")[1], 1000 * d["profile_step_ms"], "whole step")
elif CASE == "plot_png":
    mnist(os.path.join(WORK, "data"), 320, 40)
    out, _ = run(TRAIN + ["--epochs", "2", "--max-steps", "15", "--plot", "c.png", "--plot-size", "400x300"])
    check("curves written to c.png (400x300)" in out, "no 'curves written' line")
    w, h, rows = png_pixels(os.path.join(WORK, "c.png"))
    check((w, h) == (400, 300), f"PNG is {w}x{h}, not 400x300")
    colours = {p for r in rows for p in r}
    ink = sum(p != (255, 255, 255) for r in rows for p in r)
    print(f"{len(colours)} colours, {100 * ink / (w * h):.1f}% of the pixels not white")
    check(len(colours) >= 8, f"only {len(colours)} colours: blank?")
    check(0.02 < ink / (w * h) < 0.6, f"{ink} of {w * h} pixels drawn")
    # the curves' own colours are there: the loss (blue), accuracy (orange), lr (green)
    for name, test in (("blue", lambda p: p[2] > 120 and p[2] - p[0] > 60 and p[2] - p[1] > 30), ("orange", lambda p: p[0] > 160 and p[2] < 60 and 60 < p[1] < 140),
                       ("green", lambda p: p[1] > 100 and p[0] < 60 and p[2] < 100)):
        check(any(test(p) for p in colours), f"no {name} curve")
elif CASE == "plot_svg":
    import xml.etree.ElementTree as ET
    mnist(os.path.join(WORK, "data"), 320, 40)
    run(TRAIN + ["--max-steps", "5", "--plot", "c.svg"])
    try:
        root = ET.parse(os.path.join(WORK, "c.svg")).getroot()
    except ET.ParseError as e:
        fail(f"SVG does not parse: {e}")
    check(root.tag.endswith("svg"), f"root {root.tag}")
    check(re.match(r"1200(pt|px)?$", root.get("width", "")) and re.match(r"900(pt|px)?$", root.get("height", "")),
          f"size {root.get('width')}x{root.get('height')}")
    check(len(list(root.iter())) > 50, "almost empty SVG")
elif CASE == "plot_bad":
    mnist(os.path.join(WORK, "data"), 320, 40)
    _, err = run(TRAIN + ["--plot", "c.jpg"], rc=2)
    check(".png or .svg" in err, "no message for .jpg")
    _, err = run(TRAIN + ["--plot", "c.png", "--plot-size", "10x10"], rc=2)
    check("WIDTHxHEIGHT" in err, "no message for --plot-size 10x10")
    check(not os.path.exists(os.path.join(WORK, "c.png")), "a picture written after a refusal")
elif CASE == "plot_without_cairo":
    mnist(os.path.join(WORK, "data"), 320, 40)
    _, err = run(TRAIN + ["--plot", "c.png"], rc=2)
    check("built without cairo" in err, "no 'built without cairo' message")
else:
    fail("unknown case")
print(f"PASS {CASE}")
