//! Every example NodePool and EC2NodeClass of the repository and its docs, on the real
//! apiserver with Karpenter's own CRDs (`infra/crds/`, the pinned release's files): each is
//! created under a name of this run's, read back, and deleted. The test then asks:
//!
//! - **Accepted?** The apiserver refuses what Karpenter's schema and CEL rules refuse.
//! - **Read the same?** The object as written and the object as stored (with the CRD's
//!   defaults filled in) must be equal once read by Carpool's model
//!   (`carpool::model::manifest::from_value`), so Carpool's defaults are Karpenter's.
//! - **Nothing pruned?** A field the CRD does not know is dropped by the apiserver, so an
//!   example using it says something Karpenter never sees.
//!
//! The examples are found, not listed: `infra/crds/examples/*.yaml`, the Karpenter
//! manifests of `shared/tests/fixtures/manifests/`, the items of the `List`s in
//! `examples/*.json`, the `nodepools` and `ec2nodeclasses` of `examples/scenarios/*.yaml`,
//! and the `yaml` code blocks of `README.md` and `docs/src/**/*.md`. A failure names the
//! file, and the document, item or line of each example that failed.

use std::fmt::Display;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail, ensure};
use carpool::model::manifest::{Validate, from_value};
use carpool::model::nodepool::{BALANCED_K, CONSOLIDATION_THRESHOLD_ANNOTATION};
use carpool::model::{ConsolidationPolicy, EC2NodeClass, NodePool};
use carpool_tests::scene::{nodeclasses, nodepools};
use carpool_tests::{Stack, unique};
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Fields an example carries on purpose although Karpenter's CRD does not know them.
const PRUNED_ON_PURPOSE: &[(&str, &str)] = &[(
    // The parser's own fixture: unknown fields are ignored, never an error.
    "shared/tests/fixtures/manifests/nodepool-full.yaml",
    "spec.someFutureField",
)];

/// Where Carpool's model is known to read an object otherwise than the CRD's defaults
/// make it: (kind, path of the model's field, why). A difference under such a path is
/// printed, not failed; any other fails. Remove an entry once the model is fixed.
const KNOWN_DEFAULT_GAPS: &[(&str, &str, &str)] = &[];

/// One example object and where it was found.
struct Example {
    /// `path (document n)`, `path items[i]`, `path:line` ...
    source: String,
    /// The repository path alone.
    file: String,
    object: Value,
}

impl Example {
    fn kind(&self) -> &str {
        self.object["kind"].as_str().unwrap_or_default()
    }
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ is in the repository")
        .to_path_buf()
}

fn relative(path: &Path) -> String {
    path.strip_prefix(repo_root()).unwrap_or(path).display().to_string()
}

fn is_example(v: &Value) -> bool {
    matches!(v["kind"].as_str(), Some("NodePool" | "EC2NodeClass"))
}

/// The files in `dir` whose names end with `suffix`, sorted.
fn files(dir: &Path, suffix: &str) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_file() && path.to_string_lossy().ends_with(suffix) {
            out.push(path);
        }
    }
    out.sort();
    Ok(out)
}

/// The Markdown files under `dir`, recursively, sorted.
fn markdown(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    for entry in std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = entry?.path();
        if path.is_dir() {
            markdown(&path, out)?;
        } else if path.extension().is_some_and(|e| e == "md") {
            out.push(path);
        }
    }
    out.sort();
    Ok(())
}

/// Each YAML document of `text`, as JSON.
fn yaml_documents(text: &str) -> Result<Vec<Value>> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|doc| Value::deserialize(doc).map_err(anyhow::Error::from))
        .filter(|v| !matches!(v, Ok(Value::Null)))
        .collect()
}

/// The examples of the YAML files in `dir` (any number of documents each).
fn yaml_files(dir: &str, out: &mut Vec<Example>) -> Result<()> {
    for path in files(&repo_root().join(dir), ".yaml")? {
        let text = std::fs::read_to_string(&path)?;
        let file = relative(&path);
        for (i, object) in yaml_documents(&text)
            .with_context(|| format!("parsing {file}"))?
            .into_iter()
            .enumerate()
        {
            if is_example(&object) {
                out.push(Example {
                    source: format!("{file} (document {})", i + 1),
                    file: file.clone(),
                    object,
                });
            }
        }
    }
    Ok(())
}

