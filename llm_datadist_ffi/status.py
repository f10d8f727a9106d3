"""Status codes of LLM-DataDist: the one table, the enum, the exceptions.

Everything the package knows about a status code lives in ``STATUS_TABLE``: one
``StatusInfo`` row per code the vendor's LLM-DataDist can return or raise
(docs/reference/status-codes.md §2), holding its value, its C++ and Python names, what it means,
what each vendor document says about recovering from it, the remedy, and which calls
produce it in each generation (status-codes.md §3, §4). The rest of this module is derived from that
table or checked against it:

* ``LLMStatusCode`` is the vendor's ``IntEnum``. Its members are written out below so
  that readers and type checkers see them; an import-time check (and
  tests/abi/test_status.py) keeps them equal to the table.
* ``map_status`` is the vendor's mapping rule (status-codes.md §5): every int without a member becomes
  ``LLM_FAILED``.
* ``LLMException`` is the vendor's exception (status-codes.md §7.2). Its subclasses, one per code and
  grouped in families (links, timeouts, memory, prefixes), read ``recoverable`` and
  ``remedy`` from the table. ``exception_for`` picks the subclass for a native status;
  it is what the binding's single checked-call path raises.
* ``Status`` is the vendor's small status wrapper (status-codes.md §7.3).
* ``info_for`` looks a code up by value, hex or decimal text, or name, for the
  ``python -m llm_datadist_ffi errors`` command and for people reading logs.
* The C enum ``include/lldd/status.h`` and the ascend shim's table of status names
  are generated from the table (``python -m llm_datadist_ffi._tools._codegen``), and
  docs/error-codes.md is printed from it; tests fail when a copy is stale.

This module is pure Python and imports nothing else from the package, so that it can
be used (and its CLI run) where the native library cannot be loaded.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from types import MappingProxyType
from typing import Callable, ClassVar, Final, Generic, Mapping, NoReturn, TypeVar

__all__ = [
    "AlreadyLinkError",
    "BlocksOutOfMemoryError",
    "ClusterNumExceedLimitError",
    "DeviceMemError",
    "DeviceOutOfMemoryError",
    "Documented",
    "EXCEPTION_CLASSES",
    "EngineFinalizedError",
    "ExistLinkError",
    "FailedError",
    "FeatureNotEnabledError",
    "KvCacheNotExistError",
    "LLM_CODE_BASE",
    "LLMException",
    "LLMMemoryError",
    "LLMStatusCode",
    "LLMTimeoutError",
    "LinkBusyError",
    "LinkError",
    "LinkFailedError",
    "NoFreeBlockError",
    "NotYetLinkError",
    "NotifyPromptUnlinkFailedError",
    "OutOfMemoryError",
    "ParamInvalidError",
    "PrefixAlreadyExistError",
    "PrefixError",
    "PrefixNotExistError",
    "ProcessingLinkError",
    "ProcessingTimeoutError",
    "Producer",
    "RepeatRequestError",
    "RequestAlreadyCompletedError",
    "STATUS_TABLE",
    "SeqLenOverLimitError",
    "Status",
    "StatusInfo",
    "SuspectRemoteError",
    "UnknownError",
    "UnlinkFailedError",
    "WaitProcessTimeoutError",
    "exception_class_for",
    "exception_for",
    "info_for",
    "map_status",
]


# ---------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------


class Documented(enum.Enum):
    """What one vendor document says about recovering from a code (status-codes.md §3)."""

    YES = "yes"
    NO = "no"
    NOT_LISTED = "not listed"
    NOT_APPLICABLE = "n/a"


@dataclass(frozen=True)
class Producer:
    """One way a code comes out of the library: the call and the condition."""

    call: str
    condition: str


# The prefix every LLM-specific code shares: GE_ERRORNO_DEFINE(0b01, 0b01, 0b000, 8, 11, ...)
# packs runtime, type, level, system id 8 and module id 11 above the 12-bit value (status-codes.md §1).
LLM_CODE_BASE: Final = 0x5010B000


@dataclass(frozen=True)
class StatusInfo:
    """One row of the status-code table.

    ``python_doc``, ``v1_python_doc`` and ``cpp_doc`` record each vendor document's
    opinion on recoverability; ``recoverable`` is the project's resolution of them
    (docs/reference/status-codes.md §8.6). An empty producer tuple means no call produces the code in
    that generation; the matching ``*_note`` says why or what happens instead.
    """

    value: int
    cpp_name: str | None
    python_name: str | None
    meaning: str
    python_doc: Documented
    v1_python_doc: Documented
    cpp_doc: Documented
    remedy: str
    v2_producers: tuple[Producer, ...]
    v1_producers: tuple[Producer, ...]
    cpp_aliases: tuple[str, ...] = ()
    in_cpp_header: bool = False
    detail: str = ""
    doc_notes: str = ""
    v2_note: str = ""
    v1_note: str = ""

    @property
    def recoverable(self) -> bool:
        """The resolved recoverability (status-codes.md §8.6).

        The current Python document decides for the codes it lists (so ``LLM_TIMEOUT``
        is recoverable by re-linking); for codes only the older documents list, the v1
        Python document, then the C++ document. A code that no document lists is not
        recoverable (project decision), and neither is ``LLM_SUCCESS``, which is no
        error at all.
        """
        source = self.recoverable_source
        return source is not None and self.documents[source] is Documented.YES

    @property
    def documents(self) -> dict[str, Documented]:
        """Each document's opinion, keyed by the document's name, in priority order."""
        return {
            "Python doc": self.python_doc,
            "v1 Python doc": self.v1_python_doc,
            "C++ doc": self.cpp_doc,
        }

    @property
    def recoverable_source(self) -> str | None:
        """The name of the document that decides ``recoverable``, or None if none does."""
        for name, opinion in self.documents.items():
            if opinion in (Documented.YES, Documented.NO):
                return name
        return None

    @property
    def recoverable_text(self) -> str:
        """``recoverable`` for people: "yes", "no", "no (undocumented)" or "n/a"."""
        if all(d is Documented.NOT_APPLICABLE for d in self.documents.values()):
            return "n/a"
        if self.recoverable_source is None:
            return "no (undocumented)"
        return "yes" if self.recoverable else "no"

    @property
    def hex(self) -> str:
        """The value as the vendor writes it (``0x5010B005``); "-" for negative values."""
        return f"0x{self.value:08X}" if self.value >= 0 else "-"

    @property
    def name(self) -> str:
        """The most useful single name: the Python member, else the C++ name."""
        name = self.python_name or self.cpp_name
        assert name is not None, "every row has a Python or a C++ name"
        return name

    @property
    def origin(self) -> str:
        """Where the value comes from: the LLM error-code macro, ``ge``, ACL or Python."""
        if self.value < 0:
            return "Python only"
        if self.value in (0, 0xFFFFFFFF):
            return "ge::Status"
        if self.value & ~0xFFF == LLM_CODE_BASE:
            return "LLM-DataDist (GE_ERRORNO_DEFINE)"
        return "ACL runtime"

    @property
    def member(self) -> LLMStatusCode | None:
        """The ``LLMStatusCode`` member of this row, None for codes without one."""
        return None if self.python_name is None else LLMStatusCode[self.python_name]

    @property
    def mapped(self) -> LLMStatusCode:
        """What Python reports for this value after the vendor's mapping rule (status-codes.md §5)."""
        return map_status(self.value)

    @property
    def names(self) -> tuple[str, ...]:
        """Every spelling of this code: Python member, C++ name and C++ aliases."""
        found = [self.python_name, self.cpp_name, *self.cpp_aliases]
        return tuple(dict.fromkeys(n for n in found if n is not None))


