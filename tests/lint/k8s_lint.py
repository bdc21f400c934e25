#!/usr/bin/env python3
"""Checks the Kubernetes manifests in deploy/k8s/ without a cluster.

    k8s_lint.py MANIFEST_DIR --binary tandem-prefill=PATH --binary tandem-router=PATH ...

Every *.yaml document must parse and carry apiVersion, kind and metadata.name (a DNS-1123
name) with a known apiVersion/kind pair. Workload selectors must match their pod labels, every
Service selector must select the pods of some workload and name real container ports, a
StatefulSet's serviceName must be a headless Service selecting its pods. Containers that run a
Tandem binary may only pass `--name=value` flags that binary lists in --helpfull, in their args
and in the ConfigMap flagfiles they load with --flagfile; probes must target a declared port;
every volume mount and ConfigMap reference must resolve. Prints every problem found and exits 1
if there is any.
"""

import argparse
import os
import re
import sys

import yaml

import helpfull

KNOWN_KINDS = {
    ("v1", "Namespace"),
    ("v1", "ConfigMap"),
    ("v1", "Service"),
    ("apps/v1", "Deployment"),
    ("apps/v1", "StatefulSet"),
}
NAMESPACED = {"ConfigMap", "Service", "Deployment", "StatefulSet"}
WORKLOADS = {"Deployment", "StatefulSet"}
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def load(manifest_dir):
    """([(file name, document)] for every YAML document, [error message] for unparsable files)."""
    docs, errors = [], []
    files = sorted(f for f in os.listdir(manifest_dir) if f.endswith((".yaml", ".yml")))
    if not files:
        errors.append(f"{manifest_dir}: no *.yaml manifests")
    for name in files:
        try:
            with open(os.path.join(manifest_dir, name)) as f:
                for doc in yaml.safe_load_all(f):
                    if doc is not None:
                        docs.append((name, doc))
        except yaml.YAMLError as e:
            errors.append(f"{name}: not valid YAML: {e}")
    return docs, errors


