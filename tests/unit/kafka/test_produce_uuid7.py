"""UUIDv7: bit layout, time order, monotonic within a millisecond."""

import uuid

from ingest.kafka.produce import Uuid7, layout, uuid7_time_ms


class Clock:
    def __init__(self, ms):
        self.ms = ms

    def __call__(self):
        return self.ms


def test_bit_layout():
    value = uuid.UUID(Uuid7(clock_ms=Clock(0x0123456789AB))())
    assert value.version == 7
    assert value.variant == uuid.RFC_4122
    assert value.int >> 80 == 0x0123456789AB
    assert str(value).startswith("01234567-89ab-7")


def test_layout_places_the_tail_around_version_and_variant():
    assert uuid.UUID(int=layout(5, 0)).hex == "000000000005" "7000" "8000" "000000000000"
    assert uuid.UUID(int=layout(5, (1 << 74) - 1)).hex == "000000000005" "7fff" "bfff" "ffffffffffff"
    assert uuid.UUID(int=layout(0, 1 << 62)).hex == "000000000000" "7001" "8000" "000000000000"


def test_time_order_across_milliseconds_as_text():
    clock = Clock(1_700_000_000_000)
    new = Uuid7(clock_ms=clock)
    uids = []
    for step in range(200):
        clock.ms += step % 3  # some in the same millisecond, some not
        uids.append(new())
    assert uids == sorted(uids)
    assert len(set(uids)) == len(uids)
    assert uuid7_time_ms(uids[-1]) == clock.ms


def test_monotonic_when_the_random_bits_would_go_down():
    draws = iter([(1 << 73) - 1, 0, 5])
    new = Uuid7(clock_ms=Clock(1000), random_bits=lambda bits: next(draws))
    first, second, third = new(), new(), new()
    assert first < second < third
    assert {uuid7_time_ms(u) for u in (first, second, third)} == {1000}


def test_clock_going_back_keeps_order():
    clock = Clock(5000)
    new = Uuid7(clock_ms=clock)
    before = new()
    clock.ms = 4000
    after = new()
    assert before < after
    assert uuid7_time_ms(after) == 5000


def test_counter_overflow_moves_to_the_next_millisecond():
    new = Uuid7(clock_ms=Clock(7), random_bits=lambda bits: 0)
    new._tail = (1 << 74) - 1  # as if 2**73 uids were made in this millisecond
    new._last_ms = 7
    carried = new()
    assert uuid7_time_ms(carried) == 8
    assert uuid.UUID(carried).int & ((1 << 62) - 1) == 0


def test_fresh_millisecond_counter_starts_below_half():
    requested = []
    new = Uuid7(clock_ms=Clock(1), random_bits=lambda bits: requested.append(bits) or 0)
    new()
    assert requested == [73]
