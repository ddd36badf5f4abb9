"""Seeds fuzz/corpus: node-test models covering many ops and attribute kinds (copied
from Debian's libonnx-testdata), plus models exercising local functions, external data
(fuzz_onnx.c provides weights.bin: bytes 0..255 repeated, 4 KiB) and every dtype.
Needs python onnx and numpy."""
import os
import shutil

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

NODE = "/usr/share/libonnx-testdata/data/node"
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "corpus")
os.makedirs(OUT, exist_ok=True)

TESTS = """relu conv_with_strides_padding constant depthtospace_crd_mode_example leakyrelu
resize_upsample_scales_linear split_variable_parts_1d cast_FLOAT_to_FLOAT16
reshape_reordered_all_dims slice_neg_steps gather_1 concat_3d_axis_1 batchnorm_epsilon
maxpool_2d_pads averagepool_2d_strides lstm_defaults if loop11 sequence_insert_at_back
castlike_FLOAT_to_STRING einsum_batch_diagonal top_k constant_pad
range_float_type_positive_delta where_example expand_dim_changed tile
transpose_all_permutations_0 softmax_axis_1 reduce_sum_keepdims_example
layer_normalization_2d_axis0 gemm_default_matrix_bias matmul_3d add_bcast
clip_default_inbounds dropout_default_mask constantofshape_int_zeros nonzero_example
onehot_with_axis scatter_elements_with_axis quantizelinear qlinearconv
optional_has_element identity_sequence unsqueeze_axis_0 squeeze
argmax_default_axis_example cumsum_1d gridsample roialign_aligned_false celu_expanded
softmax_axis_0_expanded bernoulli_seed shape_start_1 size mod_mixed_sign_int8
cast_BFLOAT16_to_FLOAT cast_FLOAT_to_DOUBLE not_2d and_bcast3v1d""".split()
for t in TESTS:
    shutil.copy(f"{NODE}/test_{t}/model.onnx", f"{OUT}/node_{t}.onnx")

shutil.copy(os.path.join(HERE, "../tests/data/onnx/function.onnx"), f"{OUT}/function.onnx")


def ext(name, dt, dims, offset, length):
    t = TensorProto(name=name, data_type=dt, dims=dims)
    t.data_location = TensorProto.EXTERNAL
    for k, v in (("location", "weights.bin"), ("offset", str(offset)), ("length", str(length))):
        e = t.external_data.add()
        e.key, e.value = k, v
    return t


# external data: W f32[2,3] at offset 16 of weights.bin, S i64[2] at offset 64
g = helper.make_graph(
    [helper.make_node("Relu", ["W"], ["Y"], name="relu_w"),
     helper.make_node("Relu", ["X"], ["Z"], name="relu_x")],
    "ext", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["N", 3])],
    [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 3]),
     helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["N", 3]),
     helper.make_tensor_value_info("S", TensorProto.INT64, [2])],
    initializer=[ext("W", TensorProto.FLOAT, [2, 3], 16, 24), ext("S", TensorProto.INT64, [2], 64, 16)])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
          f"{OUT}/external.onnx")

# every dtype, typed fields and raw_data, as graph outputs straight from initializers
inits, outs = [], []
vals = [0, 1, 2, 3]
for i, dt in enumerate([1, 2, 3, 4, 5, 6, 7, 9, 10, 11, 12, 13, 16]):
    inits.append(helper.make_tensor(f"t{i}", dt, [2, 2], vals, raw=False))
    raw = helper.make_tensor(f"r{i}", dt, [2, 2], vals, raw=False)
    npv = numpy_helper.to_array(raw) if dt != 16 else None
    if npv is not None:
        inits.append(numpy_helper.from_array(npv, f"r{i}"))
    for t in inits[-2:]:
        outs.append(helper.make_tensor_value_info(t.name, dt, [2, 2]))
g = helper.make_graph([], "dtypes", [], outs, initializer=inits)
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=8),
          f"{OUT}/dtypes.onnx")

# a function with an overload and attribute defaults, called twice
body = helper.make_node("Relu", ["x"], ["y"], name="r")
f = helper.make_function("pkg.torch", "Act", ["x"], ["y"], [body], [helper.make_opsetid("", 18)],
                         attribute_protos=[helper.make_attribute("unused", 3)], overload="v2")
c1 = helper.make_node("Act", ["X"], ["H"], name="a1", domain="pkg.torch")
c1.overload = "v2"
c2 = helper.make_node("Act", ["H"], ["Y"], name="a2", domain="pkg.torch")
c2.overload = "v2"
g = helper.make_graph([c1, c2], "overload",
                      [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["B", 8])],
                      [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["B", 8])])
onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 18),
                                              helper.make_opsetid("pkg.torch", 1)],
                            functions=[f], ir_version=10), f"{OUT}/overload.onnx")
print(len(os.listdir(OUT)), "files,", sum(os.path.getsize(os.path.join(OUT, p)) for p in os.listdir(OUT)), "bytes")
