"""``workbench profile MODEL --target phone-snapdragon835 --unit gpu --json`` carries the
mobile-GPU analysis under ``mobile_gpu``; ``--gpu-api`` picks the backend."""

from __future__ import annotations

import json

from onnx_builders import LIGHT_DIR

from cli.main import main

PHONE = "phone-snapdragon835"
INCEPTION = str(LIGHT_DIR / "light_inception_v1.onnx")


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_the_gpu_unit_profile_has_the_mobile_gpu_key(capsys):
    code, out, err = run(capsys, "profile", INCEPTION, "--target", PHONE, "--unit", "gpu", "--json")
    assert code == 0, err
    section = json.loads(out)["mobile_gpu"]
    assert section["available"] and section["unit"] == "gpu" and section["api"] == "opengl-es-3.1"
    summary = section["summary"]
    # Two LRNs have no GPU kernel: three delegate nodes, four crossings.
    assert (summary["gpu_partitions"], summary["boundaries"]) == (3, 4)
    assert summary["boundary_bytes"] == sum(b["bytes"] for b in section["boundaries"])
    assert any("(LRN) runs on the CPU" in f["text"] for f in section["findings"])
    assert section["basis"].startswith("predicted (layout rules of the TFLite GPU delegate")


def test_the_api_option_and_the_text_summary(capsys):
    code, out, err = run(capsys, "profile", INCEPTION, "--target", PHONE, "--unit", "gpu",
                         "--gpu-api", "metal")  # fmt: skip
    assert code == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("mobile gpu")]
    assert "gpu via metal" in line and "3 partitions, 4 boundaries" in line


def test_a_bad_api_is_refused_with_the_engines_words(capsys):
    code, out, err = run(capsys, "profile", INCEPTION, "--target", PHONE, "--gpu-api", "vulkan")
    assert code == 2 and out == ""
    assert "profile.gpu_api: 'vulkan' is not one of opengl-es-3.1, opencl, metal" in err
