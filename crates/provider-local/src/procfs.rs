//! Discovery of this cluster's worker processes from `/proc`, without state files.
//!
//! An instance is the set of live (non-zombie) processes whose environment carries
//! `RAYSCALE_CLUSTER=<cluster>` and `RAY_CLOUD_INSTANCE_ID=<id>`, plus the members of its
//! leader's process group (Ray rewrites the process title of its agents, which clobbers
//! their `/proc/<pid>/environ`, but they stay in the group). Ray 2.60's raylet puts each
//! worker process (`ray::IDLE`, `ray::<task>`) into a process group of its own; those keep
//! the environment, so they are found by it.

use std::collections::{BTreeMap, BTreeSet};
use std::io;

use crate::{ENV_CLUSTER, ENV_INSTANCE_ID, ENV_NODE_TYPE, ENV_REQUEST_ID};

/// What the launch put into a worker's environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tags {
    /// `RAY_CLOUD_INSTANCE_ID`.
    pub instance_id: String,
    /// `RAY_NODE_TYPE_NAME`.
    pub node_type: String,
    /// `RAYSCALE_LAUNCH_REQUEST_ID`.
    pub request_id: String,
}

/// One process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ProcInfo {
    /// Process id.
    pub pid: i32,
    /// Parent's process id.
    pub ppid: i32,
    /// Process group id.
    pub pgid: i32,
    /// State letter (`R`, `S`, `D`, `Z`, ...).
    pub state: char,
    /// Start time in clock ticks since boot (breaks ties between leader candidates).
    pub starttime: u64,
    /// Present when the environment names this cluster and an instance.
    pub tags: Option<Tags>,
    /// A tagged process group leader whose arguments are `start ... --block ...`: the
    /// `ray start` that a launch spawned (its descendants inherit the tags, and Ray's
    /// workers lead process groups of their own, so the arguments tell them apart).
    pub is_ray_start: bool,
}

impl ProcInfo {
    /// True unless the process is a zombie (or dead).
    pub fn is_live(&self) -> bool {
        !matches!(self.state, 'Z' | 'X' | 'x')
    }

    fn is_of(&self, instance_id: &str) -> bool {
        self.is_live()
            && self
                .tags
                .as_ref()
                .is_some_and(|t| t.instance_id == instance_id)
    }
}

/// Parses `/proc/<pid>/stat`: (state, ppid, pgid, starttime).
pub(crate) fn parse_stat(text: &str) -> Option<(char, i32, i32, u64)> {
    // The command name is in parentheses and may itself contain ") ".
    let rest = text.get(text.rfind(')')? + 1..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let state = f.first()?.chars().next()?;
    let ppid = f.get(1)?.parse().ok()?;
    let pgid = f.get(2)?.parse().ok()?;
    // Field 22 of stat(5); the fields after ')' start at field 3.
    let starttime = f.get(19)?.parse().ok()?;
    Some((state, ppid, pgid, starttime))
}

/// Reads this cluster's tags from the NUL-separated bytes of `/proc/<pid>/environ`.
pub(crate) fn parse_tags(environ: &[u8], cluster: &str) -> Option<Tags> {
    let mut cluster_ok = false;
    let (mut instance_id, mut node_type, mut request_id) = (None, None, None);
    for var in environ.split(|b| *b == 0) {
        let Some(eq) = var.iter().position(|b| *b == b'=') else {
            continue;
        };
        let (key, value) = (&var[..eq], &var[eq + 1..]);
        let value = || String::from_utf8_lossy(value).into_owned();
        match key {
            k if k == ENV_CLUSTER.as_bytes() => cluster_ok = value() == cluster,
            k if k == ENV_INSTANCE_ID.as_bytes() => instance_id = Some(value()),
            k if k == ENV_NODE_TYPE.as_bytes() => node_type = Some(value()),
            k if k == ENV_REQUEST_ID.as_bytes() => request_id = Some(value()),
            _ => {}
        }
    }
    match instance_id {
        Some(instance_id) if cluster_ok && !instance_id.is_empty() => Some(Tags {
            instance_id,
            node_type: node_type.unwrap_or_default(),
            request_id: request_id.unwrap_or_default(),
        }),
        _ => None,
    }
}

/// Every process now, with this cluster's tags where the environment is readable.
///
/// `/proc` files live in kernel memory, so this does not block on disk.
pub(crate) fn scan(cluster: &str) -> io::Result<Vec<ProcInfo>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc")? {
        let Ok(entry) = entry else { continue };
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        // A process may vanish between listing and reading: skip it.
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((state, ppid, pgid, starttime)) = parse_stat(&stat) else {
            continue;
        };
        let mut info = ProcInfo {
            pid,
            ppid,
            pgid,
            state,
            starttime,
            tags: None,
            is_ray_start: false,
        };
        if info.is_live() {
            // Other users' processes (and kernel threads) are unreadable: not ours.
            if let Ok(env) = std::fs::read(entry.path().join("environ")) {
                info.tags = parse_tags(&env, cluster);
            }
            if info.tags.is_some() && pid == pgid {
                let cmdline = std::fs::read(entry.path().join("cmdline")).unwrap_or_default();
                info.is_ray_start = is_ray_start_cmdline(&cmdline);
            }
        }
        out.push(info);
    }
    out.sort_by_key(|p| p.pid);
    Ok(out)
}

