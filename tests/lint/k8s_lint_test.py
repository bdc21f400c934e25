#!/usr/bin/env python3
"""Tests k8s_lint on the real manifests and on mutated copies of them: each mutation is a
mistake the linter must report with a specific message.

    k8s_lint_test.py MANIFEST_DIR NAME=PATH...   (the Tandem binaries, as for k8s_lint.py)
"""

import copy
import os
import sys
import tempfile
import unittest

import helpfull
import k8s_lint

MANIFESTS = ""
BINARIES = {}


def find(docs, kind, name):
    for _, d in docs:
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    raise AssertionError(f"{kind}/{name} not in the manifests")


def container(docs, kind, name):
    return find(docs, kind, name)["spec"]["template"]["spec"]["containers"][0]


class K8sLintTest(unittest.TestCase):
    def setUp(self):
        self.docs, errors = k8s_lint.load(MANIFESTS)
        self.assertEqual(errors, [])
        self.docs = copy.deepcopy(self.docs)

    def lint(self):
        return k8s_lint.Linter(self.docs, BINARIES).run()

    def assertReports(self, fragment):
        errors = self.lint()
        self.assertTrue(any(fragment in e for e in errors),
                        f"expected an error containing {fragment!r}, got {errors}")

    def test_real_manifests_are_clean(self):
        self.assertEqual(self.lint(), [])

    def test_every_role_has_a_workload_and_a_service(self):
        for role, kind in (("router", "Deployment"), ("prefill", "StatefulSet"),
                           ("decode", "StatefulSet")):
            find(self.docs, kind, f"tandem-{role}")
            find(self.docs, "Service", f"tandem-{role}")

    def test_nodes_register_by_heartbeat(self):
        flags = find(self.docs, "ConfigMap", "tandem-flags")["data"]
        for role in ("prefill", "decode"):
            self.assertIn("--router=tandem-router.", flags[f"{role}.flags"])
        router_args = container(self.docs, "Deployment", "tandem-router")["args"]
        self.assertFalse(any(a.startswith(("--prefill=", "--decode=")) for a in router_args))

    def test_service_selector_matching_no_pods(self):
        find(self.docs, "Service", "tandem-router")["spec"]["selector"][
            "app.kubernetes.io/component"] = "routers"
        self.assertReports("Service/tandem-router: selector")
        self.assertReports("matches the pods of no workload")

    def test_unknown_flag_in_args(self):
        container(self.docs, "StatefulSet", "tandem-prefill")["args"].append("--tpp=3")
        self.assertReports("tandem-prefill has no flag --tpp")

    def test_flag_of_another_binary(self):
        container(self.docs, "Deployment", "tandem-router")["args"].append("--kv_budget_mb=1")
        self.assertReports("tandem-router has no flag --kv_budget_mb")

    def test_unknown_flag_in_flagfile(self):
        find(self.docs, "ConfigMap", "tandem-flags")["data"]["decode.flags"] += "--bogus=1\n"
        self.assertReports("tandem-flags/decode.flags: tandem-decode has no flag --bogus")

    def test_flag_without_value(self):
        container(self.docs, "StatefulSet", "tandem-decode")["args"].append("--tp")
        self.assertReports("flag '--tp' has no '=value'")

    def test_missing_flagfile_key(self):
        args = container(self.docs, "StatefulSet", "tandem-decode")["args"]
        args[0] = "--flagfile=/etc/tandem/nope.flags"
        self.assertReports("ConfigMap tandem-flags has no key 'nope.flags'")

    def test_workload_selector_mismatch(self):
        find(self.docs, "StatefulSet", "tandem-decode")["spec"]["selector"]["matchLabels"][
            "app.kubernetes.io/component"] = "prefill"
        self.assertReports("selector app.kubernetes.io/component=prefill does not match")

    def test_governing_service_not_headless(self):
        del find(self.docs, "Service", "tandem-prefill")["spec"]["clusterIP"]
        self.assertReports("serviceName tandem-prefill is not headless")

    def test_probe_on_undeclared_port(self):
        container(self.docs, "StatefulSet", "tandem-prefill")["readinessProbe"]["grpc"][
            "port"] = 1
        self.assertReports("readinessProbe checks port 1")

    def test_missing_liveness_probe(self):
        del container(self.docs, "Deployment", "tandem-router")["livenessProbe"]
        self.assertReports("container router: no livenessProbe")

    def test_wrong_target_port(self):
        find(self.docs, "Service", "tandem-decode")["spec"]["ports"][0]["targetPort"] = "grpcx"
        self.assertReports("targetPort 'grpcx' is not a container port")

    def test_missing_api_version(self):
        del find(self.docs, "Service", "tandem-decode")["apiVersion"]
        self.assertReports("document without apiVersion")

    def test_unknown_namespace(self):
        find(self.docs, "ConfigMap", "tandem-flags")["metadata"]["namespace"] = "other"
        self.assertReports("namespace 'other' is not defined")

    def test_mount_of_undeclared_volume(self):
        container(self.docs, "StatefulSet", "tandem-prefill")["volumeMounts"][0]["name"] = "x"
        self.assertReports("volumeMount x names no volume")

    def test_invalid_yaml_file(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "bad.yaml"), "w") as f:
                f.write("kind: [unclosed\n")
            _, errors = k8s_lint.load(d)
        self.assertTrue(errors and errors[0].startswith("bad.yaml: not valid YAML"), errors)


if __name__ == "__main__":
    MANIFESTS = sys.argv[1]
    for spec in sys.argv[2:]:
        name, _, path = spec.partition("=")
        BINARIES[name] = helpfull.flags_of(path)
    unittest.main(argv=[sys.argv[0], "-v"])
