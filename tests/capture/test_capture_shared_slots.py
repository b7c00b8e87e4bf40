"""The contract between the compiled capture loop and the pure code: the slots that
mqttwire/capture/loop_c.pyx reads and writes in place (mqttwire/capture/shared_slots.py)."""

from __future__ import annotations

import dataclasses
import types

import pytest

from mqttwire.capture import direction, mqtt_streams, record, shared_slots, tcp

CLASSES = {"TcpStream": tcp.TcpStream, "TcpConnection": tcp.TcpConnection,
           "Direction": direction.Direction, "Connection": mqtt_streams.Connection,
           "Record": record.Record}


def test_every_shared_slot_is_a_slot_of_its_class() -> None:
    assert set(shared_slots.SHARED) == set(CLASSES)
    for name, slots in shared_slots.SHARED.items():
        cls = CLASSES[name]
        assert len(set(slots)) == len(slots), name
        for slot in slots:
            assert type(cls.__dict__.get(slot)) is types.MemberDescriptorType, (name, slot)


def test_record_fields_are_in_the_shared_order() -> None:
    assert tuple(f.name for f in dataclasses.fields(record.Record)) == (
        shared_slots.RECORD_FIELDS)


@pytest.mark.c_extension
def test_the_compiled_loop_uses_exactly_the_shared_slots() -> None:
    from mqttwire.capture import loop_c

    declared = {(name, slot) for name, slots in shared_slots.SHARED.items() for slot in slots}
    assert set(loop_c.USED_SLOTS) == declared  # none unlisted, none listed but unused


@pytest.mark.c_extension
def test_a_slot_outside_the_contract_is_refused() -> None:
    from mqttwire.capture import loop_c

    assert loop_c.slot_offset(tcp.TcpStream, "next") > 0
    # "src" is a slot of TcpStream that the compiled loop does not share.
    with pytest.raises(ImportError, match=r"TcpStream\.src is not a shared slot "
                                          r"\(mqttwire/capture/shared_slots\.py\)"):
        loop_c.slot_offset(tcp.TcpStream, "src")
    with pytest.raises(ImportError, match=r"TcpStream\.nope is not a shared slot"):
        loop_c.slot_offset(tcp.TcpStream, "nope")


@pytest.mark.c_extension
def test_a_shared_name_that_is_not_a_slot_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from mqttwire.capture import loop_c

    class Plain:
        __slots__ = ("x",)
        y = 1  # a class attribute, not a slot

    monkeypatch.setitem(shared_slots.SHARED, "Plain", ("x", "y"))
    assert loop_c.slot_offset(Plain, "x") > 0
    with pytest.raises(ImportError, match=r"Plain\.y is not a slot"):
        loop_c.slot_offset(Plain, "y")
