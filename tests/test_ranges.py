"""Numbers (cost model sec. 7): memory fits iff its fsum is <= M with no slack, every sum
of a stage is correctly rounded, every value inside the supported ranges is handled with
finite results, and every value outside them is refused in one line naming the field and
the range."""

from __future__ import annotations

import json
import math
import sys
from fractions import Fraction

import pytest
from builders import option_dict
from typer.testing import CliRunner

from piper_cli import app
from piper_ilp.errors import InputError
from piper_ilp.evaluate import evaluate
from piper_ilp.instance import (
    ID_MAX,
    ID_MIN,
    MAX_BATCH,
    MAX_DEVICES,
    VALUE_MAX,
    VALUE_MIN,
    instance_from_dict,
)
from piper_ilp.plan import Plan, Stage
from piper_ilp.solution import Restrictions, divisors, divisors_upto


def _opt(p=1.0, w=0.0, a=0.0, b=0.0, fw=None, bw=None, oid="v"):
    return option_dict(oid, p, w, a, b, sfw=fw, sbw=bw)


def _independent(options: list[dict], K=4, M=100.0, B=1.0, N=4, t="1") -> dict:
    """Nodes 0..n-1 without edges, one option each."""
    return {
        "maxDevices": K,
        "maxMemoryPerDevice": M,
        "bandwidth": B,
        "mbsInBatch": N,
        "nodes": [{"id": i, "TMPCs": {t: [o]}} for i, o in enumerate(options)],
        "edges": [],
    }


def _one_stage(n: int, d: int = 1) -> Plan:
    return Plan((Stage(tuple(range(n)), d, 1, {i: "v" for i in range(n)}),))


def _exact_memory(a_b: list[tuple[float, float]], y: int) -> float:
    """sum of a * y + b, with each product rounded as a float (sec. 7: fsum of the floats
    a * y and b), then the exact rational sum rounded once."""
    return float(sum((Fraction(a * y) + Fraction(b) for a, b in a_b), Fraction(0)))


# ---- memory: no slack, correctly rounded ----


def test_memory_exactly_M_fits_and_one_ulp_less_does_not():
    a_b = [(0.1, 0.2), (0.7, 1e-3), (3.3, 0.0)]
    # stage 0 = nodes 0-2 with d = 1, stage 1 = node 3 (a = b = 0) with d = 2: s = 3, y = 3
    y = 3
    used = _exact_memory(a_b, y)
    inst = instance_from_dict(
        _independent([_opt(a=a, b=b) for a, b in a_b] + [_opt()], N=4, M=used)
    )
    plan = Plan((Stage((0, 1, 2), 1, 1, {0: "v", 1: "v", 2: "v"}), Stage((3,), 2, 1, {3: "v"})))
    ev = evaluate(inst, plan)
    assert ev.valid, ev.violations
    assert ev.stages[0].y == 3 and ev.stages[0].memory == used
    below = evaluate(inst.with_settings(M=math.nextafter(used, 0.0)), plan)
    assert [v.rule for v in below.violations] == [6]
    # the message shows the digits that differ, not two equal 6-digit roundings
    assert repr(used) in below.violations[0].message
    assert evaluate(inst.with_settings(M=math.nextafter(used, math.inf)), plan).valid


def test_memory_is_fsum_not_left_to_right_addition():
    # b = 1e16, 1, 1: the exact total 10000000000000002 is a float; adding left to right
    # rounds 1e16 + 1 back to 1e16 twice and gets 1e16
    bs = [1e16, 1.0, 1.0]
    naive = 0.0
    for b in bs:
        naive += b
    exact = 10**16 + 2
    assert naive == 1e16 and float(exact) == exact  # the premise of the test
    inst = instance_from_dict(_independent([_opt(b=b) for b in bs], N=1, M=1e16))
    ev = evaluate(inst, _one_stage(3))
    assert ev.stages[0].memory == exact
    assert [v.rule for v in ev.violations] == [6]  # left-to-right addition would say it fits
    assert evaluate(inst.with_settings(M=float(exact)), _one_stage(3)).valid


