"""Seeds the corpora of the parser harnesses (fuzz/README.md): a few valid files of each
format and edge cases around what the parsers check. Needs Python's standard library and
numpy only. Run from anywhere: python3 fuzz/make_corpora.py (rewrites the seed files it
names, leaves others alone).

  corpus_safetensors/  fuzz_safetensors (src/io/safetensors.c)
  corpus_idx/          fuzz_idx (src/data/idx.c), plain and gzipped
  corpus_npy/          fuzz_npy (src/io/npy.c)
  corpus_cifar/        fuzz_cifar (src/data/cifar.c, CIFAR-10's binary records)
  corpus_onnx_pb/      fuzz_onnx_pb (TensorProto files, kiln_tensor_load_onnx_pb): node-test
                       inputs from Debian's libonnx-testdata when installed, plus hand-made ones
"""
import glob
import gzip
import io
import json
import os
import shutil
import struct

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


def out(corpus, name, data):
    d = os.path.join(HERE, corpus)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ------------------------------------------------------------------ safetensors
def st(tensors, meta=None, pad=b"", header_override=None):
    """tensors: list of (name, dtype string, shape, bytes)"""
    h, data = {}, b""
    if meta is not None:
        h["__metadata__"] = meta
    for name, dt, shape, raw in tensors:
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    hj = header_override if header_override is not None else json.dumps(h).encode()
    return struct.pack("<Q", len(hj)) + hj + data + pad


f32 = np.arange(6, dtype=np.float32).tobytes()
out("corpus_safetensors", "one_f32.safetensors", st([("w", "F32", [2, 3], f32)]))
out("corpus_safetensors", "meta.safetensors",
    st([("a", "I64", [2], np.array([1, -1], np.int64).tobytes()), ("b", "U8", [3], b"\x01\x02\x03")],
       meta={"format": "kiln", "epoch": "3"}))
out("corpus_safetensors", "all_dtypes.safetensors",
    st([(dt.lower(), dt, [2], b"\x01" * (2 * sz)) for dt, sz in
        (("BOOL", 1), ("U8", 1), ("I8", 1), ("U16", 2), ("I16", 2), ("F16", 2), ("BF16", 2), ("U32", 4),
         ("I32", 4), ("F32", 4), ("U64", 8), ("I64", 8), ("F64", 8))]))
out("corpus_safetensors", "scalar_and_empty.safetensors",
    st([("s", "F32", [], b"\0\0\x80\x3f"), ("e", "F32", [0, 4], b"")]))
out("corpus_safetensors", "empty.safetensors", st([]))
out("corpus_safetensors", "escapes.safetensors",
    st([], header_override=rb'{"na\u00efve \"q\" \n":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
       pad=b"\0\0\0\0"))
out("corpus_safetensors", "f8.safetensors", st([("x", "F8_E4M3", [2], b"\0\0")]))
out("corpus_safetensors", "gap.safetensors",
    st([], header_override=b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}', pad=b"\0\0"))
out("corpus_safetensors", "overlap.safetensors",
    st([], header_override=b'{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},'
                           b'"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}', pad=b"\0\0\0"))
out("corpus_safetensors", "huge_shape.safetensors",
    st([], header_override=b'{"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}}',
       pad=b"\0\0\0\0"))
out("corpus_safetensors", "truncated.safetensors", st([("w", "F32", [2, 3], f32)])[:-5])
out("corpus_safetensors", "header_len_huge.safetensors", struct.pack("<Q", 1 << 62) + b"{}")

# ------------------------------------------------------------------ IDX
def idx(arr, code):
    nd = arr.ndim
    return struct.pack(">HBB", 0, code, nd) + b"".join(struct.pack(">I", d) for d in arr.shape) + \
        arr.astype(arr.dtype.newbyteorder(">")).tobytes()


imgs = (np.arange(2 * 28 * 28) % 256).astype(np.uint8).reshape(2, 28, 28)
labels = np.array([3, 7], np.uint8)
out("corpus_idx", "images_u8.idx", idx(imgs, 0x08))
out("corpus_idx", "labels_u8.idx", idx(labels, 0x08))
out("corpus_idx", "labels_u8.idx.gz", gzip.compress(idx(labels, 0x08), mtime=0))
out("corpus_idx", "images_u8_small.idx.gz", gzip.compress(idx(imgs[:1, :4, :4], 0x08), mtime=0))
for code, dt in ((0x09, np.int8), (0x0B, np.int16), (0x0C, np.int32), (0x0D, np.float32), (0x0E, np.float64)):
    out("corpus_idx", f"type_{code:02x}.idx", idx(np.arange(6).astype(dt).reshape(2, 3), code))
out("corpus_idx", "zero_dims.idx", struct.pack(">HBB", 0, 8, 0) + b"\x05")
out("corpus_idx", "empty_dim.idx", idx(np.zeros((0, 3), np.uint8), 0x08))
out("corpus_idx", "truncated.idx", idx(imgs, 0x08)[:200])
out("corpus_idx", "trailing.idx", idx(labels, 0x08) + b"\0")
out("corpus_idx", "huge_dims.idx", struct.pack(">HBB", 0, 8, 3) + struct.pack(">III", 0xffffffff, 0xffffffff, 2) + b"\0" * 8)
out("corpus_idx", "bad_type.idx", struct.pack(">HBB", 0, 0x0A, 1) + struct.pack(">I", 1) + b"\0")
out("corpus_idx", "bad_gzip.idx.gz", gzip.compress(idx(labels, 0x08), mtime=0)[:-6])

# ------------------------------------------------------------------ npy
def npy(a, fortran=False):
    b = io.BytesIO()
    np.save(b, np.asfortranarray(a) if fortran else a)
    return b.getvalue()


for dt in ("f4", "f8", "f2", "i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8", "?"):
    out("corpus_npy", f"arr_{dt.replace('?', 'bool')}.npy", npy(np.arange(6).astype(dt).reshape(2, 3)))
out("corpus_npy", "scalar.npy", npy(np.float32(1.5)))
out("corpus_npy", "empty.npy", npy(np.zeros((0, 3), np.float32)))
out("corpus_npy", "four_d.npy", npy(np.ones((1, 2, 2, 2), np.float32)))
out("corpus_npy", "fortran.npy", npy(np.ones((2, 3), np.float32), fortran=True))
out("corpus_npy", "big_endian.npy", npy(np.arange(3).astype(">i4")))
out("corpus_npy", "complex.npy", npy(np.ones(2, np.complex64)))
out("corpus_npy", "truncated.npy", npy(np.arange(6, dtype=np.float32))[:-3])
out("corpus_npy", "trailing.npy", npy(np.arange(6, dtype=np.float32)) + b"\0\0\0\0")


def npy_raw(header, data=b"", version=(1, 0)):
    h = header.encode("latin1")
    pre = 10 if version[0] == 1 else 12
    h += b" " * ((-(pre + len(h) + 1)) % 64) + b"\n"
    ln = struct.pack("<H", len(h)) if version[0] == 1 else struct.pack("<I", len(h))
    return b"\x93NUMPY" + bytes(version) + ln + h + data


out("corpus_npy", "v2.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", b"\0" * 8, (2, 0)))
out("corpus_npy", "v3.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", b"\0" * 8, (3, 0)))
out("corpus_npy", "shape_no_comma.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2 4), }", b"\0" * 32))
out("corpus_npy", "shape_commas.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2,,,4), }", b"\0" * 32))
out("corpus_npy", "text_after_dict.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x", b"\0" * 8))
out("corpus_npy", "huge_shape.npy", npy_raw("{'descr': '<f4', 'fortran_order': False, 'shape': (100000, 100000, 100000), }"))
out("corpus_npy", "keys_reordered.npy", npy_raw("{'shape': (3,), 'fortran_order': False, 'descr': '|u1'}", b"\1\2\3"))

