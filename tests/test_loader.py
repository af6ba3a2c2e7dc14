"""Instance loading: the malformed corpus (one clear line per problem, exit 2), the
settings overrides and units, and a fuzz test that nothing but InputError escapes."""

from __future__ import annotations

import copy
import json
import math
import subprocess
import sys

import pytest
from builders import cli_json
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from piper_cli import app
from piper_ilp.errors import InputError
from piper_ilp.instance import instance_from_dict, instance_to_dict, load_instance, parse_size


def opt(oid="vanilla", fw=(), bw=(), **kw):
    d = {
        "id": oid,
        "timePerSample": 1.0,
        "parameterSize": 10.0,
        "memoryUsageA": 2.0,
        "memoryUsageB": 3.0,
        "syncTimeFw": {str(u): 0.0 for u in fw},
        "syncTimeBw": {str(x): 0.0 for x in bw},
    }
    d.update(kw)
    return d


def base() -> dict:
    """A valid 3-node instance: 10 -> 20 -> 30 and 10 -> 30."""
    return {
        "maxDevices": 4,
        "maxMemoryPerDevice": 100.0,
        "bandwidth": 1e9,
        "mbsInBatch": 4,
        "nodes": [
            {"id": 10, "TMPCs": {"1": [opt(bw=(20, 30)), opt("activation recomp", bw=(20, 30))]}},
            {
                "id": 20,
                "name": "mid",
                "TMPCs": {"1": [opt(fw=(10,), bw=(30,))], "2": [opt(fw=(10,), bw=(30,))]},
            },
            {"id": 30, "TMPCs": {"1": [opt(fw=(10, 20))]}},
        ],
        "edges": [
            {"sourceId": 10, "destId": 20, "communicationCost": 5.0},
            {"sourceId": 20, "destId": 30, "communicationCost": 5.0},
            {"sourceId": 10, "destId": 30, "communicationCost": 1.0},
        ],
    }


def mutate(fn):
    d = base()
    fn(d)
    return d


def _set(path, value):
    def f(d):
        obj = d
        for k in path[:-1]:
            obj = obj[k]
        obj[path[-1]] = value

    return f


def _del(path):
    def f(d):
        obj = d
        for k in path[:-1]:
            obj = obj[k]
        del obj[path[-1]]

    return f


def _opt10(key, value):
    return _set(["nodes", 0, "TMPCs", "1", 0, key], value)


