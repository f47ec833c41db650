// Runs rendered manifests for real: each pod of each Job under podman, in a
// private network, converted the way Kubernetes would run it; run it through
// deploy/podrun.sh (root, podman, the image loaded into a private store).
//
//   node podrun.mjs --deploy DEPLOY_DIR --image IMAGE --podman "ARGS" --run-opts "ARGS"
//                   --work DIR [--only NAME]
//
// The conversion (what a kubelet and the Job controller would do, and what
// `podman kube play` does not: it ignores Job and Service objects):
//   - every Job's pods: Indexed Job pod i gets host name <job>-i and
//     JOB_COMPLETION_INDEX=i (plus the annotation
//     batch.kubernetes.io/job-completion-index); a non-indexed Job's pod the
//     host name <job>-<random>;
//   - names: each pod gets a fixed address on the private network and every
//     container /etc/hosts entries for <host>.<subdomain> (headless Service
//     = subdomain) and for each ClusterIP Service selecting one pod (podman
//     4.3's CNI backend has no DNS plugin here);
//   - env: literal values, the downward API (metadata.name/namespace,
//     labels, annotations, resourceFieldRef limits), $(VAR) in command and
//     args expanded from it;
//   - volumes: ConfigMaps from the render (subPath too), the Secrets
//     pstrain-token (a generated token) and pstrain-tls (files the scenario
//     generates with openssl), emptyDir and PVCs as directories
//     owned by the pod's user; the termination message file;
//   - securityContext: the user, read-only root, no capabilities, no new
//     privileges;
//   - the Job controller: completions, parallelism, backoffLimit,
//     podFailurePolicy onExitCodes (FailJob, Ignore, Count), a failed Job's
//     running pods stopped, activeDeadlineSeconds.
// Probes, resources, NetworkPolicy and PDBs are not emulated.
//
// Scenarios (each a kustomization over an overlay, written under --work):
//   sync               dev overlay + components/results, 2 servers x 4
//                      workers, checkpoints; then the coordinator pod
//                      re-created over the finished results must exit 3
//   async              dev overlay, 2 servers x 4 workers
//   allreduce          allreduce overlay, 4 workers
//   failed             dev overlay, 2 x 4, a worker killed mid-job
//   restart            sync's job with training.on_failure restart: a server
//                      pod killed mid-job is re-created by the Job, takes its
//                      index back, the job rolls back and completes with the
//                      same final checkpoint as sync (byte for byte)
//   tls                dev overlay + components/tls, 2 x 4, mutual TLS from
//                      a CA and certificate generated for the pods' names
// Pods start in reverse render order (workers first, coordinator last).
// Prints "podrun: SCENARIO: ok (...)" or "FAILED"; ends with
// "podrun: N passed, M failed"; exit 1 on any failure.
import { spawnSync } from "node:child_process";
import crypto from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import YAML from "yaml";

const argv = process.argv.slice(2);
const opt = {};
for (let i = 0; i < argv.length; i += 2) opt[argv[i].replace(/^--/, "")] = argv[i + 1];
for (const k of ["deploy", "image", "podman", "work"]) {
  if (!opt[k]) {
    console.error(`podrun.mjs: --${k} is required`);
    process.exit(2);
  }
}
const PODMAN = opt.podman.split(" ").filter(Boolean);
const RUN_OPTS = (opt["run-opts"] ?? "").split(" ").filter(Boolean);
const WORK = path.resolve(opt.work);
const TAG = `${process.pid}`;
const log = (m) => console.error(`podrun: [${Math.round(process.uptime())}s] ${m}`);

function sh(cmd, args, { check = true, input } = {}) {
  const r = spawnSync(cmd, args, { encoding: "utf8", maxBuffer: 64 << 20, input });
  if (check && r.status !== 0) {
    throw new Error(`${cmd} ${args.slice(0, 8).join(" ")} ... exited ${r.status}: ${(r.stderr || r.stdout || "").trim().slice(-600)}`);
  }
  return r;
}
const podman = (args, o) => sh(PODMAN[0], [...PODMAN.slice(1), ...args], o);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// ---------------------------------------------------------------------------
// Rendering a scenario

