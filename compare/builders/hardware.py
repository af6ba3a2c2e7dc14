"""Accelerator descriptions for ``piper-ilp from-config``: presets and JSON files.

A :class:`Hardware` holds the numbers the analytic transformer profile needs (cost model
sec. 12): dense 16-bit peak FLOP/s, HBM bytes, NVLink bytes/s per GPU and direction,
network bytes/s per GPU, GPUs per node. The presets' sources are cited in
``docs/from-config.md``; a JSON file with the same fields describes any other GPU.
"""

from __future__ import annotations

import math
import unicodedata
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from piper_ilp.errors import InputError
from piper_ilp.instance import MAX_DEVICES
from piper_ilp.jsonfile import (
    VALUE_MAX,
    VALUE_MIN,
    VALUE_RANGE_TEXT,
    describe_value,
    display_path,
    is_int,
    is_number,
    read_json,
)

__all__ = [
    "Hardware",
    "HARDWARE_PRESETS",
    "HARDWARE_FIELDS",
    "load_hardware",
    "hardware_from_dict",
    "check_name",
]

#: The fields of a hardware JSON file, each with its unit.
HARDWARE_FIELDS = {
    "peak_flops": "dense 16-bit (BF16/FP16) Tensor Core FLOP/s per GPU",
    "hbm_bytes": "bytes of HBM per GPU",
    "nvlink_bandwidth": "NVLink bytes/s per GPU, one direction",
    "network_bandwidth": "network bytes/s per GPU, one direction",
    "gpus_per_node": "GPUs per node joined by NVLink",
}


@dataclass(frozen=True)
class Hardware:
    """One accelerator type and its node (every number per GPU).

    Attributes
    ----------
    name : str
        A label (the preset's name or the file's ``name``).
    peak_flops : float
        Dense 16-bit Tensor Core FLOP/s (without structured sparsity).
    hbm_bytes : float
        Memory per GPU, bytes (the instance's M by default).
    nvlink_bandwidth : float
        Bytes/s each GPU sends over NVLink in one direction (the tensor-parallel
        collectives' rate).
    network_bandwidth : float
        Bytes/s each GPU sends over the network in one direction (the instance's B by
        default: pipeline activations and the data-parallel resync).
    gpus_per_node : int
        GPUs per node; the largest tensor-parallel degree offered.
    """

    name: str
    peak_flops: float
    hbm_bytes: float
    nvlink_bandwidth: float
    network_bandwidth: float
    gpus_per_node: int

    def to_dict(self) -> dict:
        return asdict(self)


#: NVIDIA datasheets and DGX documentation (docs/from-config.md, "Hardware presets"):
#: A100 SXM4 BF16 312 TFLOPS dense, 40 or 80 GB, NVLink 600 GB/s both directions together,
#: DGX A100 one 200 Gb/s HDR InfiniBand port per GPU; H100 SXM5 BF16 1,979 TFLOPS with
#: sparsity (989.4 dense), 80 GB, NVLink 900 GB/s both directions, DGX H100 one 400 Gb/s
#: NDR port per GPU; 8 GPUs per node.
HARDWARE_PRESETS: dict[str, Hardware] = {
    "a100-40gb": Hardware("a100-40gb", 312e12, 40e9, 300e9, 25e9, 8),
    "a100-80gb": Hardware("a100-80gb", 312e12, 80e9, 300e9, 25e9, 8),
    "h100-80gb": Hardware("h100-80gb", 989.4e12, 80e9, 450e9, 50e9, 8),
}


def check_name(name: str, where: str, what: str) -> str:
    """``name`` when it has no control or format character (a line break, a tab, a
    bidirectional override): the model's and the hardware's names are printed in comment
    lines of the exported settings, where a line break would end the comment and start a
    shell line.

    Raises
    ------
    InputError
        One line naming ``where``, ``what`` (e.g. "field 'name'") and the first such
        character.
    """
    for ch in name:
        if unicodedata.category(ch).startswith("C"):
            raise InputError(
                f"{where}: {what} holds the control character U+{ord(ch):04X}: the name is "
                "printed in the exported settings' comment lines"
            )
    return name


