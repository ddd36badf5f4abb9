/*
 * onnx_test.h — `kiln onnx-test`, the command line of the ONNX conformance runner (the
 * runner itself is in the library: kiln_onnx_test_case / kiln_onnx_test_list,
 * include/kiln_tools.h).
 */
#ifndef KILN_CLI_ONNX_TEST_H
#define KILN_CLI_ONNX_TEST_H

#include <stdio.h>

/* `kiln onnx-test DIR... [options]` (options before or after the folders, --name=value
 * too, -- ending them). argv[0] is the command's name and is skipped. Prints one PASS /
 * FAIL / SKIP line per case to out and a summary line. Returns 0 when no case failed (or,
 * with --min-pass-rate R, when passed / (passed + failed) >= R), 1 otherwise, 2 on a usage
 * error (named on stderr, with the usage). Options:
 *   --ops-in-registry     run only models whose nodes are all in kiln's registry; others
 *                         are SKIP "op X not in registry"
 *   --min-pass-rate R     exit status reflects the pass rate instead of any failure
 *   --list-failures FILE  write the names of failed cases to FILE, one a line
 *   --quiet               no PASS and SKIP lines: the failures and the summary */
int kiln_onnx_test_main(int argc, char **argv, FILE *out);

#endif /* KILN_CLI_ONNX_TEST_H */
