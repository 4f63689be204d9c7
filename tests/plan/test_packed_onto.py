"""packed_onto: --share-buffers falls back buffer by buffer (plan/strategies.py)."""

from __future__ import annotations

from caffemem.passes.liveness import Lifetime
from caffemem.plan.strategies import Plan, Slot, packed, packed_onto

# Two blobs alive together over steps 0-9, packed one above the other (0 and 100).
BLOBS = (Lifetime(0, 100, ((0, 9),)), Lifetime(1, 60, ((0, 4),)))


def test_a_buffer_goes_into_a_hole_of_the_blobs_packing():
    # blob 1 dies after step 4: bytes 100-160 are free at step 7, where the 50-byte buffer lives.
    plan = packed_onto(packed(BLOBS), BLOBS, (Lifetime(2, 50, ((7, 7),)),))
    assert plan.slots == (Slot(0, 160, (0, 1, 2), (0, 100, 100)),)


def test_a_buffer_that_only_grows_the_slot_by_its_own_size_keeps_its_storage():
    # Step 2 has blobs 0 and 1 alive (160 bytes): the buffer could only go on top, +40 bytes.
    plan = packed_onto(packed(BLOBS), BLOBS, (Lifetime(2, 40, ((2, 2),)),))
    assert plan.slots == (Slot(0, 160, (0, 1), (0, 100)),)


def test_a_buffer_that_overhangs_a_hole_is_kept_when_it_costs_less_than_its_size():
    # At step 7 bytes 100-160 are free: a 90-byte buffer there ends at 190, +30 bytes instead of 90.
    plan = packed_onto(packed(BLOBS), BLOBS, (Lifetime(2, 90, ((7, 7),)),))
    assert plan.slots == (Slot(0, 190, (0, 1, 2), (0, 100, 100)),)


def test_the_blobs_placements_are_never_moved():
    base = Plan("packed", (Slot(0, 160, (1, 0), (0, 60)),))
    plan = packed_onto(base, BLOBS, (Lifetime(2, 60, ((7, 8),)),))
    assert plan.slots[0].placements()[:2] == [(1, 0), (0, 60)]
    assert plan.slots[0].placements()[2] == (2, 0)  # blob 1's bytes 0-60 are free after step 4
