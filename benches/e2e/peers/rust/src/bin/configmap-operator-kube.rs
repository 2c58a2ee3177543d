//! The scale benchmark's ConfigMap operator on kube-runtime: it caches every ConfigMap of
//! one namespace and reconciles each once, doing nothing but reading it. Beside the Widget
//! operator (same crate, same locked dependencies).
//!
//! `Controller` with kube-runtime's defaults except `Config::concurrency`, on the typed
//! `ConfigMap` of k8s-openapi, in one namespace. JSON lines on stdout, times as wall-clock
//! seconds since the epoch (the driver compares them with its own):
//!
//! - `{"cached": t}`: the controller's store holds its initial list;
//! - `{"first_reconcile": t}`: the first reconcile started;
//! - `{"all_first": t, "cpu_seconds": c}`: `--expect` reconciles done (CPU of the process);
//! - `{"settled": t}`: right after (no garbage collector to run);
//! - `{"seen": seq, "t": t, "reconciles": n}`: a reconcile saw a new value of the seq
//!   annotation.

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::watcher;
use kube::Client;
use serde_json::{json, Value};

const SEQ_ANNOTATION: &str = "e2e.fastctl.dev/seq";

struct Ctx {
    expect: u64,
    reconciles: AtomicU64,
    settled: Once,
    last_seq: Mutex<String>,
}

#[derive(Debug)]
struct Never;

impl std::fmt::Display for Never {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("never")
    }
}

impl std::error::Error for Never {}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

fn emit(message: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{message}");
    let _ = out.flush();
}

/// User + system CPU time of this process from /proc/self/stat (ticks of 1/100 s).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return -1.0;
    };
    let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (tick(11) + tick(12)) / 100.0
}

impl Ctx {
    fn settle(&self) {
        self.settled.call_once(|| {
            emit(&json!({"all_first": now(), "cpu_seconds": cpu_seconds()}));
            emit(&json!({"settled": now()}));
        });
    }
}

async fn reconcile(obj: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<Action, Never> {
    let t = now();
    let n = ctx.reconciles.fetch_add(1, Ordering::SeqCst) + 1;
    if n == 1 {
        emit(&json!({"first_reconcile": t}));
    }
    let seq = obj
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SEQ_ANNOTATION));
    if let Some(seq) = seq {
        let fresh = {
            let mut last = ctx.last_seq.lock().unwrap();
            let fresh = *last != *seq;
            last.clone_from(seq);
            fresh
        };
        if fresh {
            emit(&json!({"seen": seq, "t": t, "reconciles": n}));
        }
    }
    if n == ctx.expect {
        ctx.settle();
    }
    Ok(Action::await_change())
}

fn error_policy(_obj: Arc<ConfigMap>, _err: &Never, _ctx: Arc<Ctx>) -> Action {
    Action::requeue(Duration::from_secs(1))
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
    let expect: u64 = arg("expect").unwrap_or_else(|| "0".into()).parse()?;
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    let client = Client::try_from(config)?;
    let api: Api<ConfigMap> = Api::namespaced(client, &namespace);
    let ctx = Arc::new(Ctx {
        expect,
        reconciles: AtomicU64::new(0),
        settled: Once::new(),
        last_seq: Mutex::new(String::new()),
    });
    let controller = Controller::new(api, watcher::Config::default())
        .with_config(Config::default().concurrency(concurrency))
        .shutdown_on_signal();
    let store = controller.store();
    let ready_ctx = ctx.clone();
    tokio::spawn(async move {
        // Polled every 5 ms (as the Go peer polls its informer): the store's readiness wakes
        // one waiter only, and the controller's runner is already waiting on it.
        loop {
            match tokio::time::timeout(Duration::from_millis(5), store.wait_until_ready()).await {
                Ok(Ok(())) => break,
                Ok(Err(_)) => return, // the controller stopped before its list was in
                Err(_) => {}
            }
        }
        emit(&json!({"cached": now()}));
        if ready_ctx.expect == 0 {
            ready_ctx.settle();
        }
    });
    controller
        .run(reconcile, error_policy, ctx)
        .for_each(|result| async move {
            if let Err(err) = result {
                eprintln!("controller: {err}");
            }
        })
        .await;
    Ok(())
}
