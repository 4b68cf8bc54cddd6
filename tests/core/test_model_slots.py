"""The snapshot's classes keep their fields in slots, not in a per-object ``__dict__``.

A sampler makes a new snapshot every cycle, with one object per GPU, vGPU, process and reading;
on a host of many vGPUs a dict per object was a large share of what ``serve`` keeps resident
(docs/exporter.md, "Memory"). A model class added or changed without ``slots=True`` fails here.
"""

from __future__ import annotations

import dataclasses
import inspect
import weakref

from vgpumon import model


def model_classes() -> list[type]:
    return [
        cls
        for _, cls in inspect.getmembers(model, inspect.isclass)
        if cls.__module__ == model.__name__ and dataclasses.is_dataclass(cls)
    ]


def test_every_model_class_has_slots_and_no_instance_dict() -> None:
    classes = model_classes()
    assert model.VgpuInstance in classes and model.Gpu in classes
    # The snapshot itself is one object per cycle, referenced weakly by the publisher.
    with_dict = [cls.__name__ for cls in classes if "__slots__" not in vars(cls)]
    assert with_dict == ["Snapshot"]
    vgpu = model.VgpuInstance(vgpu_id=1)
    assert not hasattr(vgpu, "__dict__")


def test_snapshots_can_still_be_referenced_weakly() -> None:
    """The publisher and the JSON cache hold the snapshot they rendered by a weak reference."""
    snapshot = model.Snapshot(timestamp=1.0)
    ref = weakref.ref(snapshot)
    assert ref() is snapshot


def test_slotted_model_objects_round_trip_through_json() -> None:
    snapshot = model.Snapshot(
        timestamp=2.0,
        gpus=(
            model.Gpu(
                index=0,
                uuid="GPU-1",
                vgpu_instances=(model.VgpuInstance(vgpu_id=7, vm_id="vm-7"),),
            ),
        ),
    )
    assert model.from_json(model.to_json(snapshot)) == snapshot
    assert dataclasses.replace(snapshot, timestamp=3.0).timestamp == 3.0
