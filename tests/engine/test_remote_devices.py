"""Remote devices over a real TVM RPC tracker on loopback: a tracker and RPC servers
started with TVM's own entry points stand for devices. The profile and compile stages
measure on the device and name it; a missing, busy or lost device gives a clear error."""

from __future__ import annotations

import socket
import threading
import time

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper
from onnx_builders import build, weight

from engine.contract import StageInputs
from engine.fusion.options import CompileOptions
from engine.fusion.stage import run as compile_stage
from engine.graph.prepare import prepare_model
from engine.profiling.options import ProfileOptions
from engine.profiling.stage import run as profile_stage
from engine.remote import tracker
from engine.remote.device import device_errors, open_device
from engine.remote.tracker import DeviceUnavailable
from engine.report.headlines import headline_figures
from engine.targets.schema import ProfileError, validate_profile


def remote_target(address: str, key: str, **extra) -> object:
    return validate_profile(
        {
            "name": f"remote-{key}",
            "kind": "remote",
            "units": [{"name": "cpu", "kind": "cpu"}],
            "remote": {"tracker": address, "key": key, **extra},
        }
    )


def small_model():
    """x[1,8,16,16] -> Conv 3x3 (16) -> Relu -> GlobalAveragePool -> Flatten -> Gemm(10)."""
    return build(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"], name="relu"),
            helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
            helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
            helper.make_node("Gemm", ["f", "fc", "fb"], ["y"], name="fc", transB=1),
        ],
        [("x", [1, 8, 16, 16])],
        [("y", [1, 10])],
        [weight("w", (16, 8, 3, 3)), weight("b", (16,)), weight("fc", (10, 16)),
         weight("fb", (10,))],
    )  # fmt: skip


@pytest.fixture(scope="module")
def devices(rpc_tracker):
    rpc_tracker.ensure_devices("board", 1)
    return rpc_tracker


def test_the_tracker_lists_its_devices_and_their_queue(devices):
    state = tracker.summary(devices.host, devices.port)
    assert state["keys"]["board"]["total"] == 1
    assert state["keys"]["board"]["free"] == 1 and state["keys"]["board"]["pending"] == 0
    # the tracker is shared with other modules' devices: each server is listed with its key
    assert [s["key"] for s in state["servers"]].count("board") == 1
    assert {s["key"] for s in state["servers"]} <= set(state["keys"])


def test_profile_and_compile_measure_on_the_device_and_name_it(devices, save, tmp_path):
    path = save(small_model())
    prepared = prepare_model(path)
    target = remote_target(devices.address, "board")
    options = ProfileOptions.from_dict({"window_s": 0.3})
    profile = profile_stage(prepared, target, options, lambda f, m: None).to_dict()
    assert profile["measured"] is True and profile["latency_ms"] > 0
    device = profile["measured_on"]
    assert device["key"] == "board" and device["tracker"] == devices.address
    assert device["reported"]["cpu"] and device["reported"]["triple"]
    assert "board" in profile["environment"]["machine"]["cpu_model"]
    assert profile["outputs_match"] is True
    ops = {op["name"]: op for op in profile["ops"]}
    assert ops["conv"]["latency_us"] > 0 and ops["conv"]["kernel"]
    assert all(k["median_us"] > 0 for k in profile["tvm_kernels"]["kernels"])

    compiled = compile_stage(
        prepared, target, CompileOptions.from_dict({}), lambda f, m: None,
        StageInputs(workdir=str(tmp_path)),
    ).to_dict()  # fmt: skip
    assert compiled["measured_on"]["key"] == "board"
    assert compiled["latency_ms"] > 0 and compiled["outputs_match"] is True
    assert compiled["onnxruntime_latency_ms"] is None  # onnxruntime does not run there
    assert "does not run" in compiled["timing"]["onnxruntime"]
    assert compiled["target"]["detected_from"] == "reported by the device"
    assert all(k["time_us"] for k in compiled["kernels"])
    assert compiled["artifact"].endswith(".tar.gz")
    figures = {f.key: f for f in headline_figures({"profile": profile, "compile": compiled})}
    assert figures["compile.latency_ms"].measured
    assert "measured on device 'board'" in figures["compile.latency_ms"].basis
    assert "device 'board'" in figures["profile.latency_ms"].basis
    assert figures["compile.speed_vs_onnxruntime"].value is None  # not known, not 0


