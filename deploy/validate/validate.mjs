// Offline validation of the pstrain Kubernetes manifests; run it through
// deploy/validate.sh, which installs the node packages first.
//
//   node validate.mjs --deploy DEPLOY_DIR [--bin BIN_DIR] [--fixtures]
//
// For each overlay (deploy/k8s/overlays/dev and prod) the checks are:
//   render     `kubectl kustomize` succeeds and yields Kubernetes objects
//   schema     kubernetes-models: new <Kind>(object).validate() (JSON schema)
//   typecheck  tsc --noEmit of `const o: I<Kind> = <object literal>`: excess
//              property checks catch misspelled fields validate() lets by
//   wiring     selectors, Services, DNS names, ports, probes, the job file and
//              the replica counts agree with each other and with the args
//   lifecycle  every role is a Job that finishes with the training job:
//              deadline, TTL, retries, podFailurePolicy (exit 1/2/3 fail the
//              Job), the coordinator's termination message; PDBs that only
//              block drains while a job runs; Kueue: every Job queued and
//              suspended, or none
//   policy     restricted pod security profile, resources, common labels,
//              Guaranteed QoS for the coordinator and the servers
//   flags      every --flag in the args is one the binary lists in --helpfull,
//              and the ports other pods reach do not listen on loopback
//   jobfile    ps_coordinator --dry_run accepts the mounted job.yaml
// plus `lint`: yamllint on deploy/k8s (deploy/.yamllint).
//
// --fixtures runs the same checks on each planted-error overlay in
// validate/fixtures/ and passes when every one is caught: the check named by
// its "# expect: CHECK" line reports a finding the dev overlay does not have.
//
// Ends with "deploy validation: N passed, M failed"; exit 1 on any failure.
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import YAML from "yaml";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const NODE_MODULES = path.join(HERE, "node_modules");
const CHECKS = ["render", "schema", "typecheck", "wiring", "lifecycle", "policy", "flags", "jobfile"];

// Where each binary lives under BIN_DIR (bazel-bin layout).
const BINARIES = {
  ps_coordinator: "coordinator/ps_coordinator",
  ps_server: "server/ps_server",
  ps_worker: "worker/ps_worker",
};
// The uid of the image's user (deploy/docker/Dockerfile).
const IMAGE_UID = 10001;
const PART_OF = "app.kubernetes.io/part-of";
const COMPONENT = "app.kubernetes.io/component";

// ---------------------------------------------------------------------------
// Small helpers

function run(cmd, args, options = {}) {
  const r = spawnSync(cmd, args, { encoding: "utf8", maxBuffer: 64 << 20, ...options });
  return { status: r.status, stdout: r.stdout ?? "", stderr: r.stderr ?? "", error: r.error };
}

function id(obj) {
  return `${obj.kind}/${obj.metadata?.name ?? "?"}`;
}

function nsOf(obj) {
  return obj.metadata?.namespace ?? "";
}

// True when a LabelSelector (matchLabels + matchExpressions) selects labels.
function selects(selector, labels = {}) {
  if (!selector) return false;
  for (const [k, v] of Object.entries(selector.matchLabels ?? {})) {
    if (labels[k] !== v) return false;
  }
  for (const e of selector.matchExpressions ?? []) {
    const has = Object.prototype.hasOwnProperty.call(labels, e.key);
    const vals = e.values ?? [];
    if (e.operator === "In" && !(has && vals.includes(labels[e.key]))) return false;
    if (e.operator === "NotIn" && has && vals.includes(labels[e.key])) return false;
    if (e.operator === "Exists" && !has) return false;
    if (e.operator === "DoesNotExist" && has) return false;
  }
  return true;
}

// A Service's selector is a plain map.
function mapSelects(map, labels = {}) {
  return Object.entries(map ?? {}).every(([k, v]) => labels[k] === v);
}

// Splits container args into {name, value, raw} for "--name[=value]" and
// {positional} otherwise.
function parseArgs(list = []) {
  return list.map((raw) => {
    const m = /^--?([A-Za-z0-9_.-]+)(?:=(.*))?$/s.exec(String(raw));
    return m ? { name: m[1], value: m[2] ?? null, raw } : { positional: true, raw };
  });
}

function flagValue(container, name) {
  const hit = parseArgs(container.args).find((a) => a.name === name);
  return hit ? (hit.value ?? "true") : undefined;
}

// A pod's index, as Kubernetes gives it to Indexed Job pods.
const INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index";
function isIndexed(w) {
  return w.kind === "Job" && w.obj.spec?.completionMode === "Indexed";
}

// The value of env var `name` in container `c` of pod `index` of workload
// `w`, as the kubelet resolves it (literal values, the downward API's labels
// and the completion index); null when it cannot be known offline.
function envValue(w, c, name, index) {
  if (name === "JOB_COMPLETION_INDEX" && isIndexed(w)) return String(index);
  const e = (c.env ?? []).find((x) => x.name === name);
  if (!e) return null;
  if (e.value !== undefined) return String(e.value);
  const fp = e.valueFrom?.fieldRef?.fieldPath ?? "";
  const m = /^metadata\.(labels|annotations)\['([^']+)'\]$/.exec(fp);
  if (m && m[1] === "labels") return w.labels[m[2]] ?? null;
  if (m && m[1] === "annotations" && m[2] === INDEX_ANNOTATION && isIndexed(w)) return String(index);
  if (m && m[1] === "annotations") return w.obj.spec?.template?.metadata?.annotations?.[m[2]] ?? null;
  return null;
}

// `text` with each $(VAR) expanded for pod `index`; {text, unknown: [VAR...]}.
function expand(w, c, text, index = 0) {
  const unknown = [];
  const out = String(text).replace(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g, (all, v) => {
    const val = envValue(w, c, v, index);
    if (val == null) {
      unknown.push(v);
      return all;
    }
    return val;
  });
  return { text: out, unknown };
}

// The pod count of a workload: replicas, or a Job's completions.
function podCount(w) {
  if (w.kind === "Job") return w.obj.spec?.completions ?? 1;
  return w.obj.spec?.replicas ?? 1;
}

function binaryOf(container) {
  const first = (container.command ?? [])[0] ?? "";
  const base = path.posix.basename(first);
  return Object.prototype.hasOwnProperty.call(BINARIES, base) ? base : null;
}

// Pod-bearing objects: {obj, kind, name, ns, labels, spec, template}.
function workloads(objects) {
  const out = [];
  for (const obj of objects) {
    let template = null;
    if (["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job"].includes(obj.kind)) {
      template = obj.spec?.template;
    } else if (obj.kind === "CronJob") {
      template = obj.spec?.jobTemplate?.spec?.template;
    } else if (obj.kind === "Pod") {
      template = obj;
    }
    if (!template) continue;
    out.push({
      obj,
      kind: obj.kind,
      name: obj.metadata?.name,
      ns: nsOf(obj),
      id: id(obj),
      labels: template.metadata?.labels ?? {},
      spec: template.spec ?? {},
    });
  }
  return out;
}

function containersOf(w) {
  return [...(w.spec.initContainers ?? []), ...(w.spec.containers ?? [])];
}

// Resolves a port (number or IANA name) against a container's ports.
function resolvePort(container, port) {
  if (typeof port === "number") return port;
  if (typeof port === "string" && /^\d+$/.test(port)) return Number(port);
  const hit = (container.ports ?? []).find((p) => p.name === port);
  return hit ? hit.containerPort : null;
}

function declaredPorts(container) {
  return (container.ports ?? []).map((p) => p.containerPort);
}

// ---------------------------------------------------------------------------
// render

function render(dir) {
  const r = run("kubectl", ["kustomize", dir]);
  if (r.error) return { findings: [`kubectl not runnable: ${r.error.message}`] };
  if (r.status !== 0) {
    const why = r.stderr
      .replace(/\s+/g, " ")
      .trim()
      .replace(/^E\d{4} \S+ +\d+ \S+\] "command failed" err=< ?/, "")
      .replace(/ ?>$/, "");
    return { findings: [`kubectl kustomize failed: ${why.length > 400 ? why.slice(0, 400) + " ..." : why}`] };
  }
  const findings = [];
  const objects = [];
  for (const doc of YAML.parseAllDocuments(r.stdout)) {
    if (doc.errors.length) {
      findings.push(`rendered YAML does not parse: ${doc.errors[0].message}`);
      continue;
    }
    const obj = doc.toJSON();
    if (obj == null) continue;
    if (typeof obj !== "object" || !obj.apiVersion || !obj.kind || !obj.metadata?.name) {
      findings.push(`rendered document without apiVersion, kind or metadata.name: ${JSON.stringify(obj).slice(0, 80)}`);
      continue;
    }
    objects.push(obj);
  }
  if (!objects.length && !findings.length) findings.push("the render is empty");
  return { findings, objects };
}

