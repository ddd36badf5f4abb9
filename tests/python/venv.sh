#!/usr/bin/env bash
# ctest python_venv (fixture python_venv): a fresh virtual environment at VENV holding what
# the Python tests need: NumPy, PyTorch, ONNX, onnxscript (torch.onnx.export) and
# onnxruntime, torchvision (tests/python/grad_vs_torch.py). Other tests use VENV/bin/python with FIXTURES_REQUIRED python_venv.
# pip's cache (~/.cache/pip) is used where the index lets pip keep what it downloads.
# KILN_REUSE_VENV=1 keeps an environment this script completed before (a developer's rerun).
# venv.sh PYTHON VENV
set -euo pipefail
py=$1 venv=$2
# The CPU wheel of PyTorch lives outside PyPI; KILN_TORCH_INDEX (e.g. PyTorch's CPU index)
# picks it where that index is reachable, else PyPI's wheel (CUDA libraries included) comes.
torch_index=()
[ -n "${KILN_TORCH_INDEX:-}" ] && torch_index=(--index-url "$KILN_TORCH_INDEX")
start=$(date +%s)
if [ "${KILN_REUSE_VENV:-0}" = 1 ] && [ -f "$venv/.kiln_venv_done" ]; then
  echo "venv: $venv kept (KILN_REUSE_VENV=1)"
  exit 0
fi
rm -rf "$venv"
"$py" -m venv "$venv"
# (Not --no-compile: the venv was made 40 s sooner, but each Python test then compiled what
# it imported of PyTorch, and ctest -L cpu took 366 s instead of 235: bench/NOTES.md,
# the thirty-second session.)
"$venv/bin/python" -m pip install -q numpy onnx onnxruntime onnxscript
"$venv/bin/python" -m pip install -q "${torch_index[@]}" torch torchvision
"$venv/bin/python" -c "import numpy, onnx, onnxruntime, torch, torchvision; print('venv:', 'numpy', numpy.__version__, 'torch', torch.__version__, 'torchvision', torchvision.__version__, 'onnx', onnx.__version__, 'onnxruntime', onnxruntime.__version__)"
touch "$venv/.kiln_venv_done"
echo "venv: $venv made in $(( $(date +%s) - start )) s"
