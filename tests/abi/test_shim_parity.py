"""Differential test: the ascend shim over the vendor double answers like the mock.

The vendor double forwards to the mock, so whatever the shim adds or loses on the
way -- struct conversion, layer pairs, ``tensor_num_per_layer``, block lists, cache
ids, per-cluster link results, the v2 class's own answers -- shows up as a
difference between two processes that run the same call scenario: one over the mock
library, one over the shim in a fake toolkit. Hypothesis draws the scenarios
(caches, then a sequence of pulls, pushes, registrations, links, life-cycle calls
with valid and invalid arguments); every call must give the same status and the
same extra results on both sides, leave the same bytes in every cache, and -- when
the vendor was called -- carry the mock's own message inside the shim's.

One difference is by design (``docs/ascend.md`` §2): a ``tensor_num_per_layer``
that the vendor's ``uint8_t`` cannot hold is refused by the shim before the call,
so on an engine that is not initialised the shim says ``LLM_PARAM_INVALID`` where
the mock, which checks initialisation first, says ``LLM_FAILED``.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import event, given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
DOUBLE = ROOT / "tests" / "vendor_double"
CXX = os.environ.get("CXX", "") or "g++"

pytestmark = pytest.mark.skipif(shutil.which(CXX.split()[0]) is None, reason=f"no C++ compiler ({CXX})")

LLM_FAILED = 0xFFFFFFFF
LLM_PARAM_INVALID = 0x5010B005
PROMPT, DECODER = 1, 2


def _load(path: Path) -> Any:
    spec = importlib.util.spec_from_file_location(f"_lldd_parity_{path.stem}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Worker:
    """A parity_worker.py process; one scenario per request."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([sys.executable, str(DOUBLE / "parity_worker.py"), *args], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.backend = json.loads(self.read())["backend"]

    def read(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"parity worker exited with {self.proc.wait()}")
        return line

    def run(self, scenario: dict[str, Any]) -> list[list[Any]]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(scenario) + "\n")
        self.proc.stdin.flush()
        return list(json.loads(self.read())["results"])

    def close(self) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.proc.stdout.close()


#: A prebuilt fake toolkit and shim (e.g. the sanitizer builds of ci_stage.sh, run
#: with the sanitizer runtimes in LD_PRELOAD); by default the test builds plain ones.
TOOLKIT_ENV, SHIM_ENV = "LLDD_SHIM_PARITY_TOOLKIT", "LLDD_SHIM_PARITY_SHIM"


@pytest.fixture(scope="module")
def workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Worker, Worker]]:
    build_toolkit = _load(DOUBLE / "build_toolkit.py")
    if os.environ.get(TOOLKIT_ENV) and os.environ.get(SHIM_ENV):
        toolkit, shim = Path(os.environ[TOOLKIT_ENV]), Path(os.environ[SHIM_ENV])
        env = dict(os.environ)
    else:
        build_shim = _load(ROOT / "llm_datadist_ffi" / "_shim" / "build_shim.py")
        base = tmp_path_factory.mktemp("parity")
        toolkit = Path(build_toolkit.build(base / "toolkit"))
        shim = Path(build_shim.build(toolkit, base / "shim"))
        env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}    # plain builds
    mock = (toolkit / "lib64" / "libacl_rt.so").resolve()
    mock_side = Worker(["--mock", str(mock)], env)
    shim_side = Worker(["--shim", str(shim)], build_toolkit.toolkit_env(toolkit, env))
    assert (mock_side.backend, shim_side.backend) == ("mock", "ascend")
    yield mock_side, shim_side
    mock_side.close()
    shim_side.close()


# ---- scenarios ----------------------------------------------------------------------------------
# Mostly calls that should succeed (so bytes really move through the shim), each
# argument replaced now and then by a wild value (so every refusal path is crossed).

ELEMENT_SIZE = {4: 1, 1: 2, 3: 4}
WILD_PAIRS = st.tuples(st.integers(-2, 4), st.integers(-2, 4))
WILD_TENSOR_NUMS = st.sampled_from([0, 3, 255, 256, 257, 258, 2**32 - 1])
WILD_BATCHES = st.sampled_from([7, 2**32 - 1])
WILD_SIZES = st.sampled_from([-2, 0, 17, 2**40])
WILD_CACHES = st.sampled_from([0, 99, -1])
WILD_BLOCKS = st.lists(st.one_of(st.integers(0, 8), st.just(2**63)), max_size=4)


def mostly(valid: Any, wild: Any) -> Any:
    """``valid`` three times in four, else ``wild``."""
    return st.one_of(valid, valid, valid, wild)


