"""How an update merges into a cached value: JSON Merge Patch (RFC 7396) when both are JSON objects.

Updates are deltas of the initial value (docs/subjects.md), but fyrehose payloads are
opaque bytes.  A JSON object is the one shape whose fields can be merged
without a dictionary: the update's members replace the record's, nested
objects merge recursively, and a ``null`` member deletes the field (which is
how a ``verify`` "clears fields").  Any other value simply replaces the record.
"""
from __future__ import annotations

import functools

import orjson


def merge_patch(target: object, patch: object) -> object:
    """RFC 7396 §2 MergePatch(Target, Patch)."""
    if not isinstance(patch, dict):
        return patch
    result = dict(target) if isinstance(target, dict) else {}
    for name, value in patch.items():
        if value is None:
            result.pop(name, None)
        else:
            result[name] = merge_patch(result.get(name), value)
    return result


def _object(data: bytes) -> dict | None:
    if not data or data[:1] != b"{":
        return None
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None


def merge(record: bytes, update: bytes) -> bytes:
    """The record after ``update``: merged when both are JSON objects, otherwise ``update`` itself."""
    patch = _object(update)
    if patch is None:
        return update
    base = _object(record)
    if base is None:
        return update
    try:
        return orjson.dumps(merge_patch(base, patch))
    except (RecursionError, orjson.JSONEncodeError):  # nesting deeper than Python recurses or orjson writes
        return update


_UNPARSED = object()


def merge_many(record: bytes, updates: list[bytes]) -> bytes:
    """The record after ``updates`` in order: exactly what :func:`merge` applied one by one gives.

    Only what the result depends on is decoded: nothing before the last update
    that is not a JSON object (it replaces the value outright), the record at
    most once, each update once, and the result is encoded once at the end
    instead of after every update.  Patches with no nested object and no
    ``null`` (their bytes hold neither) are applied as dict updates.
    """
    start = 0
    for index in range(len(updates) - 1, -1, -1):
        if updates[index][:1] != b"{":  # not an object, so a replacement: what came before it no longer matters
            record, start = updates[index], index + 1
            break
    tail = updates[start:]  # each starts with "{": an object, unless it is no JSON at all
    flat = _merge_flat(record, tail)
    if flat is not None:
        return flat
    current: bytes = record
    value: object = _UNPARSED  # the decoded current value once needed (None: not an object)
    merged = False  # whether ``value`` is newer than ``current``
    for update in tail:
        try:
            patch = orjson.loads(update)
        except orjson.JSONDecodeError:
            current, value, merged = update, _UNPARSED, False
            continue
        if value is _UNPARSED:
            value = _object(current)
        if value is None:
            current, value, merged = update, patch, False
            continue
        try:
            value = merge_patch(value, patch)
            merged = True
        except RecursionError:  # as merge: no field-wise merge for nesting deeper than Python recurses
            current, value, merged = update, _UNPARSED, False
    if not merged:
        return current
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError:  # nested deeper than orjson writes: merge gives up on it step by step
        return functools.reduce(merge, tail, record)


def _merge_flat(record: bytes, patches: list[bytes]) -> bytes | None:
    """:func:`merge_many` of patches that are all flat objects without ``null`` (each is then a dict update),
    found with one scan of their bytes; None when they are not (or are no JSON), for the general way.

    The patches (each starting with ``{``, as :func:`merge_many` hands them over) are decoded in one call, as
    the JSON array ``[p1,...,pn]``.  That array may parse where some patch alone would not (``{"a":"}`` and
    ``{","b":2}`` join into one object), so the result is taken only when it is n objects while the bytes hold
    exactly n ``{``: each ``{`` then opens one of the array's objects, the k-th the one starting patch k, and
    the separator before object k+1 can only be the comma put right before patch k+1, so object k ends within
    patch k followed by whitespace alone: each patch was that object on its own.
    """
    if not patches:
        return None
    array = b"[%b]" % b",".join(patches)
    if array.count(b"{") != len(patches) or b"null" in array:  # a nested object or a deletion
        return None
    try:
        decoded = orjson.loads(array)
    except orjson.JSONDecodeError:
        return None
    if len(decoded) != len(patches) or set(map(type, decoded)) != {dict}:
        return None
    value = _object(record)
    if value is None:  # the first patch replaces the record, as it is
        if len(patches) == 1:
            return patches[0]
        value = decoded.pop(0)
    for patch in decoded:
        value.update(patch)
    return orjson.dumps(value)
