/* test_api.c — public API contracts of issue 11: kiln_version() agrees with kiln.h, a
 * non-scalar loss is refused by kiln_trainer_create with a message naming the value and its
 * shape, and (for the `kiln train --init` check in tests/CMakeLists.txt) a safetensors file
 * whose tensor names match no weight of mnist-net is written to argv[1]. */
#include "kiln.h"
#include "kiln_models.h"

#include <stdio.h>
#include <string.h>

static int fails;
#include "check.h"

int main(int argc, char **argv) {
    CHECK(!strcmp(kiln_version(), KILN_VERSION), "kiln_version() '%s', kiln.h's KILN_VERSION '%s'", kiln_version(),
          KILN_VERSION);

    kiln_context *ctx = NULL;
    kiln_model *m = NULL;
    kiln_trainer *t = NULL;
    CHECK(!kiln_context_create(&ctx) && !kiln_model_mnist_net(ctx, -1, 1, 0, &m), "setup");
    if (m) {
        /* logprobs: (batch, 10), not a loss */
        kiln_status st = kiln_trainer_create(m, "logprobs", NULL, &t);
        const char *msg = kiln_context_message(ctx);
        CHECK(st == KILN_ERR_SHAPE && !t && strstr(msg, "'logprobs'") && strstr(msg, "f32[") && strstr(msg, ",10]"),
              "a (batch,10) loss: %s: %s", kiln_status_name(st), msg);
        kiln_trainer_free(t);
        t = NULL;
        /* the real loss is accepted */
        st = kiln_trainer_create(m, "loss", NULL, &t);
        CHECK(st == KILN_OK && t, "the scalar loss: %s: %s", kiln_status_name(st), kiln_context_message(ctx));
        kiln_trainer_free(t);
    }
    kiln_model_free(m);
    kiln_context_free(ctx);

    if (argc > 1) { /* one f32 tensor named "not_a_weight" */
        const char hdr[] = "{\"not_a_weight\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}";
        unsigned char len[8] = {0};
        size_t n = sizeof hdr - 1;
        for (int i = 0; i < 8; i++) len[i] = (unsigned char)(n >> (8 * i));
        const float one = 1;
        FILE *f = fopen(argv[1], "wb");
        CHECK(f && fwrite(len, 1, 8, f) == 8 && fwrite(hdr, 1, n, f) == n && fwrite(&one, 4, 1, f) == 1,
              "writing %s", argv[1]);
        if (f) fclose(f);
    }
    printf("%s: %d failure(s)\n", fails ? "FAIL" : "ok", fails);
    return fails ? 1 : 0;
}
