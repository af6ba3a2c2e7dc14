"""The evaluator: the published reference plans, hand-computed TPS, and every rule of
sec. 2 broken on purpose."""

from __future__ import annotations

import json

import pytest
from builders import cli_json, option_dict
from typer.testing import CliRunner

from piper_cli import app
from piper_ilp.errors import InputError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import instance_from_dict, load_instance
from piper_ilp.plan import Plan, Stage, load_plan, plan_from_dict, plan_to_dict, save_plan


def _reference_cases():
    from conftest import SHARED

    index = SHARED / "reference" / "index.json"
    if not index.exists():
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"needs {index} (not present)"))]
    return [pytest.param(r, id=r["plan"]) for r in json.loads(index.read_text())]


@pytest.mark.parametrize("ref", _reference_cases())
def test_reference_plans_reproduce_published_tps(shared_dir, ref):
    inst = load_instance(shared_dir / ref["instance"]).with_settings(
        K=ref["maxDevices"], M=ref["maxMemoryPerDevice"], N=ref["mbsInBatch"], B=ref["bandwidth"]
    )
    ev = evaluate(inst, load_plan(shared_dir / "reference" / ref["plan"]))
    assert ev.valid, ev.violations
    assert len(ev.stages) == ref["stages"]
    assert ev.tps == pytest.approx(ref["tps"], rel=1e-9)


def test_reference_plan_through_cli_with_units(shared_dir):
    out = cli_json(
        "evaluate",
        shared_dir / "piper-inputs/bert32a100.json",
        shared_dir / "reference/bert32a100-K512-M8GiB-N1920.plan.json",
        *"--devices 512 --memory 8GiB --batch 1920 --bandwidth 25GiB/s --json".split(),
    )
    assert out["valid"] and out["tps"] == pytest.approx(0.00256112784601, rel=1e-9)
    assert out["devices"] == 510 and len(out["stages"]) == 12


def _opt(oid, p, w, a, b, fw=None, bw=None):
    return option_dict(oid, p, w, a, b, sfw=fw, sbw=bw)


@pytest.fixture
def chain():
    """0 -> 1 -> 2, c = 100 bytes on each edge, B = 1000 bytes/s, N = 4, K = 6, M = 50."""
    return instance_from_dict(
        {
            "maxDevices": 6,
            "maxMemoryPerDevice": 50.0,
            "bandwidth": 1000.0,
            "mbsInBatch": 4,
            "nodes": [
                {"id": 0, "TMPCs": {"1": [_opt("v", 1.0, 0, 5, 1, bw={"1": 10})]}},
                {
                    "id": 1,
                    "TMPCs": {
                        "1": [
                            _opt("v", 2.0, 200, 8, 2, fw={"0": 20}, bw={"2": 0}),
                            _opt("r", 3.0, 200, 2, 2, fw={"0": 20}, bw={"2": 0}),
                        ],
                        "2": [_opt("v", 1.2, 100, 4, 1, fw={"0": 50}, bw={"2": 50})],
                    },
                },
                {"id": 2, "TMPCs": {"1": [_opt("v", 0.5, 0, 1, 0, fw={"1": 0})]}},
            ],
            "edges": [
                {"sourceId": 0, "destId": 1, "communicationCost": 100.0},
                {"sourceId": 1, "destId": 2, "communicationCost": 100.0},
            ],
        },
        source="chain",
    )