/// True when NUL-separated arguments hold both `start` and `--block`.
pub(crate) fn is_ray_start_cmdline(cmdline: &[u8]) -> bool {
    let (mut start, mut block) = (false, false);
    for a in cmdline.split(|b| *b == 0) {
        start |= a == b"start";
        block |= a == b"--block";
    }
    start && block
}

/// The leader of an instance: its live `ray start` process (the oldest, should there be
/// several).
pub(crate) fn leader(snapshot: &[ProcInfo], instance_id: &str) -> Option<i32> {
    snapshot
        .iter()
        .filter(|p| p.is_of(instance_id) && p.is_ray_start && p.pid == p.pgid)
        .min_by_key(|p| (p.starttime, p.pid))
        .map(|p| p.pid)
}

/// One observed instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    /// Tags of its leader (or of its oldest process when the leader is gone).
    pub tags: Tags,
    /// Its leader, when alive.
    pub leader: Option<i32>,
}

/// Every instance of the cluster in `snapshot`, by instance id.
pub(crate) fn instances(snapshot: &[ProcInfo]) -> BTreeMap<String, Observed> {
    let mut oldest: BTreeMap<&str, &ProcInfo> = BTreeMap::new();
    for p in snapshot.iter().filter(|p| p.is_live()) {
        if let Some(t) = &p.tags {
            let e = oldest.entry(&t.instance_id).or_insert(p);
            if (p.starttime, p.pid) < (e.starttime, e.pid) {
                *e = p;
            }
        }
    }
    oldest
        .into_iter()
        .filter_map(|(id, first)| {
            let leader = leader(snapshot, id);
            let tags = leader
                .and_then(|l| snapshot.iter().find(|p| p.pid == l))
                .unwrap_or(first)
                .tags
                .clone()?;
            Some((id.to_string(), Observed { tags, leader }))
        })
        .collect()
}

/// What to signal to stop an instance.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Targets {
    /// Its leader, when alive.
    pub leader: Option<i32>,
    /// Process groups that are the instance's own (signalled as `kill(-pgid)`).
    pub groups: BTreeSet<i32>,
    /// Tagged processes in some other process group (signalled one by one).
    pub pids: BTreeSet<i32>,
}

impl Targets {
    /// True when nothing of the instance is alive.
    pub fn is_empty(&self) -> bool {
        self.groups.is_empty() && self.pids.is_empty()
    }
}

