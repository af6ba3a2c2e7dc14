"""Hostile input files: 100+ malformed instances (and a set of malformed plans), each
refused by the loader with one line naming the file, and by the CLI, in a real process
with a memory cap, with exit status 2, one line on stderr and no traceback.

Categories: repeated keys, NaN / Infinity literals, non-canonical integer keys, booleans
where numbers belong, nesting deeper than the limit, bytes that are not UTF-8, integers
too long for any range, values outside the supported ranges, files that are not regular
files (a FIFO, a folder, a device, a socket, an oversized file), truncations and
structural mutations of ``inputs/small.json``, and top-level values of the wrong kind.
"""

from __future__ import annotations

import json
import os
import random
import resource
import socket
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

from piper_ilp.errors import InputError
from piper_ilp.instance import MAX_FILE_BYTES, MAX_JSON_DEPTH, load_instance
from piper_ilp.plan import load_plan

REPO = Path(__file__).resolve().parents[1]
SMALL = (REPO / "inputs" / "small.json").read_text()
COMPACT = json.dumps(json.loads(SMALL), separators=(",", ":"))

# (name, content or a maker of the file, substrings the one-line message must contain)
Maker = Callable[[Path], Path]
CASES: list[tuple[str, object, tuple[str, ...]]] = []


def case(name: str, content, *expected: str) -> None:
    CASES.append((name, content, expected))


def _nth(text: str, needle: str, k: int) -> int:
    pos = -1
    for _ in range(k + 1):
        pos = text.index(needle, pos + 1)
    return pos


def with_value(key: str, k: int, literal: str, text: str = COMPACT) -> str:
    """``text`` with the value of the k-th ``"key":`` replaced by ``literal``."""
    start = _nth(text, f'"{key}":', k) + len(key) + 3
    end = start
    while text[end] not in ",}]":
        end += 1
    return text[:start] + literal + text[end:]


def with_extra(literal: str) -> str:
    """A valid instance with an unknown top-level field holding ``literal``."""
    return '{"comment":' + literal + "," + COMPACT[1:]


# ---- repeated keys ----
for key, k in [
    ("maxDevices", 0),
    ("nodes", 0),
    ("edges", 0),
    ("id", 0),
    ("id", 1),
    ("TMPCs", 3),
    ("timePerSample", 0),
    ("timePerSample", 5),
    ("syncTimeFw", 2),
    ("sourceId", 4),
    ("communicationCost", 1),
    ("1", 0),
]:
    pos = _nth(COMPACT, f'"{key}":', k)
    case(
        f"duplicate key {key}#{k}",
        COMPACT[:pos] + f'"{key}":0,' + COMPACT[pos:],
        "appears twice",
        repr(key),
    )

# ---- NaN / Infinity ----
literals = ["NaN", "Infinity", "-Infinity"]
for i, (key, k) in enumerate(
    [
        ("bandwidth", 0),
        ("maxMemoryPerDevice", 0),
        ("timePerSample", 3),
        ("parameterSize", 7),
        ("memoryUsageA", 1),
        ("memoryUsageB", 9),
        ("communicationCost", 2),
        ("1", 1),
    ]
):
    lit = literals[i % 3]
    case(f"{lit} in {key}#{k}", with_value(key, k, lit), lit, "not allowed")
case("NaN in an unknown field", with_extra("NaN"), "comment", "NaN")
case("Infinity in an array", with_extra("[1, 2, Infinity]"), "comment[2]", "Infinity")

# ---- non-canonical integer keys ----
for bad in ["01", " 1 ", "0_1", "+1", "1.0", "\u0661", "-0"]:
    d = json.loads(SMALL)
    tm = d["nodes"][2]["TMPCs"]
    tm[bad] = tm.pop("1")
    case(f"t key {bad!r}", json.dumps(d), "node 2", "TMPCs", "is not a positive integer")
    d = json.loads(SMALL)
    sbw = d["nodes"][0]["TMPCs"]["1"][0]["syncTimeBw"]
    sbw[bad] = sbw.pop("1")
    case(f"sync key {bad!r}", json.dumps(d), "node 0", "syncTimeBw", "not")

# ---- booleans where numbers belong ----
for key, k in [
    ("maxDevices", 0),
    ("mbsInBatch", 0),
    ("bandwidth", 0),
    ("timePerSample", 2),
    ("memoryUsageA", 4),
    ("communicationCost", 0),
    ("sourceId", 1),
    ("id", 2),
]:
    case(
        f"boolean {key}#{k}", with_value(key, k, "true" if k % 2 == 0 else "false"), key, "boolean"
    )

