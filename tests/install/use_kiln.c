/* A C program outside kiln's tree, built against the installed kiln (tests/install/run.sh):
 * runs a model on an input and checks the output against the expected one.
 * use_kiln_c MODEL.onnx X.npy EXPECTED.npy */
#include <kiln.h>
#include <kiln_models.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: %s MODEL.onnx X.npy EXPECTED.npy\n", argv[0]);
        return 2;
    }
    if (strcmp(kiln_version(), KILN_VERSION) != 0) {
        fprintf(stderr, "library %s, header %s\n", kiln_version(), KILN_VERSION);
        return 1;
    }
    kiln_context *ctx = NULL;
    kiln_model *model = NULL;
    kiln_session *sess = NULL;
    kiln_tensor *x = NULL, *want = NULL;
    const kiln_tensor *y = NULL;
    int rc = 1;
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    if (kiln_model_load_onnx(ctx, argv[1], &model) != KILN_OK ||
        kiln_session_create(model, NULL, &sess) != KILN_OK ||
        kiln_tensor_load_npy(ctx, argv[2], &x) != KILN_OK ||
        kiln_tensor_load_npy(ctx, argv[3], &want) != KILN_OK ||
        kiln_session_run(sess, 1, &x, 1, &y) != KILN_OK) {
        fprintf(stderr, "kiln: %s\n", kiln_context_message(ctx));
        goto done;
    }
    if (kiln_tensor_dtype(y) != KILN_F32 || kiln_tensor_dtype(want) != KILN_F32 ||
        kiln_tensor_numel(y) != kiln_tensor_numel(want) || kiln_tensor_numel(y) == 0) {
        fprintf(stderr, "output: %s with %lld elements, expected f32 with %lld\n",
                kiln_dtype_name(kiln_tensor_dtype(y)), (long long)kiln_tensor_numel(y),
                (long long)kiln_tensor_numel(want));
        goto done;
    }
    const float *got = kiln_tensor_data(y), *exp = kiln_tensor_data(want);
    for (int64_t i = 0; i < kiln_tensor_numel(y); i++) {
        if (!(fabsf(got[i] - exp[i]) <= 1e-6f + 1e-4f * fabsf(exp[i]))) {
            fprintf(stderr, "output[%lld] = %g, expected %g\n", (long long)i, got[i], exp[i]);
            goto done;
        }
    }
    /* kiln_models.h links too: a model built in C. */
    kiln_model *mnist = NULL;
    if (kiln_model_mnist_net(ctx, 1, 1, 0, &mnist) != KILN_OK) {
        fprintf(stderr, "kiln: %s\n", kiln_context_message(ctx));
        goto done;
    }
    kiln_model_free(mnist);
    printf("kiln %s (C): %lld outputs match %s\n", kiln_version(), (long long)kiln_tensor_numel(y),
           argv[3]);
    rc = 0;
done:
    kiln_tensor_free(x);
    kiln_tensor_free(want);
    kiln_session_free(sess);
    kiln_model_free(model);
    kiln_context_free(ctx);
    return rc;
}