// ---------------------------------------------------------------------------
// schema: kubernetes-models' JSON-schema validation

function modelPath(obj) {
  const [group, version] = obj.apiVersion.includes("/") ? obj.apiVersion.split("/") : ["", obj.apiVersion];
  return group ? `kubernetes-models/${group}/${version}/${obj.kind}` : `kubernetes-models/${version}/${obj.kind}`;
}

async function loadModel(obj) {
  try {
    const mod = await import(modelPath(obj));
    return mod[obj.kind] ?? null;
  } catch {
    return null;
  }
}

async function checkSchema(objects) {
  const findings = [];
  for (const obj of objects) {
    const Model = await loadModel(obj);
    if (!Model) {
      findings.push(`${id(obj)}: no Kubernetes model for ${obj.apiVersion} ${obj.kind}`);
      continue;
    }
    try {
      new Model(obj).validate();
    } catch (e) {
      const errors = Array.isArray(e.errors) && e.errors.length ? e.errors : null;
      if (errors) {
        for (const err of errors) {
          const where = err.instancePath || "/";
          const extra = err.params?.allowedValues ? ` (${err.params.allowedValues.join(", ")})` : "";
          findings.push(`${id(obj)}: ${where} ${err.message}${extra}`);
        }
      } else {
        findings.push(`${id(obj)}: ${e.message}`);
      }
    }
  }
  return { findings };
}

// ---------------------------------------------------------------------------
// typecheck: excess property checks of TypeScript object literals

async function checkTypes(objects, workdir) {
  const findings = [];
  const files = [];
  const byFile = new Map();
  for (const [i, obj] of objects.entries()) {
    if (!(await loadModel(obj))) {
      findings.push(`${id(obj)}: no TypeScript type for ${obj.apiVersion} ${obj.kind}`);
      continue;
    }
    const name = `obj${String(i).padStart(2, "0")}_${obj.kind}.ts`;
    // tsc reports one error per assignment, so each level is a literal of
    // its own: every container, then the pod template (naming the checked
    // containers), then the object (naming the checked template).
    const decls = [];
    const ref = (n) => `__pstrain_ref_${n}__`;
    let top = obj;
    const [w] = workloads([obj]);
    if (w && obj.kind !== "Pod") {
      const template = structuredClone(obj.kind === "CronJob" ? obj.spec.jobTemplate.spec.template : obj.spec.template);
      for (const key of ["initContainers", "containers"]) {
        if (!Array.isArray(template.spec?.[key])) continue;
        template.spec[key] = template.spec[key].map((c) => {
          decls.push(["IContainer", "kubernetes-models/v1/Container", c]);
          return ref(decls.length - 1);
        });
      }
      decls.push(["IPodTemplateSpec", "kubernetes-models/v1/PodTemplateSpec", template]);
      top = structuredClone(obj);
      if (obj.kind === "CronJob") top.spec.jobTemplate.spec.template = ref(decls.length - 1);
      else top.spec.template = ref(decls.length - 1);
    }
    decls.push([`I${obj.kind}`, modelPath(obj), top]);
    const imports = [...new Map(decls.map(([t, m]) => [t, m]))]
      .map(([t, m]) => `import type { ${t} } from "${m}";\n`)
      .join("");
    const literal = (v) => JSON.stringify(v, null, 2).replace(/"__pstrain_ref_(\d+)__"/g, "o$1");
    const text =
      `// ${id(obj)}\n` +
      imports +
      decls.map(([t, , value], j) => `export const o${j}: ${t} = ${literal(value)};\n`).join("");
    fs.writeFileSync(path.join(workdir, name), text);
    files.push(name);
    byFile.set(name, { obj, lines: text.split("\n") });
  }
  const tsconfig = {
    compilerOptions: {
      strict: true,
      noEmit: true,
      skipLibCheck: true,
      target: "es2020",
      module: "esnext",
      moduleResolution: "bundler",
      types: [],
      baseUrl: ".",
      paths: { "kubernetes-models/*": [path.join(NODE_MODULES, "kubernetes-models/*")] },
    },
    files,
  };
  fs.writeFileSync(path.join(workdir, "tsconfig.json"), JSON.stringify(tsconfig, null, 2));
  const tsc = path.join(NODE_MODULES, "typescript", "bin", "tsc");
  const r = run(process.execPath, [tsc, "-p", path.join(workdir, "tsconfig.json"), "--pretty", "false"], { cwd: workdir });
  if (r.status !== 0) {
    const lines = (r.stdout + r.stderr).split("\n").filter(Boolean);
    let parsed = 0;
    for (const line of lines) {
      const m = /^(?:.*[\\/])?([^\\/()]+\.ts)\((\d+),(\d+)\): error (TS\d+): (.*)$/.exec(line);
      if (!m) continue;
      parsed++;
      const info = byFile.get(m[1]);
      const src = info ? info.lines[Number(m[2]) - 1]?.trim() : "";
      const finding = `${info ? id(info.obj) : m[1]}: ${m[5]} (at: ${src})`;
      if (!findings.includes(finding)) findings.push(finding);
    }
    if (!parsed) findings.push(`tsc failed: ${lines.slice(0, 5).join(" | ")}`);
  }
  return { findings };
}

// ---------------------------------------------------------------------------
// wiring

// The cluster-scoped PriorityClasses of components/priority, created once
// outside any render (deploy/README.md, "Priority"); set by main().
let DEPLOY_DIR = path.dirname(HERE);
const PRIORITY_CLASS_FILE = "deploy/k8s/components/priority/priorityclass.yaml";
let sharedClasses = null;
function sharedPriorityClasses() {
  if (sharedClasses) return sharedClasses;
  const file = path.join(DEPLOY_DIR, "k8s", "components", "priority", "priorityclass.yaml");
  try {
    const names = [];
    for (const doc of YAML.parseAllDocuments(fs.readFileSync(file, "utf8"))) {
      if (doc.errors.length) throw new Error(doc.errors[0].message);
      const o = doc.toJSON();
      if (o?.kind === "PriorityClass" && o.metadata?.name) names.push(o.metadata.name);
    }
    sharedClasses = { names };
  } catch (e) {
    sharedClasses = { error: `cannot read ${PRIORITY_CLASS_FILE}: ${e.message}` };
  }
  return sharedClasses;
}

