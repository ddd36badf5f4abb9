#!/usr/bin/env bash
# The main job: install dependencies (with Debian's Fashion-MNIST), build, and train
# pytorch/examples' MNIST network on Fashion-MNIST for one epoch on the CPU (Adadelta,
# batch 64), ending with the line `test accuracy: 0.XXXX`. Extra arguments go to
# `kiln train` (e.g. --epochs 3, --save run.safetensors, --device cuda).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
exec build/kiln train mnist-net --data /usr/share/datasets/fashion-mnist --epochs 1 "$@"
