/*
 * fuzz_onnx.c — libFuzzer target for the ONNX importer: any bytes through
 * kiln_model_load_onnx_buffer and, when a model loads, a CPU session created and freed.
 *
 * Besides crashes, leaks and timeouts (found by the sanitizers and libFuzzer), it traps
 * on a broken contract: a failure must leave a message and never be KILN_ERR_INTERNAL.
 * External data resolves against a folder made at start-up holding weights.bin, so the
 * external-data path is fuzzed too (fuzz/corpus has models pointing into it).
 *
 * Build and run (see fuzz/CMakeLists.txt):
 *   CC=clang cmake -S . -B build-fuzz -DKILN_FUZZ=ON -DKILN_CUDA=OFF -DKILN_SANITIZE=ON
 *   cmake --build build-fuzz --target fuzz_onnx -j2
 *   build-fuzz/fuzz/fuzz_onnx -dict=fuzz/onnx.dict -jobs=1 -max_total_time=600 NEW fuzz/corpus
 */
#include "kiln.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static kiln_context *ctx;
static char base_dir[64] = "/tmp/kiln-fuzz-XXXXXX";

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (kiln_context_create(&ctx) != KILN_OK || !mkdtemp(base_dir)) abort();
    /* 4 KiB of weights: bytes 0..255 repeated, every offset a different value */
    char path[128];
    snprintf(path, sizeof path, "%s/weights.bin", base_dir);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    for (int i = 0; i < 4096; i++) fputc(i & 0xff, f);
    fclose(f);
    kiln_context_set_threads(ctx, 1);
    return 0;
}

static void check(kiln_status st) {
    if (st == KILN_OK) return;
    if (st == KILN_ERR_INTERNAL || !kiln_context_message(ctx)[0]) {
        fprintf(stderr, "broken contract: status %s, message '%s'\n", kiln_status_name(st),
                kiln_context_message(ctx));
        __builtin_trap();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    kiln_model *m = NULL;
    kiln_status st = kiln_model_load_onnx_buffer(ctx, data, size, base_dir, &m);
    check(st);
    if (st == KILN_OK) {
        kiln_session *s = NULL;
        st = kiln_session_create(m, NULL, &s);
        check(st);
        kiln_session_free(s);
        kiln_model_free(m);
    }
    return 0;
}