function checkWiring(objects) {
  const findings = [];
  const add = (msg) => findings.push(msg);
  const ws = workloads(objects);
  const services = objects.filter((o) => o.kind === "Service");
  const configMaps = objects.filter((o) => o.kind === "ConfigMap");
  const policies = objects.filter((o) => o.kind === "NetworkPolicy");
  const stripHash = (name) => name.replace(/-[a-z0-9]{10}$/, "");

  // 1. Controllers select their own pod template.
  for (const w of ws) {
    const sel = w.obj.spec?.selector;
    if (["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet"].includes(w.kind)) {
      if (!sel) add(`${w.id}: no spec.selector`);
      else if (!selects(sel, w.labels)) {
        add(`${w.id}: spec.selector ${JSON.stringify(sel.matchLabels ?? sel)} does not match its pod template labels`);
      }
    }
    if (w.kind === "Job" && sel) {
      if (!w.obj.spec.manualSelector) add(`${w.id}: spec.selector is set without manualSelector (the API generates it)`);
      else if (!selects(sel, w.labels)) add(`${w.id}: spec.selector does not match its pod template labels`);
    }
  }
  const selectedBy = (fn, ns) => ws.filter((w) => w.ns === ns && fn(w.labels));

  // 2. Services select pods, and their target ports exist on those pods.
  for (const s of services) {
    if (!s.spec?.selector) continue;
    const pods = selectedBy((l) => mapSelects(s.spec.selector, l), nsOf(s));
    if (!pods.length) {
      add(`${id(s)}: selector ${JSON.stringify(s.spec.selector)} selects no pod template`);
      continue;
    }
    for (const p of s.spec.ports ?? []) {
      const target = p.targetPort ?? p.port;
      for (const w of pods) {
        const ok = (w.spec.containers ?? []).some((c) => {
          const n = resolvePort(c, target);
          return n != null && declaredPorts(c).includes(n);
        });
        if (!ok) add(`${id(s)}: port ${p.name ?? p.port} targets ${target}, which ${w.id} does not declare`);
      }
    }
  }

  // 3. PodDisruptionBudgets and NetworkPolicies select pods.
  for (const pdb of objects.filter((o) => o.kind === "PodDisruptionBudget")) {
    if (!selectedBy((l) => selects(pdb.spec?.selector, l), nsOf(pdb)).length) {
      add(`${id(pdb)}: selector selects no pod template`);
    }
  }
  for (const np of policies) {
    if (!selectedBy((l) => selects(np.spec?.podSelector, l), nsOf(np)).length) {
      add(`${id(np)}: podSelector selects no pod template`);
    }
    for (const rule of np.spec?.ingress ?? []) {
      for (const peer of rule.from ?? []) {
        if (peer.podSelector && !peer.namespaceSelector && !selectedBy((l) => selects(peer.podSelector, l), nsOf(np)).length) {
          add(`${id(np)}: ingress peer podSelector ${JSON.stringify(peer.podSelector.matchLabels ?? {})} selects no pod template`);
        }
      }
    }
  }
  const ingressPolicies = (w) =>
    policies.filter(
      (np) =>
        nsOf(np) === w.ns &&
        selects(np.spec?.podSelector, w.labels) &&
        (np.spec?.policyTypes ?? ["Ingress"]).includes("Ingress"),
    );
  for (const w of ws) {
    if (!ingressPolicies(w).length) add(`${w.id}: no NetworkPolicy limits ingress to its pods`);
  }
  // Whether the NetworkPolicies let pods of `from` reach `to` on `port`.
  const allowed = (from, to, port, container) => {
    const nps = ingressPolicies(to);
    if (!nps.length) return true;
    return nps.some((np) =>
      (np.spec.ingress ?? []).some((rule) => {
        const peerOk =
          !rule.from?.length ||
          rule.from.some((peer) => peer.podSelector && !peer.namespaceSelector && selects(peer.podSelector, from.labels));
        const portOk = !rule.ports?.length || rule.ports.some((p) => p.port == null || resolvePort(container, p.port) === port);
        return peerOk && portOk;
      }),
    );
  };

  // 4. Per container: addresses, probes, mounts, flags that need a setting.
  const byBinary = (b) => ws.filter((w) => (w.spec.containers ?? []).some((c) => binaryOf(c) === b));
  const configMapsUsed = new Set();
  const tlsUse = [];
  let jobMode = null;
  for (const w of ws) {
    for (const c of w.spec.containers ?? []) {
      const where = `${w.id} container ${c.name}`;
      const env = new Map((c.env ?? []).map((e) => [e.name, e]));
      const mounts = c.volumeMounts ?? [];
      const volumes = new Map((w.spec.volumes ?? []).map((v) => [v.name, v]));
      const args = parseArgs(c.args);

      // $(VAR) in args is expanded only from the container's env.
      for (const a of args) {
        for (const m of String(a.raw).matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)) {
          const implicit = m[1] === "JOB_COMPLETION_INDEX" && isIndexed(w);
          if (!env.has(m[1]) && !implicit) add(`${where}: ${a.raw} uses $(${m[1]}), which its env does not define`);
          else if (env.has(m[1]) && envValue(w, c, m[1], 0) == null) {
            add(`${where}: ${a.raw} uses $(${m[1]}), whose value the pod does not define (a label or annotation it lacks?)`);
          }
        }
      }
      const grpcPort = flagValue(c, "port") !== undefined ? Number(flagValue(c, "port")) : null;
      const metricsPort = flagValue(c, "metrics_port") !== undefined ? Number(flagValue(c, "metrics_port")) : null;
      for (const [flag, n] of [["port", grpcPort], ["metrics_port", metricsPort]]) {
        if (n != null && !declaredPorts(c).includes(n)) add(`${where}: --${flag}=${n} is not a declared containerPort`);
      }
      for (const p of c.ports ?? []) {
        if (p.name === "grpc" && grpcPort != null && p.containerPort !== grpcPort) {
          add(`${where}: port "grpc" is ${p.containerPort} but --port=${grpcPort}`);
        }
        if (p.name === "metrics" && metricsPort != null && p.containerPort !== metricsPort) {
          add(`${where}: port "metrics" is ${p.containerPort} but --metrics_port=${metricsPort}`);
        }
      }

      // Probes hit the port the binary listens on.
      for (const kind of ["readinessProbe", "livenessProbe", "startupProbe"]) {
        const probe = c[kind];
        if (!probe) continue;
        let port = null;
        let type = null;
        if (probe.grpc) [type, port] = ["grpc", probe.grpc.port];
        else if (probe.tcpSocket) [type, port] = ["tcpSocket", resolvePort(c, probe.tcpSocket.port)];
        else if (probe.httpGet) [type, port] = ["httpGet", resolvePort(c, probe.httpGet.port)];
        else continue;
        const raw = probe.grpc?.port ?? probe.tcpSocket?.port ?? probe.httpGet?.port;
        if (port == null) {
          add(`${where}: ${kind} port ${raw} is not a declared port name`);
          continue;
        }
        if (!declaredPorts(c).includes(port)) add(`${where}: ${kind} port ${port} is not a declared containerPort`);
        if (type === "grpc") {
          if (grpcPort == null) add(`${where}: ${kind} is a gRPC probe but the container sets no --port`);
          else if (port !== grpcPort) add(`${where}: ${kind} gRPC probe on port ${port}, but --port=${grpcPort}`);
        } else if (type === "httpGet") {
          if (metricsPort == null) add(`${where}: ${kind} is an HTTP probe but the container sets no --metrics_port`);
          else if (port !== metricsPort) add(`${where}: ${kind} HTTP probe on port ${port}, but --metrics_port=${metricsPort}`);
        } else if (port !== grpcPort && port !== metricsPort) {
          add(`${where}: ${kind} TCP probe on port ${port}, which is neither --port nor --metrics_port`);
        }
      }

      // A path argument backed by a volume: the mount holding it and its key.
      const mountFor = (file) => {
        const exact = mounts.find((m) => m.mountPath === file && m.subPath);
        if (exact) return { mount: exact, key: exact.subPath };
        const dir = mounts.find((m) => !m.subPath && m.mountPath.replace(/\/$/, "") === path.posix.dirname(file));
        return dir ? { mount: dir, key: path.posix.basename(file) } : null;
      };
      const sourceKey = (source, key) => {
        const items = source.items;
        if (!items) return key;
        const hit = items.find((i) => i.path === key);
        return hit ? hit.key : null;
      };

      // --config: a ConfigMap holding the job file.
      const config = flagValue(c, "config");
      if (binaryOf(c) && config === undefined) add(`${where}: no --config`);
      if (config !== undefined) {
        const found = mountFor(config);
        const vol = found && volumes.get(found.mount.name);
        if (!found) add(`${where}: --config=${config}, but no volume is mounted at ${config} or ${path.posix.dirname(config)}`);
        else if (!vol?.configMap) add(`${where}: --config=${config} is mounted from volume ${found.mount.name}, not a ConfigMap`);
        else {
          const key = sourceKey(vol.configMap, found.key);
          const cm = configMaps.find((o) => o.metadata.name === vol.configMap.name && nsOf(o) === w.ns);
          if (!cm) add(`${where}: --config=${config}: ConfigMap ${stripHash(vol.configMap.name)} is not in the render`);
          else if (key == null || !Object.prototype.hasOwnProperty.call(cm.data ?? {}, key)) {
            add(`${where}: --config=${config}: ConfigMap ${stripHash(cm.metadata.name)} has no key ${key ?? found.key}`);
          } else {
            configMapsUsed.add(JSON.stringify([cm.metadata.name, key]));
          }
        }
      }

      // --coordinator=HOST:PORT: a Service in front of the coordinator.
      const coordRaw = flagValue(c, "coordinator");
      const coord = coordRaw === undefined ? undefined : expand(w, c, coordRaw).text;
      if (coord !== undefined) {
        const m = /^([^:]+):(\d+)$/.exec(coord);
        if (!m) add(`${where}: --coordinator=${coord} is not HOST:PORT`);
        else {
          const [host, port] = [m[1], Number(m[2])];
          const svcName = host.split(".")[0];
          const svc = services.find((s) => s.metadata.name === svcName && nsOf(s) === w.ns);
          if (!svc) {
            add(`${where}: --coordinator host ${host} is not a Service (Services: ${services.map((s) => s.metadata.name).join(", ")})`);
          } else {
            const sp = (svc.spec.ports ?? []).find((p) => p.port === port);
            const targets = ws.filter((t) => t.ns === w.ns && svc.spec.selector && mapSelects(svc.spec.selector, t.labels));
            if (!sp) add(`${where}: --coordinator port ${port} is not a port of Service ${svcName}`);
            const coordinators = targets.filter((t) => (t.spec.containers ?? []).some((x) => binaryOf(x) === "ps_coordinator"));
            if (!coordinators.length) add(`${where}: Service ${svcName} (--coordinator) does not select the coordinator's pods`);
            for (const t of coordinators) {
              const cc = t.spec.containers.find((x) => binaryOf(x) === "ps_coordinator");
              const target = sp ? resolvePort(cc, sp.targetPort ?? sp.port) : null;
              const listen = Number(flagValue(cc, "port"));
              if (sp && target !== listen) {
                add(`${where}: Service ${svcName} port ${port} reaches ${target ?? sp.targetPort}, but the coordinator listens on --port=${listen}`);
              }
              if (!allowed(w, t, listen, cc)) add(`${where}: NetworkPolicy blocks ${w.id} -> ${t.id} port ${listen}`);
            }
          }
        }
      }

      // --advertise_host: the pod's stable DNS name <hostname>.<subdomain>,
      // which an Indexed Job gives pod i as <job name>-i.<subdomain> when the
      // headless Service <subdomain> selects it.
      const adv = flagValue(c, "advertise_host");
      if (adv !== undefined) {
        const sub = w.spec.subdomain;
        if (!isIndexed(w)) add(`${where}: --advertise_host=${adv} needs per-pod DNS names, but ${w.id} is not an Indexed Job`);
        else if (!sub) add(`${where}: --advertise_host=${adv}, but the pod template sets no subdomain (no per-pod DNS names)`);
        else {
          const svc = services.find((x) => x.metadata.name === sub && nsOf(x) === w.ns);
          if (!svc) add(`${where}: subdomain ${sub} is not a Service (pods get DNS names only from a headless Service)`);
          else {
            if (svc.spec.clusterIP !== "None") add(`${id(svc)}: must be headless (clusterIP: None) for per-pod DNS names`);
            if (svc.spec.publishNotReadyAddresses !== true) {
              add(`${id(svc)}: publishNotReadyAddresses must be true (pods dial each other before any is ready)`);
            }
            if (!svc.spec.selector || !mapSelects(svc.spec.selector, w.labels)) add(`${id(svc)}: does not select the pods of ${w.id}`);
          }
          for (let i = 0; i < podCount(w); i++) {
            const want = `${w.name}-${i}.${sub}`;
            const got = expand(w, c, adv, i);
            if (got.unknown.length) break;  // reported above
            const host = got.text.replace(/\.svc(\.cluster\.local)?$/, "").replace(new RegExp(`\\.${w.ns}$`), "");
            if (host !== want) {
              add(`${where}: --advertise_host=${adv} is ${got.text} in pod ${i}, but that pod's DNS name is ${want}`);
              break;
            }
          }
        }
      }
      const shardArg = flagValue(c, "shard");
      if (shardArg !== undefined && isIndexed(w) && expand(w, c, shardArg, 1).text !== "1") {
        add(`${where}: --shard=${shardArg} is not the pod's completion index (two pods would claim one shard)`);
      }
      if (flagValue(c, "shard_from_hostname") !== undefined && !isIndexed(w)) {
        add(`${where}: --shard_from_hostname needs indexed host names, but ${w.id} is not an Indexed Job`);
      }
      const rankEnv = flagValue(c, "rank_from_env");
      if (rankEnv !== undefined) {
        if (!(env.has(rankEnv) || (isIndexed(w) && rankEnv === "JOB_COMPLETION_INDEX"))) {
          add(`${where}: --rank_from_env=${rankEnv} is neither in env nor the index of an Indexed Job`);
        }
      }

      // TLS files come from a Secret.
      const tls = ["tls_cert", "tls_key", "tls_ca"].map((f) => [f, flagValue(c, f)]);
      const given = tls.filter(([, v]) => v !== undefined);
      if (binaryOf(c)) tlsUse.push([where, given.length > 0]);
      if (given.length && given.length !== 3) add(`${where}: TLS needs --tls_cert, --tls_key and --tls_ca together`);
      for (const [f, v] of given) {
        const found = mountFor(v);
        const vol = found && volumes.get(found.mount.name);
        if (!vol?.secret) add(`${where}: --${f}=${v} is not in a mounted Secret`);
        else if (sourceKey(vol.secret, found.key) == null) add(`${where}: --${f}=${v}: Secret volume ${vol.name} does not project ${found.key}`);
      }

      // Outputs go to a writable volume.
      const out = flagValue(c, "out");
      if (out !== undefined) {
        const m = mounts.find((x) => out === x.mountPath || out.startsWith(x.mountPath.replace(/\/$/, "") + "/"));
        const vol = m && volumes.get(m.name);
        if (!m || m.readOnly || !(vol?.emptyDir || vol?.persistentVolumeClaim || vol?.ephemeral)) {
          add(`${where}: --out=${out} is not on a writable volume (emptyDir or PVC)`);
        }
      }
      if (c.securityContext?.readOnlyRootFilesystem && !mounts.some((m) => m.mountPath === "/tmp")) {
        add(`${where}: read-only root file system without a /tmp volume`);
      }

      // CUDA workers get a GPU and may run on GPU nodes.
      if (flagValue(c, "device") === "cuda") {
        const gpus = Number(c.resources?.limits?.["nvidia.com/gpu"] ?? 0);
        if (!(gpus >= 1)) add(`${where}: --device=cuda without a nvidia.com/gpu limit`);
        const tol = (w.spec.tolerations ?? []).some(
          (t) => t.key === "nvidia.com/gpu" && (!t.effect || t.effect === "NoSchedule") && (t.operator === "Exists" || t.operator === "Equal"),
        );
        if (!tol) add(`${where}: --device=cuda without a toleration for nvidia.com/gpu:NoSchedule`);
      }
    }
  }

  // 5. Workers reach every server.
  for (const wk of byBinary("ps_worker")) {
    for (const sv of byBinary("ps_server").filter((s) => s.ns === wk.ns)) {
      const c = sv.spec.containers.find((x) => binaryOf(x) === "ps_server");
      const port = Number(flagValue(c, "port"));
      if (!allowed(wk, sv, port, c)) add(`NetworkPolicy blocks ${wk.id} -> ${sv.id} port ${port}`);
    }
  }

  // 5b. A runtime class (components/gpu: the cluster's NVIDIA runtime) only
  // on pods that get a GPU: the NVIDIA runtime hands a container that asks
  // for no GPU every GPU of the node when its image says
  // NVIDIA_VISIBLE_DEVICES=all (CUDA base images do), beside the device
  // plugin's accounting, and a RuntimeClass's own scheduling may keep the
  // pod off CPU nodes.
  for (const w of ws) {
    if (!w.spec.runtimeClassName) continue;
    const gpus = containersOf(w).some((c) => Number(c.resources?.limits?.["nvidia.com/gpu"] ?? 0) >= 1);
    if (!gpus) {
      add(`${w.id}: runtimeClassName ${w.spec.runtimeClassName} on a pod without a nvidia.com/gpu limit: the GPU runtime belongs on GPU workers only (components/gpu)`);
    }
  }

  // 5c. priorityClassName names a PriorityClass that exists: admission
  // refuses a pod naming an unknown class. Offline, "exists" means defined
  // in the render or in components/priority/priorityclass.yaml (created
  // once per cluster, outside the render). The system classes are for
  // kube-system only: admission refuses them elsewhere.
  const known = new Map(objects.filter((o) => o.kind === "PriorityClass").map((o) => [o.metadata.name, "the render"]));
  const shared = sharedPriorityClasses();
  for (const w of ws) {
    const pc = w.spec.priorityClassName;
    if (pc === undefined) continue;
    if (/^system-(node|cluster)-critical$/.test(pc)) {
      if (w.ns !== "kube-system") add(`${w.id}: priorityClassName ${pc} is reserved for kube-system: admission refuses it in namespace ${w.ns || "(default)"}`);
      continue;
    }
    if (shared.error) add(`${w.id}: priorityClassName ${pc}: ${shared.error}`);
    else if (!known.has(pc) && !shared.names.includes(pc)) {
      const all = [...known.keys(), ...shared.names];
      add(`${w.id}: priorityClassName ${pc} is defined neither in the render nor in ${PRIORITY_CLASS_FILE} (classes: ${all.join(", ") || "none"}): admission refuses the pods`);
    }
  }

  // 6. One job file, and the replica counts it implies.
  if (configMapsUsed.size > 1) add(`the containers read different job files: ${[...configMapsUsed].map((s) => stripHash(JSON.parse(s)[0])).join(", ")}`);
  if (tlsUse.some(([, t]) => t) && tlsUse.some(([, t]) => !t)) {
    add(`TLS is configured on ${tlsUse.filter(([, t]) => t).map(([w]) => w).join(", ")} but not on ${tlsUse.filter(([, t]) => !t).map(([w]) => w).join(", ")}`);
  }
  for (const entry of configMapsUsed) {
    const [name, key] = JSON.parse(entry);
    const cm = configMaps.find((o) => o.metadata.name === name);
    let job;
    try {
      job = YAML.parse(cm.data[key]) ?? {};
    } catch (e) {
      add(`ConfigMap ${stripHash(name)} key ${key}: not YAML: ${e.message}`);
      continue;
    }
    // Defaults of common/job_config.h.
    const workers = job.job?.workers ?? 2;
    const servers = job.job?.servers ?? 2;
    const mode = job.training?.mode ?? "sync";
    jobMode = mode;
    for (const w of byBinary("ps_worker")) {
      if (w.kind !== "Job") continue;
      const { completions = 1, parallelism = 1 } = w.obj.spec;
      if (completions !== workers) add(`${w.id}: completions ${completions} != job.workers ${workers} in ${key}`);
      if (parallelism !== workers) add(`${w.id}: parallelism ${parallelism} != job.workers ${workers} in ${key} (every rank must run at once)`);
    }
    if (mode === "allreduce") {
      // No servers; the workers form a ring of stable per-pod names.
      for (const w of byBinary("ps_server")) {
        add(`${w.id}: runs ps_server, but training.mode is allreduce in ${key} (no servers: the coordinator refuses them)`);
      }
      for (const w of byBinary("ps_worker")) {
        const c = w.spec.containers.find((x) => binaryOf(x) === "ps_worker");
        const where = `${w.id} container ${c.name}`;
        const peerPort = Number(flagValue(c, "peer_port") ?? 0);
        const peerBind = flagValue(c, "peer_bind") ?? "127.0.0.1";
        if (!(peerPort > 0)) add(`${where}: mode allreduce needs a fixed --peer_port (the ring port other workers dial)`);
        else if (!declaredPorts(c).includes(peerPort)) add(`${where}: --peer_port=${peerPort} is not a declared containerPort`);
        if (/^(127\.|localhost$|::1$)/.test(peerBind)) add(`${where}: mode allreduce with --peer_bind=${peerBind}: other workers cannot reach the ring port`);
        if (flagValue(c, "advertise_host") === undefined) {
          add(`${where}: mode allreduce needs --advertise_host (the pod's DNS name; the default 127.0.0.1 is unreachable from other pods)`);
        }
        if (peerPort > 0 && !allowed(w, w, peerPort, c)) add(`NetworkPolicy blocks ${w.id} -> ${w.id} port ${peerPort} (the ring)`);
        // NCCL keeps buffers in /dev/shm, which the container runtime
        // makes 64 MiB unless a memory-backed volume replaces it.
        if (job.allreduce?.backend === "nccl") {
          const m = (c.volumeMounts ?? []).find((x) => x.mountPath.replace(/\/$/, "") === "/dev/shm");
          const vol = m && (w.spec.volumes ?? []).find((v) => v.name === m.name);
          if (vol?.emptyDir?.medium !== "Memory") {
            add(`${where}: allreduce.backend nccl in ${key}, but /dev/shm is ${m ? `volume ${m.name}, not a memory-backed emptyDir` : "not a volume"} (the runtime's 64 MiB default; NCCL fails when it fills): use components/gpu`);
          }
        }
      }
    } else {
      if (!byBinary("ps_server").length) add(`training.mode ${mode} in ${key} needs parameter servers, but no container runs ps_server`);
      if (!(servers >= 1)) add(`job.servers is ${servers} in ${key}, but mode ${mode} needs at least one`);
      for (const w of byBinary("ps_server")) {
        const count = podCount(w);
        if (count !== servers) add(`${w.id}: ${w.kind === "Job" ? "completions" : "replicas"} ${count} != job.servers ${servers} in ${key}`);
        if (w.kind === "Job" && (w.obj.spec.parallelism ?? 1) !== servers) {
          add(`${w.id}: parallelism ${w.obj.spec.parallelism ?? 1} != job.servers ${servers} in ${key} (every shard must run at once)`);
        }
      }
    }
    // Built-in data sets are read from data.dir: it must be on a volume, not
    // the image's read-only root (which holds none).
    const source = job.data?.source ?? "synthetic";
    const dataFile = ["digits", "breast_cancer"].includes(source)
      ? [job.data?.dir ?? ".cache/pstrain/datasets", "data.dir"]
      : ["csv", "libsvm", "criteo"].includes(source)
        ? [job.data?.path ?? "", "data.path"]
        : null;
    if (dataFile) {
      const [where, field] = dataFile;
      for (const w of byBinary("ps_worker")) {
        const c = w.spec.containers.find((x) => binaryOf(x) === "ps_worker");
        const abs = where.startsWith("/");
        const m = abs && (c.volumeMounts ?? []).find((x) => where === x.mountPath || where.startsWith(x.mountPath.replace(/\/$/, "") + "/"));
        if (!m) {
          add(`${w.id} container ${c.name}: data.source ${source} reads ${field} ${where || "(unset)"} in ${key}, which no volume of the pod holds (mount one: components/data)`);
        }
      }
    }
    // Every process refuses to start without the job token, unless the job
    // file opts out (docs/security.md).
    if (job.security?.insecure !== true) {
      for (const w of ws) {
        for (const c of w.spec.containers ?? []) {
          if (!binaryOf(c)) continue;
          const tf = flagValue(c, "token_file");
          if (tf === undefined) {
            add(`${w.id} container ${c.name}: no --token_file, and ${key} does not say security.insecure: true: ${binaryOf(c)} refuses to start (components/token)`);
            continue;
          }
          const m = (c.volumeMounts ?? []).find((x) => !x.subPath && x.mountPath.replace(/\/$/, "") === path.posix.dirname(tf));
          const vol = m && (w.spec.volumes ?? []).find((v) => v.name === m.name);
          if (!vol?.secret) add(`${w.id} container ${c.name}: --token_file=${tf} is not in a mounted Secret`);
        }
      }
    }
    // Checkpoints must outlive the pods that write them.
    const ckpt = job.checkpoint ?? {};
    const checkpointing = (ckpt.every_steps ?? 0) > 0 || (ckpt.every_s ?? 0) > 0 || job.training?.on_failure === "restart";
    if (checkpointing) {
      for (const w of byBinary("ps_coordinator")) {
        const c = w.spec.containers.find((x) => binaryOf(x) === "ps_coordinator");
        const root = ckpt.dir ?? `${flagValue(c, "out") ?? ""}/ckpt`;
        for (const t of [...byBinary("ps_coordinator"), ...byBinary(mode === "allreduce" ? "ps_worker" : "ps_server")]) {
          const tc = t.spec.containers.find((x) => binaryOf(x));
          const m = (tc.volumeMounts ?? []).find((x) => root === x.mountPath || root.startsWith(x.mountPath.replace(/\/$/, "") + "/"));
          const vol = m && (t.spec.volumes ?? []).find((v) => v.name === m.name);
          if (!vol?.persistentVolumeClaim) {
            add(`${t.id}: ${key} writes checkpoints to ${root}, which is not on a PersistentVolumeClaim in this pod (a lost pod loses them: components/results)`);
          }
        }
      }
    }
  }
  for (const b of Object.keys(BINARIES)) {
    if (b === "ps_server" && jobMode === "allreduce") continue;
    if (!byBinary(b).length) add(`no container runs ${b}`);
  }

  // 7. Many jobs per namespace: one instance label on every pod and in every
  // selector, and every name starting with it.
  const INSTANCE = "app.kubernetes.io/instance";
  const instances = new Set(ws.map((w) => w.labels[INSTANCE]));
  for (const w of ws) if (!w.labels[INSTANCE]) add(`${w.id}: pod template has no ${INSTANCE} label (two jobs in a namespace would mix)`);
  if (instances.size > 1) add(`the pods carry different ${INSTANCE} labels: ${[...instances].join(", ")}`);
  const instance = [...instances][0];
  const selectorHas = (sel) => (sel?.matchLabels ?? sel ?? {})[INSTANCE] !== undefined;
  for (const o of objects) {
    const sels = [];
    if (o.kind === "Service" && o.spec?.selector) sels.push(["spec.selector", o.spec.selector]);
    if (o.kind === "PodDisruptionBudget") sels.push(["spec.selector", o.spec?.selector]);
    if (o.kind === "NetworkPolicy") {
      sels.push(["spec.podSelector", o.spec?.podSelector]);
      for (const rule of o.spec?.ingress ?? []) {
        for (const peer of rule.from ?? []) if (peer.podSelector && !peer.namespaceSelector) sels.push(["an ingress podSelector", peer.podSelector]);
      }
    }
    if (["Deployment", "StatefulSet", "ReplicaSet"].includes(o.kind)) sels.push(["spec.selector", o.spec?.selector]);
    for (const [where, sel] of sels) {
      if (!selectorHas(sel)) add(`${id(o)}: ${where} has no ${INSTANCE}: it would select the pods of every job in the namespace`);
    }
    if (instance && o.kind !== "Namespace" && !o.metadata.name.startsWith(`${instance}-`)) {
      add(`${id(o)}: name does not start with the instance ${instance}- (namePrefix): a second job would replace it`);
    }
  }
  for (const w of ws) {
    for (const c of w.spec.containers ?? []) {
      for (const kind of ["readinessProbe", "livenessProbe", "startupProbe"]) {
        const port = c[kind]?.httpGet?.port ?? c[kind]?.tcpSocket?.port;
        if (typeof port === "string" && !/^\d+$/.test(port)) {
          add(`${w.id} container ${c.name}: ${kind} names port ${port}; use the number (podman kube play probes port 0 for a named one)`);
        }
      }
    }
  }
  return { findings };
}

