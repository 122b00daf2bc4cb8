"""Energy in profiles: per-op predicted energy from the target's power, and measured package
energy from RAPL counters (a fake powercap directory stands in for /sys/class/powercap)."""

from __future__ import annotations

from pathlib import Path

import pytest
from onnx import helper
from onnx_builders import build, weight

from engine.graph import analyze_model
from engine.profiling import rapl
from engine.profiling.predicted import predict_profile
from engine.targets import get_target


def _zone(root: Path, name: str, energy_uj: int, max_uj: int | None = 262_143_328_850) -> Path:
    path = root / name
    path.mkdir(parents=True)
    (path / "energy_uj").write_text(f"{energy_uj}\n")
    (path / "name").write_text(f"package-{name.split(':')[1]}\n")
    if max_uj is not None:
        (path / "max_energy_range_uj").write_text(f"{max_uj}\n")
    return path


def test_rapl_package_energy_per_run_from_a_fake_sysfs(tmp_path):
    first = _zone(tmp_path, "intel-rapl:0", 1_000_000)
    _zone(tmp_path, "intel-rapl:0:0", 5)  # a sub-zone (core): inside the package already
    second = _zone(tmp_path, "intel-rapl:1", 7_000)
    (tmp_path / "dtpm").mkdir()  # another powercap control type
    counters = rapl.open_counters(tmp_path)
    assert [z.name for z in counters.zones] == ["package-0", "package-1"]
    before = counters.read()
    (first / "energy_uj").write_text("3500000\n")  # 2.5 J on package 0
    (second / "energy_uj").write_text("507000\n")  # 0.5 J on package 1
    result = rapl.measured_energy(counters, before, counters.read(), runs=100)
    assert result["measured"] is True and result["reason"] is None
    assert result["package_j"] == pytest.approx(3.0)
    assert result["energy_mj_per_run"] == pytest.approx(30.0)
    assert "other processes" in result["note"]


def test_a_wrapped_counter_is_unwrapped_with_its_range(tmp_path):
    zone = _zone(tmp_path, "intel-rapl:0", 999_000, max_uj=1_000_000)
    counters = rapl.open_counters(tmp_path)
    before = counters.read()
    (zone / "energy_uj").write_text("1000\n")  # 1000 uJ to the wrap, then 1000 more
    result = rapl.measured_energy(counters, before, counters.read(), runs=1)
    assert result["package_j"] == pytest.approx(0.002)


def test_amd_zones_are_read_too(tmp_path):
    _zone(tmp_path, "amd-rapl:0", 10)
    assert not isinstance(rapl.open_counters(tmp_path), str)


def test_no_powercap_is_unavailable_with_the_reason_not_zero(tmp_path):
    result = rapl.measured_energy(rapl.open_counters(tmp_path / "absent"), None, None, runs=10)
    assert result["measured"] is False and result["energy_mj_per_run"] is None
    assert result["reason"].startswith("unavailable: no powercap interface")
    empty = rapl.open_counters(tmp_path)
    assert isinstance(empty, str) and "no RAPL package zone" in empty


def test_an_unreadable_counter_says_root_only(tmp_path, monkeypatch):
    _zone(tmp_path, "intel-rapl:0", 10)

    def denied(path: Path) -> int:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(rapl, "_read_int", denied)
    reason = rapl.open_counters(tmp_path)
    assert isinstance(reason, str) and "root only" in reason


def test_predicted_ops_carry_energy_from_the_targets_power():
    model = build(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        [("x", [64, 256])],
        [("y", [64, 256])],
        [weight("w", (256, 256))],
    )
    target = get_target("phone-snapdragon835")
    profile = predict_profile(analyze_model(model).graph, target)
    op = profile.ops[0]
    big = target.power["cpu_big"]
    assert op.energy_uj["cpu_big"] == pytest.approx(
        op.latency_us["cpu_big"] * (big.active_w - big.idle_w)
    )
    assert op.energy_uj["gpu"] == pytest.approx(op.latency_us["gpu"] * 1.94)
    assert op.energy_uj["dsp"] is None  # no power figure for the DSP: unknown, not 0
    assert profile.energy_unknown_units == ["dsp"]
    assert any("energy unknown on dsp" in note for note in profile.notes)
    assert profile.to_dict()["energy_model"].startswith("predicted")


def test_the_measured_profile_has_package_energy_or_says_why_not():
    from onnx_builders import LIGHT_DIR

    from engine.profiling.nodes import NodeProfileConfig, profile_nodes

    config = NodeProfileConfig(window_s=0.1, min_runs=3, sessions=1, threads=1)
    energy = profile_nodes(str(LIGHT_DIR / "light_squeezenet.onnx"), config).energy
    if energy["measured"]:  # a machine whose counters this user may read
        assert energy["energy_mj_per_run"] > 0 and energy["runs"] >= 3
    else:
        assert energy["energy_mj_per_run"] is None
        assert energy["reason"].startswith("unavailable: ")