_UNDOCUMENTED_LEGACY = (
    "Not documented by the vendor. No call returns this code any more (a legacy of an "
    "earlier engine API); if it shows up, treat it like LLM_FAILED."
)

_RAW_ONLY_REMEDY = (
    "Not documented by the vendor. Python never shows this value: the mapping rule "
    "turns it into LLM_FAILED, so follow the LLM_FAILED advice; the exception's "
    "raw_status keeps the original value for diagnosis."
)

_V1_FILTERED = "the v1 core turns it into LLM_FAILED before it leaves the library"

_N = Documented.NOT_LISTED
_Y = Documented.YES
_NO = Documented.NO
_NA = Documented.NOT_APPLICABLE

STATUS_TABLE: Final[tuple[StatusInfo, ...]] = (
    StatusInfo(
        value=0x00000000,
        cpp_name="LLM_SUCCESS",
        cpp_aliases=("SUCCESS",),
        python_name="LLM_SUCCESS",
        in_cpp_header=True,
        meaning="success",
        python_doc=_NA,
        v1_python_doc=_NA,
        cpp_doc=_NA,
        remedy="Nothing to do: the call succeeded.",
        v2_producers=(
            Producer("every call", "the call succeeded"),
            Producer(
                "deallocate_cache, unregister_cache; C++ UnregisterKvCache",
                "the cache id is unknown: nothing happens and the call still succeeds",
            ),
            Producer("remove_cache_key", "the key does not exist: nothing is removed"),
            Producer("unlink_clusters (forced)", "the cluster was never linked"),
        ),
        v1_producers=(Producer("every call", "the call succeeded"),),
    ),
    StatusInfo(
        value=0xFFFFFFFF,
        cpp_name="LLM_FAILED",
        cpp_aliases=("FAILED",),
        python_name="LLM_FAILED",
        in_cpp_header=True,
        meaning="generic failure",
        detail="4294967295 in Python, never -1 (that is LLM_UNKNOWN_ERROR).",
        python_doc=_NO,
        v1_python_doc=_NO,
        cpp_doc=_NO,
        remedy=(
            "Not recoverable. Leave the failed process as it is for diagnosis and "
            "collect the host and device logs. The Python documents also advise "
            "restarting the machine or the container."
        ),
        v2_producers=(
            Producer("any core call", "made before init or after finalize (not initialized)"),
            Producer(
                "register, unregister, allocate on a CacheManager kept after finalize",
                "the binding has no engine (link, unlink, link_clusters, unlink_clusters "
                "and query_register_mem_status give FAILED there too, but LLMDataDist "
                "raises a plain RuntimeError before reaching them)",
            ),
            Producer(
                "LLMDataDist.init",
                "another LLMDataDist is initialised in this process: the Python layer "
                'raises "Cannot init multiple LLMDataDists"; the core\'s own '
                '"Repeat Init" check gives the same code',
            ),
            Producer(
                "core block copy",
                "the two blocks caches have different block sizes (Python copy_blocks "
                "copies within one cache and cannot reach this)",
            ),
            Producer(
                "block transfers",
                "aggregating contiguous block runs fails, or an HCCL batch put fails",
            ),
            Producer("remap_registered_memory", "the remap fails"),
            Producer(
                "link and transfer calls",
                "an HCCL or HIXL error that has no mapping of its own",
            ),
            Producer(
                "C++ LlmDataDist methods",
                'called before Initialize succeeded ("LlmDataDist is not initialized"); '
                "not Initialize, Finalize, nor the four methods that always return "
                "LLM_FEATURE_NOT_ENABLED",
            ),
            Producer(
                "C++ Initialize",
                "any code outside the LLM set, including LLM_TIMEOUT, codes 20-23 and "
                "raw ACL codes",
            ),
            Producer(
                "any call, in Python (mapping rule)",
                "the core returned an int without an LLMStatusCode member: codes 20-23, "
                "raw ACL codes other than 507053/507057, leaked HCCL/HIXL values, -1",
            ),
        ),
        v1_producers=(
            Producer(
                "every core call",
                "any non-LLM code, LLM_TIMEOUT or codes 20-23 (the v1 core filters "
                "every public call)",
            ),
            Producer("device-side data-flow functions", "function errors numbered 1000 and above"),
            Producer(
                "any call, in Python (mapping rule)",
                "the core returned an int without an LLMStatusCode member",
            ),
        ),
    ),
    StatusInfo(
        value=0x5010B001,
        cpp_name="LLM_WAIT_PROC_TIMEOUT",
        python_name="LLM_WAIT_PROCESS_TIMEOUT",
        in_cpp_header=True,
        meaning="request wait to be processed timeout",
        detail="A request waited too long before being processed.",
        python_doc=_N,
        v1_python_doc=_Y,
        cpp_doc=_Y,
        remedy=(
            "After a transfer call (pull_cache, pull_blocks, transfer_cache_async; C++ "
            "PullKvCache, PullKvBlocks) the link cannot be used any more: unlink and "
            "link again. After any other call, raise the timeout and retry."
        ),
        v2_producers=(),
        v2_note="the v2 core only logs this code; v2 reports timeouts as LLM_TIMEOUT",
        v1_producers=(
            Producer(
                "pull_cache, transfer_cache, copy_cache, allocate_cache and similar calls",
                "a feed or fetch of the flow service times out",
            ),
            Producer("link_clusters, unlink_clusters", "the request feed exceeds the timeout"),
            Producer("device-side link state machine", "its timeout expires"),
            Producer(
                "CacheTask.synchronize, CacheTask.get_results",
                "they time out (the default result of the v1 CacheTask)",
            ),
        ),
    ),
    StatusInfo(
        value=0x5010B002,
        cpp_name="LLM_KV_CACHE_NOT_EXIST",
        python_name="LLM_KV_CACHE_NOT_EXIST",
        in_cpp_header=True,
        meaning="the KV cache does not exist",
        python_doc=_Y,
        v1_python_doc=_Y,
        cpp_doc=_Y,
        remedy=(
            "Check that the request finished on the source (Prompt) side (read its error "
            "log); that the same key was not pulled twice (a successful pull can release "
            "the key); and that the values naming the source cache are right (cluster "
            "id, cache id, req/prefix/model id). The C++ document adds: check the cache "
            "id and that the cache was not freed already."
        ),
        v2_producers=(
            Producer(
                "pull, push/transfer, copy, swap by cache id",
                "the local cache id is unknown",
            ),
            Producer(
                "pull in server-assisted mode (direct mode off)",
                "the peer cannot find the source cache or key, including a source "
                "batch_index at or beyond the source cache's batch count",
            ),
            Producer(
                "pull, push in direct mode",
                "the peer's published cache table has no matching entry: prefix keys are "
                "never published, and the table is copied once per link on the first "
                "pull or push, so caches registered or keys bound on the peer later are "
                "not found either",
            ),
        ),
        v1_producers=(
            Producer(
                "deallocate_cache, pull_cache, transfer_cache, copy_cache, get_cache_tensors",
                "the cache id is unknown",
            ),
            Producer("pull_cache", "the peer cannot find the key"),
            Producer("pull_cache by cache id", "the source batch index is out of range"),
        ),
    ),
    StatusInfo(
        value=0x5010B003,
        cpp_name="LLM_REPEAT_REQUEST",
        python_name="LLM_REPEAT_REQUEST",
        meaning="repeated request",
        python_doc=_Y,
        v1_python_doc=_Y,
        cpp_doc=_N,
        remedy=(
            "Look for duplicate calls, such as the same remote cluster listed twice in "
            "one request."
        ),
        v2_producers=(),
        v1_producers=(
            Producer(
                "link_clusters, unlink_clusters",
                "the same remote cluster id appears twice in one request (device-side "
                "link handler)",
            ),
        ),
    ),
    StatusInfo(
        value=0x5010B004,
        cpp_name="LLM_REQUEST_ALREADY_COMPLETED",
        python_name="LLM_REQUEST_ALREADY_COMPLETED",
        meaning="request already completed",
        python_doc=_N,
        v1_python_doc=_N,
        cpp_doc=_N,
        remedy=_UNDOCUMENTED_LEGACY,
        v2_producers=(),
        v2_note="legacy of an earlier engine API",
        v1_producers=(),
        v1_note="legacy of an earlier engine API",
    ),
    StatusInfo(
        value=0x5010B005,
        cpp_name="LLM_PARAM_INVALID",
        python_name="LLM_PARAM_INVALID",
        in_cpp_header=True,
        meaning="a parameter is invalid",
        python_doc=_Y,
        v1_python_doc=_Y,
        cpp_doc=_Y,
        remedy=(
            "The log message names the rule that was broken: fix the arguments and "
            "call again."
        ),
        v2_producers=(
            Producer(
                "every call (Python layer)",
                "a Python-side rule check fails (listed per call in docs/reference/python-api.md)",
            ),
            Producer(
                "every core call",
                "core validation fails: layer ranges, tensor_num_per_layer, block lists, "
                "sizes, batch indexes, cache kinds, key binding, shapes, data types, "
                "remote accessibility, a pull from one's own cluster id",
            ),
            Producer("LLMDataDist.init", "an option cannot be parsed"),
            Producer(
                "link",
                "bad link parameters (remote IP list size, local IP list size without "
                "local_comm_res, an address that cannot be resolved), cluster_rank_info "
                "without the local cluster id, or 512 communicators exist already",
            ),
            Producer(
                "pull, copy, swap, transfer/push, remove_cache_key, deallocate, remap",
                "an internal assertion or null check fails, including a CacheManager "
                "kept after finalize (the binding has no engine)",
            ),
            Producer("link and transfer calls", "HCCL returns HCCL_E_PARA or HIXL PARAM_INVALID"),
            Producer(
                "transfer_cache_async",
                "a LayerSynchronizer returned False (result made by the Python layer)",
            ),
        ),
        v1_producers=(
            Producer(
                "every call",
                "Python checks, C++ v1 validation or device-side parameter checks fail",
            ),
            Producer("pull_cache", "called by a cluster that is not a Decoder"),
            Producer("transfer_cache", "called by a cluster that is not a Prompt"),
            Producer(
                "link_clusters, check_link_status",
                "called by a cluster that is not a Decoder",
            ),
        ),
    ),
    StatusInfo(
        value=0x5010B006,
        cpp_name="LLM_ENGINE_FINALIZED",
        python_name="LLM_ENGINE_FINALIZED",
        meaning="engine finalized",
        python_doc=_N,
        v1_python_doc=_N,
        cpp_doc=_N,
        remedy=_UNDOCUMENTED_LEGACY,
        v2_producers=(),
        v2_note="legacy of an earlier engine API",
        v1_producers=(),
        v1_note="legacy of an earlier engine API",
    ),
    StatusInfo(
        value=0x5010B007,
        cpp_name="LLM_NOT_YET_LINK",
        python_name="LLM_NOT_YET_LINK",
        in_cpp_header=True,
        meaning="the local cluster is not linked with the remote cluster",
        python_doc=_Y,
        v1_python_doc=_Y,
        cpp_doc=_Y,
        remedy=(
            "Check the link between Decoder and Prompt and link first. After the "
            "rank-table link(), wait until query_register_mem_status reports OK before "
            "transferring."
        ),
        v2_producers=(
            Producer(
                "pull, push, transfer",
                "there is no usable link to the target cluster (no link entity, the "
                "entity was destroyed, or the link is not ready)",
            ),
            Producer(
                "unlink(comm_id), query_register_mem_status(comm_id)",
                "the comm id is unknown",
            ),
            Producer("remap_registered_memory", "no link exists at all"),
            Producer("HIXL transfer backend", "HIXL reports NOT_CONNECTED"),
        ),
        v1_producers=(
            Producer(
                "pull_cache, transfer_cache, unlink_clusters, check_link_status",
                "the device side reports that there is no link",
            ),
        ),
    ),
    StatusInfo(
        value=0x5010B008,
        cpp_name="LLM_ALREADY_LINK",
        python_name="LLM_ALREADY_LINK",
        in_cpp_header=True,
        meaning="the local cluster is already linked with the remote cluster",
        python_doc=_Y,
        v1_python_doc=_Y,
        cpp_doc=_Y,
        remedy=(
            "The link exists already: check the link state between Decoder and Prompt "
            "instead of linking again. If the peer crashed or was restarted, this side "
            "still holds the old link: unlink it with force=True (which drops only the "
            "local side and needs no network), then link again."
        ),
        v2_producers=(
            Producer(
                "link_clusters (per-cluster result)",
                "both sides already hold a link to that peer (when only the peer holds "
                "an old link, the new link replaces it and succeeds)",
            ),
            Producer("HIXL transfer backend", "HIXL reports ALREADY_CONNECTED"),
        ),
        v1_producers=(
            Producer("link_clusters (per-cluster result)", "reported by the device side"),
        ),
    ),
    StatusInfo(
        value=0x5010B009,
        cpp_name="LLM_LINK_FAILED",
        python_name="LLM_LINK_FAILED",
        in_cpp_header=True,
        meaning="linking with the remote cluster failed",
        python_doc=_Y,
        v1_python_doc=_Y,
        cpp_doc=_Y,
        remedy=(
            "When link_clusters (C++ LinkLlmClusters) reports this for a cluster, check "
            "the network between the two clusters, then link again."
        ),
        v2_producers=(
            Producer(
                "link_clusters",
                "the peer's listen address refuses the connection, creating, binding or "
                "preparing the communicator fails, or the peer reports a failure",
            ),
            Producer("link", "communicator initialisation fails"),
        ),
        v1_producers=(
            Producer("link_clusters (per-cluster result)", "reported by the device side"),
            Producer("link_clusters (overall result)", "some clusters had to be rolled back"),
        ),
    ),
    StatusInfo(
        value=0x5010B00A,
        cpp_name="LLM_UNLINK_FAILED",
        python_name="LLM_UNLINK_FAILED",
        in_cpp_header=True,
        meaning="unlinking from the remote cluster failed",
        python_doc=_Y,
        v1_python_doc=_Y,
        cpp_doc=_Y,
        remedy=(
            "When unlink_clusters (C++ UnlinkLlmClusters) reports this for a cluster, "
            "check the network between the two clusters. If the peer crashed or was "
            "restarted, it cannot answer a normal unlink: unlink with force=True to drop "
            "the local side of the link, then link again (a new link to the restarted peer "
            "otherwise answers LLM_ALREADY_LINK)."
        ),
        v2_producers=(
            Producer("unlink_clusters (not forced)", "the peer cannot be reached"),
            Producer("unlink_clusters, unlink", "HCCL or ACL teardown fails"),
        ),
        v1_producers=(
            Producer("unlink_clusters (per-cluster result)", "reported by the device side"),
        ),
    ),
    StatusInfo(
        value=0x5010B00B,
        cpp_name="LLM_NOTIFY_PROMPT_UNLINK_FAILED",
        python_name="LLM_NOTIFY_PROMPT_UNLINK_FAILED",
        in_cpp_header=True,
        meaning="the local cluster could not tell the remote (Prompt) cluster to unlink",
        python_doc=_Y,
        v1_python_doc=_Y,
        cpp_doc=_Y,
        remedy=(
            "Check the network between Decoder and Prompt, then unlink on the Prompt "
            "side as well to clean up what is left there."
        ),
        v2_producers=(),
        v1_producers=(
            Producer(
                "unlink_clusters",
                "the Decoder could not notify the Prompt (device side)",
            ),
        ),
    ),
    StatusInfo(
        value=0x5010B00C,
        cpp_name="LLM_CLUSTER_NUM_EXCEED_LIMIT",
        python_name="LLM_CLUSTER_NUM_EXCEED_LIMIT",
        in_cpp_header=True,
        meaning="too many clusters in one link/unlink call",
        python_doc=_Y,
        v1_python_doc=_Y,
        cpp_doc=_Y,
        remedy="Pass at most 16 clusters to one link_clusters or unlink_clusters call.",
        v2_producers=(),
        v2_note="v2 has no per-call limit: it links the clusters in parallel, 16 at a time",
        v1_producers=(
            Producer(
                "link_clusters, unlink_clusters",
                "more than 16 clusters in one call (the device side's request-count limit)",
            ),
        ),
    ),
    StatusInfo(
        value=0x5010B00D,
        cpp_name="LLM_PROCESSING_LINK",
        python_name="LLM_PROCESSING_LINK",
        in_cpp_header=True,
        meaning="a link or unlink is being processed; try again later",
        python_doc=_Y,
        v1_python_doc=_Y,
        cpp_doc=_Y,
        remedy="Another link or unlink is in progress: retry later.",
        v2_producers=(),
        v1_producers=(
            Producer(
                "link_clusters, unlink_clusters",
                "another link or unlink call holds the link lock (the vendor waits "
                "`timeout` microseconds for it although `timeout` is in milliseconds, "
                "so the call fails almost at once)",
            ),
        ),
    ),
    StatusInfo(
        value=0x5010B00E,
        cpp_name="LLM_DEVICE_OUT_OF_MEMORY",
        python_name="LLM_DEVICE_OUT_OF_MEMORY",
        in_cpp_header=True,
        meaning="device out of memory",
        python_doc=_N,
        v1_python_doc=_Y,
        cpp_doc=_Y,
        remedy="Look for device memory that was allocated and never freed.",
        v2_producers=(),
        v2_note="an exhausted pool in v2 gives LLM_OUT_OF_MEMORY",
        v1_producers=(
            Producer(
                "allocate_cache, allocate_blocks_cache; C++ v1 AllocateCache",
                "the flow-graph memory is exhausted",
            ),
            Producer("swap_blocks", "its device staging buffer cannot be allocated"),
        ),
    ),
    StatusInfo(
        value=0x5010B00F,
        cpp_name="LLM_PREFIX_ALREADY_EXIST",
        python_name="LLM_PREFIX_ALREADY_EXIST",
        meaning="the prefix already exists",
        python_doc=_Y,
        v1_python_doc=_Y,
        cpp_doc=_N,
        remedy="A prefix with the same prefix id is loaded already: release it first.",
        v2_producers=(),
        v1_producers=(),
        v1_note="the device side defines a matching status, but no producer is known",
    ),
    StatusInfo(
        value=0x5010B010,
        cpp_name="LLM_PREFIX_NOT_EXIST",
        python_name="LLM_PREFIX_NOT_EXIST",
        meaning="the prefix does not exist",
        python_doc=_Y,
        v1_python_doc=_Y,
        cpp_doc=_N,
        remedy="Check that the prefix id used in the request was loaded.",
        v2_producers=(),
        v1_producers=(),
        v1_note="the device side defines a matching status, but no producer is known",
    ),
    StatusInfo(
        value=0x5010B011,
        cpp_name="LLM_SEQ_LEN_OVER_LIMIT",
        python_name="LLM_SEQ_LENOVERLIMIT",
        meaning="sequence length exceeds the limit",
        detail="The Python member is spelled LLM_SEQ_LENOVERLIMIT (sic).",
        python_doc=_N,
        v1_python_doc=_N,
        cpp_doc=_N,
        remedy=_UNDOCUMENTED_LEGACY,
        v2_producers=(),
        v2_note="legacy",
        v1_producers=(),
        v1_note="legacy",
    ),
    StatusInfo(
        value=0x5010B012,
        cpp_name="LLM_NO_FREE_BLOCK",
        python_name="LLM_NO_FREE_BLOCK",
        meaning="no free block",
        python_doc=_N,
        v1_python_doc=_N,
        cpp_doc=_N,
        remedy=_UNDOCUMENTED_LEGACY,
        v2_producers=(),
        v2_note="legacy",
        v1_producers=(),
        v1_note="legacy",
    ),
    StatusInfo(
        value=0x5010B013,
        cpp_name="LLM_BLOCKS_OUT_OF_MEMORY",
        python_name="LLM_BLOCKS_OUT_OF_MEMORY",
        meaning="blocks out of memory",
        python_doc=_N,
        v1_python_doc=_N,
        cpp_doc=_N,
        remedy=_UNDOCUMENTED_LEGACY,
        v2_producers=(),
        v2_note="legacy",
        v1_producers=(),
        v1_note="legacy",
    ),
    StatusInfo(
        value=0x5010B014,
        cpp_name="LLM_CACHE_INCOMPATIBLE",
        python_name=None,
        meaning="caches incompatible",
        detail="The vendor registers no text for this code.",
        python_doc=_N,
        v1_python_doc=_N,
        cpp_doc=_N,
        remedy=_RAW_ONLY_REMEDY,
        v2_producers=(),
        v1_producers=(
            Producer("copy_cache (device side)", "source and destination caches are incompatible"),
        ),
        v1_note=_V1_FILTERED,
    ),
    StatusInfo(
        value=0x5010B015,
        cpp_name="LLM_CACHE_KEY_ALREADY_EXIST",
        python_name=None,
        meaning="cache key already exists",
        detail="The vendor registers no text for this code.",
        python_doc=_N,
        v1_python_doc=_N,
        cpp_doc=_N,
        remedy=_RAW_ONLY_REMEDY,
        v2_producers=(),
        v1_producers=(
            Producer("allocate_cache (device side)", "the cache key exists already"),
        ),
        v1_note=_V1_FILTERED,
    ),
    StatusInfo(
        value=0x5010B016,
        cpp_name="LLM_COPY_CACHE_FAILED",
        python_name=None,
        meaning="copying a cache failed",
        detail="The vendor registers no text for this code.",
        python_doc=_N,
        v1_python_doc=_N,
        cpp_doc=_N,
        remedy=_RAW_ONLY_REMEDY,
        v2_producers=(),
        v1_producers=(Producer("copy_cache (device side)", "the copy fails"),),
        v1_note=_V1_FILTERED,
    ),
    StatusInfo(
        value=0x5010B017,
        cpp_name="LLM_CACHE_ID_ALREADY_EXIST",
        python_name=None,
        meaning="cache id already exists",
        detail="The vendor registers no text for this code.",
        python_doc=_N,
        v1_python_doc=_N,
        cpp_doc=_N,
        remedy=_RAW_ONLY_REMEDY,
        v2_producers=(),
        v1_producers=(
            Producer("allocate_cache (device side)", "the cache id exists already"),
        ),
        v1_note=_V1_FILTERED,
    ),
    StatusInfo(
        value=0x5010B018,
        cpp_name="LLM_EXIST_LINK",
        python_name="LLM_EXIST_LINK",
        in_cpp_header=True,
        meaning="links still exist when switching role; unlink before switching",
        python_doc=_Y,
        v1_python_doc=_Y,
        cpp_doc=_Y,
        remedy="Unlink every link before switching the role (switch_role; C++ SetRole).",
        v2_producers=(Producer("switch_role; C++ SetRole", "any link is still alive"),),
        v1_producers=(
            Producer("switch_role", "links exist (the device side refuses the switch)"),
        ),
    ),
    StatusInfo(
        value=0x5010B019,
        cpp_name="LLM_FEATURE_NOT_ENABLED",
        python_name="LLM_FEATURE_NOT_ENABLED",
        in_cpp_header=True,
        meaning="feature not enabled (or not supported by this API/backend)",
        python_doc=_Y,
        v1_python_doc=_Y,
        cpp_doc=_Y,
        remedy=(
            "Check that init received the options the feature needs. For switch_role the "
            "Python documents say to set enable_switch_role = True (C++ v1: "
            'OPTION_ENABLE_SET_ROLE = "1"), an option only v1 reads. The current C++ '
            "document adds: check whether the interface is supported at all."
        ),
        v2_producers=(
            Producer(
                "C++ AllocateCache, DeallocateCache, CopyKvCache, CopyKvBlocks",
                "always",
            ),
            Producer(
                "link, unlink, query_register_mem_status",
                "the HIXL transfer backend is in use",
            ),
            Producer("switch_role", "the HIXL backend is in use and the listen address changes"),
            Producer(
                "allocate_cache, deallocate_cache, remove_cache_key",
                "no memory pool was configured",
            ),
            Producer(
                "transfer between two host-placed caches",
                "server-assisted transfer (direct mode off)",
            ),
            Producer(
                "link and transfer calls",
                "HCCL returns HCCL_E_NOT_SUPPORT or HIXL UNSUPPORTED",
            ),
        ),
        v1_producers=(
            Producer(
                "switch_role",
                'llm.EnableSwitchRole is not "1", or more than one device is used',
            ),
            Producer("transfer_cache", "more than one device is used"),
            Producer("C++ RegisterKvCache, UnregisterKvCache", "always"),
        ),
    ),
    StatusInfo(
        value=0x5010B01A,
        cpp_name="LLM_TIMEOUT",
        python_name="LLM_TIMEOUT",
        in_cpp_header=True,
        meaning="processing timed out",
        python_doc=_Y,
        v1_python_doc=_N,
        cpp_doc=_NO,
        doc_notes=(
            "The documents disagree: the Python document calls it recoverable by "
            "re-linking, the C++ document does not, and the older Python document gives "
            "the re-link advice for LLM_WAIT_PROCESS_TIMEOUT instead."
        ),
        remedy=(
            "Python document (followed here): after a transfer call (pull_cache, "
            "pull_blocks, transfer_cache_async) the link is unusable, so unlink and link "
            "again; after any other call, raise the timeout and retry. The C++ document "
            "calls it not recoverable: keep the state and collect host and device logs."
        ),
        v2_producers=(
            Producer(
                "pull and push calls (pull_cache, pull_blocks, push_cache, push_blocks, transfer_cache_async)",
                "the transfer does not complete within sync_kv_timeout "
                "(llm.SyncKvCacheWaitTime, default 1000 ms): a stream-sync timeout (ACL "
                "507046 is mapped to this code), response-flag polling past the "
                "deadline, or the peer reporting a timeout",
            ),
            Producer("layer-wise transfer", "an event wait expires"),
            Producer(
                "link_clusters, unlink_clusters",
                "the TCP connect to the peer's listen address exceeds the timeout (a "
                "refused connection gives LLM_LINK_FAILED instead)",
            ),
            Producer("link and transfer calls", "HCCL returns HCCL_E_TIMEOUT or HIXL TIMEOUT"),
            Producer(
                "CacheTask.synchronize, CacheTask.get_results",
                "they time out (the default result of the v2 CacheTask)",
            ),
        ),
        v1_producers=(),
        v1_note=(
            "the v1 core turns it into LLM_FAILED; v1 timeouts are LLM_WAIT_PROC_TIMEOUT"
        ),
    ),
    StatusInfo(
        value=0x5010B01B,
        cpp_name="LLM_LINK_BUSY",
        python_name="LLM_LINK_BUSY",
        in_cpp_header=True,
        meaning="the link is busy",
        python_doc=_Y,
        v1_python_doc=_Y,
        cpp_doc=_Y,
        doc_notes="The C++ document calls the code reserved and never returned.",
        remedy=(
            "Two conflicting calls ran on one link at the same time, such as unlink "
            "during pull_cache, pull_cache together with transfer_cache_async, or (v1) "
            "check_link_status during pull_cache: serialize them."
        ),
        v2_producers=(),
        v2_note="reserved in v2 (the C++ document says it is never returned)",
        v1_producers=(
            Producer(
                "pull_cache, transfer_cache",
                "the link is being torn down by an unlink or is busy",
            ),
            Producer("unlink_clusters", "the link is busy (device side)"),
        ),
    ),
    StatusInfo(
        value=0x5010B01C,
        cpp_name="LLM_OUT_OF_MEMORY",
        python_name="LLM_OUT_OF_MEMORY",
        in_cpp_header=True,
        meaning="out of memory (memory pool or system memory)",
        python_doc=_Y,
        v1_python_doc=_Y,
        cpp_doc=_Y,
        doc_notes="The v1 Python document says it occurs only in CacheManager mode.",
        remedy=(
            "Make sure the memory pool is large enough for the requested KV size and "
            "that allocated caches are freed (C++ document: check the pool or the "
            "system memory)."
        ),
        v2_producers=(
            Producer("allocate_cache, allocate_blocks_cache", "the memory pool is exhausted"),
            Producer(
                "the core's capacity check",
                "the requested size does not fit the pool (no public call uses this check)",
            ),
            Producer("LLMDataDist.init", "allocating the memory pool fails"),
            Producer(
                "pull into a host cache (device to host)",
                "the device staging buffer cannot be allocated",
            ),
        ),
        v1_producers=(),
    ),
    StatusInfo(
        value=507053,
        cpp_name="ACL_ERROR_RT_DEVICE_MEM_ERROR",
        python_name="LLM_DEVICE_MEM_ERROR",
        meaning="device memory UCE (uncorrectable error) at a virtual address",
        python_doc=_Y,
        v1_python_doc=_Y,
        cpp_doc=_N,
        doc_notes="The Python document also calls the code reserved, not yet supported.",
        remedy=(
            "An uncorrectable error hit device memory. Find and repair the faulty "
            "virtual address (the vendor points to torch_npu.npu.restart_device); if "
            "the address belongs to KV-cache memory, call "
            "CacheManager.remap_registered_memory to repair the NIC registration."
        ),
        v2_producers=(
            Producer(
                "transfer and copy calls",
                "the ACL runtime reports it; the core passes raw ACL codes through "
                "unchanged (only 507046 is mapped, to LLM_TIMEOUT)",
            ),
        ),
        v1_producers=(),
        v1_note=_V1_FILTERED,
    ),
    StatusInfo(
        value=507057,
        cpp_name="ACL_ERROR_RT_SUSPECT_REMOTE_ERROR",
        python_name="LLM_SUSPECT_REMOTE_ERROR",
        meaning="suspected remote UCE memory fault",
        python_doc=_NO,
        v1_python_doc=_NO,
        cpp_doc=_N,
        remedy=(
            "A remote uncorrectable memory error is suspected. The serving framework "
            "has to correlate it with other faults to tell a UCE from something else."
        ),
        v2_producers=(
            Producer(
                "transfer and copy calls",
                "the ACL runtime reports it; the core passes raw ACL codes through "
                "unchanged (only 507046 is mapped, to LLM_TIMEOUT)",
            ),
        ),
        v1_producers=(),
        v1_note=_V1_FILTERED,
    ),
    StatusInfo(
        value=-1,
        cpp_name=None,
        python_name="LLM_UNKNOWN_ERROR",
        meaning="unknown error; never produced by the vendor's mapping",
        detail="Python only. Not the same as LLM_FAILED (4294967295).",
        python_doc=_NO,
        v1_python_doc=_NO,
        cpp_doc=_N,
        remedy="Keep the state for diagnosis and collect the host and device logs.",
        v2_producers=(),
        v2_note="never produced; the mapping rule does not return it",
        v1_producers=(),
        v1_note="never produced; the mapping rule does not return it",
    ),
)

