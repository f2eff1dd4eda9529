//! `impl CloudInstanceProvider` for Azure: list (the resource group's VMs with the
//! cluster's tag, every `nextLink` page, each VM's power state from its instance view,
//! read again only when its provisioning state changes or it grows old), launch
//! (idempotent by request id: VMs tagged with it are counted first, each new VM's name
//! derives from the request and its index, so a replay is a PUT of the same VM;
//! deallocated workers are started before new ones are made; each operation is polled up
//! to a bound, a failed one's VM deleted, unfinished ones checked again by
//! `poll_errors`), terminate (delete, or deallocate when workers are cached; gone is
//! success).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use futures_util::StreamExt;
use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::cloud::PendingCheckError;
use rayscale_core::provider::{
    CloudInstance, CloudInstanceProvider, CloudInstanceState, LaunchOutcome, LaunchRequest,
    NodeKind, ProviderError, ProviderErrorKind, ProviderOp, cloud, tags,
};
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::AzureError;
use crate::client::{Accepted, Arm, OpStatus, OperationUrl, Polling};
use crate::config::AzureConfig;
use crate::errors::{call_error, sdk_error};
use crate::mapping::{self, CreateSpec, Power, Vm};

mod launch;

/// `provider.type` of this provider.
pub const PROVIDER_TYPE: &str = "azure";

/// Calls sent at once (creates, deletes, instance views, ...).
const CONCURRENCY: usize = 32;

/// How long a VM's power state is trusted without a change of its provisioning state
/// (a Spot VM evicted with `Deallocate` changes power without rayscale's doing).
const POWER_REFRESH: Duration = Duration::from_secs(300);

/// How often `poll_errors` asks for an unfinished operation before leaving the VM's
/// fate to the list.
const MAX_CHECKS: u32 = 100;

/// An operation a call started that was not done when the call returned.
#[derive(Debug, Clone)]
struct PendingOp {
    url: OperationUrl,
    call: &'static str,
    op: ProviderOp,
    node_type: String,
    vm: String,
    checks: u32,
}

/// A VM's power as last read, and what it was read with.
#[derive(Debug, Clone)]
struct PowerEntry {
    vm_id: String,
    provisioning_state: String,
    power: Power,
    at: Instant,
}

/// What one config load gives: the Azure view and each type's boot script.
struct State {
    cfg: AzureConfig,
    boot: BTreeMap<String, String>,
}

/// How one create (or start) ended.
enum Made {
    Ok(CloudInstance),
    Failed(AzureError),
}

/// Ray nodes as Azure virtual machines.
pub struct AzureProvider {
    arm: Arm,
    state: RwLock<Arc<State>>,
    head_ip: Option<String>,
    polling: Polling,
    pending: Mutex<Vec<PendingOp>>,
    power: Mutex<BTreeMap<String, PowerEntry>>,
    /// VMs whose create failed, still to delete.
    failed: Mutex<BTreeSet<String>>,
    /// Addresses (private, public) by `vmId`: heads', and workers' too with
    /// [`with_worker_addresses`](AzureProvider::with_worker_addresses).
    head_ips: Mutex<BTreeMap<String, (String, Option<String>)>>,
    /// Whether `list` reads running workers' addresses too (`get-worker-ips`; the
    /// autoscaler itself never needs them, so it spends no call on them).
    worker_addresses: bool,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

fn load(config: &ClusterConfig, head_ip: Option<&str>) -> Result<State, AzureError> {
    let env = std::env::var(crate::config::SUBSCRIPTION_ENV).ok();
    let cfg = AzureConfig::from_cluster(config, env.as_deref())?;
    let boot = cloud::boot_scripts(config, head_ip, &mapping::METADATA)
        .map_err(|e| AzureError::config("boot script", e.to_string()))?;
    // Map each type once, so a value the client's model does not take fails now.
    for t in cfg.node_types.keys() {
        let kind = if cfg.head_node_type.as_deref() == Some(t.as_str()) {
            NodeKind::Head
        } else {
            NodeKind::Worker
        };
        mapping::vm_body(
            &cfg,
            &CreateSpec {
                node_type: t,
                kind,
                name: "check",
                request_id: None,
                boot_script: boot.get(t).map(String::as_str),
                avoid_zones: &[],
            },
        )?;
    }
    Ok(State { cfg, boot })
}

impl AzureProvider {
    /// A provider for `config` on `arm`. Every node type is mapped once here, so a bad
    /// one fails at load, naming its path. With `head_ip`, workers boot with rayscale's
    /// boot script (joining the head at `head_ip`); without, they get no `customData`.
    pub fn new(
        arm: Arm,
        config: &ClusterConfig,
        head_ip: Option<&str>,
        polling: Polling,
    ) -> Result<Self, AzureError> {
        let state = load(config, head_ip)?;
        Ok(AzureProvider {
            arm,
            state: RwLock::new(Arc::new(state)),
            head_ip: head_ip.map(str::to_string),
            polling,
            pending: Mutex::new(Vec::new()),
            power: Mutex::new(BTreeMap::new()),
            failed: Mutex::new(BTreeSet::new()),
            head_ips: Mutex::new(BTreeMap::new()),
            worker_addresses: false,
        })
    }