/// The NodePools and EC2NodeClasses among the items of the `List`s in `examples/*.json`.
fn snapshot_lists(out: &mut Vec<Example>) -> Result<()> {
    for path in files(&repo_root().join("examples"), ".json")? {
        let file = relative(&path);
        let list: Value =
            serde_json::from_str(&std::fs::read_to_string(&path)?).with_context(|| format!("parsing {file}"))?;
        for (i, object) in list["items"].as_array().into_iter().flatten().enumerate() {
            if is_example(object) {
                out.push(Example {
                    source: format!("{file} items[{i}]"),
                    file: file.clone(),
                    object: object.clone(),
                });
            }
        }
    }
    Ok(())
}

/// The `nodepools` and `ec2nodeclasses` of the simulator's scenarios.
fn scenarios(out: &mut Vec<Example>) -> Result<()> {
    for path in files(&repo_root().join("examples/scenarios"), ".yaml")? {
        let file = relative(&path);
        let scenario: Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(&path)?).with_context(|| format!("parsing {file}"))?;
        for key in ["nodepools", "ec2nodeclasses"] {
            for (i, object) in scenario[key].as_array().into_iter().flatten().enumerate() {
                out.push(Example {
                    source: format!("{file} {key}[{i}]"),
                    file: file.clone(),
                    object: object.clone(),
                });
            }
        }
    }
    Ok(())
}

/// The NodePools and EC2NodeClasses in the ```yaml blocks of README.md and docs/src.
fn docs(out: &mut Vec<Example>) -> Result<()> {
    let root = repo_root();
    let mut pages = vec![root.join("README.md")];
    markdown(&root.join("docs/src"), &mut pages)?;
    for path in pages {
        let file = relative(&path);
        let text = std::fs::read_to_string(&path)?;
        // (line of the opening fence, the block's text) of each yaml block.
        let mut open: Option<(usize, bool, String)> = None;
        let mut blocks = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let fence = line.trim_start().starts_with("```");
            match open.as_mut() {
                None if fence => {
                    let info = line.trim_start().trim_start_matches('`').trim();
                    let yaml = matches!(info.split([' ', ',', '{']).next(), Some("yaml" | "yml"));
                    open = Some((n + 1, yaml, String::new()));
                }
                None => {}
                Some(_) if fence => {
                    if let Some((line_no, true, body)) = open.take() {
                        blocks.push((line_no, body));
                    }
                }
                Some((_, _, body)) => {
                    body.push_str(line);
                    body.push('\n');
                }
            }
        }
        for (line_no, body) in blocks {
            let documents =
                yaml_documents(&body).with_context(|| format!("parsing the yaml block at {file}:{line_no}"))?;
            let several = documents.len() > 1;
            for (i, object) in documents.into_iter().enumerate() {
                if is_example(&object) {
                    let doc = if several {
                        format!(" document {}", i + 1)
                    } else {
                        String::new()
                    };
                    out.push(Example {
                        source: format!("{file}:{line_no} (yaml block{doc})"),
                        file: file.clone(),
                        object,
                    });
                }
            }
        }
    }
    Ok(())
}

/// Every example, by where it was found; fails when a place that has examples gave none
/// (a collector that finds nothing would prove nothing).
fn collect() -> Result<Vec<Example>> {
    let mut all = Vec::new();
    let mut section = |name: &str, found: Result<Vec<Example>>| -> Result<()> {
        let found = found?;
        ensure!(!found.is_empty(), "no example NodePool or EC2NodeClass found in {name}");
        all.extend(found);
        Ok(())
    };
    let run = |f: &dyn Fn(&mut Vec<Example>) -> Result<()>| {
        let mut v = Vec::new();
        f(&mut v).map(|()| v)
    };
    section("infra/crds/examples", run(&|v| yaml_files("infra/crds/examples", v)))?;
    section(
        "shared/tests/fixtures/manifests",
        run(&|v| yaml_files("shared/tests/fixtures/manifests", v)),
    )?;
    section("examples/*.json", run(&snapshot_lists))?;
    section("examples/scenarios", run(&scenarios))?;
    section("README.md and docs/src", run(&docs))?;
    Ok(all)
}