def test_the_devices_outputs_match_onnxruntime_on_the_same_inputs(devices, save, tmp_path):
    """What the device computed is compared with onnxruntime here, input for input."""
    from engine.fusion.compile import CompileConfig, compile_model
    from engine.fusion.device_measure import measure_artifact
    from engine.fusion.on_device import device_target

    path = save(small_model())
    target = remote_target(devices.address, "board")
    with open_device(target.remote) as opened:
        spec = device_target(opened, 0)
    compile_model(str(path), CompileConfig(out_dir=str(tmp_path), target_spec=spec, measure=False))
    x = np.random.default_rng(3).standard_normal((1, 8, 16, 16)).astype(np.float32)
    with open_device(target.remote) as opened:
        got = measure_artifact(opened, tmp_path / "artifact", {"x": x}, repeats=3)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got["outputs"]["y"], session.run(None, {"x": x})[0], rtol=1e-4,
                               atol=1e-4)  # fmt: skip
    assert got["latency"]["runs"] == 3


def test_a_key_nobody_registered_is_named_with_the_keys_there(devices):
    target = remote_target(devices.address, "phone")
    with pytest.raises(DeviceUnavailable) as caught, open_device(target.remote):
        pass
    assert caught.value.code == "device_missing"
    assert "'phone'" in caught.value.message and "board" in caught.value.message


def test_a_busy_device_makes_the_next_request_wait_then_give_up(devices):
    target = remote_target(devices.address, "board", wait_s=1.5)
    waits = []
    with open_device(target.remote):  # holds the only device
        started = time.monotonic()
        with pytest.raises(DeviceUnavailable) as caught:
            tracker.request(devices.host, devices.port, "board", wait_s=1.5,
                            progress=waits.append, poll_s=0.5)  # fmt: skip
        assert 1.4 < time.monotonic() - started < 10
    assert caught.value.code == "device_busy"
    assert waits and "waiting" in waits[0] and "board" in waits[0]
    # released: the next request gets it at once
    with open_device(target.remote) as opened:
        assert opened.reported["cpu"]


def test_a_measurement_that_raises_gives_the_device_back_at_once(devices):
    """A failure worker-side (a missing file, a bug) inside the session: the exception,
    kept with its traceback as pytest or a worker's error report keeps it, must not keep
    the remote objects of the frames it came through, and with them the device leased
    until the session times out. A missing file of ours is not reported as the device
    lost."""
    target = remote_target(devices.address, "board", wait_s=2)

    def measure(opened):
        with device_errors(opened):  # a file of ours: not said to be the device's fault
            kernel = opened.session.get_function("runtime.NumThreads")  # a remote handle
            assert kernel() >= 1
            raise FileNotFoundError(2, "No such file or directory", "segment0.kernels.json")

    with pytest.raises(FileNotFoundError) as caught, open_device(target.remote) as opened:
        measure(opened)
    assert caught.value.__traceback__ is not None
    started = time.monotonic()
    with open_device(target.remote) as opened:  # at once, not after the session's timeout
        assert opened.reported["cpu"]
    assert time.monotonic() - started < 2


def test_a_waiting_request_is_withdrawn_when_the_run_is_cancelled(devices):
    from engine.errors import Cancelled

    def cancel(_message):
        raise Cancelled("cancelled by the user")

    target = remote_target(devices.address, "board")
    with open_device(target.remote), pytest.raises(Cancelled):
        tracker.request(devices.host, devices.port, "board", wait_s=30, progress=cancel,
                        poll_s=0.3)  # fmt: skip
    time.sleep(0.5)  # the tracker noticed the closed connection
    assert tracker.summary(devices.host, devices.port)["keys"]["board"]["pending"] == 0