# (case name, instance text or dict, substrings the one-line message must contain)
CASES: list[tuple[str, object, tuple[str, ...]]] = [
    ("truncated json", json.dumps(base())[:200], ("invalid JSON", "line 1")),
    ("empty file", "", ("invalid JSON",)),
    ("top-level array", "[1, 2, 3]", ("top level", "JSON object", "array")),
    ("top-level string", '"hello"', ("top level", "JSON object")),
    (
        "NaN literal",
        json.dumps(base()).replace('"timePerSample": 1.0', '"timePerSample": NaN', 1),
        ("NaN", "finite"),
    ),
    (
        "Infinity literal",
        json.dumps(base()).replace('"bandwidth": 1000000000.0', '"bandwidth": Infinity'),
        ("Infinity",),
    ),
    ("missing maxDevices", mutate(_del(["maxDevices"])), ("maxDevices", "missing")),
    (
        "maxDevices as string",
        mutate(_set(["maxDevices"], "4")),
        ("maxDevices", "integer", "string"),
    ),
    ("maxDevices zero", mutate(_set(["maxDevices"], 0)), ("maxDevices", ">= 1")),
    ("maxDevices float", mutate(_set(["maxDevices"], 4.5)), ("maxDevices", "integer")),
    ("maxDevices boolean", mutate(_set(["maxDevices"], True)), ("maxDevices", "boolean")),
    ("memory negative", mutate(_set(["maxMemoryPerDevice"], -5)), ("maxMemoryPerDevice", "> 0")),
    ("memory zero", mutate(_set(["maxMemoryPerDevice"], 0)), ("maxMemoryPerDevice", "> 0")),
    ("bandwidth null", mutate(_set(["bandwidth"], None)), ("bandwidth", "null")),
    ("missing batch", mutate(_del(["mbsInBatch"])), ("mbsInBatch", "missing")),
    ("batch aliases disagree", mutate(_set(["maxBatchSize"], 8)), ("mbsInBatch", "maxBatchSize")),
    ("nodes missing", mutate(_del(["nodes"])), ("nodes", "missing")),
    ("nodes empty", mutate(_set(["nodes"], [])), ("nodes", "empty")),
    ("nodes not array", mutate(_set(["nodes"], {"0": {}})), ("nodes", "array")),
    ("node not object", mutate(_set(["nodes", 1], 7)), ("nodes[1]", "object")),
    ("node id missing", mutate(_del(["nodes", 1, "id"])), ("nodes[1]", "'id'")),
    ("node id string", mutate(_set(["nodes", 1, "id"], "20")), ("nodes[1].id", "integer")),
    ("duplicate node id", mutate(_set(["nodes", 2, "id"], 20)), ("node 20", "duplicate node id")),
    ("edges missing", mutate(_del(["edges"])), ("edges", "missing")),
    (
        "edge to unknown node",
        mutate(_set(["edges", 1, "destId"], 99)),
        ("edge 20->99", "99 is not a node id"),
    ),
    ("edge source missing", mutate(_del(["edges", 0, "sourceId"])), ("edges[0]", "sourceId")),
    (
        "edge negative cost",
        mutate(_set(["edges", 0, "communicationCost"], -1.0)),
        ("edge 10->20", "communicationCost", ">= 0"),
    ),
    (
        "edge cost string",
        mutate(_set(["edges", 0, "communicationCost"], "5")),
        ("edge 10->20", "communicationCost", "number"),
    ),
    (
        "duplicate edge",
        mutate(lambda d: d["edges"].append(dict(d["edges"][0]))),
        ("edge 10->20", "duplicate edge"),
    ),
    (
        "self loop",
        mutate(lambda d: d["edges"].append({"sourceId": 20, "destId": 20, "communicationCost": 0})),
        ("edge 20->20", "self-loop"),
    ),
    (
        "cycle",
        mutate(lambda d: d["edges"].append({"sourceId": 30, "destId": 10, "communicationCost": 0})),
        ("cycle", "10", "30"),
    ),
    ("TMPCs missing", mutate(_del(["nodes", 1, "TMPCs"])), ("node 20", "TMPCs")),
    (
        "TMPCs empty",
        mutate(_set(["nodes", 1, "TMPCs"], {})),
        ("node 20", "TMPCs", "at least one option"),
    ),
    (
        "t key not an int",
        mutate(lambda d: d["nodes"][1]["TMPCs"].update({"two": []})),
        ("node 20", "'two'", "positive integer"),
    ),
    (
        "t key zero",
        mutate(lambda d: d["nodes"][1]["TMPCs"].update({"0": d["nodes"][1]["TMPCs"]["1"]})),
        ("node 20", "'0'", "positive integer"),
    ),
    (
        "t key negative",
        mutate(lambda d: d["nodes"][1]["TMPCs"].update({"-2": d["nodes"][1]["TMPCs"]["1"]})),
        ("node 20", "'-2'"),
    ),
    (
        "option list empty",
        mutate(_set(["nodes", 1, "TMPCs", "2"], [])),
        ("node 20", '"2"', "empty"),
    ),
    (
        "duplicate option id",
        mutate(_set(["nodes", 0, "TMPCs", "1", 1, "id"], "vanilla")),
        ("node 10", "duplicate option id", "vanilla"),
    ),
    ("option id missing", mutate(_del(["nodes", 0, "TMPCs", "1", 0, "id"])), ("node 10", "'id'")),
    ("option id number", mutate(_opt10("id", 3)), ("node 10", "id", "string")),
    (
        "timePerSample NaN via string",
        mutate(_opt10("timePerSample", "NaN")),
        ("node 10", "timePerSample", "number"),
    ),
    (
        "negative parameterSize",
        mutate(_opt10("parameterSize", -1)),
        ("node 10", "parameterSize", ">= 0"),
    ),
    (
        "negative memoryUsageA",
        mutate(_opt10("memoryUsageA", -0.5)),
        ("node 10", "memoryUsageA", ">= 0"),
    ),
    (
        "memoryUsageB missing",
        mutate(_del(["nodes", 0, "TMPCs", "1", 0, "memoryUsageB"])),
        ("node 10", "memoryUsageB", "missing"),
    ),
    (
        "huge float overflow",
        json.dumps(base()).replace('"parameterSize": 10.0', '"parameterSize": 1e999', 1),
        ("node 10", "parameterSize", "finite"),
    ),
    (
        "sync entry for a non-edge",
        mutate(_opt10("syncTimeBw", {"20": 0, "30": 0, "99": 0})),
        ("node 10", "syncTimeBw", "99"),
    ),
    (
        "sync entry missing",
        mutate(_opt10("syncTimeBw", {"20": 0})),
        ("node 10", "syncTimeBw", "30"),
    ),
    (
        "fw sync on a source node",
        mutate(_opt10("syncTimeFw", {"20": 1.0})),
        ("node 10", "syncTimeFw", "20"),
    ),
    (
        "sync key not an id",
        mutate(_opt10("syncTimeBw", {"20": 0, "thirty": 0})),
        ("node 10", "syncTimeBw", "thirty"),
    ),
    (
        "sync value negative",
        mutate(_opt10("syncTimeBw", {"20": 0, "30": -3})),
        ("node 10", "syncTimeBw", ">= 0"),
    ),
    ("sync not an object", mutate(_opt10("syncTimeFw", [])), ("node 10", "syncTimeFw", "object")),
    ("name not a string", mutate(_set(["nodes", 1, "name"], 5)), ("node 20", "name", "string")),
]