# ---- nesting deeper than the limit ----
deep = MAX_JSON_DEPTH + 1
case("deep arrays", "[" * deep + "]" * deep, "nested more than")
case("deep unbalanced", "[" * 200_000, "nested more than")
case("deep objects", '{"a":' * deep + "1" + "}" * deep, "nested more than")
case(
    "deep inside an unknown field",
    with_extra("[" * (deep - 1) + "]" * (deep - 1)),
    "nested more than",
)
case("deep mixed", "[{" * 40 + '"x":1' + "}]" * 40, "nested more than")

# ---- not UTF-8 ----
raw = COMPACT.encode()
at = raw.index(b'"name":"') + 8
case("invalid continuation byte", raw[:at] + b"\xc3\x28" + raw[at:], "not UTF-8")
case("lone 0xff", raw[:at] + b"\xff" + raw[at:], "not UTF-8")
case("overlong encoding", raw[:at] + b"\xc0\xaf" + raw[at:], "not UTF-8")
case("UTF-8 encoded surrogate", raw[:at] + b"\xed\xa0\x80" + raw[at:], "not UTF-8")
case("truncated multi-byte at the end", raw + b"\xe2\x82", "not UTF-8")
case("UTF-16 with a byte-order mark", b"\xff\xfe" + COMPACT.encode("utf-16-le"), "UTF-16")
case("UTF-16 without a byte-order mark", COMPACT.encode("utf-16-be"), "invalid JSON")
case(
    "lone surrogate escape in a name",
    COMPACT.replace('"name":"input"', '"name":"\\ud800"'),
    "node 0",
    "name",
)

# ---- integers too long for any range ----
for key, k, digits in [
    ("maxDevices", 0, 400),
    ("maxMemoryPerDevice", 0, 400),
    ("timePerSample", 1, 400),
    ("id", 0, 400),
    ("sourceId", 2, 400),
    ("communicationCost", 0, 5000),
    ("memoryUsageB", 3, 100_000),
]:
    case(
        f"{digits}-digit integer in {key}",
        with_value(key, k, "1" + "0" * digits),
        key,
        "digits",
        "outside",
    )
case(
    "negative 400-digit integer",
    with_value("memoryUsageA", 0, "-" + "9" * 400),
    "memoryUsageA",
    "digits",
)
case("huge integer in an unknown field", with_extra("1" + "0" * 400), "comment", "digits")

# ---- values outside the supported ranges ----
for key, k, lit, rng in [
    ("maxDevices", 0, str(2**20 + 1), "[1, 1048576]"),
    ("mbsInBatch", 0, str(2**40 + 1), "[1, 1099511627776]"),
    ("mbsInBatch", 0, str(10**18), "[1, 1099511627776]"),
    ("maxMemoryPerDevice", 0, "1e31", "[1e-30, 1e+30]"),
    ("bandwidth", 0, "1e-31", "[1e-30, 1e+30]"),
    ("timePerSample", 1, "1e-31", "0 or within"),
    ("parameterSize", 2, "1e31", "0 or within"),
    ("memoryUsageA", 0, "5e-324", "0 or within"),
    ("communicationCost", 1, "1e300", "0 or within"),
    ("id", 0, str(2**63), "[-9223372036854775808, 9223372036854775807]"),
]:
    case(f"{key} = {lit[:12]} out of range", with_value(key, k, lit), key, rng)
case("float overflow", with_value("memoryUsageB", 1, "1e999"), "memoryUsageB", "finite")
case(
    "float underflow",
    with_value("timePerSample", 4, "2.5e-400"),
    "timePerSample",
    "underflows to 0",
)
case(
    "long key repeated",
    with_extra('{"' + "k" * 5000 + '":1,"' + "k" * 5000 + '":2}'),
    "comment",
    "appears twice",
)
case(
    "t beyond the device range",
    COMPACT.replace('"TMPCs":{"1":', '"TMPCs":{"2000000":', 1),
    "t = '2000000'",
    "[1, 1048576]",
)


# ---- not regular files ----
def _fifo(d: Path) -> Path:
    p = d / "fifo.json"
    os.mkfifo(p)
    return p


def _folder(d: Path) -> Path:
    p = d / "folder.json"
    p.mkdir()
    return p


def _socket(d: Path) -> Path:
    p = d / "s.json"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(p))
    s.close()
    return p


def _oversized(d: Path) -> Path:
    p = d / "big.json"
    with open(p, "wb") as f:
        f.truncate(MAX_FILE_BYTES + 1)  # sparse: nothing is written
    return p


def _link_to_fifo(d: Path) -> Path:
    p = d / "link.json"
    p.symlink_to(_fifo(d))
    return p