function renderScenario(name, overlay, jobYaml, patches, components = []) {
  const dir = path.join(WORK, "scenarios", name);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, "job.yaml"), jobYaml);
  const rel = path.relative(dir, path.join(opt.deploy, "k8s", "overlays", overlay));
  const k = {
    apiVersion: "kustomize.config.k8s.io/v1beta1",
    kind: "Kustomization",
    resources: [rel],
    ...(components.length ? { components: components.map((c) => path.relative(dir, path.join(opt.deploy, "k8s", "components", c))) } : {}),
    configMapGenerator: [{ name: "pstrain-job", behavior: "replace", files: ["job.yaml"] }],
    patches: patches.map(([job, count]) => ({
      target: { kind: "Job", name: job },
      patch: YAML.stringify([
        { op: "replace", path: "/spec/completions", value: count },
        { op: "replace", path: "/spec/parallelism", value: count },
      ]),
    })),
  };
  fs.writeFileSync(path.join(dir, "kustomization.yaml"), YAML.stringify(k));
  const r = sh("kubectl", ["kustomize", dir]);
  return YAML.parseAllDocuments(r.stdout).map((d) => d.toJSON()).filter(Boolean);
}

// ---------------------------------------------------------------------------
// Pods from Jobs

const selects = (map, labels) => Object.entries(map ?? {}).every(([k, v]) => labels?.[k] === v);
const quantity = (q) => {
  const m = /^([0-9.]+)(m)?$/.exec(String(q));
  return m ? Number(m[1]) / (m[2] ? 1000 : 1) : null;
};

function planPods(objects, net) {
  const jobs = objects.filter((o) => o.kind === "Job");
  const services = objects.filter((o) => o.kind === "Service");
  const pods = [];
  let slot = 10;
  for (const job of jobs) {
    const indexed = job.spec.completionMode === "Indexed";
    const n = job.spec.completions ?? 1;
    if ((job.spec.parallelism ?? 1) !== n) throw new Error(`Job/${job.metadata.name}: parallelism != completions is not emulated`);
    for (let i = 0; i < n; i++) {
      const host = indexed ? `${job.metadata.name}-${i}` : `${job.metadata.name}-${crypto.randomBytes(3).toString("hex").slice(0, 5)}`;
      pods.push({ job, index: i, indexed, host, ip: `${net}.${slot++}`, names: [host] });
    }
  }
  for (const p of pods) {
    const t = p.job.spec.template;
    const sub = t.spec.subdomain;
    const ns = p.job.metadata.namespace ?? "default";
    if (sub && services.some((s) => s.metadata.name === sub && s.spec.clusterIP === "None")) {
      p.names.push(`${p.host}.${sub}`, `${p.host}.${sub}.${ns}.svc`, `${p.host}.${sub}.${ns}.svc.cluster.local`);
    }
    for (const s of services) {
      if (s.spec.clusterIP === "None" || !s.spec.selector || !selects(s.spec.selector, t.metadata.labels)) continue;
      const all = pods.filter((q) => selects(s.spec.selector, q.job.spec.template.metadata.labels));
      if (all.length !== 1) throw new Error(`Service/${s.metadata.name} selects ${all.length} pods: only one-pod ClusterIP Services are emulated`);
      p.names.push(s.metadata.name, `${s.metadata.name}.${ns}.svc`, `${s.metadata.name}.${ns}.svc.cluster.local`);
    }
  }
  return pods;
}

function envOf(p, c) {
  const t = p.job.spec.template;
  const annotations = { ...(t.metadata.annotations ?? {}) };
  if (p.indexed) annotations["batch.kubernetes.io/job-completion-index"] = String(p.index);
  const env = new Map();
  const expand = (s) => String(s).replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (all, v) => (env.has(v) ? env.get(v) : all));
  for (const e of c.env ?? []) {
    let v = null;
    if (e.value !== undefined) v = expand(e.value);
    const fp = e.valueFrom?.fieldRef?.fieldPath;
    if (fp) {
      const m = /^metadata\.(labels|annotations)\['([^']+)'\]$/.exec(fp);
      if (fp === "metadata.name") v = p.host;
      else if (fp === "metadata.namespace") v = p.job.metadata.namespace ?? "default";
      else if (m) v = (m[1] === "labels" ? t.metadata.labels : annotations)?.[m[2]] ?? "";
      else throw new Error(`${p.host}: env ${e.name}: fieldRef ${fp} is not emulated`);
    }
    const rf = e.valueFrom?.resourceFieldRef;
    if (rf) {
      const [kind, res] = rf.resource.split(".");
      const q = quantity(c.resources?.[kind]?.[res] ?? "1");
      v = String(Math.max(1, Math.ceil(q / (quantity(rf.divisor ?? "1") ?? 1))));
    }
    if (e.valueFrom?.secretKeyRef || e.valueFrom?.configMapKeyRef) throw new Error(`${p.host}: env ${e.name}: not emulated`);
    if (v !== null) env.set(e.name, v);
  }
  // Set by the Job controller (after the template's own env).
  if (p.indexed) env.set("JOB_COMPLETION_INDEX", String(p.index));
  return { env, expand };
}