// ---------------------------------------------------------------------------
// lifecycle: Jobs that finish (deploy/README.md, "What runs")

// Exit codes of the binaries that end a Job (common/process.h): 1 the job
// failed, 2 bad flags or config, 3 the job was already over.
const VERDICT_EXIT_CODES = [1, 2, 3];

function checkLifecycle(objects) {
  const findings = [];
  const add = (m) => findings.push(m);
  const ws = workloads(objects);
  for (const w of ws) {
    const c = (w.spec.containers ?? []).find((x) => binaryOf(x));
    if (!c) continue;
    const binary = binaryOf(c);
    if (w.kind !== "Job") {
      add(`${w.id}: runs ${binary} as a ${w.kind}, whose pods never finish (restarted after the job ends, holding their CPU and memory): make it a Job`);
      continue;
    }
    const spec = w.obj.spec;
    if (!(spec.activeDeadlineSeconds > 0)) add(`${w.id}: no activeDeadlineSeconds: a hung job runs (and holds its nodes) forever`);
    if (!(spec.ttlSecondsAfterFinished >= 0)) add(`${w.id}: no ttlSecondsAfterFinished: finished Jobs pile up until deleted by hand`);
    if (spec.backoffLimit === undefined) add(`${w.id}: no backoffLimit (the default 6 retries a failed pod six times)`);
    if (w.spec.restartPolicy !== "Never") add(`${w.id}: restartPolicy ${w.spec.restartPolicy ?? "unset"}: podFailurePolicy needs Never`);
    const rules = spec.podFailurePolicy?.rules ?? [];
    const failJob = new Set();
    for (const r of rules) {
      if (r.action !== "FailJob" || !r.onExitCodes || r.onExitCodes.operator !== "In") continue;
      if (r.onExitCodes.containerName && r.onExitCodes.containerName !== c.name) continue;
      for (const v of r.onExitCodes.values ?? []) failJob.add(v);
    }
    const missing = VERDICT_EXIT_CODES.filter((v) => !failJob.has(v));
    if (missing.length) {
      add(`${w.id}: podFailurePolicy does not fail the Job on exit ${missing.join(", ")} of container ${c.name} (1 job failed, 2 bad config, 3 job already over): a retried pod could end the Job Complete`);
    }
    if (isIndexed(w) || binary === "ps_coordinator") {
      const parallelism = spec.parallelism ?? 1;
      if (parallelism !== (spec.completions ?? 1)) add(`${w.id}: parallelism ${parallelism} != completions ${spec.completions ?? 1}: every pod must run at once`);
    }
    if (binary === "ps_coordinator") {
      if (flagValue(c, "keep_serving_after_job") !== undefined) add(`${w.id}: --keep_serving_after_job: the coordinator would never exit and the Job never finish`);
      const log = flagValue(c, "termination_log");
      const path = c.terminationMessagePath ?? "/dev/termination-log";
      if (log === undefined) add(`${w.id}: no --termination_log: the job's verdict is not in the pod's termination message`);
      else if (log !== path) add(`${w.id}: --termination_log=${log}, but terminationMessagePath is ${path}`);
      if ((spec.completions ?? 1) !== 1) add(`${w.id}: completions ${spec.completions}: one coordinator per job`);
    }
  }
  // Kueue (components/kueue): every Job of the job in one LocalQueue, each
  // created suspended. A Job left out of the queue runs outside the quota
  // while the others wait (and the coordinator's start-up timeout runs);
  // a labelled Job that is not suspended starts before Kueue admits it
  // wherever Kueue's webhook does not suspend it.
  const QUEUE = "kueue.x-k8s.io/queue-name";
  const jobs = ws.filter((w) => w.kind === "Job" && (w.spec.containers ?? []).some((x) => binaryOf(x)));
  const queued = jobs.filter((w) => w.obj.metadata?.labels?.[QUEUE] !== undefined);
  if (queued.length) {
    const queues = new Set(queued.map((w) => w.obj.metadata.labels[QUEUE]));
    if (queues.size > 1) add(`the Jobs name different Kueue queues (${QUEUE}: ${[...queues].join(", ")}): one job, one LocalQueue`);
    for (const w of jobs.filter((x) => !queued.includes(x))) {
      add(`${w.id}: no ${QUEUE} label while ${queued.map((x) => x.id).join(", ")} have one: it runs outside Kueue's quota while the others wait for admission`);
    }
    for (const w of queued) {
      if (w.obj.spec?.suspend !== true) add(`${w.id}: ${QUEUE} without suspend: true: the Job may start before Kueue admits it (components/kueue)`);
    }
  }
  // PDBs that refuse every eviction must cover only pods that finish.
  for (const pdb of objects.filter((o) => o.kind === "PodDisruptionBudget")) {
    const sel = ws.filter((w) => w.ns === nsOf(pdb) && selects(pdb.spec?.selector, w.labels));
    const blocks = pdb.spec?.maxUnavailable === 0 || pdb.spec?.maxUnavailable === "0%" || pdb.spec?.minAvailable === "100%";
    if (!blocks) continue;
    for (const w of sel) {
      if (w.kind !== "Job" || !(w.obj.spec?.activeDeadlineSeconds > 0)) {
        add(`${id(pdb)}: refuses every eviction of ${w.id}, whose pods need not ever finish: node drains would block forever`);
      }
    }
    if (pdb.spec?.unhealthyPodEvictionPolicy !== "AlwaysAllow") {
      add(`${id(pdb)}: refuses every eviction without unhealthyPodEvictionPolicy: AlwaysAllow: a hung pod blocks drains until the deadline`);
    }
  }
  return { findings };
}

