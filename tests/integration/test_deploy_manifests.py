"""The deployment files under deploy/ are well-formed and agree with each other.

Everything runs offline, each tool call bounded in time; a check whose tool is
missing is skipped, never failed.

Kubernetes (deploy/kubernetes/*.yaml): `kubectl create --dry-run=client
--validate=false -o json -f FILE`. A client-side dry run still needs API
discovery to map each kind to a resource, and without a server kubectl stops
there ("couldn't get current server API group list"), whatever --validate says.
So the test points kubectl (through a throw-away kubeconfig) at a discovery
stub on 127.0.0.1 that lists the real built-in kinds these files use (v1
Service/Secret, batch/v1 Job) and JobSet (jobset.x-k8s.io/v1alpha2), as a
cluster with the JobSet CRD installed would. --validate=false because schema
validation downloads the cluster's OpenAPI document, which no offline source
has. kubectl thus checks the YAML, each object's apiVersion/kind/name and the
kind mapping; the field names and the values that must agree across objects
(Service name = subdomain, the rendezvous host, PET_NNODES = pods, the Secret
reference) are checked here on kubectl's JSON output, against the field lists
of the Kubernetes and JobSet v1alpha2 APIs. Without kubectl the same checks run
on PyYAML's parse, when PyYAML is there.

Slurm (deploy/slurm/ddplaunch.sbatch): `bash -n`, shellcheck when present, and
a run of the whole script with stand-ins for srun and ddplaunch that record
their arguments and environment.

systemd (deploy/systemd/ddplaunch-serve.service): `systemd-analyze verify`
(ExecStart pointed at the built binary, since verify insists that it exists)
and `systemd-analyze security --offline=yes` for the exposure score.

Container (deploy/container/Containerfile): no image is built here (that needs
a container engine and a registry); the files it copies must exist and the
user, paths and names it sets must match the Kubernetes manifests.
"""

import http.server
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import unittest
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
K8S = DEPLOY / "kubernetes"
SBATCH = DEPLOY / "slurm" / "ddplaunch.sbatch"
UNIT = DEPLOY / "systemd" / "ddplaunch-serve.service"
CONTAINERFILE = DEPLOY / "container" / "Containerfile"
TOOL_TIMEOUT = 60
RDZV_PORT = 29400

# Field names of the API objects the manifests use (Kubernetes 1.31, JobSet
# v1alpha2). A name outside these lists is a typo kubectl would only catch
# against a live API server.
SERVICE_SPEC = {
    "ports", "selector", "clusterIP", "clusterIPs", "type", "externalIPs", "sessionAffinity",
    "loadBalancerIP", "loadBalancerSourceRanges", "externalName", "externalTrafficPolicy",
    "healthCheckNodePort", "publishNotReadyAddresses", "sessionAffinityConfig", "ipFamilies",
    "ipFamilyPolicy", "allocateLoadBalancerNodePorts", "loadBalancerClass",
    "internalTrafficPolicy", "trafficDistribution"}
JOB_SPEC = {
    "parallelism", "completions", "activeDeadlineSeconds", "podFailurePolicy", "successPolicy",
    "backoffLimit", "backoffLimitPerIndex", "maxFailedIndexes", "selector", "manualSelector",
    "template", "ttlSecondsAfterFinished", "completionMode", "suspend", "podReplacementPolicy",
    "managedBy"}
POD_SPEC = {
    "volumes", "initContainers", "containers", "ephemeralContainers", "restartPolicy",
    "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy", "nodeSelector",
    "serviceAccountName", "serviceAccount", "automountServiceAccountToken", "nodeName",
    "hostNetwork", "hostPID", "hostIPC", "shareProcessNamespace", "securityContext",
    "imagePullSecrets", "hostname", "subdomain", "affinity", "schedulerName", "tolerations",
    "hostAliases", "priorityClassName", "priority", "dnsConfig", "readinessGates",
    "runtimeClassName", "enableServiceLinks", "preemptionPolicy", "overhead",
    "topologySpreadConstraints", "setHostnameAsFQDN", "os", "hostUsers", "schedulingGates",
    "resourceClaims", "resources"}
CONTAINER = {
    "name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources",
    "resizePolicy", "restartPolicy", "volumeMounts", "volumeDevices", "livenessProbe",
    "readinessProbe", "startupProbe", "lifecycle", "terminationMessagePath",
    "terminationMessagePolicy", "imagePullPolicy", "securityContext", "stdin", "stdinOnce", "tty"}