case("FIFO", _fifo, "FIFO", "not a regular file")
case("folder", _folder, "directory", "not a regular file")
case("/dev/zero", lambda d: Path("/dev/zero"), "character device")
case("/dev/null", lambda d: Path("/dev/null"), "character device")
case("socket", _socket, "socket")
case("oversized", _oversized, "more than the limit")
case("symlink to a FIFO", _link_to_fifo, "FIFO")
case("missing file", lambda d: d / "nope.json", "no such file")


def _through_a_file(d: Path) -> Path:
    (d / "f").write_text("{}")
    return d / "f" / "x.json"


case("path through a file", _through_a_file, "no such file")

# ---- truncations of small.json (a proper prefix of a JSON object is never JSON) ----
end = len(SMALL.rstrip())
for i in range(20):
    cut = 1 + (end - 2) * i // 19
    case(f"truncated at {cut}", SMALL[:cut], "invalid JSON")

# ---- structural mutations that always break JSON ----
rng = random.Random(20211206)


def _positions(ch: str, n: int) -> list[int]:
    places = [i for i, c in enumerate(SMALL) if c == ch]
    return sorted(rng.sample(places, n))


for i in _positions(":", 5):
    case(f"';' for ':' at {i}", SMALL[:i] + ";" + SMALL[i + 1 :], "invalid JSON")
for i in _positions("}", 3):
    case(f"'}}' deleted at {i}", SMALL[:i] + SMALL[i + 1 :], "invalid JSON")
for i in _positions('"', 3):
    case(f"control character at {i}", SMALL[: i + 1] + "\x01" + SMALL[i + 1 :], "invalid JSON")
for i in _positions("}", 3):
    case(f"trailing comma at {i}", SMALL[:i] + "," + SMALL[i:], "invalid JSON")
for i in [m for m in _positions('"', 6) if SMALL[m + 1 :].split('"', 1)[0].isidentifier()][:3]:
    case(f"single quote at {i}", SMALL[:i] + "'" + SMALL[i + 1 :], "invalid JSON")

# ---- the wrong kind of document ----
for text in ["", "   \n", "null", "[]", '"instance"', "0", "{}"]:
    case(f"document {text!r}", text, "")

PLAN_OK = {
    "stages": [
        {
            "nodes": [0, 1, 2, 3, 4, 5, 6],
            "dataParallelDegree": 1,
            "tensorParallelDegree": 1,
            "TMPCids": {str(v): "vanilla" for v in range(7)},
        }
    ]
}
PLAN_TEXT = json.dumps(PLAN_OK, separators=(",", ":"))

PLAN_CASES: list[tuple[str, object, tuple[str, ...]]] = [
    (
        "plan duplicate key",
        PLAN_TEXT.replace('"nodes":', '"nodes":[],"nodes":'),
        ("appears twice",),
    ),
    (
        "plan duplicate TMPCids key",
        PLAN_TEXT.replace('"0":"vanilla"', '"0":"vanilla","0":"x"'),
        ("appears twice", "'0'"),
    ),
    ("plan NaN degree", with_value("dataParallelDegree", 0, "NaN", PLAN_TEXT), ("NaN",)),
    (
        "plan boolean degree",
        with_value("tensorParallelDegree", 0, "true", PLAN_TEXT),
        ("tensorParallelDegree", "boolean"),
    ),
    ("plan huge node id", PLAN_TEXT.replace("[0,", "[" + "9" * 400 + ","), ("nodes[0]", "digits")),
    ("plan node id beyond int64", PLAN_TEXT.replace("[0,", f"[{2**63},"), ("nodes[0]", "outside")),
    (
        "plan degree beyond int64",
        with_value("dataParallelDegree", 0, str(2**64), PLAN_TEXT),
        ("dataParallelDegree", "outside"),
    ),
    ("plan metadata not an object", PLAN_TEXT[:-1] + ',"metadata":[1]}', ("metadata", "object")),
    (
        "plan metadata K a string",
        PLAN_TEXT[:-1] + ',"metadata":{"K":"8"}}',
        ("metadata.K", "integer"),
    ),
    (
        "plan metadata fingerprint a number",
        PLAN_TEXT[:-1] + ',"metadata":{"instance":3}}',
        ("metadata.instance", "string"),
    ),
    ("plan deep", "[" * 100 + "]" * 100, ("nested",)),
    ("plan not UTF-8", PLAN_TEXT.encode().replace(b"vanilla", b"van\xffilla", 1), ("not UTF-8",)),
    (
        "plan list-form key as a string",
        PLAN_TEXT.replace('{"0":"vanilla"', '[["0","vanilla"]],"x":{"0":"vanilla"'),
        ("TMPCids[0][0]", "integer"),
    ),
] + [
    (
        f"plan TMPCids key {bad!r}",
        PLAN_TEXT.replace('"0":"vanilla"', f'"{bad}":"vanilla"'),
        ("TMPCids", "not a node id"),
    )
    for bad in ["01", " 0", "0_0", "+0", "-0", "0.0"]
]


