//! The IAM part of Ray's AWS bootstrap (`ray up`'s `_configure_iam_role`), run by
//! `rayscale up` before it launches the head, so that the head's `rayscale run` has the
//! EC2 permissions it launches and terminates workers with, as Ray's monitor has them on a
//! head `ray up` launched.
//!
//! When the head's type names no `IamInstanceProfile`, the head gets Ray's instance
//! profile `ray-autoscaler-v1`: found, or made; a profile without a role gets Ray's role
//! `ray-autoscaler-v1` (found, or made with EC2 as its trusted service; AWS's
//! `AmazonEC2FullAccess` and `AmazonS3FullAccess` attached when it has no policy, which
//! also mends a role an interrupted `up` made), as Ray makes them, so a
//! profile `ray up` made is used as it is and one made here serves `ray up` too. After
//! making something it waits for IAM to spread it (Ray waits 15 s; [`configure_iam_role`]
//! takes the wait). Only the head's launch takes the profile (Ray's internal `head_node`,
//! [`ClusterConfig::head_node`]), not the workers of its type. `down` leaves both, as
//! `ray down` does: other clusters use them.
//!
//! With a `provider.cloudwatch` agent config, the profile and role are Ray's
//! `ray-autoscaler-cloudwatch-v1` instead, and a role made gets Ray's extra policies for
//! the agent too (`cloudwatch::AGENT_POLICIES` and the account's
//! `CloudwatchManagedPolicies`, made when missing), as Ray's `CloudwatchHelper` resolves
//! them.

use std::time::Duration;

use aws_sdk_iam::Client;
use aws_sdk_iam::error::{ProvideErrorMetadata, SdkError};
use rayscale_core::config::ClusterConfig;
use rayscale_core::provider::ProviderErrorKind;
use serde_json::json;

use crate::AwsError;
use crate::client::sdk_error;
use crate::cloudwatch;

/// Ray's default instance profile (`DEFAULT_RAY_INSTANCE_PROFILE`).
pub const PROFILE: &str = "ray-autoscaler-v1";
/// Ray's default role (`DEFAULT_RAY_IAM_ROLE`).
pub const ROLE: &str = "ray-autoscaler-v1";
/// The managed policies Ray attaches to a role it makes.
pub const POLICIES: [&str; 2] = [
    "arn:aws:iam::aws:policy/AmazonEC2FullAccess",
    "arn:aws:iam::aws:policy/AmazonS3FullAccess",
];

/// The trust policy of a role Ray makes: EC2 instances may take it.
pub fn assume_role_policy() -> String {
    json!({
        "Statement": [{
            "Effect": "Allow",
            "Principal": {"Service": "ec2.amazonaws.com"},
            "Action": "sts:AssumeRole",
        }]
    })
    .to_string()
}

/// Whether the head needs Ray's profile: its type names none of its own.
pub fn head_needs_profile(config: &ClusterConfig) -> bool {
    let Some(head) = &config.head_node_type else {
        return false;
    };
    config
        .node_types
        .iter()
        .find(|t| &t.name == head)
        .is_some_and(|t| t.node_config.get("IamInstanceProfile").is_none())
}