JOBSET_SPEC = {
    "replicatedJobs", "network", "successPolicy", "failurePolicy", "startupPolicy", "suspend",
    "coordinator", "managedBy", "ttlSecondsAfterFinished", "volumeClaimPolicies"}
JOBSET_NETWORK = {"enableDNSHostnames", "subdomain", "publishNotReadyAddresses"}
JOBSET_FAILURE_POLICY = {"maxRestarts", "restartStrategy", "rules"}
JOBSET_REPLICATED_JOB = {"name", "groupName", "template", "replicas", "dependsOn"}

# What the discovery stub serves: group/version -> [(resource, kind)].
DISCOVERY = {
    "v1": [("services", "Service"), ("secrets", "Secret"), ("configmaps", "ConfigMap"),
           ("persistentvolumeclaims", "PersistentVolumeClaim"), ("pods", "Pod")],
    "batch/v1": [("jobs", "Job")],
    "jobset.x-k8s.io/v1alpha2": [("jobsets", "JobSet")],
}


class _DiscoveryStub(http.server.BaseHTTPRequestHandler):
    """Answers the API discovery requests of kubectl, nothing else."""

    def log_message(self, *args):
        pass

    def _reply(self, code, body):
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/version":
            return self._reply(200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0"})
        if path == "/api":
            return self._reply(200, {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        if path == "/apis":
            groups = []
            for gv in DISCOVERY:
                if "/" in gv:
                    group, version = gv.split("/")
                    entry = {"groupVersion": gv, "version": version}
                    groups.append({"name": group, "versions": [entry], "preferredVersion": entry})
            return self._reply(200, {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
        gv = path[len("/api/"):] if path.startswith("/api/") else path[len("/apis/"):]
        if gv in DISCOVERY:
            resources = [{"name": r, "singularName": k.lower(), "namespaced": True, "kind": k,
                          "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"]}
                         for r, k in DISCOVERY[gv]]
            return self._reply(200, {"kind": "APIResourceList", "apiVersion": "v1",
                                     "groupVersion": gv, "resources": resources})
        return self._reply(404, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "reason": "NotFound", "code": 404})


class Kubectl:
    """kubectl with a private kubeconfig, cache and HOME, talking to the stub."""

    def __init__(self, path, workdir):
        self.path = path
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DiscoveryStub)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        port = self.server.server_address[1]
        self.home = Path(workdir)
        self.kubeconfig = self.home / "kubeconfig"
        self.kubeconfig.write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: stub, cluster: {{server: 'http://127.0.0.1:{port}'}}}}]\n"
            "users: [{name: stub, user: {}}]\n"
            "contexts: [{name: stub, context: {cluster: stub, user: stub, namespace: default}}]\n"
            "current-context: stub\n")
        self.env = {k: v for k, v in os.environ.items() if not k.upper().endswith("_PROXY")}
        self.env.update(HOME=str(self.home), KUBECONFIG=str(self.kubeconfig), NO_PROXY="127.0.0.1")

    def close(self):
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)

    def dry_run(self, manifest):
        return subprocess.run(
            [self.path, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.home / "cache"),
             "create", "--dry-run=client", "--validate=false", "-o", "json", "-f", str(manifest)],
            env=self.env, capture_output=True, text=True, timeout=TOOL_TIMEOUT)


def split_json_stream(text):
    """kubectl -o json prints one JSON document per object, back to back."""
    decoder, objects, i = json.JSONDecoder(), [], 0
    while True:
        while i < len(text) and text[i].isspace():
            i += 1
        if i == len(text):
            return objects
        obj, i = decoder.raw_decode(text, i)
        objects.extend(obj["items"] if obj.get("kind") == "List" else [obj])


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