_ROW_BY_VALUE: Final[dict[int, StatusInfo]] = {row.value: row for row in STATUS_TABLE}


# ---------------------------------------------------------------------------
# LLMStatusCode and the mapping rule
# ---------------------------------------------------------------------------


class LLMStatusCode(enum.IntEnum):
    """The vendor's status enum (v2 behaviour, used for both generations).

    Members compare equal to their ints. ``str()`` and f-strings give
    ``"LLMStatusCode.<NAME>"``. The declaration order is the vendor's; the values are
    checked against ``STATUS_TABLE`` when this module is imported.
    ``LLMStatusCode(x)`` raises ``ValueError`` for an int without a member; use
    ``map_status`` for values that come from the library.
    """

    LLM_SUCCESS = 0
    LLM_FAILED = 0xFFFFFFFF
    LLM_PARAM_INVALID = 0x5010B005
    LLM_WAIT_PROCESS_TIMEOUT = 0x5010B001
    LLM_KV_CACHE_NOT_EXIST = 0x5010B002
    LLM_REPEAT_REQUEST = 0x5010B003
    LLM_REQUEST_ALREADY_COMPLETED = 0x5010B004
    LLM_ENGINE_FINALIZED = 0x5010B006
    LLM_NOT_YET_LINK = 0x5010B007
    LLM_ALREADY_LINK = 0x5010B008
    LLM_LINK_FAILED = 0x5010B009
    LLM_UNLINK_FAILED = 0x5010B00A
    LLM_NOTIFY_PROMPT_UNLINK_FAILED = 0x5010B00B
    LLM_CLUSTER_NUM_EXCEED_LIMIT = 0x5010B00C
    LLM_PROCESSING_LINK = 0x5010B00D
    LLM_DEVICE_OUT_OF_MEMORY = 0x5010B00E
    LLM_PREFIX_ALREADY_EXIST = 0x5010B00F
    LLM_PREFIX_NOT_EXIST = 0x5010B010
    LLM_SEQ_LENOVERLIMIT = 0x5010B011
    LLM_NO_FREE_BLOCK = 0x5010B012
    LLM_BLOCKS_OUT_OF_MEMORY = 0x5010B013
    LLM_EXIST_LINK = 0x5010B018
    LLM_FEATURE_NOT_ENABLED = 0x5010B019
    LLM_TIMEOUT = 0x5010B01A
    LLM_LINK_BUSY = 0x5010B01B
    LLM_OUT_OF_MEMORY = 0x5010B01C
    LLM_DEVICE_MEM_ERROR = 507053
    LLM_SUSPECT_REMOTE_ERROR = 507057
    LLM_UNKNOWN_ERROR = -1

    def __str__(self) -> str:
        return f"{type(self).__name__}.{self.name}"

    def __format__(self, format_spec: str) -> str:
        # The vendor documents f"{code}" as the name (its __str__ override did that
        # on older Pythons); since Python 3.11 an IntEnum formats as its int unless
        # __format__ is overridden too.
        return format(str(self), format_spec)


