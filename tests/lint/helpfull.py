"""Reads the flags a Tandem binary accepts from its absl `--helpfull` listing.

The listing is grouped by defining file ("Flags from <path>:"), one entry per flag:
    --name (help text, possibly wrapped onto lines indented
      by six spaces); default: value;
Flags defined by absl itself (--flagfile, --fromenv, ...) come from files under absl/ and are
marked builtin, so callers can tell them from the binary's own flags.
"""

import dataclasses
import re
import subprocess

_ENTRY = re.compile(r"^--(\w+) \((.*)\); default: (.*);$", re.DOTALL)


@dataclasses.dataclass(frozen=True)
class Flag:
    name: str
    help: str
    default: str
    source: str  # the defining file as --helpfull prints it ("work/main/router/main.cc")
    builtin: bool  # defined by absl, present in every binary


def parse(text):
    """Flags in a --helpfull listing, by name. Raises ValueError on an entry it cannot read."""
    flags = {}
    source = ""
    entry = None

    def finish():
        if entry is None:
            return
        joined = " ".join(entry)
        m = _ENTRY.match(joined)
        if not m:
            raise ValueError(f"unreadable --helpfull entry: {joined!r}")
        name, help_text, default = m.groups()
        flags[name] = Flag(name, help_text, default, source, "absl/" in source)

    for line in text.splitlines():
        if line.startswith("  Flags from "):
            finish()
            entry = None
            source = line[len("  Flags from "):].rstrip(":")
        elif line.startswith("    --"):
            finish()
            entry = [line.strip()]
        elif line.startswith("      ") and entry is not None:
            entry.append(line.strip())
        else:
            finish()
            entry = None
    finish()
    return flags


def flags_of(binary):
    """Runs `binary --helpfull` (absl exits 1 after printing) and parses its output."""
    out = subprocess.run([binary, "--helpfull"], capture_output=True, text=True, timeout=60)
    flags = parse(out.stdout + out.stderr)
    if not flags:
        raise ValueError(f"{binary} --helpfull listed no flags:\n{out.stdout}{out.stderr}")
    return flags
