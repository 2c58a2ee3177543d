//! The e2e bench's Widget operator on kube-runtime: the same work as fastctl's bench
//! operator. For each Widget whose `status.observedGeneration` differs from
//! `metadata.generation`, write `status: {observedGeneration, items}` with one merge patch
//! of the `status` subresource; anything else is a no-op.
//!
//! `Controller` with kube-runtime's defaults except `Config::concurrency`, on a
//! `DynamicObject` (no generated types), in one namespace.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::{json, Value};

struct Ctx {
    api: Api<DynamicObject>,
}

#[derive(Debug)]
struct Error(kube::Error);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl std::error::Error for Error {}

/// The status patch a Widget needs, or None when it is up to date (the common work).
fn status_for(obj: &DynamicObject) -> Option<Value> {
    let generation = obj.metadata.generation;
    let observed = obj
        .data
        .get("status")
        .and_then(|s| s.get("observedGeneration"))
        .and_then(Value::as_i64);
    if observed == generation {
        return None;
    }
    let items = obj
        .data
        .get("spec")
        .and_then(|s| s.get("data"))
        .and_then(Value::as_object)
        .map_or(0, |m| m.len());
    Some(json!({"status": {"observedGeneration": generation, "items": items}}))
}

async fn reconcile(obj: Arc<DynamicObject>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if let Some(patch) = status_for(&obj) {
        ctx.api
            .patch_status(
                &obj.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
            .map_err(Error)?;
    }
    Ok(Action::await_change())
}

fn error_policy(_obj: Arc<DynamicObject>, err: &Error, _ctx: Arc<Ctx>) -> Action {
    eprintln!("reconcile failed: {err}");
    Action::requeue(Duration::from_millis(100))
}

fn arg(name: &str) -> Option<String> {
    let prefix = format!("--{name}=");
    std::env::args().find_map(|a| a.strip_prefix(&prefix).map(str::to_owned))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let kubeconfig = arg("kubeconfig").ok_or("--kubeconfig=PATH is required")?;
    let namespace = arg("namespace").ok_or("--namespace=NAME is required")?;
    let concurrency: u16 = arg("concurrency").unwrap_or_else(|| "32".into()).parse()?;
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    let client = Client::try_from(config)?;
    let gvk = GroupVersionKind::gvk("demo.fastctl.dev", "v1", "Widget");
    let resource = ApiResource::from_gvk_with_plural(&gvk, "widgets");
    let api: Api<DynamicObject> = Api::namespaced_with(client, &namespace, &resource);
    let ctx = Arc::new(Ctx { api: api.clone() });
    Controller::new_with(api, watcher::Config::default(), resource)
        .with_config(Config::default().concurrency(concurrency))
        .shutdown_on_signal()
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                eprintln!("controller: {err}");
            }
        })
        .await;
    Ok(())
}