function podmanArgs(p, objects, scenarioDir, allPods, secrets) {
  const t = p.job.spec.template;
  const spec = t.spec;
  if (spec.containers.length !== 1 || spec.initContainers?.length) throw new Error(`${p.host}: one container per pod is emulated`);
  const c = spec.containers[0];
  const { env, expand } = envOf(p, c);
  const psc = spec.securityContext ?? {};
  const sc = c.securityContext ?? {};
  const uid = sc.runAsUser ?? psc.runAsUser ?? 0;
  const gid = sc.runAsGroup ?? psc.runAsGroup ?? 0;
  const podDir = path.join(scenarioDir, "pods", p.host);
  fs.mkdirSync(podDir, { recursive: true });
  const args = ["run", "-d", "--name", `pr${TAG}-${p.host}`, ...RUN_OPTS, "--network", opt.network, "--ip", p.ip, "--hostname", p.host];
  for (const q of allPods) for (const n of q.names) args.push("--add-host", `${n}:${q.ip}`);
  args.push("--user", `${uid}:${gid}`);
  if (sc.readOnlyRootFilesystem) args.push("--read-only");
  if ((sc.capabilities?.drop ?? []).includes("ALL")) args.push("--cap-drop", "ALL");
  if (sc.allowPrivilegeEscalation === false) args.push("--security-opt", "no-new-privileges");
  for (const [k, v] of env) args.push("-e", `${k}=${v}`);
  const volumes = new Map((spec.volumes ?? []).map((v) => [v.name, v]));
  for (const m of c.volumeMounts ?? []) {
    const v = volumes.get(m.name);
    if (!v) throw new Error(`${p.host}: mount ${m.name} has no volume`);
    let src;
    if (v.configMap) {
      const cm = objects.find((o) => o.kind === "ConfigMap" && o.metadata.name === v.configMap.name);
      if (!cm) throw new Error(`${p.host}: ConfigMap ${v.configMap.name} is not in the render`);
      src = path.join(podDir, `cm-${m.name}`);
      fs.mkdirSync(src, { recursive: true });
      for (const [k, val] of Object.entries(cm.data ?? {})) fs.writeFileSync(path.join(src, k), val, { mode: 0o644 });
    } else if (v.secret) {
      const data = secrets[v.secret.secretName];
      if (!data) throw new Error(`${p.host}: Secret ${v.secret.secretName} is not emulated`);
      src = path.join(scenarioDir, `secret-${v.secret.secretName}`);
      fs.mkdirSync(src, { recursive: true });
      // Readable by the pod's user as the kubelet's defaultMode 0440 + fsGroup
      // would make them.
      for (const [k, val] of Object.entries(data)) {
        fs.writeFileSync(path.join(src, k), val, { mode: 0o640 });
        fs.chownSync(path.join(src, k), 0, gid);
      }
    } else if (v.emptyDir || v.persistentVolumeClaim) {
      src = v.emptyDir ? path.join(podDir, `empty-${m.name}`) : path.join(scenarioDir, "pvc", v.persistentVolumeClaim.claimName);
      fs.mkdirSync(src, { recursive: true });
      fs.chownSync(src, uid, gid);
    } else {
      throw new Error(`${p.host}: volume ${m.name} of this type is not emulated`);
    }
    if (m.subPath) src = path.join(src, m.subPath);
    args.push("-v", `${src}:${m.mountPath}${m.readOnly ? ":ro" : ""}`);
  }
  // The termination message file, written by the container.
  const term = path.join(podDir, "termination-log");
  fs.writeFileSync(term, "");
  fs.chownSync(term, uid, gid);
  args.push("-v", `${term}:${c.terminationMessagePath ?? "/dev/termination-log"}`);
  args.push("--entrypoint", expand(c.command[0]), opt.image, ...c.command.slice(1).map(expand), ...(c.args ?? []).map(expand));
  p.termination = term;
  p.podDir = podDir;
  return args;
}

