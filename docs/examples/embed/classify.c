/* classify MODEL.onnx IMAGES.npy: the most likely class of each image of a batch. */
#include <kiln.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s MODEL.onnx IMAGES.npy\n", argv[0]);
        return 2;
    }
    kiln_context *ctx = NULL;
    kiln_model *model = NULL;
    kiln_session *sess = NULL;
    kiln_tensor *x = NULL;
    const kiln_tensor *y = NULL;
    int rc = 1;
    if (kiln_context_create(&ctx) != KILN_OK) return 1;
    if (kiln_model_load_onnx(ctx, argv[1], &model) != KILN_OK ||  /* parse and check the graph */
        kiln_session_create(model, NULL, &sess) != KILN_OK ||     /* CPU, fp32: NULL options */
        kiln_tensor_load_npy(ctx, argv[2], &x) != KILN_OK ||
        kiln_session_run(sess, 1, &x, 1, &y) != KILN_OK) {        /* y is owned by sess */
        fprintf(stderr, "kiln: %s\n", kiln_context_message(ctx)); /* names file, node, shapes */
        goto done;
    }
    const int64_t batch = kiln_tensor_dim(y, 0), classes = kiln_tensor_dim(y, 1);
    const float *p = kiln_tensor_data(y);
    for (int64_t i = 0; i < batch; i++) {
        int64_t best = 0;
        for (int64_t c = 1; c < classes; c++)
            if (p[i * classes + c] > p[i * classes + best]) best = c;
        printf("image %lld: class %lld (p = %.3f)\n", (long long)i, (long long)best, p[i * classes + best]);
    }
    rc = 0;
done:
    kiln_tensor_free(x);
    kiln_session_free(sess);
    kiln_model_free(model);
    kiln_context_free(ctx);
    return rc;
}