def test_corpus_is_large_enough():
    assert len(CASES) >= 30


@pytest.mark.parametrize("name,content,expected", CASES, ids=[c[0] for c in CASES])
def test_malformed_instance_message(tmp_path, name, content, expected):
    path = tmp_path / "bad.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(InputError) as err:
        load_instance(path)
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(str(path) + ": "), msg
    for piece in expected:
        assert piece in msg, f"{piece!r} not in {msg!r}"


@pytest.mark.parametrize("name,content,expected", CASES, ids=[c[0] for c in CASES])
def test_malformed_instance_cli_exit_2(tmp_path, name, content, expected):
    path = tmp_path / "bad.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    plan = tmp_path / "plan.json"
    plan.write_text('{"stages": []}')
    result = CliRunner().invoke(app, ["evaluate", str(path), str(plan)])
    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)  # no other exception escaped
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("piper-ilp: error: "), result.output
    assert "Traceback" not in result.output


def test_malformed_in_a_real_process_has_no_traceback(tmp_path):
    path = tmp_path / "cyc.json"
    path.write_text(json.dumps(CASES[[c[0] for c in CASES].index("cycle")][1]))
    proc = subprocess.run(
        [sys.executable, "-m", "piper_cli", "evaluate", str(path), str(path)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert (
        proc.stderr.count("\n") == 1 and "cycle" in proc.stderr and "Traceback" not in proc.stderr
    )


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        load_instance(tmp_path / "nope.json")
    with pytest.raises(InputError, match="directory"):
        load_instance(tmp_path)


def test_valid_base_loads_with_ids_and_warning():
    d = base()
    d["nodes"][2]["TMPCs"] = {"2": d["nodes"][2]["TMPCs"]["1"]}
    inst = instance_from_dict(d, source="x.json")
    assert inst.node_ids == [10, 20, 30]
    assert inst.node[20].name == "mid"
    assert inst.t_values == [1, 2]
    assert inst.node[30].options[2][0].sfw == {10: 0.0, 20: 0.0}
    assert len(inst.warnings) == 1 and "node 30" in inst.warnings[0] and "t = 1" in inst.warnings[0]


def test_unknown_fields_ignored_and_alias_accepted():
    d = base()
    d["comment"] = "extra"
    d["nodes"][0]["color"] = "red"
    d["maxBatchSize"] = d.pop("mbsInBatch")
    inst = instance_from_dict(d)
    assert inst.N == 4


def test_graph_without_edges_is_valid():
    d = {
        "maxDevices": 1,
        "maxMemoryPerDevice": 1.0,
        "bandwidth": 1.0,
        "mbsInBatch": 1,
        "nodes": [{"id": 5, "TMPCs": {"1": [opt()]}}],
        "edges": [],
    }
    assert instance_from_dict(d).node_ids == [5]


def test_round_trip():
    inst = instance_from_dict(base())
    again = instance_from_dict(instance_to_dict(inst))
    assert again.nodes == inst.nodes and again.edges == inst.edges
    assert (again.K, again.M, again.B, again.N) == (inst.K, inst.M, inst.B, inst.N)


# ---- settings and units ----


@pytest.mark.parametrize(
    "text,rate,value",
    [
        ("8GiB", False, 8 * 2**30),
        ("80GB", False, 80e9),
        ("1.5 MiB", False, 1.5 * 2**20),
        ("8e9", False, 8e9),
        ("4096", False, 4096.0),
        ("25GiB/s", True, 25 * 2**30),
        ("2.5e10", True, 2.5e10),
        ("100 MB/s", True, 1e8),
        ("1KiB", False, 1024.0),
        ("1kiB", False, 1024.0),
        ("25Gbit/s", True, 25e9 / 8),
        ("8 Gibit", False, 2**30),
        ("64bit", False, 8.0),
        ("100 Mbits/s", True, 12.5e6),
        ("8B", False, 8.0),
    ],
)
def test_parse_size(text, rate, value):
    assert parse_size(text, rate=rate) == value


@pytest.mark.parametrize(
    "text,rate",
    [
        ("8 GiBs", False),
        ("25GiB/s", False),
        ("-3GB", False),
        ("0", False),
        ("lots", True),
        ("8XB", False),
        ("inf", False),
    ],
)
def test_parse_size_rejects(text, rate):
    with pytest.raises(InputError):
        parse_size(text, "--memory", rate=rate)


@pytest.mark.parametrize("value", [10**400, -(10**400), float("nan")])
def test_parse_size_refuses_numbers_beyond_floats_in_one_short_line(value):
    # a Python int past the float range raised OverflowError, and its 400 digits filled the line
    with pytest.raises(InputError, match="must be a finite number > 0") as err:
        parse_size(value, "M")
    assert len(str(err.value)) < 100


@pytest.mark.parametrize(
    "text,rate,says",
    [
        ("25Gb/s", True, "write 25GB/s or 25GiB/s for bytes or 25Gbit/s for bits"),
        ("8b", False, "write 8B for bytes or 8bit for bits"),
        ("80gb", False, "write 80GB or 80GiB for bytes or 80Gbit for bits"),
        ("8kb", False, "write 8kB or 8KiB for bytes or 8kbit for bits"),
        ("1kib", False, "write 1KiB for bytes or 1kibit for bits"),
        ("2.5 Mb/s", True, "write 2.5MB/s or 2.5MiB/s for bytes or 2.5Mbit/s for bits"),
    ],
)
def test_parse_size_refuses_a_lower_case_b(text, rate, says):
    """A lower-case b (bits by convention, bytes to many) is never guessed: one line saying
    what to write (it was read as bytes, 8x off for a bandwidth in Gb/s)."""
    with pytest.raises(InputError) as err:
        parse_size(text, "--bandwidth", rate=rate)
    msg = str(err.value)
    assert (
        msg.startswith("--bandwidth: ") and "ambiguous" in msg and says in msg and "\n" not in msg
    )


@pytest.mark.parametrize(
    "text,says",
    [
        ("600mB", "'600mB': a lower-case m means milli; write 600MB or 600MiB for mega"),
        ("600mbit/s", "'600mbit/s': a lower-case m means milli; write 600Mbit/s for mega"),
    ],
)
def test_parse_size_refuses_a_lower_case_m(text, says):
    """Issue 30 point 2: m is milli, so 600mB is refused like 8gb; mi (mebi) stays."""
    with pytest.raises(InputError) as err:
        parse_size(text, "--memory", rate=text.endswith("/s"))
    assert str(err.value) == f"--memory: {says}"
    assert parse_size("600miB") == parse_size("600MiB") == 600 * 2**20


def test_a_small_bare_size_gets_one_note_per_option(tmp_path):
    """Issue 30 point 2: a bare --memory below 1 MiB or --bandwidth below 1 MB/s is still
    bytes (the solve runs) but one note on stderr names the unit forms; a unit or a
    plausible number gets none."""
    from conftest import INPUTS

    small = str(INPUTS / "small.json")
    runner = CliRunner()
    r = runner.invoke(app, ["solve", small, "--memory", "8", "-B", "1000", "--json"])
    assert r.exit_code == 0 and json.loads(r.stdout)["status"] == "infeasible", r.output
    assert r.stderr.splitlines() == [
        "note: --memory 8 is 8 bytes (a bare number is bytes); for a device write a unit: "
        "8GiB or 8GB",
        "note: --bandwidth 1000 is 1000 bytes/s (a bare number is bytes/s); for a link write a "
        "unit: 1000GB/s, 1000GiB/s or 1000Gbit/s",
    ]
    for flags in (["--memory", "8B"], ["--memory", "2e8"], ["-B", "25GB/s"], ["-B", "1e6"]):
        r = runner.invoke(app, ["solve", small, *flags, "--json"])
        assert r.exit_code == 0 and r.stderr == "", (flags, r.stderr)
    out = tmp_path / "sweep"
    r = runner.invoke(
        app, ["sweep", small, "--memory", "8,9,1GiB", "--variants", "piper", "--out", str(out)]
    )
    assert r.stderr.count("note: --memory") == 1 and "--memory 8 is 8 bytes" in r.stderr, r.stderr


def test_overrides_on_the_command_line(tmp_path):
    path = tmp_path / "i.json"
    path.write_text(json.dumps(base()))
    plan = tmp_path / "p.json"
    plan.write_text(
        json.dumps(
            {
                "stages": [
                    {
                        "nodes": [10, 20, 30],
                        "dataParallelDegree": 1,
                        "tensorParallelDegree": 1,
                        "TMPCids": {"10": "vanilla", "20": "vanilla", "30": "vanilla"},
                    }
                ]
            }
        )
    )
    args = "--json -K 8 --memory 1KiB --batch 6 --bandwidth 2GB/s".split()
    out = cli_json("evaluate", path, plan, *args)
    assert out["settings"] == {"K": 8, "M": 1024.0, "N": 6, "B": 2e9}
    for bad in (["--devices", "0"], ["--batch", "two"], ["--memory", "8 parsecs"]):
        r = CliRunner().invoke(app, ["evaluate", str(path), str(plan), *bad])
        assert r.exit_code == 2 and r.output.count("\n") == 1, r.output


# ---- fuzz: nothing but InputError escapes, and what loads is valid ----

json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.sampled_from(["1", "2", "vanilla", "10", "20", "30"]),
)
json_value = st.recursive(
    json_leaf,
    lambda children: st.one_of(
        st.lists(children, max_size=4), st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=12,
)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


BASE_PATHS = [p for p in _paths(base()) if p]


@st.composite
def mutated_instances(draw):
    d = copy.deepcopy(base())
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(BASE_PATHS))
        obj = d
        try:
            for k in path[:-1]:
                obj = obj[k]
            action = draw(st.sampled_from(["replace", "delete", "dup"]))
            if action == "replace":
                obj[path[-1]] = draw(json_value)
            elif action == "delete":
                del obj[path[-1]]
            elif isinstance(obj, list):
                obj.append(copy.deepcopy(obj[path[-1]]))
        except (KeyError, IndexError, TypeError):
            pass
    return d


def _check_loaded(inst):
    for n in inst.nodes:
        assert n.options
        for t, opts in n.options.items():
            assert t >= 1 and opts
            for o in opts:
                for x in (o.p, o.w, o.a, o.b, *o.sfw.values(), *o.sbw.values()):
                    assert math.isfinite(x) and x >= 0


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_instances())
def test_fuzz_structured_mutations(d):
    try:
        inst = instance_from_dict(d, source="fuzz.json")
    except InputError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("fuzz.json: ")
    else:
        _check_loaded(inst)


@settings(max_examples=300, deadline=None)
@given(st.one_of(json_value, st.text(max_size=40), st.binary(max_size=40)))
def test_fuzz_arbitrary_files(tmp_path_factory, content):
    path = tmp_path_factory.mktemp("fz") / "x.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif isinstance(content, str):
        path.write_text(content)
    else:
        path.write_text(json.dumps(content))
    try:
        inst = load_instance(path)
    except InputError as exc:
        assert "\n" not in str(exc)
    else:
        _check_loaded(inst)


def test_dict_with_non_string_sync_keys_is_an_input_error():
    # JSON files always have string keys; a dict built in Python may not
    d = base()
    d["nodes"][0]["TMPCs"]["1"][0]["syncTimeBw"] = {20: 0.0, 30: 0.0}
    with pytest.raises(InputError, match="syncTimeBw: key 20 is not a node id"):
        instance_from_dict(d, source="api")
