"""The call sequences of the vendor's own sample programs, in two processes.

Each test runs a Prompt and a Decoder as separate processes (``vendor_peer.py``),
driven with the statements the vendor's samples make (`examples/python/llm_datadist`
of the vendor's repository: ``pull_blocks_sample.py``, ``transfer_cache_async_sample.py``),
with NPU memory replaced by numpy arrays and ``torch.distributed`` barriers by the
order of the statements. What the samples rely on is checked byte for byte; the
samples themselves are not copied (docs/user-guide.md says how to run them).
"""
from __future__ import annotations

from typing import Iterator, Tuple

import numpy as np
import pytest

import vendor_support as vs
from lint_support import STRICT_ENV

pytestmark = pytest.mark.mock_only(reason="the vendor-compatible API needs the mock's extension functions")

PROMPT, DECODER = 1, 2


@pytest.fixture
def pair() -> Iterator[Tuple[vs.Peer, vs.Peer, int]]:
    env = {STRICT_ENV: ""}        # the samples run with the device's behaviour
    with vs.Peer(env) as prompt, vs.Peer(env) as decoder:
        yield prompt, decoder, vs.free_port()


def start(peer: vs.Peer, role: str, cluster: int, options: str) -> None:
    peer.run("import warnings\nwarnings.simplefilter('error')\n"       # no lint may fire on these sequences
             f"dist = LLMDataDist(LLMRole.{role}, {cluster})\ndist.init({options})\ncm = dist.cache_manager")


def link(decoder: vs.Peer, port: int) -> None:
    decoder.run(f"info = support.cluster_info({PROMPT}, {port})\n"
                "ret, rets = dist.link_clusters([info], 5000)",
                value="[int(ret)] + [int(r) for r in rets]")


def test_pull_blocks_of_one_tensor_caches_with_the_default_tensor_num_per_layer(pair) -> None:
    # pull_blocks_sample.py: one tensor per cache, pull_blocks(BlocksCacheKey(1, 0), cache,
    # src_blocks=[0, 1], dst_blocks=[0, 1]) with tensor_num_per_layer left at 2
    prompt, decoder, port = pair
    start(prompt, "PROMPT", PROMPT, f"support.v2_options({port}, direct=False)")
    start(decoder, "DECODER", DECODER, "support.v2_options(direct=False)")
    desc = "CacheDesc(1, [4, 256], DataType.DT_FLOAT16, Placement.DEVICE)"
    prompt.run(f"src = fill(11, (4, 512))\ncache = cm.register_blocks_cache({desc}, [src.ctypes.data], "
               f"BlocksCacheKey({PROMPT}, 0))")
    decoder.run(f"dst = fill(-1, (4, 512))\ncache = cm.register_blocks_cache({desc}, [dst.ctypes.data])")
    assert decoder.run(value="int(dist.link_clusters([support.cluster_info(1, %d)], 5000)[0])" % port) == 0
    decoder.run(f"cm.pull_blocks(BlocksCacheKey({PROMPT}, 0), cache, src_blocks=[0, 1], dst_blocks=[0, 1])")
    expected = vs.fill(11, (4, 512)).copy()
    expected[2:] = 0
    assert decoder.bytes_of("dst") == expected.tobytes()


def test_transfer_cache_async_to_a_blocks_key_without_block_indexes_moves_block_0(pair) -> None:
    # transfer_cache_async_sample.py: blocks caches on both sides, TransferWithCacheKeyConfig(
    # BlocksCacheKey(decoder, 0), range(0, 1), range(0, 1)) and no block indexes: the vendor's
    # layer-wise job copies "batch" 0, which in a blocks cache is block 0 of each tensor
    prompt, decoder, port = pair
    start(decoder, "DECODER", DECODER, f"support.v2_options({port})")
    start(prompt, "PROMPT", PROMPT, "support.v2_options()")
    desc = "CacheDesc(2, [3, 64], DataType.DT_FLOAT16, Placement.DEVICE)"
    decoder.run("k, v = fill(-1, (3, 128)), fill(-1, (3, 128))\n"
                f"cache = cm.register_blocks_cache({desc}, [k.ctypes.data, v.ctypes.data], "
                f"BlocksCacheKey({DECODER}, 0))")
    prompt.run("k, v = fill(21, (3, 128)), fill(22, (3, 128))\n"
               f"cache = cm.register_blocks_cache({desc}, [k.ctypes.data, v.ctypes.data], "
               f"BlocksCacheKey({PROMPT}, 0))")
    assert prompt.run(value="int(dist.link_clusters([support.cluster_info(%d, %d)], 5000)[0])"
                      % (DECODER, port)) == 0
    prompt.run("class Ready(LayerSynchronizer):\n"
               "    def synchronize_layer(self, layer_index, timeout_in_millis):\n"
               "        return True\n"
               f"config = TransferWithCacheKeyConfig(BlocksCacheKey({DECODER}, 0), range(0, 1), range(0, 1))\n"
               "task = cm.transfer_cache_async(cache, Ready(), [config])\n"
               "results = task.synchronize()")
    assert prompt.run(value="int(results)") == 0
    assert prompt.run(value="[int(r) for r in task.get_results()]") == [0]
    for name, seed in (("k", 21), ("v", 22)):
        expected = np.zeros((3, 128), np.uint8)
        expected[0] = vs.fill(seed, (3, 128))[0]
        assert decoder.bytes_of(name) == expected.tobytes(), name