    /// This provider, whose `list` also reads each running worker's addresses (once per
    /// VM, from its NIC and public address), as `rayscale get-worker-ips` prints them.
    pub fn with_worker_addresses(mut self) -> Self {
        self.worker_addresses = true;
        self
    }

    /// A provider whose client uses `RAYSCALE_AZURE_ENDPOINT` when set (else Azure's
    /// public cloud with the default credential chain); see [`new`](Self::new).
    pub fn from_environment(
        config: &ClusterConfig,
        head_ip: Option<&str>,
    ) -> Result<Self, AzureError> {
        load(config, head_ip)?;
        let endpoint = std::env::var(crate::client::ENDPOINT_ENV).ok();
        let arm = crate::client::build(endpoint.as_deref())?;
        Self::new(arm, config, head_ip, Polling::default())
    }

    /// The HTTP requests sent so far.
    pub fn calls(&self) -> &crate::client::CallCounts {
        self.arm.calls()
    }

    fn state(&self) -> Arc<State> {
        match self.state.read() {
            Ok(c) => c.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// Every VM of the cluster in the resource group, across every page.
    async fn list_raw(&self, cfg: &AzureConfig) -> Result<Vec<Vm>, AzureError> {
        let mut pages = self
            .arm
            .compute
            .virtual_machines_client()
            .list(&cfg.resource_group, &cfg.subscription_id)
            .into_stream();
        let mut out = Vec::new();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|e| sdk_error("virtualMachines.list", &e, "", None))?;
            out.extend(
                page.value
                    .iter()
                    .filter_map(Vm::from_model)
                    .filter(|v| v.in_cluster(&cfg.cluster_name)),
            );
        }
        Ok(out)
    }

