"""Authentication end to end: clients and the cache drop forged, tampered and replayed messages; the auth CLI."""
from __future__ import annotations

import json

from fyrehose import Client
from fyrehose.runtime.credentials import load_auth_database, save_auth_database
from fyrehose.subjects.auth import AuthDatabase, Credentials
from fyrehose.subjects.envelope import MAGIC, Envelope, decode, encode

from auth_support import SERVICE, Attacker, genuine_bytes, users
from support import CacheProcess, run_cli, take_until, wait_until


def test_subscriber_drops_forged_tampered_replayed_and_unsigned(backbone):
    db = users("paul", "sam")
    attacker = Attacker(backbone)
    with Client(backbone.addr, auth=Credentials(db, "paul", SERVICE), session_interval=0.5) as paul, \
            Client(backbone.addr, auth=Credentials(db, "sam", SERVICE), session_interval=0.5) as sam, \
            Client(backbone.addr) as spy:
        wait_until(lambda: sam.auth.trusts(paul.session.name) and paul.auth.trusts(sam.session.name),
                   what="the trust exchange between paul and sam")
        listen = spy.subscribe()
        quotes, everything = sam.subscribe("q.>"), sam.subscribe()
        paul.publish(b"genuine 1", subject="q.x")
        genuine = genuine_bytes(listen, b"genuine 1")

        attacker.push(genuine)                                        # replayed
        attacker.push(genuine[:-1] + b"!")                            # tampered data
        attacker.push(genuine.replace(b"q.x", b"q.y"))                # tampered subject
        attacker.push(attacker.forge(paul.session.name, Envelope("q.x", b"forged")))
        attacker.push(encode(Envelope("q.x", b"unsigned")))
        attacker.push(MAGIC + b"\x01garbage")                         # a damaged envelope
        stats = sam.auth.stats
        wait_until(lambda: stats["replayed"] >= 1 and stats["bad digest"] >= 3 and stats["unsigned"] >= 1
                   and sam.stats["damaged envelopes"] >= 1, what="sam dropping every attack")
        attacker.push(b"raw payloads carry no claim and still reach raw subscribers")
        paul.publish(b"genuine 2", subject="q.x")

        got = [take_until(quotes, lambda m: True).data for _ in range(2)]
        assert got == [b"genuine 1", b"genuine 2"]
        last = genuine_bytes(listen, b"genuine 2")
        raw = []
        while not raw or raw[-1] != last:
            raw.append(take_until(everything, lambda m: True).data)
        enveloped = [decode(p) for p in raw if decode(p) is not None]
        assert [e.data for e in enveloped if e.subject == "q.x"] == [b"genuine 1", b"genuine 2"]
        assert b"raw payloads carry no claim and still reach raw subscribers" in raw
        assert all(e.session in (paul.session.name, sam.session.name) for e in enveloped)
    attacker.close()


def test_the_cache_drops_forged_and_replayed_updates(backbone, tmp_path):
    db = users("paul", "sam", "cache")
    save_auth_database(db, tmp_path / "users.json")
    attacker = Attacker(backbone)
    auth_args = ("--auth-db", str(tmp_path / "users.json"), "--service", SERVICE, "--session-interval", "0.5")
    with CacheProcess(backbone, tmp_path, *auth_args) as cache, Client(backbone.addr) as spy:
        listen = spy.subscribe()
        with Client(backbone.addr, auth=Credentials(db, "paul", SERVICE), session_interval=0.5) as paul:
            wait_until(paul.auth.trusted_sessions, what="the cache answering paul's HELLO")
            cache_session = paul.auth.trusted_sessions()[0]
            paul.publish(b'{"px":1}', subject="q.x")
            first = genuine_bytes(listen, b'{"px":1}')
            last = paul.publish(b'{"px":2}', subject="q.x")
            attacker.push(first)                                                    # replay older state
            attacker.push(attacker.forge(paul.session.name, Envelope("q.x", b'{"px":666}')))
            attacker.push(encode(Envelope("q.x", b'{"px":667}')))
            attacker.push(attacker.forge(cache_session, Envelope("q.x", b'{"px":668}')))
        with Client(backbone.addr, auth=Credentials(db, "sam", SERVICE), session_interval=0.5) as sam:
            answer = sam.snapshot("q.x", timeout=10)
            assert json.loads(answer.data) == {"px": 2}
            assert answer.session == cache_session
            assert answer.record_seq == last  # signed with its header block; none of the dropped ones counted
    counts = cache.summary()
    assert counts["auth_replayed"] >= 1 and counts["auth_bad_digest"] >= 2 and counts["auth_unsigned"] >= 1
    attacker.close()


def test_auth_needs_a_receiving_client(backbone):
    db = users("paul")
    try:
        Client(backbone.addr, subscribe=False, auth=Credentials(db, "paul", SERVICE))
    except ValueError as exc:
        assert "subscribe=True" in str(exc)
    else:
        raise AssertionError("a non-subscribing client with auth was accepted")


# ---------------------------------------------------------------- fyrehose auth

def test_auth_cli_add_list_remove(tmp_path):
    path = str(tmp_path / "users.json")
    for user in ("paul", "sam"):
        result = run_cli("auth", "add", "--db", path, "--user", user, "--service", SERVICE, "--password-stdin",
                         input=f"pw {user}\n".encode())
        assert result.returncode == 0, result.stderr
    assert b"pw paul" not in (tmp_path / "users.json").read_bytes()
    assert load_auth_database(path).lookup("paul", SERVICE) == users_with_password("paul", "pw paul")
    listed = run_cli("auth", "list", "--db", path)
    assert listed.stdout.decode().splitlines() == [f"paul\t{SERVICE}", f"sam\t{SERVICE}"]
    assert run_cli("auth", "remove", "--db", path, "--user", "paul", "--service", SERVICE).returncode == 0
    assert run_cli("auth", "list", "--db", path).stdout.decode().splitlines() == [f"sam\t{SERVICE}"]


def users_with_password(user: str, password: str) -> bytes:
    db = AuthDatabase()
    db.add(user, SERVICE, password)
    return db.lookup(user, SERVICE)


def test_auth_cli_errors_are_one_line(tmp_path):
    path = str(tmp_path / "users.json")
    cases = [
        (["auth", "add", "--db", path, "--user", "paul", "--service", SERVICE], b""),       # no terminal
        (["auth", "add", "--db", path, "--user", "pa.ul", "--service", SERVICE, "--password-stdin"], b"pw\n"),
        (["auth", "add", "--db", path, "--user", "paul", "--service", SERVICE, "--password-stdin"], b""),
        (["auth", "remove", "--db", path, "--user", "paul", "--service", SERVICE], b""),
        (["auth", "list", "--db", path], b""),
        (["auth"], b""),
    ]
    for args, stdin in cases:
        result = run_cli(*args, input=stdin)
        assert result.returncode != 0, args
        assert len(result.stderr.strip().splitlines()) == 1, (args, result.stderr)


def test_auth_bench_prints_its_table():
    result = run_cli("auth", "bench", "--count", "200")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    assert lines[0] == "200 messages of 100 data bytes, one session, one core"
    assert [line.split("  ")[0] for line in lines[2:]] == ["stamp + encode (no auth)", "stamp + sign + encode",
                                                          "decode (no auth)", "decode + check"]
