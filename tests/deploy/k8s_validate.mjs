// Validates the objects of one rendered overlay (a JSON array, from `kubectl kustomize`):
//  1. schema: each object is built as its kubernetes-models class (or
//     @kubernetes-models/prometheus-operator for ServiceMonitor/PodMonitor), chosen by apiVersion
//     and kind, and .validate()d: types, required fields, enums, formats. A kind without a model is
//     an error.
//  2. unknown fields: the models' JSON schemas accept fields they do not know (a typo such as
//     `livenesProbe`, or a patch that adds a field at the wrong level), which the API server's
//     strict field validation refuses. So every field is also looked up in the models' type
//     declarations (the .d.ts files generated from the same OpenAPI schemas).
//  3. what no schema can say: Services, monitors, the PodDisruptionBudget and the StatefulSet's
//     serviceName point at something in the render; every ConfigMap, Secret (and key) and PVC a pod
//     uses exists in the render or is declared external with its keys; mounts name volumes; probe
//     and monitor ports name container/Service ports; $(VARS) in args are defined; priority classes
//     exist; images carry a pinned tag where asked; containers have memory limits and drop all
//     capabilities.
//
//   node k8s_validate.mjs NODE_MODULES OVERLAY RENDER.json [--pinned] [--external SECRET=KEY,KEY ...]
// Prints every error as `OVERLAY: Kind/name: what` on stderr and exits 1 if there is any.
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const argv = process.argv.slice(2);
const [modules, overlay, file] = argv;
let pinned = false;
const external = new Map(); // Secret name -> Set of keys it is documented to hold
for (let i = 3; i < argv.length; i++) {
  if (argv[i] === '--pinned') pinned = true;
  else if (argv[i] === '--external') {
    const [name, keys = ''] = argv[++i].split('=');
    external.set(name, new Set(keys.split(',').filter(Boolean)));
  } else throw new Error(`unknown argument ${argv[i]}`);
}
const objects = JSON.parse(fs.readFileSync(file, 'utf8'));
const errors = [];
const err = (obj, what) => errors.push(`${overlay}: ${obj.kind}/${obj.metadata?.name}: ${what}`);

// ---- 1. schema -------------------------------------------------------------------------------
function modelFile(apiVersion, kind) {
  const pkg = apiVersion.startsWith('monitoring.coreos.com/') ? '@kubernetes-models/prometheus-operator' : 'kubernetes-models';
  // Core objects (apiVersion v1) live in kubernetes-models/v1/, the others in GROUP/VERSION/.
  return path.join(modules, pkg, apiVersion, `${kind}.js`);
}