/// The object as sent: named `name`, without `status` (the status subresource ignores it
/// on create).
fn to_send(example: &Example, name: &str) -> Value {
    let mut object = example.object.clone();
    if let Some(map) = object.as_object_mut() {
        map.remove("status");
        let metadata = map.entry("metadata").or_insert_with(|| json!({}));
        metadata["name"] = json!(name);
    }
    object
}

/// `object` without what the apiserver owns: metadata keeps the name, labels and
/// annotations; `status` goes (nothing writes one here).
fn comparable(object: &Value) -> Value {
    let mut out = object.clone();
    if let Some(map) = out.as_object_mut() {
        map.remove("status");
        let metadata: Map<String, Value> = object["metadata"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| matches!(k.as_str(), "name" | "labels" | "annotations"))
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect()
            })
            .unwrap_or_default();
        map.insert("metadata".into(), Value::Object(metadata));
    }
    out
}

/// How one object differs from another (the stored object from the one sent, or the
/// model of one from the model of the other), as (field path, description) pairs.
#[derive(Default)]
struct Changes {
    /// Only in the first (sent, not stored: the CRD does not know the field).
    pruned: Vec<(String, String)>,
    /// Only in the second (stored, not sent: the CRD's defaults).
    added: Vec<(String, String)>,
    /// In both, with other values.
    changed: Vec<(String, String)>,
}

impl Changes {
    fn between(a: &Value, b: &Value) -> Self {
        let mut out = Changes::default();
        out.walk("", a, b);
        out
    }

    fn walk(&mut self, path: &str, a: &Value, b: &Value) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                for (k, v) in x {
                    let at = child(path, k);
                    match y.get(k) {
                        // A null is "unset": the apiserver drops it.
                        None if v.is_null() => {}
                        None => self.pruned.push((at.clone(), format!("{at}={v}"))),
                        Some(w) => self.walk(&at, v, w),
                    }
                }
                for (k, w) in y {
                    if x.get(k).is_none_or(Value::is_null) {
                        let at = child(path, k);
                        self.added.push((at.clone(), format!("{at}={w}")));
                    }
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (v, w)) in x.iter().zip(y).enumerate() {
                    self.walk(&format!("{path}[{i}]"), v, w);
                }
            }
            _ if a != b => self.changed.push((path.to_string(), format!("{path}: {a} -> {b}"))),
            _ => {}
        }
    }

    fn all(&self) -> impl Iterator<Item = &(String, String)> {
        self.pruned.iter().chain(&self.added).chain(&self.changed)
    }
}

fn child(path: &str, key: impl Display) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

fn descriptions(items: &[(String, String)]) -> Vec<&str> {
    items.iter().map(|(_, d)| d.as_str()).collect()
}

/// Reads `sent` and `stored` with Carpool's model. Ok: the stored one, and the known gaps
/// ([`KNOWN_DEFAULT_GAPS`]) the two differ by, if any. An error says which one the model
/// refused, or by which of the model's fields they differ.
fn same_in_model<T: DeserializeOwned + Validate + PartialEq + Serialize>(
    kind: &str,
    sent: &Value,
    stored: &Value,
) -> Result<(T, Vec<String>), String> {
    let a: T = from_value(sent).map_err(|e| format!("Carpool's model refuses the example: {e}"))?;
    let b: T = from_value(stored).map_err(|e| format!("Carpool's model refuses it as the apiserver stored it: {e}"))?;
    if a == b {
        return Ok((b, Vec::new()));
    }
    let model = |t: &T| serde_json::to_value(t).map_err(|e| format!("serializing the model: {e}"));
    let diff = Changes::between(&model(&a)?, &model(&b)?);
    let known = |path: &str| {
        KNOWN_DEFAULT_GAPS
            .iter()
            .any(|(k, gap, _)| *k == kind && (path == *gap || path.starts_with(&format!("{gap}."))))
    };
    let (gaps, unknown): (Vec<_>, Vec<_>) = diff.all().partition(|(path, _)| known(path));
    if unknown.is_empty() && !gaps.is_empty() {
        return Ok((b, gaps.into_iter().map(|(_, d)| d.clone()).collect()));
    }
    Err(format!(
        "Carpool's model reads the stored object otherwise than the example (are its defaults the CRD's?): \
         model fields only as written {:?}, only as stored {:?}, changed {:?}",
        descriptions(&diff.pruned),
        descriptions(&diff.added),
        descriptions(&diff.changed)
    ))
}