class Wildness:
    """Two calls in three take only valid arguments; the others any mix (per call)."""

    def __init__(self, draw: Any) -> None:
        self.draw = draw
        self.tame = True

    def next_call(self) -> None:
        self.tame = self.draw(st.integers(0, 2)) > 0

    def __call__(self, valid: Any, wild: Any) -> Any:
        return self.draw(valid if self.tame else st.one_of(valid, valid, wild))


@st.composite
def scenarios(draw: Any) -> dict[str, Any]:
    num_tensors = draw(st.sampled_from([1, 2, 4, 6]))
    width = draw(st.sampled_from([4, 8]))
    data_type = draw(st.sampled_from([4, 1, 3]))
    spec = {}
    for side in ("prompt", "decoder"):
        same = draw(st.booleans()) or draw(st.booleans())          # the same layout 3 times in 4
        spec[side] = {"num_tensors": num_tensors if same else draw(st.sampled_from([1, 2, 4])),
                      "shape": [draw(st.integers(1, 6)), width if same else draw(st.sampled_from([4, 8]))],
                      "data_type": data_type if same else draw(st.sampled_from([4, 1]))}
    blocks = {PROMPT: spec["prompt"]["shape"][0], DECODER: spec["decoder"]["shape"][0]}
    arg = Wildness(draw)
    stride = spec["decoder"]["shape"][1] * ELEMENT_SIZE[spec["decoder"]["data_type"]]

    def ext() -> Any:
        n = draw(st.sampled_from([k for k in (1, 2, 3) if num_tensors % k == 0]))
        layers = num_tensors // n
        first = draw(st.integers(0, layers - 1))
        last = draw(st.integers(first, layers - 1))
        dst_first = draw(st.integers(0, layers - 1 - (last - first)))
        valid = st.just([first, last, dst_first, dst_first + last - first, n])
        if num_tensors % 2 == 0:
            valid = st.one_of(st.none(), valid)          # NULL: all layers, two tensors each
        wild = st.builds(lambda a, b, k: [*a, *b, k], mostly(st.just((-1, -1)), WILD_PAIRS),
                         mostly(st.just((-1, -1)), WILD_PAIRS), mostly(st.just(n), WILD_TENSOR_NUMS))
        # Only the count wild: 257 and 258 would become a valid 1 or 2 if truncated.
        wild_count = st.builds(lambda k: [first, last, dst_first, dst_first + last - first, k], WILD_TENSOR_NUMS)
        return arg(valid, st.one_of(st.none(), wild, wild_count))

    def block_pair(src: int, dst: int) -> tuple[list[int], list[int]]:
        k = draw(st.integers(1, min(blocks[src], blocks[dst])))
        valid = st.tuples(st.permutations(range(blocks[src])), st.permutations(range(blocks[dst]))).map(
            lambda p: (list(p[0][:k]), list(p[1][:k])))
        return tuple(arg(valid, st.tuples(WILD_BLOCKS, WILD_BLOCKS)))  # type: ignore[return-value]

    def index(cluster: int, cache: str, batch_max: int) -> dict[str, Any]:
        return {"cluster": arg(st.just(cluster), st.sampled_from([1, 2, 7])),
                "cache": arg(st.just(cache), WILD_CACHES),
                "batch": arg(st.integers(0, batch_max - 1), WILD_BATCHES)}

    def cache(ref: str, cid: int) -> dict[str, Any]:
        return {"cache": arg(st.just(ref), WILD_CACHES),
                "placement": arg(st.just(1), st.sampled_from([0, 7])),
                "num_tensors": arg(st.just(spec["prompt" if cid == PROMPT else "decoder"]["num_tensors"]),
                                   st.sampled_from([0, 3]))}

    ops: list[Any] = []
    for _ in range(draw(st.integers(1, 8))):
        arg.next_call()
        kind = draw(st.sampled_from(["pull_cache", "pull_blocks", "push_cache", "push_blocks"] * 3 + [
            "register", "unregister", "link", "unlink", "finalize", "initialize", "set_role", "allocate",
            "copy_cache"]))
        if kind == "pull_cache":
            args = {"engine": DECODER, "src": index(PROMPT, "P", blocks[PROMPT]), "dst": cache("D", DECODER),
                    "batch": arg(st.integers(0, blocks[DECODER] - 1), WILD_BATCHES),
                    "size": arg(st.sampled_from([-1, 1, stride]), WILD_SIZES), "ext": ext()}
        elif kind == "pull_blocks":
            src_blocks, dst_blocks = block_pair(PROMPT, DECODER)
            args = {"engine": DECODER, "src": index(PROMPT, "P", 1), "dst": cache("D", DECODER),
                    "src_blocks": src_blocks, "dst_blocks": dst_blocks, "ext": ext()}
        elif kind == "push_cache":
            args = {"engine": PROMPT, "src": cache("P", PROMPT), "dst": index(DECODER, "D", blocks[DECODER]),
                    "batch": arg(st.integers(0, blocks[PROMPT] - 1), WILD_BATCHES),
                    "size": arg(st.just(-1), WILD_SIZES), "ext": ext()}
        elif kind == "push_blocks":
            src_blocks, dst_blocks = block_pair(PROMPT, DECODER)
            args = {"engine": PROMPT, "src": cache("P", PROMPT), "dst": index(DECODER, "D", 1),
                    "src_blocks": src_blocks, "dst_blocks": dst_blocks, "ext": ext()}
        elif kind == "register":
            args = {"engine": draw(st.sampled_from([PROMPT, DECODER])),
                    "spec": {"num_tensors": draw(st.sampled_from([1, 1, 0])),
                             "shape": draw(st.sampled_from([[1, 4], [1, 4], [], [0, 4], [1, -1]])),
                             "data_type": arg(st.just(4), st.sampled_from([5, 28, 43, 44, 99, -1, 2**31 - 1])),
                             "placement": arg(st.just(1), st.sampled_from([0, 3]))}}
        elif kind == "unregister":
            args = {"engine": draw(st.sampled_from([PROMPT, DECODER])),
                    "cache": draw(st.one_of(st.sampled_from(["P", "D"]), WILD_CACHES))}
        elif kind in ("link", "unlink"):
            # Up to three clusters, so that per-cluster results must keep their order:
            # the Prompt, a wrong cluster id at its address, or nobody at port 1.
            peers = st.sampled_from([[1, None], [3, None], [4, 1]])
            args = {"engine": DECODER, "clusters": draw(st.lists(mostly(st.just([1, None]), peers), min_size=1,
                                                                 max_size=3)),
                    "timeout": arg(st.just(2000), st.sampled_from([0, -5])), "force": draw(st.sampled_from([0, 1]))}
        elif kind in ("finalize", "initialize"):
            args = {"engine": DECODER if kind == "initialize" else draw(st.sampled_from([DECODER, DECODER, PROMPT]))}
        elif kind == "set_role":
            args = {"engine": draw(st.sampled_from([DECODER, PROMPT])), "role": draw(st.sampled_from([1, 2, 3, 4, 0]))}
        elif kind == "allocate":
            args = {"engine": DECODER, "spec": spec["decoder"]}
        else:
            args = {"engine": DECODER, "src": cache("D", DECODER), "dst": cache("D", DECODER)}
        ops.append((kind, args))
    return {"prompt": spec["prompt"], "decoder": spec["decoder"], "seed": draw(st.integers(0, 2**16)), "ops": ops}