// ---- 2. unknown fields, from the models' TypeScript declarations ----------------------------
// A tiny reader for the generated declarations: `export interface IName [extends ...] { "field"?: TYPE; }`,
// `export type IName = TYPE;`, `export type { ILocal as IExported }` and `import { IName } from "..."`.
// TYPE is a named type, Array<TYPE>, `{ [key: string]: TYPE }`, an inline `{ "f"?: TYPE; ... }`, a
// union, a literal or a primitive. Anything else is treated as "any value".
const declCache = new Map();
function readDecl(dts) {
  if (declCache.has(dts)) return declCache.get(dts);
  let src = fs.readFileSync(dts, 'utf8').replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');
  const decl = { file: dts, imports: new Map(), interfaces: new Map(), aliases: new Map(), reexports: new Map() };
  for (const m of src.matchAll(/import\s*(?:type\s*)?{([^}]*)}\s*from\s*"([^"]+)"/g)) {
    for (const part of m[1].split(',').map((s) => s.trim()).filter(Boolean)) {
      const [orig, local = orig] = part.split(/\s+as\s+/);
      decl.imports.set(local.trim(), { name: orig.trim(), from: m[2] });
    }
  }
  for (const m of src.matchAll(/export\s+type\s*{([^}]*)}/g)) {
    for (const part of m[1].split(',').map((s) => s.trim()).filter(Boolean)) {
      const [local, exported = local] = part.split(/\s+as\s+/);
      decl.reexports.set(exported.trim(), local.trim());
    }
  }
  for (const m of src.matchAll(/export\s+interface\s+(\w+)(?:<[^>]*>)?(\s+extends\s+[^{]+)?\s*{/g)) {
    const body = balanced(src, m.index + m[0].length - 1);
    const ext = (m[2] ?? '').replace(/^\s*extends\s+/, '').split(',').map((s) => s.trim().replace(/<.*$/, '')).filter(Boolean);
    decl.interfaces.set(m[1], { body, ext });
  }
  for (const m of src.matchAll(/export\s+type\s+(\w+)\s*=/g)) {
    let end = m.index + m[0].length, depth = 0;
    for (; end < src.length; end++) {
      const c = src[end];
      if ('{<(['.includes(c)) depth++;
      else if ('}>)]'.includes(c)) depth--;
      else if (c === ';' && depth === 0) break;
    }
    decl.aliases.set(m[1], src.slice(m.index + m[0].length, end));
  }
  declCache.set(dts, decl);
  return decl;
}
function balanced(src, open) { // text between the brace at `open` and its match
  let depth = 0;
  for (let i = open; i < src.length; i++) {
    if (src[i] === '{') depth++;
    else if (src[i] === '}' && --depth === 0) return src.slice(open + 1, i);
  }
  throw new Error('unbalanced braces');
}
function resolveModule(spec, fromFile) {
  let base;
  if (spec.startsWith('.')) base = path.resolve(path.dirname(fromFile), spec);
  else {
    // Bare specifier: node_modules of fromFile's ancestors, as Node looks it up.
    for (let dir = path.dirname(fromFile); ; dir = path.dirname(dir)) {
      const cand = path.join(dir, 'node_modules', spec);
      if (fs.existsSync(cand) || fs.existsSync(cand.replace(/\.js$/, '') + '.d.ts')) { base = cand; break; }
      if (dir === path.dirname(dir)) return null;
    }
  }
  const candidates = [base.replace(/\.js$/, '.d.ts'), base + '.d.ts', path.join(base, 'index.d.ts')];
  if (fs.existsSync(path.join(base, 'package.json'))) {
    const pj = JSON.parse(fs.readFileSync(path.join(base, 'package.json'), 'utf8'));
    const types = pj.types ?? pj.typings ?? pj.exports?.types ?? pj.exports?.['.']?.types;
    if (types) candidates.unshift(path.join(base, types));
  }
  return candidates.find((c) => fs.existsSync(c) && fs.statSync(c).isFile()) ?? null;
}
// A named type in a declaration file -> a type node ({any}, {obj, props, index, open}, {arr}, {union}).
const typeCache = new Map();
function named(name, dts, seen = 0) {
  const key = `${dts}#${name}`;
  if (typeCache.has(key)) return typeCache.get(key);
  const node = { k: 'any' }; // placeholder for recursive types (JSONSchemaProps etc.)
  typeCache.set(key, node);
  Object.assign(node, namedUncached(name, dts, seen));
  return node;
}
function namedUncached(name, dts, seen) {
  if (seen > 20) return { k: 'any' };
  const decl = readDecl(dts);
  const local = decl.reexports.get(name) ?? name;
  if (decl.interfaces.has(local)) {
    const { body, ext } = decl.interfaces.get(local);
    const node = parseType(`{${body}}`, dts);
    for (const e of ext) {
      const base = lookup(e, dts, seen + 1);
      if (base.k === 'obj') {
        for (const [p, t] of base.props) if (!node.props.has(p)) node.props.set(p, t);
      } else {
        node.open = true; // an unknown base type may add fields: do not judge extras
      }
    }
    return node;
  }
  if (decl.aliases.has(local)) return parseType(decl.aliases.get(local), dts, seen);
  return lookup(local, dts, seen + 1);
}
function lookup(name, dts, seen) {
  const decl = readDecl(dts);
  if (decl.interfaces.has(name) || decl.aliases.has(name) || decl.reexports.has(name)) return named(name, dts, seen);
  const imp = decl.imports.get(name);
  if (!imp) return { k: 'any' };
  const target = resolveModule(imp.from, dts);
  return target ? named(imp.name, target, seen) : { k: 'any' };
}
function parseType(text, dts, seen = 0) {
  const toks = text.match(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[A-Za-z_$][\w$.]*|-?\d+(?:\.\d+)?|\S/g) ?? [];
  let i = 0;
  const peek = () => toks[i];
  const next = () => toks[i++];
  function union() {
    if (peek() === '|') next();
    const alts = [postfix()];
    while (peek() === '|') { next(); alts.push(postfix()); }
    return alts.length === 1 ? alts[0] : { k: 'union', of: alts };
  }
  function postfix() {
    let t = primary();
    for (;;) {
      if (peek() === '[' && toks[i + 1] === ']') { i += 2; t = { k: 'arr', of: t }; }
      else if (peek() === '[') { while (next() !== ']'); t = { k: 'any' }; }
      else return t;
    }
  }
  function primary() {
    const t = next();
    if (t === '(') { const u = union(); next(); return u; }
    if (t === '{') return members();
    if (t === 'Array' && peek() === '<') { next(); const of = union(); next(); return { k: 'arr', of }; }
    if (/^[A-Za-z_$]/.test(t) && !['string', 'number', 'boolean', 'any', 'unknown', 'null', 'undefined', 'object', 'true', 'false', 'never'].includes(t)) {
      if (peek() === '<') { let d = 0; do { const x = next(); if (x === '<') d++; if (x === '>') d--; } while (d > 0); }
      return lookup(t, dts, seen + 1);
    }
    return { k: 'any' };
  }
  function members() {
    const node = { k: 'obj', props: new Map(), index: null, open: false };
    while (peek() !== '}' && i < toks.length) {
      if (peek() === '[') { // [key: string]: T
        while (next() !== ']');
        next(); // ':'
        node.index = union();
      } else {
        let name = next();
        if (/^["']/.test(name)) name = JSON.parse(name.replace(/^'|'$/g, '"'));
        if (peek() === '?') next();
        if (peek() === '(') { node.open = true; } // a method: not a data type
        next(); // ':'
        node.props.set(name, union());
      }
      while (peek() === ';' || peek() === ',') next();
    }
    next(); // '}'
    return node;
  }
  return union();
}
// Unknown field paths of `value` against `type`, or [] when it fits.
function unknownFields(value, type, where) {
  if (value === null || value === undefined || type.k === 'any') return [];
  if (type.k === 'union') {
    const tries = type.of.map((t) => unknownFields(value, t, where));
    return tries.find((r) => r.length === 0) ?? tries.reduce((a, b) => (a.length <= b.length ? a : b));
  }
  if (type.k === 'arr') return Array.isArray(value) ? value.flatMap((v, n) => unknownFields(v, type.of, `${where}[${n}]`)) : [];
  if (type.k === 'obj' && typeof value === 'object' && !Array.isArray(value)) {
    const out = [];
    for (const [key, v] of Object.entries(value)) {
      const child = `${where}${where ? '.' : ''}${key}`;
      if (type.props.has(key)) out.push(...unknownFields(v, type.props.get(key), child));
      else if (type.index) out.push(...unknownFields(v, type.index, child));
      else if (!type.open) out.push(child);
    }
    return out;
  }
  return [];
}
function checkFields(obj, dts, iface) {
  if (!fs.existsSync(dts)) return err(obj, `no type declarations for ${obj.kind}`);
  const type = named(iface, dts);
  if (type.k !== 'obj') return err(obj, `no interface ${iface} in ${dts}`);
  for (const f of unknownFields(obj, type, '')) err(obj, `unknown field ${f}`);
}

// ---- 1 and 2 for every object --------------------------------------------------------------
for (const obj of objects) {
  if (!obj || typeof obj !== 'object' || !obj.apiVersion || !obj.kind) {
    errors.push(`${overlay}: an object without apiVersion/kind: ${JSON.stringify(obj).slice(0, 80)}`);
    continue;
  }
  const js = modelFile(obj.apiVersion, obj.kind);
  if (!fs.existsSync(js)) {
    err(obj, `unknown kind: no schema for ${obj.apiVersion} ${obj.kind}`);
    continue;
  }
  const Model = (await import(pathToFileURL(js).href))[obj.kind];
  const copy = structuredClone(obj);
  // kustomize wraps long base64 values over lines; the API server's decoder skips the newlines.
  if (copy.kind === 'Secret') for (const k of Object.keys(copy.data ?? {})) copy.data[k] = copy.data[k].replace(/\s+/g, '');
  try {
    new Model(copy).validate();
  } catch (e) {
    err(obj, `schema: ${e.message}`);
  }
  checkFields(obj, js.replace(/\.js$/, '.d.ts'), `I${obj.kind}`);
}

// ---- 3. cross-object checks ------------------------------------------------------------------
const byKind = (kind) => objects.filter((o) => o?.kind === kind);
const find = (kind, name) => byKind(kind).find((o) => o.metadata?.name === name);
const workloads = objects.filter((o) => ['StatefulSet', 'DaemonSet', 'Deployment', 'Job'].includes(o?.kind));
const podSpec = (w) => w.spec?.template?.spec ?? {};
const podLabels = (w) => w.spec?.template?.metadata?.labels ?? {};
const matches = (selector, labels) => Object.entries(selector ?? {}).every(([k, v]) => labels?.[k] === v);
const containersOf = (w) => [...(podSpec(w).initContainers ?? []), ...(podSpec(w).containers ?? [])];
const clusterScoped = new Set(['Namespace', 'PriorityClass', 'StorageClass', 'PersistentVolume', 'ClusterRole', 'ClusterRoleBinding', 'CustomResourceDefinition']);
const namespaces = new Set(objects.filter((o) => o && !clusterScoped.has(o.kind)).map((o) => o.metadata?.namespace ?? '(none)'));
if (namespaces.size > 1) errors.push(`${overlay}: objects in several namespaces: ${[...namespaces].join(', ')}`);

// A Secret's or ConfigMap's keys, when the render has it (or the Secret is declared external).
function keysOf(kind, name) {
  const o = find(kind, name);
  if (o) return new Set([...Object.keys(o.data ?? {}), ...Object.keys(o.stringData ?? {}), ...Object.keys(o.binaryData ?? {})]);
  if (kind === 'Secret' && external.has(name)) return external.get(name);
  return null;
}
function checkRef(owner, kind, name, keys, what) {
  const have = keysOf(kind, name);
  if (!have) return err(owner, `${what}: ${kind} ${name} is not in the render${kind === 'Secret' ? ' nor declared external' : ''}`);
  for (const k of keys) if (!have.has(k)) err(owner, `${what}: ${kind} ${name} has no key ${k}`);
}

for (const svc of byKind('Service')) {
  const pods = workloads.filter((w) => matches(svc.spec.selector, podLabels(w)));
  if (!svc.spec.selector || pods.length === 0) err(svc, "selects no workload's pods");
  for (const port of svc.spec.ports ?? []) {
    if (typeof port.targetPort !== 'string') continue;
    const named = pods.some((w) => containersOf(w).some((c) => (c.ports ?? []).some((p) => p.name === port.targetPort)));
    if (!named) err(svc, `targetPort ${port.targetPort} is no container port of the selected pods`);
  }
}
for (const sm of byKind('ServiceMonitor')) {
  const svcs = byKind('Service').filter((s) => matches(sm.spec.selector?.matchLabels, s.metadata.labels));
  if (svcs.length === 0) err(sm, 'selects no Service');
  for (const ep of sm.spec.endpoints ?? []) {
    if (ep.port && !svcs.some((s) => s.spec.ports.some((p) => p.name === ep.port))) err(sm, `port ${ep.port} is no port of the selected Services`);
    const cred = ep.authorization?.credentials;
    if (cred) checkRef(sm, 'Secret', cred.name, [cred.key], 'authorization');
    const ca = ep.tlsConfig?.ca?.secret;
    if (ca) checkRef(sm, 'Secret', ca.name, [ca.key], 'tlsConfig.ca');
  }
}
for (const pm of byKind('PodMonitor')) {
  const ws = workloads.filter((w) => matches(pm.spec.selector?.matchLabels, podLabels(w)));
  if (ws.length === 0) err(pm, "selects no workload's pods");
  for (const ep of pm.spec.podMetricsEndpoints ?? []) {
    if (ep.port && !ws.some((w) => containersOf(w).some((c) => (c.ports ?? []).some((p) => p.name === ep.port)))) err(pm, `port ${ep.port} is no container port of the selected pods`);
  }
}
for (const pdb of byKind('PodDisruptionBudget')) {
  if (!workloads.some((w) => matches(pdb.spec.selector?.matchLabels, podLabels(w)))) err(pdb, "selects no workload's pods");
}
for (const w of workloads) {
  const spec = podSpec(w);
  if (!matches(w.spec.selector?.matchLabels, podLabels(w))) err(w, 'selector does not match its own pod labels');
  if (w.kind === 'StatefulSet' && w.spec.serviceName && !find('Service', w.spec.serviceName)) err(w, `serviceName ${w.spec.serviceName} is not a Service in the render`);
  if (spec.serviceAccountName && !find('ServiceAccount', spec.serviceAccountName)) err(w, `ServiceAccount ${spec.serviceAccountName} is not in the render`);
  const pc = spec.priorityClassName;
  if (pc && !pc.startsWith('system-') && !find('PriorityClass', pc)) err(w, `PriorityClass ${pc} is not in the render`);
  for (const v of spec.volumes ?? []) {
    const items = (src) => (src.items ?? []).map((it) => it.key);
    if (v.configMap && !v.configMap.optional) checkRef(w, 'ConfigMap', v.configMap.name, items(v.configMap), `volume ${v.name}`);
    if (v.secret && !v.secret.optional) checkRef(w, 'Secret', v.secret.secretName, items(v.secret), `volume ${v.name}`);
    if (v.persistentVolumeClaim && !find('PersistentVolumeClaim', v.persistentVolumeClaim.claimName)) err(w, `volume ${v.name}: PVC ${v.persistentVolumeClaim.claimName} is not in the render`);
  }
  const volumes = new Map((spec.volumes ?? []).map((v) => [v.name, v]));
  const claimTemplates = new Set((w.spec.volumeClaimTemplates ?? []).map((t) => t.metadata.name));
  for (const c of containersOf(w)) {
    const where = `container ${c.name}`;
    for (const m of c.volumeMounts ?? []) {
      if (!volumes.has(m.name) && !claimTemplates.has(m.name)) err(w, `${where} mounts unknown volume ${m.name}`);
      const v = volumes.get(m.name);
      // subPath into a ConfigMap/Secret volume names one of its keys (or items' paths).
      const src = v?.configMap ?? v?.secret;
      if (m.subPath && src) {
        const paths = src.items ? src.items.map((it) => it.path) : [...(keysOf(v.configMap ? 'ConfigMap' : 'Secret', src.name ?? src.secretName) ?? [m.subPath])];
        if (!paths.includes(m.subPath)) err(w, `${where}: subPath ${m.subPath} is not in volume ${m.name}`);
      }
    }
    const ports = new Set((c.ports ?? []).map((p) => p.name));
    for (const [kind, probe] of [['liveness', c.livenessProbe], ['readiness', c.readinessProbe], ['startup', c.startupProbe]]) {
      const port = probe?.httpGet?.port ?? probe?.tcpSocket?.port ?? probe?.grpc?.port;
      if (typeof port === 'string' && !ports.has(port)) err(w, `${where}: ${kind} probe port ${port} is not a container port`);
      if (typeof port === 'number' && !(c.ports ?? []).some((p) => p.containerPort === port)) err(w, `${where}: ${kind} probe port ${port} is not a container port`);
    }
    const env = new Set((c.env ?? []).map((e) => e.name));
    for (const a of [...(c.command ?? []), ...(c.args ?? [])]) {
      for (const m of a.matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)) if (!env.has(m[1])) err(w, `${where}: $(${m[1]}) in its arguments is not one of its env variables`);
    }
    for (const e of c.env ?? []) {
      const sk = e.valueFrom?.secretKeyRef, ck = e.valueFrom?.configMapKeyRef;
      if (sk && !sk.optional) checkRef(w, 'Secret', sk.name, [sk.key], `${where} env ${e.name}`);
      if (ck && !ck.optional) checkRef(w, 'ConfigMap', ck.name, [ck.key], `${where} env ${e.name}`);
    }
    if (!c.resources?.limits?.memory) err(w, `${where}: no memory limit`);
    if (!c.securityContext?.capabilities?.drop?.includes('ALL')) err(w, `${where}: capabilities are not dropped (drop: [ALL])`);
    if (c.securityContext?.allowPrivilegeEscalation !== false) err(w, `${where}: allowPrivilegeEscalation is not false`);
    const [, tag] = /^[^@]*?(?::([\w][\w.-]*))?(@sha256:[0-9a-f]+)?$/.exec(c.image ?? '') ?? [];
    if (!c.image || !c.image.includes('/')) err(w, `${where}: image ${c.image} is not a registry image (the images: transformer did not apply?)`);
    else if (pinned && !c.image.includes('@sha256:') && (!tag || tag === 'latest')) err(w, `${where}: image ${c.image} is not pinned to a tag`);
  }
}

if (errors.length) {
  for (const e of errors) console.error(e);
  console.error(`${overlay}: ${errors.length} error(s)`);
  process.exit(1);
}
console.log(`${overlay}: ${objects.length} objects valid (schema, fields, references)`);
