#!/usr/bin/env python3
"""Runs the examples of a page of docs/ (ctest docs_*), python3's standard library only:

  docs.py SOURCE_DIR BUILD_DIR WORK_DIR PAGE.md [--torch]

In document order, each fenced block
  ```sh       runs with bash -euo pipefail,
  ```python   runs with python3,
  ```c / ```cpp / ```cmake / anything else preceded by
              <!-- docs-test: file docs/examples/PATH -->
              must equal that file byte for byte (the file is what the sh blocks build),
  ```text / ```console / ```json  is output shown, not run.
A block preceded by <!-- docs-test: torch --> needs PyTorch: it runs only with --torch
(ctest docs_pytorch), which exits 77 (ctest: skipped) when `import torch` fails, and
runs only those blocks.
The blocks run in WORK_DIR (emptied first) holding links to the checkout's examples/ and
docs/ and to the build folder as build/, with the build's kiln first on PATH and HOME set
to WORK_DIR (so that a block installing under $HOME stays here). Every relative link of
the page must name a file of the checkout.
"""
import os
import re
import shutil
import subprocess
import sys

src, build, work, page = sys.argv[1:5]
torch_mode = "--torch" in sys.argv[5:]
page_path = os.path.join(src, "docs", page)
with open(page_path, encoding="utf-8") as f:
    text = f.read()


def fail(msg):
    print(f"FAIL docs/{page}: {msg}")
    sys.exit(1)


# relative links: [..](path) and <img src="path">
for target in re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r'src="([^"]+)"', text):
    if re.match(r"[a-z]+:", target) or target.startswith("#"):
        continue
    path = os.path.normpath(os.path.join(os.path.dirname(page_path), target.split("#")[0]))
    if not os.path.exists(path):
        fail(f"link to {target}: {path} does not exist")

blocks = []  # (line, info, marker, body)
lines = text.split("\n")
i = 0
while i < len(lines):
    m = re.match(r"^```(\S*)", lines[i])
    if not m:
        i += 1
        continue
    info, start = m[1], i
    marker = ""
    for back in range(i - 1, -1, -1):  # the nearest non-blank line before the fence
        if lines[back].strip():
            mm = re.match(r"^<!-- docs-test: (.*) -->$", lines[back].strip())
            marker = mm[1] if mm else ""
            break
    i += 1
    body = []
    while i < len(lines) and not lines[i].startswith("```"):
        body.append(lines[i])
        i += 1
    if i == len(lines):
        fail(f"line {start + 1}: the block is never closed")
    blocks.append((start + 1, info, marker, "\n".join(body) + "\n"))
    i += 1

if torch_mode:
    try:
        subprocess.run([sys.executable, "-c", "import torch"], check=True, capture_output=True)
    except subprocess.CalledProcessError:
        print("SKIP: PyTorch is not installed (import torch failed)")
        sys.exit(77)

shutil.rmtree(work, ignore_errors=True)
os.makedirs(work)
for name, target in (("examples", os.path.join(src, "examples")), ("docs", os.path.join(src, "docs")), ("build", build)):
    os.symlink(target, os.path.join(work, name))
env = dict(os.environ, HOME=work, PATH=build + os.pathsep + os.environ.get("PATH", ""), OMP_WAIT_POLICY="passive")

ran = 0
for line, info, marker, body in blocks:
    lang = info.split(",")[0].lower()
    if marker.startswith("file "):
        rel = marker[5:].strip()
        with open(os.path.join(src, rel), encoding="utf-8") as f:
            if f.read() != body:
                fail(f"line {line}: the block differs from {rel} (it must be the file verbatim)")
        print(f"--- line {line}: {rel} included verbatim")
        ran += 1
        continue
    if lang in ("", "text", "console", "json") or marker not in ("", "torch"):
        if marker not in ("", "torch"):
            fail(f"line {line}: unknown marker '{marker}'")
        continue
    if (marker == "torch") != torch_mode:
        continue
    if lang in ("sh", "bash"):
        cmd = ["bash", "-euo", "pipefail", "-c", body]
    elif lang == "python":
        cmd = [sys.executable, "-c", body]
    else:
        fail(f"line {line}: a ```{info} block that is neither run nor a file of docs/examples/")
    print(f"--- line {line} ({lang}):\n{body}", flush=True)
    p = subprocess.run(cmd, cwd=work, env=env)
    if p.returncode != 0:
        fail(f"the block at line {line} exited {p.returncode}")
    ran += 1
if ran == 0:
    fail("no example ran" + (" (no block marked torch)" if torch_mode else ""))
print(f"PASS docs/{page}: {ran} blocks")
