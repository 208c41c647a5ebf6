"""Expose a Piper voice's phoneme durations without the ``onnx`` package.

Piper's VITS graph computes ``w_ceil`` (audio frames per phoneme id) with a ``Ceil`` node;
``piper.patch_voice_with_alignment`` marks that tensor as a graph output using the
``onnx`` package (a large optional dependency). The edit is tiny, so it is done here on
the protobuf wire format directly: find the top-level graph's single ``Ceil`` output and
append one ``ValueInfoProto`` naming it to ``GraphProto.output``. Only the graph's
length prefix changes; initializers (the weights) are copied as opaque bytes.

Field numbers (onnx.proto3): ``ModelProto.graph = 7``; ``GraphProto.node = 1``,
``GraphProto.output = 12``; ``NodeProto.output = 2``, ``NodeProto.op_type = 4``;
``ValueInfoProto.name = 1``.
"""

from __future__ import annotations

from collections.abc import Iterator

__all__ = ["AlignmentPatchError", "add_alignment_output"]

_MODEL_GRAPH = 7
_GRAPH_NODE = 1
_GRAPH_OUTPUT = 12
_NODE_OUTPUT = 2
_NODE_OP_TYPE = 4
_VALUE_INFO_NAME = 1


class AlignmentPatchError(ValueError):
    """The model cannot be patched (no single Ceil tensor, or already an output)."""


def _varint(data: memoryview, pos: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if pos >= len(data):
            raise AlignmentPatchError("truncated varint in model protobuf")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(data: memoryview) -> Iterator[tuple[int, int, int, int]]:
    """Yield ``(field_number, field_start, value_start, value_end)`` of each field.

    ``value_start``/``value_end`` delimit the payload of length-delimited fields; for other
    wire types they delimit the raw value bytes.
    """
    pos = 0
    while pos < len(data):
        start = pos
        tag, pos = _varint(data, pos)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            _, end = _varint(data, pos)
            yield field, start, pos, end
            pos = end
        elif wire == 1:
            yield field, start, pos, pos + 8
            pos += 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            yield field, start, pos, pos + length
            pos += length
        elif wire == 5:
            yield field, start, pos, pos + 4
            pos += 4
        else:
            raise AlignmentPatchError(f"unsupported protobuf wire type {wire}")
        if pos > len(data):
            raise AlignmentPatchError("truncated field in model protobuf")


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _encode_varint(field << 3 | 2) + _encode_varint(len(payload)) + payload


def add_alignment_output(model: bytes) -> tuple[bytes, str]:
    """Return ``model`` with its ``Ceil`` tensor (phoneme durations) as an extra output.

    Args:
        model: the serialized ONNX ``ModelProto`` of a Piper voice.

    Returns:
        ``(patched_model, tensor_name)``.

    Raises:
        AlignmentPatchError: no graph, no single ``Ceil`` node, or it is already an output.
    """
    view = memoryview(model)
    graph_span: tuple[int, int, int] | None = None
    for field, start, value_start, value_end in _fields(view):
        if field == _MODEL_GRAPH:
            graph_span = (start, value_start, value_end)
    if graph_span is None:
        raise AlignmentPatchError("model has no graph")
    start, g_start, g_end = graph_span
    graph = view[g_start:g_end]
    ceil_outputs: set[str] = set()
    output_names: set[str] = set()
    for field, _, v_start, v_end in _fields(graph):
        if field == _GRAPH_NODE:
            node = graph[v_start:v_end]
            op_type = ""
            outputs: list[str] = []
            for n_field, _, n_start, n_end in _fields(node):
                if n_field == _NODE_OP_TYPE:
                    op_type = bytes(node[n_start:n_end]).decode()
                elif n_field == _NODE_OUTPUT:
                    outputs.append(bytes(node[n_start:n_end]).decode())
            if op_type == "Ceil":
                ceil_outputs.update(outputs)
        elif field == _GRAPH_OUTPUT:
            info = graph[v_start:v_end]
            for i_field, _, i_start, i_end in _fields(info):
                if i_field == _VALUE_INFO_NAME:
                    output_names.add(bytes(info[i_start:i_end]).decode())
    if len(ceil_outputs) != 1:
        raise AlignmentPatchError(f"expected one Ceil tensor, found {len(ceil_outputs)}")
    name = next(iter(ceil_outputs))
    if name in output_names:
        raise AlignmentPatchError(f"tensor {name!r} is already a graph output")
    extra = _length_delimited(_GRAPH_OUTPUT, _length_delimited(_VALUE_INFO_NAME, name.encode()))
    new_graph = bytes(graph) + extra
    patched = b"".join(
        (bytes(view[:start]), _length_delimited(_MODEL_GRAPH, new_graph), bytes(view[g_end:]))
    )
    return patched, name
