/*
 * test_cuda_context.c — the CUDA context on any machine (ctest label cpu): without a GPU
 * (or driver), creating a kiln_cuda must fail cleanly with KILN_ERR_DEVICE and a message,
 * never crash; with one it must succeed and report sane properties. Also the host-only
 * parts of the backend: the kernel table and kiln_cuda_supports, which the planner calls
 * on machines without a GPU too. Last line: "N passed, N failed".
 */
#include "cuda/cuda_backend.h"

#include <stdio.h>
#include <string.h>

static int passed, failed;

static void check(bool ok, const char *what, const char *detail) {
    if (ok) {
        printf("ok   %s\n", what);
        passed++;
    } else {
        printf("FAIL %s: %s\n", what, detail);
        failed++;
    }
}

static void context_checks(kiln_context *ctx) {
    int n = -1;
    kiln_status st = kiln_cuda_device_count(ctx, &n);
    check(st == KILN_OK && n >= 0, "device count", kiln_context_message(ctx));
    printf("     %d CUDA device(s)\n", n);

    kiln_cuda *cu = NULL;
    kiln_clear_error(ctx);
    st = kiln_cuda_create(ctx, NULL, &cu);
    if (n == 0) {
        check(st == KILN_ERR_DEVICE && cu == NULL, "no device: create returns KILN_ERR_DEVICE",
              kiln_status_name(st));
        check(strstr(kiln_context_message(ctx), "no CUDA device") != NULL,
              "no device: the message says so", kiln_context_message(ctx));
        printf("     message: %s\n", kiln_context_message(ctx));
    } else {
        const kiln_cuda_props *p = cu ? kiln_cuda_get_props(cu) : NULL;
        check(st == KILN_OK && p && p->sm_count > 0 && p->cc_major >= 8 && p->name[0],
              "device 0 opens with sane properties", kiln_context_message(ctx));
        if (p)
            printf("     %s: %d SMs, compute capability %d.%d, %zu MiB\n", p->name, p->sm_count,
                   p->cc_major, p->cc_minor, p->total_memory >> 20);
        check(cu && kiln_cuda_stream(cu) != NULL && kiln_cuda_sync(cu) == KILN_OK,
              "stream exists and syncs", kiln_context_message(ctx));
        kiln_cuda_free(cu);
    }

    /* a device that does not exist, on any machine */
    kiln_cuda_options o = {.device = n + 3};
    cu = NULL;
    st = kiln_cuda_create(ctx, &o, &cu);
    check(st == KILN_ERR_DEVICE && cu == NULL && kiln_context_message(ctx)[0],
          "a missing device ordinal is KILN_ERR_DEVICE", kiln_context_message(ctx));
    kiln_cuda_free(NULL);
    check(true, "kiln_cuda_free(NULL) does nothing", "");
}

static void table_checks(kiln_context *ctx) {
    check(kiln_cuda_kernel_count() > 40, "the kernel table is filled", "");
    check(kiln_cuda_kernel_name(-1) == NULL && kiln_cuda_kernel_name(kiln_cuda_kernel_count()) == NULL,
          "table names out of range are NULL", "");
    check(kiln_cuda_kernel_for(-1) == NULL, "no kernel for op -1", "");
    const int relu = kiln_op_index("Relu");
    check(relu >= 0 && kiln_cuda_kernel_for(relu) != NULL, "Relu has a CUDA kernel", "");

    /* supports: shapes and dtypes only, no device needed */
    kiln_node node;
    memset(&node, 0, sizeof node);
    node.op_type = (char *)"Relu";
    node.name = (char *)"r";
    node.domain = (char *)"";
    node.op = relu;
    node.opset = 14;
    node.n_in = node.n_out = 1;
    kiln_tensor x = {.dtype = KILN_F16, .ndim = 2, .dims = {2, 3}}, y = x;
    kiln_tensor *in[1] = {&x}, *out[1] = {&y};
    kiln_op_ctx c = {.kctx = ctx, .node = &node, .n_in = 1, .in = in, .n_out = 1, .out = out};
    check(kiln_cuda_supports(&c) == KILN_OK, "Relu f16 is supported", kiln_context_message(ctx));
    x.dtype = y.dtype = KILN_F64;
    kiln_status st = kiln_cuda_supports(&c);
    check(st == KILN_ERR_UNSUPPORTED && strstr(kiln_context_message(ctx), "not supported on cuda") &&
              strstr(kiln_context_message(ctx), "f64"),
          "Relu f64 is rejected with a reason", kiln_context_message(ctx));
    printf("     message: %s\n", kiln_context_message(ctx));
}

int main(void) {
    kiln_context *ctx = NULL;
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    context_checks(ctx);
    table_checks(ctx);
    kiln_context_free(ctx);
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
