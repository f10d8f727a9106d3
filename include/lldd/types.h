/* Types of the flat C ABI over llm_datadist::LlmDataDist (docs/reference/cpp-api.md §4, §5).
 *
 * Directive-free declaration fragment (cffi cdef and C/C++ alike). Every struct
 * mirrors one vendor struct field for field, with fixed-width members; where the
 * vendor uses std::vector or std::pair the ABI uses a pointer and a count, or two
 * members. Pointers in input structs are borrowed for the duration of one call.
 */

typedef struct lldd_engine lldd_engine;     /* one llm_datadist::LlmDataDist */

enum {
    LLDD_ABI_VERSION = 1
};

/* llm_datadist::LlmRole (int32_t); 4 (kEnd) and anything else is invalid. */
enum {
    LLDD_ROLE_PROMPT  = 1,
    LLDD_ROLE_DECODER = 2,
    LLDD_ROLE_MIX     = 3
};

/* llm_datadist::CachePlacement (uint32_t). */
enum {
    LLDD_PLACEMENT_HOST   = 0,
    LLDD_PLACEMENT_DEVICE = 1
};

/* Backend capability bits returned by lldd_capabilities(). */
enum {
    LLDD_CAP_REGISTER       = 0x01,  /* RegisterKvCache / UnregisterKvCache work      */
    LLDD_CAP_ALLOCATE       = 0x02,  /* AllocateCache / DeallocateCache with a pool    */
    LLDD_CAP_COPY           = 0x04,  /* CopyKvCache / CopyKvBlocks with a pool         */
    LLDD_CAP_CROSS_PROCESS  = 0x08,  /* links between processes                        */
    LLDD_CAP_MOCK_CONTROL   = 0x10,  /* lldd_mock_* functions (fault injection, ...)   */
    LLDD_CAP_EXT_KEYS       = 0x20   /* lldd_ext_* functions (vendor Python features)  */
};

/* One entry of an option map (std::map<AscendString, AscendString>). Keys are
 * compared as byte strings; a repeated key keeps its last value. */
typedef struct lldd_option {
    const char *key;
    const char *value;
} lldd_option;

/* llm_datadist::IpInfo. */
typedef struct lldd_ip_info {
    const char *ip;                 /* IPv4 dotted string; NULL counts as empty */
    uint16_t port;
    uint16_t reserved0;
    uint32_t reserved1;
} lldd_ip_info;

/* llm_datadist::ClusterInfo. */
typedef struct lldd_cluster_info {
    uint64_t remote_cluster_id;
    int32_t remote_role_type;       /* logged only */
    uint32_t reserved0;
    const lldd_ip_info *local_ip_infos;
    size_t num_local_ip_infos;
    const lldd_ip_info *remote_ip_infos;
    size_t num_remote_ip_infos;
} lldd_cluster_info;

/* llm_datadist::CacheDesc. shape is the shape of ONE tensor; shape[0] is the
 * batch or block count. */
typedef struct lldd_cache_desc {
    uint32_t placement;             /* LLDD_PLACEMENT_* */
    uint32_t num_tensors;
    int32_t data_type;              /* ge::DataType value */
    uint32_t reserved0;
    const int64_t *shape;
    size_t shape_len;
} lldd_cache_desc;

/* llm_datadist::Cache as a caller passes it in. Pulls read cache_id only; pushes
 * also read cache_desc.placement and cache_desc.num_tensors (docs/reference/cpp-api.md §5). */
typedef struct lldd_cache {
    int64_t cache_id;
    const uint64_t *tensor_addrs;
    size_t num_tensor_addrs;
    lldd_cache_desc cache_desc;
} lldd_cache;

/* llm_datadist::CacheIndex: a cache on a remote cluster. */
typedef struct lldd_cache_index {
    uint64_t cluster_id;
    int64_t cache_id;
    uint32_t batch_index;
    uint32_t reserved0;
} lldd_cache_index;

/* llm_datadist::KvCacheExtParam. Layer pairs are INCLUSIVE; {-1,-1} is the
 * default (all layers). tensor_num_per_layer is wider than the vendor's uint8_t
 * so that a value the C++ type cannot hold is rejected, not truncated. */
typedef struct lldd_ext_param {
    int32_t src_layer_first;
    int32_t src_layer_second;
    int32_t dst_layer_first;
    int32_t dst_layer_second;
    uint32_t tensor_num_per_layer;
    uint32_t reserved0;
} lldd_ext_param;
