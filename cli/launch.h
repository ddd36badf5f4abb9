/* launch.h — `kiln launch` and kiln train's data-parallel setup (cli/launch.c). */
#ifndef KILN_CLI_LAUNCH_H
#define KILN_CLI_LAUNCH_H

#include "kiln.h"
#include "kiln_tools.h"

/* kiln launch's main (argv[0] "launch"): the exit status; -1 asks for the usage. */
int kiln_cli_launch(int argc, char **argv);

/* When a launcher started this process as a rank (torchrun's or mpirun's variables), join:
 * *out the communicator, o (its dist, bucket_bytes, drop_last, and on CUDA the device of
 * LOCAL_RANK) and lo (the shard) set. Not launched so: *out NULL, nothing changed. Returns
 * 0, or 1 with the message printed. */
int kiln_cli_dist_setup(kiln_context *ctx, kiln_train_options *o, kiln_loader_options *lo, double timeout_s,
                        double bucket_mb, int drop_last, kiln_dist **out);

#endif
