#!/usr/bin/env python3
"""Tests helpfull.parse on hand-written listings and config_doc's staleness checks on edited
copies of docs/configuration.md.

    config_doc_test.py DOC MAKE_MODEL NAME=PATH...   (the absl binaries, as for config_doc.py)
"""

import sys
import unittest

import config_doc
import helpfull

DOC = ""
MAKE_MODEL = ""
BINARIES = []

LISTING = """\
tandem-x: usage line --not_a_flag (here)

  Flags from ./absl/flags/parse.cc:
    --flagfile (comma-separated list of files to load flags from); default: ;


  Flags from work/main/router/main.cc:
    --decode_idle_timeout_ms (max gap between two decode stream events);
      default: 30000;
    --decode_policy (round_robin | least_loaded (default: x)); default: "least_loaded";

Try --helpfull to get a list of all flags or --help=substring shows help for
"""


class HelpfullTest(unittest.TestCase):
    def test_parses_wrapped_entries_and_sources(self):
        flags = helpfull.parse(LISTING)
        self.assertEqual(sorted(flags), ["decode_idle_timeout_ms", "decode_policy", "flagfile"])
        wrapped = flags["decode_idle_timeout_ms"]
        self.assertEqual(wrapped.help, "max gap between two decode stream events")
        self.assertEqual(wrapped.default, "30000")
        self.assertEqual(wrapped.source, "work/main/router/main.cc")
        self.assertFalse(wrapped.builtin)
        self.assertTrue(flags["flagfile"].builtin)
        self.assertEqual(flags["flagfile"].default, "")
        self.assertEqual(flags["decode_policy"].help, "round_robin | least_loaded (default: x)")
        self.assertEqual(flags["decode_policy"].default, '"least_loaded"')

    def test_unreadable_entry_raises(self):
        with self.assertRaisesRegex(ValueError, "unreadable --helpfull entry"):
            helpfull.parse("  Flags from a.cc:\n    --broken no parenthesis\n")

    def test_source_key_is_repo_relative(self):
        rel = config_doc.source_key(config_doc.REPO.lstrip("/") + "/serving/instance_flags.cc")
        self.assertEqual(rel, "serving/instance_flags.cc")
        self.assertEqual(config_doc.source_key("./absl/flags/parse.cc"), config_doc.ABSL)


class ConfigDocTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        with open(DOC) as f:
            cls.doc = f.read()
        cls.by_source = config_doc.collect(BINARIES)

    def regenerate(self, doc):
        errors = []
        return config_doc.regenerate(doc, self.by_source, errors), errors

    def test_every_flag_of_every_binary_is_listed(self):
        for name, path in BINARIES:
            for flag in helpfull.flags_of(path):
                self.assertIn(f"| `--{flag}` |", self.doc, f"{name} --{flag}")

    def test_a_removed_row_is_detected(self):
        row = next(line for line in self.doc.splitlines(True) if line.startswith("| `--tp` |"))
        edited = self.doc.replace(row, "", 1)
        out, _ = self.regenerate(edited)
        self.assertNotEqual(out, edited)
        self.assertEqual(out, self.doc)

    def test_a_changed_default_is_detected(self):
        edited = self.doc.replace("| `--max_attempts` | `3` |", "| `--max_attempts` | `4` |", 1)
        self.assertNotEqual(edited, self.doc)
        out, _ = self.regenerate(edited)
        self.assertEqual(out, self.doc)

    def test_a_missing_block_is_an_error(self):
        start = self.doc.index("<!-- BEGIN GENERATED FLAGS router/main.cc -->")
        end = self.doc.index("<!-- END GENERATED FLAGS -->", start) + len(
            "<!-- END GENERATED FLAGS -->")
        _, errors = self.regenerate(self.doc[:start] + self.doc[end:])
        self.assertTrue(any("no block for the flags of router/main.cc" in e for e in errors),
                        errors)

    def test_a_block_for_an_unknown_file_is_an_error(self):
        edited = self.doc + ("<!-- BEGIN GENERATED FLAGS gone/main.cc -->\n"
                             "<!-- END GENERATED FLAGS -->\n")
        _, errors = self.regenerate(edited)
        self.assertTrue(any("block for gone/main.cc, but no binary" in e for e in errors), errors)

    def test_make_model_options_are_documented(self):
        errors = []
        config_doc.check_make_model(self.doc, MAKE_MODEL, errors)
        self.assertEqual(errors, [])
        errors = []
        config_doc.check_make_model(self.doc.replace("`--kv-heads", "`--kvheads"), MAKE_MODEL,
                                    errors)
        self.assertEqual(errors, ["tandem-make-model option --kv-heads is not in its doc section"])


if __name__ == "__main__":
    DOC, MAKE_MODEL = sys.argv[1], sys.argv[2]
    BINARIES = [tuple(spec.split("=", 1)) for spec in sys.argv[3:]]
    unittest.main(argv=[sys.argv[0], "-v"])