/// An IAM SDK error as an [`AwsError`]: IAM's own codes of these calls first (botocore's
/// IAM model: `LimitExceeded` is a quota, `NoSuchEntity` not found), then by status as
/// for EC2 (403, IAM's `AccessDenied`: permissions).
fn iam_error<E, R>(call: &'static str, err: SdkError<E, R>) -> AwsError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
    R: std::fmt::Debug + crate::client::HttpStatus,
{
    let code = err.code().map(str::to_string);
    let mut e = sdk_error(call, err, "", None);
    if let AwsError::Call { kind, .. } = &mut e {
        match code.as_deref() {
            Some("LimitExceeded") => *kind = ProviderErrorKind::Quota,
            Some("NoSuchEntity") => *kind = ProviderErrorKind::NotFound,
            _ => {}
        }
    }
    e
}

/// The profile's ARN and whether it has a role, or `None` when IAM has no such profile.
async fn get_profile(iam: &Client, name: &str) -> Result<Option<(String, bool)>, AwsError> {
    match iam
        .get_instance_profile()
        .instance_profile_name(name)
        .send()
        .await
    {
        Ok(out) => Ok(out
            .instance_profile()
            .map(|p| (p.arn().to_string(), !p.roles().is_empty()))),
        Err(e) if e.code() == Some("NoSuchEntity") => Ok(None),
        Err(e) => Err(iam_error("GetInstanceProfile", e)),
    }
}

/// Whether IAM has role `name`.
async fn role_exists(iam: &Client, name: &str) -> Result<bool, AwsError> {
    match iam.get_role().role_name(name).send().await {
        Ok(_) => Ok(true),
        Err(e) if e.code() == Some("NoSuchEntity") => Ok(false),
        Err(e) => Err(iam_error("GetRole", e)),
    }
}

/// Attaches `policy` to `role`; a policy IAM does not show yet (one just made: IAM is
/// eventually consistent, and Ray waits for it to exist) is asked for again, for up to
/// about 10 s.
async fn attach(iam: &Client, role: &str, policy: &str) -> Result<(), AwsError> {
    let mut tries = 0;
    loop {
        match iam
            .attach_role_policy()
            .role_name(role)
            .policy_arn(policy)
            .send()
            .await
        {
            Ok(_) => return Ok(()),
            Err(e) if e.code() == Some("NoSuchEntity") && tries < 10 => {
                tries += 1;
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(e) => return Err(iam_error("AttachRolePolicy", e)),
        }
    }
}

/// The ARN of the account's [`cloudwatch::MANAGED_POLICY`], made with Ray's document when
/// missing; `profile_arn` gives its partition and account.
async fn managed_policy(iam: &Client, profile_arn: &str) -> Result<String, AwsError> {
    match iam
        .create_policy()
        .policy_name(cloudwatch::MANAGED_POLICY)
        .policy_document(cloudwatch::managed_policy_document())
        .send()
        .await
    {
        Ok(out) => {
            if let Some(arn) = out.policy().and_then(|p| p.arn()) {
                tracing::info!("policy {}: made in IAM", cloudwatch::MANAGED_POLICY);
                return Ok(arn.to_string());
            }
        }
        Err(e) if e.code() == Some("EntityAlreadyExists") => {}
        Err(e) => return Err(iam_error("CreatePolicy", e)),
    }
    // arn:<partition>:iam::<account>:instance-profile/<name>
    let parts: Vec<&str> = profile_arn.split(':').collect();
    match (parts.get(1), parts.get(4)) {
        (Some(partition), Some(account)) if !account.is_empty() => Ok(format!(
            "arn:{partition}:iam::{account}:policy/{}",
            cloudwatch::MANAGED_POLICY
        )),
        _ => Err(AwsError::config(
            "head_node.IamInstanceProfile",
            format!("IAM answered instance profile ARN {profile_arn:?} without an account"),
        )),
    }
}

/// `config` with the head's instance profile set (see the module's docs), found or made
/// in IAM; `wait` is how long IAM is given to spread what was made. Returns the config
/// and, when the head got Ray's profile, its ARN.
pub async fn configure_iam_role(
    iam: &Client,
    config: &ClusterConfig,
    wait: Duration,
) -> Result<(ClusterConfig, Option<String>), AwsError> {
    if !head_needs_profile(config) {
        return Ok((config.clone(), None));
    }
    let agent = match config
        .raw
        .get("provider")
        .and_then(serde_json::Value::as_object)
    {
        Some(p) => cloudwatch::agent_of(p)?.is_some(),
        None => false,
    };
    let (profile, role) = if agent {
        (cloudwatch::PROFILE, cloudwatch::ROLE)
    } else {
        (PROFILE, ROLE)
    };
    let mut made = false;
    let (arn, has_role) = match get_profile(iam, profile).await? {
        Some(p) => p,
        None => {
            match iam
                .create_instance_profile()
                .instance_profile_name(profile)
                .send()
                .await
            {
                Ok(_) => tracing::info!("instance profile {profile}: made in IAM"),
                // Made meanwhile (another `up`): use it.
                Err(e) if e.code() == Some("EntityAlreadyExists") => {}
                Err(e) => return Err(iam_error("CreateInstanceProfile", e)),
            }
            made = true;
            get_profile(iam, profile).await?.ok_or_else(|| {
                AwsError::config(
                    "head_node.IamInstanceProfile",
                    format!("IAM made instance profile {profile} but does not find it"),
                )
            })?
        }
    };
    if !has_role {
        if !role_exists(iam, role).await? {
            match iam
                .create_role()
                .role_name(role)
                .assume_role_policy_document(assume_role_policy())
                .send()
                .await
            {
                Ok(_) => tracing::info!("role {role}: made in IAM"),
                Err(e) if e.code() == Some("EntityAlreadyExists") => {}
                Err(e) => return Err(iam_error("CreateRole", e)),
            }
        }
        // A role without any policy (made, or half made by an `up` that failed after
        // CreateRole) gets Ray's, and so does one with only some of Ray's (an `up` that
        // failed between attaching them); one with a policy of its own keeps what it has,
        // as Ray's does.
        let attached = iam
            .list_attached_role_policies()
            .role_name(role)
            .send()
            .await
            .map_err(|e| iam_error("ListAttachedRolePolicies", e))?;
        let attached: Vec<String> = attached
            .attached_policies()
            .iter()
            .filter_map(|p| p.policy_arn().map(str::to_string))
            .collect();
        let mut policies: Vec<String> = POLICIES.iter().map(|p| p.to_string()).collect();
        if agent {
            policies.extend(cloudwatch::AGENT_POLICIES.iter().map(|p| p.to_string()));
        }
        let rays_only = attached.iter().all(|a| {
            policies.contains(a) || a.ends_with(&format!(":policy/{}", cloudwatch::MANAGED_POLICY))
        });
        if rays_only {
            if agent {
                policies.push(managed_policy(iam, &arn).await?);
            }
            for policy in policies.iter().filter(|p| !attached.contains(p)) {
                attach(iam, role, policy).await?;
            }
        }
        match iam
            .add_role_to_instance_profile()
            .instance_profile_name(profile)
            .role_name(role)
            .send()
            .await
        {
            Ok(_) => {}
            // A profile holds one role: another `up` added it meanwhile.
            Err(e) if e.code() == Some("LimitExceeded") => {}
            Err(e) => return Err(iam_error("AddRoleToInstanceProfile", e)),
        }
        made = true;
    }
    if made && !wait.is_zero() {
        tracing::info!("waiting {wait:?} for IAM to spread {profile}");
        tokio::time::sleep(wait).await;
    }
    let mut config = config.clone();
    config
        .head_node
        .insert("IamInstanceProfile".into(), json!({ "Arn": arn }));
    Ok((config, Some(arn)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(head_nc: &str) -> ClusterConfig {
        ClusterConfig::from_yaml_str(
            &format!(
                "cluster_name: c\nprovider: {{type: aws, region: us-west-2}}\nhead_node_type: h\n\
                 available_node_types:\n  h: {{resources: {{}}, node_config: {head_nc}}}\n  \
                 w: {{resources: {{}}, node_config: {{InstanceType: m5.large}}}}\n"
            ),
            "t",
        )
        .expect("a valid config")
    }

    #[test]
    fn only_a_head_without_a_profile_of_its_own_needs_rays() {
        assert!(head_needs_profile(&config("{InstanceType: m5.large}")));
        assert!(!head_needs_profile(&config(
            "{InstanceType: m5.large, IamInstanceProfile: {Name: mine}}"
        )));
    }

    #[test]
    fn the_trust_policy_is_rays() {
        let v: serde_json::Value = serde_json::from_str(&assume_role_policy()).expect("JSON");
        assert_eq!(
            v["Statement"][0]["Principal"]["Service"],
            "ec2.amazonaws.com"
        );
        assert_eq!(v["Statement"][0]["Action"], "sts:AssumeRole");
    }
}