def test_a_device_that_drops_mid_run_is_reported_lost(devices):
    name = devices.add_device("flaky")
    target = remote_target(devices.address, "flaky")
    with open_device(target.remote) as opened:
        devices.stop_device(name)
        time.sleep(0.5)
        with pytest.raises(DeviceUnavailable) as caught, device_errors(opened):
            opened.session.get_function("runtime.NumThreads")()
    assert caught.value.code == "device_lost"
    assert "flaky" in caught.value.message


def test_an_unreachable_tracker_or_another_service_is_said_at_once():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    started = time.monotonic()
    with pytest.raises(DeviceUnavailable) as caught:
        tracker.summary("127.0.0.1", port)
    assert caught.value.code == "tracker_unreachable" and time.monotonic() - started < 5
    # something that is not a tracker: a server that closes at once
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=lambda: listener.accept()[0].close(), daemon=True).start()
    with pytest.raises(DeviceUnavailable, match="did not answer as a TVM RPC tracker"):
        tracker.summary("127.0.0.1", listener.getsockname()[1])
    listener.close()


@pytest.mark.parametrize(
    ("remote", "field"),
    [
        (None, "remote"),
        ({"tracker": "nohost", "key": "k"}, "remote.tracker"),
        ({"tracker": "h:0", "key": "k"}, "remote.tracker"),
        ({"tracker": "h:9190", "key": "a b"}, "remote.key"),
        ({"tracker": "h:9190", "key": "k", "tvm_target": {"kind": "cuda"}}, "remote.tvm_target"),
        ({"tracker": "h:9190", "key": "k", "wait_s": 1e12}, "remote.wait_s"),
        ({"tracker": "h:9190", "key": "k", "extra": 1}, "remote.extra"),
    ],
)
def test_a_remote_target_names_a_valid_tracker_and_key(remote, field):
    document = {"name": "r", "kind": "remote", "units": [{"name": "cpu", "kind": "cpu"}]}
    if remote is not None:
        document["remote"] = remote
    with pytest.raises(ProfileError) as caught:
        validate_profile(document)
    assert field in [f for f, _ in caught.value.problems]


def test_only_a_remote_target_names_a_device():
    with pytest.raises(ProfileError, match="only a remote target"):
        validate_profile(
            {"name": "m", "kind": "modeled", "units": [{"name": "cpu", "kind": "cpu"}],
             "remote": {"tracker": "h:1", "key": "k"}}
        )  # fmt: skip


def test_tuning_measures_on_every_device_of_the_key(rpc_tracker, save, tmp_path):
    """Two devices under one key: MetaSchedule's runner gets a session per candidate from
    the tracker, with a worker per device, and both devices measure (one round of eight
    candidates is enough for both to get some)."""
    path = save(small_model())
    prepared = prepare_model(path)
    loop = rpc_tracker
    loop.ensure_devices("pair", 2)
    target = remote_target(loop.address, "pair")
    options = CompileOptions.from_dict({"tune_trials": 8})
    compiled = compile_stage(
        prepared, target, options, lambda f, m: None, StageInputs(workdir=str(tmp_path))
    ).to_dict()
    servers = tracker.summary(loop.host, loop.port)["servers"]
    servers = {s["address"] for s in servers if s["key"] == "pair"}
    tuning = compiled["tuning"]
    assert tuning["trials"] > 0
    used = tuning["measured_on"]["measurements_by_device"]
    assert len(used) == 2 and all(n > 0 for n in used.values()), used
    assert sum(used.values()) >= tuning["trials"]
    assert compiled["measured_on"]["key"] == "pair" and compiled["outputs_match"] is True
    assert len(servers) == 2
