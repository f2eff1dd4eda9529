//! The pure part of the bootstrap: the names, address range and role-assignment id Ray's
//! `bootstrap_azure` derives (so that `ray up` and `rayscale up` find each other's
//! resources), the bodies sent, and the node configs with the cluster's key.

use md5::Digest as _;
use serde_json::{Map, Value, json};

use crate::AzureError;

/// Azure's built-in `Contributor` role, the one Ray's template grants the cluster's
/// identity on the resource group.
pub const CONTRIBUTOR_ROLE: &str = "b24988ac-6180-42a0-ab88-20f7382dd24c";

/// How many hex digits of the resource group's SHA-256 make Ray's `unique_id`.
const UNIQUE_ID_LEN: usize = 4;

/// What the bootstrap names, from the `provider:` block and `cluster_name`, as Ray's
/// `_configure_resource_group` names them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Names {
    /// `provider.unique_id`, else the first four hex digits of the SHA-256 of the
    /// resource group's name.
    pub unique_id: String,
    /// `<cluster_name>-<unique_id>`: in every name below.
    pub cluster_id: String,
    /// `provider.subnet_mask`, else Ray's `10.<n>.0.0/16` (`n` from Python's
    /// `random.seed(unique_id)`, then `randint(1, 254)`).
    pub subnet_mask: String,
    /// `ray-<cluster_id>-nsg`.
    pub nsg: String,
    /// `ray-<cluster_id>-vnet`.
    pub vnet: String,
    /// `ray-<cluster_id>-subnet`.
    pub subnet: String,
    /// `provider.msi_name`, else `ray-<cluster_id>-msi`.
    pub msi_name: String,
    /// `provider.msi_resource_group`, else the cluster's resource group.
    pub msi_group: String,
    /// Both `msi_name` and `msi_resource_group` given: an identity someone else made,
    /// used as it is (Ray's `_is_shared_msi`).
    pub shared_msi: bool,
    /// The role assignment's name: Ray's md5-based stand-in for ARM's `guid()` of
    /// `ray-<cluster_id>-ra`.
    pub role_assignment: String,
}

/// A name that may go into a resource id and URL path: letters, digits, `-`, `_`, `.`,
/// `(` and `)` (Azure's resource-group alphabet), at most 90 long, not ending in `.`.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 90
        && !s.ends_with('.')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '(' | ')'))
}

/// The text of `provider.<key>` (a string, or an integer written as Python's `str`
/// would), `None` when absent.
fn text(provider: &Map<String, Value>, key: &str) -> Result<Option<String>, AzureError> {
    match provider.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(Some(s.trim().to_string())),
        Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(Some(n.to_string())),
        Some(v) => Err(AzureError::config(
            format!("provider.{key}"),
            format!("must be a non-empty string, got {v}"),
        )),
    }
}

