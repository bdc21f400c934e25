#!/usr/bin/env python3
"""Keeps docs/configuration.md's flag tables equal to what the binaries report.

    config_doc.py --doc docs/configuration.md --binary tandem-prefill=PATH ... \
                  --make-model PATH [--write]

The doc holds one generated block per file that defines flags:
    <!-- BEGIN GENERATED FLAGS serving/instance_flags.cc -->
    ...table built from --helpfull...
    <!-- END GENERATED FLAGS -->
("absl" is the block of absl's own flags, which every binary has). Without --write the doc is
compared with freshly generated blocks and any difference is printed as a diff (exit 1); with
--write the blocks are regenerated in place. A defining file without a block, or a block for a
file no binary reports, is an error either way. tandem-make-model has its own argument parser:
every --option its usage line names must appear in its section, which is written by hand.
"""

import argparse
import difflib
import os
import re
import subprocess
import sys

import helpfull

REPO = os.path.realpath(os.path.join(os.path.dirname(__file__), "..", ".."))
BLOCK = re.compile(r"(<!-- BEGIN GENERATED FLAGS (\S+) -->\n)(.*?)(<!-- END GENERATED FLAGS -->)",
                   re.DOTALL)
ABSL = "absl"


def source_key(source):
    """'work/main/serving/instance_flags.cc' -> 'serving/instance_flags.cc' (relative to the
    repository); absl's own files -> 'absl'."""
    if "absl/" in source:
        return ABSL
    path = os.path.normpath("/" + source.lstrip("./"))
    rel = os.path.relpath(path, REPO)
    if rel.startswith(".."):
        raise ValueError(f"flag source {source} is outside the repository {REPO}")
    return rel


def collect(binaries):
    """{source key: ({flag name: Flag}, [names of the binaries that have them])}."""
    by_source = {}
    for name, path in binaries:
        for flag in helpfull.flags_of(path).values():
            flags, users = by_source.setdefault(source_key(flag.source), ({}, []))
            flags[flag.name] = flag
            if name not in users:
                users.append(name)
    return by_source


def cell(text):
    return text.replace("|", "\\|")


def render(flags, users):
    lines = []
    if users:
        lines.append(f"Accepted by: {', '.join(f'`{u}`' for u in users)}.\n\n")
    lines.append("| Flag | Default | Meaning |\n|---|---|---|\n")
    for name in sorted(flags):
        f = flags[name]
        default = f"`{f.default}`" if f.default else "(none)"
        lines.append(f"| `--{name}` | {cell(default)} | {cell(f.help)} |\n")
    return "".join(lines)


def regenerate(doc, by_source, errors):
    seen = set()

    def replace(m):
        key = m.group(2)
        seen.add(key)
        if key not in by_source:
            errors.append(f"the doc has a block for {key}, but no binary reports flags from it")
            return m.group(0)
        flags, users = by_source[key]
        return m.group(1) + render(flags, [] if key == ABSL else users) + m.group(4)

    out = BLOCK.sub(replace, doc)
    for key in sorted(set(by_source) - seen):
        errors.append(f"no block for the flags of {key}: add\n"
                      f"    <!-- BEGIN GENERATED FLAGS {key} -->\n"
                      f"    <!-- END GENERATED FLAGS -->\n  to the doc and run with --write")
    return out


def check_make_model(doc, path, errors):
    out = subprocess.run([path, "--help"], capture_output=True, text=True, timeout=60)
    usage = out.stdout + out.stderr
    options = sorted(set(re.findall(r"\[?(--[a-z][a-z0-9-]*)", usage)) - {"--help"})
    if not options:
        errors.append(f"{path} --help printed no options:\n{usage}")
    m = re.search(r"^## `tandem-make-model`.*?(?=^## |\Z)", doc, re.DOTALL | re.MULTILINE)
    if not m:
        errors.append("the doc has no '## `tandem-make-model`' section")
        return
    for option in options:
        if f"`{option}" not in m.group(0):
            errors.append(f"tandem-make-model option {option} is not in its doc section")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--doc", required=True)
    parser.add_argument("--binary", action="append", default=[], metavar="NAME=PATH")
    parser.add_argument("--make-model", required=True, metavar="PATH")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    binaries = [tuple(b.split("=", 1)) for b in args.binary]
    with open(args.doc) as f:
        doc = f.read()
    errors = []
    expected = regenerate(doc, collect(binaries), errors)
    check_make_model(expected, args.make_model, errors)
    if args.write and expected != doc:
        with open(args.doc, "w") as f:
            f.write(expected)
        print(f"config_doc: rewrote the flag tables of {args.doc}")
    elif expected != doc:
        sys.stdout.writelines(difflib.unified_diff(doc.splitlines(True), expected.splitlines(True),
                                                   args.doc, "generated"))
        errors.append(f"{args.doc} is stale; regenerate it with\n  python3 {__file__} "
                      + " ".join(sys.argv[1:]) + " --write")
    for e in errors:
        print(f"config_doc: {e}", file=sys.stderr)
    if errors:
        return 1
    if not args.write:
        print(f"config_doc: {args.doc} lists every flag of {len(binaries)} binaries")
    return 0


if __name__ == "__main__":
    sys.exit(main())