    /// The power of each of `vms`: from the cache while its provisioning state is the
    /// one it was read with and it is younger than [`POWER_REFRESH`]; else read from its
    /// instance view (a VM being made or deleted has none worth reading). With `all`
    /// (`vms` is every VM of the cluster), entries of VMs gone are dropped.
    async fn powers(&self, cfg: &AzureConfig, vms: &[Vm], all: bool) -> BTreeMap<String, Power> {
        let now = Instant::now();
        let mut out = BTreeMap::new();
        let mut ask = Vec::new();
        {
            let cache = lock(&self.power);
            for v in vms {
                let ps = v.provisioning_state.to_ascii_lowercase();
                if ps == "creating" || ps == "deleting" {
                    // Nothing worth reading: what was known of it stays.
                    let p = cache.get(&v.name).map_or(Power::Unknown, |e| e.power);
                    out.insert(v.name.clone(), p);
                    continue;
                }
                match cache.get(&v.name) {
                    Some(e)
                        if e.vm_id == v.vm_id
                            && e.provisioning_state == v.provisioning_state
                            && now.duration_since(e.at) < POWER_REFRESH =>
                    {
                        out.insert(v.name.clone(), e.power);
                    }
                    _ => ask.push(v.clone()),
                }
            }
        }
        let futs: Vec<_> = ask
            .iter()
            .map(|v| async move {
                let r = self
                    .arm
                    .compute
                    .virtual_machines_client()
                    .instance_view(&cfg.resource_group, &v.name, &cfg.subscription_id)
                    .await;
                (v, r)
            })
            .collect();
        let read: Vec<_> = futures_util::stream::iter(futs)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        let mut cache = lock(&self.power);
        for (v, r) in read {
            let power = match r {
                Ok(iv) => mapping::power_of(iv.statuses.iter().filter_map(|s| s.code.as_deref())),
                Err(e) => {
                    // Unknown this time (a VM gone between the list and now, or a
                    // failed read): it stays as it was, and is asked again next time.
                    tracing::debug!("instance view of {}: {e}", v.name);
                    let p = cache.get(&v.name).map_or(Power::Unknown, |e| e.power);
                    out.insert(v.name.clone(), p);
                    continue;
                }
            };
            cache.insert(
                v.name.clone(),
                PowerEntry {
                    vm_id: v.vm_id.clone(),
                    provisioning_state: v.provisioning_state.clone(),
                    power,
                    at: now,
                },
            );
            out.insert(v.name.clone(), power);
        }
        if all {
            let names: BTreeSet<&str> = vms.iter().map(|v| v.name.as_str()).collect();
            cache.retain(|n, _| names.contains(n.as_str()));
        }
        out
    }

    /// A running VM's private and public addresses (read from its NIC and its public
    /// address resource, once per VM; not kept while the public one cannot be read).
    async fn addresses(&self, v: &Vm) -> Option<(String, Option<String>)> {
        if let Some(a) = lock(&self.head_ips).get(&v.vm_id) {
            return Some(a.clone());
        }
        let nic = v.nic_id.as_deref()?;
        let nic = match self.arm.nic_addresses(nic).await {
            Ok(n) => n,
            Err(e) => {
                tracing::debug!("the address of {}: {e}", v.name);
                return None;
            }
        };
        let private = nic.private_ip?;
        let public = match &nic.public_ip_id {
            None => Ok(None),
            Some(id) => self.arm.public_ip_address(id).await,
        };
        match public {
            Ok(public) => {
                let a = (private, public);
                // Kept once complete (a public address not given yet is asked again).
                if nic.public_ip_id.is_none() || a.1.is_some() {
                    lock(&self.head_ips).insert(v.vm_id.clone(), a.clone());
                }
                Some(a)
            }
            Err(e) => {
                // Said: `get-head-ip` and `up` fall back to the private address.
                tracing::warn!("the public address of {}: {e}", v.name);
                Some((private, None))
            }
        }
    }

    /// Records `power` for VM `name` (after rayscale's own start or deallocate).
    fn set_power(&self, name: &str, power: Power) {
        if let Some(e) = lock(&self.power).get_mut(name) {
            e.power = power;
            e.at = Instant::now();
        }
    }

