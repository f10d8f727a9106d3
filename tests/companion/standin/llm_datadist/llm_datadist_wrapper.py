"""Stand-in for the vendor's native module ``llm_datadist.llm_datadist_wrapper``: status
constants, and a recorder of the calls the Python layer makes into it.

Tests set ``STATUS[name] = code`` to make the next calls of ``name`` answer ``code``.
"""
kSuccess = 0
kFailed = 0xFFFFFFFF
kLLMWaitProcessTimeOut = 0x5010B001
kLLMKVCacheNotExist = 0x5010B002
kLLMRepeatRequest = 0x5010B003
kLLMRequestAlreadyCompleted = 0x5010B004
kParamInvalid = 0x5010B005
kLLMEngineFinalized = 0x5010B006
kLLMNotYetLink = 0x5010B007
kAlreadyLink = 0x5010B008
kLinKFailed = 0x5010B009
kUnlinkFailed = 0x5010B00A
kNotifyPromptUnlinkFailed = 0x5010B00B
kLLMClusterNumExceedLimit = 0x5010B00C
kProcessingLink = 0x5010B00D
kDeviceOutOfMemory = 0x5010B00E
kPrefixAlreadyExist = 0x5010B00F
kPrefixNotExist = 0x5010B010
kLLMSeqLenOverLimit = 0x5010B011
kLLMNoFreeBlock = 0x5010B012
kLLMBlocksOutOfMemory = 0x5010B013
kLLMExistLink = 0x5010B018
kLLMFeatureNotEnabled = 0x5010B019
kLLMTimeout = 0x5010B01A
kLLMLinkBusy = 0x5010B01B
kLLMOutOfMemory = 0x5010B01C
kLLMDeviceMemError = 0x0007BCAD
kLLMSuspectRemoteError = 0x0007BCB1

#: every native call: (name, args)
CALLS = []
#: name -> the status the next calls of that name return
STATUS = {}


def _call(name, *args):
    CALLS.append((name, args))
    return STATUS.get(name, kSuccess)


def calc_tensor_size(shape, data_type):
    _call("calc_tensor_size", shape, data_type)
    size = 2
    for dim in shape:
        size *= dim
    return size


def initialize_v2(cluster_id, options):
    return _call("initialize_v2", cluster_id, options)


def finalize():
    return _call("finalize")


def native(name, *args):
    """Any other native call of the stand-in's Python layer."""
    return _call(name, *args)