def test_hand_computed_tps(chain):
    plan = Plan(
        (Stage((0,), 1, 1, {0: "v"}), Stage((1,), 2, 1, {1: "r"}), Stage((2,), 1, 1, {2: "v"}))
    )
    ev = evaluate(chain, plan)
    assert ev.valid, ev.violations
    s0, s1, s2 = ev.stages
    # suffix sums s = 4, 3, 1; y = ceil(s / d) = 4, 2, 1
    assert [r.y for r in ev.stages] == [4, 2, 1]
    # stage 0: out edge 2 (100 + 10) = 220 bytes; p = 1; d = 1: 220 / 1000 + 1
    assert s0.cost.tps == pytest.approx(0.22 + 1.0)
    assert s0.memory == 5 * 4 + 1
    # stage 1 (d = 2): in 2 (100 + 20) + out 2 (100 + 0) = 440 bytes; resync 4 * 1 * 200 / (2 * 4) =
    # 100 bytes
    assert s1.cost.edge == pytest.approx(440 / 2 / 1000)
    assert s1.cost.resync == pytest.approx(100 / 1000)
    assert s1.cost.compute == pytest.approx(3.0 / 2)
    assert s1.memory == 2 * 2 + 2
    # stage 2: in 2 * 100 = 200 bytes, p = 0.5
    assert s2.cost.tps == pytest.approx(0.2 + 0.5)
    assert ev.tps == pytest.approx(0.22 + 0.1 + 1.5) and ev.bottleneck == 1
    assert ev.devices == 4 and ev.sum_d == 4


def test_single_stage_has_no_cut_edges(chain):
    plan = Plan((Stage((0, 1, 2), 4, 1, {0: "v", 1: "r", 2: "v"}),))
    ev = evaluate(chain, plan)
    assert ev.valid
    r = ev.stages[0]
    assert r.cost.edge == 0 and r.y == 1
    assert r.cost.resync == pytest.approx(4 * 3 * 200 / (4 * 4) / 1000)
    assert r.cost.compute == pytest.approx(4.5 / 4)


def rules_of(ev):
    return sorted({v.rule for v in ev.violations})


def test_every_rule_reported(chain):
    cases = [
        (Plan((Stage((0, 1), 1, 1, {0: "v", 1: "v"}),)), [1]),  # node 2 missing
        (
            Plan((Stage((0, 1), 1, 1, {0: "v", 1: "v"}), Stage((1, 2), 1, 1, {1: "v", 2: "v"}))),
            [1],
        ),  # 1 twice
        (
            Plan((Stage((0, 1, 2), 1, 1, {0: "v", 1: "v", 2: "v"}), Stage((), 1, 1, {}))),
            [1],
        ),  # empty stage
        (Plan((Stage((0, 1, 2, 7), 1, 1, {0: "v", 1: "v", 2: "v", 7: "v"}),)), [1]),  # unknown node
        (
            Plan((Stage((2,), 1, 1, {2: "v"}), Stage((0, 1), 1, 1, {0: "v", 1: "v"}))),
            [2],
        ),  # backward edge
        (Plan((Stage((0, 1, 2), 3, 1, {0: "v", 1: "v", 2: "v"}),)), [3]),  # 3 does not divide 4
        (Plan((Stage((0, 1, 2), 1, 1, {0: "v", 1: "x", 2: "v"}),)), [4]),  # unknown option
        (
            Plan((Stage((0, 1, 2), 1, 2, {0: "v", 1: "v", 2: "v"}),)),
            [4],
        ),  # nodes 0, 2 have no t = 2
        (Plan((Stage((0, 1, 2), 1, 1, {0: "v", 1: "v"}),)), [4]),  # no entry for 2
        (
            Plan((Stage((0,), 4, 1, {0: "v"}), Stage((1, 2), 4, 1, {1: "r", 2: "v"}))),
            [5],
        ),  # sum d = 8 > 4
        (
            Plan((Stage((0, 1), 1, 1, {0: "v", 1: "v"}), Stage((2,), 1, 1, {2: "v"}))),
            [6],
        ),  # y = 2: 11 + 18 ... fits?
    ]
    # the last case: stage 0 has y = 2: 5*2+1 + 8*2+2 = 29 <= 50 fits; make M smaller to break it
    small = chain.with_settings(M=28.0)
    for plan, expected in cases[:-1]:
        ev = evaluate(chain, plan)
        assert rules_of(ev) == expected, (plan, ev.violations)
        assert ev.tps is None
    ev = evaluate(small, cases[-1][0])
    assert rules_of(ev) == [6] and ev.violations[0].stage == 0
    assert "29" in ev.violations[0].message and "y = 2" in ev.violations[0].message
    ev = evaluate(
        chain.with_settings(K=1),
        Plan((Stage((0,), 1, 1, {0: "v"}), Stage((1, 2), 1, 1, {1: "r", 2: "v"}))),
    )
    assert rules_of(ev) == [5] and "t*d = 2 exceeds K = 1" in ev.violations[0].message