// ---------------------------------------------------------------------------
// policy: the restricted pod security profile, resources and labels

function checkPolicy(objects) {
  const findings = [];
  const add = (m) => findings.push(m);
  for (const w of workloads(objects)) {
    const psc = w.spec.securityContext ?? {};
    for (const f of ["hostNetwork", "hostPID", "hostIPC"]) if (w.spec[f]) add(`${w.id}: ${f} is set`);
    for (const v of w.spec.volumes ?? []) if (v.hostPath) add(`${w.id}: hostPath volume ${v.name}`);
    if (!w.labels[PART_OF]) add(`${w.id}: pod template has no ${PART_OF} label`);
    if (!w.labels[COMPONENT]) add(`${w.id}: pod template has no ${COMPONENT} label`);
    if (w.obj.metadata?.labels?.[PART_OF] !== w.labels[PART_OF]) add(`${w.id}: ${PART_OF} differs between the object and its pods`);
    for (const c of containersOf(w)) {
      const where = `${w.id} container ${c.name}`;
      const sc = c.securityContext ?? {};
      const nonRoot = sc.runAsNonRoot ?? psc.runAsNonRoot;
      const uid = sc.runAsUser ?? psc.runAsUser;
      const seccomp = (sc.seccompProfile ?? psc.seccompProfile)?.type;
      if (nonRoot !== true) add(`${where}: runAsNonRoot is not true`);
      if (uid !== IMAGE_UID) add(`${where}: runAsUser is ${uid ?? "unset"}, not the image's user ${IMAGE_UID}`);
      if (!["RuntimeDefault", "Localhost"].includes(seccomp)) add(`${where}: seccompProfile is ${seccomp ?? "unset"}, not RuntimeDefault`);
      if (sc.allowPrivilegeEscalation !== false) add(`${where}: allowPrivilegeEscalation is not false`);
      if (sc.privileged) add(`${where}: privileged`);
      if (sc.readOnlyRootFilesystem !== true) add(`${where}: readOnlyRootFilesystem is not true`);
      if (!(sc.capabilities?.drop ?? []).includes("ALL")) add(`${where}: capabilities do not drop ALL`);
      for (const cap of sc.capabilities?.add ?? []) if (cap !== "NET_BIND_SERVICE") add(`${where}: adds capability ${cap}`);
      for (const kind of ["requests", "limits"]) {
        for (const r of ["cpu", "memory"]) {
          if (c.resources?.[kind]?.[r] == null) add(`${where}: no resources.${kind}.${r}`);
        }
      }
      // The coordinator and the shards hold state no pod can rebuild:
      // Guaranteed QoS (requests = limits) keeps them last in line when a
      // node runs short of memory.
      if (["ps_coordinator", "ps_server"].includes(binaryOf(c))) {
        for (const r of ["cpu", "memory"]) {
          const [req, lim] = [c.resources?.requests?.[r], c.resources?.limits?.[r]];
          if (req != null && lim != null && String(req) !== String(lim)) {
            add(`${where}: resources.requests.${r} ${req} != limits.${r} ${lim}: not Guaranteed QoS (evicted first under node pressure)`);
          }
        }
      }
    }
  }
  return { findings };
}

