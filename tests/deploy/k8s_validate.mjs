// Validates rendered Kubernetes objects against the API schemas (kubernetes-models, and
// @kubernetes-models/prometheus-operator for ServiceMonitor/PodMonitor), then checks what schemas
// cannot: Services select some workload's pods, every ConfigMap/Secret/PVC a pod uses exists in the
// render (or is declared external), and probe ports name container ports.
//   node k8s_validate.mjs NODE_MODULES OVERLAY_NAME RENDERED.json [EXTERNAL_SECRET...]
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const [modules, overlay, file, ...externalSecrets] = process.argv.slice(2);
const objects = JSON.parse(fs.readFileSync(file, 'utf8'));
const errors = [];
const err = (obj, what) => errors.push(`${overlay}: ${obj.kind}/${obj.metadata?.name}: ${what}`);

async function modelFor(apiVersion, kind) {
  let pkg = 'kubernetes-models';
  let group = apiVersion;
  if (apiVersion.startsWith('monitoring.coreos.com/')) pkg = '@kubernetes-models/prometheus-operator';
  const candidate = path.join(modules, pkg, group, `${kind}.js`);
  if (!fs.existsSync(candidate)) return null;
  const mod = await import(pathToFileURL(candidate).href);
  return mod[kind] ?? null;
}

for (const obj of objects) {
  // kustomize wraps long base64 values over lines; the API server's decoder skips the newlines.
  if (obj.kind === 'Secret') for (const k of Object.keys(obj.data ?? {})) obj.data[k] = obj.data[k].replace(/\s+/g, '');
  const Model = await modelFor(obj.apiVersion, obj.kind);
  if (!Model) {
    err(obj, `no schema for ${obj.apiVersion} ${obj.kind}`);
    continue;
  }
  try {
    new Model(obj).validate();
  } catch (e) {
    err(obj, `schema: ${e.message}`);
  }
}

const byKind = (kind) => objects.filter((o) => o.kind === kind);
const names = (kind) => new Set(byKind(kind).map((o) => o.metadata.name));
const workloads = objects.filter((o) => ['StatefulSet', 'DaemonSet', 'Deployment'].includes(o.kind));
const matches = (selector, labels) => Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);

for (const svc of byKind('Service')) {
  const pods = workloads.filter((w) => matches(svc.spec.selector, w.spec.template.metadata.labels));
  if (pods.length === 0) err(svc, 'selects no workload\'s pods');
  for (const port of svc.spec.ports ?? []) {
    if (typeof port.targetPort !== 'string') continue;
    const named = pods.some((w) => w.spec.template.spec.containers.some((c) => (c.ports ?? []).some((p) => p.name === port.targetPort)));
    if (!named) err(svc, `targetPort ${port.targetPort} is no container port of the selected pods`);
  }
}
for (const m of [...byKind('ServiceMonitor'), ...byKind('PodMonitor')]) {
  const sel = m.spec.selector.matchLabels;
  const targets = m.kind === 'ServiceMonitor' ? byKind('Service').filter((s) => matches(sel, s.metadata.labels))
                                               : workloads.filter((w) => matches(sel, w.spec.template.metadata.labels));
  if (targets.length === 0) err(m, 'selects nothing');
}
const configMaps = names('ConfigMap'), secrets = new Set([...names('Secret'), ...externalSecrets]), pvcs = names('PersistentVolumeClaim');
for (const w of workloads) {
  const spec = w.spec.template.spec;
  for (const v of spec.volumes ?? []) {
    if (v.configMap && !configMaps.has(v.configMap.name)) err(w, `volume ${v.name}: ConfigMap ${v.configMap.name} is not in the render`);
    if (v.secret && !secrets.has(v.secret.secretName)) err(w, `volume ${v.name}: Secret ${v.secret.secretName} is not in the render nor declared external`);
    if (v.persistentVolumeClaim && !pvcs.has(v.persistentVolumeClaim.claimName)) err(w, `volume ${v.name}: PVC ${v.persistentVolumeClaim.claimName} is not in the render`);
  }
  const claimTemplates = new Set((w.spec.volumeClaimTemplates ?? []).map((t) => t.metadata.name));
  const volumes = new Set([...(spec.volumes ?? []).map((v) => v.name), ...claimTemplates]);
  for (const c of spec.containers) {
    for (const m of c.volumeMounts ?? []) if (!volumes.has(m.name)) err(w, `container ${c.name} mounts unknown volume ${m.name}`);
    const ports = new Set((c.ports ?? []).map((p) => p.name));
    for (const probe of [c.livenessProbe, c.readinessProbe, c.startupProbe]) {
      const port = probe?.httpGet?.port;
      if (typeof port === 'string' && !ports.has(port)) err(w, `container ${c.name}: probe port ${port} is not a container port`);
    }
  }
  if (spec.serviceAccountName && !names('ServiceAccount').has(spec.serviceAccountName)) err(w, `ServiceAccount ${spec.serviceAccountName} is not in the render`);
}

if (errors.length) {
  for (const e of errors) console.error(e);
  process.exit(1);
}
console.log(`${overlay}: ${objects.length} objects valid`);