def test_each_tps_sum_is_correctly_rounded():
    # p: 1e16, 1, 1 (compute); w: resync terms 4 (d-1) w / (d N) of 1e16, 1, 1 when d = 2, N = 2;
    # edges: node 0 -> 1, 0 -> 2 cut by a two-stage plan, c = 1e16 and 1, sfw/sbw 0 and 1
    opts = [
        _opt(p=1e16, w=1e16, bw={"1": 0.0, "2": 1.0}),
        _opt(p=1.0, w=1.0, fw={"0": 0.0}),
        _opt(p=1.0, w=1.0, fw={"0": 1.0}),
    ]
    d = _independent(opts, K=8, N=2)
    d["edges"] = [
        {"sourceId": 0, "destId": 1, "communicationCost": 1e16},
        {"sourceId": 0, "destId": 2, "communicationCost": 1.0},
    ]
    inst = instance_from_dict(d)
    ev = evaluate(inst, _one_stage(3, d=2))
    c = ev.stages[0].cost
    assert c.p_sum == 10**16 + 2
    # 4 (2 - 1) w / (2 * 2) = w per node
    assert c.resync_bytes == 10**16 + 2
    plan = Plan((Stage((0,), 1, 1, {0: "v"}), Stage((1, 2), 1, 1, {1: "v", 2: "v"})))
    ev = evaluate(inst, plan)
    assert ev.valid, ev.violations
    # node 0's cut edges: 2 (1e16 + 0) + 2 (1 + 1); stage 1's: 2 (1e16 + 0) + 2 (1 + 1)
    assert ev.stages[0].cost.edge_bytes == 2 * 10**16 + 4
    assert ev.stages[1].cost.edge_bytes == 2 * 10**16 + 4


# ---- supported ranges: the boundaries load and give finite numbers ----


def _edge_of_extremes(value, B):
    """Nodes 0 -> 1, every number ``value`` (p, w, a, b, sync and edge), K and N at their
    maxima, M = VALUE_MAX and bandwidth ``B``."""
    every = dict(p=value, w=value, a=value, b=value)
    data = _independent(
        [_opt(**every, bw={"1": value}), _opt(**every, fw={"0": value})],
        K=MAX_DEVICES,
        N=MAX_BATCH,
        M=VALUE_MAX,
        B=B,
    )
    data["edges"] = [{"sourceId": 0, "destId": 1, "communicationCost": value}]
    return data


def test_extremes_of_every_range_give_finite_normal_results():
    huge = _edge_of_extremes(VALUE_MAX, B=VALUE_MIN)
    huge["nodes"][0]["id"] = 0
    inst = instance_from_dict(huge)
    plan = Plan((Stage((0,), 2, 1, {0: "v"}), Stage((1,), 1, 1, {1: "v"})))
    ev = evaluate(inst, plan)
    assert [v.rule for v in ev.violations] == [6, 6]  # a y + b >= 2e30 does not fit in M = 1e30
    for r in ev.stages:
        assert math.isfinite(r.memory) and math.isfinite(r.cost.tps) and r.cost.tps > 0
    inst = instance_from_dict(_edge_of_extremes(VALUE_MIN, B=VALUE_MAX))
    ev = evaluate(inst, Plan((Stage((0,), 2, 1, {0: "v"}), Stage((1,), 2**19, 1, {1: "v"}))))
    assert ev.valid, ev.violations
    for r in ev.stages:
        assert r.cost.tps >= sys.float_info.min and r.cost.resync_bytes >= sys.float_info.min


def test_magnitudes_from_1e_minus_6_to_1e18_in_one_instance():
    vals = [10.0**e for e in range(-6, 19)]
    opts = [
        _opt(p=vals[i], w=vals[-1 - i], a=vals[(i * 7) % 25], b=vals[(i * 11) % 25])
        for i in range(5)
    ]
    inst = instance_from_dict(_independent(opts, K=16, M=1e18, B=1e-6, N=2**20))
    ev = evaluate(inst, _one_stage(5, d=16))
    assert all(math.isfinite(x) for x in (ev.stages[0].memory, ev.stages[0].cost.tps))
    # the p sum is exact to the last bit: 1e-6 + 1e-5 + ... as an exact rational, rounded once
    assert ev.stages[0].cost.p_sum == float(sum(Fraction(vals[i]) for i in range(5)))