def _check_enum_against_table() -> None:
    """Refuse to import if the members and the table rows disagree."""
    rows = {row.python_name: row.value for row in STATUS_TABLE if row.python_name}
    members = {member.name: member.value for member in LLMStatusCode}
    if rows != members:
        raise ImportError(
            "LLMStatusCode and STATUS_TABLE disagree: "
            f"only in the enum {sorted(members.items() - rows.items())}, "
            f"only in the table {sorted(rows.items() - members.items())}"
        )


_check_enum_against_table()

# The vendor's dictionary: every member except LLM_UNKNOWN_ERROR (status-codes.md §5).
_MAPPING: Final[dict[int, LLMStatusCode]] = {
    member.value: member
    for member in LLMStatusCode
    if member is not LLMStatusCode.LLM_UNKNOWN_ERROR
}


def map_status(raw: int) -> LLMStatusCode:
    """Map a native status to the member Python reports (the vendor rule, status-codes.md §5).

    An int with a member gives that member; any other int gives ``LLM_FAILED``:
    codes 20-23, raw ACL codes other than 507053/507057, leaked HCCL or HIXL values
    and ``-1``. The result is never ``LLM_UNKNOWN_ERROR``.

    Raises:
        TypeError: ``raw`` is not hashable (an int never raises).
    """
    return _MAPPING.get(raw, LLMStatusCode.LLM_FAILED)