def same_text(message: str) -> str:
    """The message with addresses and ports blanked: they differ between the processes."""
    message = re.sub(r"0x[0-9a-fA-F]{9,}", "0x<address>", message)
    return re.sub(r"(\d+\.\d+\.\d+\.\d+):\d+", r"\1:<port>", message)


def shim_only_reason(mock: list[Any], shim: list[Any]) -> str:
    """Why a failing call's shim message may lack the mock's text, or ""."""
    message = shim[3]
    if "was not called" in message:
        return "the shim refused the argument itself"
    if "does not implement" in message:
        return "the v2 class answers without a message of its own"
    if "it was passed as DT_UNDEFINED" in message:
        return "the vendor saw DT_UNDEFINED in place of a value ge::DataType cannot hold"
    return ""


@given(scenario=scenarios())
def test_the_shim_over_the_double_answers_every_call_like_the_mock(workers: tuple[Worker, Worker],
                                                                   scenario: dict[str, Any]) -> None:
    mock_side, shim_side = workers
    expected, actual = mock_side.run(scenario), shim_side.run(scenario)
    for i, (m, s) in enumerate(zip(expected, actual)):
        where = f"call {i} {scenario['ops'][i]}"
        event(f"{scenario['ops'][i][0]}: {'success' if m[0] == 0 else 'failure'}")
        if (m[0], s[0]) == (LLM_FAILED, LLM_PARAM_INVALID) and "uint8_t" in s[3]:
            event("the documented difference: tensor_num_per_layer > 255 on an engine not initialised")
            assert m[1:3] == s[1:3], where     # no effect on either side
            continue
        assert s[0] == m[0], f"{where}: status 0x{s[0]:08X} ({s[3]}), the mock gave 0x{m[0]:08X} ({m[3]})"
        assert s[1] == m[1], f"{where}: {s[1]} != {m[1]}"
        assert s[2] == m[2], f"{where}: the caches' bytes differ"
        if m[0] != 0 and m[3] and not shim_only_reason(m, s):
            assert same_text(m[3]) in same_text(s[3]), f"{where}: the shim's message {s[3]!r} lacks the mock's {m[3]!r}"
    assert len(actual) == len(expected) == len(scenario["ops"])