def test_cli_lists_violations_and_exits_1(tmp_path, chain):
    from piper_ilp.instance import save_instance

    inst = tmp_path / "chain.json"
    save_instance(chain, inst)
    plan = tmp_path / "bad.plan.json"
    save_plan(Plan((Stage((2,), 3, 1, {2: "v"}), Stage((0, 1), 1, 1, {0: "v", 1: "nope"}))), plan)
    r = CliRunner().invoke(app, ["evaluate", str(inst), str(plan)])
    assert r.exit_code == 1
    assert "INVALID plan: 3 violation(s)" in r.output
    assert "rule 2 (stage 1, node 1): edge 0->1" not in r.output  # the backward edge is 1->2
    assert "rule 2 (stage 0, node 2): edge 1->2 goes backward" in r.output
    assert "rule 3 (stage 0): d = 3" in r.output
    assert "rule 4 (stage 1, node 1): node 1 has no option 'nope' for t = 1" in r.output
    r = CliRunner().invoke(app, ["evaluate", str(inst), str(plan), "--json"])
    out = json.loads(r.output)
    assert r.exit_code == 1 and not out["valid"] and out["tps"] is None
    assert sorted(v["rule"] for v in out["violations"]) == [2, 3, 4]


def test_plan_forms_round_trip(tmp_path):
    listed = {
        "stages": [
            {
                "nodes": [0, 1],
                "dataParallelDegree": 2,
                "tensorParallelDegree": 1,
                "TMPCids": [[0, "vanilla"], [1, "activation recomp"]],
            }
        ]
    }
    p = plan_from_dict(listed)
    assert p.stages[0].options == {0: "vanilla", 1: "activation recomp"}
    d = plan_to_dict(p)
    assert d["stages"][0]["TMPCids"] == {"0": "vanilla", "1": "activation recomp"}
    assert plan_from_dict(d) == p
    path = tmp_path / "p.json"
    save_plan(p, path)
    assert load_plan(path) == p


@pytest.mark.parametrize(
    "bad,where",
    [
        ([], "top level"),
        ({"stage": []}, "top level"),
        ({"stages": {}}, "stages"),
        ({"stages": [1]}, "stages[0]"),
        (
            {"stages": [{"nodes": [0], "dataParallelDegree": 1, "tensorParallelDegree": 1}]},
            "TMPCids",
        ),
        (
            {
                "stages": [
                    {
                        "nodes": ["a"],
                        "dataParallelDegree": 1,
                        "tensorParallelDegree": 1,
                        "TMPCids": {},
                    }
                ]
            },
            "nodes",
        ),
        (
            {
                "stages": [
                    {
                        "nodes": [0],
                        "dataParallelDegree": 1.5,
                        "tensorParallelDegree": 1,
                        "TMPCids": {},
                    }
                ]
            },
            "dataParallelDegree",
        ),
        (
            {
                "stages": [
                    {
                        "nodes": [0],
                        "dataParallelDegree": 1,
                        "tensorParallelDegree": 1,
                        "TMPCids": [[0]],
                    }
                ]
            },
            "pairs",
        ),
        (
            {
                "stages": [
                    {
                        "nodes": [0],
                        "dataParallelDegree": 1,
                        "tensorParallelDegree": 1,
                        "TMPCids": {"x": "v"},
                    }
                ]
            },
            "'x'",
        ),
        (
            {
                "stages": [
                    {
                        "nodes": [0],
                        "dataParallelDegree": 1,
                        "tensorParallelDegree": 1,
                        "TMPCids": {"0": 3},
                    }
                ]
            },
            "string",
        ),
    ],
)
def test_malformed_plans(bad, where):
    with pytest.raises(InputError) as err:
        plan_from_dict(bad, source="p.json")
    assert where in str(err.value) and str(err.value).startswith("p.json: ")


# ---- does the plan belong to the instance? ----


