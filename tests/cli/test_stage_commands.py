"""The stage commands of ``workbench``: ARCHITECTURE 5b's keys, exit codes, one-line errors,
and options validated by the engine (the same words as the API)."""

from __future__ import annotations

import json

import pytest
from onnx import helper
from onnx_builders import LIGHT_DIR, build, weight
from test_memory_planners import toy_model

from cli.main import main
from engine.memory.options import PLANNERS

SQUEEZENET = str(LIGHT_DIR / "light_squeezenet.onnx")
PHONE = "phone-snapdragon835"


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def tiny(save):
    model = build(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
            helper.make_node("Relu", ["h"], ["y"], name="relu"),
        ],
        [("x", ["batch", 64])],
        [("y", ["batch", 64])],
        [weight("w", (64, 64))],
    )
    return save(model)


# --- analyze --------------------------------------------------------------------------


def test_analyze_json_has_the_documented_keys(capsys):
    code, out, err = run(capsys, "analyze", SQUEEZENET, "--json")
    assert code == 0 and err == ""
    result = json.loads(out)
    assert {"nodes", "params", "macs", "ops", "not_costed", "inputs", "outputs"} <= set(result)
    assert "node_list" not in result
    assert result["inputs"] == [{"name": "data_0", "shape": [1, 3, 224, 224], "dtype": "float32"}]
    assert result["macs"] == 349_151_936 and result["not_costed"] == []
    assert result["preparation"]["inputs"][0]["sources"] == ["declared"] * 4


def test_analyze_nodes_flag_adds_the_node_list(capsys):
    code, out, _ = run(capsys, "analyze", SQUEEZENET, "--json", "--nodes")
    assert code == 0
    assert len(json.loads(out)["node_list"]) == json.loads(out)["nodes"]


def test_a_symbolic_batch_is_bound_to_1_and_says_so(capsys, tiny):
    code, out, _ = run(capsys, "analyze", tiny, "--json")
    result = json.loads(out)
    assert code == 0 and result["macs"] == 64 * 64
    binding = result["preparation"]["inputs"][0]
    assert binding["shape"] == [1, 64] and binding["sources"] == ["default", "declared"]
    code, out, _ = run(capsys, "analyze", tiny, "--shape", "x=3x64", "--json")
    assert code == 0 and json.loads(out)["macs"] == 3 * 64 * 64


def test_analyze_human_summary(capsys):
    code, out, _ = run(capsys, "analyze", SQUEEZENET)
    assert code == 0
    assert "params       1.235 M" in out and "MACs" in out and "prepared     105 ->" in out


def test_bad_shape_argument_is_a_usage_error(capsys):
    code, out, err = run(capsys, "analyze", SQUEEZENET, "--shape", "data_0=1x3xbig")
    assert code == 2 and out == ""
    assert err.startswith("error: argument --shape: dimensions of 'data_0' must be positive")
    assert len(err.splitlines()) == 1


def test_wrong_rank_is_bad_input_with_hint(capsys):
    code, _, err = run(capsys, "analyze", SQUEEZENET, "--shape", "data_0=1x3x224")
    assert code == 2
    assert err.splitlines()[0] == (
        "error: input 'data_0' has rank 4 (shape 1x3x224x224), but the given shape 1x3x224 "
        "has rank 3"
    )
    assert err.splitlines()[1] == "Give 4 dimensions for 'data_0'."


def test_not_onnx_and_missing_model(capsys, save):
    code, _, err = run(capsys, "analyze", save(b"not onnx"), "--json")
    assert code == 2 and err.startswith("error: not an ONNX model")
    code, _, err = run(capsys, "analyze", "--json")
    assert code == 2 and err.startswith("error: give the path of an .onnx model")


def test_an_internal_error_exits_1(capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr("engine.graph.stage.analyze_prepared", broken)
    code, _, err = run(capsys, "analyze", SQUEEZENET)
    assert code == 1 and err.strip() == "error: internal error: RuntimeError: boom"


# --- options are the engine's ----------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["profile", "--window-s", "0"], "profile.window_s: must be at least 0.1, got 0.0"),
        (["profile", "--window-s", "1e9"], "profile.window_s: must be at most 120"),
        (["profile", "--threads", "-1"], "profile.threads: must be at least 0, got -1"),
        (["partition", "--algorithms", "magic"], "partition.algorithms: 'magic' is not one of"),
        (["memplan", "--planners", "magic"], "memory.planners: 'magic' is not one of"),
        (["accuracy", "--candidate", "tvm-int3"], "accuracy.candidate: 'tvm-int3' is not one"),
    ],
)
def test_a_bad_option_names_its_field(capsys, argv, message):
    code, out, err = run(capsys, argv[0], SQUEEZENET, *argv[1:], "--json")
    assert code == 2 and out == ""
    assert err.startswith("error: invalid options: ") and message in err