// ---------------------------------------------------------------------------
// flags and jobfile: ask the binaries

const helpCache = new Map();
function binaryFlags(binDir, binary) {
  const file = path.join(binDir, BINARIES[binary]);
  if (helpCache.has(file)) return helpCache.get(file);
  let result;
  if (!fs.existsSync(file)) {
    result = { error: `${file} does not exist (build the binaries and pass their BIN_DIR)` };
  } else {
    // Abseil's --helpfull exits 1; only the listing matters.
    const r = run(file, ["--helpfull"]);
    const flags = new Map();
    let current = null;
    for (const line of (r.stdout + r.stderr).split("\n")) {
      const m = /^\s+--([A-Za-z0-9_]+) \(/.exec(line);
      if (m) {
        current = m[1];
        flags.set(current, line);
      } else if (current && /^\s{6,}/.test(line)) {
        flags.set(current, flags.get(current) + line);
      } else {
        current = null;
      }
    }
    result = flags.size ? { flags } : { error: `${file} --helpfull lists no flags (${r.error?.message ?? `exit ${r.status}`})` };
  }
  helpCache.set(file, result);
  return result;
}

function checkFlags(objects, binDir) {
  if (!binDir) return { findings: ["no BIN_DIR given: cannot check container args against the binaries' --helpfull"] };
  const findings = [];
  for (const w of workloads(objects)) {
    for (const c of containersOf(w)) {
      const where = `${w.id} container ${c.name}`;
      const binary = binaryOf(c);
      if (!binary) {
        findings.push(`${where}: command ${JSON.stringify(c.command ?? [])} is none of ${Object.keys(BINARIES).join(", ")}`);
        continue;
      }
      const help = binaryFlags(binDir, binary);
      if (help.error) {
        findings.push(`${where}: ${help.error}`);
        continue;
      }
      for (const a of parseArgs([...(c.command ?? []).slice(1), ...(c.args ?? [])])) {
        if (a.positional) {
          findings.push(`${where}: positional argument ${JSON.stringify(a.raw)} (${binary} takes --flag=value)`);
          continue;
        }
        const negated = a.name.startsWith("no") && help.flags.get(a.name.slice(2));
        const isBool = negated && /default: (true|false);/.test(negated);
        if (!help.flags.has(a.name) && !isBool) findings.push(`${where}: ${binary} has no flag --${a.name}`);
      }
      // Ports other pods, the kubelet or Prometheus reach must not listen on
      // loopback: the address is the flag's value or the binary's default.
      const address = (flag) => {
        const v = flagValue(c, flag);
        if (v !== undefined) return [v, `--${flag}`];
        const m = /default: "([^"]*)";/.exec(help.flags.get(flag) ?? "");
        return [m ? m[1] : "", `the --${flag} default`];
      };
      const loopback = (a) => /^(127\.|localhost$|::1$|\[::1\]$)/.test(a);
      const listens = [];
      if (flagValue(c, "port") !== undefined) listens.push(["port", "bind"]);
      const metricsPort = flagValue(c, "metrics_port");
      if (metricsPort !== undefined && Number(metricsPort) > 0) {
        listens.push(["metrics_port", help.flags.has("metrics_bind") ? "metrics_bind" : "bind"]);
      }
      for (const [portFlag, bindFlag] of listens) {
        const [addr, from] = address(bindFlag);
        if (loopback(addr)) {
          findings.push(`${where}: --${portFlag} listens on ${addr} (${from}), unreachable from outside the pod; pass --${bindFlag}=0.0.0.0`);
        }
      }
    }
  }
  return { findings };
}

