/* dtype.c — element types: sizes, names, classes, and f16/bf16 conversions. */
#include "internal.h"

#include <string.h>

size_t kiln_dtype_size(kiln_dtype t) {
    switch (t) {
    case KILN_F32: case KILN_I32: case KILN_U32: return 4;
    case KILN_U8: case KILN_I8: case KILN_BOOL: return 1;
    case KILN_U16: case KILN_I16: case KILN_F16: case KILN_BF16: return 2;
    case KILN_I64: case KILN_U64: case KILN_F64: return 8;
    default: return 0;
    }
}

const char *kiln_dtype_name(kiln_dtype t) {
    switch (t) {
    case KILN_F32: return "f32";
    case KILN_U8: return "u8";
    case KILN_I8: return "i8";
    case KILN_U16: return "u16";
    case KILN_I16: return "i16";
    case KILN_I32: return "i32";
    case KILN_I64: return "i64";
    case KILN_BOOL: return "bool";
    case KILN_F16: return "f16";
    case KILN_F64: return "f64";
    case KILN_U32: return "u32";
    case KILN_U64: return "u64";
    case KILN_BF16: return "bf16";
    default: return "undefined";
    }
}

bool kiln_dtype_valid(kiln_dtype t) { return kiln_dtype_size(t) != 0; }

bool kiln_dtype_is_float(kiln_dtype t) {
    return t == KILN_F32 || t == KILN_F64 || t == KILN_F16 || t == KILN_BF16;
}

bool kiln_dtype_is_int(kiln_dtype t) {
    switch (t) {
    case KILN_U8: case KILN_I8: case KILN_U16: case KILN_I16: case KILN_I32: case KILN_I64:
    case KILN_U32: case KILN_U64: return true;
    default: return false;
    }
}

bool kiln_dtype_is_signed(kiln_dtype t) {
    return kiln_dtype_is_float(t) || t == KILN_I8 || t == KILN_I16 || t == KILN_I32 || t == KILN_I64;
}

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float u2f(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

float kiln_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    if (exp == 0x1f) return u2f(sign | 0x7f800000u | (man << 13)); /* inf / nan */
    if (exp == 0) {
        if (man == 0) return u2f(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return u2f(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t kiln_f32_to_f16(float f) {
    uint32_t u = f2u(f), sign = (u >> 16) & 0x8000;
    uint32_t abs = u & 0x7fffffffu;
    if (abs >= 0x7f800000u) /* inf or nan (keep a quiet nan) */
        return (uint16_t)(sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0));
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00); /* rounds to >= 65520: inf */
    if (abs < 0x38800000u) {
        /* result is subnormal or zero: round abs * 2^24 to an integer, ties to even */
        float v = u2f(abs) * 16777216.0f;
        uint32_t m = (uint32_t)v;
        float rem = v - (float)m;
        if (rem > 0.5f || (rem == 0.5f && (m & 1))) m++;
        return (uint16_t)(sign | m);
    }
    /* normal: rebias exponent, round mantissa 23 -> 10 bits, ties to even */
    uint32_t r = abs - 0x38000000u; /* exponent -112 */
    uint32_t lsb = (r >> 13) & 1;
    r += 0xfff + lsb;
    return (uint16_t)(sign | (r >> 13));
}

float kiln_bf16_to_f32(uint16_t h) { return u2f((uint32_t)h << 16); }

uint16_t kiln_f32_to_bf16(float f) {
    uint32_t u = f2u(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet nan */
    uint32_t lsb = (u >> 16) & 1;
    u += 0x7fff + lsb;
    return (uint16_t)(u >> 16);
}