/// What one example came to.
enum Outcome {
    /// Round-tripped: the defaults the apiserver added, the known gaps it showed, and the
    /// NodePool as stored (for a NodePool).
    Same {
        added: Vec<String>,
        gaps: Vec<String>,
        pool: Option<Box<NodePool>>,
    },
    Failed(String),
}

/// Creates, reads back and deletes one example; the deletion is tried whatever happened.
async fn round_trip(client: &kube::Client, example: &Example) -> Result<Outcome> {
    let kind = example.kind();
    let resource = match kind {
        "NodePool" => nodepools(),
        _ => nodeclasses(),
    };
    let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource);
    let name = unique("example");
    let sent = to_send(example, &name);
    let object: DynamicObject = serde_json::from_value(sent.clone()).context("the example as a Kubernetes object")?;
    if let Err(e) = api.create(&PostParams::default(), &object).await {
        return Ok(Outcome::Failed(format!("the apiserver refuses it: {}", api_error(&e))));
    }
    let stored = api.get(&name).await;
    let deleted = api.delete(&name, &DeleteParams::default()).await;
    let stored = serde_json::to_value(stored.with_context(|| format!("reading back {name}"))?)?;
    deleted.with_context(|| format!("deleting {name}"))?;

    let (sent, stored) = (comparable(&sent), comparable(&stored));
    let diff = Changes::between(&sent, &stored);
    let mut problems = Vec::new();
    let pruned: Vec<&str> = diff
        .pruned
        .iter()
        .map(|(path, _)| path.as_str())
        .filter(|path| !PRUNED_ON_PURPOSE.contains(&(example.file.as_str(), *path)))
        .collect();
    if !pruned.is_empty() {
        problems.push(format!(
            "the apiserver pruned {pruned:?}: Karpenter's CRD has no such field, so Karpenter never sees it"
        ));
    }
    let model = match kind {
        "NodePool" => same_in_model::<NodePool>(kind, &sent, &stored).map(|(p, gaps)| (Some(Box::new(p)), gaps)),
        _ => same_in_model::<EC2NodeClass>(kind, &sent, &stored).map(|(_, gaps)| (None, gaps)),
    };
    match model {
        Ok((pool, gaps)) if problems.is_empty() => Ok(Outcome::Same {
            added: diff.added.into_iter().map(|(_, d)| d).collect(),
            gaps,
            pool,
        }),
        Ok(_) => Ok(Outcome::Failed(problems.join("\n  "))),
        Err(e) => {
            problems.push(e);
            problems.push(format!(
                "(the apiserver added {:?}, changed {:?}, pruned {:?})",
                descriptions(&diff.added),
                descriptions(&diff.changed),
                descriptions(&diff.pruned)
            ));
            Ok(Outcome::Failed(problems.join("\n  ")))
        }
    }
}

/// The apiserver's message, or the error.
fn api_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.reason),
        other => other.to_string(),
    }
}

