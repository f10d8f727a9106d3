"""A topology across two network namespaces: what two hosts look like on one machine."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

import topology_support as ts
from paths import SUPPORT

pytestmark = pytest.mark.mock_only(reason="the engines of the topology are the mock's")

DRIVER = SUPPORT / "topology_netns_driver.py"


def missing_rights() -> str:
    """Why this process cannot make network namespaces ("" when it can)."""
    tools = [t for t in ("unshare", "nsenter", "ip") if shutil.which(t) is None]
    if tools:
        return f"needs the commands {', '.join(tools)} (util-linux, iproute2)"
    # the capability is checked by using it: a user namespace gives CAP_NET_ADMIN over a
    # new network namespace where the kernel allows unprivileged user namespaces
    # (without the sanitizer runtime CI preloads for the mock: it is not for the tools)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    probe = subprocess.run(["unshare", "-Urn", "ip", "link", "add", "probe0", "type", "veth", "peer", "name",
                            "probe1"], capture_output=True, text=True, timeout=30, env=env)
    if probe.returncode != 0:
        return ("needs CAP_NET_ADMIN in a new user and network namespace (unshare -Urn), which this "
                f"process may not create: {probe.stderr.strip() or 'exit code %d' % probe.returncode}")
    return ""


def test_a_decoder_pulls_from_a_prompt_in_another_network_namespace() -> None:
    reason = missing_rights()
    if reason:
        pytest.skip(reason)
    result = subprocess.run(["unshare", "-Urn", sys.executable, str(DRIVER)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    expected = ts.content(-1)
    expected[[0, 3]] = ts.content(5)[[1, 6]]
    assert bytes.fromhex(report["pulled"]) == expected.tobytes()
    prompt_ns, decoder_ns = report["namespaces"]
    assert prompt_ns != decoder_ns and all(ns.startswith("net:[") for ns in (prompt_ns, decoder_ns))


def test_the_skip_reason_names_the_missing_commands(monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert missing_rights() == "needs the commands unshare, nsenter, ip (util-linux, iproute2)"
