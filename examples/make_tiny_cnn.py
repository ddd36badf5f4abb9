"""Builds examples/tiny_cnn.onnx, a small image classifier with random weights, plus an
input and the output ONNX's own reference evaluator gives for it. Development only: the
files are committed, and kiln needs no Python. Run: python3 examples/make_tiny_cnn.py"""
import os
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

rng = np.random.default_rng(7)
here = os.path.dirname(os.path.abspath(__file__))


def w(name, *shape, scale=0.2):
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


inits = [
    w("c1_w", 8, 3, 3, 3), w("bn_scale", 8), w("bn_bias", 8), w("bn_mean", 8),
    numpy_helper.from_array((rng.random(8) + 0.5).astype(np.float32), "bn_var"),
    w("c2_w", 16, 8, 3, 3), w("c2_b", 16), w("fc_w", 10, 16), w("fc_b", 10),
    numpy_helper.from_array(np.array([0, -1], dtype=np.int64), "flat_shape"),
]
nodes = [
    helper.make_node("Conv", ["x", "c1_w"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
    helper.make_node("BatchNormalization", ["c1", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["bn1"], name="bn1"),
    helper.make_node("Relu", ["bn1"], ["r1"], name="relu1"),
    helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
    helper.make_node("Conv", ["p1", "c2_w", "c2_b"], ["c2"], name="conv2", pads=[1, 1, 1, 1], strides=[2, 2]),
    helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
    helper.make_node("GlobalAveragePool", ["r2"], ["g"], name="gap"),
    helper.make_node("Reshape", ["g", "flat_shape"], ["f"], name="flatten"),
    helper.make_node("Gemm", ["f", "fc_w", "fc_b"], ["logits"], name="fc", transB=1),
    helper.make_node("Softmax", ["logits"], ["probs"], name="softmax", axis=1),
]
graph = helper.make_graph(
    nodes, "tiny_cnn",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, 32, 32])],
    [helper.make_tensor_value_info("probs", TensorProto.FLOAT, ["batch", 10])],
    inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="kiln-examples")
onnx.checker.check_model(model)
onnx.save(model, os.path.join(here, "tiny_cnn.onnx"))

x = rng.standard_normal((4, 3, 32, 32)).astype(np.float32)
np.save(os.path.join(here, "tiny_cnn_x.npy"), x)
(y,) = ReferenceEvaluator(model).run(None, {"x": x})
np.save(os.path.join(here, "tiny_cnn_expected.npy"), y.astype(np.float32))
print("wrote tiny_cnn.onnx; expected argmax", y.argmax(1))
