/* The wire protocol of the mock's links: the message header, the message types, the
 * bodies of the handshake and the limits a peer's message is held to. The framing
 * (sending and receiving a message) is transport.h; the bodies of the data plane live
 * beside what they describe (cache_wire in core/cache_table.h, resolve_req in
 * core/resolve.h, release_req in core/keys.h, the identity channel's in wire/peer_id.h).
 * tests/abi/test_wire_protocol.py pins the tests' own encoder (tests/support/
 * wire_support.py) and the fuzzer's reading (tests/wire_fuzz/wire.py) to this file.
 *
 * The wire format is host-endian and host-aligned on purpose: both ends of a mock
 * link always run on the same machine (loopback), usually from the same build.
 * Every message starts with a msg_hdr whose magic and version are checked; a peer
 * that speaks anything else is treated as a broken connection.
 *
 * Connections of one link (wire/engine_link.c tells the whole story):
 *   c1  client -> server listener: HELLO; then the client's requests to the server
 *   c2  client -> server listener: REVERSE; then the server's requests to the client
 *   cN  a fresh connection for a non-forced unlink: DISCONNECT
 * On c1 and c2 one side only asks and the other only answers, one request at a
 * time (transfers over one link are serialized), so no request ids are needed.
 */
#ifndef LLDD_MOCK_PROTOCOL_H
#define LLDD_MOCK_PROTOCOL_H

#include <stdint.h>

#define PROTO_MAGIC 0x4C4C4444u   /* "LLDD" */
#define PROTO_VERSION 2u   /* 2: no pids or addresses in handshakes; identity channel; secret */

enum msg_type {
    MSG_HELLO = 1,          /* a = HELLO_*, b = communicator key; body hello_body -> REPLY */
    MSG_HELLO_REPLY,        /* status; body hello_body + reply_text                          */
    MSG_REVERSE,            /* a = token, b = client cluster id; body reverse_body
                                                                      -> MSG_REVERSE_REPLY */
    MSG_REVERSE_REPLY,      /* status; body reply_text                                       */
    MSG_DISCONNECT,         /* a = client cluster id, b = expected server cluster id,
                               count = DISCONNECT_STRICT_IDS or 0 -> MSG_DISCONNECT_CHALLENGE */
    MSG_DISCONNECT_REPLY,   /* status; a = server cluster id; body reply_text               */
    MSG_PIN,                /* a = cache id, b = table watermark (0: take it now)           */
    MSG_PIN_REPLY,          /* status; a = watermark; body cache_wire + addrs, or reply_text */
    MSG_UNPIN,              /* a = cache id; no reply                                        */
    MSG_READ,               /* a = cache id, count regions; body wire_region[count]          */
    MSG_READ_REPLY,         /* status; then payload_len bytes of data                        */
    MSG_WRITE,              /* a = cache id, count regions; body regions then the data       */
    MSG_WRITE_REPLY,        /* status                                                        */
    MSG_RESOLVE,            /* body resolve_req (core/resolve.h): a source by key or id, pinned */
    MSG_RESOLVE_REPLY,      /* status; body resolve_reply + addrs, or reply_text             */
    MSG_RELEASE,            /* body release_req + tensor indexes: unpin, then release a key  */
    MSG_RELEASE_REPLY,      /* status                                                        */
    MSG_PIN_ADDR,           /* a = address, b = length: the cache tensor holding the range   */
    MSG_PIN_ADDR_REPLY,     /* status; a = tensor; body cache_wire + addrs, or reply_text    */
    MSG_IDENTIFY,           /* identity channel (peer_id.h): body id_request                 */
    MSG_IDENTIFY_REPLY,     /* status 0: the claim is accepted                               */
    MSG_DISCONNECT_CHALLENGE, /* body: a fresh nonce (16 bytes)                 -> PROOF      */
    MSG_DISCONNECT_PROOF,   /* count proofs of 32 bytes: one per link token the client holds,
                               HMAC-SHA-256(token, "lldd-disconnect" nonce) -> MSG_DISCONNECT_REPLY */
    MSG_MAP,                /* identity channel (peer_id.h): body map_request -> CHALLENGE   */
    MSG_MAP_REPLY,          /* status; count map_desc, the chunks' memfds as SCM_RIGHTS      */
    MSG_MAP_CHALLENGE,      /* a = address, b = length of a fresh nonce in the listener       */
    MSG_MAP_PROOF,          /* body: the nonce, read with process_vm_readv -> MSG_MAP_REPLY  */
    MSG_TABLE,              /* identity channel (peer_id.h): body map_request (from = 0)
                               -> MSG_MAP_CHALLENGE, then MSG_MAP_PROOF -> MSG_TABLE_REPLY     */
    MSG_TABLE_REPLY         /* status; a = id mark, b = bind mark (semantics.md §9.7); the published
                               table's and the link's pin page's memfds as SCM_RIGHTS       */
};