/// The names of the cluster `cluster_name` in `resource_group` (see [`Names`]).
pub fn names(
    provider: &Map<String, Value>,
    cluster_name: &str,
    resource_group: &str,
) -> Result<Names, AzureError> {
    let unique_id = match text(provider, "unique_id")? {
        Some(u) => u,
        None => {
            let digest = sha2::Sha256::digest(resource_group.as_bytes());
            hex(&digest)[..UNIQUE_ID_LEN].to_string()
        }
    };
    let cluster_id = format!("{cluster_name}-{unique_id}");
    // The network's names as Azure takes them: a virtual network's at most 64
    // characters, a security group's and a subnet's 80; letters, digits, '-', '_', '.'.
    let network_ok = |name: &str, max: usize| {
        name.len() <= max
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && name.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
    };
    if !(network_ok(&format!("ray-{cluster_id}-vnet"), 64)
        && network_ok(&format!("ray-{cluster_id}-subnet"), 80))
    {
        return Err(AzureError::config(
            "cluster_name",
            format!(
                "{cluster_id:?} (cluster_name-unique_id) goes into the names of the cluster's \
                 network and identity: use letters, digits, '-', '_' and '.' only, at most \
                 55 in all (a virtual network's name is at most 64)"
            ),
        ));
    }
    let subnet_mask = match text(provider, "subnet_mask")? {
        Some(m) => {
            if !valid_cidr(&m) {
                return Err(AzureError::config(
                    "provider.subnet_mask",
                    format!("{m:?} is not an IPv4 range (a.b.c.d/n)"),
                ));
            }
            m
        }
        None => format!("10.{}.0.0/16", python_randint_1_254(&unique_id)),
    };
    let msi_name_given = text(provider, "msi_name")?;
    let msi_group_given = text(provider, "msi_resource_group")?;
    let shared_msi = msi_name_given.is_some() && msi_group_given.is_some();
    let msi_name = msi_name_given.unwrap_or_else(|| format!("ray-{cluster_id}-msi"));
    let msi_group = msi_group_given.unwrap_or_else(|| resource_group.to_string());
    // An identity's name: 3 to 128, from a letter or digit, of letters, digits, '-', '_'.
    let identity_ok = msi_name.len() >= 3
        && msi_name.len() <= 128
        && msi_name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && msi_name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_'));
    if !identity_ok {
        return Err(AzureError::config(
            "provider.msi_name",
            format!(
                "{msi_name:?} is not an identity name (3 to 128 letters, digits, '-', '_'; \
                 from a letter or digit)"
            ),
        ));
    }
    for (key, v) in [("msi_name", &msi_name), ("msi_resource_group", &msi_group)] {
        if !valid_name(v) {
            return Err(AzureError::config(
                format!("provider.{key}"),
                format!("{v:?} is not an Azure resource name"),
            ));
        }
    }
    Ok(Names {
        role_assignment: arm_guid(&format!("ray-{cluster_id}-ra")),
        nsg: format!("ray-{cluster_id}-nsg"),
        vnet: format!("ray-{cluster_id}-vnet"),
        subnet: format!("ray-{cluster_id}-subnet"),
        unique_id,
        cluster_id,
        subnet_mask,
        msi_name,
        msi_group,
        shared_msi,
    })
}

fn valid_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    ip.parse::<std::net::Ipv4Addr>().is_ok() && bits.parse::<u8>().is_ok_and(|b| b <= 32)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Ray's role-assignment name: the md5 of `s` written as a UUID (Ray's
/// `_generate_arm_guid`; ARM's own `guid()` hashes differently, and Ray passes this one to
/// its template as a parameter, so this is the name `ray up` gives).
pub fn arm_guid(s: &str) -> String {
    let h = hex(&md5::Md5::digest(s.as_bytes()));
    format!(
        "{}-{}-{}-{}-{}",
        &h[0..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..32]
    )
}

/// The name of Ray's SSH key for Azure: `ray-autoscaler_azure_<location>_<rg>_<user>`
/// (its private half in `~/.ssh/<name>`, its public half beside it in `<name>.pub`).
pub fn key_name(location: &str, resource_group: &str, user: &str) -> String {
    format!("ray-autoscaler_azure_{location}_{resource_group}_{user}")
}

/// Python's `random.seed(seed)` then `random.randint(1, 254)` (CPython 3: a `str` seed
/// is its UTF-8 bytes followed by their SHA-512, read as one big-endian integer, fed to
/// MT19937's `init_by_array` as little-endian 32-bit words; `randint` draws 8-bit values
/// until one is below 254). Ray draws the second octet of a cluster's address range so.
pub fn python_randint_1_254(seed: &str) -> u32 {
    let mut bytes = seed.as_bytes().to_vec();
    bytes.extend_from_slice(&sha2::Sha512::digest(seed.as_bytes()));
    // The integer's 32-bit words, least significant first (leading zero bytes dropped,
    // as the integer has none).
    let first = bytes.iter().position(|b| *b != 0).unwrap_or(bytes.len());
    let digits = &bytes[first..];
    let mut key: Vec<u32> = digits
        .rchunks(4)
        .map(|c| c.iter().fold(0u32, |w, b| (w << 8) | u32::from(*b)))
        .collect();
    if key.is_empty() {
        key.push(0);
    }
    let mut mt = Mt::by_array(&key);
    loop {
        let r = mt.next() >> 24;
        if r < 254 {
            return 1 + r;
        }
    }
}

/// MT19937, as CPython's `_random` seeds and draws it.
struct Mt {
    state: [u32; 624],
    index: usize,
}