    /// Deletes (or, with cached workers, deallocates) `ids`: workers, or with `head` the
    /// head alone. Names not of the cluster, or gone, are left alone (gone is success).
    async fn terminate_inner(&self, ids: &[String], head: bool) -> Result<(), ProviderError> {
        if ids.is_empty() {
            return Ok(());
        }
        let deadline = Instant::now() + self.polling.launch_wait;
        let state = self.state();
        let cfg = &state.cfg;
        let first = ProviderOp::Terminate {
            cloud_instance_id: ids[0].clone(),
        };
        let known: Vec<Vm> = self
            .list_raw(cfg)
            .await
            .map_err(|e| e.into_provider(first.clone()))?
            .into_iter()
            .filter(|v| ids.contains(&v.name))
            .collect();
        let want = if head {
            tags::NODE_KIND_HEAD
        } else {
            tags::NODE_KIND_WORKER
        };
        if let Some(v) = known
            .iter()
            .find(|v| v.tags.get(tags::NODE_KIND).map(String::as_str) != Some(want))
        {
            return Err(cloud::refuse_terminate(&v.name, head));
        }
        let deallocate = cfg.cache_stopped_nodes && !head;
        let powers = if deallocate {
            self.powers(cfg, &known, false).await
        } else {
            BTreeMap::new()
        };
        let futs: Vec<_> = known
            .iter()
            .filter(|v| {
                // Already deallocated: nothing to do; a failed create goes, cached or not.
                let p = powers.get(&v.name).copied().unwrap_or(Power::Unknown);
                !(deallocate && p == Power::Deallocated)
            })
            .map(|v| {
                let p = powers.get(&v.name).copied().unwrap_or(Power::Unknown);
                self.remove_one(cfg, &v.name, deallocate && !v.failed(p), deadline)
            })
            .collect();
        let results: Vec<Option<(String, AzureError)>> = futures_util::stream::iter(futs)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        match results.into_iter().flatten().next() {
            None => Ok(()),
            Some((name, e)) => Err(e.into_provider(ProviderOp::Terminate {
                cloud_instance_id: name,
            })),
        }
    }
}

#[async_trait::async_trait]
impl CloudInstanceProvider for AzureProvider {
    fn provider_type(&self) -> &str {
        PROVIDER_TYPE
    }

    async fn list(&self) -> Result<Vec<CloudInstance>, ProviderError> {
        let state = self.state();
        let cfg = &state.cfg;
        let vms = self
            .list_raw(cfg)
            .await
            .map_err(|e| e.into_provider(ProviderOp::List))?;
        let powers = self.powers(cfg, &vms, true).await;
        let mut out = Vec::new();
        for v in &vms {
            let p = powers.get(&v.name).copied().unwrap_or(Power::Unknown);
            if v.failed(p) {
                lock(&self.failed).insert(v.name.clone());
            }
            let Some(mut c) = mapping::cloud_instance(v, p) else {
                continue;
            };
            if (c.is_head() || self.worker_addresses)
                && c.is_running()
                && let Some((private, public)) = self.addresses(v).await
            {
                c.private_ip = Some(private);
                c.public_ip = public;
            }
            out.push(c);
        }
        Ok(out)
    }

    async fn launch(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        self.launch_inner(request, NodeKind::Worker).await
    }

    async fn terminate(
        &self,
        cloud_instance_ids: &[String],
        _request_id: &str,
    ) -> Result<(), ProviderError> {
        self.terminate_inner(cloud_instance_ids, false).await
    }

    async fn launch_head(&self, request: &LaunchRequest) -> Result<LaunchOutcome, ProviderError> {
        self.launch_inner(request, NodeKind::Head).await
    }

    async fn terminate_head(&self, cloud_instance_id: &str) -> Result<(), ProviderError> {
        self.terminate_inner(&[cloud_instance_id.to_string()], true)
            .await
    }

    /// `PATCH` of the head's tags, all of them with the one changed (Azure replaces a
    /// VM's tags whole), after a list that finds `cloud_instance_id` the cluster's
    /// running head.
    fn tags_heads(&self) -> bool {
        true
    }

    async fn tag_head(
        &self,
        cloud_instance_id: &str,
        changes: &[(&str, String)],
    ) -> Result<(), ProviderError> {
        let state = self.state();
        let cfg = &state.cfg;
        let vms = self
            .list_raw(cfg)
            .await
            .map_err(|e| e.into_provider(ProviderOp::Other))?;
        let Some(vm) = vms.into_iter().find(|v| v.name == cloud_instance_id) else {
            return Err(cloud::refuse_mark(cloud_instance_id));
        };
        let power = self
            .powers(cfg, std::slice::from_ref(&vm), false)
            .await
            .get(&vm.name)
            .copied()
            .unwrap_or(Power::Unknown);
        if !mapping::cloud_instance(&vm, power).is_some_and(|c| c.is_head() && c.is_running()) {
            return Err(cloud::refuse_mark(cloud_instance_id));
        }
        let deadline = Instant::now() + self.polling.launch_wait;
        let done = self
            .patch_tags(cfg, &vm, changes, ProviderOp::Other, "", deadline)
            .await
            .map_err(|e| e.into_provider(ProviderOp::Other))?;
        if !done {
            return Err(ProviderError::call(
                ProviderErrorKind::Transient,
                format!("virtualMachines.update of {cloud_instance_id}: not done in time"),
            ));
        }
        Ok(())
    }