// ---------------------------------------------------------------------------
// The Job controller

function failJobRule(job, code, containerName) {
  for (const r of job.spec.podFailurePolicy?.rules ?? []) {
    const e = r.onExitCodes;
    if (!e) continue;
    if (e.containerName && e.containerName !== containerName) continue;
    const hit = e.operator === "In" ? e.values.includes(code) : !e.values.includes(code);
    if (hit) return r.action;
  }
  return "Count";
}

async function runScenario(name, objects, { deadlineS = 240, during, after, secrets: extra = {} } = {}) {
  const scenarioDir = path.join(WORK, "run", name);
  fs.mkdirSync(scenarioDir, { recursive: true });
  const pods = planPods(objects, opt.net);
  const secrets = { "pstrain-token": { token: crypto.randomBytes(24).toString("hex") }, ...extra };
  const jobs = new Map();
  for (const p of pods) {
    const j = jobs.get(p.job.metadata.name) ?? { job: p.job, failures: 0, state: "Running", pods: [] };
    j.pods.push(p);
    jobs.set(p.job.metadata.name, j);
    p.history = [];
  }
  const container = (p) => `pr${TAG}-${p.host}`;
  const start = (p) => {
    podman(["rm", "-f", container(p)], { check: false });
    podman(podmanArgs(p, objects, scenarioDir, pods, secrets));
    p.running = true;
  };
  // Reverse render order: workers first, the coordinator last.
  for (const p of [...pods].reverse()) start(p);
  log(`${name}: started ${pods.length} pods: ${pods.map((p) => p.host).join(" ")}`);
  const t0 = Date.now();
  let duringDone = !during;
  for (;;) {
    for (const p of pods.filter((q) => q.running)) {
      const r = podman(["inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", container(p)], { check: false });
      const [state, code] = r.stdout.trim().split(" ");
      if (state !== "exited") continue;
      p.running = false;
      fs.writeFileSync(path.join(p.podDir, `log.${p.history.length}`), podman(["logs", container(p)], { check: false }).stderr);
      p.history.push(Number(code));
      const j = jobs.get(p.job.metadata.name);
      if (j.state !== "Running") continue;
      if (Number(code) === 0) continue;
      const action = failJobRule(j.job, Number(code), p.job.spec.template.spec.containers[0].name);
      if (action === "FailJob" || (action === "Count" && ++j.failures > (j.job.spec.backoffLimit ?? 6))) {
        j.state = "Failed";
        j.reason = `${p.host} exited ${code} (${action === "FailJob" ? "podFailurePolicy FailJob" : "backoffLimit"})`;
        log(`${name}: Job ${j.job.metadata.name} Failed: ${j.reason}`);
        // The Job controller deletes a failed Job's running pods: whatever
        // they exit with then counts for nothing (recorded apart).
        for (const q of j.pods.filter((x) => x.running)) {
          q.deleted = true;
          podman(["stop", "-t", "5", container(q)], { check: false });
        }
      } else {
        log(`${name}: ${p.host} exited ${code}: re-created (${action})`);
        start(p);
      }
    }
    for (const j of jobs.values()) {
      if (j.state === "Running" && j.pods.every((p) => !p.running && p.history.at(-1) === 0)) j.state = "Complete";
      const limit = j.job.spec.activeDeadlineSeconds;
      if (j.state === "Running" && limit && Date.now() - t0 > limit * 1000) {
        j.state = "Failed";
        j.reason = "DeadlineExceeded";
        for (const q of j.pods.filter((x) => x.running)) {
          q.deleted = true;
          podman(["stop", "-t", "5", container(q)], { check: false });
        }
      }
    }
    if (!duringDone) duringDone = await during({ pods, jobs, container, scenarioDir });
    if ([...jobs.values()].every((j) => j.state !== "Running") && pods.every((p) => !p.running)) break;
    if (Date.now() - t0 > deadlineS * 1000) {
      for (const p of pods) podman(["rm", "-f", container(p)], { check: false });
      throw new Error(`${name}: not finished after ${deadlineS}s (jobs: ${[...jobs.values()].map((j) => `${j.job.metadata.name}=${j.state}`).join(" ")})`);
    }
    await sleep(500);
  }
  // E.g. a pod re-created after the end: started again, awaited (bounded).
  let afterResult = null;
  if (after) {
    const rerun = async (p, seconds) => {
      start(p);
      for (let i = 0; i < seconds * 2; i++) {
        const r = podman(["inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", container(p)], { check: false });
        const [state, code] = r.stdout.trim().split(" ");
        if (state === "exited") {
          p.running = false;
          return { code: Number(code), log: podman(["logs", container(p)], { check: false }).stderr };
        }
        await sleep(500);
      }
      return { code: null, log: "still running" };
    };
    afterResult = await after({ pods, rerun });
  }
  for (const p of pods) podman(["rm", "-f", container(p)], { check: false });
  return { pods, jobs, scenarioDir, afterResult };
}