# ---------------------------------------------------------------------------
# Lookup
# ---------------------------------------------------------------------------


def _parse_int(text: str) -> int | None:
    """The int a code written as hex ("0x5010B005") or decimal text stands for."""
    lowered = text.lower()
    try:
        if lowered.startswith(("0x", "-0x")):
            return int(lowered, 16)
        if lowered.lstrip("-").isdigit():
            return int(lowered, 10)
    except ValueError:
        return None
    return None


def info_for(code: int | str) -> StatusInfo:
    """Find the table row of a status code.

    ``code`` is an int (an ``LLMStatusCode`` member works too), a hex string
    (``"0x5010B005"``), a decimal string (``"1343270917"``) or a name in C++ or Python
    spelling, in any case (``"LLM_SEQ_LEN_OVER_LIMIT"``, ``"llm_seq_lenoverlimit"``,
    ``"FAILED"``, ``"LLMStatusCode.LLM_TIMEOUT"`` as printed in logs).

    Raises:
        TypeError: ``code`` is neither an int nor a str (``bool`` is refused too).
        ValueError: no row has that value or name; the message says what the
            vendor's mapping rule makes of an unknown value.
    """
    if isinstance(code, bool) or not isinstance(code, (int, str)):
        raise TypeError(
            f"a status code is an int or a str, not {type(code).__name__}"
        )
    parsed = int(code) if isinstance(code, int) else _parse_int(code.strip())
    if parsed is None:
        assert isinstance(code, str)
        name = code.strip().upper()
        if name.startswith("LLMSTATUSCODE."):
            name = name[len("LLMSTATUSCODE."):]
        for candidate in STATUS_TABLE:
            if name in (n.upper() for n in candidate.names):
                return candidate
        raise ValueError(
            f"unknown status code name {code!r}: no C++ or Python name in the "
            "table matches (see `python -m llm_datadist_ffi errors` for the list)"
        )
    value = parsed
    row = _ROW_BY_VALUE.get(value)
    if row is None:
        shown = f"0x{value:X} ({value})" if value >= 0 else str(value)
        raise ValueError(
            f"unknown status code {shown}: not an LLM-DataDist, ge or known ACL code; "
            "Python reports such a value as LLMStatusCode.LLM_FAILED"
        )
    return row