@pytest.mark.parametrize(
    "path,value,field,rng",
    [
        (["maxDevices"], MAX_DEVICES + 1, "maxDevices", f"[1, {MAX_DEVICES}]"),
        (["mbsInBatch"], MAX_BATCH + 1, "mbsInBatch", f"[1, {MAX_BATCH}]"),
        (["mbsInBatch"], 10**18, "mbsInBatch", f"[1, {MAX_BATCH}]"),
        (["maxMemoryPerDevice"], 1e31, "maxMemoryPerDevice", "[1e-30, 1e+30]"),
        (["maxMemoryPerDevice"], 1e300, "maxMemoryPerDevice", "[1e-30, 1e+30]"),
        (["bandwidth"], 1e-31, "bandwidth", "[1e-30, 1e+30]"),
        (["bandwidth"], 10**400, "bandwidth", "[1e-30, 1e+30]"),
        (
            ["nodes", 0, "TMPCs", "1", 0, "timePerSample"],
            1e-31,
            "timePerSample",
            "0 or within [1e-30, 1e+30]",
        ),
        (
            ["nodes", 0, "TMPCs", "1", 0, "parameterSize"],
            5e-324,
            "parameterSize",
            "0 or within [1e-30, 1e+30]",
        ),
        (
            ["nodes", 0, "TMPCs", "1", 0, "memoryUsageA"],
            2e30,
            "memoryUsageA",
            "0 or within [1e-30, 1e+30]",
        ),
        (
            ["nodes", 0, "TMPCs", "1", 0, "memoryUsageB"],
            10**31,
            "memoryUsageB",
            "0 or within [1e-30, 1e+30]",
        ),
        (
            ["nodes", 0, "TMPCs", "1", 0, "memoryUsageB"],
            10**400,
            "memoryUsageB",
            "0 or within [1e-30, 1e+30]",
        ),
        (["nodes", 0, "id"], 2**63, "id", f"[{ID_MIN}, {ID_MAX}]"),
        (["nodes", 0, "id"], -(2**63) - 1, "id", f"[{ID_MIN}, {ID_MAX}]"),
    ],
)
def test_out_of_range_values_are_refused_naming_field_and_range(path, value, field, rng):
    d = _independent([_opt(), _opt()])
    obj = d
    for k in path[:-1]:
        obj = obj[k]
    obj[path[-1]] = value
    with pytest.raises(InputError) as err:
        instance_from_dict(d, source="r.json")
    msg = str(err.value)
    assert msg.startswith("r.json: ") and "\n" not in msg
    assert field in msg and rng in msg, msg


def test_boundaries_are_accepted():
    opts = [_opt(p=0.0, w=VALUE_MIN, a=VALUE_MAX, b=-0.0), _opt(p=VALUE_MAX, w=0, a=0, b=VALUE_MIN)]
    d = _independent(opts, K=MAX_DEVICES, N=MAX_BATCH, M=VALUE_MIN, B=VALUE_MAX)
    d["nodes"][0]["id"], d["nodes"][1]["id"] = ID_MIN, ID_MAX
    d["nodes"][1]["TMPCs"] = {str(MAX_DEVICES): d["nodes"][1]["TMPCs"]["1"]}
    inst = instance_from_dict(d)
    assert (inst.K, inst.N, inst.M, inst.B) == (MAX_DEVICES, MAX_BATCH, VALUE_MIN, VALUE_MAX)
    assert inst.node_ids == [ID_MIN, ID_MAX] and inst.t_values == [1, MAX_DEVICES]
    assert math.copysign(1.0, inst.nodes[0].options[1][0].b) == 1.0  # -0.0 reads as 0


def test_t_key_beyond_the_device_range_is_refused():
    d = _independent([_opt()])
    d["nodes"][0]["TMPCs"][str(MAX_DEVICES + 1)] = [_opt()]
    with pytest.raises(
        InputError,
        match=rf"t = '{MAX_DEVICES + 1}' is outside the supported range \[1, {MAX_DEVICES}\]",
    ):
        instance_from_dict(d, source="t.json")


@pytest.mark.parametrize(
    "kwargs,field",
    [
        ({"K": 0}, "K (maxDevices)"),
        ({"K": MAX_DEVICES + 1}, "K (maxDevices)"),
        ({"K": True}, "K (maxDevices)"),
        ({"N": 10**18}, "N (mbsInBatch)"),
        ({"N": 2.0}, "N (mbsInBatch)"),
        ({"M": 1e300}, "M (maxMemoryPerDevice)"),
        ({"M": 10**400}, "M (maxMemoryPerDevice)"),
        ({"M": float("nan")}, "M (maxMemoryPerDevice)"),
        ({"B": 0.0}, "B (bandwidth)"),
        ({"B": 1e-31}, "B (bandwidth)"),
    ],
)
def test_with_settings_refuses_out_of_range(kwargs, field):
    inst = instance_from_dict(_independent([_opt()]), source="s.json")
    with pytest.raises(InputError) as err:
        inst.with_settings(**kwargs)
    msg = str(err.value)
    assert msg.startswith("s.json: setting " + field) and "within [" in msg and "\n" not in msg


def test_with_settings_accepts_boundaries_and_rebuilds_views():
    inst = instance_from_dict(_independent([_opt(), _opt()]))
    other = inst.with_settings(K=MAX_DEVICES, N=MAX_BATCH, M=VALUE_MAX, B=VALUE_MIN)
    assert (other.K, other.N, other.M, other.B) == (MAX_DEVICES, MAX_BATCH, VALUE_MAX, VALUE_MIN)
    assert other.node.keys() == inst.node.keys() and other.graph.number_of_nodes() == 2
    assert not hasattr(inst, "_cache")