function tailLogs(pods) {
  for (const p of pods) {
    const logs = fs.readdirSync(p.podDir).filter((f) => f.startsWith("log."));
    for (const f of logs) {
      const lines = fs.readFileSync(path.join(p.podDir, f), "utf8").trim().split("\n").slice(-6);
      console.error(`--- ${p.host} ${f} (exits ${p.history.join(",")})\n${lines.join("\n")}`);
    }
  }
}

// ---------------------------------------------------------------------------
// Scenarios

function jobFile(base, edit) {
  const j = YAML.parse(fs.readFileSync(path.join(opt.deploy, "k8s", "overlays", base, "job.yaml"), "utf8"));
  edit(j);
  return YAML.stringify(j);
}
const small = (j, mode, servers, workers, steps) => {
  j.job.servers = servers;
  j.job.workers = workers;
  j.training.mode = mode;
  j.training.steps = steps;
  j.training.local_batch = 16;
  j.evaluation = { every_steps: steps };
  j.data.test_examples = 200;
  j.network.startup_timeout_s = 120;
  j.network.barrier_timeout_s = 120;
};

function coordinatorOf(r) {
  return r.pods.find((p) => p.job.spec.template.spec.containers[0].command[0].endsWith("ps_coordinator"));
}

function checkSuccess(r, steps, claim = null) {
  const problems = [];
  for (const j of r.jobs.values()) if (j.state !== "Complete") problems.push(`Job ${j.job.metadata.name} ${j.state}${j.reason ? `: ${j.reason}` : ""}`);
  for (const p of r.pods) if (p.history.join(",") !== "0") problems.push(`${p.host} exits ${p.history.join(",")}`);
  const c = coordinatorOf(r);
  const first = `${c.termination}.first`;
  const msg = fs.readFileSync(fs.existsSync(first) ? first : c.termination, "utf8").trim();
  let summary = null;
  try {
    summary = JSON.parse(msg);
  } catch {
    problems.push(`termination message is not JSON: ${msg.slice(0, 200)}`);
  }
  if (summary && (summary.failed !== false || summary.steps !== steps)) problems.push(`termination message: failed=${summary.failed} steps=${summary.steps} (want false, ${steps})`);
  const out = path.join(claim ?? path.join(c.podDir, "empty-out"), "summary.json");
  if (!fs.existsSync(out)) problems.push("no summary.json in the coordinator's out volume");
  return { problems, note: summary ? `${summary.mode}, ${summary.workers} workers, ${summary.servers} servers, ${summary.steps} steps, loss ${summary.final_loss}` : "" };
}

