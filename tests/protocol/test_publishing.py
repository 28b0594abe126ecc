"""The publisher's side of CONFIRM, pure: tags, matching, retries with back-off, give-up."""
from __future__ import annotations

import random

from hypothesis import given
from hypothesis import strategies as st

from fyrehose.protocol import codec
from fyrehose.protocol.publishing import Finished, PendingPublishes


def tags_of(datagrams: list[bytes]) -> list[int]:
    return [tag for datagram in datagrams for _, _, tag in codec.scan(datagram, codec.PUSH)[0]]


def test_a_batch_takes_contiguous_tags_and_never_wraps_to_zero():
    publishes = PendingPublishes(first_tag=codec.MAX_TAG - 2)
    _, first = publishes.start([b"a", b"b"], 0.0, 1.0)
    _, second = publishes.start([b"c", b"d", b"e"], 0.0, 1.0)  # would pass MAX_TAG: starts again at 1
    assert tags_of(first) == [codec.MAX_TAG - 2, codec.MAX_TAG - 1]
    assert tags_of(second) == [1, 2, 3]


@given(st.lists(st.integers(1, 50), min_size=1, max_size=5), st.randoms(use_true_random=False))
def test_confirms_in_any_order_finish_each_batch_once_with_its_numbers_in_publish_order(sizes, rng):
    publishes = PendingPublishes()
    sent = {}
    seq = 100
    pairs = []
    for size in sizes:
        number, datagrams = publishes.start([b"x"] * size, 0.0, 5.0)
        tags = tags_of(datagrams)
        sent[number] = list(range(seq, seq + size))
        pairs += list(zip(tags, sent[number], strict=True))
        seq += size
    rng.shuffle(pairs)
    pairs += pairs[: len(pairs) // 3]  # repeated CONFIRMs (answers to retries)
    finished = [done for pair in pairs for done in publishes.confirm([pair])]
    assert sorted(finished, key=lambda done: done.batch) == [Finished(number, seqs) for number, seqs in sent.items()]
    assert len(publishes) == 0 and publishes.next_deadline() == float("inf")


def test_only_unconfirmed_messages_are_sent_again_backing_off_until_the_deadline():
    publishes = PendingPublishes(retry=0.2, max_retry=0.5)
    number, datagrams = publishes.start([b"%d" % i for i in range(4)], 0.0, 2.0)
    tags = tags_of(datagrams)
    assert publishes.confirm([(tags[0], 7), (tags[2], 9)]) == []
    assert publishes.next_deadline() == 0.2
    assert publishes.handle_timers(0.1) == ([], [])
    resent, finished = publishes.handle_timers(0.2)
    assert tags_of(resent) == [tags[1], tags[3]] and finished == []
    assert publishes.next_deadline() == 0.2 + 0.4
    assert tags_of(publishes.handle_timers(0.61)[0]) == [tags[1], tags[3]]
    assert publishes.next_deadline() == 0.61 + 0.5  # capped at max_retry
    assert publishes.stats["push retries"] == 4
    assert publishes.handle_timers(2.0) == ([], [Finished(number, None, 2)])
    assert publishes.confirm([(tags[1], 8), (tags[3], 10)]) == []  # too late: the batch was given up
    assert publishes.stats["unmatched confirms"] == 2


def test_a_cancelled_batch_is_forgotten():
    publishes = PendingPublishes()
    number, datagrams = publishes.start([b"x"], 0.0, 5.0)
    publishes.cancel(number)
    assert len(publishes) == 0
    assert publishes.confirm([(tags_of(datagrams)[0], 1)]) == []
    assert publishes.handle_timers(10.0) == ([], [])


def test_large_batches_pack_full_datagrams():
    publishes = PendingPublishes()
    payload = random.Random(1).randbytes(64)
    _, datagrams = publishes.start([payload] * 2000, 0.0, 5.0)
    per = codec.MAX_DATAGRAM // (codec.FRAME_HEADER + 64)
    assert [len(d) // (codec.FRAME_HEADER + 64) for d in datagrams] == [per, per, 2000 - 2 * per]


@given(st.integers(0, 300), st.integers(2, 1200), st.booleans(), st.randoms(use_true_random=False))
def test_a_batch_of_one_payload_size_is_built_as_one_block_byte_for_byte_as_frame_by_frame(size, count, same, rng):
    payloads = [rng.randbytes(size)] * count if same else [rng.randbytes(size) for _ in range(count)]
    block = PendingPublishes(first_tag=77)
    _, fast = block.start(payloads, 0.0, 5.0)
    frames = codec.encode_pushes(payloads, range(77, 77 + count))
    assert fast == codec.pack_greedy(frames)
    # retries resend exactly the unconfirmed frames, cut from the block
    confirmed = {tag for tag in range(77, 77 + count) if tag % 3}
    block.confirm([(tag, tag) for tag in sorted(confirmed)])
    resent, _ = block.handle_timers(0.2)
    assert resent == codec.pack_greedy([frame for tag, frame in zip(range(77, 77 + count), frames, strict=True)
                                        if tag not in confirmed])


@given(st.lists(st.integers(1, 60), min_size=1, max_size=4), st.integers(1, 4), st.randoms(use_true_random=False))
def test_confirm_runs_agree_with_pair_by_pair_matching(sizes, chunks, rng):
    fast, slow = PendingPublishes(first_tag=10), PendingPublishes(first_tag=10)
    pairs = []
    for size in sizes:
        _, datagrams = fast.start([b"p"] * size, 0.0, 5.0)
        slow.start([b"p"] * size, 0.0, 5.0)
        pairs += [(tag, 1000 + tag) for tag in tags_of(datagrams)]
    rng.shuffle(pairs)
    pairs += pairs[:3]  # repeats
    runs = [sorted(pairs[i::chunks]) for i in range(chunks)]  # CONFIRM datagrams, often runs of consecutive tags
    got_fast, got_slow = [], []
    for run in runs:
        if run:
            got_fast += fast.confirm_runs(codec.pair_runs(run))
            got_slow += slow.confirm(run)
    assert got_fast == got_slow and len(fast) == len(slow) == 0


def test_a_confirm_run_across_two_batches_finishes_both_in_one_step():
    publishes = PendingPublishes(first_tag=10)
    first, _ = publishes.start([b"a"] * 5, 0.0, 5.0)  # tags 10..14
    second, _ = publishes.start([b"b"] * 3, 0.0, 5.0)  # tags 15..17
    finished = publishes.confirm_runs([(10, 8, 100)])  # both datagrams' CONFIRMs packed together
    assert finished == [Finished(first, [100, 101, 102, 103, 104]), Finished(second, [105, 106, 107])]
    assert publishes.stats["unmatched confirms"] == 0 and len(publishes) == 0


def test_an_answer_after_a_silence_sends_what_is_unconfirmed_again_at_once_and_backs_off_afresh():
    from fyrehose.protocol.connection import BackboneConnection, ConnectionOptions

    tokens = iter(range(1, 100))
    connection = BackboneConnection(("10.0.0.1", 2323), ConnectionOptions(flags=codec.FLAG_NOSUBSCRIBE),
                                    token_source=lambda size: next(tokens).to_bytes(size, "big"))

    def ack(now: float) -> None:
        sent, _ = connection.handle_timers(now)
        token = [frame.token for data in sent if data[0] == codec.KEEPALIVE for frame in codec.decode(data)][-1]
        connection.receive(codec.encode(codec.KeepaliveAck(token)), ("10.0.0.1", 2323), now)

    ack(0.0)
    connection.publishes.start([b"m"], 0.0, 20.0)
    retries = [now / 10 for now in range(1, 40) if connection.publishes.handle_timers(now / 10)[0]]
    assert retries[0] == 0.2 and retries[1] - retries[0] >= 0.4 and len(retries) <= 5  # backing off, unanswered
    ack(3.9)  # the backbone (a new primary) answers again, 3.9 s after the last ACK
    assert connection.stats["backbone answers again"] == 1
    assert connection.publishes.handle_timers(3.9)[0] and connection.publishes.handle_timers(4.31)[0]  # at once, then 0.4 s later
