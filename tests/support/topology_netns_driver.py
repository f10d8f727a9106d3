"""Runs a Prompt and a Decoder in two network namespaces joined by a veth pair.

Started by tests/tools/test_testing_netns.py as ``unshare -Urn python topology_netns_driver.py``:
this process is then in a new user and network namespace ("A"), with the rights to
configure it. It creates a second network namespace ("B", held by a ``sleep``), a veth
pair 10.200.0.1 (A) – 10.200.0.2 (B), and a topology whose Prompt listens in A and
whose Decoder is started in B through ``nsenter``; the Decoder pulls from the Prompt
across the link. Prints one JSON line: the Decoder's bytes after the pull and the
network namespace of each engine process.
"""
from __future__ import annotations

import json
import os
import subprocess
import time


import topology_support as ts
from llm_datadist_ffi.testing.topology import DECODER, PROMPT, EngineSpec, Topology


#: the network tools run without the sanitizer runtime that CI preloads into the tests
#: (it is for the mock; LeakSanitizer would fail the tools for their own leaks)
TOOL_ENV = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}


def sh(*command: str) -> None:
    subprocess.run(command, check=True, capture_output=True, env=TOOL_ENV)


def main() -> None:
    holder = subprocess.Popen(["unshare", "-n", "sleep", "600"], env=TOOL_ENV)
    try:
        pid = str(holder.pid)
        enter = ["nsenter", "-t", pid, "-n", "--"]
        for _ in range(100):        # until unshare has made the namespace and exec'd sleep
            if os.readlink(f"/proc/{pid}/ns/net") != os.readlink("/proc/self/ns/net"):
                break
            time.sleep(0.02)
        sh("ip", "link", "set", "lo", "up")
        sh("ip", "link", "add", "lldd0", "type", "veth", "peer", "name", "lldd1", "netns", pid)
        sh("ip", "addr", "add", "10.200.0.1/24", "dev", "lldd0")
        sh("ip", "link", "set", "lldd0", "up")
        sh(*enter, "ip", "link", "set", "lo", "up")
        sh(*enter, "ip", "addr", "add", "10.200.0.2/24", "dev", "lldd1")
        sh(*enter, "ip", "link", "set", "lldd1", "up")
        specs = [EngineSpec(PROMPT, 1, host="10.200.0.1"),
                 EngineSpec(DECODER, 2, host="10.200.0.2", launcher=enter)]
        with Topology.start(specs=specs, startup_timeout=30) as topo:
            prompt, decoder = topo.prompts[0], topo.decoders[0]
            src_id, dst_id = prompt.call(ts.register, 5), decoder.call(ts.register, -1)
            decoder.call(ts.link, prompt.cluster_id)
            pulled = decoder.call(ts.pull_blocks, prompt.cluster_id, src_id, dst_id, [1, 6], [0, 3])
            namespaces = [p.call(os.readlink, "/proc/self/ns/net") for p in (prompt, decoder)]
        print(json.dumps({"pulled": pulled.hex(), "namespaces": namespaces}))
    finally:
        holder.kill()
        holder.wait()


if __name__ == "__main__":
    main()
