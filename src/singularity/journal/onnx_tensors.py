"""The initializers (weight tensors) of an ONNX model file, read from its protobuf bytes.

An ONNX file is a protobuf `ModelProto`; its graph (field 7) lists the initializers
(field 5), each a `TensorProto` with its dims (1), data type (2), name (8) and raw
little-endian data (9). Only what the journal's model needs is read: tensors kept as raw
data of the types below, in file order. Nodes and everything else are skipped.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

_MODEL_GRAPH = 7
_GRAPH_INITIALIZER = 5
_TENSOR_DIMS, _TENSOR_TYPE, _TENSOR_NAME, _TENSOR_RAW = 1, 2, 8, 9
_DTYPES = {1: "<f4", 3: "i1", 7: "<i8", 9: "?"}
"""ONNX data types: FLOAT, INT8, INT64, BOOL."""


class NotOnnx(ValueError):
    """The bytes are not the protobuf of an ONNX model."""


def _varint(data: memoryview, position: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if position >= len(data) or shift > 63:
            raise NotOnnx(f"a varint runs past byte {position}")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, position
        shift += 7


def _fields(data: memoryview) -> Iterator[tuple[int, int | memoryview]]:
    """(field number, value) of one message: an int for varints, bytes for the rest."""
    position = 0
    while position < len(data):
        key, position = _varint(data, position)
        number, wire = key >> 3, key & 7
        value: int | memoryview
        if wire == 0:
            value, position = _varint(data, position)
            yield number, value
            continue
        if wire == 2:
            size, position = _varint(data, position)
        elif wire in (1, 5):
            size = 8 if wire == 1 else 4
        else:
            raise NotOnnx(f"protobuf wire type {wire} at byte {position}")
        if position + size > len(data):
            raise NotOnnx(f"a field of {size} bytes runs past the end at byte {position}")
        value = data[position : position + size]
        position += size
        yield number, value


def _dims(value: int | memoryview) -> list[int]:
    if isinstance(value, int):
        return [value]
    dims, position = [], 0  # packed
    while position < len(value):
        dim, position = _varint(value, position)
        dims.append(dim)
    return dims


def _tensor(message: memoryview) -> tuple[str, np.ndarray] | None:
    dims: list[int] = []
    dtype = name = raw = None
    for number, value in _fields(message):
        if number == _TENSOR_DIMS:
            dims += _dims(value)
        elif number == _TENSOR_TYPE and isinstance(value, int):
            dtype = _DTYPES.get(value)
        elif number == _TENSOR_NAME and isinstance(value, memoryview):
            name = bytes(value).decode("utf-8")
        elif number == _TENSOR_RAW and isinstance(value, memoryview):
            raw = value
    if name is None or dtype is None or raw is None:
        return None
    array = np.frombuffer(raw, dtype=dtype).copy()
    if array.size != int(np.prod(dims, dtype=np.int64)):
        raise NotOnnx(f"tensor {name} holds {array.size} values for dims {dims}")
    return name, array.reshape(dims)


def initializers(data: bytes) -> dict[str, np.ndarray]:
    """The model's raw-data initializers of a known type, by name, in file order."""
    tensors: dict[str, np.ndarray] = {}
    graphs = [v for n, v in _fields(memoryview(data)) if n == _MODEL_GRAPH]
    if len(graphs) != 1 or not isinstance(graphs[0], memoryview):
        raise NotOnnx("no graph in the model")
    for number, value in _fields(graphs[0]):
        if number == _GRAPH_INITIALIZER and isinstance(value, memoryview):
            found = _tensor(value)
            if found is not None:
                tensors[found[0]] = found[1]
    return tensors