# ---------------------------------------------------------------------------
# Exceptions
# ---------------------------------------------------------------------------

_T = TypeVar("_T")


class _FromTable(Generic[_T]):
    """A read-only attribute of an exception, looked up in ``STATUS_TABLE``.

    On an instance it describes the instance's ``status_code``; on a class that stands
    for one code (``ParamInvalidError.recoverable``) it describes that code. The root
    and the family classes stand for no single code, so reading it from them raises
    ``AttributeError``.
    """

    def __init__(self, pick: Callable[[StatusInfo], _T], fallback: _T, doc: str) -> None:
        self._pick = pick
        self._fallback = fallback
        self.__doc__ = doc
        self._name = "?"

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    def __get__(self, instance: LLMException | None, owner: type | None = None) -> _T:
        if instance is None:
            code = getattr(owner, "code", None)
            if code is None:
                raise AttributeError(
                    f"{getattr(owner, '__name__', owner)} stands for no single status "
                    f"code; read {self._name} from an instance"
                )
            return self._pick(_ROW_BY_VALUE[int(code)])
        row = instance.status_info
        return self._fallback if row is None else self._pick(row)

    def __set__(self, instance: LLMException, value: object) -> NoReturn:
        raise AttributeError(f"{self._name} is read-only")


class _ClassCode:
    """The default of ``status_code``: the class's own code, else LLM_SUCCESS."""

    def __repr__(self) -> str:
        return "<class code; LLMStatusCode.LLM_SUCCESS for LLMException>"


