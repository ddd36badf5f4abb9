/*
 * onnx_test.h — running ONNX's backend test cases (a folder with model.onnx and
 * test_data_set_N/{input,output}_K.pb) through kiln: the `kiln onnx-test` command.
 * Also the importer entry the runner needs beyond the public API.
 */
#ifndef KILN_ONNX_TEST_H
#define KILN_ONNX_TEST_H

#include <stdio.h>

#include "core/internal.h"

/* `kiln onnx-test [options] DIR...`. argv[0] is the command's name and is skipped.
 * Prints one PASS / FAIL / SKIP line per case to out and a summary line. Returns 0 when
 * no case failed (or, with --min-pass-rate R, when passed / (passed + failed) >= R),
 * 1 otherwise, 2 on a usage error. Options:
 *   --ops-in-registry     run only models whose nodes are all in kiln's registry; others
 *                         are SKIP "op X not in registry"
 *   --min-pass-rate R     exit status reflects the pass rate instead of any failure
 *   --list-failures FILE  write the names of failed cases to FILE, one a line */
int kiln_onnx_test_main(int argc, char **argv, FILE *out);

/* Load an ONNX model for listing its ops: local functions are inlined as in a full load,
 * but nodes of other domains are kept (node->domain says which), what kiln cannot
 * represent is dropped instead of failing the load (subgraph attributes, STRING tensors,
 * non-tensor graph inputs), and the graph is neither checked nor finalized. Only for
 * looking at m->nodes; a session cannot run it. */
kiln_status kiln_onnx_load_unfinalized(kiln_context *ctx, const char *path, kiln_model **out);

#endif /* KILN_ONNX_TEST_H */
