"""A subscriber tells a broker's second delivery of a message from a first one."""

from __future__ import annotations

from mqbench.workload.first_deliveries import WINDOW, FirstDeliveries


def test_messages_in_order_are_each_a_first_delivery() -> None:
    seen = FirstDeliveries()
    assert all(seen.first(pub, seq) for seq in range(100) for pub in (0, 1))


def test_a_message_delivered_again_after_newer_ones_is_a_duplicate() -> None:
    # QoS 1 across a reset: 110 and 111 arrive, the connection drops before 111's PUBACK,
    # and the broker delivers 111 again on the next connection.
    seen = FirstDeliveries()
    assert seen.first(7, 110)
    assert seen.first(7, 111)
    assert not seen.first(7, 111)
    assert not seen.first(7, 110)
    assert seen.first(7, 112)


def test_a_message_that_arrives_after_a_newer_one_is_still_a_first_delivery() -> None:
    # The in-flight message of the drain defect: 139 overtaken by 140, then arriving.
    seen = FirstDeliveries()
    assert seen.first(9, 138)
    assert seen.first(9, 140)
    assert seen.first(9, 139)
    assert not seen.first(9, 139)


def test_the_same_sequence_number_from_two_publishers_is_two_messages() -> None:
    seen = FirstDeliveries()
    assert seen.first(1, 5)
    assert seen.first(2, 5)
    assert not seen.first(1, 5)


def test_a_late_message_far_behind_the_newest_is_taken_as_seen_before() -> None:
    # Beyond the window the subscriber no longer remembers the gap: the drain waits
    # for its timeout rather than end early.
    seen = FirstDeliveries()
    assert seen.first(0, 0)
    assert seen.first(0, 3 * WINDOW)
    assert seen.first(0, 3 * WINDOW - 1)
    assert not seen.first(0, 1)


def test_memory_stays_bounded_when_most_messages_go_to_other_subscribers() -> None:
    # A shared subscription among four: this subscriber gets every fourth message.
    seen = FirstDeliveries()
    assert all(seen.first(0, seq) for seq in range(0, 200_000, 4))
    assert len(seen._missing[0]) <= 2 * WINDOW
    assert seen.first(0, 199_997)  # a recent gap is still recognised
