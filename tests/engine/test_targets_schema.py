"""Target profile validation: every problem reported with its field and reason."""

from __future__ import annotations

import copy

import pytest

from engine.targets import ProfileError, validate_profile


def soc() -> dict:
    return {
        "name": "soc",
        "kind": "modeled",
        "units": [
            {
                "name": "cpu",
                "kind": "cpu",
                "cores": 4,
                "peak_gflops": {"fp32": 60, "fp16": None},
                "mem_bw_gbps": 15,
                "launch_us": 2,
            },
            {
                "name": "npu",
                "kind": "npu",
                "supports": ["Conv", "Relu"],
                "local_buffer_bytes": 65536,
                "global_buffer_bytes": 8388608,
            },
        ],
        "links": [{"from": "cpu", "to": "npu", "latency_us": 500, "gbps": 8}],
        "power": {"cpu": {"active_w": 2.0, "idle_w": 0.3}},
        "networks": [{"name": "wifi", "rtt_ms": 4, "up_mbps": 50, "radio_w": 1.2}],
    }


def problems(document) -> list[tuple[str, str]]:
    with pytest.raises(ProfileError) as caught:
        validate_profile(document)
    return caught.value.problems


def test_a_valid_profile_round_trips():
    profile = validate_profile(soc())
    assert [u.name for u in profile.units] == ["cpu", "npu"]
    assert profile.unit("npu").supports == ("Conv", "Relu")
    assert validate_profile(profile.to_dict()) == profile


def test_unknown_numbers_stay_unknown():
    profile = validate_profile(soc())
    cpu, npu = profile.units
    assert cpu.peak_gflops == {"fp32": 60.0, "fp16": None}  # fp16 known to exist, value unknown
    assert npu.peak_gflops == {} and npu.mem_bw_gbps is None and npu.launch_us is None
    assert profile.to_dict()["units"][1]["mem_bw_gbps"] is None


def test_negative_bandwidth_is_rejected_with_field_and_reason():
    doc = soc()
    doc["units"][0]["mem_bw_gbps"] = -3
    assert problems(doc) == [("units[0].mem_bw_gbps", "must be positive, got -3")]


def test_a_link_to_a_missing_unit_is_rejected():
    doc = soc()
    doc["links"][0]["to"] = "dsp"
    assert problems(doc) == [("links[0].to", "no unit named 'dsp'")]


def test_a_local_buffer_larger_than_the_global_one_is_rejected():
    doc = soc()
    doc["units"][1]["local_buffer_bytes"] = 16 * 2**20
    assert problems(doc) == [
        (
            "units[1].local_buffer_bytes",
            "local buffer (16777216 bytes) is larger than the global buffer (8388608 bytes)",
        )
    ]


def test_every_problem_is_listed_at_once():
    doc = soc()
    doc["units"][0]["mem_bw_gbps"] = -3
    doc["units"][1]["kind"] = "fpga"
    doc["units"][1]["local_buffer_bytes"] = 16 * 2**20
    doc["links"][0]["from"] = "gpu"
    doc["power"]["cpu"]["idle_w"] = 5.0
    doc["networks"][0]["up_mbps"] = 0
    doc["units"][0]["peak_gflops"]["fp24"] = 1
    doc["units"][0]["speed"] = "fast"
    found = dict(problems(doc))
    assert found == {
        "units[0].speed": "unknown field",
        "units[0].mem_bw_gbps": "must be positive, got -3",
        "units[0].peak_gflops.fp24": (
            "unknown dtype; known: fp64, fp32, tf32, fp16, bf16, fp8, int8, int4"
        ),
        "units[1].kind": "unknown value 'fpga'; expected one of cpu, gpu, dsp, npu, dsa",
        "units[1].local_buffer_bytes": (
            "local buffer (16777216 bytes) is larger than the global buffer (8388608 bytes)"
        ),
        "links[0].from": "no unit named 'gpu'",
        "power.cpu.idle_w": "idle power (5.0 W) exceeds active (2.0 W)",
        "networks[0].up_mbps": "must be positive, got 0",
    }


def _set(path: str, **values):
    """A change to the document: update the mapping at ``path`` (``units.0``)."""

    def change(doc):
        target = doc
        for part in filter(None, path.split(".")):
            target = target[int(part)] if part.isdigit() else target[part]
        target.update(values)

    return change


REJECTIONS = [
    (lambda d: d.pop("units"), "units", "is required"),
    (_set("", kind="virtual"), "kind", "unknown value 'virtual'; expected one of "
     "measured, remote, modeled"),
    (_set("units.1", name="cpu"), "units[1].name", "unit 'cpu' is defined twice"),
    (_set("units.0", cores=True), "units[0].cores", "must be a number or null, got True"),
    (_set("units.0", cores=2.5), "units[0].cores", "must be a whole number, got 2.5"),
    (_set("units.0", cores=3, clusters=2), "units[0].cores",
     "3 cores do not split into 2 clusters"),
    (_set("units.0", launch_us=-1), "units[0].launch_us", "must be non-negative, got -1"),
    (_set("units.0", supports="x"), "units[0].supports", "must be 'all' or a list of op types"),
    (_set("units.0", efficiency={"Conv": 0}), "units[0].efficiency.Conv",
     "must be positive, got 0"),
    (lambda d: d["links"].append({"from": "cpu", "to": "cpu"}), "links[1]",
     "a link must join two different units"),
    (lambda d: d["links"].append({"from": "cpu", "to": "npu"}), "links[1]",
     "a second link from 'cpu' to 'npu'"),
    (_set("power", gpu={"active_w": 1}), "power.gpu", "no unit named 'gpu'"),
    (_set("", version=0), "version", "must be positive, got 0"),
]  # fmt: skip


@pytest.mark.parametrize(("change", "field", "reason"), REJECTIONS)
def test_each_rejection_names_the_field(change, field, reason):
    doc = copy.deepcopy(soc())
    change(doc)
    assert (field, reason) in problems(doc)


def test_the_error_is_typed_and_serializable():
    doc = soc()
    doc["units"][0]["mem_bw_gbps"] = -1
    with pytest.raises(ProfileError) as caught:
        validate_profile(doc)
    error = caught.value.to_dict()
    assert error["code"] == "invalid_target"
    assert error["problems"] == [
        {"field": "units[0].mem_bw_gbps", "reason": "must be positive, got -1"}
    ]
    assert "units[0].mem_bw_gbps" in error["message"]


def test_not_a_mapping():
    assert problems([1, 2]) == [("", "a profile must be a mapping, got list")]


def test_a_single_network_is_accepted_as_in_the_architecture_example():
    doc = soc()
    del doc["networks"]
    doc["network"] = {"rtt_ms": 50, "up_mbps": 10, "down_mbps": 50, "radio_w": 1.2}
    (network,) = validate_profile(doc).networks
    assert (network.name, network.rtt_ms, network.down_mbps) == ("default", 50.0, 50.0)