enum { DISCONNECT_MAX_PROOFS = 4096 };

/* MSG_HELLO flags (msg_hdr.a). A client that already holds a link to the peer still
 * connects and greets it (a refused or silent peer must be reported as such), but
 * only asks for the identity checks: the peer answers and keeps its state (PR-42). */
enum { HELLO_LINK = 0, HELLO_CHECK_ONLY = 1 };

/* MSG_DISCONNECT flag (msg_hdr.count): the client refuses a cluster id mismatch
 * (PR-28, strict mode), so the server must not drop anything on one. */
enum { DISCONNECT_STRICT_IDS = 1 };

typedef struct msg_hdr {
    uint32_t magic;
    uint16_t type;
    uint16_t version;
    uint32_t status;
    uint32_t count;
    uint64_t a;
    uint64_t b;
    uint64_t payload_len;
} msg_hdr;

/* Transfer modes (docs/reference/semantics.md §1.3, §1.4): both ends of a link must agree. A v1 engine
 * has a mode of its own (its pulls are answered by the prompt side). */
enum { MODE_DIRECT = 1, MODE_SERVER_ASSISTED = 2, MODE_V1 = 3 };

typedef struct hello_body {
    uint32_t mode;
    uint32_t timeout_ms;           /* how long the client waits for the handshake */
    uint64_t cluster_id;           /* the sender's cluster id */
    uint64_t expected_cluster_id;  /* client: the remote_cluster_id it asked for */
    uint64_t instance;             /* client: a random id of the sending engine (a link to itself);
                                      0 in replies */
    uint64_t serial;               /* the sender engine's serial in its process (used only for a
                                      peer the kernel proved to be this process) */
    int64_t next_cache_id;         /* the sender's id counter at link time (PR-32) */
    uint64_t token;                /* names the link on both sides; random, never reused */
    uint32_t hixl;                 /* the sender uses llm.TransferBackend "hixl" */
    uint32_t strict_ids;           /* client: refuse a cluster id mismatch (PR-28 in strict mode) */
    uint32_t auth;                 /* 1: proof carries the shared secret's proof */
    uint32_t reserved;
    uint8_t nonce[16];             /* fresh per handshake and side */
    uint8_t proof[32];             /* HMAC-SHA-256 proof of the shared secret (peer_id.h) */
    char id_channel[40];           /* reply: the listener's identity channel ("" = none) */
} hello_body;

/* The body of REVERSE. */
enum { REVERSE_REPLACES = 4 };

typedef struct reverse_body {
    uint8_t replaces[4][32];       /* proofs (token_proof, "lldd-replace", over the listener's HELLO
                                      nonce) of the client's other links the listener's side may be:
                                      a live link with one of those tokens may be replaced (PR-28
                                      keying, concurrent jobs of one call); zeros = none */
    uint8_t proof[32];             /* the shared secret's proof, zeros when none is in use */
} reverse_body;

typedef struct reply_text {
    char text[240];
} reply_text;

/* One byte range of one tensor of a pinned cache (socket data path). */
typedef struct wire_region {
    uint32_t tensor;
    uint32_t reserved;
    uint64_t offset;
    uint64_t len;
} wire_region;

enum { WIRE_MAX_REGIONS = 1024 };

/* The most tensors a peer's cache description may name (a reply naming more is a broken
 * connection: nothing is allocated for it). */
enum { WIRE_MAX_TENSORS = 1 << 16 };

#endif /* LLDD_MOCK_PROTOCOL_H */