class KubernetesManifests(unittest.TestCase):
    kubectl = None
    yaml = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="ddp-k8s-")
        path = os.environ.get("KUBECTL") or shutil.which("kubectl")
        if path:
            cls.kubectl = Kubectl(path, cls.tmp.name)
        else:
            try:
                import yaml  # PyYAML (python3-yaml), the fallback parser
                cls.yaml = yaml
            except ImportError:
                pass

    @classmethod
    def tearDownClass(cls):
        if cls.kubectl:
            cls.kubectl.close()
        cls.tmp.cleanup()

    def load(self, name):
        """The objects of deploy/kubernetes/NAME, as kubectl's dry run prints them."""
        path = K8S / name
        if self.kubectl:
            res = self.kubectl.dry_run(path)
            self.assertEqual(res.returncode, 0, f"kubectl create --dry-run=client -f {name}:\n{res.stderr}")
            objects = split_json_stream(res.stdout)
        elif self.yaml:
            objects = [d for d in self.yaml.safe_load_all(path.read_text()) if d]
        else:
            self.skipTest("neither kubectl nor PyYAML is installed")
        for obj in objects:
            for key in ("apiVersion", "kind", "metadata"):
                self.assertIn(key, obj, f"{name}: an object without {key}")
            self.assertTrue(obj["metadata"].get("name"), f"{name}: an object without a name")
        return objects

    def by_kind(self, objects, kind):
        found = [o for o in objects if o["kind"] == kind]
        self.assertEqual(len(found), 1, f"expected one {kind}, got {[o['kind'] for o in objects]}")
        return found[0]

    def assert_fields(self, obj, allowed, where):
        unknown = sorted(set(obj) - allowed)
        self.assertFalse(unknown, f"{where}: unknown field(s) {unknown}")

    def check_pod_template(self, template, where, nnodes, endpoint):
        """What both manifests' pods need: one ddplaunch container, GPUs, /dev/shm, the token."""
        spec = template["spec"]
        self.assert_fields(spec, POD_SPEC, f"{where}.spec")
        self.assertEqual(spec.get("restartPolicy"), "Never", f"{where}: restartPolicy")
        self.assertEqual(len(spec["containers"]), 1)
        c = spec["containers"][0]
        self.assert_fields(c, CONTAINER, f"{where}.containers[0]")
        argv = c.get("command", []) + c.get("args", [])
        self.assertIn("ddplaunch", [Path(a).name for a in argv], f"{where}: does not run ddplaunch")
        self.assertTrue(any(a.startswith("--max-restarts") for a in argv), f"{where}: no --max-restarts")
        self.assertFalse(any("token" in a.lower() for a in argv), f"{where}: the token is on the command line")

        env = env_of(c)
        self.assertEqual(env["PET_NNODES"].get("value"), str(nnodes), f"{where}: PET_NNODES")
        if "PET_RDZV_ENDPOINT" in env:
            self.assertEqual(env["PET_RDZV_ENDPOINT"].get("value"), endpoint, f"{where}: rendezvous host")
        token = env["DDPLAUNCH_TOKEN"]
        self.assertNotIn("value", token, f"{where}: DDPLAUNCH_TOKEN must come from a Secret")
        ref = token["valueFrom"]["secretKeyRef"]
        self.assertTrue(ref["name"] and ref["key"])

        limits = c["resources"]["limits"]
        self.assertGreaterEqual(int(limits["nvidia.com/gpu"]), 1, f"{where}: no GPUs asked for")
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        self.assertIn("/dev/shm", mounts, f"{where}: /dev/shm not mounted")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        self.assertEqual(volumes[mounts["/dev/shm"]]["emptyDir"].get("medium"), "Memory",
                         f"{where}: /dev/shm must be a memory-backed emptyDir")
        return ref

    def test_indexed_job(self):
        objects = self.load("indexed-job.yaml")
        svc, job = self.by_kind(objects, "Service"), self.by_kind(objects, "Job")
        self.assertEqual((svc["apiVersion"], job["apiVersion"]), ("v1", "batch/v1"))

        self.assert_fields(svc["spec"], SERVICE_SPEC, "Service.spec")
        self.assertEqual(svc["spec"].get("clusterIP"), "None", "the Service must be headless")
        self.assertTrue(svc["spec"].get("publishNotReadyAddresses"))

        spec = job["spec"]
        self.assert_fields(spec, JOB_SPEC, "Job.spec")
        self.assertEqual(spec.get("completionMode"), "Indexed")
        self.assertEqual(spec.get("completions"), spec.get("parallelism"), "all nodes must run at once")
        self.assertIn("backoffLimit", spec)
        pod = spec["template"]
        self.assertEqual(pod["spec"].get("subdomain"), svc["metadata"]["name"],
                         "subdomain must name the headless Service")
        labels = pod["metadata"].get("labels", {})
        for k, v in svc["spec"]["selector"].items():
            self.assertEqual(labels.get(k), v, f"the Service selector {k}={v} does not match the pods")
        name = job["metadata"]["name"]
        self.check_pod_template(pod, "Job.spec.template", spec["completions"],
                                f"{name}-0.{svc['metadata']['name']}:{RDZV_PORT}")

    def test_jobset(self):
        js = self.by_kind(self.load("jobset.yaml"), "JobSet")
        self.assertEqual(js["apiVersion"], "jobset.x-k8s.io/v1alpha2")
        spec = js["spec"]
        self.assert_fields(spec, JOBSET_SPEC, "JobSet.spec")
        net = spec["network"]
        self.assert_fields(net, JOBSET_NETWORK, "JobSet.spec.network")
        self.assertTrue(net.get("enableDNSHostnames"), "pods need DNS hostnames for the rendezvous")
        self.assert_fields(spec.get("failurePolicy", {}), JOBSET_FAILURE_POLICY, "JobSet.spec.failurePolicy")

        self.assertEqual(len(spec["replicatedJobs"]), 1)
        rj = spec["replicatedJobs"][0]
        self.assert_fields(rj, JOBSET_REPLICATED_JOB, "replicatedJobs[0]")
        replicas = rj.get("replicas", 1)
        self.assertEqual(replicas, 1, "node rank = JOB_COMPLETION_INDEX holds for one Job replica")
        job = rj["template"]["spec"]
        self.assert_fields(job, JOB_SPEC, "replicatedJobs[0].template.spec")
        self.assertEqual(job.get("completionMode", "Indexed"), "Indexed")
        self.assertEqual(job.get("completions"), job.get("parallelism"), "all nodes must run at once")
        subdomain = net.get("subdomain") or js["metadata"]["name"]
        endpoint = f"{js['metadata']['name']}-{rj['name']}-0-0.{subdomain}:{RDZV_PORT}"
        self.check_pod_template(job["template"], "replicatedJobs[0] pod", replicas * job["parallelism"], endpoint)

        env = env_of(job["template"]["spec"]["containers"][0])
        for var, key in (("JOBSET_NAME", "jobset-name"), ("REPLICATED_JOB_NAME", "replicatedjob-name"),
                         ("JOB_INDEX", "job-index")):
            path = env[var]["valueFrom"]["fieldRef"]["fieldPath"]
            self.assertRegex(path, rf"^metadata\.(labels|annotations)\['jobset\.sigs\.k8s\.io/{key}'\]$")

    def test_secret_example_matches_references(self):
        secret = self.by_kind(self.load("secret-example.yaml"), "Secret")
        keys = set(secret.get("stringData", {})) | set(secret.get("data", {}))
        for manifest in ("indexed-job.yaml", "jobset.yaml"):
            text = (K8S / manifest).read_text()
            self.assertIn(f"name: {secret['metadata']['name']}", text, manifest)
            for key in re.findall(r"secretKeyRef:\s*\n\s*name: \S+\s*\n\s*key: (\S+)", text):
                self.assertIn(key, keys, f"{manifest} reads key {key!r} that the Secret lacks")

    def test_kubectl_rejects_a_wrong_kind(self):
        """The dry run has teeth: a kind the API does not have is refused."""
        if not self.kubectl:
            self.skipTest("kubectl is not installed")
        bad = Path(self.tmp.name) / "bad.yaml"
        bad.write_text("apiVersion: batch/v1\nkind: Jobs\nmetadata: {name: x}\nspec: {}\n")
        res = self.kubectl.dry_run(bad)
        self.assertNotEqual(res.returncode, 0)
        self.assertIn("Jobs", res.stderr)


