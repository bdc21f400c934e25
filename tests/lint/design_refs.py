#!/usr/bin/env python3
"""The project stands alone: no tracked file cites the old out-of-tree specification
("DESIGN.md", "DESIGN §n"), and every citation of docs/design.md names an anchor that exists.

    design_refs.py REPO_ROOT          check the repository (tracked files; every file when
                                      REPO_ROOT is not a git checkout)
    design_refs.py --self-test        check the checker on made-up inputs

Anchors are the ones a Markdown renderer gives design.md's headings (GitHub's rule: lower case,
punctuation other than '-' and '_' dropped, spaces to '-', repeats numbered -1, -2, ...) plus
any explicit <a id="..."> / <a name="...">. A citation is `design.md#anchor`, with any path in
front (`docs/design.md#lease-protocol`, `(design.md#lse-merge)`).
"""

import os
import re
import subprocess
import sys
import tempfile
import unittest

DESIGN_DOC = "docs/design.md"
# "DESIGN.md" anywhere, or "DESIGN §3" / "DESIGN.md §3" style section citations.
OLD_SPEC = re.compile(r"DESIGN\.md|DESIGN\s*§")
# `design.md#a`, also as a list: `docs/design.md#a, #b`.
CITATION = re.compile(r"design\.md((?:#[A-Za-z0-9_\-]+)(?:,\s*#[A-Za-z0-9_\-]+)*)")
SELF_LINK = re.compile(r"\]\(#([A-Za-z0-9_\-]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
# This checker and its registration mention the patterns on purpose.
EXEMPT = {"tests/lint/design_refs.py"}
SKIP_DIRS = {".git", "build"}
BINARY_SUFFIXES = (".gguf", ".png", ".jpg", ".gz", ".xz", ".tar", ".bin", ".so", ".a", ".o")


def slug(heading):
    """GitHub's anchor for a heading text (before de-duplication)."""
    text = re.sub(r"`", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(markdown):
    """Every anchor a Markdown document defines."""
    seen = {}
    out = set()
    in_fence = False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
            continue
        out.update(EXPLICIT.findall(line))
        if in_fence:
            continue
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def problems(files, design_text):
    """files: iterable of (path, text). Returns a list of 'path:line: message' strings."""
    defined = anchors(design_text) if design_text is not None else set()
    out = []
    if design_text is None:
        out.append(f"{DESIGN_DOC}: missing")
    for path, text in files:
        if path in EXEMPT:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OLD_SPEC.search(line):
                out.append(f"{path}:{number}: cites the out-of-tree DESIGN.md; cite "
                           f"{DESIGN_DOC}#<section> instead: {line.strip()}")
            for cited in CITATION.findall(line):
                for anchor in re.findall(r"#([A-Za-z0-9_\-]+)", cited):
                    if anchor in defined:
                        continue
                    out.append(f"{path}:{number}: {DESIGN_DOC} has no anchor #{anchor}")
    # design.md's own links to its sections.
    for number, line in enumerate((design_text or "").splitlines(), 1):
        for anchor in SELF_LINK.findall(line):
            if anchor not in defined:
                out.append(f"{DESIGN_DOC}:{number}: links to a missing anchor #{anchor}")
    return out


def list_files(root):
    try:
        listed = subprocess.run(["git", "-C", root, "ls-files", "-z"], check=True,
                                capture_output=True).stdout.decode().split("\0")
        return [p for p in listed if p]
    except (OSError, subprocess.CalledProcessError):
        paths = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith("build")]
            for name in filenames:
                paths.append(os.path.relpath(os.path.join(dirpath, name), root))
        return paths


def read_files(root, paths):
    for path in paths:
        if path.endswith(BINARY_SUFFIXES):
            continue
        full = os.path.join(root, path)
        if not os.path.isfile(full):
            continue  # deleted in the work tree, not yet in the index
        with open(full, "rb") as f:
            data = f.read()
        if b"\0" in data:
            continue
        yield path, data.decode("utf-8", errors="replace")


def check(root):
    design = os.path.join(root, DESIGN_DOC)
    design_text = open(design, encoding="utf-8").read() if os.path.isfile(design) else None
    return problems(read_files(root, list_files(root)), design_text)


class SelfTest(unittest.TestCase):
    DOC = "# Design\n\n## Lease protocol\n\n### LSE merge\n\n## `KvHandle` (wire)\n\n" \
          "```\n# not a heading\n```\n## Lease protocol\n<a id=\"extra\"></a>\n"

    def test_anchors_follow_the_renderer(self):
        self.assertEqual(anchors(self.DOC), {"design", "lease-protocol", "lse-merge",
                                             "kvhandle-wire", "lease-protocol-1", "extra"})

    def test_old_spec_citations_are_reported(self):
        for line in ["// Layout (DESIGN.md §3).", "see DESIGN §6", "../shared/DESIGN.md"]:
            found = problems([("a.h", line)], self.DOC)
            self.assertEqual(len(found), 1, line)
            self.assertIn("a.h:1: cites the out-of-tree DESIGN.md", found[0])

    def test_missing_anchor_is_reported_and_good_ones_pass(self):
        text = "ok docs/design.md#lease-protocol and (design.md#lse-merge)\n" \
               "bad docs/design.md#lease-protocl\n" \
               "// list (docs/design.md#lse-merge, #kvhandle-wire, #gone).\n"
        self.assertEqual(problems([("x.md", text)], self.DOC),
                         ["x.md:2: docs/design.md has no anchor #lease-protocl",
                          "x.md:3: docs/design.md has no anchor #gone"])

    def test_design_doc_links_to_its_own_sections(self):
        doc = self.DOC + "see [the lease](#lease-protocol) and [gone](#gone)\n"
        self.assertEqual(problems([], doc), ["docs/design.md:14: links to a missing anchor #gone"])

    def test_missing_design_doc_is_reported(self):
        self.assertEqual(problems([], None), ["docs/design.md: missing"])

    def test_a_repository_without_git(self):
        with tempfile.TemporaryDirectory() as root:
            os.makedirs(os.path.join(root, "docs"))
            os.makedirs(os.path.join(root, "build"))
            with open(os.path.join(root, DESIGN_DOC), "w") as f:
                f.write(self.DOC)
            with open(os.path.join(root, "a.h"), "w") as f:
                f.write("// see docs/design.md#nope\n")
            with open(os.path.join(root, "build", "gen.h"), "w") as f:
                f.write("// DESIGN.md\n")  # build trees are not the project's files
            self.assertEqual(check(root), ["a.h:1: docs/design.md has no anchor #nope"])


def main(argv):
    if argv[1:] == ["--self-test"]:
        unittest.main(argv=[argv[0]])
        return 0
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    found = check(argv[1])
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} problem(s); {DESIGN_DOC} is the design reference", file=sys.stderr)
        return 1
    print(f"design references OK ({len(anchors(open(os.path.join(argv[1], DESIGN_DOC)).read()))} "
          f"anchors in {DESIGN_DOC})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
