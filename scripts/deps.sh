#!/usr/bin/env bash
# Installs what kiln builds and tests with, from Debian's packages. Safe to re-run.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-dev zlib1g-dev libprotobuf-c-dev
      protobuf-c-compiler libonnx-dev libonnx-testdata dataset-fashion-mnist clang
      libclang-rt-14-dev libdlpack-dev libcairo2-dev libjpeg62-turbo-dev libpng-dev python3
      libopenmpi-dev openmpi-bin)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "kiln: installing ${missing[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# Optional: nvJPEG for GPU JPEG decoding (kiln train --decode, docs/train.md), from PyPI:
# KILN_NVJPEG=1 scripts/deps.sh. kiln loads libnvjpeg.so.13 at run time (pip's
# nvidia/cu13/lib is searched) and cmake checks its declarations against the header there.
if [ "${KILN_NVJPEG:-0}" = 1 ]; then
  python3 -m pip install --user --quiet nvidia-nvjpeg
fi
