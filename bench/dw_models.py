"""One-node depthwise convolution models for timing conv_depthwise.cu against cuDNN
(bench/NOTES.md, z1): convnext_tiny's four 7x7 stages, shufflenet_v2's 3x3 (58 channels),
an efficientnet-like 5x5 stride 2 + Relu and a mobilenet-like 3x3 stride 2 + Clip (ReLU6).

    python3 bench/dw_models.py OUTDIR
    for m in OUTDIR/*.onnx; do kiln bench $m --fp16 --batch 256 --profile;
        kiln bench $m --fp16 --batch 256 --profile --disable conv-depthwise; done
"""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

SHAPES = [  # name, channels, height = width, kernel, stride, activation
    ("cnx1", 96, 56, 7, 1, None), ("cnx2", 192, 28, 7, 1, None), ("cnx3", 384, 14, 7, 1, None),
    ("cnx4", 768, 7, 7, 1, None), ("shuf", 58, 28, 3, 1, None), ("effb0", 240, 28, 5, 2, "Relu"),
    ("mbv2", 144, 56, 3, 2, "Clip")]


def main(out):
    os.makedirs(out, exist_ok=True)
    rng = np.random.default_rng(0)
    for name, c, h, k, s, act in SHAPES:
        w = numpy_helper.from_array((rng.standard_normal((c, 1, k, k)) * 0.1).astype(np.float32), "w")
        b = numpy_helper.from_array((rng.standard_normal((c,)) * 0.1).astype(np.float32), "b")
        inits = [w, b]
        nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=c, kernel_shape=[k, k],
                                  pads=[k // 2] * 4, strides=[s, s])]
        if act == "Relu":
            nodes.append(helper.make_node("Relu", ["c"], ["y"]))
        elif act == "Clip":
            inits += [numpy_helper.from_array(np.array(0, np.float32), "lo"),
                      numpy_helper.from_array(np.array(6, np.float32), "hi")]
            nodes.append(helper.make_node("Clip", ["c", "lo", "hi"], ["y"]))
        else:
            nodes.append(helper.make_node("Identity", ["c"], ["y"]))
        g = helper.make_graph(nodes, name, [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", c, h, h])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), os.path.join(out, name + ".onnx"))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "dw_models")
