"""Write every zoo model as an .onnx file: ``python bench/build_models.py OUTDIR [--seed N]``.

Prints one JSON object ``{name: {"path", "bytes", "nodes"}}``. The models come from
``engine.zoo`` (seeded random weights; VGG-16 with ConstantOfShape-filled weights), so the
same seed writes the same bytes.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from engine.zoo import ZOO, build  # noqa: E402


def write_models(outdir: Path, seed: int = 0) -> dict[str, dict]:
    """Build and save every zoo model into ``outdir``; returns what was written."""
    outdir.mkdir(parents=True, exist_ok=True)
    written = {}
    for name in ZOO:
        model = build(name, seed)
        path = outdir / f"{name}.onnx"
        path.write_bytes(model.SerializeToString())
        written[name] = {
            "path": str(path),
            "bytes": path.stat().st_size,
            "nodes": len(model.graph.node),
        }
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(json.dumps(write_models(args.outdir, args.seed), indent=1))


if __name__ == "__main__":
    main()
