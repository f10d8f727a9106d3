/* Element sizes of the data types (dtype.c). */
#ifndef LLDD_MOCK_DTYPE_H
#define LLDD_MOCK_DTYPE_H

#include <stdint.h>

uint32_t dtype_bits(int32_t data_type);
int dtype_is_sub_byte(int32_t data_type);

#endif /* LLDD_MOCK_DTYPE_H */