/// What is alive of `instance_id` in `snapshot`. `known_pgid` is the leader's process group
/// as seen earlier: its untagged members still count while the group exists.
///
/// A process group counts as the instance's own when its leader (pid == pgid) carries the
/// instance's tags, is a zombie, or is gone (the kernel does not reuse a pid while a group
/// of that id has members, so the group is still the one the instance made).
pub(crate) fn targets(
    snapshot: &[ProcInfo],
    instance_id: &str,
    known_pgid: Option<i32>,
) -> Targets {
    let matched: Vec<&ProcInfo> = snapshot.iter().filter(|p| p.is_of(instance_id)).collect();
    let mut candidates: BTreeSet<i32> = matched.iter().map(|p| p.pgid).collect();
    candidates.extend(known_pgid);
    let mut groups = BTreeSet::new();
    for g in candidates {
        let has_live_members = snapshot.iter().any(|p| p.pgid == g && p.is_live());
        let own = match snapshot.iter().find(|p| p.pid == g) {
            None => true,
            Some(owner) if !owner.is_live() => true,
            Some(owner) => owner.pgid == g && owner.is_of(instance_id),
        };
        if has_live_members && own {
            groups.insert(g);
        }
    }
    let pids = matched
        .iter()
        .filter(|p| !groups.contains(&p.pgid))
        .map(|p| p.pid)
        .collect();
    Targets {
        leader: leader(snapshot, instance_id),
        groups,
        pids,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_with_odd_command_names() {
        let text = "4242 (we (ird) ) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 \
                    987654 1000 100 18446744073709551615";
        assert_eq!(parse_stat(text), Some(('S', 1, 4242, 987654)));
        assert_eq!(parse_stat("12 (x) Z 1"), None);
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn tags_need_cluster_and_instance() {
        let env = b"PATH=/bin\0RAYSCALE_CLUSTER=c1\0RAY_CLOUD_INSTANCE_ID=local-r-0\0\
                    RAY_NODE_TYPE_NAME=cpu2\0RAYSCALE_LAUNCH_REQUEST_ID=r\0X=a=b\0";
        assert_eq!(
            parse_tags(env, "c1"),
            Some(Tags {
                instance_id: "local-r-0".into(),
                node_type: "cpu2".into(),
                request_id: "r".into()
            })
        );
        assert_eq!(parse_tags(env, "c2"), None);
        assert_eq!(parse_tags(b"RAYSCALE_CLUSTER=c1\0", "c1"), None);
        assert_eq!(parse_tags(b"", "c1"), None);
    }

    fn p(pid: i32, ppid: i32, pgid: i32, state: char, id: Option<&str>) -> ProcInfo {
        ProcInfo {
            pid,
            ppid,
            pgid,
            state,
            starttime: pid as u64,
            tags: id.map(|i| Tags {
                instance_id: i.into(),
                node_type: "t".into(),
                request_id: "r".into(),
            }),
            is_ray_start: false,
        }
    }

    /// A `ray start --block` leader.
    fn rs(pid: i32, ppid: i32, id: &str) -> ProcInfo {
        ProcInfo {
            is_ray_start: true,
            ..p(pid, ppid, pid, 'S', Some(id))
        }
    }

    #[test]
    fn ray_start_command_lines() {
        assert!(is_ray_start_cmdline(
            b"/venv/bin/python3\0/venv/bin/ray\0start\0--address=h:1\0--block\0"
        ));
        assert!(!is_ray_start_cmdline(b"ray::IDLE\0"));
        assert!(!is_ray_start_cmdline(b"sleep\x00300\0"));
        assert!(!is_ray_start_cmdline(b"x --block start"));
    }

    #[test]
    fn ray_worker_layout() {
        // ray start (100) -> raylet (102) -> agent (103, title rewritten: no tags),
        // worker 110 in its own group with a child 111; another instance; a stranger.
        let snap = vec![
            p(1, 0, 1, 'S', None),
            rs(100, 50, "a"),
            p(101, 100, 100, 'S', Some("a")),
            p(102, 100, 100, 'S', Some("a")),
            p(103, 102, 100, 'S', None),
            p(110, 102, 110, 'S', Some("a")),
            p(111, 110, 110, 'S', None),
            rs(200, 50, "b"),
            p(300, 1, 300, 'S', None),
        ];
        let t = targets(&snap, "a", Some(100));
        assert_eq!(t.leader, Some(100));
        assert_eq!(t.groups, BTreeSet::from([100, 110]));
        assert!(t.pids.is_empty());
        let all = instances(&snap);
        assert_eq!(all.keys().collect::<Vec<_>>(), vec!["a", "b"]);
        assert_eq!(all["a"].leader, Some(100));
    }

    #[test]
    fn leaderless_remnants_and_foreign_groups() {
        // Leader 100 is a zombie; its group still has an untagged member; a tagged process
        // joined a stranger's group 300 (signalled alone).
        let snap = vec![
            p(100, 50, 100, 'Z', None),
            p(103, 1, 100, 'S', None),
            p(300, 1, 300, 'S', None),
            p(301, 300, 300, 'S', Some("a")),
        ];
        let t = targets(&snap, "a", Some(100));
        assert_eq!(t.leader, None);
        assert_eq!(t.groups, BTreeSet::from([100]));
        assert_eq!(t.pids, BTreeSet::from([301]));
        assert_eq!(instances(&snap)["a"].leader, None);
        // Unknown group and no tags: nothing.
        assert!(targets(&snap, "zzz", None).is_empty());
        // The known group id now belongs to a stranger: not signalled.
        let reused = vec![p(100, 1, 100, 'S', None), p(104, 100, 100, 'S', None)];
        assert!(targets(&reused, "a", Some(100)).is_empty());
    }

    #[test]
    fn group_leading_descendants_are_not_the_leader() {
        let snap = vec![rs(100, 50, "a"), p(101, 100, 101, 'S', Some("a"))];
        assert_eq!(leader(&snap, "a"), Some(100));
        // Once `ray start` is gone, its reparented descendants lead nothing.
        let orphan = vec![p(101, 1, 101, 'S', Some("a"))];
        assert_eq!(leader(&orphan, "a"), None);
        let zombie = vec![ProcInfo {
            state: 'Z',
            ..rs(100, 50, "a")
        }];
        assert_eq!(leader(&zombie, "a"), None);
    }
}