class SlurmBatchScript(unittest.TestCase):

    def test_bash_syntax(self):
        res = subprocess.run(["bash", "-n", str(SBATCH)], capture_output=True, text=True, timeout=TOOL_TIMEOUT)
        self.assertEqual(res.returncode, 0, res.stderr)

    def test_shellcheck(self):
        shellcheck = shutil.which("shellcheck")
        if not shellcheck:
            self.skipTest("shellcheck is not installed")
        res = subprocess.run([shellcheck, "-S", "warning", str(SBATCH)],
                             capture_output=True, text=True, timeout=TOOL_TIMEOUT)
        self.assertEqual(res.returncode, 0, res.stdout + res.stderr)

    def run_script(self, tmp, *args, ddplaunch_exit=0):
        """Runs the batch script with srun, ddplaunch and scontrol replaced by recorders."""
        bindir, out = tmp / "bin", tmp / "out"
        bindir.mkdir(exist_ok=True)
        out.mkdir(exist_ok=True)
        srun = bindir / "srun"
        srun.write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$FAKE_OUT/srun.args"\n'
                        'while [[ $# -gt 0 && $1 == -* ]]; do shift; done\nexec "$@"\n')
        ddplaunch = bindir / "ddplaunch"
        ddplaunch.write_text(
            "#!/bin/bash\n"
            'printf "%s\\n" "$@" > "$FAKE_OUT/ddplaunch.args"\n'
            'printf "%s" "$DDPLAUNCH_TOKEN" > "$FAKE_OUT/token"\n'
            'umask > "$FAKE_OUT/umask"\n'
            'exit "${FAKE_DDPLAUNCH_EXIT:-0}"\n')
        scontrol = bindir / "scontrol"
        scontrol.write_text('#!/bin/bash\nprintf "%s\\n" "$@" > "$FAKE_OUT/scontrol.args"\n')
        for f in (srun, ddplaunch, scontrol):
            f.chmod(0o755)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "DDP", "PET_"))}
        env.update(PATH=f"{bindir}:{os.environ.get('PATH', '/usr/bin:/bin')}", FAKE_OUT=str(out),
                   SLURM_JOB_ID="4242", SLURM_SUBMIT_DIR=str(tmp), SLURM_CPUS_PER_TASK="16",
                   FAKE_DDPLAUNCH_EXIT=str(ddplaunch_exit))
        res = subprocess.run(["bash", str(SBATCH), *args], env=env, cwd=tmp,
                             capture_output=True, text=True, timeout=TOOL_TIMEOUT)
        self.assertEqual(res.returncode, ddplaunch_exit, res.stdout + res.stderr)
        read = lambda name: (out / name).read_text()
        return read("srun.args").splitlines(), read("ddplaunch.args").splitlines(), read("token"), read("umask")

    def test_runs_one_ddplaunch_per_node_with_a_shared_token(self):
        with tempfile.TemporaryDirectory(prefix="ddp-sbatch-") as d:
            tmp = Path(d)
            srun_args, args, token, umask = self.run_script(tmp)
            self.assertIn("--ntasks-per-node=1", srun_args)
            self.assertIn("--cpus-per-task=16", srun_args)
            self.assertIn("--export=ALL", srun_args)
            self.assertIn("--nproc-per-node=gpu", args)
            self.assertTrue(any(re.fullmatch(r"--max-restarts=\d+", a) for a in args), args)
            log_dir = tmp / "ddplaunch-logs"
            self.assertIn(f"--log-dir={log_dir}", args)
            self.assertTrue(log_dir.is_dir(), "the log directory was not made")
            self.assertEqual(args[-3:], [str(tmp / "worker/python/torch_ddp_mlp.py"), "--steps", "200"])
            # The token: random, exported to the step, on no command line.
            self.assertRegex(token, r"^[0-9a-f]{64}$")
            self.assertNotIn(token, "\n".join(srun_args + args))
            self.assertEqual(umask.strip(), "0077")
            _, _, token2, _ = self.run_script(tmp)
            self.assertNotEqual(token, token2, "each job must get its own token")

    def test_a_stop_at_a_step_boundary_requeues_the_job(self):
        with tempfile.TemporaryDirectory(prefix="ddp-sbatch-") as d:
            tmp = Path(d)
            _, args, _, _ = self.run_script(tmp, ddplaunch_exit=75)
            self.assertTrue(any(re.fullmatch(r"--stop-timeout=\d+", a) for a in args), args)
            self.assertEqual((tmp / "out" / "scontrol.args").read_text().split(), ["requeue", "4242"])
            self.assertRegex(SBATCH.read_text(), r"(?m)^#SBATCH --signal=TERM@\d+$")
            self.assertRegex(SBATCH.read_text(), r"(?m)^#SBATCH --requeue$")
            # A failure is no reason to requeue.
            self.run_script(tmp, ddplaunch_exit=1)
            (tmp / "out" / "scontrol.args").unlink()
            self.run_script(tmp, ddplaunch_exit=3)
            self.assertFalse((tmp / "out" / "scontrol.args").exists())

    def test_script_arguments_replace_the_example_program(self):
        with tempfile.TemporaryDirectory(prefix="ddp-sbatch-") as d:
            _, args, _, _ = self.run_script(Path(d), "my_train.py", "--lr", "0.1")
            self.assertEqual(args[-3:], ["my_train.py", "--lr", "0.1"])