// The job of the sync and restart scenarios: the same weights at the end,
// whatever happened on the way. Emulated compute (400 ms a step) leaves time
// to kill a pod between the checkpoint of step 10 and the end.
const SYNC_STEPS = 20;
const syncJob = (j) => {
  small(j, "sync", 2, 4, SYNC_STEPS);
  j.checkpoint = { every_steps: 10 };
  j.worker = { ...(j.worker ?? {}), compute_ms: 400 };
};
// The newest complete checkpoint under DIR: { step, dir, files } or null.
function newestCheckpoint(dir) {
  if (!fs.existsSync(dir)) return null;
  const steps = fs.readdirSync(dir).filter((d) => /^step-[0-9]+$/.test(d) && fs.existsSync(path.join(dir, d, "MANIFEST.json"))).sort();
  if (!steps.length) return null;
  const d = path.join(dir, steps.at(-1));
  const files = fs.readdirSync(d).filter((f) => f.startsWith("shard-")).sort();
  return { step: steps.at(-1), dir: d, files };
}
const finalCheckpoints = {};
// A CA and one certificate for every process (server and client), naming
// the coordinator Service and each server pod as the processes dial them
// (deploy/README.md, "TLS").
function tlsSecret(instance, ns, servers) {
  const dir = path.join(WORK, "tls");
  fs.mkdirSync(dir, { recursive: true });
  const f = (n) => path.join(dir, n);
  const names = [`${instance}-ps-coordinator`, `${instance}-ps-coordinator.${ns}.svc`, `${instance}-ps-coordinator.${ns}.svc.cluster.local`];
  for (let i = 0; i < servers; i++) names.push(`${instance}-ps-${i}.${instance}-ps`, `${instance}-ps-${i}.${instance}-ps.${ns}.svc`);
  fs.writeFileSync(f("ext"), `subjectAltName=${names.map((n) => `DNS:${n}`).join(",")}\nextendedKeyUsage=serverAuth,clientAuth\n`);
  sh("openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=pstrain-podrun-ca", "-keyout", f("ca.key"), "-out", f("ca.crt")]);
  sh("openssl", ["req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=pstrain", "-keyout", f("tls.key"), "-out", f("tls.csr")]);
  sh("openssl", ["x509", "-req", "-in", f("tls.csr"), "-CA", f("ca.crt"), "-CAkey", f("ca.key"), "-CAcreateserial", "-days", "2", "-out", f("tls.crt"), "-extfile", f("ext")]);
  return Object.fromEntries(["tls.crt", "tls.key", "ca.crt"].map((k) => [k, fs.readFileSync(f(k))]));
}