function checkJobFile(objects, binDir, workdir) {
  if (!binDir) return { findings: ["no BIN_DIR given: cannot run ps_coordinator --dry_run on the job file"] };
  const coordinator = path.join(binDir, BINARIES.ps_coordinator);
  if (!fs.existsSync(coordinator)) return { findings: [`${coordinator} does not exist`] };
  const findings = [];
  const seen = new Set();
  for (const w of workloads(objects)) {
    for (const c of w.spec.containers ?? []) {
      const config = flagValue(c, "config");
      if (config === undefined) continue;
      const mount = (c.volumeMounts ?? []).find(
        (m) => (m.mountPath === config && m.subPath) || (!m.subPath && m.mountPath === path.posix.dirname(config)),
      );
      const vol = mount && (w.spec.volumes ?? []).find((v) => v.name === mount.name);
      const cm = vol?.configMap && objects.find((o) => o.kind === "ConfigMap" && o.metadata.name === vol.configMap.name);
      const key = mount?.subPath ?? path.posix.basename(config);
      if (!cm || cm.data?.[key] == null || seen.has(cm.metadata.name)) continue;
      seen.add(cm.metadata.name);
      const file = path.join(workdir, key);
      fs.writeFileSync(file, cm.data[key]);
      const r = run(coordinator, [`--config=${file}`, "--dry_run"]);
      if (r.status !== 0) {
        findings.push(`job file ${key} of ConfigMap ${cm.metadata.name.replace(/-[a-z0-9]{10}$/, "")}: ${(r.stderr || r.stdout).trim().replace(new RegExp(workdir + "/", "g"), "")}`);
      }
    }
  }
  if (!seen.size) findings.push("no job file found to check (see the wiring check)");
  return { findings };
}

