#!/usr/bin/env python3
"""Pure (*_core) targets link only std + abseil; this checks they also include nothing else.

Reads "target:/abs/path.cc" lines (written by tests/lint/CMakeLists.txt from the PURE targets of
cmake/TandemTargets.cmake) and scans each source and its same-named header for includes of UCX,
gRPC, protobuf, CUDA, NCCL or oneDNN. Exits 1 listing every offending include.
"""
import os
import re
import sys

FORBIDDEN = re.compile(
    r'#\s*include\s*[<"](ucp/|ucs/|uct/|grpc|grpcpp/|google/protobuf|cuda|cublas|nccl|'
    r'oneapi/dnnl|dnnl|tandem/v1/)')


def main() -> int:
    entries = [line.strip() for line in open(sys.argv[1]) if line.strip()]
    if not entries:
        print("no PURE sources listed: the CMake property is not being collected")
        return 1
    problems = []
    checked = 0
    for entry in entries:
        target, path = entry.split(":", 1)
        candidates = [path, os.path.splitext(path)[0] + ".h"]
        for f in candidates:
            if not os.path.exists(f):
                continue
            checked += 1
            for n, line in enumerate(open(f, encoding="utf-8"), 1):
                if FORBIDDEN.search(line):
                    problems.append(f"{f}:{n}: {line.strip()}  (PURE target {target})")
    for p in problems:
        print(p)
    print(f"checked {checked} files of {len(entries)} PURE sources; {len(problems)} forbidden includes")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
