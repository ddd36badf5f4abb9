/*
 * npy.h — the .npy parser on a buffer (internal; the public loader is kiln_tensor_load_npy).
 *
 * A .npy file (https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html):
 * the magic "\x93NUMPY", the version (1.0, 2.0 or 3.0), the header length (2 bytes
 * little-endian in 1.0, 4 bytes in 2.0 and 3.0), then the header: a Python dict literal
 * with exactly the keys 'descr', 'fortran_order' and 'shape' (any order, each once, single
 * or double quotes, an optional trailing comma, spaces between tokens), padded with spaces
 * and ended by '\n' — and nothing else. 'shape' is a tuple of non-negative decimal ints:
 * (), (5,), (2, 3) or (2, 3,); (2) is an int, not a tuple, and is refused as NumPy refuses
 * it. Then exactly the array's bytes: fewer (truncated) or more (trailing data, e.g. a
 * header that claims fewer rows than the file holds) is an error, checked before anything
 * the header declares is allocated.
 *
 * kiln is stricter than NumPy's ast.literal_eval where no .npy writer goes: no comments,
 * tabs or newlines inside the header, no hex or '_' in ints, no duplicate keys, and the
 * data must end where the array ends. Python 2's "2L" ints are read in 1.0 and 2.0 files
 * (NumPy reads them there too). Errors: KILN_ERR_PARSE naming the file and the problem;
 * KILN_ERR_UNSUPPORTED for a valid file kiln cannot hold (Fortran order, big-endian or
 * structured dtypes, more than KILN_MAX_DIMS dims).
 */
#ifndef KILN_NPY_H
#define KILN_NPY_H

#include "../core/internal.h"

/* Parse a whole .npy file held in buf[0, len) into a new tensor (*out, owned by the
 * caller). name is used in messages only (e.g. the path the bytes came from). */
kiln_status kiln_npy_parse_buffer(kiln_context *ctx, const void *buf, size_t len, const char *name_for_messages,
                                  kiln_tensor **out);

#endif /* KILN_NPY_H */
