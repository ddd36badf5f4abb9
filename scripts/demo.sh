#!/usr/bin/env bash
# The main job, until training lands: install dependencies, build, then import a small ONNX
# CNN (examples/tiny_cnn.onnx), run it on a batch of 4 images, and compare with the output
# ONNX's own reference evaluator gave for the same input.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/build.sh
out=$(mktemp -d)
build/kiln info examples/tiny_cnn.onnx
build/kiln run examples/tiny_cnn.onnx --input examples/tiny_cnn_x.npy --output "$out/probs.npy" --stats
build/kiln compare "$out/probs.npy" examples/tiny_cnn_expected.npy --rtol 1e-4 --atol 1e-6
rm -rf "$out"