_CLASS_CODE: Final = _ClassCode()

_NO_REMEDY = (
    "No documented remedy for this status code; keep the state for diagnosis and "
    "collect the host and device logs."
)

_EXCEPTION_BY_CODE: dict[LLMStatusCode, type[LLMException]] = {}


class LLMException(RuntimeError):
    """The vendor's exception for LLM-DataDist failures (docs/reference/status-codes.md §7.2).

    ``LLMException(*args, status_code=LLMStatusCode.LLM_SUCCESS)`` stores ``args`` as
    any exception does (``str(e)`` is the message) and keeps ``status_code`` exactly as
    passed, without conversion or validation; note the vendor's default is
    ``LLM_SUCCESS``. Both generations raise this one class.

    Project additions, all read-only: ``raw_status`` (the native value before the
    mapping rule, for diagnosis; given by the keyword ``raw_status``, else the
    ``status_code`` when that is an int), ``recoverable`` and ``remedy`` (from the
    table, for the instance's ``status_code``) and ``status_info`` (its table row).
    Subclasses stand for one code or a family of codes; ``exception_for`` picks them.
    """

    code: ClassVar[LLMStatusCode | None] = None
    """The status code a per-code subclass stands for; None for root and families."""

    recoverable = _FromTable(
        lambda row: row.recoverable,
        False,
        "Whether the vendor documents the failure as recoverable (docs/reference/status-codes.md §8.6).",
    )
    remedy = _FromTable(
        lambda row: row.remedy,
        _NO_REMEDY,
        "What to do about the failure, after the vendor documents.",
    )

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # Only this module's classes claim codes; client subclasses just inherit.
        code = cls.__dict__.get("code")
        if code is not None and cls.__module__ == __name__:
            if code in _EXCEPTION_BY_CODE:
                raise TypeError(
                    f"{cls.__name__} and {_EXCEPTION_BY_CODE[code].__name__} both "
                    f"claim {code}"
                )
            _EXCEPTION_BY_CODE[code] = cls

    def __init__(
        self,
        *args: object,
        status_code: object = _CLASS_CODE,
        raw_status: int | None = None,
    ) -> None:
        super().__init__(*args)
        if status_code is _CLASS_CODE:
            own_code = type(self).code
            status_code = LLMStatusCode.LLM_SUCCESS if own_code is None else own_code
        if raw_status is None and isinstance(status_code, int):
            raw_status = int(status_code)
        self._status_code = status_code
        self._raw_status = raw_status

    @property
    def status_code(self) -> LLMStatusCode:
        """The status code, exactly as passed to the constructor.

        Typed as ``LLMStatusCode`` because that is what the package always passes;
        client code may pass anything (the vendor does not check), and gets it back.
        """
        return self._status_code  # type: ignore[return-value]

    @property
    def raw_status(self) -> int | None:
        """The native value before the mapping rule (None if not an int).

        It differs from ``status_code`` for codes 20-23 and raw ACL codes, which
        Python reports as ``LLM_FAILED``.
        """
        return self._raw_status

    @property
    def status_info(self) -> StatusInfo | None:
        """The table row of ``status_code``, or None for a value not in the table."""
        code = self._status_code
        if isinstance(code, int) and not isinstance(code, bool):
            return _ROW_BY_VALUE.get(int(code))
        return None


class FailedError(LLMException):
    """``LLM_FAILED``: a generic failure, including every value without a member."""

    code = LLMStatusCode.LLM_FAILED


class ParamInvalidError(LLMException):
    """``LLM_PARAM_INVALID``: an argument broke a rule; the message names it."""

    code = LLMStatusCode.LLM_PARAM_INVALID


class KvCacheNotExistError(LLMException):
    """``LLM_KV_CACHE_NOT_EXIST``: the named KV cache or key does not exist."""

    code = LLMStatusCode.LLM_KV_CACHE_NOT_EXIST


class RepeatRequestError(LLMException):
    """``LLM_REPEAT_REQUEST``: the same request (or cluster) was given twice."""

    code = LLMStatusCode.LLM_REPEAT_REQUEST


class RequestAlreadyCompletedError(LLMException):
    """``LLM_REQUEST_ALREADY_COMPLETED``: legacy, no producer."""

    code = LLMStatusCode.LLM_REQUEST_ALREADY_COMPLETED


class EngineFinalizedError(LLMException):
    """``LLM_ENGINE_FINALIZED``: legacy, no producer."""

    code = LLMStatusCode.LLM_ENGINE_FINALIZED


class SeqLenOverLimitError(LLMException):
    """``LLM_SEQ_LENOVERLIMIT`` (C++ ``LLM_SEQ_LEN_OVER_LIMIT``): legacy, no producer."""

    code = LLMStatusCode.LLM_SEQ_LENOVERLIMIT


class FeatureNotEnabledError(LLMException):
    """``LLM_FEATURE_NOT_ENABLED``: the feature is off or this API/backend lacks it."""

    code = LLMStatusCode.LLM_FEATURE_NOT_ENABLED


