"""Stand-in ``LLMDataDist``: one engine per process, an atexit finalize, v1 imported
inside ``init`` in v1 mode, link calls that report statuses."""
import atexit

from llm_datadist import llm_datadist_wrapper as _w
from llm_datadist.status import LLMException, LLMStatusCode, check_status, to_status
from llm_datadist.v2.cache_manager import CALLS, CacheManager


class LLMDataDist:
    llm_engine_instance = None

    def __init__(self, role, cluster_id):
        self._role = role
        self._cluster_id = cluster_id
        self._cache_manager = None
        self._kv_cache_manager = None
        self._initialized = False

    def init(self, options):
        if not isinstance(options, dict):
            raise TypeError("options must be a dict")
        if LLMDataDist.llm_engine_instance is not None:
            raise LLMException("Cannot init multiple LLMDataDists", status_code=LLMStatusCode.LLM_FAILED)
        CALLS.append(("init", (options,), {}))
        check_status(_w.initialize_v2(self._cluster_id, options), "[LLMDataDist.init]")
        if options.get("llm.EnableCacheManager") == "1":
            self._cache_manager = CacheManager(options)
        else:
            from llm_datadist_v1.kv_cache_manager import KvCacheManager

            self._kv_cache_manager = KvCacheManager(self._role)
        LLMDataDist.llm_engine_instance = self
        self._initialized = True

    @property
    def cache_manager(self):
        if self._cache_manager is None:
            raise LLMException("not in CacheManager mode", status_code=LLMStatusCode.LLM_FEATURE_NOT_ENABLED)
        return self._cache_manager

    @property
    def kv_cache_manager(self):
        if self._kv_cache_manager is None:
            raise LLMException("not in v1 mode", status_code=LLMStatusCode.LLM_FEATURE_NOT_ENABLED)
        return self._kv_cache_manager

    @property
    def cluster_id(self):
        return self._cluster_id

    def finalize(self):
        CALLS.append(("finalize", (), {}))
        if self._initialized:
            _w.finalize()
            self._initialized = False
            LLMDataDist.llm_engine_instance = None

    def link(self, comm_name, cluster_rank_info, rank_table):
        CALLS.append(("link", (comm_name, cluster_rank_info, rank_table), {}))
        self.cache_manager.set_is_call_linked()
        check_status(_w.native("link"), "[link]")
        return 1

    def unlink(self, comm_id):
        CALLS.append(("unlink", (comm_id,), {}))

    def query_register_mem_status(self, comm_id):
        return 0

    def link_clusters(self, clusters, timeout=3000):
        CALLS.append(("link_clusters", (clusters, timeout), {}))
        raw = _w.native("link_clusters")
        code = to_status(raw)
        return code, [code for _ in clusters]

    def unlink_clusters(self, clusters, timeout=3000, force=False):
        CALLS.append(("unlink_clusters", (clusters, timeout, force), {}))
        code = to_status(_w.native("unlink_clusters"))
        return code, [code for _ in clusters]

    def switch_role(self, role, switch_options=None):
        CALLS.append(("switch_role", (role, switch_options), {}))

    def check_link_status(self, remote_cluster_id):
        CALLS.append(("check_link_status", (remote_cluster_id,), {}))


def _shutdown_handler():
    if LLMDataDist.llm_engine_instance is not None:
        LLMDataDist.llm_engine_instance.finalize()


atexit.register(_shutdown_handler)