#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn every_example_is_accepted_by_karpenters_crds_and_read_back_the_same() -> Result<()> {
    let _stack = carpool_tests::shared().await;
    let client = Stack::load()?.kube_client().await?;
    let examples = collect()?;
    let mut failures = Vec::new();
    let mut balanced = Vec::new();
    let mut fragments = Vec::new();
    let mut gaps_seen = 0;
    for example in &examples {
        if example.object.get("spec").is_none() {
            // A fragment in the docs (e.g. only the metadata an annotation goes in): no
            // object to create.
            fragments.push(example.source.clone());
            continue;
        }
        match round_trip(&client, example).await? {
            Outcome::Same { added, gaps, pool } => {
                println!("ok {} ({}); defaults added: {added:?}", example.source, example.kind());
                if !gaps.is_empty() {
                    println!("  the model differs by a known gap (KNOWN_DEFAULT_GAPS): {gaps:?}");
                    gaps_seen += 1;
                }
                if let Some(p) = pool
                    && p.spec.disruption.consolidation_policy == ConsolidationPolicy::Balanced
                {
                    balanced.push((example.source.clone(), p));
                }
            }
            Outcome::Failed(why) => failures.push(format!("{} ({}):\n  {why}", example.source, example.kind())),
        }
    }
    for f in &fragments {
        println!("skipped {f}: a fragment (no spec)");
    }
    if gaps_seen > 0 {
        for (kind, path, why) in KNOWN_DEFAULT_GAPS {
            println!("{gaps_seen} example(s) read by the model otherwise, at a known gap: {kind} {path}: {why}");
        }
    }
    // Fragments are for prose: a manifest file holds whole objects.
    for f in &fragments {
        ensure!(
            f.contains(".md:"),
            "{f} has no spec, yet it is a manifest file, not a doc's fragment"
        );
    }
    if !failures.is_empty() {
        bail!(
            "{} of {} examples failed on Karpenter's CRDs:\n{}",
            failures.len(),
            examples.len() - fragments.len(),
            failures.join("\n")
        );
    }
    // Karpenter's API has Balanced: at least one example uses it, the apiserver keeps it,
    // and Carpool reads its k from the annotation (Karpenter's BalancedK without it).
    ensure!(
        !balanced.is_empty(),
        "no example NodePool uses consolidationPolicy: Balanced"
    );
    for (source, pool) in &balanced {
        let k = pool
            .consolidation_threshold()
            .map_err(|e| anyhow::anyhow!("{source}: {e}"))?;
        let annotated = pool
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(CONSOLIDATION_THRESHOLD_ANNOTATION));
        ensure!(annotated || k == BALANCED_K, "{source}: k = {k} without the annotation");
        println!("{source}: Balanced, k = {k}");
    }
    Ok(())
}

/// Why `consolidationThreshold` moved to an annotation: Karpenter's NodePool has no such
/// field, so the apiserver does not keep it (it drops it, or refuses it when asked to be
/// strict), whereas the annotation is kept and read.
#[tokio::test]
#[ignore = "needs local stack (infra/local/up)"]
async fn the_apiserver_drops_a_consolidation_threshold_field_and_keeps_the_annotation() -> Result<()> {
    let _stack = carpool_tests::shared().await;
    let client = Stack::load()?.kube_client().await?;
    let api: Api<DynamicObject> = Api::all_with(client, &nodepools());
    let name = unique("threshold");
    let pool = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": name, "annotations": {CONSOLIDATION_THRESHOLD_ANNOTATION: "4"}},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"},
                "requirements": []}},
            "disruption": {"consolidationPolicy": "Balanced", "consolidationThreshold": 3}
        }
    });
    let stored = match api.create(&PostParams::default(), &serde_json::from_value(pool)?).await {
        Ok(_) => {
            let got = api.get(&name).await;
            api.delete(&name, &DeleteParams::default()).await?;
            serde_json::to_value(got?)?
        }
        Err(e) => {
            let message = api_error(&e);
            ensure!(
                message.contains("consolidationThreshold"),
                "refused for another reason: {message}"
            );
            return Ok(());
        }
    };
    let disruption = &stored["spec"]["disruption"];
    ensure!(
        disruption.get("consolidationThreshold").is_none(),
        "the apiserver kept spec.disruption.consolidationThreshold: {disruption}"
    );
    ensure!(disruption["consolidationPolicy"] == "Balanced", "{disruption}");
    let read: NodePool = from_value(&comparable(&stored)).map_err(|e| anyhow::anyhow!("{e}"))?;
    ensure!(read.consolidation_threshold() == Ok(4), "{read:?}");
    Ok(())
}
