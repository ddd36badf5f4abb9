/*
 * onnx_save.h — the ONNX writer's entry beyond the public API (kiln_model_save_onnx and
 * kiln_model_save_onnx_buffer in kiln.h): the size above which a save to a file moves
 * initializers into external data, for tests that cannot write 2 GiB.
 */
#ifndef KILN_ONNX_SAVE_H
#define KILN_ONNX_SAVE_H

#include "core/internal.h"

/* What kiln_model_save_onnx does, except that external data is written when the ModelProto
 * with every initializer inline would exceed max_inline bytes (kiln_model_save_onnx: 2 GiB
 * - 1, protobuf's limit). Then each initializer of at least min_external bytes (1024 for
 * kiln_model_save_onnx, ONNX's own default; 0: all of them, which onnxruntime cannot load
 * when a shape input such as Reshape's is among them) goes into PATH.data (the file name of
 * path plus ".data", beside it), at offsets aligned to 4096 bytes. */
kiln_status kiln_onnx_save_with(const kiln_model *m, const char *path, size_t max_inline, size_t min_external);

#endif /* KILN_ONNX_SAVE_H */
