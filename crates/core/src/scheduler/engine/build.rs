//! Building the pass: interned resources and shapes, nodes from config and instances, budgets.

use super::*;

/// How many names `res_id_of` remembers by pointer.
const MET_NAMES: usize = 8;

impl Engine<'_> {
    pub(super) fn res_id(&mut self, name: &str) -> ResId {
        if let Some(id) = self.res_ids.get(name) {
            return *id;
        }
        let id = self.res_names.len() as ResId;
        self.res_names.push(name.into());
        self.res_ids.insert(name.to_string(), id);
        self.implicit.push(name.starts_with(IMPLICIT_PREFIX));
        if name == "GPU" {
            self.gpu = Some(id);
        }
        id
    }

    /// [`res_id`](Self::res_id) of a map's key. The GCS reader hands out one `Name` per
    /// distinct name of a reply, so the few names of 10,000 nodes' maps are found by
    /// pointer among the first ones met (no hash of the text per entry).
    fn res_id_of(&mut self, name: &crate::model::Name) -> ResId {
        if let Some((_, id)) = self.met.iter().find(|(n, _)| n.shares_text_with(name)) {
            return *id;
        }
        let id = self.res_id(name);
        if self.met.len() < MET_NAMES {
            self.met.push((name.clone(), id));
        }
        id
    }

    pub(super) fn res_vec(&mut self, m: &crate::model::ResourceMap) -> Vec<(ResId, Fixed)> {
        m.0.iter().map(|(k, v)| (self.res_id_of(k), *v)).collect()
    }

    pub(super) fn type_idx(&mut self, name: &str) -> usize {
        if let Some(i) = self.type_names.iter().position(|t| t == name) {
            return i;
        }
        self.type_names.push(name.into());
        self.type_names.len() - 1
    }

    pub(super) fn intern(&mut self, r: &ResourceRequest) -> ShapeId {
        let mut items: Vec<(crate::model::Name, Fixed)> = r.resources.0.clone();
        items.sort();
        let key = (
            items,
            r.placement_constraints.clone(),
            r.label_selectors.clone(),
        );
        if let Some(id) = self.shape_ids.get(&key) {
            return *id;
        }
        let items = key.0.clone();
        let pos: Vec<(ResId, Fixed)> = items
            .iter()
            .filter(|(_, v)| *v > 0)
            .map(|(k, v)| (self.res_id(k), *v))
            .collect();
        let anti = r
            .placement_constraints
            .iter()
            .filter_map(|c| match c {
                PlacementConstraint::AntiAffinity {
                    label_name,
                    label_value,
                } => Some((label_name.clone(), label_value.clone())),
                _ => None,
            })
            .collect();
        let sum: i128 = r.resources.0.iter().map(|(_, v)| *v).sum();
        let sort_key = (
            r.placement_constraints.len(),
            r.label_selectors.first().map_or(0, |s| s.constraints.len()),
            r.resources.0.len(),
            sum,
            items,
        );
        let id = self.shapes.len() as ShapeId;
        self.shapes.push(Shape {
            has_gpu_key: r.resources.0.iter().any(|(k, _)| k == "GPU"),
            pos,
            selectors: r.label_selectors.clone(),
            anti,
            request: r.clone(),
            sort_key,
        });
        self.shape_ids.insert(key, id);
        self.failed.push(0);
        id
    }

    /// Sorts runs as Ray sorts requests (descending by its key, stable) and merges
    /// neighbours of the same shape.
    /// Requests with counts as interned runs, in Ray's scheduling order.
    pub(super) fn runs_of(
        &mut self,
        requests: &[crate::model::ResourceRequestByCount],
    ) -> Vec<Run> {
        let runs: Vec<Run> = requests
            .iter()
            .map(|rc| Run {
                shape: self.intern(&rc.request),
                count: rc.count,
            })
            .collect();
        self.sorted_runs(runs)
    }

    pub(super) fn sorted_runs(&self, mut runs: Vec<Run>) -> Vec<Run> {
        runs.retain(|r| r.count > 0);
        runs.sort_by(|a, b| {
            let ka = &self.shapes[a.shape as usize].sort_key;
            let kb = &self.shapes[b.shape as usize].sort_key;
            kb.cmp(ka)
        });
        let mut out: Vec<Run> = Vec::with_capacity(runs.len());
        for r in runs {
            match out.last_mut() {
                Some(last) if last.shape == r.shape => last.count += r.count,
                _ => out.push(r),
            }
        }
        out
    }

    pub(super) fn node_from_config(&mut self, type_idx: usize, status: NodeStatus) -> SNode {
        let t = &self.req.node_types[type_idx];
        let total = {
            let m = t.resources.clone();
            self.res_vec(&m)
        };
        let t = &self.req.node_types[type_idx];
        let tie = self.tie(&t.name, t.priority);
        SNode {
            type_idx,
            status,
            im_status: None,
            instance: None,
            head: false,
            idle_ms: 0,
            launch_hash: Rc::from(""),
            tie,
            avail: [total.clone(), total.clone()],
            total: Rc::new(total),
            sched: [Vec::new(), Vec::new()],
            labels: Rc::new(t.labels.clone()),
            term: None,
            gang: NO_GANG,
        }
    }

    /// The Ray node id (hex) of `n`: its instance's Ray node when that instance runs Ray,
    /// else empty (a node to launch, or an instance not running Ray yet). Read from the
    /// request, not copied into every node.
    pub(super) fn ray_node_id(&self, n: &SNode) -> &str {
        let req = self.req;
        match (n.im_status, n.instance) {
            (Some(InstanceStatus::RayRunning), Some(i)) => req
                .instances
                .get(i)
                .and_then(|inst| inst.ray_node.as_ref())
                .map_or("", |r| r.node_id_hex.as_str()),
            _ => "",
        }
    }

    pub(super) fn node_from_instance(&mut self, idx: usize, inst: &InstanceInput) -> Option<SNode> {
        if !inst.status.can_reach_ray_running() {
            return None;
        }
        let config_idx = self
            .req
            .node_types
            .iter()
            .position(|t| t.name == inst.node_type);
        if inst.status == InstanceStatus::RayRunning {
            let ray = inst.ray_node.as_ref()?;
            let total = self.res_vec(&ray.total);
            let avail = self.res_vec(&ray.available);
            let type_idx = self.type_idx(&inst.node_type);
            return Some(SNode {
                type_idx,
                status: NodeStatus::Schedulable,
                im_status: Some(inst.status),
                instance: Some(idx),
                head: inst.is_head,
                idle_ms: ray.idle_duration_ms,
                launch_hash: self.hash_rc(&inst.launch_config_hash),
                tie: self.tie(
                    &inst.node_type,
                    config_idx.map_or(0, |i| self.req.node_types[i].priority),
                ),
                avail: [avail, total.clone()],
                total: Rc::new(total),
                sched: [Vec::new(), Vec::new()],
                labels: Rc::new(ray.labels.clone()),
                term: None,
                gang: NO_GANG,
            });
        }
        let Some(ci) = config_idx else {
            if self.req.disable_launch_config_check {
                return None;
            }
            let type_idx = self.type_idx(&inst.node_type);
            return Some(SNode {
                type_idx,
                status: NodeStatus::ToTerminate,
                im_status: Some(inst.status),
                instance: Some(idx),
                head: false,
                idle_ms: 0,
                launch_hash: self.hash_rc(&inst.launch_config_hash),
                tie: self.tie(&inst.node_type, 0),
                total: Rc::new(Vec::new()),
                avail: [Vec::new(), Vec::new()],
                sched: [Vec::new(), Vec::new()],
                labels: Rc::new(Vec::new()),
                term: Some(TerminationCause::Outdated),
                gang: NO_GANG,
            });
        };
        let mut n = self.node_from_config(ci, NodeStatus::Schedulable);
        n.im_status = Some(inst.status);
        n.instance = Some(idx);
        n.head = inst.is_head;
        // Compatibility rule PENDING_LAUNCH_HASH: keep the instance's hash.
        n.launch_hash = self.hash_rc(&inst.launch_config_hash);
        Some(n)
    }

    /// `hash` shared: the nodes of a type mostly carry one launch hash, so the last one
    /// made is handed out again rather than one string per node.
    fn hash_rc(&mut self, hash: &str) -> Rc<str> {
        match &self.last_hash {
            Some(h) if **h == *hash => h.clone(),
            _ => {
                let h: Rc<str> = Rc::from(hash);
                self.last_hash = Some(h.clone());
                h
            }
        }
    }

    /// Per config type, how many more nodes it may get (its max minus the given nodes).
    pub(super) fn new_node_budget(&self, nodes: &[SNode]) -> Vec<i64> {
        let mut available: Vec<i64> = (0..self.n_config_types)
            .map(|t| self.max_workers(t))
            .collect();
        for n in nodes {
            if n.type_idx < self.n_config_types {
                available[n.type_idx] -= 1;
            }
        }
        for (a, &off) in available.iter_mut().zip(&self.unavailable) {
            if off {
                *a = 0;
            }
        }
        available
    }

    pub(super) fn max_workers(&self, type_idx: usize) -> i64 {
        if type_idx >= self.n_config_types {
            return 0;
        }
        let t = &self.req.node_types[type_idx];
        let base = t
            .max_workers
            .map_or(i64::MAX / 4, |m| m.min(i64::MAX as u64 / 4) as i64);
        let is_head_type = self.req.head_node_type.as_deref() == Some(t.name.as_str());
        base + i64::from(is_head_type)
    }
}
