/* channel_gather.h — kiln.ChannelGather's limits, shared by the op (src/ops/channel_gather.c),
 * the pass that writes it (src/passes/channel_gather.c) and the CUDA kernel (movement.cu),
 * which takes the whole map as a kernel parameter. */
#ifndef KILN_OPS_CHANNEL_GATHER_H
#define KILN_OPS_CHANNEL_GATHER_H

#define KILN_CHANNEL_GATHER_SHIFT 65536   /* map entry: input * SHIFT + channel, -1 zero */
#define KILN_CHANNEL_GATHER_MAX_IO 8      /* inputs, and outputs */
#define KILN_CHANNEL_GATHER_MAX_MAP 3072  /* output channels in all */

#endif