def test_cli_override_out_of_range_is_one_line(tmp_path):
    path = tmp_path / "i.json"
    path.write_text(json.dumps(_independent([_opt()])))
    plan = tmp_path / "p.json"
    plan.write_text(
        json.dumps(
            {
                "stages": [
                    {
                        "nodes": [0],
                        "dataParallelDegree": 1,
                        "tensorParallelDegree": 1,
                        "TMPCids": {"0": "v"},
                    }
                ]
            }
        )
    )
    for args, field in (
        (["--memory", "1e31"], "--memory (M)"),
        (["--devices", str(2**21)], "--devices (K)"),
        (["--batch", str(10**18)], "--batch (N)"),
        (["--bandwidth", "1e-40"], "--bandwidth (B)"),
    ):
        r = CliRunner().invoke(app, ["evaluate", str(path), str(plan), *args])
        assert r.exit_code == 2, r.output
        lines = r.output.splitlines()
        assert len(lines) == 1 and field in lines[0] and "within [" in lines[0], r.output


# ---- divisors ----


def test_divisors_upto_matches_the_definition():
    for n in range(1, 400):
        for cap in (1, 2, 3, 5, 12, 19, n - 1, n, n + 7):
            assert divisors_upto(n, cap) == [
                k for k in range(1, n + 1) if n % k == 0 and k <= cap
            ], (n, cap)
    assert divisors_upto(0, 5) == [] and divisors_upto(12, 0) == []
    assert divisors(36) == [1, 2, 3, 4, 6, 9, 12, 18, 36]


def test_divisors_upto_of_a_huge_n_with_a_small_cap():
    n = 10**18  # 2^18 5^18: the divisors <= 1000 are 2^i 5^j <= 1000
    expected = sorted(2**i * 5**j for i in range(19) for j in range(19) if 2**i * 5**j <= 1000)
    assert divisors_upto(n, 1000) == expected
    p = 2**61 - 1  # a prime: only 1 below any small cap
    assert divisors_upto(p, 10**6) == [1]


def test_d_values_are_the_divisors_of_N_up_to_K_and_max_d():
    inst = instance_from_dict(_independent([_opt()], K=64, N=MAX_BATCH))
    assert Restrictions().d_values(inst) == [2**i for i in range(7)]
    assert Restrictions(max_d=10).d_values(inst) == [1, 2, 4, 8]
    inst = instance_from_dict(_independent([_opt()], K=MAX_DEVICES, N=2 * 3 * 5 * 7))
    assert Restrictions().d_values(inst) == divisors(210)


# ---- PipeDream's own options ----

_PD_GRAPH = (
    "node1 -- A -- forward_compute_time=1.0, backward_compute_time=0.0, activation_size=1.0, "
    "parameter_size=8.0\nnode2 -- B -- forward_compute_time=1.0, backward_compute_time=0.0, "
    "activation_size=1.0, parameter_size=8.0\n\tnode1 -- node2\n"
)


@pytest.mark.parametrize(
    "command",
    [["pipedream", "--machines", "2"], ["verify", "--model", "pipedream", "--devices", "2"]],
)
@pytest.mark.parametrize(
    "option,value",
    [
        (o, v)
        for o in ("--memory", "--bandwidth")
        for v in ("1e31", "1e-31", "5e-324", "1e308", "-1", "0", "nan", "inf")
    ],
)
def test_pipedream_memory_and_bandwidth_out_of_range_are_one_line_exit_2(
    tmp_path, command, option, value
):
    """`pipedream` and `verify --model pipedream` read --memory / --bandwidth with the ranges of
    Piper's M and B (check_setting); 1e31 or 5e-324 were planned with."""
    path = tmp_path / "graph.txt"
    path.write_text(_PD_GRAPH)
    args = {"--memory": "8", "--bandwidth": "1e9", option: value}
    r = CliRunner().invoke(
        app,
        [
            *command[:1],
            *command[1:-2],
            str(path),
            *command[-2:],
            "--bandwidth",
            args["--bandwidth"],
            "--memory",
            args["--memory"],
        ],
    )
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and option in lines[0], r.output


@pytest.mark.parametrize(
    "command",
    [["pipedream", "--machines", "2"], ["verify", "--model", "pipedream", "--devices", "2"]],
)
def test_pipedream_memory_and_bandwidth_at_the_range_ends_are_accepted(tmp_path, command):
    path = tmp_path / "graph.txt"
    path.write_text(_PD_GRAPH)
    for b, m in ((VALUE_MIN, VALUE_MAX), (VALUE_MAX, VALUE_MIN)):
        r = CliRunner().invoke(
            app,
            [
                *command[:1],
                *command[1:-2],
                str(path),
                *command[-2:],
                "--bandwidth",
                repr(b),
                "--memory",
                repr(m),
            ],
        )
        assert r.exit_code in (0, 1), (
            r.output
        )  # 1: verify's verdict or no plan under the memory rule
        assert "error" not in r.output, r.output