def _materialize(directory: Path, name: str, content) -> Path:
    if callable(content):
        return content(directory)
    path = directory / "case.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8", errors="surrogatepass")
    return path


def test_the_corpus_has_100_instances_and_every_category():
    assert len(CASES) >= 100
    assert len({c[0] for c in CASES}) == len(CASES)


def test_small_json_itself_loads():
    # the base of the mutations is valid, so each refusal below is the mutation's doing
    assert len(load_instance(REPO / "inputs" / "small.json").nodes) == 7


def _refused_in_one_line(load, path, expected):
    with pytest.raises(InputError) as err:
        load(path)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"{path}: "), msg
    for piece in expected:
        assert piece in msg, f"{piece!r} not in {msg!r}"


@pytest.mark.parametrize("name,content,expected", CASES, ids=[c[0] for c in CASES])
def test_loader_refuses_in_one_line(tmp_path, name, content, expected):
    _refused_in_one_line(load_instance, _materialize(tmp_path, name, content), expected)


@pytest.mark.parametrize("name,content,expected", PLAN_CASES, ids=[c[0] for c in PLAN_CASES])
def test_plan_loader_refuses_in_one_line(tmp_path, name, content, expected):
    _refused_in_one_line(load_plan, _materialize(tmp_path, name, content), expected)


# ---- what must still load ----


def test_utf8_byte_order_mark_is_skipped(tmp_path):
    path = tmp_path / "bom.json"
    path.write_bytes(b"\xef\xbb\xbf" + SMALL.encode())
    assert load_instance(path).node_ids == load_instance(REPO / "inputs" / "small.json").node_ids


def test_nesting_up_to_the_limit_and_brackets_in_strings_are_fine(tmp_path):
    path = tmp_path / "ok.json"
    # the document's own object is level 1, so an extra field may nest MAX_JSON_DEPTH - 1 deep
    n = MAX_JSON_DEPTH - 1
    path.write_text(with_extra("[" * n + "]" * n))
    load_instance(path)
    path.write_text(with_extra(json.dumps("[{" * 10_000 + '\\"')))
    load_instance(path)


def test_plan_loads_with_canonical_keys_and_metadata(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**PLAN_OK, "metadata": {"K": 8, "note": {"x": [1]}}}))
    plan = load_plan(path)
    assert plan.metadata == {"K": 8, "note": {"x": [1]}}
    assert plan.stages[0].options[6] == "vanilla"


# ---- the CLI in a real process: exit 2, one line, no traceback, no blow-up ----


def _limit_memory() -> None:
    cap = 2 * 2**30
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))


def _run_cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-m", "piper_cli", "evaluate", *args],
        capture_output=True,
        text=True,
        timeout=30,
        preexec_fn=_limit_memory,
        env=env,
        cwd=REPO,
    )


def _check_process(proc: subprocess.CompletedProcess, path: Path) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and proc.stderr.endswith("\n"), proc.stderr
    assert lines[0].startswith(f"piper-ilp: error: {path}: "), lines[0]
    assert "Traceback" not in proc.stderr


FEW = [
    "FIFO",
    "/dev/zero",
    "deep unbalanced",
    "100000-digit integer in memoryUsageB",
    "duplicate key id#1",
]
SWEEP = [c for i, c in enumerate(CASES) if i % (len(CASES) // 25 + 1) == 0 and c[0] not in FEW][:25]


def _check_evaluate_in_a_process(tmp_path, name, content):
    """`piper-ilp evaluate` in a child process on the bad instance and a valid plan."""
    path = _materialize(tmp_path, name, content)
    plan = tmp_path / "plan.json"
    plan.write_text(PLAN_TEXT)
    _check_process(_run_cli(str(path), str(plan)), path)


def _by_name(names):
    return [c for c in CASES if c[0] in names]


@pytest.mark.parametrize("name,content,expected", _by_name(FEW), ids=FEW)
def test_cli_in_a_real_process(tmp_path, name, content, expected):
    _check_evaluate_in_a_process(tmp_path, name, content)


@pytest.mark.slow
@pytest.mark.parametrize("name,content,expected", SWEEP, ids=[c[0] for c in SWEEP])
def test_cli_sweep_in_a_real_process(tmp_path, name, content, expected):
    _check_evaluate_in_a_process(tmp_path, name, content)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name,content,expected", PLAN_CASES[:5], ids=[c[0] for c in PLAN_CASES[:5]]
)
def test_cli_plan_in_a_real_process(tmp_path, name, content, expected):
    path = _materialize(tmp_path, name, content)
    _check_process(_run_cli(str(REPO / "inputs" / "small.json"), str(path)), path)