// ---------------------------------------------------------------------------
// lint

function lint(deployDir, paths) {
  const r = run("yamllint", ["--strict", "-f", "parsable", "-c", path.join(deployDir, ".yamllint"), ...paths]);
  if (r.error) return { findings: ["yamllint is not installed (apt-get install yamllint)"] };
  if (r.status === 0) return { findings: [] };
  const lines = (r.stdout + r.stderr).split("\n").filter(Boolean);
  return { findings: lines };
}

// ---------------------------------------------------------------------------
// Driver

async function validateDir(dir, binDir) {
  const workdir = fs.mkdtempSync(path.join(os.tmpdir(), "pstrain-validate-"));
  const results = new Map();
  try {
    const r = render(dir);
    results.set("render", r.findings);
    if (r.findings.length || !r.objects) {
      for (const c of CHECKS.slice(1)) results.set(c, null);
      return { results, count: 0 };
    }
    const objects = r.objects;
    results.set("schema", (await checkSchema(objects)).findings);
    results.set("typecheck", (await checkTypes(objects, workdir)).findings);
    results.set("wiring", checkWiring(objects).findings);
    results.set("lifecycle", checkLifecycle(objects).findings);
    results.set("policy", checkPolicy(objects).findings);
    results.set("flags", checkFlags(objects, binDir).findings);
    results.set("jobfile", checkJobFile(objects, binDir, workdir).findings);
    return { results, count: objects.length };
  } finally {
    fs.rmSync(workdir, { recursive: true, force: true });
  }
}

// Findings name files relative to the repository root.
let REPO_ROOT = "";
function tidy(text) {
  return REPO_ROOT ? text.split(REPO_ROOT + "/").join("") : text;
}

function printResults(results, indent = "  ") {
  for (const [name, findings] of results) {
    if (findings === null) {
      console.log(`${indent}-       ${name} (not run)`);
      continue;
    }
    console.log(`${indent}${findings.length ? "FAILED" : "ok    "}  ${name}`);
    for (const f of findings) console.log(`${indent}          ${tidy(f)}`);
  }
}

async function main() {
  const argv = process.argv.slice(2);
  let deployDir = path.dirname(HERE);
  let binDir = null;
  let fixtures = false;
  const dirs = []; // --dir: validate these kustomizations instead of the overlays
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === "--deploy") deployDir = path.resolve(argv[++i]);
    else if (argv[i] === "--bin") binDir = argv[++i] ? path.resolve(argv[i]) : null;
    else if (argv[i] === "--fixtures") fixtures = true;
    else if (argv[i] === "--dir") dirs.push(path.resolve(argv[++i]));
    else {
      console.error(`validate.mjs: unknown argument ${argv[i]}`);
      process.exit(2);
    }
  }
  if (binDir && !fs.existsSync(binDir)) {
    console.log(`note: BIN_DIR ${binDir} does not exist; the flags and jobfile checks will fail`);
  }
  REPO_ROOT = path.dirname(deployDir);
  DEPLOY_DIR = deployDir;
  let passed = 0;
  let failed = 0;
  const rel = (p) => path.relative(path.dirname(deployDir), p) || ".";

  if (!fixtures) {
    const targets = dirs.length ? dirs : ["dev", "prod", "allreduce"].map((o) => path.join(deployDir, "k8s", "overlays", o));
    for (const dir of targets) {
      const { results, count } = await validateDir(dir, binDir);
      console.log(`== ${rel(dir)}: ${count} objects`);
      printResults(results);
      for (const f of results.values()) {
        if (f === null) continue;
        if (f.length) failed++;
        else passed++;
      }
    }
    if (!dirs.length) {
      // The shared PriorityClass is applied on its own (kubectl apply -f),
      // so no overlay's render holds it: check its schema here.
      const file = path.join(deployDir, "k8s", "components", "priority", "priorityclass.yaml");
      const docs = YAML.parseAllDocuments(fs.readFileSync(file, "utf8"));
      const bad = docs.filter((d) => d.errors.length).map((d) => `does not parse: ${d.errors[0].message}`);
      const objs = docs.filter((d) => !d.errors.length).map((d) => d.toJSON()).filter(Boolean);
      const schema = bad.concat((await checkSchema(objs)).findings);
      if (!objs.some((o) => o.kind === "PriorityClass")) schema.push("holds no PriorityClass");
      console.log(`== ${rel(file)}: ${objs.length} objects`);
      printResults(new Map([["schema", schema]]));
      if (schema.length) failed++;
      else passed++;
    }
    const lintPaths = dirs.length ? dirs : [path.join(deployDir, "k8s"), path.join(deployDir, ".yamllint")];
    const lintFindings = lint(deployDir, lintPaths).findings;
    console.log(`== sources: ${lintPaths.map(rel).join(" ")}`);
    printResults(new Map([["lint", lintFindings]]));
    if (lintFindings.length) failed++;
    else passed++;
  } else {
    const baselineDir = path.join(deployDir, "k8s", "overlays", "dev");
    const baseline = (await validateDir(baselineDir, binDir)).results;
    const fixturesDir = path.join(HERE, "fixtures");
    const names = fs.readdirSync(fixturesDir).filter((n) => fs.statSync(path.join(fixturesDir, n)).isDirectory()).sort();
    const baselineFailing = [...baseline].filter(([, f]) => f?.length).map(([n]) => n);
    console.log(`== fixtures (${rel(fixturesDir)}), each a planted error on the dev overlay`);
    console.log(`   baseline dev overlay fails: ${baselineFailing.join(", ") || "nothing"}`);
    for (const name of names) {
      const dir = path.join(fixturesDir, name);
      const kfile = path.join(dir, "kustomization.yaml");
      const expect = fs.existsSync(kfile) ? /^# expect: *([a-z]+)/m.exec(fs.readFileSync(kfile, "utf8"))?.[1] : null;
      const { results } = await validateDir(dir, binDir);
      results.set("lint", lint(deployDir, [dir]).findings);
      // A finding is new when the baseline's same check did not report it.
      const fresh = new Map();
      for (const [check, findings] of results) {
        if (!findings) continue;
        const known = new Set(check === "lint" ? [] : (baseline.get(check) ?? []));
        const news = findings.filter((f) => !known.has(f));
        if (news.length) fresh.set(check, news);
      }
      const caughtBy = [...fresh.keys()];
      if (!expect || !CHECKS.concat("lint").includes(expect)) {
        console.log(`  FAILED  ${name}: kustomization.yaml has no valid "# expect: CHECK" line`);
        failed++;
      } else if (fresh.has(expect)) {
        const others = caughtBy.filter((c) => c !== expect);
        console.log(`  ok      ${name}: caught by ${expect}${others.length ? ` (also ${others.join(", ")})` : ""}`);
        console.log(`            ${tidy(fresh.get(expect)[0])}`);
        passed++;
      } else {
        console.log(`  FAILED  ${name}: not caught by ${expect}; new findings only in: ${caughtBy.join(", ") || "none"}`);
        for (const [check, news] of fresh) console.log(`            ${check}: ${tidy(news[0])}`);
        failed++;
      }
    }
  }
  console.log(`deploy validation: ${passed} passed, ${failed} failed`);
  process.exit(failed ? 1 : 0);
}

main().catch((e) => {
  console.error(`validate.mjs: ${e.stack ?? e}`);
  console.log("deploy validation: 0 passed, 1 failed");
  process.exit(1);
});