class Linter:
    def __init__(self, docs, binaries):
        self.docs = docs
        self.binaries = binaries  # basename -> {flag name: helpfull.Flag}
        self.errors = []

    def error(self, where, message):
        self.errors.append(f"{where}: {message}")

    def run(self):
        valid = [(f, d) for f, d in self.docs if self.check_header(f, d)]
        self.objects = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
                        for _, d in valid}
        namespaces = {d["metadata"]["name"] for _, d in valid if d["kind"] == "Namespace"}
        for f, d in valid:
            where = f"{f}: {d['kind']}/{d['metadata']['name']}"
            if d["kind"] in NAMESPACED and d["metadata"].get("namespace") not in namespaces:
                self.error(where, f"namespace {d['metadata'].get('namespace')!r} is not defined "
                           f"by any manifest (defined: {sorted(namespaces)})")
            try:
                if d["kind"] in WORKLOADS:
                    self.check_workload(where, d)
                elif d["kind"] == "Service":
                    self.check_service(where, d)
            except (KeyError, TypeError, AttributeError) as e:
                self.error(where, f"malformed object (missing or mistyped field {e})")
        return self.errors

    def check_header(self, f, d):
        if not isinstance(d, dict):
            self.error(f, "a document is not a mapping")
            return False
        missing = [k for k in ("apiVersion", "kind", "metadata") if k not in d]
        if missing:
            self.error(f, f"document without {', '.join(missing)}")
            return False
        if (d["apiVersion"], d["kind"]) not in KNOWN_KINDS:
            self.error(f, f"unknown apiVersion/kind {d['apiVersion']}/{d['kind']}")
            return False
        name = d["metadata"].get("name") if isinstance(d["metadata"], dict) else None
        if not isinstance(name, str) or not DNS1123.match(name):
            self.error(f, f"{d['kind']}: metadata.name {name!r} is not a DNS-1123 name")
            return False
        return True

    # ---- Workloads -------------------------------------------------------------------------

    def workloads(self, namespace):
        return [d for (kind, ns, _), d in self.objects.items()
                if kind in WORKLOADS and ns == namespace]

    @staticmethod
    def pod_labels(workload):
        return workload["spec"]["template"]["metadata"].get("labels", {})

    def check_workload(self, where, d):
        spec = d["spec"]
        selector = spec.get("selector", {}).get("matchLabels", {})
        labels = self.pod_labels(d)
        if not selector:
            self.error(where, "spec.selector.matchLabels is empty")
        for k, v in selector.items():
            if labels.get(k) != v:
                self.error(where, f"selector {k}={v} does not match the pod labels {labels}")
        pod = spec["template"]["spec"]
        namespace = d["metadata"].get("namespace")
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for claim in spec.get("volumeClaimTemplates", []):
            volumes[claim["metadata"]["name"]] = {"persistentVolumeClaim": {}}
        for name, v in volumes.items():
            if "configMap" in v and ("ConfigMap", namespace, v["configMap"]["name"]) \
                    not in self.objects:
                self.error(where, f"volume {name}: ConfigMap {v['configMap']['name']} is not "
                           "defined")
        for init in pod.get("initContainers", []):
            self.check_container(f"{where}: initContainer {init['name']}", init, volumes,
                                 namespace, init_container=True)
        for c in pod.get("containers", []):
            self.check_container(f"{where}: container {c['name']}", c, volumes, namespace,
                                 init_container=False)
        if d["kind"] == "StatefulSet":
            self.check_governing_service(where, d)

    def check_governing_service(self, where, d):
        name = d["spec"].get("serviceName")
        svc = self.objects.get(("Service", d["metadata"].get("namespace"), name))
        if svc is None:
            self.error(where, f"serviceName {name!r} is not a Service in the manifests")
            return
        if svc["spec"].get("clusterIP") != "None":
            self.error(where, f"serviceName {name} is not headless (clusterIP: None)")
        labels = self.pod_labels(d)
        if any(labels.get(k) != v for k, v in svc["spec"].get("selector", {}).items()):
            self.error(where, f"governing Service {name} does not select this StatefulSet's pods")

    def check_container(self, where, c, volumes, namespace, init_container):
        for m in c.get("volumeMounts", []):
            if m["name"] not in volumes:
                self.error(where, f"volumeMount {m['name']} names no volume")
        command = c.get("command") or []
        binary = os.path.basename(command[0]) if command else ""
        flags = self.binaries.get(binary)
        if flags is None:
            if not init_container:
                self.error(where, f"runs {binary or '<image default>'}, not a Tandem binary "
                           f"({', '.join(sorted(self.binaries))})")
            return
        for arg in c.get("args", []):
            self.check_flag(where, binary, flags, arg)
            if arg.startswith("--flagfile="):
                self.check_flagfile(where, binary, flags, arg[len("--flagfile="):], c,
                                    volumes, namespace)
        ports = {p["containerPort"] for p in c.get("ports", [])}
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            grpc = c.get(probe, {}).get("grpc")
            if grpc is not None and grpc.get("port") not in ports:
                self.error(where, f"{probe} checks port {grpc.get('port')}, which the container "
                           f"does not declare ({sorted(ports)})")
        for probe in ("readinessProbe", "livenessProbe"):
            if probe not in c:
                self.error(where, f"no {probe}")
        requests = c.get("resources", {}).get("requests", {})
        if "cpu" not in requests or "memory" not in requests:
            self.error(where, "resources.requests needs cpu and memory")

    def check_flag(self, where, binary, flags, arg):
        if not arg.startswith("--"):
            self.error(where, f"argument {arg!r} is not a --name=value flag")
            return
        name, sep, _ = arg[2:].partition("=")
        if not sep:
            self.error(where, f"flag {arg!r} has no '=value' (write --{name}=VALUE)")
        if name not in flags:
            self.error(where, f"{binary} has no flag --{name} (see docs/configuration.md)")

    def check_flagfile(self, where, binary, flags, path, c, volumes, namespace):
        for m in c.get("volumeMounts", []):
            mount = m["mountPath"].rstrip("/") + "/"
            if not path.startswith(mount):
                continue
            cm_ref = volumes.get(m["name"], {}).get("configMap")
            if cm_ref is None:
                self.error(where, f"--flagfile={path} is on volume {m['name']}, not a ConfigMap")
                return
            cm = self.objects.get(("ConfigMap", namespace, cm_ref["name"]))
            key = path[len(mount):]
            if cm is None:
                return  # reported with the volume
            if key not in cm.get("data", {}):
                self.error(where, f"--flagfile={path}: ConfigMap {cm_ref['name']} has no key "
                           f"{key!r}")
                return
            for line in cm["data"][key].splitlines():
                line = line.strip()
                if line and not line.startswith("#"):
                    self.check_flag(f"{where}: {cm_ref['name']}/{key}", binary, flags, line)
            return
        self.error(where, f"--flagfile={path} is not under any volumeMount")

    # ---- Services --------------------------------------------------------------------------

    def check_service(self, where, svc):
        selector = svc["spec"].get("selector", {})
        if not selector:
            self.error(where, "Service without a selector")
            return
        selected = [w for w in self.workloads(svc["metadata"].get("namespace"))
                    if all(self.pod_labels(w).get(k) == v for k, v in selector.items())]
        if not selected:
            self.error(where, f"selector {selector} matches the pods of no workload")
            return
        for port in svc["spec"].get("ports", []):
            target = port.get("targetPort", port.get("port"))
            for w in selected:
                container_ports = [p for c in w["spec"]["template"]["spec"]["containers"]
                                   for p in c.get("ports", [])]
                if not any(p.get("name") == target or p["containerPort"] == target
                           for p in container_ports):
                    self.error(where, f"targetPort {target!r} is not a container port of "
                               f"{w['kind']}/{w['metadata']['name']}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("manifest_dir")
    parser.add_argument("--binary", action="append", default=[], metavar="NAME=PATH",
                        help="a Tandem binary whose --helpfull lists its flags")
    args = parser.parse_args()
    binaries = {}
    for spec in args.binary:
        name, _, path = spec.partition("=")
        binaries[name] = helpfull.flags_of(path)
    docs, errors = load(args.manifest_dir)
    errors += Linter(docs, binaries).run()
    for e in errors:
        print(f"k8s_lint: {e}", file=sys.stderr)
    if errors:
        return 1
    print(f"k8s_lint: {len(docs)} documents in {args.manifest_dir} are consistent")
    return 0


if __name__ == "__main__":
    sys.exit(main())
