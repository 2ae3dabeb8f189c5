//! The running local stack, found through the env file that `infra/local/up` writes.
//!
//! `up` writes `$CARPOOL_STATE/env` (default `/tmp/carpool-stack/env`): `export NAME=value`
//! lines with the kubeconfig path, moto's endpoint, the fake credentials, the region and
//! what `infra/local/seed` created. [`Stack::load`] reads that file, so a test finds the
//! stack whether or not its shell sourced it. The values are kept in a map and the clients
//! are configured from it explicitly: setting the process environment is `unsafe` in Rust
//! 2024, which this workspace forbids.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use aws_config::{BehaviorVersion, Region, SdkConfig};
use aws_sdk_ec2::config::Credentials;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// The default state directory of `infra/local/up`.
pub const DEFAULT_STATE_DIR: &str = "/tmp/carpool-stack";

/// The values of the stack's env file.
#[derive(Clone, Debug)]
pub struct Stack {
    path: PathBuf,
    vars: BTreeMap<String, String>,
}

impl Stack {
    /// The env file: `$CARPOOL_STATE/env`, else `/tmp/carpool-stack/env`.
    pub fn env_file() -> PathBuf {
        let dir = std::env::var_os("CARPOOL_STATE").map_or_else(|| PathBuf::from(DEFAULT_STATE_DIR), PathBuf::from);
        dir.join("env")
    }

    /// Reads the env file of the running stack.
    pub fn load() -> Result<Self> {
        Self::load_from(&Self::env_file())
    }

    /// Reads an env file.
    pub fn load_from(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("no stack env file {} (start the stack: infra/local/up)", path.display()))?;
        Ok(Stack {
            path: path.to_path_buf(),
            vars: parse_env(&text),
        })
    }

    /// Where the values were read from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A value of the env file; an error names the file when it is missing.
    pub fn get(&self, name: &str) -> Result<&str> {
        match self.vars.get(name) {
            Some(v) => Ok(v),
            None => bail!("{} has no {name}", self.path.display()),
        }
    }

    /// The cluster name (`CARPOOL_CLUSTER`), used in the `carpool.sh/cluster` tag.
    pub fn cluster(&self) -> Result<&str> {
        self.get("CARPOOL_CLUSTER")
    }

    /// The AWS region (`AWS_REGION`).
    pub fn region(&self) -> Result<&str> {
        self.get("AWS_REGION")
    }

    /// moto's endpoint (`AWS_ENDPOINT_URL`), e.g. `http://127.0.0.1:25000`.
    pub fn aws_endpoint(&self) -> Result<&str> {
        self.get("AWS_ENDPOINT_URL")
    }

    /// The seeded subnets, sorted by zone (a, b, c).
    pub fn subnet_ids(&self) -> Result<Vec<String>> {
        Ok(self.get("CARPOOL_SUBNET_IDS")?.split(',').map(str::to_string).collect())
    }

    /// The AMI the seed's SSM parameter points at.
    pub fn ami_id(&self) -> Result<&str> {
        self.get("CARPOOL_AMI_ID")
    }

    /// A client for the apiserver, as the admin of the kubeconfig (`KUBECONFIG`).
    ///
    /// kube 5 retries 429, 503 and 504 answers by default (up to 15 times, backing off
    /// towards 1000 s). An eviction that a PDB blocks answers 429, which a caller must
    /// see at once, so this client does not retry.
    pub async fn kube_client(&self) -> Result<kube::Client> {
        let path = self.get("KUBECONFIG")?;
        let kubeconfig = Kubeconfig::read_from(path).with_context(|| format!("reading kubeconfig {path}"))?;
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .with_context(|| format!("loading kubeconfig {path}"))?;
        config.default_retry = false;
        kube::Client::try_from(config).context("building the kube client")
    }

    /// The AWS SDK configuration for moto: its endpoint, region and fake credentials.
    pub async fn aws_config(&self) -> Result<SdkConfig> {
        let credentials = Credentials::new(
            self.get("AWS_ACCESS_KEY_ID")?,
            self.get("AWS_SECRET_ACCESS_KEY")?,
            None,
            None,
            "carpool-local-stack",
        );
        Ok(aws_config::defaults(BehaviorVersion::latest())
            .endpoint_url(self.aws_endpoint()?)
            .region(Region::new(self.region()?.to_string()))
            .credentials_provider(credentials)
            .load()
            .await)
    }

    /// An EC2 client for moto.
    pub async fn ec2(&self) -> Result<aws_sdk_ec2::Client> {
        Ok(aws_sdk_ec2::Client::new(&self.aws_config().await?))
    }

    /// A DynamoDB client for moto.
    pub async fn dynamodb(&self) -> Result<aws_sdk_dynamodb::Client> {
        Ok(aws_sdk_dynamodb::Client::new(&self.aws_config().await?))
    }
}

/// Reads `export NAME=value` (or `NAME=value`) lines; several assignments may share a
/// line. Comments, blank lines and values that refer to other variables (`$PATH`) are
/// skipped. Values are not quoted in the files `up` and `seed` write.
fn parse_env(text: &str) -> BTreeMap<String, String> {
    let mut vars = BTreeMap::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").unwrap_or(line);
        for assignment in line.split_whitespace() {
            if let Some((name, value)) = assignment.split_once('=')
                && !name.is_empty()
                && !value.contains('$')
            {
                vars.insert(name.to_string(), value.trim_matches('"').to_string());
            }
        }
    }
    vars
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_exports_and_skips_comments_and_references() {
        let vars = parse_env(
            "# Written by infra/local/up\n\
             export KUBECONFIG=/tmp/carpool-stack/kubeconfig\n\
             export PATH=/cache/bin:$PATH\n\
             export AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test\n\
             # seed: what infra/local/seed created in moto\n\
             export CARPOOL_SUBNET_IDS=subnet-a,subnet-b,subnet-c\n",
        );
        assert_eq!(vars["KUBECONFIG"], "/tmp/carpool-stack/kubeconfig");
        assert_eq!(vars["AWS_SECRET_ACCESS_KEY"], "test");
        assert_eq!(vars["CARPOOL_SUBNET_IDS"], "subnet-a,subnet-b,subnet-c");
        assert!(!vars.contains_key("PATH"));
        assert_eq!(vars.len(), 4);
    }
}