class SystemdUnit(unittest.TestCase):

    def setUp(self):
        self.analyze = shutil.which("systemd-analyze")
        if not self.analyze:
            self.skipTest("systemd-analyze is not installed")
        self.tmp = tempfile.TemporaryDirectory(prefix="ddp-unit-")
        self.addCleanup(self.tmp.cleanup)
        # verify requires ExecStart's binary to exist: use the built one (or any
        # executable) instead of the installed path.
        binary = os.environ.get("DDPLAUNCH_BIN")
        if not binary or not os.access(binary, os.X_OK):
            binary = shutil.which("true")
        self.unit = Path(self.tmp.name) / UNIT.name
        self.unit.write_text(UNIT.read_text().replace("/usr/local/bin/ddplaunch", binary))

    def analyze_run(self, *args):
        return subprocess.run([self.analyze, *args, str(self.unit)], cwd=self.tmp.name,
                              capture_output=True, text=True, timeout=TOOL_TIMEOUT)

    def test_verify(self):
        res = self.analyze_run("verify", "--man=no")
        # verify also reports unrelated units of the host; only ours counts.
        ours = [l for l in (res.stdout + res.stderr).splitlines() if UNIT.name in l]
        self.assertEqual(ours, [], "\n".join(ours))
        self.assertEqual(res.returncode, 0, res.stderr)

    def test_security_exposure_is_low(self):
        res = self.analyze_run("security", "--offline=yes", "--no-pager")
        if res.returncode != 0 and "offline" in res.stderr:
            self.skipTest("this systemd-analyze has no --offline (systemd < 250)")
        self.assertEqual(res.returncode, 0, res.stderr)
        m = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", res.stdout)
        self.assertTrue(m, res.stdout[-2000:])
        self.assertLessEqual(float(m.group(1)), 2.0, res.stdout)

    def test_runs_serve_unprivileged(self):
        text = UNIT.read_text()
        self.assertRegex(text, r"(?m)^ExecStart=/usr/local/bin/ddplaunch serve .*--port ")
        self.assertRegex(text, r"(?m)^DynamicUser=yes$")
        self.assertRegex(text, r"(?m)^Restart=on-failure$")


