"""Stand-in ``llm_datadist.status``: codes read from the native module at import, the
vendor's exception (``status_code`` keyword-only) and its status check."""
from enum import IntEnum

from llm_datadist import llm_datadist_wrapper as _w


class LLMStatusCode(IntEnum):
    LLM_SUCCESS = _w.kSuccess
    LLM_FAILED = _w.kFailed
    LLM_WAIT_PROCESS_TIMEOUT = _w.kLLMWaitProcessTimeOut
    LLM_KV_CACHE_NOT_EXIST = _w.kLLMKVCacheNotExist
    LLM_REPEAT_REQUEST = _w.kLLMRepeatRequest
    LLM_REQUEST_ALREADY_COMPLETED = _w.kLLMRequestAlreadyCompleted
    LLM_PARAM_INVALID = _w.kParamInvalid
    LLM_ENGINE_FINALIZED = _w.kLLMEngineFinalized
    LLM_NOT_YET_LINK = _w.kLLMNotYetLink
    LLM_ALREADY_LINK = _w.kAlreadyLink
    LLM_LINK_FAILED = _w.kLinKFailed
    LLM_UNLINK_FAILED = _w.kUnlinkFailed
    LLM_NOTIFY_PROMPT_UNLINK_FAILED = _w.kNotifyPromptUnlinkFailed
    LLM_CLUSTER_NUM_EXCEED_LIMIT = _w.kLLMClusterNumExceedLimit
    LLM_PROCESSING_LINK = _w.kProcessingLink
    LLM_DEVICE_OUT_OF_MEMORY = _w.kDeviceOutOfMemory
    LLM_PREFIX_ALREADY_EXIST = _w.kPrefixAlreadyExist
    LLM_PREFIX_NOT_EXIST = _w.kPrefixNotExist
    LLM_SEQ_LENOVERLIMIT = _w.kLLMSeqLenOverLimit
    LLM_NO_FREE_BLOCK = _w.kLLMNoFreeBlock
    LLM_BLOCKS_OUT_OF_MEMORY = _w.kLLMBlocksOutOfMemory
    LLM_EXIST_LINK = _w.kLLMExistLink
    LLM_FEATURE_NOT_ENABLED = _w.kLLMFeatureNotEnabled
    LLM_TIMEOUT = _w.kLLMTimeout
    LLM_LINK_BUSY = _w.kLLMLinkBusy
    LLM_OUT_OF_MEMORY = _w.kLLMOutOfMemory
    LLM_DEVICE_MEM_ERROR = _w.kLLMDeviceMemError
    LLM_SUSPECT_REMOTE_ERROR = _w.kLLMSuspectRemoteError
    LLM_UNKNOWN_ERROR = -1


class LLMException(RuntimeError):
    def __init__(self, *args, status_code=LLMStatusCode.LLM_SUCCESS):
        super().__init__(*args)
        self._status_code = status_code

    @property
    def status_code(self):
        return self._status_code


def to_status(raw):
    try:
        return LLMStatusCode(raw)
    except ValueError:
        return LLMStatusCode.LLM_FAILED


def check_status(raw, tag):
    if raw != _w.kSuccess:
        code = to_status(raw)
        raise LLMException(f"{tag} failed, error code is {code}", status_code=code)
