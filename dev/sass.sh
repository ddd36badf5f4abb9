#!/bin/bash
# dev/sass.sh FILE.cu [REGEX] — a CUDA file's SASS for sm_90, read on a machine without a GPU.
#
# Builds FILE.cu to a cubin as the library builds it (nvcc -arch=sm_90 -O3, kiln's include
# paths), disassembles it with cuobjdump (the toolkit's, or PyPI's nvidia-cuda-cuobjdump and
# nvidia-cuda-nvdisasm wheels fetched once into $KILN_SASS_TOOLS, default
# ~/.cache/kiln-sass), and prints, for each kernel whose demangled name matches REGEX (all
# if none): its registers and spills (ptxas -v), its instruction count, and the count of the
# opcodes that say where a kernel's time may go (MUFU: the special-function unit; CALL: a
# slow path taken out of line, such as an IEEE division's; BRA / BSSY: branches and their
# reconvergence; HMMA / LDSM / LDGSTS: tensor cores, ldmatrix, cp.async; 64-bit division
# shows as I2F.U32.RP + MUFU.RCP + IMAD.HI). The whole SASS is left in $OUT_DIR (default
# /tmp/kiln-sass) as NAME.sass, one file a kernel, for reading.
#
# Example: dev/sass.sh src/cuda/conv_pointwise.cu 'product_kernel<__half, 32, 16, false>'
# (bench/NOTES.md "z35": ~17 instructions a SiLU value there, 5 after).
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
src=$1 re=${2:-.}
root=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT_DIR:-/tmp/kiln-sass}
tools=${KILN_SASS_TOOLS:-$HOME/.cache/kiln-sass}
mkdir -p "$out"

cuobjdump=$(command -v cuobjdump || true)
nvdisasm_dir=
if [ -z "$cuobjdump" ] || ! command -v nvdisasm > /dev/null; then
  if [ ! -x "$tools/bin/cuobjdump" ] || [ ! -x "$tools/bin/nvdisasm" ]; then
    echo "sass.sh: fetching cuobjdump and nvdisasm (PyPI's nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm) into $tools" >&2
    mkdir -p "$tools/wheels" "$tools/bin"
    python3 -m pip download -q --no-deps -d "$tools/wheels" nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
    for w in "$tools"/wheels/*.whl; do
      python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$w" "$tools/unpacked"
    done
    for b in cuobjdump nvdisasm; do
      f=$(find "$tools/unpacked" -type f -name "$b" | head -1)
      [ -n "$f" ] || { echo "sass.sh: no $b in the wheels" >&2; exit 1; }
      chmod +x "$f"
      ln -sf "$f" "$tools/bin/$b"
    done
  fi
  cuobjdump=$tools/bin/cuobjdump
  nvdisasm_dir=$tools/bin
fi

name=$(basename "$src" .cu)
cubin=$out/$name.cubin
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$nvcc" -x cu -arch=sm_90 -std=c++17 -O3 -cubin -Xptxas -v -DKILN_HAVE_CUDA=1 -I"$root/include" -I"$root/src" \
  -o "$cubin" "$src" 2> "$out/$name.ptxas.txt" || { grep -v "^ptxas info" "$out/$name.ptxas.txt" >&2; exit 1; }
PATH=${nvdisasm_dir:+$nvdisasm_dir:}$PATH "$cuobjdump" -sass "$cubin" > "$out/$name.sass"

python3 - "$out" "$name" "$re" <<'PY'
import collections, re, subprocess, sys
out, name, pattern = sys.argv[1], sys.argv[2], re.compile(sys.argv[3])
def demangle(names):
    r = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True)
    return r.stdout.split("\n")[:len(names)] if r.returncode == 0 else names
# ptxas -v: "Compiling entry function '_Z...'" then "... N bytes spill stores ..." and "Used R registers"
regs, cur = {}, None
for line in open(f"{out}/{name}.ptxas.txt"):
    m = re.search(r"entry function '([^']+)'", line)
    if m: cur = m.group(1); regs[cur] = ["?", "?"]
    elif cur and "Used" in line:
        regs[cur][0] = re.search(r"Used (\d+) registers", line).group(1)
    elif cur and "spill stores" in line:
        regs[cur][1] = re.search(r"(\d+) bytes spill stores", line).group(1)
parts = re.split(r"\n\s*Function : ", open(f"{out}/{name}.sass").read())[1:]
mangled = [p.split("\n", 1)[0].strip() for p in parts]
keys = ("MUFU", "CALL", "BRA", "BSSY", "HMMA", "LDSM", "LDGSTS", "LDG", "STG", "LDS", "STS", "BAR")
shown = 0
for mang, dem, body in zip(mangled, demangle(mangled), parts):
    if not pattern.search(dem): continue
    ins = [l.split("*/", 1)[1].split(";")[0].strip() for l in body.split("\n")
           if re.match(r"\s*/\*[0-9a-f]{4,}\*/", l)]
    ops = collections.Counter(i.split()[1] if i.startswith("@") else i.split()[0] for i in ins if i)
    by = {k: sum(n for o, n in ops.items() if o == k or o.startswith(k + ".")) for k in keys}
    r, s = regs.get(mang, ["?", "?"])
    safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", dem)[:120]
    open(f"{out}/{safe}.sass", "w").write("\n".join(ins) + "\n")
    print(f"{dem[:150]}\n  {len(ins)} instructions, {r} registers, {s} bytes spilled; " +
          " ".join(f"{k} {v}" for k, v in by.items() if v))
    shown += 1
print(f"{shown} kernel(s) of {len(parts)} matched; SASS in {out}/")
PY