# ------------------------------------------------------------------ TensorProto (.pb)
NODE = "/usr/share/libonnx-testdata/data/node"
picked = ["test_relu", "test_cast_FLOAT_to_FLOAT16", "test_cast_FLOAT_to_BFLOAT16", "test_cast_FLOAT_to_DOUBLE",
          "test_gather_0", "test_equal_bcast", "test_mod_mixed_sign_int8", "test_top_k", "test_nonzero_example",
          "test_castlike_FLOAT_to_STRING", "test_reshape_reduced_dims", "test_cast_FLOAT_to_UINT8"]
for t in picked:
    for f in sorted(glob.glob(f"{NODE}/{t}/test_data_set_0/*.pb")):
        if os.path.getsize(f) <= 4096:
            shutil.copy(f, os.path.join(HERE, "corpus_onnx_pb", f"{t[5:]}_{os.path.basename(f)}"))


def varint(v):
    b = b""
    while True:
        c = v & 0x7F
        v >>= 7
        if v:
            b += bytes([c | 0x80])
        else:
            return b + bytes([c])


def field(num, wire, payload):
    return varint(num << 3 | wire) + payload


def ld(num, data):
    return field(num, 2, varint(len(data)) + data)


# TensorProto: 1 dims, 2 data_type, 4 float_data (packed), 7 int64_data, 8 name, 9 raw_data
out("corpus_onnx_pb", "hand_raw_f32.pb",
    field(1, 0, varint(2)) + field(1, 0, varint(2)) + field(2, 0, varint(1)) + ld(8, b"x") +
    ld(9, np.arange(4, dtype=np.float32).tobytes()))
out("corpus_onnx_pb", "hand_packed_float_data.pb",
    ld(1, varint(3)) + field(2, 0, varint(1)) + ld(4, np.ones(3, np.float32).tobytes()))
out("corpus_onnx_pb", "hand_int64_data.pb",
    field(1, 0, varint(2)) + field(2, 0, varint(7)) + ld(7, varint(5) + varint((1 << 64) - 1)))
out("corpus_onnx_pb", "hand_scalar.pb", field(2, 0, varint(1)) + ld(9, b"\0\0\x80\x3f"))
out("corpus_onnx_pb", "hand_huge_dims.pb",
    field(1, 0, varint(1 << 40)) + field(1, 0, varint(1 << 40)) + field(2, 0, varint(1)) + ld(9, b"\0" * 4))
out("corpus_onnx_pb", "hand_raw_short.pb", field(1, 0, varint(8)) + field(2, 0, varint(1)) + ld(9, b"\0" * 4))
out("corpus_onnx_pb", "hand_external.pb",
    field(1, 0, varint(1)) + field(2, 0, varint(1)) + ld(13, ld(1, b"location") + ld(2, b"w.bin")) + field(14, 0, varint(1)))


# ------------------------------------------------------------------ CIFAR-10
def cifar_rec(label, seed):
    px = ((np.arange(3072) * (seed * 7 + 3)) % 251).astype(np.uint8).tobytes()
    return bytes([label]) + px


out("corpus_cifar", "one.bin", cifar_rec(3, 1))
out("corpus_cifar", "three.bin", cifar_rec(0, 1) + cifar_rec(9, 2) + cifar_rec(5, 3))
out("corpus_cifar", "label_10.bin", cifar_rec(1, 1) + cifar_rec(10, 2))
out("corpus_cifar", "short.bin", cifar_rec(2, 1)[:3000])
out("corpus_cifar", "trailing.bin", cifar_rec(2, 1) + b"\0")
out("corpus_cifar", "empty.bin", b"")
