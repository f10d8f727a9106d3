/* ge::DataType element sizes as the LLM-DataDist core computes them (docs/reference/cpp-api.md
 * §2.4), in bits so that the sub-byte types fit the same table. 0 marks a value
 * the core rejects (value 5, DT_UNDEFINED, DT_HIFLOAT4_SCALE, DT_MAX and beyond). */
#include <stddef.h>

#include "base/dtype.h"

static const uint8_t k_bits[] = {
    /*  0 DT_FLOAT          */ 32,
    /*  1 DT_FLOAT16        */ 16,
    /*  2 DT_INT8           */ 8,
    /*  3 DT_INT32          */ 32,
    /*  4 DT_UINT8          */ 8,
    /*  5 (reserved)        */ 0,
    /*  6 DT_INT16          */ 16,
    /*  7 DT_UINT16         */ 16,
    /*  8 DT_UINT32         */ 32,
    /*  9 DT_INT64          */ 64,
    /* 10 DT_UINT64         */ 64,
    /* 11 DT_DOUBLE         */ 64,
    /* 12 DT_BOOL           */ 8,
    /* 13 DT_STRING         */ 128,
    /* 14 DT_DUAL_SUB_INT8  */ 8,
    /* 15 DT_DUAL_SUB_UINT8 */ 8,
    /* 16 DT_COMPLEX64      */ 64,
    /* 17 DT_COMPLEX128     */ 128,
    /* 18 DT_QINT8          */ 8,
    /* 19 DT_QINT16         */ 16,
    /* 20 DT_QINT32         */ 32,
    /* 21 DT_QUINT8         */ 8,
    /* 22 DT_QUINT16        */ 16,
    /* 23 DT_RESOURCE       */ 64,
    /* 24 DT_STRING_REF     */ 128,
    /* 25 DT_DUAL           */ 40,
    /* 26 DT_VARIANT        */ 64,
    /* 27 DT_BF16           */ 16,
    /* 28 DT_UNDEFINED      */ 0,
    /* 29 DT_INT4           */ 4,
    /* 30 DT_UINT1          */ 1,
    /* 31 DT_INT2           */ 2,
    /* 32 DT_UINT2          */ 2,
    /* 33 DT_COMPLEX32      */ 32,
    /* 34 DT_HIFLOAT8       */ 8,
    /* 35 DT_FLOAT8_E5M2    */ 8,
    /* 36 DT_FLOAT8_E4M3FN  */ 8,
    /* 37 DT_FLOAT8_E8M0    */ 8,
    /* 38 DT_FLOAT6_E3M2    */ 6,
    /* 39 DT_FLOAT6_E2M3    */ 6,
    /* 40 DT_FLOAT4_E2M1    */ 4,
    /* 41 DT_FLOAT4_E1M2    */ 4,
    /* 42 DT_HIFLOAT4       */ 4,
    /* 43 DT_HIFLOAT4_SCALE */ 0,
};

uint32_t dtype_bits(int32_t data_type)
{
    if (data_type < 0 || (size_t)data_type >= sizeof k_bits / sizeof k_bits[0])
        return 0;
    return k_bits[data_type];
}

int dtype_is_sub_byte(int32_t data_type)
{
    uint32_t bits = dtype_bits(data_type);
    return bits != 0 && bits % 8 != 0;
}