    /// The operations `launch` and `terminate` left running, asked again: each that
    /// ended failed, once (a failed create's VM deleted); each still running stays. VMs
    /// the list saw `Failed` are deleted.
    async fn poll_errors(&self) -> Vec<ProviderError> {
        let state = self.state();
        let cfg = &state.cfg;
        let failed: Vec<String> = lock(&self.failed).iter().cloned().collect();
        for name in failed {
            tracing::warn!("deleting VM {name}: its create failed");
            self.discard(cfg, &name).await;
        }
        let ops: Vec<PendingOp> = std::mem::take(&mut *lock(&self.pending));
        if ops.is_empty() {
            return Vec::new();
        }
        let futs: Vec<_> = ops
            .into_iter()
            .map(|mut p| async move {
                p.checks += 1;
                let r = self.arm.poll(p.call, &p.url, &p.node_type, None).await;
                (p, r)
            })
            .collect();
        let checked: Vec<(PendingOp, Result<OpStatus, AzureError>)> =
            futures_util::stream::iter(futs)
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await;
        let mut errors = Vec::new();
        let mut still = Vec::new();
        for (p, r) in checked {
            match r {
                Ok(OpStatus::Succeeded) => match p.call {
                    "virtualMachines.deallocate" => self.set_power(&p.vm, Power::Deallocated),
                    "virtualMachines.start" => self.set_power(&p.vm, Power::Running),
                    _ => {}
                },
                Ok(OpStatus::Failed {
                    code,
                    message,
                    status,
                }) => {
                    let e = call_error(p.call, code, status, &message, &p.node_type, None);
                    if p.call == "virtualMachines.createOrUpdate" {
                        self.discard(cfg, &p.vm).await;
                    }
                    if !(p.call == "virtualMachines.delete"
                        && e.kind() == ProviderErrorKind::NotFound)
                    {
                        errors.push(e.into_provider(p.op.clone()));
                    }
                }
                Ok(OpStatus::Running(_)) if p.checks < MAX_CHECKS => still.push(p),
                Ok(OpStatus::Running(_)) => tracing::warn!(
                    "operation of {} ({}) still running after {MAX_CHECKS} checks: left to the list",
                    p.vm,
                    p.call
                ),
                Err(e) => match cloud::pending_check_error(e.kind()) {
                    PendingCheckError::Forget => {}
                    PendingCheckError::Report => errors.push(e.into_provider(p.op.clone())),
                    PendingCheckError::Retry => {
                        tracing::debug!("checking the operation of {}: {e}", p.vm);
                        if p.checks < MAX_CHECKS {
                            still.push(p);
                        }
                    }
                },
            }
        }
        lock(&self.pending).extend(still);
        errors
    }

    async fn reconfigure(&self, config: &ClusterConfig) -> Result<(), ProviderError> {
        let state = load(config, self.head_ip.as_deref())
            .map_err(|e| e.into_provider(ProviderOp::Other))?;
        let old = self.state();
        // The instances made so far would no longer be seen (and so leak).
        cloud::refuse_moves(&[
            (
                "provider.subscription_id",
                old.cfg.subscription_id.as_str(),
                state.cfg.subscription_id.as_str(),
            ),
            (
                "provider.resource_group",
                old.cfg.resource_group.as_str(),
                state.cfg.resource_group.as_str(),
            ),
            (
                "provider.location",
                old.cfg.location.as_str(),
                state.cfg.location.as_str(),
            ),
            (
                "cluster_name",
                old.cfg.cluster_name.as_str(),
                state.cfg.cluster_name.as_str(),
            ),
        ])?;
        match self.state.write() {
            Ok(mut c) => *c = Arc::new(state),
            Err(p) => *p.into_inner() = Arc::new(state),
        }
        Ok(())
    }
}