class UnknownError(LLMException):
    """``LLM_UNKNOWN_ERROR`` (-1): never produced by the mapping rule; for clients."""

    code = LLMStatusCode.LLM_UNKNOWN_ERROR


class LinkError(LLMException):
    """Family: the link between two clusters is missing, present, busy or failed."""


class NotYetLinkError(LinkError):
    """``LLM_NOT_YET_LINK``: no usable link to the remote cluster."""

    code = LLMStatusCode.LLM_NOT_YET_LINK


class AlreadyLinkError(LinkError):
    """``LLM_ALREADY_LINK``: the clusters are linked already."""

    code = LLMStatusCode.LLM_ALREADY_LINK


class LinkFailedError(LinkError):
    """``LLM_LINK_FAILED``: linking with the remote cluster failed."""

    code = LLMStatusCode.LLM_LINK_FAILED


class UnlinkFailedError(LinkError):
    """``LLM_UNLINK_FAILED``: unlinking from the remote cluster failed."""

    code = LLMStatusCode.LLM_UNLINK_FAILED


class NotifyPromptUnlinkFailedError(LinkError):
    """``LLM_NOTIFY_PROMPT_UNLINK_FAILED``: the Prompt side was not told to unlink."""

    code = LLMStatusCode.LLM_NOTIFY_PROMPT_UNLINK_FAILED


class ClusterNumExceedLimitError(LinkError):
    """``LLM_CLUSTER_NUM_EXCEED_LIMIT``: more than 16 clusters in one call (v1)."""

    code = LLMStatusCode.LLM_CLUSTER_NUM_EXCEED_LIMIT


class ProcessingLinkError(LinkError):
    """``LLM_PROCESSING_LINK``: another link or unlink is in progress."""

    code = LLMStatusCode.LLM_PROCESSING_LINK


class ExistLinkError(LinkError):
    """``LLM_EXIST_LINK``: links still exist, so the role cannot be switched."""

    code = LLMStatusCode.LLM_EXIST_LINK


class LinkBusyError(LinkError):
    """``LLM_LINK_BUSY``: two conflicting calls ran on one link at the same time."""

    code = LLMStatusCode.LLM_LINK_BUSY


class LLMTimeoutError(LLMException):
    """Family: a wait expired. Not a builtin ``TimeoutError`` (docs/reference/status-codes.md §8.5)."""


class WaitProcessTimeoutError(LLMTimeoutError):
    """``LLM_WAIT_PROCESS_TIMEOUT`` (C++ ``LLM_WAIT_PROC_TIMEOUT``): v1 timeouts."""

    code = LLMStatusCode.LLM_WAIT_PROCESS_TIMEOUT


class ProcessingTimeoutError(LLMTimeoutError):
    """``LLM_TIMEOUT``: processing timed out (v2 transfer and link timeouts)."""

    code = LLMStatusCode.LLM_TIMEOUT


class LLMMemoryError(LLMException):
    """Family: memory exhausted or faulty. Not a builtin ``MemoryError`` (status-codes.md §8.5)."""


class DeviceOutOfMemoryError(LLMMemoryError):
    """``LLM_DEVICE_OUT_OF_MEMORY``: device memory is exhausted (v1)."""

    code = LLMStatusCode.LLM_DEVICE_OUT_OF_MEMORY


class NoFreeBlockError(LLMMemoryError):
    """``LLM_NO_FREE_BLOCK``: legacy, no producer."""

    code = LLMStatusCode.LLM_NO_FREE_BLOCK


class BlocksOutOfMemoryError(LLMMemoryError):
    """``LLM_BLOCKS_OUT_OF_MEMORY``: legacy, no producer."""

    code = LLMStatusCode.LLM_BLOCKS_OUT_OF_MEMORY


class OutOfMemoryError(LLMMemoryError):
    """``LLM_OUT_OF_MEMORY``: the memory pool (or system memory) is exhausted."""

    code = LLMStatusCode.LLM_OUT_OF_MEMORY


class DeviceMemError(LLMMemoryError):
    """``LLM_DEVICE_MEM_ERROR`` (ACL 507053): an uncorrectable device memory error."""

    code = LLMStatusCode.LLM_DEVICE_MEM_ERROR


class SuspectRemoteError(LLMMemoryError):
    """``LLM_SUSPECT_REMOTE_ERROR`` (ACL 507057): a suspected remote memory fault."""

    code = LLMStatusCode.LLM_SUSPECT_REMOTE_ERROR


class PrefixError(LLMException):
    """Family: prefix caches (no producer is known in either generation)."""


class PrefixAlreadyExistError(PrefixError):
    """``LLM_PREFIX_ALREADY_EXIST``: a prefix with this id is loaded already."""

    code = LLMStatusCode.LLM_PREFIX_ALREADY_EXIST


class PrefixNotExistError(PrefixError):
    """``LLM_PREFIX_NOT_EXIST``: no prefix with this id is loaded."""

    code = LLMStatusCode.LLM_PREFIX_NOT_EXIST


EXCEPTION_CLASSES: Final[Mapping[LLMStatusCode, type[LLMException]]] = MappingProxyType(
    _EXCEPTION_BY_CODE
)
"""The class that stands for each member: every member except ``LLM_SUCCESS``."""


def exception_class_for(code: int) -> type[LLMException]:
    """The exception class for a status as Python reports it.

    ``code`` goes through the mapping rule first, so values without a member give
    ``FailedError``. ``LLM_SUCCESS`` gives plain ``LLMException``.

    Raises:
        TypeError: ``code`` is not hashable (an int never raises).
    """
    return _EXCEPTION_BY_CODE.get(map_status(code), LLMException)


def exception_for(raw: int, message: str) -> LLMException:
    """The exception for a native status: what the checked-call path raises.

    Returns an instance of the subclass for ``map_status(raw)`` with ``args ==
    (message,)``, ``status_code == map_status(raw)`` and ``raw_status == raw``.
    ``message`` is used as given (the caller writes the vendor-style text). Callers
    pass non-zero statuses; a zero gives a plain ``LLMException`` carrying
    ``LLM_SUCCESS``, as the vendor's own default does.

    Raises:
        TypeError: ``raw`` is not hashable (an int never raises).
    """
    status_code = map_status(raw)
    cls = _EXCEPTION_BY_CODE.get(status_code, LLMException)
    return cls(message, status_code=status_code, raw_status=int(raw))


# ---------------------------------------------------------------------------
# Status
# ---------------------------------------------------------------------------


class Status:
    """The vendor's status wrapper (status-codes.md §7.3); exported for compatibility only.

    ``Status(status)`` keeps ``status`` as passed; ``is_ok()`` is true when it equals
    ``LLM_SUCCESS``, so a plain ``0`` counts as OK. No vendor call returns one.
    """

    def __init__(self, status: object) -> None:
        self._status_code = status

    @property
    def status_code(self) -> LLMStatusCode:
        """The status, exactly as passed."""
        return self._status_code  # type: ignore[return-value]

    def is_ok(self) -> bool:
        """True when the status equals ``LLMStatusCode.LLM_SUCCESS``.

        Raises:
            whatever the stored object's ``__eq__`` raises (never for an int).
        """
        return bool(self._status_code == LLMStatusCode.LLM_SUCCESS)

    def __repr__(self) -> str:
        return f"Status({self._status_code!r})"