def hardware_from_dict(data: Any, source: str = "<hardware>") -> Hardware:
    """A :class:`Hardware` from a parsed JSON object (the fields of :data:`HARDWARE_FIELDS`,
    an optional ``name``; no other key).

    Raises
    ------
    InputError
        An unknown key (a misspelt field: the message lists the known ones), a missing
        field, a value that is not a positive number within the supported
        range [1e-30, 1e30] (a whole number up to 2^20 for ``gpus_per_node``), or a name
        with a control character (:func:`check_name`), named with ``source``.

    Examples
    --------
    >>> hw = hardware_from_dict({"peak_flops": 1e15, "hbm_bytes": 8e10, "nvlink_bandwidth": 4e11,
    ...     "network_bandwidth": 5e10, "gpus_per_node": 8}, "my.json")
    >>> hw.name, hw.gpus_per_node
    ('my.json', 8)
    """
    where = display_path(source)
    if not isinstance(data, dict):
        raise InputError(f"{where}: expected a JSON object, got {describe_value(data)}")
    known = ("name", *HARDWARE_FIELDS)
    unknown = [k for k in data if k not in known]
    if unknown:  # a misspelt field would otherwise read as missing, or be silently dropped
        raise InputError(
            f"{where}: unknown field {unknown[0]!r}; the known fields are {', '.join(known)}"
        )
    values: dict[str, Any] = {}
    for key in HARDWARE_FIELDS:
        if key not in data:
            raise InputError(f"{where}: missing field '{key}' ({HARDWARE_FIELDS[key]})")
        x = data[key]
        if key == "gpus_per_node":
            ok, kind = is_int(x) and 1 <= x <= MAX_DEVICES, f"a whole number in [1, {MAX_DEVICES}]"
        else:
            ok = is_number(x) and math.isfinite(x) and VALUE_MIN <= x <= VALUE_MAX
            kind = f"a positive number {VALUE_RANGE_TEXT.removeprefix('0 or ')}"
        if not ok:
            raise InputError(f"{where}: field '{key}' must be {kind}, got {describe_value(x)}")
        values[key] = x if key == "gpus_per_node" else float(x)
    name = data.get("name", source)
    if not isinstance(name, str):
        raise InputError(f"{where}: field 'name' must be a string, got {describe_value(name)}")
    what = "field 'name'" if "name" in data else "the file name (the hardware's name)"
    return Hardware(name=check_name(name, where, what), **values)


def load_hardware(spec: str) -> Hardware:
    """A preset by name (:data:`HARDWARE_PRESETS`) or a hardware JSON file by path.

    Raises
    ------
    InputError
        An unknown preset that is not a file either, or a bad file (one line naming the
        field).
    """
    return preset_or_file(
        spec, HARDWARE_PRESETS, hardware_from_dict, "--hardware: unknown hardware", "a JSON file"
    )


def preset_or_file(spec: str, presets: dict, read, unknown: str, file_kind: str):
    """``presets[spec]``, or ``read(data, source=spec)`` of the JSON file at path ``spec``.

    Parameters
    ----------
    spec : str
        A preset's name or a file's path.
    presets : dict
        The presets by name.
    read : callable
        Makes the value from the file's JSON data and its path (``source``).
    unknown, file_kind : str
        The message's start and what the file should have been (``"a JSON file"``).

    Raises
    ------
    InputError
        ``spec`` is neither a preset nor an existing path, or ``read`` refuses the file.
    """
    if spec in presets:
        return presets[spec]
    if not Path(spec).exists():
        raise InputError(f"{unknown} {spec!r}: not a preset ({', '.join(presets)}) nor {file_kind}")
    return read(read_json(spec), source=spec)
