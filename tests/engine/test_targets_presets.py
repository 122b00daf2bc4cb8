"""The bundled presets: valid, cited, shaped as the issue asks, and the thesis's numbers."""

from __future__ import annotations

import json

import pytest

from engine.errors import EngineError
from engine.targets import CostModel, get_target, load_presets, validate_profile

RAW_INPUT_BYTES = 224 * 224 * 3 * 4  # the thesis's raw image, float32


@pytest.fixture(scope="module")
def presets():
    return {p.name: p for p in load_presets()}


def test_the_presets(presets):
    assert set(presets) == {"host", "phone-snapdragon835", "cloud-xeon-e5-2620v4", "dsa-graphturbo"}
    assert presets["host"].kind == "measured"
    assert {p.kind for n, p in presets.items() if n != "host"} == {"modeled"}
    for profile in presets.values():
        assert validate_profile(json.loads(json.dumps(profile.to_dict()))) == profile


def test_host_is_this_machine_with_unknown_roofs(presets):
    host = presets["host"]
    (cpu,) = host.units
    assert host.machine["logical_cores"] >= 1 and cpu.cores >= 1
    assert cpu.peak_gflops == {"fp32": None} and cpu.mem_bw_gbps is None


def test_phone_has_big_and_little_clusters_a_gpu_and_a_dsp(presets):
    phone = presets["phone-snapdragon835"]
    kinds = {u.name: u.kind for u in phone.units}
    assert kinds == {"cpu_big": "cpu", "cpu_little": "cpu", "gpu": "gpu", "dsp": "dsp"}
    assert phone.unit("cpu_big").peak_gflops["fp32"] > phone.unit("cpu_little").peak_gflops["fp32"]
    assert "fp32" not in phone.unit("dsp").peak_gflops  # integer-only HVX
    assert CostModel(phone).transfer_us(10**6, "cpu_big", "cpu_little") == 0.0  # shared memory


def test_dsa_is_shaped_like_graphturbo(presets):
    (dsa,) = presets["dsa-graphturbo"].units
    assert (dsa.clusters, dsa.cores // dsa.clusters) == (4, 8)
    assert dsa.local_buffer_bytes == 64 * 1024
    assert dsa.global_buffer_bytes == 8 * 1024 * 1024


def test_every_known_number_in_a_modeled_preset_cites_its_source(presets):
    for profile in presets.values():
        if profile.kind != "modeled":
            continue
        entries = [(f"unit {u.name}", u.to_dict()) for u in profile.units]
        entries += [(f"power {n}", p.to_dict()) for n, p in profile.power.items()]
        entries += [(f"network {n.name}", n.to_dict()) for n in profile.networks]
        entries += [(f"link {k.src}-{k.dst}", k.to_dict()) for k in profile.links]
        for where, entry in entries:
            source = entry["source"]
            assert source, f"{profile.name} {where} has no source"
            for key, value in _numbers(entry):
                if isinstance(source, dict):
                    cited = key in source or key.split(".")[0] in source
                    assert cited, f"{profile.name} {where}: {key} = {value} has no citation"


def _numbers(entry: dict, prefix: str = ""):
    for key, value in entry.items():
        if key in ("source", "efficiency"):
            continue
        if isinstance(value, dict):
            yield from _numbers(value, f"{prefix}{key}.")
        elif isinstance(value, int | float) and not isinstance(value, bool):
            yield f"{prefix}{key}", value


def test_4g_upload_of_the_raw_input_costs_0_45_joules(presets):
    """Thesis L736/L788: 180 ms over 4G with a 2.5 W radio is 0.45 J."""
    seconds, joules = CostModel(presets["cloud-xeon-e5-2620v4"]).network_transfer(
        RAW_INPUT_BYTES, "4g"
    )
    assert seconds == pytest.approx(0.18, abs=1e-4)
    assert joules == pytest.approx(0.45, abs=1e-3)


def test_wifi_reproduces_both_thesis_uploads(presets):
    """L742-751: the raw input in 100.7 ms, the bottleneck_3_3 tensor in 20.3 ms; 0.121 J."""
    model = CostModel(presets["cloud-xeon-e5-2620v4"])
    raw_s, raw_j = model.network_transfer(RAW_INPUT_BYTES, "wifi")
    cut_s, _ = model.network_transfer(28 * 28 * 32 * 4, "wifi")
    assert raw_s == pytest.approx(0.1007, abs=2e-4)
    assert cut_s == pytest.approx(0.0203, abs=2e-4)
    assert raw_j == pytest.approx(0.121, abs=1e-3)


def test_get_target_by_name_or_file(presets, tmp_path):
    assert get_target("dsa-graphturbo") == presets["dsa-graphturbo"]
    path = tmp_path / "mine.json"
    path.write_text(json.dumps({**presets["dsa-graphturbo"].to_dict(), "name": "mine"}))
    assert get_target(str(path)).name == "mine"
    with pytest.raises(EngineError) as caught:
        get_target("no-such-target")
    assert caught.value.code == "unknown_target"
