"""The call sequences of the vendor's own sample programs, in two processes.

Each test runs a Prompt and a Decoder as separate processes (the pytest plugin's
``topology``: cluster 1 is the Prompt, cluster 2 the Decoder), with the statements the
vendor's samples make (`examples/python/llm_datadist` of the vendor's repository:
``pull_blocks_sample.py``, ``transfer_cache_async_sample.py``), with NPU memory replaced
by numpy arrays and ``torch.distributed`` barriers by the order of the calls. The
functions above the tests run inside the engine processes, where ``import llm_datadist``
is this package. What the samples rely on is checked byte for byte; the samples
themselves are not copied (docs/user-guide.md says how to run them). Lint warnings are
errors in the processes: no lint may fire on these sequences.
"""
from __future__ import annotations

from typing import Any, List

import numpy as np
import pytest

import vendor_support as vs
from lint_support import STRICT_ENV
from llm_datadist_ffi.testing.topology import here

pytestmark = pytest.mark.mock_only(reason="the vendor-compatible API needs the mock's extension functions")

PROMPT, DECODER = 1, 2
#: the samples run with the device's behaviour
NOT_STRICT = {STRICT_ENV: ""}


# --- run in the engine processes -------------------------------------------------------

def register_blocks(num_tensors: int, block_shape: List[int], seeds: List[int], key_cluster: Any) -> None:
    """The sample's blocks cache: ``num_tensors`` FP16 tensors of ``block_shape`` (as
    uint8 arrays of twice the width) filled from ``seeds``, keyed by ``key_cluster``'s
    ``BlocksCacheKey(…, 0)`` unless it is None."""
    import llm_datadist as ld
    me = here()
    arrays = [vs.fill(seed, (block_shape[0], 2 * block_shape[1])) for seed in seeds]
    desc = ld.CacheDesc(num_tensors, block_shape, ld.DataType.DT_FLOAT16, ld.Placement.DEVICE)
    addresses = [a.ctypes.data for a in arrays]
    manager = me.engine.cache_manager
    if key_cluster is None:
        cache = manager.register_blocks_cache(desc, addresses)
    else:
        cache = manager.register_blocks_cache(desc, addresses, ld.BlocksCacheKey(key_cluster, 0))
    me.state.update(arrays=arrays, cache=cache)


def link_to(cluster_id: int) -> int:
    me = here()
    ret, _ = me.engine.link_clusters([me.cluster_info(cluster_id)], 5000)
    return int(ret)


def pull_blocks_of_the_sample() -> None:
    # pull_blocks(BlocksCacheKey(1, 0), cache, src_blocks=[0, 1], dst_blocks=[0, 1]) with
    # tensor_num_per_layer left at 2
    import llm_datadist as ld
    here().engine.cache_manager.pull_blocks(ld.BlocksCacheKey(PROMPT, 0), here().state["cache"],
                                            src_blocks=[0, 1], dst_blocks=[0, 1])


def transfer_cache_async_of_the_sample() -> List[int]:
    import llm_datadist as ld

    class Ready(ld.LayerSynchronizer):        # the sample's: every layer is ready at once
        def synchronize_layer(self, layer_index: int, timeout_in_millis: Any) -> bool:
            return True

    config = ld.TransferWithCacheKeyConfig(ld.BlocksCacheKey(DECODER, 0), range(0, 1), range(0, 1))
    task = here().engine.cache_manager.transfer_cache_async(here().state["cache"], Ready(), [config])
    results = task.synchronize()
    return [int(results), *(int(r) for r in task.get_results())]


def array_bytes(index: int) -> bytes:
    return bytes(here().state["arrays"][index].tobytes())


# --- the tests -------------------------------------------------------------------------

def test_pull_blocks_of_one_tensor_caches_with_the_default_tensor_num_per_layer(topology) -> None:
    topo = topology(prompts=1, decoders=1, options={"llm.EnableRemoteCacheAccessible": "0"}, env=NOT_STRICT)
    prompt, decoder = topo.prompts[0], topo.decoders[0]
    prompt.call(register_blocks, 1, [4, 256], [11], PROMPT)
    decoder.call(register_blocks, 1, [4, 256], [-1], None)
    assert decoder.call(link_to, PROMPT) == 0
    decoder.call(pull_blocks_of_the_sample)
    expected = vs.fill(11, (4, 512)).copy()
    expected[2:] = 0
    assert decoder.call(array_bytes, 0) == expected.tobytes()


def test_transfer_cache_async_to_a_blocks_key_without_block_indexes_moves_block_0(topology) -> None:
    # transfer_cache_async_sample.py: blocks caches on both sides, TransferWithCacheKeyConfig(
    # BlocksCacheKey(decoder, 0), range(0, 1), range(0, 1)) and no block indexes: the vendor's
    # layer-wise job copies "batch" 0, which in a blocks cache is block 0 of each tensor
    topo = topology(prompts=1, decoders=1, options={"llm.EnableRemoteCacheAccessible": "1"}, env=NOT_STRICT)
    prompt, decoder = topo.prompts[0], topo.decoders[0]
    decoder.call(register_blocks, 2, [3, 64], [-1, -1], DECODER)
    prompt.call(register_blocks, 2, [3, 64], [21, 22], PROMPT)
    assert prompt.call(link_to, DECODER) == 0
    assert prompt.call(transfer_cache_async_of_the_sample) == [0, 0]
    for index, seed in ((0, 21), (1, 22)):
        expected = np.zeros((3, 128), np.uint8)
        expected[0] = vs.fill(seed, (3, 128))[0]
        assert decoder.call(array_bytes, index) == expected.tobytes(), index