def test_a_non_numeric_option_is_a_usage_error(capsys):
    code, _, err = run(capsys, "profile", SQUEEZENET, "--window-s", "soon")
    assert code == 2 and err.strip() == (
        "error: argument --window-s: expected a number, got 'soon'"
    )


# --- profile --------------------------------------------------------------------------


def test_profile_measured_on_host(capsys, tiny):
    code, out, err = run(capsys, "profile", tiny, "--threads", "1", "--window-s", "0.1",
                         "--no-tvm-kernels", "--json")  # fmt: skip
    assert code == 0 and err == ""
    result = json.loads(out)
    assert result["measured"] is True and result["target"] == "host"
    assert [o["name"] for o in result["ops"]] == ["mm", "relu"]
    assert {"name", "op_type", "latency_us"} <= set(result["ops"][0])
    assert result["latency_ms"] == result["latency"]["median"] > 0
    assert result["environment"]["intra_op_threads"] == 1


def test_profile_predicted_for_a_modeled_target(capsys):
    code, out, _ = run(capsys, "profile", SQUEEZENET, "--target", PHONE, "--json")
    assert code == 0
    result = json.loads(out)
    assert result["measured"] is False and result["model"] == "roofline+efficiency v1"
    units = {u["name"]: u for u in result["units"]}
    assert set(units) == {"cpu_big", "cpu_little", "gpu", "dsp"}
    assert result["latency_ms"] == pytest.approx(units[result["unit"]]["latency_ms"])
    assert any(f["text"].startswith("dsp cannot run") for f in result["findings"])


def test_a_chosen_unit_that_cannot_run_everything_has_no_total(capsys):
    code, out, _ = run(capsys, "profile", SQUEEZENET, "--target", PHONE, "--unit", "dsp", "--json")
    result = json.loads(out)
    assert code == 0 and result["latency_ms"] is None and result["unit"] == "dsp"


def test_unknown_numbers_stay_unknown(capsys, tmp_path):
    # The DSA preset with its (assumed) throughput and bandwidth taken out again.
    from engine.targets import get_target

    profile = get_target("dsa-graphturbo").to_dict()
    unit = profile["units"][0]
    unit.update(peak_gflops={"fp32": None, "fp16": None, "int8": None}, mem_bw_gbps=None)
    path = tmp_path / "bare-dsa.json"
    path.write_text(json.dumps({**profile, "name": "bare-dsa"}))
    code, out, _ = run(capsys, "profile", SQUEEZENET, "--target", str(path), "--json")
    assert code == 0 and json.loads(out)["latency_ms"] is None


def test_profile_text_says_predicted(capsys):
    code, out, _ = run(capsys, "profile", SQUEEZENET, "--target", "cloud-xeon-e5-2620v4")
    assert code == 0
    assert out.splitlines()[0].startswith("target       cloud-xeon-e5-2620v4 / cpu (predicted by")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--target", "nowhere"], "error: unknown target 'nowhere'"),
        (["--target", PHONE, "--unit", "npu"], f"error: target '{PHONE}' has no unit 'npu'"),
    ],
)
def test_profile_bad_target_exits_2_with_one_line(capsys, argv, message):
    code, out, err = run(capsys, "profile", SQUEEZENET, *argv, "--json")
    assert code == 2 and out == ""
    assert err.splitlines()[0] == message


# --- partition ------------------------------------------------------------------------


@pytest.mark.parametrize("algorithm", ["hope-ilp", "hope-heuristic", "heft", "chain-dp", "blocks"])
def test_partition_json_has_the_documented_keys(capsys, algorithm):
    code, out, err = run(capsys, "partition", SQUEEZENET, "--target", PHONE, "--algorithm",
                         algorithm, "--time-limit-s", "5", "--no-check-execution", "--json")  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    keys = {"algorithm", "makespan_ms", "best_single_unit_ms", "solve_s", "valid", "placement"}
    assert keys <= set(result)
    assert result["valid"] and result["algorithm"] == algorithm
    assert len(result["placement"]) == 65 and "timeline" not in result  # prepared ops
    assert any("link cost unknown" in n for n in result["notes"])  # the assumption is shown


