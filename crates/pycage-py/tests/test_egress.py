"""pycage.Runtime(allow_net=[...]): a sandboxed run reaches real HTTP and
HTTPS servers on 127.0.0.1 through pycage's proxy, and nothing else; the
keyword is checked, and refused under process isolation."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import pytest

import pycage
from conftest import unavailable

FIXTURES = os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "pycage-runtime", "tests", "fixtures", "egress"
)


@pytest.fixture(scope="module")
def servers():
    child = subprocess.Popen(
        [sys.executable, os.path.join(FIXTURES, "server.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        _, http, https = child.stdout.readline().split()
        yield int(http), int(https)
    finally:
        child.kill()
        child.wait()


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"allow_net": "example.com"}, TypeError, "allow_net must be a list of 'HOST[:PORT]' strings, got str"),
        ({"allow_net": [443]}, TypeError, "allow_net items must be 'HOST[:PORT]' strings, got int"),
        ({"allow_net": ["https://example.com"]}, pycage.ConfigError, "is a URL; write HOST or HOST:PORT"),
        ({"allow_net": ["example.com:0"]}, pycage.ConfigError, "invalid port"),
        ({"max_net_bytes": 0}, pycage.ConfigError, "max_net_bytes must be at least 1 bytes"),
        (
            {"allow_net": ["example.com"]},
            pycage.ConfigError,
            "allow_net cannot be enforced under process isolation",
        ),
    ],
)
def test_bad_arguments(kwargs, error, message):
    with pytest.raises(error) as e:
        pycage.Runtime(isolation="process", python=sys.executable, **kwargs)
    assert message in str(e.value)


def test_only_the_allow_list_is_reachable(servers, tmp_path):
    http, https = servers
    ca = tmp_path / "ca.pem"
    shutil.copy(os.path.join(FIXTURES, "ca.pem"), ca)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed.listen()
    other = closed.getsockname()[1]
    try:
        rt = pycage.Runtime(
            python=sys.executable,
            allow_net=[f"127.0.0.1:{http}", f"127.0.0.1:{https}"],
            allow_read=[ca],
        )
    except pycage.SandboxUnavailableError as e:
        unavailable(f"sandbox isolation is unavailable here: {e}")
    with rt:
        assert rt.config["allow_net"] == [f"127.0.0.1:{http}", f"127.0.0.1:{https}"]
        program = f"""
import json, ssl, urllib.request
ctx = ssl.create_default_context(cafile={str(ca)!r})
plain = json.loads(urllib.request.urlopen('http://127.0.0.1:{http}/p', timeout=20).read())
secure = json.loads(urllib.request.urlopen('https://127.0.0.1:{https}/s', context=ctx, timeout=20).read())
try:
    urllib.request.urlopen('http://127.0.0.1:{other}/', timeout=20)
    refused = 'reached'
except Exception as e:
    refused = str(e)
return [plain['path'], secure['tls'], refused]
"""
        result = rt.run(program)
        assert result.ok, result.error
        assert result.value == [
            "/p",
            True,
            f"HTTP Error 403: pycage egress: port {other} of 127.0.0.1 is not on the allow-list"
            f" (allowed: {http}, {https})",
        ]
    closed.setblocking(False)
    with pytest.raises(BlockingIOError):
        closed.accept()
    closed.close()