const scenarios = [
  // With the results component: outputs and checkpoints on the claim, and a
  // coordinator pod re-created after the end must not start a second job
  // over them (issue 27 #2: it used to truncate metrics.csv and overwrite
  // summary.json): it exits 3 and says why in its termination message.
  ["sync", () => {
    const objs = renderScenario("sync", "dev", jobFile("dev", syncJob), [["ps", 2], ["ps-worker", 4]], ["results"]);
    const after = async ({ pods, rerun }) => {
      const c = coordinatorOf({ pods });
      const claim = path.join(WORK, "run", "sync", "pvc", objs.find((o) => o.kind === "PersistentVolumeClaim").metadata.name);
      const before = ["summary.json", "metrics.csv"].map((f) => fs.readFileSync(path.join(claim, f), "utf8"));
      // The first run's termination message, before the new pod writes its own.
      fs.copyFileSync(c.termination, `${c.termination}.first`);
      const again = await rerun(c, 60);
      const afterFiles = ["summary.json", "metrics.csv"].map((f) => fs.readFileSync(path.join(claim, f), "utf8"));
      return { claim, again, unchanged: before.every((b, i) => b === afterFiles[i]), message: fs.readFileSync(c.termination, "utf8").trim() };
    };
    const check = (r) => {
      const { problems, note } = checkSuccess(r, SYNC_STEPS, r.afterResult?.claim);
      const a = r.afterResult;
      finalCheckpoints.sync = newestCheckpoint(path.join(a.claim, "ckpt"));
      const ckpt = path.join(a.claim, "ckpt");
      const steps_ = fs.existsSync(ckpt) ? fs.readdirSync(ckpt).filter((d) => d.startsWith("step-")) : [];
      if (!steps_.length) problems.push(`no checkpoint under ${ckpt} on the claim`);
      if (a.again.code !== 3) problems.push(`a coordinator re-created after the end exited ${a.again.code}, want 3 (job already over): ${a.again.log.trim().split("\n").slice(-3).join(" | ")}`);
      if (!a.unchanged) problems.push("the re-created coordinator changed summary.json or metrics.csv on the claim");
      if (!/summary\.json|finished/.test(a.message)) problems.push(`the re-created coordinator's termination message does not say why: ${a.message.slice(0, 200)}`);
      return { problems, note: `${note}; results and ${steps_.length} checkpoints on the claim; re-created coordinator exited 3: ${a.message.slice(0, 120)}` };
    };
    return [objs, { after }, check];
  }],
  ["async", () => {
    const steps = 20;
    const objs = renderScenario("async", "dev", jobFile("dev", (j) => small(j, "async", 2, 4, steps)), [["ps", 2], ["ps-worker", 4]]);
    return [objs, {}, (r) => checkSuccess(r, steps)];
  }],
  ["allreduce", () => {
    const steps = 20;
    const objs = renderScenario("allreduce", "allreduce", jobFile("allreduce", (j) => small(j, "allreduce", 1, 4, steps)), [["ps-worker", 4]]);
    return [objs, {}, (r) => checkSuccess(r, steps)];
  }],
  // A worker killed mid-job (SIGKILL: exit 137, retried by the Job as a
  // crash): the job fails, and no pod may exit 0 (issue 27 #1: a worker
  // registering after the end used to exit 0 and complete the Job).
  ["failed", () => {
    const objs = renderScenario(
      "failed",
      "dev",
      jobFile("dev", (j) => {
        small(j, "sync", 2, 4, 100000);
        j.network.lease_s = 2;
      }),
      [["ps", 2], ["ps-worker", 4]],
    );
    let killed = null;
    const during = async ({ pods, container }) => {
      // Mid-job = metrics.csv has rows (steps completed).
      const c = coordinatorOf({ pods });
      const csv = path.join(c.podDir ?? "", "empty-out", "metrics.csv");
      if (!c.podDir || !fs.existsSync(csv) || fs.readFileSync(csv, "utf8").trim().split("\n").length < 3) return false;
      killed = pods.find((p) => p.host.endsWith("ps-worker-1"));
      log(`failed: steps done; killing ${killed.host}`);
      podman(["kill", "-s", "KILL", container(killed)], { check: false });
      return true;
    };
    const check = (r) => {
      const problems = [];
      if (!killed) problems.push("the job never got going (no worker killed)");
      // A pod the Job controller deleted (its Job had failed) counts for
      // nothing; every other exit must be a failure.
      for (const p of r.pods) {
        const own = p.deleted ? p.history.slice(0, -1) : p.history;
        if (own.includes(0)) problems.push(`${p.host} exited 0 after a failed run (exits ${p.history.join(",")})`);
      }
      const c = coordinatorOf(r);
      if (c.history.join(",") !== "1") problems.push(`coordinator exits ${c.history.join(",")}, want 1`);
      for (const j of r.jobs.values()) if (j.state !== "Failed") problems.push(`Job ${j.job.metadata.name} ${j.state}, want Failed`);
      let summary = {};
      try {
        summary = JSON.parse(fs.readFileSync(c.termination, "utf8"));
      } catch {
        problems.push("termination message is not JSON");
      }
      if (summary.failed !== true) problems.push(`termination message failed=${summary.failed}`);
      const retried = r.pods.filter((p) => p.history.length > 1).map((p) => `${p.host} ${p.history.join(",")}`);
      return { problems, note: `${summary.failure?.process ?? "?"} failure "${summary.failure?.message ?? summary.message ?? ""}"; exits: ${r.pods.map((p) => `${p.host}=${p.history.join(",")}${p.deleted ? " (deleted by the Job controller)" : ""}`).join(" ")}${retried.length ? `; retried: ${retried.join(" ")}` : ""}` };
    };
    return [objs, { during }, check];
  }],
  // training.on_failure: restart on Kubernetes: the Job controller is the
  // supervisor. A server pod killed after the checkpoint of step 10 exits
  // 137, which the Job counts (backoffLimit) and re-creates with its index;
  // the new server registers as that shard, the coordinator rolls every
  // shard back to the checkpoint, and the job completes with the same final
  // checkpoint as the undisturbed sync scenario, byte for byte.
  ["restart", () => {
    const objs = renderScenario(
      "restart",
      "dev",
      jobFile("dev", (j) => {
        syncJob(j);
        j.training.on_failure = "restart";
        j.training.max_restarts = 2;
        j.network.lease_s = 2;
      }),
      [["ps", 2], ["ps-worker", 4]],
      ["results"],
    );
    const claim = path.join(WORK, "run", "restart", "pvc", objs.find((o) => o.kind === "PersistentVolumeClaim").metadata.name);
    let killed = null;
    const during = async ({ pods, container }) => {
      const ck = newestCheckpoint(path.join(claim, "ckpt"));
      if (!ck) return false;
      killed = pods.find((p) => p.host.endsWith("-ps-1"));
      log(`restart: ${ck.step} written; killing ${killed.host}`);
      podman(["kill", "-s", "KILL", container(killed)], { check: false });
      return true;
    };
    const check = (r) => {
      const problems = [];
      if (!killed) problems.push("no checkpoint was written before the end (no server killed)");
      for (const j of r.jobs.values()) if (j.state !== "Complete") problems.push(`Job ${j.job.metadata.name} ${j.state}${j.reason ? `: ${j.reason}` : ""}`);
      for (const p of r.pods) {
        const want = p === killed ? "137,0" : "0";
        if (p.history.join(",") !== want) problems.push(`${p.host} exits ${p.history.join(",")}, want ${want}`);
      }
      let summary = {};
      try {
        summary = JSON.parse(fs.readFileSync(coordinatorOf(r).termination, "utf8"));
      } catch {
        problems.push("termination message is not JSON");
      }
      if (summary.failed !== false || summary.steps !== SYNC_STEPS) problems.push(`termination message: failed=${summary.failed} steps=${summary.steps}`);
      const mine = newestCheckpoint(path.join(claim, "ckpt"));
      const ref = finalCheckpoints.sync;
      let same = "not compared: the sync scenario did not run (PSTRAIN_PODRUN_ONLY)";
      if (ref) {
        if (!mine || mine.step !== ref.step || mine.files.join() !== ref.files.join()) {
          problems.push(`final checkpoint ${mine?.step} [${mine?.files}] vs sync's ${ref.step} [${ref.files}]`);
        } else {
          const diff = mine.files.filter((f) => !fs.readFileSync(path.join(mine.dir, f)).equals(fs.readFileSync(path.join(ref.dir, f))));
          if (diff.length) problems.push(`final checkpoint differs from the undisturbed sync scenario's: ${diff.join(" ")}`);
          same = `final ${mine.step} byte-identical to sync's (${mine.files.length} shard files)`;
        }
      }
      return { problems, note: `${killed?.host} killed, re-created by the Job, exits ${killed?.history.join(",")}; ${same}` };
    };
    return [objs, { during }, check];
  }],
  // Mutual TLS through components/tls: the Secret pstrain-tls from a CA and
  // a certificate generated for the pods' names.
  ["tls", () => {
    const steps = 20;
    const objs = renderScenario("tls", "dev", jobFile("dev", (j) => small(j, "sync", 2, 4, steps)), [["ps", 2], ["ps-worker", 4]], ["tls"]);
    const tlsArgs = objs.filter((o) => o.kind === "Job").every((o) => (o.spec.template.spec.containers[0].args ?? []).some((a) => a.startsWith("--tls_ca=")));
    if (!tlsArgs) throw new Error("tls: a Job of the render has no --tls_ca argument");
    const ns = objs.find((o) => o.kind === "Job").metadata.namespace ?? "default";
    return [objs, { secrets: { "pstrain-tls": tlsSecret("dev", ns, 2) } }, (r) => checkSuccess(r, steps)];
  }],
];

let passed = 0;
let failed = 0;
for (const [name, make] of scenarios) {
  if (opt.only && !opt.only.split(",").includes(name)) continue;
  try {
    const [objects, runOpts, check] = make();
    const r = await runScenario(name, objects, runOpts);
    const { problems, note } = check(r);
    if (problems.length) {
      tailLogs(r.pods);
      console.log(`podrun: ${name}: FAILED: ${problems.join("; ")}`);
      failed++;
    } else {
      console.log(`podrun: ${name}: ok (${note})`);
      passed++;
    }
  } catch (e) {
    console.log(`podrun: ${name}: FAILED: ${e.message}`);
    failed++;
  }
}
console.log(`podrun: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