impl Mt {
    fn by_array(key: &[u32]) -> Self {
        const N: usize = 624;
        let mut s = [0u32; N];
        s[0] = 19_650_218;
        for i in 1..N {
            s[i] = 1_812_433_253u32
                .wrapping_mul(s[i - 1] ^ (s[i - 1] >> 30))
                .wrapping_add(i as u32);
        }
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..N.max(key.len()) {
            s[i] = (s[i] ^ (s[i - 1] ^ (s[i - 1] >> 30)).wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                s[0] = s[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            s[i] = (s[i] ^ (s[i - 1] ^ (s[i - 1] >> 30)).wrapping_mul(1_566_083_941))
                .wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                s[0] = s[N - 1];
                i = 1;
            }
        }
        s[0] = 0x8000_0000;
        Mt { state: s, index: N }
    }

    fn next(&mut self) -> u32 {
        const N: usize = 624;
        const M: usize = 397;
        if self.index >= N {
            let s = &mut self.state;
            for k in 0..N {
                let y = (s[k] & 0x8000_0000) | (s[(k + 1) % N] & 0x7fff_ffff);
                let mag = if y & 1 == 1 { 0x9908_b0df } else { 0 };
                s[k] = s[(k + M) % N] ^ (y >> 1) ^ mag;
            }
            self.index = 0;
        }
        let mut y = self.state[self.index];
        self.index += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }
}

/// The body of the cluster's network security group: Ray's template's one rule, SSH in
/// from anywhere.
pub fn nsg_body(location: &str, tags: &Value) -> Value {
    json!({
        "location": location,
        "tags": tags,
        "properties": {"securityRules": [{
            "name": "SSH",
            "properties": {
                "priority": 1000,
                "protocol": "Tcp",
                "access": "Allow",
                "direction": "Inbound",
                "sourceAddressPrefix": "*",
                "sourcePortRange": "*",
                "destinationAddressPrefix": "*",
                "destinationPortRange": "22"
            }
        }]}
    })
}

/// The body of the cluster's virtual network: the range, and one subnet over all of it
/// behind the security group `nsg_id`.
pub fn vnet_body(location: &str, tags: &Value, names: &Names, nsg_id: &str) -> Value {
    json!({
        "location": location,
        "tags": tags,
        "properties": {
            "addressSpace": {"addressPrefixes": [names.subnet_mask]},
            "subnets": [{
                "name": names.subnet,
                "properties": {
                    "addressPrefix": names.subnet_mask,
                    "networkSecurityGroup": {"id": nsg_id}
                }
            }]
        }
    })
}

/// The body of the role assignment: `Contributor` on the resource group for the
/// identity's service principal (`principalType` given, so that a principal just made
/// is not looked up in Entra ID first, as Microsoft advises).
pub fn role_assignment_body(subscription: &str, principal_id: &str, cluster_id: &str) -> Value {
    json!({"properties": {
        "roleDefinitionId": format!(
            "/subscriptions/{subscription}/providers/Microsoft.Authorization/roleDefinitions/{CONTRIBUTOR_ROLE}"
        ),
        "principalId": principal_id,
        "principalType": "ServicePrincipal",
        "description": format!("Ray autoscaler cluster {cluster_id}")
    }})
}

/// `raw` with `adminUsername` and `publicKey` set in each node type's
/// `azure_arm_parameters` that has no `publicKey` (Ray sets both on every type; a type's
/// own key, and its user, are kept). The names of the types changed.
pub fn with_key(raw: &mut Value, user: &str, public_key: &str) -> Vec<String> {
    let mut changed = Vec::new();
    let Some(types) = raw
        .get_mut("available_node_types")
        .and_then(Value::as_object_mut)
    else {
        return changed;
    };
    for (name, t) in types.iter_mut() {
        let Some(nc) = t.get_mut("node_config").and_then(Value::as_object_mut) else {
            continue;
        };
        let params = nc
            .entry("azure_arm_parameters")
            .or_insert_with(|| json!({}));
        let Some(params) = params.as_object_mut() else {
            continue;
        };
        if params.get("publicKey").is_some_and(|k| !k.is_null()) {
            continue;
        }
        // The key file's text as it is, trailing newline too, as Ray sets it (Ray
        // hashes the node_config into the `ray-launch-config` tag).
        params.insert("publicKey".into(), json!(public_key));
        // As Ray: the key is for `auth.ssh_user` (a type's own user would not get it).
        params.insert("adminUsername".into(), json!(user));
        changed.push(name.clone());
    }
    changed
}

/// Whether every node type's `azure_arm_parameters` names its own `publicKey`.
pub fn every_type_has_key(raw: &Value) -> bool {
    raw.get("available_node_types")
        .and_then(Value::as_object)
        .is_some_and(|types| {
            types.values().all(|t| {
                t.get("node_config")
                    .and_then(|n| n.get("azure_arm_parameters"))
                    .and_then(|p| p.get("publicKey"))
                    .is_some_and(|k| !k.is_null())
            })
        })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Python 3.11's own answers (`random.seed(s); random.randint(1, 254)`).
    #[test]
    fn the_address_range_is_pythons_draw() {
        for (seed, n) in [
            ("723d", 156),
            ("5a50", 72),
            ("7c7a", 14),
            ("4e13", 157),
            ("RAY1", 69),
            ("0000", 7),
            ("x", 162),
            ("ffff", 237),
            ("é", 249),
        ] {
            assert_eq!(python_randint_1_254(seed), n, "{seed}");
        }
    }

    #[test]
    fn names_are_rays() {
        let p = json!({"type": "azure"});
        let n = names(p.as_object().unwrap(), "default", "ray-cluster").unwrap();
        assert_eq!(n.unique_id, "723d");
        assert_eq!(n.cluster_id, "default-723d");
        assert_eq!(n.subnet_mask, "10.156.0.0/16");
        assert_eq!(
            (n.nsg.as_str(), n.vnet.as_str(), n.subnet.as_str()),
            (
                "ray-default-723d-nsg",
                "ray-default-723d-vnet",
                "ray-default-723d-subnet"
            )
        );
        assert_eq!(
            (n.msi_name.as_str(), n.msi_group.as_str()),
            ("ray-default-723d-msi", "ray-cluster")
        );
        assert!(!n.shared_msi);
        // Python: str(uuid.UUID(hashlib.md5(b"ray-c-1234-ra").hexdigest())).
        assert_eq!(
            arm_guid("ray-c-1234-ra"),
            "0ebf38c5-6dbb-32e0-af0a-92bac71ff16e"
        );
        let p = json!({"unique_id": 1234, "subnet_mask": "10.9.0.0/16", "msi_name": "team-id", "msi_resource_group": "g"});
        let n = names(p.as_object().unwrap(), "c", "rg").unwrap();
        assert_eq!(
            (n.cluster_id.as_str(), n.subnet_mask.as_str()),
            ("c-1234", "10.9.0.0/16")
        );
        assert!(n.shared_msi);
        assert_eq!(n.role_assignment, "0ebf38c5-6dbb-32e0-af0a-92bac71ff16e");
        let bad = json!({"subnet_mask": "10.9.0.0"});
        let e = names(bad.as_object().unwrap(), "c", "rg")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("provider.subnet_mask: "), "{e}");
        // Azure's identity names: 3 to 128, from a letter or digit.
        let short = json!({"msi_name": "m"});
        let e = names(short.as_object().unwrap(), "c", "rg")
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("provider.msi_name: \"m\" is not an identity name"),
            "{e}"
        );
        // A virtual network's name is at most 64 long.
        let e = names(&Map::new(), &"c".repeat(60), "rg")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("cluster_name: "), "{e}");
        let e = names(p.as_object().unwrap(), "my cluster", "rg")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("cluster_name: "), "{e}");
    }

    #[test]
    fn the_key_goes_where_a_type_has_none() {
        let mut raw = json!({"available_node_types": {
            "h": {"node_config": {"azure_arm_parameters": {"vmSize": "x", "adminUsername": "me"}}},
            "w": {"node_config": {"azure_arm_parameters": {"publicKey": "own", "adminUsername": "me"}}},
            "v": {"node_config": {}}
        }});
        assert!(!every_type_has_key(&raw));
        assert_eq!(with_key(&mut raw, "ubuntu", "ssh-rsa AAA\n"), ["h", "v"]);
        let p =
            |t: &str| raw["available_node_types"][t]["node_config"]["azure_arm_parameters"].clone();
        assert_eq!(
            p("h"),
            json!({"vmSize": "x", "publicKey": "ssh-rsa AAA\n", "adminUsername": "ubuntu"}),
            "the key's text as it is, as Ray sets it"
        );
        assert_eq!(p("w"), json!({"publicKey": "own", "adminUsername": "me"}));
        assert!(every_type_has_key(&raw));
        assert_eq!(
            key_name("westus2", "ray-cluster", "ubuntu"),
            "ray-autoscaler_azure_westus2_ray-cluster_ubuntu"
        );
    }
}