def _chain_plan():
    return Plan(
        (Stage((0,), 1, 1, {0: "v"}), Stage((1,), 2, 1, {1: "r"}), Stage((2,), 1, 1, {2: "v"}))
    )


def test_plan_with_its_own_metadata_matches(tmp_path, chain):
    from piper_ilp.evaluate import check_plan_matches
    from piper_ilp.instance import save_instance
    from piper_ilp.plan import plan_metadata

    meta = plan_metadata(chain, method="dp", restrictions={"max_d": None}, mode="exact")
    path = tmp_path / "p.json"
    save_plan(_chain_plan(), path, metadata=meta)
    plan = load_plan(path)
    assert dict(plan.metadata) == meta and plan.metadata["instance"] == chain.fingerprint()
    assert check_plan_matches(chain, plan) is None
    inst = tmp_path / "chain.json"
    save_instance(chain, inst)
    r = CliRunner().invoke(app, ["evaluate", str(inst), str(path)])
    assert r.exit_code == 0 and "valid plan" in r.output, r.output


def test_plan_for_another_model_or_other_settings_is_one_line(tmp_path, chain):
    from piper_ilp.evaluate import check_plan_matches
    from piper_ilp.instance import instance_to_dict, save_instance
    from piper_ilp.plan import plan_metadata

    other = instance_to_dict(chain)
    other["nodes"][2]["TMPCs"]["1"][0]["timePerSample"] = 0.75
    other = instance_from_dict(other)
    assert other.fingerprint() != chain.fingerprint()
    plan = Plan(_chain_plan().stages, metadata=plan_metadata(other, method="dp"))
    msg = check_plan_matches(chain, plan)
    assert "another model" in msg and other.fingerprint() in msg and chain.fingerprint() in msg
    plan = Plan(
        _chain_plan().stages, metadata=plan_metadata(chain.with_settings(K=5, M=64.0), method="dp")
    )
    msg = check_plan_matches(chain, plan)
    assert "K = 5 (evaluating with 6)" in msg and "M = 64.0 (evaluating with 50.0)" in msg
    assert "N =" not in msg and "B =" not in msg
    assert check_plan_matches(chain.with_settings(K=5, M=64.0), plan) is None

    inst, path = tmp_path / "chain.json", tmp_path / "p.json"
    save_instance(chain, inst)
    save_plan(plan, path)
    # evaluate takes the recorded settings (issue 30 point 1): no refusal, no flag needed
    r = CliRunner().invoke(app, ["evaluate", str(inst), str(path)])
    assert r.exit_code == 0, r.output
    assert "settings from the plan's metadata: K=5 M=64 B N=4" in r.output, r.output
    r = CliRunner().invoke(app, ["evaluate", str(inst), str(path), "-K", "5", "-M", "64"])
    assert r.exit_code == 0 and "from the flags: K=5 M=64 B" in r.output, r.output
    r = CliRunner().invoke(app, ["evaluate", str(inst), str(path), "--ignore-metadata"])
    assert r.exit_code == 0 and "valid plan" in r.output, r.output
    assert "from the instance file: K=6 M=50 B" in r.output, r.output
    # a plan for another model is still refused in one line
    other_path = tmp_path / "other.json"
    save_plan(Plan(_chain_plan().stages, metadata=plan_metadata(other, method="dp")), other_path)
    r = CliRunner().invoke(app, ["evaluate", str(inst), str(other_path)])
    assert r.exit_code == 2 and len(r.output.splitlines()) == 1, r.output
    assert "another model" in r.output and "--ignore-metadata" in r.output