class Containerfile(unittest.TestCase):

    def setUp(self):
        self.text = CONTAINERFILE.read_text()

    def test_two_stages_on_debian_12(self):
        stages = re.findall(r"(?m)^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", self.text)
        self.assertGreaterEqual(len(stages), 2, "expected a build stage and a runtime stage")
        base = re.search(r"(?m)^ARG BASE_IMAGE=(\S+)", self.text)
        self.assertTrue(base and re.search(r"debian:(12|bookworm)", base.group(1)), "base is not Debian 12")
        self.assertIn("deploy/install-deps.sh", self.text)
        self.assertRegex(self.text, r"cmake --install \S+ --prefix /usr/local")

    def test_copied_files_exist(self):
        for path in re.findall(r"(?m)^COPY (?!--from)(\S+) ", self.text):
            if path != ".":
                self.assertTrue((REPO / path).exists(), f"COPY {path}: no such file in the repository")
        for path in re.findall(r"\b(worker/\S+\.py)\b", self.text):
            self.assertTrue((REPO / path).exists(), f"{path}: no such file in the repository")

    def test_agrees_with_the_kubernetes_manifests(self):
        uid = re.search(r"(?m)^USER (\d+)", self.text).group(1)
        example = re.search(r"(/opt/ddplaunch/examples/\S+\.py)", self.text).group(1)
        for manifest in ("indexed-job.yaml", "jobset.yaml"):
            text = (K8S / manifest).read_text()
            self.assertIn(f"runAsUser: {uid}", text, f"{manifest}: runAsUser differs from the image's USER")
            self.assertIn(example, text, f"{manifest}: runs a program the image does not have")


if __name__ == "__main__":
    unittest.main()
