"""Builds the small ONNX files the importer tests load (run once; the outputs are
committed). Needs python onnx and numpy; kiln itself does not."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]

# --- function.onnx: nested local functions with attribute references and defaults.
# Scale(x; alpha = 0.25 by default) = LeakyRelu(x, alpha)
# Outer(a; alpha2) = (Scale(Scale(a, alpha=alpha2)), Relu(a))   (second call: alpha's default)
# (Y, R) = Outer(X, alpha2=0.5), X: f32[batch, 4]
leaky = helper.make_node("LeakyRelu", ["x"], ["y"], name="leaky")
ref = helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT)
ref.ref_attr_name = "alpha"  # make_attribute_ref leaves it empty
leaky.attribute.append(ref)
scale = helper.make_function(
    "local", "Scale", ["x"], ["y"], [leaky], [helper.make_opsetid("", 16)],
    attribute_protos=[helper.make_attribute("alpha", 0.25)])
call1 = helper.make_node("Scale", ["a"], ["c"], name="first", domain="local")
ref2 = helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT)
ref2.ref_attr_name = "alpha2"  # the node's alpha is Outer's alpha2
call1.attribute.append(ref2)
call2 = helper.make_node("Scale", ["c"], ["b"], name="second", domain="local")
relu = helper.make_node("Relu", ["a"], ["r"])  # unnamed on purpose
outer = helper.make_function("local", "Outer", ["a"], ["b", "r"], [call1, call2, relu],
                             [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                             attributes=["alpha2"])
top = helper.make_node("Outer", ["X"], ["Y", "R"], name="outer", domain="local", alpha2=0.5)
g = helper.make_graph([top], "function_test",
                      [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 4])],
                      [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 4]),
                       helper.make_tensor_value_info("R", TensorProto.FLOAT, ["batch", 4])])
m = helper.make_model(g, opset_imports=OPSET, functions=[scale, outer], ir_version=9,
                      producer_name="kiln-tests")
onnx.save(m, "function.onnx")

# --- external.onnx + external.bin: W (f32[2,3]) at offset 8 of external.bin
# (8 bytes of padding first, so a reader ignoring the offset fails); Y = Relu(W);
# Z = Relu(X) with a symbolic batch, so the model also has an input.
w = np.array([[-1.5, 2.0, 0.0], [3.25, -4.0, 5.5]], dtype=np.float32)
with open("external.bin", "wb") as f:
    f.write(b"\xde\xad\xbe\xef\xde\xad\xbe\xef")
    f.write(w.tobytes())
wt = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[2, 3])
wt.data_location = TensorProto.EXTERNAL
for k, v in (("location", "external.bin"), ("offset", "8"), ("length", str(w.nbytes))):
    e = wt.external_data.add()
    e.key, e.value = k, v
g = helper.make_graph(
    [helper.make_node("Relu", ["W"], ["Y"], name="relu_w"),
     helper.make_node("Relu", ["X"], ["Z"], name="relu_x")],
    "external_test",
    [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3]),
     helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["N", 3])],
    initializer=[wt])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
onnx.save(m, "external.onnx")

# --- tensors/: one TensorProto per dtype, from the typed fields and from raw_data.
# Values as the C test expects them (tests/test_onnx_import.c, dtype_values).
import os
os.makedirs("tensors", exist_ok=True)
DTYPES = {
    "f32": (TensorProto.FLOAT, np.float32, [-1.5, 0.0, 2.25, 1024.0]),
    "f64": (TensorProto.DOUBLE, np.float64, [-1.5, 0.0, 2.25, 1e300]),
    "f16": (TensorProto.FLOAT16, np.float16, [-1.5, 0.0, 2.25, 1024.0]),
    "bf16": (TensorProto.BFLOAT16, None, [-1.5, 0.0, 2.25, 1024.0]),
    "i8": (TensorProto.INT8, np.int8, [-128, 0, 7, 127]),
    "u8": (TensorProto.UINT8, np.uint8, [0, 1, 200, 255]),
    "i16": (TensorProto.INT16, np.int16, [-32768, 0, 7, 32767]),
    "u16": (TensorProto.UINT16, np.uint16, [0, 1, 40000, 65535]),
    "i32": (TensorProto.INT32, np.int32, [-2147483648, 0, 7, 2147483647]),
    "u32": (TensorProto.UINT32, np.uint32, [0, 1, 3000000000, 4294967295]),
    "i64": (TensorProto.INT64, np.int64, [-(2**63), 0, 7, 2**63 - 1]),
    "u64": (TensorProto.UINT64, np.uint64, [0, 1, 2**63 + 5, 2**64 - 1]),
    "bool": (TensorProto.BOOL, np.bool_, [True, False, True, True]),
}
for name, (dt, npt, vals) in DTYPES.items():
    t = helper.make_tensor(name, dt, [2, 2], vals, raw=False)
    open(f"tensors/{name}_typed.pb", "wb").write(t.SerializeToString())
    if npt is None:  # bf16: numpy has none; raw bytes are the top halves of f32
        bits = (np.array(vals, np.float32).view(np.uint32) >> 16).astype("<u2")
        t = TensorProto(name=name, data_type=dt, dims=[2, 2], raw_data=bits.tobytes())
    else:
        t = numpy_helper.from_array(np.array(vals, dtype=npt).reshape(2, 2), name)
    open(f"tensors/{name}_raw.pb", "wb").write(t.SerializeToString())

# --- ../onnx_bad/bad_*.onnx: hostile models, each rejected with a specific status and
# word (the table in tests/test_onnx_import.c). Fuzz crashers join them there.
BAD = "../onnx_bad"
os.makedirs(BAD, exist_ok=True)
X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3])
Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3])
RELU = helper.make_node("Relu", ["X"], ["Y"], name="relu")


def save_bad(name, nodes, inputs=(X,), outputs=(Y,), inits=(), opsets=None, functions=()):
    g = helper.make_graph(list(nodes), name, list(inputs), list(outputs), initializer=list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)] if opsets is None
                          else opsets, functions=list(functions), ir_version=8)
    open(f"{BAD}/{name}.onnx", "wb").write(m.SerializeToString())


def ext_tensor(location, offset=None, length=None):
    t = TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[2, 3])
    t.data_location = TensorProto.EXTERNAL
    kv = [("location", location)] + ([("offset", offset)] if offset else []) + \
         ([("length", length)] if length else [])
    for k, v in kv:
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


ADD_W = helper.make_node("Relu", ["W"], ["Y"], name="relu_w")
save_bad("bad_dims_overflow", [ADD_W], inputs=[],
         inits=[TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[2**31, 2**31, 2**31])])
save_bad("bad_raw_data_length", [ADD_W], inputs=[],
         inits=[TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[2, 3], raw_data=b"\0" * 20)])
save_bad("bad_negative_dim", [ADD_W], inputs=[],
         inits=[TensorProto(name="W", data_type=TensorProto.FLOAT, dims=[-1, 3])])
save_bad("bad_typed_count", [ADD_W], inputs=[],
         inits=[TensorProto(name="W", data_type=TensorProto.INT64, dims=[4], int64_data=[1, 2, 3])])
save_bad("bad_missing_name", [ADD_W], inputs=[],
         inits=[TensorProto(data_type=TensorProto.FLOAT, dims=[1], float_data=[1.0])])
save_bad("bad_string_initializer", [ADD_W], inputs=[],
         inits=[helper.make_tensor("W", TensorProto.STRING, [1], [b"hi"])])
save_bad("bad_external_traversal", [ADD_W], inputs=[], inits=[ext_tensor("../onnx/external.bin", "8")])
save_bad("bad_external_absolute", [ADD_W], inputs=[], inits=[ext_tensor("/etc/passwd")])
open(f"{BAD}/bad_external_past_end.bin", "wb").write(b"\1" * 16)
save_bad("bad_external_past_end", [ADD_W], inputs=[],
         inits=[ext_tensor("bad_external_past_end.bin", "4")])
save_bad("bad_undefined_input", [helper.make_node("Relu", ["nope"], ["Y"], name="relu")])
save_bad("bad_duplicate_output", [RELU, helper.make_node("Relu", ["X"], ["Y"], name="relu2")])
save_bad("bad_too_many_dims", [RELU],
         inputs=[helper.make_tensor_value_info("X", TensorProto.FLOAT, [1] * 9)])
save_bad("bad_unknown_domain", [helper.make_node("Gelu", ["X"], ["Y"], name="g", domain="com.example")])
save_bad("bad_no_opset", [RELU], opsets=[])
save_bad("bad_subgraph", [helper.make_node(
    "If", ["C"], ["Y"], name="if",
    then_branch=helper.make_graph([RELU], "t", [], [Y]),
    else_branch=helper.make_graph([RELU], "e", [], [Y]))],
    inputs=[X, helper.make_tensor_value_info("C", TensorProto.BOOL, [])])
bad_ref = helper.make_node("LeakyRelu", ["X"], ["Y"], name="leaky")
bad_ref.attribute.append(helper.make_attribute_ref("alpha", onnx.AttributeProto.FLOAT))
bad_ref.attribute[0].ref_attr_name = "alpha"
save_bad("bad_attr_ref_outside", [bad_ref])
rec = helper.make_function("local", "F", ["x"], ["y"],
                           [helper.make_node("F", ["x"], ["y"], domain="local")],
                           [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
save_bad("bad_function_recursion", [helper.make_node("F", ["X"], ["Y"], name="call", domain="local")],
         opsets=OPSET, functions=[rec])
one = helper.make_function("local", "F", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])],
                           [helper.make_opsetid("", 17)])
save_bad("bad_function_arity", [helper.make_node("F", ["X", "X"], ["Y"], name="call", domain="local")],
         opsets=OPSET, functions=[one])


# bad_nesting: attribute subgraphs nested 300 deep, written as raw protobuf (python's
# protobuf refuses to build it). Graph{node: Node{attribute: Attr{name, g: Graph{...}}}}
def varint(n):
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        out += bytes([b | (0x80 if n else 0)])
        if not n:
            return out


def field(num, payload):
    return varint(num << 3 | 2) + varint(len(payload)) + payload


g = b""
for _ in range(300):
    attr = field(1, b"then_branch") + varint(20 << 3) + varint(5) + field(6, g)
    g = field(1, field(4, b"If") + field(5, attr))
model = varint(1 << 3) + varint(8) + field(7, g) + field(8, field(1, b"") + varint(2 << 3) + varint(17))
open(f"{BAD}/bad_nesting.onnx", "wb").write(model)

# bad_function_expansion: F17 calls F16 twice ... F0 = Relu: 131072 nodes from 1 KB.
fns = [helper.make_function("l", "F0", ["x"], ["y"], [helper.make_node("Relu", ["x"], ["y"])],
                            [helper.make_opsetid("", 17)])]
for k in range(1, 18):
    fns.append(helper.make_function(
        "l", f"F{k}", ["x"], ["y"],
        [helper.make_node(f"F{k-1}", ["x"], ["t"], domain="l"),
         helper.make_node(f"F{k-1}", ["t"], ["y"], domain="l")],
        [helper.make_opsetid("", 17), helper.make_opsetid("l", 1)]))
save_bad("bad_function_expansion", [helper.make_node("F17", ["X"], ["Y"], domain="l")],
         inputs=[helper.make_tensor_value_info("X", TensorProto.FLOAT, [1])],
         outputs=[helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1])],
         opsets=[helper.make_opsetid("", 17), helper.make_opsetid("l", 1)], functions=fns)

# bad_legacy_broadcast: opset 6 Add aligning B (f32[3]) at axis 1 of A (f32[2,3,4]);
# numpy broadcasting would pair B with the last axis instead.
legacy = helper.make_node("Add", ["A", "B"], ["Y"], name="add", broadcast=1, axis=1)
save_bad("bad_legacy_broadcast", [legacy],
         inputs=[helper.make_tensor_value_info("A", TensorProto.FLOAT, [2, 3, 4])],
         outputs=[helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3, 4])],
         inits=[helper.make_tensor("B", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])],
         opsets=[helper.make_opsetid("", 6)])

# --- overload.onnx: a function told apart by its overload (IR 10), called twice; a
# same-named function without the overload must not be picked.
wrong = helper.make_function("pkg.torch", "Act", ["x"], ["y"],
                             [helper.make_node("LeakyRelu", ["x"], ["y"])],
                             [helper.make_opsetid("", 18)])
right = helper.make_function("pkg.torch", "Act", ["x"], ["y"],
                             [helper.make_node("Relu", ["x"], ["y"], name="r")],
                             [helper.make_opsetid("", 18)], overload="v2")
c1 = helper.make_node("Act", ["X"], ["H"], name="a1", domain="pkg.torch")
c1.overload = "v2"
c2 = helper.make_node("Act", ["H"], ["Y"], name="a2", domain="pkg.torch")
c2.overload = "v2"
g = helper.make_graph([c1, c2], "overload",
                      [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["B", 8])],
                      [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["B", 8])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18),
                                              helper.make_opsetid("pkg.torch", 1)],
                            functions=[wrong, right], ir_version=10), "overload.onnx")

# --- examples/dynamic_hw.onnx: a detector-like input, every dim but the channels symbolic
# (x: f32[N,3,H,W], the batch named N) plus a second input sharing the batch name; an
# AveragePool of kernel 4 needs H, W >= 4 (kiln bench --shapes).
conv = helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1])
pool = helper.make_node("AveragePool", ["c"], ["p"], name="pool", kernel_shape=[4, 4])
gap = helper.make_node("GlobalAveragePool", ["p"], ["g"], name="gap")
flat = helper.make_node("Flatten", ["g"], ["f"], name="flat")
add = helper.make_node("Add", ["f", "bias"], ["y"], name="add")
g = helper.make_graph([conv, pool, gap, flat, add], "dynamic_hw",
                      [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "H", "W"]),
                       helper.make_tensor_value_info("bias", TensorProto.FLOAT, ["N", 4])],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])],
                      [numpy_helper.from_array(
                          np.linspace(-1, 1, 4 * 3 * 3 * 3, dtype=np.float32).reshape(4, 3, 3, 3), "w")])
# (it is the example of docs/onnx-bench.md, so it lives in examples/)
import os  # noqa: E402
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
          os.path.join(os.path.dirname(os.path.abspath(__file__)), "../../../examples/dynamic_hw.onnx"))