def test_plan_without_metadata_must_name_exactly_the_instance_nodes(tmp_path, chain):
    from piper_ilp.evaluate import check_plan_matches
    from piper_ilp.instance import save_instance

    assert check_plan_matches(chain, _chain_plan()) is None
    foreign = Plan((Stage(tuple(range(100, 140)), 1, 1, {v: "v" for v in range(100, 140)}),))
    msg = check_plan_matches(chain, foreign)
    assert "40 of its node ids are not in the instance (100, 101, 102, ...)" in msg
    assert "3 of the instance's 3 nodes are in no stage (0, 1, 2)" in msg
    partial = Plan((Stage((0, 1), 1, 1, {0: "v", 1: "v"}),))
    msg = check_plan_matches(chain, partial)
    assert (
        "1 of the instance's 3 nodes are in no stage (2)" in msg
        and "not in the instance" not in msg
    )

    inst, path = tmp_path / "chain.json", tmp_path / "p.json"
    save_instance(chain, inst)
    save_plan(foreign, path)
    r = CliRunner().invoke(app, ["evaluate", str(inst), str(path)])
    assert (
        r.exit_code == 2 and len(r.output.splitlines()) == 1 and "40 of its node ids" in r.output
    ), r.output
    r = CliRunner().invoke(app, ["evaluate", str(inst), str(path), "--ignore-metadata"])
    assert r.exit_code == 1 and "INVALID plan" in r.output and r.output.count("rule 1") == 43, (
        r.output
    )


def _solved_plan(tmp_path, *settings):
    """small.json solved with ``settings`` (flags) and saved by solve -o."""
    from conftest import INPUTS

    path = tmp_path / "p.json"
    r = CliRunner().invoke(
        app, ["solve", str(INPUTS / "small.json"), *settings, "-o", str(path), "--json"]
    )
    assert r.exit_code == 0, r.output
    return INPUTS / "small.json", path, json.loads(r.output.splitlines()[-1])


def test_evaluate_and_simulate_take_the_settings_the_plan_records(tmp_path):
    """Issue 30 point 1: a plan solved with other K, M, N and mode than the instance file's
    evaluates as solved, says where each setting came from, and a flag overrides."""
    inst, path, solved = _solved_plan(
        tmp_path, "-K", "16", "-M", "1GiB", "-N", "32", "--schedule", "gpipe"
    )
    r = CliRunner().invoke(app, ["evaluate", str(inst), str(path), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["settings"] == {"K": 16, "M": 2.0**30, "N": 32, "B": solved["settings"]["B"]}
    assert out["mode"]["schedule"] == "gpipe" and out["objective"] == solved["objective"]
    assert set(out["settings_from"].values()) == {"metadata"}
    r = CliRunner().invoke(app, ["evaluate", str(inst), str(path)])
    assert r.exit_code == 0, r.output
    assert (
        "settings from the plan's metadata: K=16 M=1 GiB N=32 B=9.313 GiB/s pipeline=sequential "
        "objective=throughput schedule=gpipe" in r.output
    ), r.output
    # a flag overrides the recorded value; here the plan no longer fits
    r = CliRunner().invoke(app, ["evaluate", str(inst), str(path), "-M", "1MiB", "--json"])
    out = json.loads(r.output)
    assert r.exit_code == 1 and not out["valid"] and out["settings"]["M"] == 2.0**20
    assert out["settings_from"]["M"] == "flags" and out["settings_from"]["K"] == "metadata"
    # --ignore-metadata: the instance file's settings and the default mode
    r = CliRunner().invoke(app, ["evaluate", str(inst), str(path), "--ignore-metadata", "--json"])
    out = json.loads(r.output)
    assert out["settings"]["K"] == 8 and out["mode"]["schedule"] == "1f1b"
    assert out["settings_from"]["K"] == "instance" and out["settings_from"]["schedule"] == "default"
    # simulate: the same settings
    r = CliRunner().invoke(app, ["simulate", str(inst), str(path), "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.output)
    assert out["schedule"] == "gpipe" and out["settings_from"]["N"] == "metadata"
    r = CliRunner().invoke(app, ["simulate", str(inst), str(path)])
    assert "settings from the plan's metadata: K=16 M=1 GiB N=32" in r.output, r.output


def test_a_recorded_setting_out_of_range_names_the_plan_file(tmp_path):
    inst, path, _ = _solved_plan(tmp_path)
    data = json.loads(path.read_text())
    data["metadata"]["K"] = 0
    path.write_text(json.dumps(data))
    r = CliRunner().invoke(app, ["evaluate", str(inst), str(path)])
    assert r.exit_code == 2 and len(r.output.splitlines()) == 1, r.output
    assert f"{path}: metadata.K must be an integer within [1, 1048576], got 0" in r.output
