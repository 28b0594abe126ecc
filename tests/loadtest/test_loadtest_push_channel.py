"""The batched publishers' driver: its one greenlet reports each request, confirmed or timed out, once.

The driver runs under gevent, so it is exercised in a child process that
patches itself as Locust's workers do, against a stand-in backbone on
127.0.0.1 that acknowledges KEEPALIVEs and CONFIRMs (or ignores) PUSHes.
"""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

CHILD = r"""
from gevent import monkey; monkey.patch_all()
import json, socket, sys
import gevent
from fyrehose.protocol import codec
from fyrehose.loadtest import users

confirming = sys.argv[1] == "confirm"
backbone = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
backbone.bind(("127.0.0.1", 0))
backbone.settimeout(5.0)

def serve():
    seq = 0
    for _ in range(200):
        data, source = backbone.recvfrom(65536)
        if data[0] == codec.PUSH:
            if confirming:
                confirms = []
                for _, _, tag in codec.scan(data, codec.PUSH)[0]:
                    seq += 1
                    confirms.append(codec.encode_confirm(tag, seq))
                backbone.sendto(b"".join(confirms), source)
            continue
        for frame in codec.decode(data):
            if isinstance(frame, codec.Keepalive):
                backbone.sendto(codec.encode(codec.KeepaliveAck(frame.token)), source)

gevent.spawn(serve)
fired, counted = [], []

class Request:
    def fire(self, **event):
        fired.append([event["name"], event["response_length"], type(event["exception"]).__name__])

class Events:
    request = Request()

class Environment:
    events = Events()

class Load:
    def count_push(self, phase, response_ms, failed, messages):
        counted.append([phase, failed, messages])

users.Publisher.load = Load()
channel = users.PushChannel(backbone.getsockname(), 0.3, Environment(), "publish x5")
number = channel.publish([b"x" * 20] * 5, 3)
channel.wait(number)
channel.wait(number)  # reported already: returns at once, reports nothing more
print(json.dumps({"fired": fired, "counted": counted}))
"""


def run_child(mode: str) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, mode], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize(("mode", "exception", "failed"), [("confirm", "NoneType", False),
                                                           ("ignore", "PublishTimeout", True)])
def test_the_driver_reports_each_request_once_when_it_finishes(mode, exception, failed):
    reported = run_child(mode)
    assert reported["fired"] == [["publish x5", 100, exception]]  # one Locust PUSH for the 5 messages
    assert reported["counted"] == [[3, failed, 5]]  # in the phase it was published in
