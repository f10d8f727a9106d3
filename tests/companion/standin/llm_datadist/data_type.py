from enum import Enum

from llm_datadist import metadef_wrapper as _m


class DataType(Enum):
    DT_FLOAT = int(_m.DT_FLOAT)
    DT_FLOAT16 = int(_m.DT_FLOAT16)
    DT_BF16 = int(_m.DT_BF16)
    DT_INT8 = int(_m.DT_INT8)
    DT_INT32 = int(_m.DT_INT32)
    DT_UINT8 = int(_m.DT_UINT8)
