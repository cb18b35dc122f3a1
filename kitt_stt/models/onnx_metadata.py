"""Write the key/value metadata that sherpa-onnx reads from a model (every model we build has it)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import onnx


def set_metadata(model: onnx.ModelProto, metadata: Mapping[str, str]) -> None:
    """Replace ``model``'s metadata with ``metadata``, in its order."""
    del model.metadata_props[:]
    model.metadata_props.extend(onnx.StringStringEntryProto(key=key, value=value) for key, value in metadata.items())


def set_file_metadata(path: Path, metadata: Mapping[str, str]) -> None:
    """The same for a model file (quantisation and export write files, not protos)."""
    model = onnx.load(str(path))
    set_metadata(model, metadata)
    onnx.save(model, str(path))
