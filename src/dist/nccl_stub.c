/* nccl_stub.c — the NCCL entries of dist.h in builds without NCCL (src/cuda/nccl.c has
 * the real ones): data parallelism on CUDA then fails with KILN_ERR_UNSUPPORTED. */
#include "dist.h"

#ifndef KILN_HAVE_NCCL
bool kiln_nccl_available(void) { return false; }

kiln_status kiln_nccl_get_id(kiln_dist *d, unsigned char id[KILN_NCCL_ID_BYTES]) {
    (void)id;
    return kiln_fail(d->ctx, KILN_ERR_UNSUPPORTED, "data parallelism on CUDA needs NCCL: this build has none");
}

kiln_status kiln_nccl_init(kiln_dist *d, const unsigned char id[KILN_NCCL_ID_BYTES]) {
    return kiln_nccl_get_id(d, (unsigned char *)id);
}

kiln_status kiln_nccl_wait_stream(kiln_dist *d, void *stream, const char *what) {
    (void)d, (void)stream, (void)what;
    return KILN_OK; /* no NCCL work can be pending */
}

static void none_free(kiln_dist *d) { (void)d; }
const kiln_dist_impl kiln_nccl_impl = {"nccl", NULL, NULL, NULL, NULL, NULL, none_free};
#endif