def test_mobile_cloud_uses_the_cloud_preset_and_a_network(capsys):
    code, out, err = run(capsys, "partition", SQUEEZENET, "--target", PHONE, "--algorithm",
                         "mobile-cloud", "--network", "wifi", "--json", "--schedule")  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert "cloud" in result["units"] and result["details"]["network"] == "wifi"
    assert len(result["details"]["curve"]) == 66  # every cut, from input to output


def test_partition_writes_the_sub_models_and_checks_them(capsys, tmp_path):
    code, out, err = run(capsys, "partition", SQUEEZENET, "--target", PHONE, "--algorithms",
                         "heft", "--out", str(tmp_path), "--json")  # fmt: skip
    assert code == 0, err
    result = json.loads(out)
    assert result["execution_check"]["outputs_match"]
    assert (tmp_path / "submodels" / "manifest.json").exists()


def test_partition_on_one_unit_says_why_not(capsys):
    code, out, err = run(capsys, "partition", SQUEEZENET, "--target", "host", "--json")
    assert code == 2 and out == ""
    assert err.startswith("error: not applicable: target 'host' has one compute unit")


# --- memplan --------------------------------------------------------------------------


def test_memplan_has_the_documented_keys_and_the_toy_numbers(capsys, save):
    code, out, err = run(capsys, "memplan", save(toy_model()), "--no-compare-tvm", "--json")
    assert code == 0 and err == ""
    result = json.loads(out)
    assert {"lower_bound_bytes", "planners", "best", "valid"} <= set(result)
    assert result["lower_bound_bytes"] == 76 and result["valid"] is True
    assert set(result["planners"]) == set(PLANNERS)
    assert result["planners"]["mincost-flow"] == 84
    assert result["complete"] is True


@pytest.mark.parametrize("name", PLANNERS)
def test_every_planner_runs_alone(capsys, name):
    code, out, _ = run(capsys, "memplan", SQUEEZENET, "--planners", name, "--no-compare-tvm",
                       "--json")  # fmt: skip
    result = json.loads(out)
    assert code == 0 and list(result["planners"]) == [name] and result["best"] == name


def test_memplan_text_marks_the_best_and_fits_a_local_buffer(capsys, save):
    code, out, _ = run(capsys, "memplan", save(toy_model()), "--local-buffer-bytes", "64",
                       "--no-compare-tvm")  # fmt: skip
    assert code == 0
    assert "lower bound" in out and "greedy-by-size    *" in out and "off-core" in out


def test_memplan_sets_tvms_static_allocations_next_to_ours(capsys):
    code, out, _ = run(capsys, "memplan", SQUEEZENET, "--json")
    assert code == 0
    tvm = json.loads(out)["tvm"]
    assert tvm["tvm_static_bytes"] > tvm["ours_bytes"] >= tvm["lower_bound_bytes"] > 0
    code, out, _ = run(capsys, "memplan", SQUEEZENET)
    assert code == 0 and "StaticPlanBlockMemory" in out and "on the same tensors" in out


# --- compile --------------------------------------------------------------------------


def test_a_second_compile_copies_its_builds_from_the_cache(capsys, tiny, tmp_path):
    """`compile` keeps built segments in the build cache (each test has its own, see
    conftest): the same model compiled again builds nothing; `--build-cache none` builds."""
    fast = ["--threads", "1", "--json", "--no-choose-backends", "--conv-layout", "nchw"]
    first, second, none = (
        run(capsys, "compile", tiny, "--out", str(tmp_path / d), *fast, *extra)
        for d, extra in (("a", []), ("b", []), ("c", ["--build-cache", "none"]))
    )
    builds = [json.loads(out)["builds"] for code, out, _ in (first, second, none) if code == 0]
    assert len(builds) == 3 and builds[0]["cache"] == str(tmp_path / "builds")
    assert builds[0]["not_in_cache"] >= 1 and builds[0]["from_cache"] == 0
    assert builds[1]["from_cache"] == builds[0]["not_in_cache"] and builds[1]["not_in_cache"] == 0
    assert builds[2]["cache"] is None


@pytest.mark.parametrize(
    "command",
    ["analyze", "profile", "partition", "memplan", "compile", "accuracy", "targets"]
    + ["submit", "wait", "download", "result", "figures", "compare"],
)
def test_every_command_prints_its_help(capsys, command):
    """argparse %-formats help texts: an engine option's help with a literal '%' made
    `workbench profile --help` crash."""
    code, out, _ = run(capsys, command, "--help")
    assert code == 0 and out.startswith("usage: workbench " + command)
