/*
 * onnx_test.h — the importer entry the ONNX conformance runner needs beyond the public
 * API (the runner itself: kiln_onnx_test_case / kiln_onnx_test_list in kiln_tools.h; its
 * command line, `kiln onnx-test`, in cli/onnx_test.c).
 */
#ifndef KILN_ONNX_TEST_H
#define KILN_ONNX_TEST_H

#include "core/internal.h"

/* Load an ONNX model for listing its ops: local functions are inlined as in a full load,
 * but nodes of other domains are kept (node->domain says which), what kiln cannot
 * represent is dropped instead of failing the load (subgraph attributes, STRING tensors,
 * non-tensor graph inputs), and the graph is neither checked nor finalized. Only for
 * looking at m->nodes; a session cannot run it. */
kiln_status kiln_onnx_load_unfinalized(kiln_context *ctx, const char *path, kiln_model **out);

#endif /* KILN_ONNX_TEST_H */
