#!/usr/bin/env python3
"""Checks the Kubernetes manifests in deploy/k8s against the binaries: check_k8s.py K8S_DIR BIN_DIR.
Parses every YAML document (Debian's python3-yaml) and checks images, binaries, flags (each flag a
container passes must be one the binary's --help lists), ports (service targets, the coordinator's
--bind/--control/--metrics ports, the endpoints workers and the nightly job connect to), volumes
(every mount has a volume or claim; the database path is on the coordinator's claim, the nightly
job reads it through that claim on the coordinator's node) and the GPU request (workers only).
Prints one line per failed check and exits 1 when any failed."""
import glob
import os
import re
import shlex
import subprocess
import sys

import yaml

IMAGE = "moetune:latest"
BINARIES = {"moetune", "moetune-coordinator", "moetune-worker"}
GPU = "nvidia.com/gpu"
errors = []


def check(ok, msg):
    if not ok:
        errors.append(msg)
    return ok


def help_flags(bin_dir, argv0, sub=None):
    cmd = [os.path.join(bin_dir, argv0)] + (["help", sub] if sub else ["--help"])
    out = subprocess.run(cmd, capture_output=True, text=True).stdout
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", out))


def pod_spec(doc):
    kind = doc.get("kind")
    if kind in ("StatefulSet", "DaemonSet", "Deployment"):
        return doc["spec"]["template"]["spec"]
    if kind == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return None


def flag_values(argv):
    vals = {}
    for i, a in enumerate(argv):
        if a.startswith("--") and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            vals[a] = argv[i + 1]
    return vals


def port_of(ep):
    m = re.search(r":(\d+)$", ep or "")
    return int(m.group(1)) if m else None


def main():
    k8s, bin_dir = sys.argv[1], sys.argv[2]
    docs = []
    for path in sorted(glob.glob(os.path.join(k8s, "*.yaml"))):
        with open(path) as f:
            try:
                docs += [(os.path.basename(path), d) for d in yaml.safe_load_all(f) if d]
            except yaml.YAMLError as e:
                check(False, f"{path}: not YAML: {e}")
    by_kind = {}
    for name, d in docs:
        check("apiVersion" in d and "kind" in d and "name" in d.get("metadata", {}), f"{name}: no apiVersion/kind/name")
        by_kind.setdefault(d.get("kind"), []).append(d)
    for kind in ("Service", "StatefulSet", "DaemonSet", "CronJob"):
        check(kind in by_kind, f"no {kind} in {k8s}")
    if errors:
        return
    svc = by_kind["Service"][0]
    sts = by_kind["StatefulSet"][0]
    ds = by_kind["DaemonSet"][0]
    cron = by_kind["CronJob"][0]
    svc_name = svc["metadata"]["name"]
    svc_ports = {p["name"]: p for p in svc["spec"]["ports"]}
    sts_labels = sts["spec"]["template"]["metadata"]["labels"]
    check(all(sts_labels.get(k) == v for k, v in svc["spec"]["selector"].items()), "the Service selects no coordinator pod")
    claims = {c["metadata"]["name"] for c in sts["spec"].get("volumeClaimTemplates", [])}

    for name, d in docs:
        spec = pod_spec(d)
        if spec is None:
            continue
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        for c in spec["containers"]:
            where = f"{d['kind']} {d['metadata']['name']}/{c['name']}"
            check(c.get("image") == IMAGE, f"{where}: image {c.get('image')!r}, expected {IMAGE}")
            argv = list(c.get("command", [])) + list(c.get("args", []))
            if argv[:2] == ["/bin/sh", "-c"]:
                # a shell loop: check the binary lines it runs
                lines = [l.strip() for l in argv[2].splitlines() if "moetune" in l and not l.strip().startswith("#")]
                check(lines, f"{where}: the script runs no moetune binary")
                argvs = [shlex.split(l.rstrip("&").strip()) for l in lines]
            else:
                argvs = [argv]
            for a in argvs:
                binary = a[0]
                if not check(binary in BINARIES, f"{where}: runs {binary!r}, not a moetune binary"):
                    continue
                sub = a[1] if binary == "moetune" else None
                known = help_flags(bin_dir, binary, sub)
                for flag in (x for x in a if x.startswith("--")):
                    check(flag in known, f"{where}: {binary}{' ' + sub if sub else ''} has no option {flag}")
                vals = flag_values(a)
                if binary == "moetune-coordinator":
                    cports = {p["containerPort"] for p in c.get("ports", [])}
                    for flag, sname in (("--bind", "workers"), ("--control", "control"), ("--metrics", "metrics")):
                        p = port_of(vals.get(flag))
                        check(p in cports, f"{where}: {flag} port {p} is not a containerPort")
                        check(sname in svc_ports and svc_ports[sname]["targetPort"] == p,
                              f"{where}: Service port {sname} does not target {flag} port {p}")
                    check(not vals.get("--control", "").startswith("tcp://127."), f"{where}: --control on loopback is unreachable")
                    db = vals.get("--db", "")
                    mounts = [m for m in c.get("volumeMounts", []) if db.startswith(m["mountPath"] + "/")]
                    check(mounts and mounts[0]["name"] in claims, f"{where}: --db {db} is not on the StatefulSet's claim")
                if binary == "moetune-worker":
                    check(vals.get("--connect") == f"tcp://{svc_name}:{svc_ports['workers']['port']}",
                          f"{where}: --connect {vals.get('--connect')} is not the coordinator Service's workers port")
                if binary == "moetune":
                    check(vals.get("--control") == f"tcp://{svc_name}:{svc_ports['control']['port']}",
                          f"{where}: --control {vals.get('--control')} is not the coordinator Service's control port")
                    if "--compare-to" in a:
                        check("--wait" in a and "--db" in vals and "--out" in vals, f"{where}: --compare-to without --wait/--db/--out")
                        db = vals.get("--db", "")
                        mounts = [m for m in c.get("volumeMounts", []) if db.startswith(m["mountPath"] + "/")]
                        vol = vols.get(mounts[0]["name"]) if mounts else None
                        claim = (vol or {}).get("persistentVolumeClaim", {}).get("claimName")
                        want = [f"{t}-{sts['metadata']['name']}-0" for t in claims]
                        check(claim in want, f"{where}: --db {db} is not on the coordinator's claim {want} (got {claim})")
                        aff = spec.get("affinity", {}).get("podAffinity", {}).get("requiredDuringSchedulingIgnoredDuringExecution", [])
                        check(any(t.get("labelSelector", {}).get("matchLabels") == sts_labels and
                                  t.get("topologyKey") == "kubernetes.io/hostname" for t in aff),
                              f"{where}: not bound to the coordinator's node (podAffinity)")
                        check(spec.get("restartPolicy") == "Never", f"{where}: a failed nightly must not be restarted (it would submit again)")
            for m in c.get("volumeMounts", []):
                check(m["name"] in vols or m["name"] in claims, f"{where}: mount {m['name']} has no volume")
            gpu = (c.get("resources", {}).get("limits", {}) or {}).get(GPU)
            if d["kind"] == "DaemonSet":
                check(isinstance(gpu, int) and gpu > 0, f"{where}: workers request no {GPU}")
                check("nodeSelector" in spec, f"{where}: workers are not bound to GPU nodes")
            else:
                check(gpu is None, f"{where}: requests a GPU it does not use")


main()
for e in errors:
    print("check_k8s:", e)
sys.exit(1 if errors else 0)
