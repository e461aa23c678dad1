"""A batch's per-sample targets (boxes, masks, keypoints, captions, tokens, ...) as
ferry.Loader yields them: the wire's fields (a values array, and row offsets for a
ragged one) rebuilt as torch tensors, per row ("list": torchvision's detection
reference format) or padded to the batch's longest row with counts ("padded")."""
import json

import torch


def _parse_json(text):
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def batch_fields(b, targets, targets_format):
    """The fields of batch `b` (the binding's dict) named by `targets`, as
    `targets_format` says (ferry.Loader's class doc)."""
    fields = b.get("fields") or {}
    rows = b["images"].shape[0]
    counts = None
    out = {}
    strings = {}
    for name in targets:
        values, offsets = fields[name]
        if name == "tokens":
            out[name] = (torch.from_numpy(values), None)
            out["tokens_length"] = (torch.from_numpy(fields["tokens_length"][0]), None)
            continue
        if name in ("text", "meta", "key"):
            # Bytes: the caption as str; the JSON parsed (as its str if it is not JSON).
            o = offsets.tolist()
            raw = values.tobytes()
            texts = [raw[o[r]:o[r + 1]].decode("utf-8", errors="replace") for r in range(rows)]
            if name == "meta":
                texts = [_parse_json(t) for t in texts]
            strings[name] = texts
            continue
        values = torch.from_numpy(values)
        if offsets is not None:
            offsets = offsets.tolist()
            counts = [offsets[r + 1] - offsets[r] for r in range(rows)]
        out[name] = (values, offsets)
    if targets_format == "list":
        per_row = []
        for r in range(rows):
            d = {}
            for name, (values, offsets) in out.items():
                if name in ("image_id", "tokens_length"):
                    d[name] = int(values[r])
                elif offsets is None:
                    d[name] = values[r]
                else:
                    d[name] = values[offsets[r]:offsets[r + 1]]
            for name, texts in strings.items():
                d[name] = texts[r]
            per_row.append(d)
        return per_row
    padded = {}
    n = max(counts) if counts else 0
    for name, (values, offsets) in out.items():
        if offsets is None:
            padded[name] = values
            continue
        fill = -1 if name == "labels" else 0
        t = torch.full((rows, n) + tuple(values.shape[1:]), fill, dtype=values.dtype)
        for r in range(rows):
            t[r, :offsets[r + 1] - offsets[r]] = values[offsets[r]:offsets[r + 1]]
        padded[name] = t
    padded["counts"] = torch.tensor(counts if counts is not None else [0] * rows, dtype=torch.int64)
    padded.update(strings)  # a list per batch: strings have no static shape
    return padded
