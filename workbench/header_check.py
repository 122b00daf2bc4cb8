"""Read an uploaded model's header in a process of its own: ``python -m
workbench.header_check`` with ``{"path", "limits", "memory_bytes"}`` on stdin prints
``{"header": ...}`` or ``{"error": {"code", "message", "hint"}}``.

Parsing an ONNX file holds all of it in memory (a 500 MB upload is 500 MB of protobuf at
least), and a hostile file may make the parser work hard. The web process must stay small
and responsive whatever is uploaded, so a large upload is parsed here, under an address-space
limit, and only the header comes back (see ``workbench.uploads``). No Django here.
"""

from __future__ import annotations

import json
import resource
import sys


def main() -> int:
    request = json.loads(sys.stdin.read())
    limit = int(request["memory_bytes"])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    from engine.errors import EngineError
    from engine.graph import read_header

    try:
        header = read_header(request["path"], **request["limits"])
    except EngineError as e:
        answer = {"error": e.to_dict()}
    except MemoryError:
        answer = {
            "error": {
                "code": "model_limit",
                "message": f"reading the model needed more than {limit / 1e9:.1f} GB of memory",
                "hint": "Simplify the model, or ask the administrator to raise the limit.",
            }
        }
    else:
        answer = {"header": header.to_dict()}
    sys.stdout.write(json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main())
